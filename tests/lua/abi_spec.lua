-- The ffi.cdef the Lua package uses must agree with core/glm53.h: same text (signatures), and the same struct
-- sizes, field offsets and enum values as a C compiler sees them.
local ffi = require("ffi")
local file = require("glm53.util.file")
local gen = dofile("scripts/gen_cdef.lua")

local function read_file(path) return (assert(file.read_file(path))) end

local cdef = gen.cdef_from_header(read_file("core/glm53.h"))

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
        assert.are.equal(gen.render_module(cdef), read_file("lua/glm53/ffi/cdef.lua"))
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
