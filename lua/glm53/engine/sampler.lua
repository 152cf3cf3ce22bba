--[[
glm53.engine.sampler - the C sampler (core/sampling.c) from LuaJIT, and the hook for sampling policies written in Lua.

    local sampler = require("glm53.engine.sampler")
    local s = sampler.new(model.vocab_size, { temperature = 0.8, top_p = 0.9, top_k = 20, seed = 1 })
    s:add_prompt(prompt_ids)                     -- for the repetition penalty
    local id = assert(s:sample(batch:logits(0)))  -- draw from the filtered distribution
    s:accept(id)                                  -- history for the penalties

Options (all optional; the C header's Sampling section has the exact definitions, which are vLLM's):
  temperature (0, or anything below 1e-5, = greedy), top_k (0 = off), top_p (1 = off), min_p (0 = off), repetition_penalty (1 = off),
  presence_penalty, frequency_penalty (0 = off), seed (integer, default 0), logit_bias ({[id] = bias}),
  n_valid (ids >= n_valid are never produced: the padded embedding rows past the tokenizer's vocabulary;
  tokenizer:n_vocab() is the value; 0 = every id), candidates (most candidates a policy sees, default 64).

A policy is a Lua function policy(cand, ctx) -> id, or a table with policy:pick(cand, ctx). It sees the truncated
candidate set of one logits row after the vocab-wide filters:
  cand.n                      number of candidates (>= 1)
  cand.ids[i], cand.logits[i], cand.probs[i]   for i = 0 .. n-1, most likely first; logits after bias, penalties
                              and temperature; probs renormalised over these n candidates
  cand.sampler                the sequence's sampler: cand.sampler:uniform() draws from its seeded stream
and returns a token id (usually one of cand.ids), or nil and a reason to stop generating. pick is called once
per generated token, in order, and its answer is the token: a policy may update its own state inside pick.
sampler:pick(logits, policy, ctx) runs candidates and the policy in one call.

Argument errors raise; runtime failures (a NaN logit, no memory) return nil, err. Buffers are per sampler and
reused: cand and the default probs buffer are valid until the next call on the same sampler.
]]
local core = require("glm53.ffi.core")
local ffi, C = core.ffi, core.C

local M = {}

local Sampler = {}
Sampler.__index = Sampler

local KEYS = { temperature = true, top_k = true, top_p = true, min_p = true, repetition_penalty = true,
               presence_penalty = true, frequency_penalty = true, seed = true, logit_bias = true,
               n_valid = true, candidates = true }

local function handle(self)
    if self._h == nil then error("sampler: used after free()", 3) end
    return self._h
end

-- Copies the numeric options of opts over the C params struct p (argument errors raise at the caller's level).
local function apply_options(p, opts, level)
    for k, v in pairs(opts) do
        if not KEYS[k] then error("sampler: unknown option '" .. tostring(k) .. "'", level) end
        if k ~= "logit_bias" and type(v) ~= "number" then
            error("sampler: option '" .. k .. "' must be a number", level)
        end
    end
    if opts.temperature ~= nil then p.temperature = opts.temperature end
    if opts.top_k ~= nil then p.top_k = opts.top_k end
    if opts.top_p ~= nil then p.top_p = opts.top_p end
    if opts.min_p ~= nil then p.min_p = opts.min_p end
    if opts.repetition_penalty ~= nil then p.repetition_penalty = opts.repetition_penalty end
    if opts.presence_penalty ~= nil then p.presence_penalty = opts.presence_penalty end
    if opts.frequency_penalty ~= nil then p.frequency_penalty = opts.frequency_penalty end
    if opts.seed ~= nil then p.seed = opts.seed end
    if opts.n_valid ~= nil then
        if type(opts.n_valid) ~= "number" or opts.n_valid % 1 ~= 0 or opts.n_valid < 0 then
            error("sampler: n_valid must be an integer >= 0", level)
        end
        p.n_valid = opts.n_valid
    end
end

local function set_bias(self, bias, level)
    if type(bias) ~= "table" then error("sampler: logit_bias must be a table {[id] = bias}", level) end
    local n = 0
    for _ in pairs(bias) do n = n + 1 end
    local ids, vals = ffi.new("int32_t[?]", math.max(n, 1)), ffi.new("float[?]", math.max(n, 1))
    local i = 0
    for id, b in pairs(bias) do
        if type(id) ~= "number" or type(b) ~= "number" then error("sampler: logit_bias maps ids to numbers", level) end
        ids[i], vals[i] = id, b
        i = i + 1
    end
    local ok, err = core.check(C.glm53_sampler_set_logit_bias(self._h, ids, vals, n))
    if not ok then error("sampler: " .. err, level) end
end

-- A new sampler over vocab_size tokens. Bad options raise.
function M.new(vocab_size, opts)
    if type(vocab_size) ~= "number" or vocab_size < 1 then error("sampler.new: vocab_size must be >= 1", 2) end
    opts = opts or {}
    if type(opts) ~= "table" then error("sampler.new: opts must be a table", 2) end
    local p = C.glm53_sampler_default_params()
    apply_options(p, opts, 3)
    local out = ffi.new("glm53_sampler *[1]")
    local ok, err = core.check(C.glm53_sampler_create(vocab_size, p, out))
    if not ok then
        if err:find("GLM53_ERR_OUT_OF_MEMORY", 1, true) then return nil, err end
        error("sampler.new: " .. err, 2)
    end
    local n_cand = opts.candidates or 64
    if n_cand < 1 then error("sampler.new: candidates must be >= 1", 2) end
    local self = setmetatable({
        _h = ffi.gc(out[0], C.glm53_sampler_free),
        vocab_size = vocab_size,
        _params = p,
        _token = ffi.new("int32_t[1]"),
        _u = ffi.new("double[1]"),
        _n = ffi.new("int32_t[1]"),
        _probs = nil,   -- float[vocab], made on first use of probs() without a buffer
        cand = { n = 0, ids = ffi.new("int32_t[?]", n_cand), logits = ffi.new("float[?]", n_cand),
                 probs = ffi.new("float[?]", n_cand), cap = n_cand },
    }, Sampler)
    self.cand.sampler = self
    if opts.logit_bias then set_bias(self, opts.logit_bias, 3) end
    return self
end

function Sampler:free()
    if self._h ~= nil then
        C.glm53_sampler_free(ffi.gc(self._h, nil))
        self._h = nil
    end
end

-- Changes filter options (the same keys as new; seed takes effect at the next reset). Bad options raise.
function Sampler:set(opts)
    local h = handle(self)
    if type(opts) ~= "table" then error("sampler:set: opts must be a table", 2) end
    if opts.candidates ~= nil then error("sampler:set: candidates is fixed at creation", 2) end
    local p = ffi.new("glm53_sampler_params", self._params)
    apply_options(p, opts, 3)
    local ok, err = core.check(C.glm53_sampler_set_params(h, p))
    if not ok then error("sampler:set: " .. err, 2) end
    self._params = p
    if opts.logit_bias then set_bias(self, opts.logit_bias, 3) end
end

-- The current options as a Lua table (without logit_bias).
function Sampler:params()
    local p = self._params
    return { temperature = p.temperature, top_k = p.top_k, top_p = p.top_p, min_p = p.min_p,
             repetition_penalty = p.repetition_penalty, presence_penalty = p.presence_penalty,
             frequency_penalty = p.frequency_penalty, seed = tonumber(p.seed), n_valid = p.n_valid,
             candidates = self.cand.cap }
end

function Sampler:greedy() return self._params.temperature < 1e-5 end   -- core/sampling.c: GREEDY_BELOW

-- Whether the sampler picks the plain argmax of the valid ids: greedy, no logit bias, no penalty (the C sampler's
-- own test: its draw needs the row's best logit only). A step's greedy output (top_k = 1 over the same n_valid,
-- chosen on the device) is then the same token.
function Sampler:plain_greedy() return C.glm53_sampler_top_needed(handle(self)) == 1 end

-- Forgets the history and restarts the RNG from the seed.
function Sampler:reset() return core.check(C.glm53_sampler_reset(handle(self))) end

-- Prompt tokens (a Lua array, or an int32_t* with count n) for the repetition penalty.
function Sampler:add_prompt(ids, n)
    local h = handle(self)
    if type(ids) == "table" then
        n = #ids
        local buf = ffi.new("int32_t[?]", math.max(n, 1))
        for i = 1, n do buf[i - 1] = ids[i] end
        ids = buf
    elseif type(n) ~= "number" then
        error("sampler:add_prompt: give a Lua array, or a pointer and a count", 2)
    end
    return core.check(C.glm53_sampler_add_prompt(h, ids, n))
end

function Sampler:accept(id) return core.check(C.glm53_sampler_accept(handle(self), id)) end
function Sampler:rewind(n) return core.check(C.glm53_sampler_rewind(handle(self), n)) end
function Sampler:n_accepted() return tonumber(C.glm53_sampler_n_accepted(handle(self))) end

local function need_ptr(x, what)
    if type(x) ~= "cdata" then error("sampler:" .. what .. ": expects a float* row", 3) end
end

-- A token drawn from the filtered distribution of a logits row (argmax when greedy).
function Sampler:sample(logits)
    need_ptr(logits, "sample")
    local ok, err = core.check(C.glm53_sampler_sample(handle(self), logits, self._token))
    if not ok then return nil, err end
    return self._token[0]
end

-- How many of a row's best logits a draw needs instead of the whole row (top_k + 1; 1 when greedy), or 0 when
-- the settings need the whole row (a logit bias, a penalty, sampling without a top_k below 64): for batches made
-- with m:batch({ top_k = k, n_valid = the sampler's n_valid }), whose steps choose each row's best k logits on
-- the device and bring only those to the host.
function Sampler:top_needed() return C.glm53_sampler_top_needed(handle(self)) end

-- The token sample(row) would draw, from the row's n best logits (int32_t* ids, float* logits, best first, the
-- lower id on equal values: batch:top(i) gives them), n >= top_needed() > 0. nil, err when the settings need the
-- whole row (top_needed() == 0) or the candidates are too few, unordered or outside n_valid.
function Sampler:sample_top(ids, logits, n)
    if type(ids) ~= "cdata" or type(logits) ~= "cdata" then
        error("sampler:sample_top: expects int32_t* ids and float* logits", 2)
    end
    local ok, err = core.check(C.glm53_sampler_sample_top(handle(self), ids, logits, n, self._token))
    if not ok then return nil, err end
    return self._token[0]
end

-- The filtered distribution of a logits row into out (a float[vocab]; default: the sampler's own buffer).
-- temperature, if given, replaces the sampler's for this call (same bias, penalties and filters): the
-- temperature-1 confidence of a greedy draft, say.
function Sampler:probs(logits, out, temperature)
    need_ptr(logits, "probs")
    local h = handle(self)
    if out == nil then
        self._probs = self._probs or ffi.new("float[?]", self.vocab_size)
        out = self._probs
    end
    local status
    if temperature ~= nil then
        if type(temperature) ~= "number" then error("sampler:probs: temperature must be a number", 2) end
        local p = self._scratch_params or ffi.new("glm53_sampler_params")
        self._scratch_params = p
        ffi.copy(p, self._params, ffi.sizeof(p))
        p.temperature = temperature
        local ok, err = core.check(C.glm53_sampler_set_params(h, p))
        if not ok then error("sampler:probs: " .. err, 2) end
        status = C.glm53_sampler_probs(h, logits, out)
        C.glm53_sampler_set_params(h, self._params)
    else
        status = C.glm53_sampler_probs(h, logits, out)
    end
    local ok, err = core.check(status)
    if not ok then return nil, err end
    return out
end

-- A token drawn from a probability row (float[vocab]).
function Sampler:sample_probs(probs)
    need_ptr(probs, "sample_probs")
    local ok, err = core.check(C.glm53_sampler_sample_probs(handle(self), probs, self._token))
    if not ok then return nil, err end
    return self._token[0]
end

-- A token drawn from normalise(max(0, p - q)): the resample after a rejected draft.
function Sampler:sample_residual(p, q)
    need_ptr(p, "sample_residual")
    need_ptr(q, "sample_residual")
    local ok, err = core.check(C.glm53_sampler_sample_residual(handle(self), p, q, self._token))
    if not ok then return nil, err end
    return self._token[0]
end

-- The candidate set of a logits row (at most max_n, default and cap: the candidates option). The table is the
-- sampler's own and is refilled by the next call.
function Sampler:candidates(logits, max_n)
    need_ptr(logits, "candidates")
    local cand = self.cand
    max_n = max_n or cand.cap
    if max_n < 1 or max_n > cand.cap then error("sampler:candidates: max_n must be in [1, " .. cand.cap .. "]", 2) end
    local ok, err = core.check(C.glm53_sampler_candidates(handle(self), logits, max_n, cand.ids, cand.logits,
                                                          cand.probs, self._n))
    if not ok then return nil, err end
    cand.n = self._n[0]
    return cand
end

-- The next uniform number in [0, 1) of the sampler's seeded stream.
function Sampler:uniform()
    C.glm53_sampler_uniform(handle(self), self._u)
    return self._u[0]
end

-- Calls a policy (function or table with :pick) on a candidate set; checks what it returns.
function M.call_policy(policy, cand, ctx, vocab_size)
    local id, why
    if type(policy) == "function" then id, why = policy(cand, ctx) else id, why = policy:pick(cand, ctx) end
    if id == nil then return nil, why or "policy stopped" end
    if type(id) ~= "number" or id ~= math.floor(id) or id < 0 or id >= vocab_size then
        error("sampler: the policy returned " .. tostring(id) .. ", not a token id in [0, " .. vocab_size .. ")", 3)
    end
    return id
end

-- The policy's token for a logits row: candidates, then policy(cand, ctx). Returns id, or nil and the reason the
-- policy stopped (or a runtime error).
function Sampler:pick(logits, policy, ctx)
    local cand, err = self:candidates(logits)
    if not cand then return nil, err end
    return M.call_policy(policy, cand, ctx, self.vocab_size)
end

-- A categorical draw for policies: index (1-based) into a Lua array of non-negative weights, with u in [0, 1).
function M.categorical(weights, u)
    local total = 0
    for i = 1, #weights do total = total + weights[i] end
    local target, run = u * total, 0
    for i = 1, #weights do
        run = run + weights[i]
        if run > target then return i end
    end
    for i = #weights, 1, -1 do if weights[i] > 0 then return i end end
    error("sampler.categorical: all weights are zero", 2)
end

return M
