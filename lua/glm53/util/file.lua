--[[
glm53.util.file - whole-file reads and writes, and an existence test: the one copy the package, the scripts and
the tests share.

    local file = require("glm53.util.file")
    local text, err = file.read_file("models/glm53-tiny/config.json")   -- the bytes, or nil, err
    assert(file.write_file("/tmp/out.txt", text))                    -- true, or nil, err
    assert(file.write_file("lua/glm53/ffi/cdef.lua", text, { atomic = true }))
    if file.exists("build/libglm53.so") then ... end
    assert(file.mkdir_p("reports/eval-gsm8k"))                      -- a directory and its parents

Files are read and written in binary mode. Argument errors raise; runtime failures (no such file, no
permission, a full disk) return nil, err.
]]
local M = {}

local function check_path(path, what)
    if type(path) ~= "string" then error(what .. ": path must be a string", 3) end
end

-- The whole content of the file at path, or nil, err.
function M.read_file(path)
    check_path(path, "file.read_file")
    local f, err = io.open(path, "rb")
    if not f then return nil, err end
    local text, rerr = f:read("*a")
    f:close()
    if not text then return nil, path .. ": " .. tostring(rerr) end
    return text
end

local function write(path, text)
    local f, err = io.open(path, "wb")
    if not f then return nil, err end
    local ok, werr = f:write(text)
    local closed, cerr = f:close()
    if not ok then return nil, path .. ": " .. tostring(werr) end
    if not closed then return nil, path .. ": " .. tostring(cerr) end
    return true
end

-- Writes text to path (replacing what was there). opts.atomic: write path .. ".tmp" and rename it over path, so
-- that a reader never sees a partial file and a failed write leaves the old one (two writers of one path at
-- once are not supported). Returns true, or nil, err.
function M.write_file(path, text, opts)
    check_path(path, "file.write_file")
    if type(text) ~= "string" then error("file.write_file: text must be a string", 2) end
    if not (opts and opts.atomic) then return write(path, text) end
    local tmp = path .. ".tmp"
    local ok, err = write(tmp, text)
    if ok then ok, err = os.rename(tmp, path) end
    if not ok then
        os.remove(tmp)
        return nil, err
    end
    return true
end

-- True when path can be opened for reading.
function M.exists(path)
    check_path(path, "file.exists")
    local f = io.open(path, "rb")
    if f then f:close() return true end
    return false
end

-- Makes the directory path and any missing parents (mkdir -p). Returns true, or nil, err.
function M.mkdir_p(path)
    check_path(path, "file.mkdir_p")
    local status = os.execute("mkdir -p '" .. path:gsub("'", "'\\''") .. "' 2>/dev/null")
    if status == 0 or status == true then return true end
    return nil, "cannot make the directory " .. path
end

return M
