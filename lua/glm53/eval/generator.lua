--[[
glm53.eval.generator - text generation requests over the generation driver (glm53.generation.driver): several
at once (a request joins between rounds as soon as a stream is free), stop strings through the tokenizer's
streaming detokeniser, stop tokens, and a result per request with token counts and timings. The eval runner
drives it to the end with :run(); an event loop can call :step() between I/O.

    local generator = require("glm53.eval.generator")
    local g = assert(generator.new(m, tok, { max_seqs = 4 }))
    local ids = assert(generator.encode(tok, { { role = "user", content = "hi" } }))   -- chat template, then ids
    -- prompts with pictures: local p = assert(generator.prompt(m, tok, messages)), then submit p.ids, p.embeddings, p.use
    g:submit({ ids = ids, max_tokens = 64, stop = { "Question:" }, seed = 1 }, {
        on_delta = function(text, job) io.write(text) end,          -- optional: text as it is decoded
        on_tokens = function(n, job) end,                           -- optional: n new tokens this round
        on_done = function(r, job) print(r.finish_reason, r.tokens_out, r.text) end,
    })
    assert(g:run())

new(m, tok, opts): opts.max_seqs (streams at once, default 1), opts.k (MTP drafts per round, default 0),
opts.sampling (sampler options, default greedy; n_valid defaults to tok:n_vocab(), so the padded embedding ids
past the tokenizer are never produced), opts.stop_ids (default generator.stop_ids(m, tok)),
opts.skip_special_tokens (default true, as OpenAI-compatible servers decode).

A result r: text (stop string excluded), ids (generated ids, the one that ended it included), finish_reason
("stop": a stop id or a stop string; "length": max_tokens reached), stop (the stop string, or nil), tokens_in,
tokens_out (= #ids), t_submit, t_start (admitted), t_first (first token), t_end (clock.now() seconds), stats (the
stream's speculative-decoding counters, glm53.generation.driver), error (nil, or why the request failed: then
text is ""). Tokens a round committed after the one that completed a stop string are dropped from ids (the
same ids whatever k). Argument errors raise; a failed step fails the requests of that round (the driver is
replaced) and :step() returns nil, err.
]]
local chat = require("glm53.chat.template")
local clock = require("glm53.util.clock")
local driver_mod = require("glm53.generation.driver")
local cjson = require("cjson")
local file = require("glm53.util.file")

local M = {}

local Generator = {}
Generator.__index = Generator

-- The token names GLM chat models end a turn with (generation_config.json's eos_token_id of GLM-4.5 and later:
-- <|endoftext|>, <|user|>, <|observation|>).
M.STOP_TOKENS = { "<|endoftext|>", "<|user|>", "<|observation|>" }

-- The stop ids of a model and tokenizer: M.STOP_TOKENS found in the tokenizer, and the checkpoint's
-- generation_config.json eos_token_id (a number or a list) when it has one.
function M.stop_ids(m, tok)
    local ids, seen = {}, {}
    local function add(id)
        if type(id) == "number" and not seen[id] then ids[#ids + 1], seen[id] = id, true end
    end
    for _, name in ipairs(M.STOP_TOKENS) do add(tok:token_id(name)) end
    local text = m.path and file.read_file(m.path .. "/generation_config.json")
    local ok, cfg = pcall(cjson.decode, text or "")
    if ok and type(cfg) == "table" then
        local eos = cfg.eos_token_id
        if type(eos) == "table" then for _, id in ipairs(eos) do add(id) end else add(eos) end
    end
    table.sort(ids)
    return ids
end

-- True when a chat message list has a content part other than text (images, video).
local function has_media(messages)
    for _, msg in ipairs(messages) do
        if type(msg.content) == "table" then
            for _, part in ipairs(msg.content) do
                if type(part) == "table" and part.type ~= "text" then return true end
            end
        end
    end
    return false
end
M.has_media = has_media

-- The prompt ids of a task prompt: chat messages through the model's chat template (opts: chat.render's), or
-- text as it is. nil, err for a template failure or media parts (their embedding rows need the model:
-- generator.prompt).
function M.encode(tok, prompt, opts)
    local text = prompt
    if type(prompt) == "table" then
        if has_media(prompt) then
            return nil, "the prompt has image or video parts: their embedding rows need the model (generator.prompt)"
        end
        local err
        text, err = chat.render(prompt, opts)
        if not text then return nil, "chat template: " .. err end
    elseif type(prompt) ~= "string" then
        error("generator.encode: prompt must be chat messages or text", 2)
    end
    return tok:encode(text)
end

-- A task prompt ready to submit: { ids (a Lua array), embeddings, use } where embeddings (float [n, hidden]) and
-- use (uint8_t [n]) are the picture rows of chat messages with image or video parts (nil for other prompts): the
-- parts' sources are preprocessed and run through m's vision tower, their rows placed at the chat template's
-- placeholders (glm53.engine.vision.chat). opts: chat.render's (tools, ...). nil, err for a template failure, an
-- unreadable picture or a model without a vision tower.
function M.prompt(m, tok, prompt, opts)
    if type(prompt) ~= "table" or not has_media(prompt) then
        local ids, err = M.encode(tok, prompt, opts)
        if not ids then return nil, err end
        return { ids = ids }
    end
    if m.config.has_vision == 0 then return nil, "the prompt has image or video parts and " .. tostring(m.path) ..
                                                 " has no vision tower" end
    local vision = require("glm53.engine.vision")
    local p, err = vision.chat(m, tok, prompt, opts)
    if not p then return nil, err end
    local ids = {}
    for i = 0, p.n - 1 do ids[i + 1] = p.ids[i] end
    return { ids = ids, embeddings = p.embeddings, use = p.use }
end

local function new_driver(self)
    return driver_mod.new(self.m, { k = self.k, sampling = self.sampling, max_seqs = self.max_seqs })
end

function M.new(m, tok, opts)
    if type(m) ~= "table" or not m.vocab_size then error("generator.new: m must be a model", 2) end
    if type(tok) ~= "table" or not tok.stream then error("generator.new: tok must be a tokenizer", 2) end
    opts = opts or {}
    local sampling = {}
    for k, v in pairs(opts.sampling or {}) do sampling[k] = v end
    if sampling.n_valid == nil then sampling.n_valid = math.min(tok:n_vocab(), m.vocab_size) end
    local self = setmetatable({
        m = m, tok = tok, k = opts.k or 0, sampling = sampling, max_seqs = opts.max_seqs or 1,
        stop_ids = opts.stop_ids or M.stop_ids(m, tok),
        skip_special = opts.skip_special_tokens ~= false,
        queue = {}, qhead = 1, qtail = 0, active = {},   -- queue[qhead .. qtail]: waiting jobs
    }, Generator)
    local d, err = new_driver(self)
    if not d then return nil, err end
    self.d = d
    return self
end

-- Queues a request: req.ids (prompt ids), req.max_tokens (default 256), req.stop (stop strings), req.seed,
-- req.stop_ids (default the generator's; {} ignores end-of-turn tokens), req.embeddings and req.use (picture
-- rows of the prompt, as generator.prompt gives them). cb.on_done(result, job) is called
-- once; cb.on_delta(text, job) with each piece of text; cb.on_tokens(n, job) after each round that committed n
-- tokens of the request (before their text). Returns the job.
function Generator:submit(req, cb)
    if type(req) ~= "table" or type(req.ids) ~= "table" or #req.ids == 0 then
        error("generator:submit: req.ids must be a non-empty array of token ids", 2)
    end
    if type(cb) ~= "table" or type(cb.on_done) ~= "function" then error("generator:submit: cb.on_done is required", 2) end
    local job = { req = req, cb = cb, t_submit = clock.now(), text = {} }
    self.qtail = self.qtail + 1
    self.queue[self.qtail] = job
    return job
end

-- Requests queued or running.
function Generator:pending()
    return (self.qtail - self.qhead + 1) + #self.active
end

local function complete(job, result)
    result.t_submit, result.t_start, result.t_first, result.t_end = job.t_submit, job.t_start, job.t_first, clock.now()
    result.tokens_in = #job.req.ids
    result.ids = result.ids or {}
    result.tokens_out = #result.ids
    result.text = result.text or table.concat(job.text)
    job.cb.on_done(result, job)
end

local function emit(job, text)
    if text ~= "" then
        job.text[#job.text + 1] = text
        if job.cb.on_delta then job.cb.on_delta(text, job) end
    end
end

function Generator:_admit()
    while self.qhead <= self.qtail and self.d:active() < self.max_seqs do
        local job = self.queue[self.qhead]
        self.queue[self.qhead] = nil
        self.qhead = self.qhead + 1
        local req = job.req
        job.t_start = clock.now()
        local s, err = self.d:add(req.ids, { max_new = req.max_tokens or 256, seed = req.seed,
                                             stop_ids = req.stop_ids or self.stop_ids,
                                             embeddings = req.embeddings, use = req.use })
        if not s then
            complete(job, { finish_reason = "error", error = err })
        else
            job.stream, job.seen = s, 0
            job.det = self.tok:stream({ skip_special_tokens = self.skip_special, stop = req.stop })
            self.active[#self.active + 1] = job
        end
    end
    if self.qhead > self.qtail then self.queue, self.qhead, self.qtail = {}, 1, 0 end
end

-- Feeds a job's new tokens to its detokeniser; returns its result when it is done, else nil.
function Generator:_advance(job)
    local s, det = job.stream, job.det
    local gen = s.generated
    if #gen > job.seen then
        job.t_first = job.t_first or clock.now()
        if job.cb.on_tokens then job.cb.on_tokens(#gen - job.seen, job) end
    end
    for i = job.seen + 1, #gen do
        local text, stopped, which = det:push(gen[i])
        if text == nil then return { finish_reason = "error", error = stopped } end
        emit(job, text)
        if stopped then
            if not s.done then self.d:finish(s, "stop") end
            local ids = {}
            for j = 1, i do ids[j] = gen[j] end
            return { finish_reason = "stop", stop = which, ids = ids, stats = s.stats }
        end
    end
    job.seen = #gen
    if not s.done then return nil end
    local text, stopped, which = det:finish()
    emit(job, text)
    local ids = {}
    for j = 1, #gen do ids[j] = gen[j] end
    return { finish_reason = stopped and "stop" or s.finish_reason, stop = which, ids = ids, stats = s.stats }
end

-- Admits waiting requests and runs one round of the driver. Returns true, or nil, err when the round failed
-- (its requests are completed with the error).
function Generator:step()
    self:_admit()
    if #self.active == 0 then return true end
    local n, err = self.d:round()
    if not n then
        local failed = self.active
        self.active = {}
        self.d:free()
        local d, derr = new_driver(self)
        self.d = d
        for _, job in ipairs(failed) do complete(job, { finish_reason = "error", error = err }) end
        if not d then return nil, derr end
        return nil, err
    end
    local still = {}
    for _, job in ipairs(self.active) do
        local result = self:_advance(job)
        if result then complete(job, result) else still[#still + 1] = job end
    end
    self.active = still
    return true
end

-- Steps until no request is queued or running. Returns true, or nil, err of the first failed round (the
-- other requests still run).
function Generator:run()
    local first_err
    while self:pending() > 0 do
        local ok, err = self:step()
        if not ok and not first_err then first_err = err end
    end
    if first_err then return nil, first_err end
    return true
end

-- The driver's speculative-decoding counters summed over finished streams (glm53.generation.driver).
function Generator:stats()
    return self.d.stats
end

function Generator:free()
    if self.d then self.d:free() self.d = nil end
end

return M
