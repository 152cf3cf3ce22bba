--[[
glm53.ffi.core - loads libglm53 through the LuaJIT FFI and holds what every module shares.

    local core = require("glm53.ffi.core")
    local ffi, C = core.ffi, core.C
    local ok, err = core.check(C.glm53_seq_truncate(h, 4))   -- true, or nil and "GLM53_ERR_X: message"

Returns { ffi = ffi, C = <the loaded library>, path = <library path>, errmsg = fn, status_name = fn, check = fn,
check_abi = fn }. The ffi.cdef comes from glm53.ffi.cdef (lua/glm53/ffi/cdef.lua), which scripts/gen_cdef.lua
derives from core/glm53.h together with the header's GLM53_ABI_VERSION. Right after loading the library this
module compares that version with the library's glm53_abi_version() and raises (one line: the library path and
both versions) when they differ, so a stale libglm53.so is refused before any call can misread a struct.

Where the library is looked for, in order:
  1. $GLM53_LIB (a full path to libglm53.so)
  2. $GLM53_BUILD/libglm53.so (a build directory)
  3. build/libglm53.so next to this source tree (a checkout after `make`)
  4. libglm53.so on package.cpath (where `luarocks make` installs it)
  5. the system linker path (ffi.load "glm53")
]]
local ffi = require("ffi")
local file = require("glm53.util.file")

local def = require("glm53.ffi.cdef")
ffi.cdef(def.cdef)

local function source_root()
    local src = debug.getinfo(1, "S").source
    if src:sub(1, 1) ~= "@" then return nil end
    -- .../lua/glm53/ffi/core.lua -> ...
    return src:sub(2):match("^(.*)/lua/glm53/ffi/core%.lua$") or
           (src:sub(2) == "lua/glm53/ffi/core.lua" and ".") or nil
end

local function find_library()
    local candidates = {}
    local env_lib, env_build = os.getenv("GLM53_LIB"), os.getenv("GLM53_BUILD")
    if env_lib then candidates[#candidates + 1] = env_lib end
    if env_build then candidates[#candidates + 1] = env_build .. "/libglm53.so" end
    local root = source_root()
    if root then candidates[#candidates + 1] = root .. "/build/libglm53.so" end
    local on_cpath = package.searchpath and package.searchpath("libglm53", package.cpath)
    if on_cpath then candidates[#candidates + 1] = on_cpath end
    for _, path in ipairs(candidates) do
        if file.exists(path) then return path end
    end
    return "glm53"
end

-- true when lib_version (the library's glm53_abi_version(), nil for a library without that function) is the
-- version `expected` the cdef was generated from; otherwise nil and a one-line message naming the library path.
local function check_abi(lib_version, expected, lib_path)
    if lib_version ~= nil and type(lib_version) ~= "number" then error("check_abi: lib_version must be a number", 2) end
    if type(expected) ~= "number" then error("check_abi: expected must be a number", 2) end
    if type(lib_path) ~= "string" then error("check_abi: lib_path must be a string", 2) end
    if lib_version == expected then return true end
    local have = lib_version and "ABI version " .. lib_version or "no glm53_abi_version() (a build older than ABI 1)"
    return nil, string.format("glm53: the C library %s has %s, the Lua package expects ABI version %d; " ..
                              "rebuild with make, or point GLM53_LIB at a matching build", lib_path, have, expected)
end

local path = find_library()
local ok, C = pcall(ffi.load, path)
if not ok then
    error("glm53: cannot load the C library (" .. tostring(C) .. "); run `make` first or set GLM53_LIB", 0)
end
do
    local has_fn, lib_version = pcall(function() return C.glm53_abi_version() end)
    local abi_ok, abi_err = check_abi(has_fn and tonumber(lib_version) or nil, def.abi_version, path)
    if not abi_ok then error(abi_err, 0) end
end

local M = { ffi = ffi, C = C, path = path, check_abi = check_abi }

-- The calling thread's last error message from the C core.
function M.errmsg()
    return ffi.string(C.glm53_last_error())
end

function M.status_name(status)
    return ffi.string(C.glm53_status_name(status))
end

-- Wraps a status for the `nil, err` convention: returns true, or nil and "GLM53_ERR_X: message".
function M.check(status)
    if status == 0 then return true end
    return nil, M.status_name(status) .. ": " .. M.errmsg()
end

return M
