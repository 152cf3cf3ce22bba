-- glm53.util.file: whole-file reads and writes (plain and atomic) and the existence test.
local file = require("glm53.util.file")
local h = require("spec_helpers")

describe("glm53.util.file", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it("writes and reads back bytes unchanged", function()
        local bytes = "a\0b\r\n\255" .. string.rep("x", 70000)
        assert.is_true(file.write_file(dir .. "/bin", bytes))
        assert.are.equal(bytes, file.read_file(dir .. "/bin"))
        assert.is_true(file.write_file(dir .. "/bin", "short"))       -- replaces, does not append
        assert.are.equal("short", file.read_file(dir .. "/bin"))
        assert.is_true(file.write_file(dir .. "/empty", ""))
        assert.are.equal("", file.read_file(dir .. "/empty"))
    end)

    it("returns nil, err for a file that cannot be read or written", function()
        local text, err = file.read_file(dir .. "/missing")
        assert.is_nil(text)
        assert.is_truthy(err:find("missing", 1, true))
        text, err = file.read_file(dir)                                 -- a directory opens, but does not read
        assert.is_nil(text)
        assert.is_string(err)
        local ok, werr = file.write_file(dir .. "/no/such/dir/f", "x")
        assert.is_nil(ok)
        assert.is_string(werr)
    end)

    it("writes atomically on request: the new content or, on failure, the old file untouched", function()
        local path = dir .. "/atomic"
        assert.is_true(file.write_file(path, "old"))
        assert.is_true(file.write_file(path, "new", { atomic = true }))
        assert.are.equal("new", file.read_file(path))
        assert.is_false(file.exists(path .. ".tmp"))
        -- The rename cannot replace a non-empty directory: the write fails and leaves no temporary file.
        os.execute("mkdir -p '" .. dir .. "/busy/inner'")
        local ok, err = file.write_file(dir .. "/busy", "x", { atomic = true })
        assert.is_nil(ok)
        assert.is_string(err)
        assert.is_false(file.exists(dir .. "/busy.tmp"))
        assert.is_true(file.exists(dir .. "/busy/inner"))
    end)

    it("tells whether a path can be opened", function()
        assert.is_true(file.exists("models/tiny/config.json"))
        assert.is_false(file.exists(dir .. "/missing"))
    end)

    it("raises on argument errors", function()
        assert.has_error(function() file.read_file(nil) end)
        assert.has_error(function() file.write_file(42, "x") end)
        assert.has_error(function() file.write_file(dir .. "/f", 42) end)
        assert.has_error(function() file.exists({}) end)
    end)
end)
