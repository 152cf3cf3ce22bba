--[[
glm53.util.npy - reads and writes NumPy .npy files (format 1.0/2.0/3.0, C order) through FFI buffers.

    local npy = require("glm53.util.npy")
    local arr = assert(npy.read("tokens.npy"))   -- {dtype = "<i4", shape = {T}, data = int32_t[T], n = T}
    npy.write("out.npy", "<f4", {T, V}, float_ptr)

Supported dtypes: <f4, <f8, <i4, <i8, |u1. Runtime failures return nil, err.
]]
local ffi = require("ffi")
local file = require("glm53.util.file")

local M = {}

local ctypes = { ["<f4"] = "float", ["<f8"] = "double", ["<i4"] = "int32_t", ["<i8"] = "int64_t", ["|u1"] = "uint8_t" }

local function parse_header(header)
    local descr = header:match("'descr'%s*:%s*'([^']+)'")
    local fortran = header:match("'fortran_order'%s*:%s*(%a+)")
    local shape_text = header:match("'shape'%s*:%s*(%b())")
    if not (descr and fortran and shape_text) then return nil, "malformed header: " .. header end
    if fortran ~= "False" then return nil, "Fortran-order arrays are not supported" end
    local shape = {}
    for dim in shape_text:gmatch("%d+") do shape[#shape + 1] = tonumber(dim) end
    return descr, shape
end

function M.read(path)
    if type(path) ~= "string" then error("npy.read: path must be a string", 2) end
    local data, err = file.read_file(path)
    if not data then return nil, err end
    if data:sub(1, 6) ~= "\147NUMPY" then return nil, path .. ": not a .npy file" end
    local major = data:byte(7)
    local header_len, offset
    if major == 1 then
        header_len, offset = data:byte(9) + 256 * data:byte(10), 11
    elseif major == 2 or major == 3 then
        header_len = data:byte(9) + 256 * data:byte(10) + 65536 * data:byte(11) + 16777216 * data:byte(12)
        offset = 13
    else
        return nil, path .. ": unsupported .npy version " .. tostring(major)
    end
    local descr, shape = parse_header(data:sub(offset, offset + header_len - 1))
    if not descr then return nil, path .. ": " .. shape end
    local ctype = ctypes[descr]
    if not ctype then return nil, path .. ": unsupported dtype " .. descr end
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    local body = offset + header_len
    local nbytes = n * ffi.sizeof(ctype)
    if #data - body + 1 < nbytes then return nil, path .. ": file is shorter than its shape says" end
    local buf = ffi.new(ctype .. "[?]", math.max(n, 1))
    ffi.copy(buf, ffi.cast("const char *", data) + body - 1, nbytes)
    return { dtype = descr, shape = shape, data = buf, n = n }
end

-- Writes n = prod(shape) elements of `data` (a cdata pointer or a Lua table of numbers) as dtype.
function M.write(path, dtype, shape, data)
    local ctype = ctypes[dtype]
    if not ctype then error("npy.write: unsupported dtype " .. tostring(dtype), 2) end
    local n, dims = 1, {}
    for i, d in ipairs(shape) do n = n * d; dims[i] = tostring(d) end
    local shape_text = #dims == 1 and "(" .. dims[1] .. ",)" or "(" .. table.concat(dims, ", ") .. ")"
    local header = string.format("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", dtype, shape_text)
    local total = 10 + #header + 1
    header = header .. string.rep(" ", (64 - total % 64) % 64) .. "\n"
    local buf = data
    if type(data) == "table" then
        buf = ffi.new(ctype .. "[?]", math.max(n, 1))
        for i = 1, n do buf[i - 1] = data[i] end
    end
    local f, err = io.open(path, "wb")
    if not f then return nil, err end
    f:write("\147NUMPY\1\0", string.char(#header % 256, math.floor(#header / 256)), header)
    f:write(ffi.string(ffi.cast("const char *", buf), n * ffi.sizeof(ctype)))
    f:close()
    return true
end

return M
