--[[
glm53.engine.checkpoint - read-only access to a checkpoint (config.json + safetensors, sharded or not).

    local checkpoint = require("glm53.engine.checkpoint")
    local ckpt = assert(checkpoint.open("models/glm53-tiny"))
    for _, info in ipairs(ckpt:list()) do print(info.name, info.dtype, table.concat(info.shape, "x")) end
    local values = ckpt:read("lm_head.weight")              -- Lua table of numbers (FP8 dequantised)
    local buf, n = ckpt:read_into("lm_head.weight")          -- float[n] cdata, no Lua table
    local cfg = ckpt:config()                                 -- glm53_model_config (cdata) or nil, err
    ckpt:free()

Argument errors raise; runtime failures (missing tensor, bad file) return nil, err.
]]
local core = require("glm53.ffi.core")
local ffi, C = core.ffi, core.C

local Checkpoint = {}
Checkpoint.__index = Checkpoint

local M = {}

local function handle_of(self)
    if self._handle == nil then error("checkpoint: used after free()", 3) end
    return self._handle
end

function M.open(path)
    if type(path) ~= "string" then error("checkpoint.open: path must be a string", 2) end
    local out = ffi.new("glm53_checkpoint *[1]")
    local ok, err = core.check(C.glm53_checkpoint_open(path, out))
    if not ok then return nil, err end
    return setmetatable({ _handle = ffi.gc(out[0], C.glm53_checkpoint_free), path = path }, Checkpoint)
end

function Checkpoint:free()
    if self._handle ~= nil then
        C.glm53_checkpoint_free(ffi.gc(self._handle, nil))
        self._handle = nil
    end
end

local function describe(t, file)
    local shape = {}
    for d = 0, t.ndim - 1 do shape[#shape + 1] = tonumber(t.shape[d]) end
    return {
        name = ffi.string(t.name),
        dtype = ffi.string(C.glm53_dtype_name(t.dtype)),
        shape = shape,
        numel = tonumber(C.glm53_tensor_numel(t)),
        file = file,
        scale = t.scale ~= nil and ffi.string(t.scale.name) or nil,
    }
end

-- Every tensor as {name, dtype, shape, numel, file, scale}, in name order.
function Checkpoint:list()
    local h = handle_of(self)
    local n = tonumber(C.glm53_checkpoint_n_tensors(h))
    local list = {}
    for i = 0, n - 1 do
        list[#list + 1] = describe(C.glm53_checkpoint_tensor(h, i), ffi.string(C.glm53_checkpoint_tensor_file(h, i)))
    end
    return list
end

local function find(self, name)
    if type(name) ~= "string" then error("checkpoint: tensor name must be a string", 3) end
    local out = ffi.new("const glm53_tensor *[1]")
    local ok, err = core.check(C.glm53_checkpoint_find(handle_of(self), name, out))
    if not ok then return nil, err end
    return out[0]
end

function Checkpoint:info(name)
    local t, err = find(self, name)
    if not t then return nil, err end
    return describe(t)
end

-- Reads a whole tensor as float32 into `buf` (a float* cdata with room for numel values) or a new buffer.
-- Returns buf, numel.
function Checkpoint:read_into(name, buf)
    local t, err = find(self, name)
    if not t then return nil, err end
    local n = C.glm53_tensor_numel(t)
    buf = buf or ffi.new("float[?]", n)
    local ok, err2 = core.check(C.glm53_tensor_to_f32(t, buf, n))
    if not ok then return nil, err2 end
    return buf, tonumber(n)
end

-- Reads a whole tensor into a Lua table of numbers (row-major), plus its shape.
function Checkpoint:read(name)
    local buf, n = self:read_into(name)
    if not buf then return nil, n end
    local values = {}
    for i = 0, n - 1 do values[i + 1] = buf[i] end
    local info = self:info(name)
    return values, info.shape
end

-- The parsed model configuration (a glm53_model_config cdata), or nil, err.
function Checkpoint:config()
    local cfg = ffi.new("glm53_model_config")
    local ok, err = core.check(C.glm53_checkpoint_config(handle_of(self), cfg))
    if not ok then return nil, err end
    return cfg
end

-- The raw config.json text, or nil for a bare .safetensors file.
function Checkpoint:config_json()
    local s = C.glm53_checkpoint_config_json(handle_of(self))
    return s ~= nil and ffi.string(s) or nil
end

-- Prints the tensor table (name, dtype, shape, file) to `out` (default io.stdout).
function Checkpoint:print_tensors(out)
    out = out or io.stdout
    for _, t in ipairs(self:list()) do
        out:write(string.format("%-72s %-8s %-18s %s\n", t.name, t.dtype, "[" .. table.concat(t.shape, ", ") .. "]",
                                t.file))
    end
end

return M
