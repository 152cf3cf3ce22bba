-- The ffi.cdef the Lua package uses must agree with core/glm53.h: same text (signatures), the same struct
-- sizes, field offsets and enum values as a C compiler sees them, and the same ABI version as the loaded
-- library (checked at load by glm53.ffi.core). Also scripts/gen_cdef.lua's command line.
local ffi = require("ffi")
local file = require("glm53.util.file")
local h = require("spec_helpers")
local gen = dofile("scripts/gen_cdef.lua")

local function read_file(path) return (assert(file.read_file(path))) end

local header = read_file("core/glm53.h")
local cdef = gen.cdef_from_header(header)
local abi_version = gen.abi_version_from_header(header)
local CDEF_PATH = "lua/glm53/ffi/cdef.lua"
local run = h.run

-- {struct name -> {field names}} and {enum constant names} parsed from the cdef text.
local function parse_cdef(text)
    local structs, enums = {}, {}
    for name, body in text:gmatch("typedef struct ([%w_]+) {(.-)} [%w_]+;") do
        local fields = {}
        for decl in body:gmatch("([^;]+);") do
            decl = decl:gsub("%b[]", "")                       -- array dims
            local names = decl:gsub("^%s*const%s+", ""):gsub("^%s*struct%s+", "")
            names = names:gsub("^%s*[%w_]+", "", 1)               -- the type name
            for declarator in names:gmatch("[^,]+") do
                local field = declarator:match("([%w_]+)%s*$")
                if field then fields[#fields + 1] = field end
            end
        end
        structs[#structs + 1] = { name = name, fields = fields }
    end
    for body in text:gmatch("enum[%s%w_]*{(.-)}") do
        for constant in body:gmatch("([%u][%w_]+)%s*=") do enums[#enums + 1] = constant end
    end
    return structs, enums
end

describe("ffi.cdef vs core/glm53.h", function()
    it("the committed lua/glm53/ffi/cdef.lua is what gen_cdef.lua derives from the header", function()
        assert.are.equal(gen.render_module(cdef, abi_version), read_file("lua/glm53/ffi/cdef.lua"))
    end)

    it("struct sizes, field offsets and enum values match the C compiler's", function()
        require("glm53.ffi.core")   -- loads the cdef
        local structs, enums = parse_cdef(cdef)
        assert.is_true(#structs >= 5 and #enums >= 20)
        local lines = { "#include <stdio.h>", "#include <stddef.h>", "#include \"glm53.h\"", "int main(void) {" }
        for _, s in ipairs(structs) do
            lines[#lines + 1] = string.format('printf("size %s %%zu\\n", sizeof(%s));', s.name, s.name)
            for _, f in ipairs(s.fields) do
                lines[#lines + 1] = string.format('printf("offset %s.%s %%zu\\n", offsetof(%s, %s));',
                                                  s.name, f, s.name, f)
            end
        end
        for _, e in ipairs(enums) do
            lines[#lines + 1] = string.format('printf("enum %s %%lld\\n", (long long)%s);', e, e)
        end
        lines[#lines + 1] = "return 0; }"
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir) == 0)
        assert(file.write_file(dir .. "/abi.c", table.concat(lines, "\n")))
        assert.are.equal(0, os.execute(string.format("cc -std=c11 -Icore -o %s/abi %s/abi.c", dir, dir)))
        local p = assert(io.popen(dir .. "/abi"))
        local checked = 0
        for line in p:lines() do
            local kind, what, value = line:match("^(%a+) (%S+) (%-?%d+)$")
            value = tonumber(value)
            if kind == "size" then
                assert.are.equal(value, ffi.sizeof(what), "sizeof " .. what)
            elseif kind == "offset" then
                local s, field = what:match("^(.-)%.(.*)$")
                assert.are.equal(value, ffi.offsetof(s, field), "offsetof " .. what)
            else
                assert.are.equal(value, tonumber(ffi.C[what]), "enum " .. what)
            end
            checked = checked + 1
        end
        p:close()
        os.execute("rm -rf " .. dir)
        assert.is_true(checked > 50)
    end)
end)

describe("ABI version check at load", function()
    it("the cdef carries the header's GLM53_ABI_VERSION, and the loaded library reports the same", function()
        local define = assert(header:match("\n#define GLM53_ABI_VERSION (%d+)\n"))
        assert.are.equal(tonumber(define), require("glm53.ffi.cdef").abi_version)
        local core = require("glm53.ffi.core")
        assert.are.equal(tonumber(define), core.C.glm53_abi_version())
    end)

    it("check_abi accepts the expected version and refuses any other in one line naming both", function()
        local core = require("glm53.ffi.core")
        assert.is_true(core.check_abi(7, 7, "/opt/x/libglm53.so"))
        local ok, err = core.check_abi(8, 7, "/opt/x/libglm53.so")
        assert.is_nil(ok)
        assert.is_nil(err:find("\n"))
        for _, part in ipairs({ "/opt/x/libglm53.so", "ABI version 8", "ABI version 7",
                                "rebuild with make, or point GLM53_LIB at a matching build" }) do
            assert.is_truthy(err:find(part, 1, true), part)
        end
        ok, err = core.check_abi(nil, 7, "/opt/x/libglm53.so")     -- a library without glm53_abi_version()
        assert.is_nil(ok)
        assert.is_truthy(err:find("no glm53_abi_version()", 1, true))
        assert.has_error(function() core.check_abi("7", 7, "/opt/x/libglm53.so") end)
        assert.has_error(function() core.check_abi(7, nil, "/opt/x/libglm53.so") end)
        assert.has_error(function() core.check_abi(7, 7) end)
    end)

    it("loading the package against a library of another ABI version raises that message", function()
        -- A fresh LuaJIT whose glm53.ffi.cdef claims the next version: glm53.ffi.core must refuse the library.
        local script = h.tmpdir() .. "/load.lua"
        assert(file.write_file(script, [[
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local real = dofile("lua/glm53/ffi/cdef.lua")
package.preload["glm53.ffi.cdef"] = function() return { abi_version = real.abi_version + 1, cdef = real.cdef } end
local ok, err = pcall(require, "glm53.ffi.core")
io.write(tostring(ok), "|", tostring(err), "|")
]]))
        local out, rc = run("luajit " .. script)
        os.execute("rm -rf '" .. script:match("^(.*)/") .. "'")
        assert.are.equal(0, rc, out)
        local ok, err = out:match("^(%a+)|(.-)|")
        assert.are.equal("false", ok, out)
        assert.is_nil(err:find("\n"))
        local lib_path = require("glm53.ffi.core").path     -- the same search, in the same environment
        assert.is_truthy(err:find(lib_path .. " has ABI version " .. abi_version, 1, true), err)
        assert.is_truthy(err:find("expects ABI version " .. (abi_version + 1), 1, true), err)
    end)
end)

describe("scripts/gen_cdef.lua", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it("prints usage for --help and an unknown option, leaving the output file untouched", function()
        local before = read_file(CDEF_PATH)
        local out, rc = run("luajit scripts/gen_cdef.lua --help")
        assert.are.equal(0, rc)
        assert.matches("^usage: luajit scripts/gen_cdef.lua", out)
        assert.are.equal(before, read_file(CDEF_PATH))
        out, rc = run("luajit scripts/gen_cdef.lua --bogus")
        assert.are.equal(2, rc)
        assert.matches("unknown option %-%-bogus", out)
        assert.matches("usage: ", out)
        assert.are.equal(before, read_file(CDEF_PATH))
    end)

    it("writes the committed module to a given path, and leaves it in place when the header cannot be read", function()
        local out_path = dir .. "/cdef.lua"
        local out, rc = run("luajit scripts/gen_cdef.lua core/glm53.h " .. out_path)
        assert.are.equal(0, rc, out)
        assert.are.equal(read_file(CDEF_PATH), read_file(out_path))
        assert(file.write_file(out_path, "previous"))
        out, rc = run("luajit scripts/gen_cdef.lua " .. dir .. "/missing.h " .. out_path)
        assert.are.equal(1, rc)
        assert.matches("missing.h", out)
        assert.are.equal("previous", read_file(out_path))
        assert(file.write_file(dir .. "/bad.h", "no markers here\n"))
        out, rc = run("luajit scripts/gen_cdef.lua " .. dir .. "/bad.h " .. out_path)
        assert.are.equal(1, rc)
        assert.matches("API markers not found", out)
        assert.are.equal("previous", read_file(out_path))
        assert.is_false(file.exists(out_path .. ".tmp"))
    end)

    it("refuses a header without exactly one GLM53_ABI_VERSION", function()
        local region = "/* GLM53_API_BEGIN */\nint f(void);\n/* GLM53_API_END */\n"
        assert.has_error(function() gen.module_from_header(region) end)
        assert.has_error(function()
            gen.module_from_header("#define GLM53_ABI_VERSION 1\n#define GLM53_ABI_VERSION 2\n" .. region)
        end)
        assert.matches("abi_version = 3,", gen.module_from_header("#define GLM53_ABI_VERSION 3\n" .. region))
    end)
end)
