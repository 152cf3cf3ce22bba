--[[
glm53.engine.seq - a sequence: one token stream of a model and its caches (attention KV and linear-attention
state of the target layers and of each MTP layer). Model:seq makes one; batches carry sequences to the steps.

    local m = assert(require("glm53.engine.model").load("models/glm53-tiny"))
    local seq = assert(m:seq({ max_tokens = 512, max_rollback = 4 }))
    local batch = m:batch({ rows = 16 })
    batch:add(seq, { 1, 2, 3, 4 })
    assert(m:step(batch))
    print(seq:length(), seq:capacity(), seq:cache_bytes())     -- 4  512  <bytes>
    local other = assert(seq:fork(2))                           -- a new sequence sharing the first 2 positions
    assert(seq:truncate(3))                                     -- back to the first 3 positions
    other:free(); seq:free()                                    -- or leave them to the GC

Research capture: a sequence made with `capture = { experts = true, selection = true }` records, per position,
the routed experts of every MoE layer and the selected positions of every sparse MLA layer with an indexer:

    local cap = assert(seq:captured_experts(layer))      -- {ids = int32_t*, weights = float*, k = 8, n = positions}
    for p = 0, cap.n - 1 do print(p, cap.ids[p * cap.k], cap.weights[p * cap.k]) end
    local sel = assert(seq:captured_selection(layer))    -- {positions = int32_t* [n, width] (-1 padded), width, n}

The pointers point into the sequence (no copy) and stay valid until it is freed.

Argument errors raise; runtime failures (cache full, truncation beyond the rollback window) return nil, err.
]]
local core = require("glm53.ffi.core")
local ffi, C = core.ffi, core.C

local M = {}

local Seq = {}
Seq.__index = Seq

-- The glm53_capture_flags of a capture option ({ experts = bool, selection = bool }, or nil: 0). A bad option
-- raises `where`: ... at `level` (glm53.generation.driver checks its streams' options with it too).
function M.capture_flags(cap, where, level)
    if cap == nil then return 0 end
    if type(cap) ~= "table" then error(where .. ": capture must be a table { experts = bool, selection = bool }", level) end
    for k in pairs(cap) do
        if k ~= "experts" and k ~= "selection" then
            error(where .. ": unknown capture option '" .. tostring(k) .. "'", level)
        end
    end
    return (cap.experts and C.GLM53_CAPTURE_EXPERTS or 0) + (cap.selection and C.GLM53_CAPTURE_SELECTION or 0)
end

-- Sequence parameters from opts: max_tokens, max_rollback, capture ({ experts = bool, selection = bool }); p
-- holds the defaults to start from. Argument errors raise at `level`.
local function seq_params(p, opts, level)
    if opts.max_tokens ~= nil then p.max_tokens = opts.max_tokens end
    if opts.max_rollback ~= nil then p.max_rollback = opts.max_rollback end
    if opts.capture ~= nil then p.capture = M.capture_flags(opts.capture, "seq", level + 1) end
    return p
end

-- A new sequence of model m (a glm53.engine.model Model) whose C handle is model_h; Model:seq calls this.
-- opts: max_tokens (default 4096), max_rollback (default 16), capture ({ experts = bool, selection = bool }).
function M.create(m, model_h, opts)
    local p = seq_params(C.glm53_seq_default_params(), opts or {}, 4)
    local out = ffi.new("glm53_seq *[1]")
    local ok, err = core.check(C.glm53_seq_create(model_h, p, out))
    if not ok then return nil, err end
    return setmetatable({ _h = ffi.gc(out[0], C.glm53_seq_free), model = m }, Seq)
end

-- The C handle of sequence s; raises (at the level of the caller's caller) after free().
local function seq_handle(s)
    if s._h == nil then error("seq: used after free()", 3) end
    return s._h
end
M.handle = seq_handle

function M.is_seq(v) return getmetatable(v) == Seq end

function Seq:length() return tonumber(C.glm53_seq_length(seq_handle(self))) end
function Seq:capacity() return tonumber(C.glm53_seq_capacity(seq_handle(self))) end
function Seq:cache_bytes() return tonumber(C.glm53_seq_cache_bytes(seq_handle(self))) end

-- A new sequence sharing the first n tokens (default: all) of this one. opts (optional): the fork's max_tokens,
-- max_rollback and capture, as for Model:seq (default: this sequence's); only the kept positions are copied.
function Seq:fork(n, opts)
    local h = seq_handle(self)
    local p = nil
    if opts ~= nil then
        if type(opts) ~= "table" then error("seq:fork: opts must be a table", 2) end
        p = seq_params(C.glm53_seq_params_get(h), opts, 3)
    end
    local out = ffi.new("glm53_seq *[1]")
    local ok, err = core.check(C.glm53_seq_fork(h, n or self:length(), p, out))
    if not ok then return nil, err end
    return setmetatable({ _h = ffi.gc(out[0], C.glm53_seq_free), model = self.model }, Seq)
end

function Seq:truncate(n)
    if type(n) ~= "number" then error("seq:truncate: n must be a number", 2) end
    return core.check(C.glm53_seq_truncate(seq_handle(self), n))
end

-- Positions the cache of MTP layer `layer` (0-based) holds; nil if the model has no such layer.
function Seq:mtp_length(layer)
    local n = tonumber(C.glm53_seq_mtp_length(seq_handle(self), layer))
    if n < 0 then return nil end
    return n
end

-- Drops the positions after n from the cache of MTP layer `layer` (speculative drafts of a finished round).
function Seq:mtp_truncate(layer, n)
    if type(layer) ~= "number" or type(n) ~= "number" then error("seq:mtp_truncate: layer and n must be numbers", 2) end
    return core.check(C.glm53_seq_mtp_truncate(seq_handle(self), layer, n))
end

local cap_ids, cap_weights = ffi.new("const int32_t *[1]"), ffi.new("const float *[1]")
local cap_positions, cap_width, cap_n = ffi.new("const int32_t *[1]"), ffi.new("int32_t[1]"), ffi.new("int64_t[1]")

-- The routed experts this sequence recorded for `layer` (0-based; MTP layer i is num_hidden_layers + i):
-- { ids = int32_t* [n, k], weights = float* [n, k], k = k, n = positions }, or nil, err.
function Seq:captured_experts(layer)
    if type(layer) ~= "number" then error("seq:captured_experts: layer must be a number", 2) end
    local ok, err = core.check(C.glm53_seq_capture_experts(seq_handle(self), layer, cap_ids, cap_weights, cap_width,
                                                            cap_n))
    if not ok then return nil, err end
    return { ids = cap_ids[0], weights = cap_weights[0], k = cap_width[0], n = tonumber(cap_n[0]) }
end

-- The selected positions this sequence recorded for `layer`: { positions = int32_t* [n, width], width, n }.
function Seq:captured_selection(layer)
    if type(layer) ~= "number" then error("seq:captured_selection: layer must be a number", 2) end
    local ok, err = core.check(C.glm53_seq_capture_selection(seq_handle(self), layer, cap_positions, cap_width, cap_n))
    if not ok then return nil, err end
    return { positions = cap_positions[0], width = cap_width[0], n = tonumber(cap_n[0]) }
end

function Seq:free()
    if self._h ~= nil then
        C.glm53_seq_free(ffi.gc(self._h, nil))
        self._h = nil
    end
end

return M
