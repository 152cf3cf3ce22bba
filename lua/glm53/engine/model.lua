--[[
glm53.engine.model - load a model, make sequences (caches), run batched steps.

    local model = require("glm53.engine.model")
    local m = assert(model.load("models/glm53-tiny", { device = "cpu", threads = 2 }))
    local seq = assert(m:seq({ max_tokens = 512 }))
    local batch = m:batch({ rows = 512 })             -- reusable buffers; make once, reuse every step
    batch:add(seq, { 1, 2, 3 })                       -- prefill; only the last row's logits by default
    assert(m:step(batch))
    local logits = batch:logits(0)                    -- float* [vocab] of output row 0
    batch:clear(); batch:add(seq, { m:argmax(logits) })   -- decode
    assert(m:step(batch))

A batch may hold several sequences (each at most once per step). `batch:add(seq, tokens, "all")` asks for the
logits of every row of that sequence. Output rows are numbered in the order they were added.
Argument errors raise; runtime failures (cache full, token out of range, backend error) return nil, err.

Async steps run on the model's worker thread, so an event loop keeps running during a long prefill:

    local tag = assert(m:submit(batch))               -- the batch stays untouched until its completion is taken
    local fd = m:completion_fd()                      -- readable while completions wait (luv: uv.new_poll(fd))
    local tag, ok, err = m:poll()                     -- nil when none waits; m:wait() blocks instead
glm53.engine.async wraps this for luv: a callback per step. Loading itself can run off the loop too:

    model.load_async(uv, "models/glm53-tiny", { threads = 2 }, function(m, err) ... end)   -- on a libuv pool thread
]]
local core = require("glm53.ffi.core")
local sequence = require("glm53.engine.seq")
local ffi, C = core.ffi, core.C

local M = {}

local Model = {}
Model.__index = Model
local Batch = {}
Batch.__index = Batch

local devices = { cpu = C.GLM53_DEVICE_CPU, cuda = C.GLM53_DEVICE_CUDA }
local communicators = {
    auto = C.GLM53_COMMUNICATOR_AUTO, threads = C.GLM53_COMMUNICATOR_THREADS, nccl = C.GLM53_COMMUNICATOR_NCCL,
}

-- opts: device ("cpu" | "cuda"), threads, cuda_device, load_mtp (default true), cache_bytes_max,
-- activations ("f32" | "bf16"; default: the backend's, F32 on CPU and BF16 on CUDA), step_rows (most rows one
-- pass of a step computes; 0 = the backend's default), tp and ep (tensor and expert parallel ranks, default 1;
-- docs/multi-gpu.md), communicator ("auto" | "threads" | "nccl"; default "auto": none for one rank, threads on
-- the CPU, NCCL on CUDA).
local function load_params(opts, level)
    local p = C.glm53_model_default_params()
    if opts.device ~= nil then
        p.device = devices[opts.device] or error("model.load: device must be 'cpu' or 'cuda'", level)
    end
    if opts.threads ~= nil then p.n_threads = opts.threads end
    if opts.cuda_device ~= nil then p.cuda_device = opts.cuda_device end
    if opts.load_mtp ~= nil then p.load_mtp = opts.load_mtp and 1 or 0 end
    if opts.cache_bytes_max ~= nil then p.cache_bytes_max = opts.cache_bytes_max end
    if opts.activations ~= nil then
        p.activation_dtype = ({ f32 = C.GLM53_F32, bf16 = C.GLM53_BF16 })[opts.activations] or
            error("model.load: activations must be 'f32' or 'bf16'", level)
    end
    for _, key in ipairs({ "step_rows", "tp", "ep" }) do
        local v = opts[key]
        if v ~= nil then
            local least = key == "step_rows" and 0 or 1
            if type(v) ~= "number" or v < least or v % 1 ~= 0 then
                error(("model.load: %s must be an integer >= %d"):format(key, least), level)
            end
            p[key] = v
        end
    end
    if opts.communicator ~= nil then
        p.communicator = communicators[opts.communicator] or
            error("model.load: communicator must be 'auto', 'threads' or 'nccl'", level)
    end
    return p
end

-- The Model object of a loaded handle.
local function wrap(handle, path, opts)
    local self = setmetatable({
        _h = ffi.gc(handle, C.glm53_model_free), path = path,
        _pending = {}, _tag = 0, _completion = ffi.new("glm53_step_completion"),
    }, Model)
    self.config = C.glm53_model_config_get(self._h)
    self.vocab_size = self.config.text.vocab_size
    self.hidden_size = self.config.text.hidden_size
    self.device = opts.device or "cpu"
    return self
end

function M.load(path, opts)
    if type(path) ~= "string" then error("model.load: path must be a string", 2) end
    opts = opts or {}
    local p = load_params(opts, 3)
    local out = ffi.new("glm53_model *[1]")
    local ok, err = core.check(C.glm53_model_load(path, p, out))
    if not ok then return nil, err end
    return wrap(out[0], path, opts)
end

-- Runs on a libuv thread-pool thread, in that thread's own Lua state: loads the checkpoint with the
-- glm53_model_params given as their bytes (luv carries strings, numbers and booleans, at most 10 arguments) and
-- hands the handle back as an address (the state's ffi.gc must not own it). Exposed for load_async only.
function M._load_in_thread(path, params_bytes)
    local p = ffi.new("glm53_model_params")
    ffi.copy(p, params_bytes, ffi.sizeof(p))
    local out = ffi.new("glm53_model *[1]")
    local ok, err = core.check(C.glm53_model_load(path, p, out))
    if not ok then return nil, err end
    return string.format("%.0f", tonumber(ffi.cast("uintptr_t", out[0])))
end

-- Loads on a libuv thread-pool thread, so an event loop keeps running meanwhile (a server answers /health with
-- 503 during a long load): cb(model) or cb(nil, err) runs on the loop. Bad options raise here.
function M.load_async(uv, path, opts, cb)
    if type(uv) ~= "table" or type(uv.new_work) ~= "function" then error("model.load_async: uv must be luv", 2) end
    if type(path) ~= "string" then error("model.load_async: path must be a string", 2) end
    if type(cb) ~= "function" then error("model.load_async: cb must be a function", 2) end
    opts = opts or {}
    local p = load_params(opts, 3)   -- argument errors raise on the caller's side
    local work = uv.new_work(function(ppath, cpath, mpath, params_bytes)
        package.path, package.cpath = ppath, cpath
        return require("glm53.engine.model")._load_in_thread(mpath, params_bytes)
    end, function(addr, err)
        if not addr then return cb(nil, err) end
        local handle = ffi.cast("glm53_model *", ffi.cast("uintptr_t", tonumber(addr)))
        cb(wrap(handle, path, opts))
    end)
    uv.queue_work(work, package.path, package.cpath, path, ffi.string(p, ffi.sizeof(p)))
end

local function model_handle(self)
    if self._h == nil then error("model: used after free()", 3) end
    return self._h
end

function Model:free()
    if self._h ~= nil then
        C.glm53_model_free(ffi.gc(self._h, nil))   -- cancels queued async steps, waits for the running one
        self._h = nil
        self._pending = {}
    end
end

function Model:weight_bytes() return tonumber(C.glm53_model_weight_bytes(model_handle(self))) end
function Model:cache_bytes() return tonumber(C.glm53_model_cache_bytes(model_handle(self))) end

-- What each rank holds: a list of { tp_rank, ep_rank, device ("cpu" | "cuda"), cuda_device, first_expert,
-- n_experts, weight_bytes, cache_bytes }, rank 0 first (one entry for a model on one device).
function Model:ranks()
    local h = model_handle(self)
    local info, list = ffi.new("glm53_rank_info"), {}
    for r = 0, C.glm53_model_n_ranks(h) - 1 do
        assert(core.check(C.glm53_model_rank_info(h, r, info)))
        list[#list + 1] = {
            tp_rank = info.tp_rank, ep_rank = info.ep_rank,
            device = info.device == C.GLM53_DEVICE_CUDA and "cuda" or "cpu", cuda_device = info.cuda_device,
            first_expert = info.first_expert, n_experts = info.n_experts,
            weight_bytes = tonumber(info.weight_bytes), cache_bytes = tonumber(info.cache_bytes),
        }
    end
    return list
end

-- Index of the largest of n floats at ptr (default: one row of logits).
function Model:argmax(ptr, n)
    return tonumber(C.glm53_argmax_f32(ptr, n or self.vocab_size))
end

-- A new sequence (glm53.engine.seq). opts: max_tokens (default 4096), max_rollback (default 16).
function Model:seq(opts)
    return sequence.create(self, model_handle(self), opts)
end

-- opts: rows (row capacity, default 4096), seqs (default 64), outputs (output row capacity, default = seqs),
-- hidden (also return final hidden states, default false), logits (default true; false: no logits rows),
-- top_k (default 0: each output row's top_k logits chosen where they are computed, on the GPU with CUDA;
-- batch:top(i) and batch:greedy(i) read them; 1 is greedy decoding without copying logits rows: pass
-- logits = false too), n_valid (ids that compete in the top_k, default all: the tokenizer's n_vocab drops the
-- padded rows).
function Model:batch(opts)
    opts = opts or {}
    local rows, seqs = opts.rows or 4096, opts.seqs or 64
    local outputs = opts.outputs or seqs
    local top_k = opts.top_k or 0
    if type(top_k) ~= "number" or top_k % 1 ~= 0 or top_k < 0 or top_k > C.GLM53_MAX_TOP_K then
        error("model:batch: top_k must be a whole number in [0, " .. C.GLM53_MAX_TOP_K .. "]", 2)
    end
    local b = setmetatable({
        model = self, cap_rows = rows, cap_seqs = seqs, cap_out = outputs,
        seq_ptrs = ffi.new("glm53_seq *[?]", seqs),
        n_rows = ffi.new("int32_t[?]", seqs),
        tokens = ffi.new("int32_t[?]", rows),
        want = ffi.new("uint8_t[?]", rows),
        logits_buf = opts.logits ~= false and ffi.new("float[?]", outputs * self.vocab_size) or nil,
        hidden_buf = opts.hidden and ffi.new("float[?]", outputs * self.hidden_size) or nil,
        top_k = top_k, top_k_now = top_k, n_valid = opts.n_valid or 0,
        top_ids_buf = top_k > 0 and ffi.new("int32_t[?]", outputs * top_k) or nil,
        top_logits_buf = top_k > 0 and ffi.new("float[?]", outputs * top_k) or nil,
        c = ffi.new("glm53_batch"),
        out = ffi.new("glm53_step_output"),
        seq_objs = {},
    }, Batch)
    b:clear()
    return b
end

function Batch:clear()
    self.n_seqs, self.total, self.n_out = 0, 0, 0
    for i = #self.seq_objs, 1, -1 do self.seq_objs[i] = nil end
    self.c.embeddings, self.c.use_embedding = nil, nil   -- set again by add_embedded (image/video rows)
end

-- Appends rows for seq: tokens is a Lua array of ids, or a cdata int32_t* with count n. outputs: "last"
-- (default) or "all" rows of this sequence produce logits.
-- Bytes a cdata buffer is known to hold (an array: its size; a pointer: unknown, nil).
local function known_bytes(buf)
    if type(buf) ~= "cdata" then return nil end
    local ok, size = pcall(ffi.sizeof, buf)
    if not ok or not size then return nil end
    if tostring(ffi.typeof(buf)):find("%*") then return nil end   -- a pointer: its size is not the buffer's
    return size
end
M._known_bytes = known_bytes

function Batch:add(seq, tokens, outputs, n)
    if not sequence.is_seq(seq) then error("batch:add: seq must be a sequence", 2) end
    local count = type(tokens) == "table" and #tokens or n
    if type(count) ~= "number" or count < 1 or count % 1 ~= 0 then
        error("batch:add: need at least one token (a whole number)", 2)
    end
    if type(tokens) ~= "table" then
        if type(tokens) ~= "cdata" then error("batch:add: tokens must be a Lua array or an int32_t buffer", 2) end
        local bytes = known_bytes(tokens)
        if bytes and count * 4 > bytes then
            error(string.format("batch:add: %d tokens asked for, the buffer holds %d", count, bytes / 4), 2)
        end
    end
    if self.n_seqs >= self.cap_seqs then error("batch:add: batch holds at most " .. self.cap_seqs .. " sequences", 2) end
    if self.total + count > self.cap_rows then error("batch:add: batch holds at most " .. self.cap_rows .. " rows", 2) end
    local all = outputs == "all"
    local n_out = all and count or 1
    if self.n_out + n_out > self.cap_out then error("batch:add: batch holds at most " .. self.cap_out .. " output rows", 2) end
    local base = self.total
    if type(tokens) == "table" then
        for i = 1, count do self.tokens[base + i - 1] = tokens[i] end
    else
        ffi.copy(self.tokens + base, tokens, count * 4)
    end
    for i = 0, count - 1 do self.want[base + i] = (all or i == count - 1) and 1 or 0 end
    self.seq_ptrs[self.n_seqs] = sequence.handle(seq)
    self.n_rows[self.n_seqs] = count
    self.n_seqs = self.n_seqs + 1
    self.seq_objs[self.n_seqs] = seq
    self.total = base + count
    self.n_out = self.n_out + n_out
end

-- Like add, with embedding rows: embeddings is a float* [n, hidden] and use a uint8_t* [n]; row i takes
-- embeddings[i] instead of the embedding of tokens[i] where use[i] ~= 0 (image and video rows: glm53.engine.vision
-- builds both). tokens, embeddings and use may be offset pointers into longer buffers (chunked prefill).
function Batch:add_embedded(seq, tokens, n, embeddings, use, outputs)
    if type(n) ~= "number" or n < 1 then error("batch:add_embedded: need at least one row", 2) end
    if embeddings == nil or use == nil then error("batch:add_embedded: embeddings and use are required", 2) end
    local D = self.model.hidden_size
    if self.c.use_embedding == nil then
        -- First embedded rows since clear(): rows added before (and after) by plain add() must read as tokens.
        if not self.emb_buf then
            self.emb_buf = ffi.new("float[?]", self.cap_rows * D)
            self.use_buf = ffi.new("uint8_t[?]", self.cap_rows)
        end
        ffi.fill(self.use_buf, self.cap_rows, 0)
        self.c.embeddings, self.c.use_embedding = self.emb_buf, self.use_buf
    end
    local base = self.total
    self:add(seq, tokens, outputs, n)
    ffi.copy(self.emb_buf + base * D, embeddings, n * D * 4)
    ffi.copy(self.use_buf + base, use, n)
end

-- Output row i (0-based, in add order): float* [vocab] (nil for a batch made with logits = false). Valid until
-- the next step on this batch.
-- Checks an output row index against the rows this batch asks for.
local function output_row(self, i, what)
    if type(i) ~= "number" or i % 1 ~= 0 or i < 0 or i >= self.n_out then
        error(string.format("batch:%s: output row %s is outside [0, %d)", what, tostring(i), self.n_out), 3)
    end
    return i
end

function Batch:logits(i)
    if self.logits_off then error("batch:logits: the batch's steps run without logits rows (batch:set_logits)", 2) end
    return self.logits_buf and self.logits_buf + output_row(self, i, "logits") * self.model.vocab_size or nil
end

-- Turns the logits rows of the next steps off (false) or back on (true), for a batch made with them: a step whose
-- tokens all come from its top-k outputs (greedy streams) then copies no vocabulary-wide row to the host.
function Batch:set_logits(on)
    if not self.logits_buf then error("batch:set_logits: the batch was made with logits = false", 2) end
    self.logits_off = not on
end

-- Turns the top-k outputs of the next steps off (false) or back on (true), for a batch made with top_k: a step
-- whose tokens come from its logits rows then does not select them. k (optional, 1 .. the batch's top_k): how
-- many candidates the next steps choose per row (the batch's top_k is their most), until set again.
function Batch:set_top(on, k)
    if not self.top_ids_buf then error("batch:set_top: the batch was made without top_k", 2) end
    if k ~= nil then
        if type(k) ~= "number" or k % 1 ~= 0 or k < 1 or k > self.top_k then
            error("batch:set_top: k must be a whole number in [1, " .. self.top_k .. "]", 2)
        end
        self.top_k_now = k
    end
    self.top_off = not on
end

function Batch:hidden(i)
    return self.hidden_buf and self.hidden_buf + output_row(self, i, "hidden") * self.model.hidden_size or nil
end

-- Output row i's top_k candidates (a batch made with top_k > 0): int32_t* ids and float* logits [top_k], best
-- first (ties: the lower id), and top_k. Valid until the next step on this batch.
function Batch:top(i)
    if not self.top_ids_buf then error("batch:top: the batch was made without top_k", 2) end
    if self.top_off then error("batch:top: the batch's steps run without top-k outputs (batch:set_top)", 2) end
    local at = output_row(self, i, "top") * self.top_k_now
    return self.top_ids_buf + at, self.top_logits_buf + at, self.top_k_now
end

-- Output row i's greedy token (its top-1 id over the valid ids), a Lua number; needs top_k >= 1.
function Batch:greedy(i)
    if not self.top_ids_buf then error("batch:greedy: the batch was made without top_k", 2) end
    if self.top_off then error("batch:greedy: the batch's steps run without top-k outputs (batch:set_top)", 2) end
    return tonumber(self.top_ids_buf[output_row(self, i, "greedy") * self.top_k_now])
end

-- Points the batch's C structs at its buffers, after checking it belongs to this model (`what` names the caller).
local function prepare(self, batch, what)
    if getmetatable(batch) ~= Batch or batch.model ~= self then error(what .. ": not a batch of this model", 3) end
    if batch.n_seqs == 0 then error(what .. ": empty batch", 3) end
    if batch.in_flight then error(what .. ": the batch has an async step in flight (take its completion first)", 3) end
    for i, seq in ipairs(batch.seq_objs) do
        -- A sequence freed after batch:add: refused here by its Lua object, before C could see a reused address.
        if seq._h == nil then
            return nil, "GLM53_ERR_INVALID_ARG: " .. what .. ": sequence " .. i .. " of the batch was freed after " ..
                        "batch:add"
        end
    end
    local c, out = batch.c, batch.out
    c.n_seqs = batch.n_seqs
    c.seqs = batch.seq_ptrs
    c.n_rows = batch.n_rows
    c.tokens = batch.tokens
    c.want_output = batch.want
    out.logits = not batch.logits_off and batch.logits_buf or nil
    out.hidden = batch.hidden_buf
    out.top_k, out.top_n_valid = not batch.top_off and batch.top_k_now or 0, batch.n_valid
    out.top_ids, out.top_logits = batch.top_ids_buf, batch.top_logits_buf
    out.capacity = batch.cap_out
    return c, out
end

-- Runs one step over the batch. Returns true, or nil and an error (nothing changed on error).
function Model:step(batch)
    local c, out = prepare(self, batch, "model:step")
    if not c then return nil, out end
    return core.check(C.glm53_model_step(model_handle(self), c, out))
end

-- MTP layers loaded (0: the checkpoint has none, or the model was loaded with load_mtp = false).
function Model:n_mtp() return tonumber(C.glm53_model_n_mtp(model_handle(self))) end

-- Runs MTP layer `layer` (0-based) over the batch: its tokens are the x_{p+1} of MTP positions p, hidden_in is a
-- float* [rows, hidden_size] in batch row order (the target's final hidden h_p, or a previous draft step's
-- batch:hidden(i)). Outputs land as after Model:step: batch:logits(i) are draft logits, batch:hidden(i) the MTP
-- output hidden for the next chained step. Returns true, or nil and an error (GLM53_ERR_UNSUPPORTED on a
-- checkpoint without MTP layers).
function Model:mtp_step(batch, layer, hidden_in)
    if type(layer) ~= "number" then error("model:mtp_step: layer must be a number", 2) end
    if hidden_in == nil then error("model:mtp_step: hidden_in is required", 2) end
    local c, out = prepare(self, batch, "model:mtp_step")
    if not c then return nil, out end
    local bytes = known_bytes(hidden_in)
    if bytes and bytes < batch.total * self.hidden_size * 4 then
        error(string.format("model:mtp_step: hidden_in holds %d rows, the batch has %d", bytes / (self.hidden_size * 4),
                            batch.total), 2)
    end
    return core.check(C.glm53_model_mtp_step(model_handle(self), layer, c, hidden_in, out))
end

---------------------------------------------------------------------------------------------------------------
-- Async steps
---------------------------------------------------------------------------------------------------------------
-- Queues a step of the batch on the model's worker thread; opts.mtp_layer and opts.hidden_in make it an MTP
-- step (as Model:mtp_step). Returns a tag (a number), or nil and an error when the request is refused at once
-- (a sequence freed, say). The batch and hidden_in must stay untouched until the tag's completion is taken.
function Model:submit(batch, opts)
    opts = opts or {}
    local c, out = prepare(self, batch, "model:submit")
    if not c then return nil, out end
    local layer = opts.mtp_layer
    if layer ~= nil and (type(layer) ~= "number" or opts.hidden_in == nil) then
        error("model:submit: mtp_layer must be a number and comes with hidden_in", 2)
    end
    local rq = batch.request
    if not rq then
        rq = ffi.new("glm53_step_request")
        batch.request = rq
    end
    self._tag = self._tag + 1
    rq.mtp_layer = layer or -1
    rq.batch = c
    rq.hidden_in = opts.hidden_in
    rq.out = out
    rq.tag = self._tag
    local ok, err = core.check(C.glm53_model_submit(model_handle(self), rq))
    if not ok then return nil, err end
    -- The batch (its C structs and buffers) and hidden_in stay referenced until the completion is taken.
    self._pending[self._tag] = { batch = batch, hidden_in = opts.hidden_in }
    batch.in_flight = true
    return self._tag
end

-- The descriptor that is readable while completions wait to be taken (starts the worker). nil, err on failure.
function Model:completion_fd()
    local fd = C.glm53_model_completion_fd(model_handle(self))
    if fd < 0 then return nil, core.errmsg() end
    return tonumber(fd)
end

-- Turns a taken completion into (tag, true, batch) or (tag, nil, "GLM53_ERR_X: message", batch).
local function completed(self)
    local c = self._completion
    local tag = tonumber(c.tag)
    local entry = self._pending[tag]
    self._pending[tag] = nil
    local batch = entry and entry.batch
    if batch then batch.in_flight = nil end
    if c.status == 0 then return tag, true, batch end
    return tag, nil, core.status_name(c.status) .. ": " .. ffi.string(c.error), batch
end

-- The oldest completion, if one waits: tag, true | nil, err, and its batch. Returns nothing when none waits.
function Model:poll()
    if C.glm53_model_poll(model_handle(self), self._completion) == 0 then return end
    return completed(self)
end

-- Like poll, but waits for the oldest step to complete. nil, err when nothing is queued or running.
function Model:wait()
    local ok, err = core.check(C.glm53_model_wait(model_handle(self), self._completion))
    if not ok then return nil, err end
    return completed(self)
end

return M
