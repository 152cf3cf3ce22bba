--[[
glm53.server.scheduler - continuous batching for the server: one generation driver (glm53.generation.driver,
prefill = "rounds") whose steps run on the model's worker thread (glm53.engine.async), a bounded FIFO queue,
prefix caching through forks of dedicated prefix sequences (glm53.server.prefix_cache), cancellation, metrics.

    local sched = scheduler.new(m, { uv = uv, max_num_seqs = 16, max_queue = 256, capacity = 8197, spec_k = 4,
                                     n_valid = tok:n_vocab(), registry = reg })
    local job, err = sched:submit({
        prompt = ids,                          -- Lua array of token ids
        boundary = 57,                         -- optional: keep the first 57 tokens as a prefix for later requests
        media = { img },                       -- optional: glm53.engine.vision items for the <|image|> rows
        prompt_logprobs = 0,                   -- optional (the first choice computes them)
        choices = { { max_new = 64, seed = 1, sampling = { temperature = 0.8 }, stop_ids = { 154820 },
                      capture = { experts = true } } },     -- capture: s.routed_experts, s.indexer_topk (driver)
        on_tokens = function(job, i, s, from, to) ... end,   -- s.generated[from .. to] are new, s.logprobs too
        on_finish = function(job, i, s) ... end,             -- s.finish_reason
        on_done = function(job) ... end,
        on_error = function(job, status, message) ... end,
    })
    job:cancel()                -- client gone: its sequences are freed (at the end of the round in flight)
    job:end_choice(i, "stop")   -- a stop string ended choice i

How it runs. A coroutine loops: admit queued jobs while the running batch has room (max_num_seqs streams; one per
choice), run one driver round, deliver the new tokens to their jobs. A round is a few steps (MTP drafting, one
target step with every decode row and prefill chunks of at most `chunk` rows in all); each is submitted to the
worker and the coroutine yields until its completion fd fires, so the luv loop keeps accepting, streaming and
answering /health meanwhile. Sequences are created, forked and images encoded only inside the coroutine between steps (never while
a step runs); freeing one is safe at any time. Requests join and leave the batch between rounds.

Choice i of a job is one stream with its own sampler (seeded with choices[i].seed), policy and speculative depth,
so a request's tokens do not depend on what else runs (the CPU backend is batch-invariant). Argument errors
raise; submit returns nil, "queue full" when max_queue jobs wait.
]]
local async = require("glm53.engine.async")
local driver = require("glm53.generation.driver")
local prefix_cache = require("glm53.server.prefix_cache")

local M = {}

local Sched = {}
Sched.__index = Sched
local Job = {}
Job.__index = Job

local function noop() end

-- opts: uv (luv), max_num_seqs (16), max_queue (256), chunk (prefill rows per step, 256), spec_k (most drafts per
-- round any request may ask for; 0 = no speculative decoding), capacity (tokens every sequence reserves),
-- n_valid (ids the samplers may produce), prefix_cache_bytes, registry (glm53.server.metrics), log(level, msg).
function M.new(m, opts)
    if type(opts) ~= "table" or type(opts.uv) ~= "table" then error("scheduler.new: opts.uv (luv) is required", 2) end
    local self = setmetatable({
        m = m, uv = opts.uv,
        max_num_seqs = opts.max_num_seqs or 16, max_queue = opts.max_queue or 256,
        chunk = opts.chunk or 256, spec_k = opts.spec_k or 0, capacity = opts.capacity or 4096,
        n_valid = opts.n_valid, log = opts.log or function(level, msg) io.stderr:write(level, ": ", msg, "\n") end,
        queue = {}, jobs = {}, next_id = 0, idle = false,
        cache = prefix_cache.new({ bytes = opts.prefix_cache_bytes }),
        clock = function() return opts.uv.hrtime() / 1e9 end,
    }, Sched)
    if self.spec_k > 0 and m:n_mtp() == 0 then error("scheduler.new: spec_k > 0 needs a model with MTP layers", 2) end
    local stepper, err = async.new(m, opts.uv, { on_error = function(e) self.log("error", "step callback: " .. e) end })
    if not stepper then error("scheduler.new: " .. tostring(err), 2) end
    self.stepper = stepper
    self:_metrics(opts.registry)
    self:_new_driver()
    self.kick_timer = opts.uv.new_timer()
    self.co = self:_coroutine()
    self:_resume()
    return self
end

function Sched:_metrics(reg)
    if not reg then
        self.mx = nil
        return
    end
    local mx = {}
    reg:gauge("vllm:num_requests_running", "Requests in the running batch.", function() return #self.jobs end)
    reg:gauge("vllm:num_requests_waiting", "Requests waiting in the queue.", function() return self:waiting() end)
    mx.prompt = reg:counter("vllm:prompt_tokens_total", "Prompt tokens of admitted requests.")
    mx.generation = reg:counter("vllm:generation_tokens_total", "Generated tokens.")
    mx.success = reg:counter("vllm:request_success_total", "Finished requests by finish reason.")
    mx.ttft = reg:histogram("vllm:time_to_first_token_seconds", "Time from arrival to the first token.")
    mx.tpot = reg:histogram("vllm:time_per_output_token_seconds", "Mean time per output token after the first.")
    mx.e2e = reg:histogram("vllm:e2e_request_latency_seconds", "Time from arrival to the last token.")
    mx.queue_time = reg:histogram("vllm:request_queue_time_seconds", "Time spent waiting for a batch slot.")
    mx.drafts = reg:counter("vllm:spec_decode_num_drafts_total", "Speculative rounds that proposed drafts.")
    mx.draft_tokens = reg:counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.")
    mx.accepted = reg:counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.")
    mx.accepted_pos = reg:counter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                  "Draft tokens accepted per draft position (0-based).")
    mx.queries = reg:counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.")
    mx.hits = reg:counter("vllm:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.")
    mx.hit_requests = reg:counter("glm53:prefix_cache_hit_requests_total", "Streams that started from a prefix.")
    mx.rejected = reg:counter("glm53:requests_rejected_total", "Requests refused by the queue limit.")
    mx.aborted = reg:counter("glm53:requests_aborted_total", "Requests cancelled (client gone).")
    reg:gauge("glm53:prefix_cache_entries", "Prefix sequences kept.", function() return self.cache:count() end)
    reg:gauge("glm53:prefix_cache_bytes", "Cache bytes of the kept prefixes.", function() return self.cache.bytes end)
    reg:gauge("glm53:cache_bytes", "Cache bytes reserved by live sequences.", function()
        return self.m._h ~= nil and self.m:cache_bytes() or 0
    end)
    self.mx = mx
end

function Sched:_new_driver()
    local sched = self
    local function step(batch, mtp)
        local co = coroutine.running()
        local tag, err = sched.stepper:step(batch, function(ok, e) sched:_resume(co, ok, e) end, mtp)
        if not tag then return nil, err end
        -- While the worker computes, the loop hands out the previous round's tokens (detokenising, parsing,
        -- encoding and writing them): that work overlaps the step instead of adding to it.
        sched:_deliver()
        return coroutine.yield()
    end
    self.d = assert(driver.new(self.m, { k = self.spec_k, max_seqs = self.max_num_seqs, chunk = self.chunk,
                                         prefill = "rounds", step = step, sampling = { n_valid = self.n_valid } }))
end

---------------------------------------------------------------------------------------------------------------
-- The loop
---------------------------------------------------------------------------------------------------------------
function Sched:_coroutine()
    return coroutine.create(function()
        local ok, err = xpcall(function() self:_loop() end, debug.traceback)
        if not ok then error(err, 0) end
    end)
end

-- Resumes the loop coroutine (from a step completion, a kick, or start). `co` guards against completions of a
-- coroutine that was replaced after a failure.
function Sched:_resume(co, ...)
    if co and co ~= self.co then return end
    local ok, err = coroutine.resume(self.co, ...)
    if not ok then
        self.log("error", "scheduler: " .. tostring(err))
        self:_fail_all("internal error: " .. tostring(err):match("^[^\n]*"))
        self.co = self:_coroutine()
        ok, err = coroutine.resume(self.co)
        if not ok then self.log("error", "scheduler restart: " .. tostring(err)) end
    end
end

function Sched:_kick()
    if not self.idle or self.kicked then return end
    self.kicked = true
    self.kick_timer:start(0, 0, function()
        self.kicked = false
        if self.idle then self:_resume(self.co) end
    end)
end

-- A round's first step delivers the tokens of the round before (see the step function); what the last round
-- committed is delivered here once no round follows.
function Sched:_loop()
    while true do
        self:_admit()
        if self.d:active() == 0 then
            self:_deliver()
            if self.d:active() == 0 and #self.queue == 0 then
                if self.closed then return end
                self.idle = true
                coroutine.yield()
                self.idle = false
            end
        else
            local n, err = self.d:round()
            if not n then
                self:_deliver()
                self:_fail_all(err)
            end
        end
    end
end

-- Every running job fails with err; the driver (unusable after a failed round) and the prefix cache start over.
function Sched:_fail_all(err)
    local jobs = self.jobs
    self.jobs = {}
    for _, job in ipairs(jobs) do self:_error(job, 500, err) end
    self.d:free()
    self.cache:clear()
    self:_new_driver()
end

---------------------------------------------------------------------------------------------------------------
-- Jobs
---------------------------------------------------------------------------------------------------------------
-- Queues a job (see the header for req). Returns the job, or nil and "queue full".
function Sched:submit(req)
    if type(req) ~= "table" or type(req.prompt) ~= "table" or #req.prompt < 1 then
        error("scheduler:submit: req.prompt must be a non-empty list of ids", 2)
    end
    if type(req.choices) ~= "table" or #req.choices < 1 then error("scheduler:submit: req.choices is empty", 2) end
    if #req.choices > self.max_num_seqs then
        error("scheduler:submit: " .. #req.choices .. " choices exceed max_num_seqs " .. self.max_num_seqs, 2)
    end
    if self:waiting() >= self.max_queue then
        if self.mx then self.mx.rejected:inc() end
        return nil, "queue full"
    end
    self.next_id = self.next_id + 1
    local job = setmetatable({
        sched = self, id = self.next_id, req = req, state = "queued", streams = {}, delivered = {}, finished = {},
        n_finished = 0, t_arrival = self.clock(),
        on_tokens = req.on_tokens or noop, on_finish = req.on_finish or noop, on_done = req.on_done or noop,
        on_error = req.on_error or noop,
    }, Job)
    self.queue[#self.queue + 1] = job
    self:_kick()
    return job
end

-- Runs a job callback; an error in it ends the job with a 500 for its client (its on_error; if that fails too,
-- the job is cancelled) and the loop goes on. A request must never be left without an answer.
function Sched:_call(job, fn, ...)
    local ok, err = xpcall(fn, debug.traceback, job, ...)
    if not ok then
        self.log("error", "request callback: " .. tostring(err))
        if fn ~= job.on_error then
            self:_error(job, 500, "internal server error: " .. tostring(err):match("^[^\n]*"):gsub("^[^:]*:%d+: ", ""))
        end
        job:cancel()
    end
end

function Sched:_error(job, status, message)
    if job.state == "cancelled" or job.state == "done" then return end
    for _, s in ipairs(job.streams) do
        if not s.done then self.d:finish(s, "error") end
    end
    job.state = "done"
    self:_call(job, job.on_error, status, message)
end

-- Moves queued jobs into the batch while there is room for all of a job's choices (FIFO: a large job waits at the
-- head rather than being overtaken).
function Sched:_admit()
    local d = self.d
    while #self.queue > 0 do
        local job = self.queue[1]
        local need = #job.req.choices
        if d:active() + need > self.max_num_seqs then return end
        table.remove(self.queue, 1)
        self:_start(job)
    end
end

function Sched:_start(job)
    local req, d, m = job.req, self.d, self.m
    local ids = req.prompt
    local now = self.clock()
    if self.mx then self.mx.queue_time:observe(now - job.t_arrival) end
    local emb, use
    if req.media and #req.media > 0 then
        local vision = require("glm53.engine.vision")
        local images, videos = {}, {}
        for _, it in ipairs(req.media) do
            if it.kind == "image" then images[#images + 1] = it else videos[#videos + 1] = it end
        end
        local f, err = vision.fill(m, ids, #ids, images, videos)
        if not f then return self:_error(job, 400, err) end
        emb, use = f.embeddings, f.use
        job.media_rows = f   -- keeps the buffers alive while the streams prefill
    end
    local n_mtp = m:n_mtp()
    for i, c in ipairs(req.choices) do
        local k = c.k or 0
        local layers = math.min(k, n_mtp)
        local pre = not emb and self.cache:lookup(ids, layers) or nil
        if self.mx then
            self.mx.queries:inc(#ids)
            if pre then
                self.mx.hits:inc(pre.L)
                self.mx.hit_requests:inc()
            end
        end
        local opts = {
            max_new = c.max_new, min_new = c.min_new, seed = c.seed, stop_ids = c.stop_ids, sampling = c.sampling,
            k = k, policy = c.new_policy and c.new_policy() or nil, draft = c.new_draft and c.new_draft() or nil,
            capacity = self.capacity, prefix = pre, logprobs = c.logprobs,
            prompt_logprobs = i == 1 and req.prompt_logprobs or nil, embeddings = emb, use = use, capture = c.capture,
        }
        local b = req.boundary
        if i == 1 and b and not emb and b <= #ids - 1 and (not pre or pre.L < b) and not self.cache:has(ids, b, layers) then
            local cache = self.cache
            opts.boundary = b
            opts.on_boundary = function(s)
                local snap, err = d:snapshot(s)
                if snap then cache:insert(snap) else self.log("warn", "prefix snapshot: " .. tostring(err)) end
            end
        end
        local ok, s = pcall(d.add, d, ids, opts)
        if not ok then return self:_error(job, 400, tostring(s):gsub("^[^:]*:%d+: ", "")) end
        job.streams[i], job.delivered[i] = s, 0
    end
    if self.mx then self.mx.prompt:inc(#ids) end
    job.state = "running"
    job.t_start = now
    self.jobs[#self.jobs + 1] = job
end

-- Hands every running job its new tokens and finished choices; retires finished jobs.
function Sched:_deliver()
    if self.delivering then return end
    self.delivering = true
    local ok, err = pcall(self._deliver_jobs, self)
    self.delivering = false
    if not ok then error(err, 0) end
end

function Sched:_deliver_jobs()
    local keep = {}
    local now = self.clock()
    for _, job in ipairs(self.jobs) do
        if job.state == "running" then
            for i, s in ipairs(job.streams) do
                local n = #s.generated
                if n > job.delivered[i] and job.state == "running" and not job.finished[i] then
                    local from = job.delivered[i] + 1
                    job.delivered[i] = n
                    job.t_first = job.t_first or now
                    job.t_last = now
                    self:_call(job, job.on_tokens, i, s, from, n)
                end
                if s.done and not job.finished[i] and job.state == "running" then
                    job.finished[i] = true
                    job.n_finished = job.n_finished + 1
                    if s.finish_reason == "error" and s.error then
                        self:_error(job, 500, s.error)
                    else
                        self:_call(job, job.on_finish, i, s)
                    end
                end
            end
            if job.state == "running" and job.n_finished == #job.streams then
                job.state = "done"
                self:_finished(job, now)
                self:_call(job, job.on_done)
            end
        end
        if job.state == "running" then keep[#keep + 1] = job end
    end
    self.jobs = keep
end

function Sched:_finished(job, now)
    local mx = self.mx
    if not mx then return end
    local tokens = 0
    for i, s in ipairs(job.streams) do
        tokens = tokens + job.delivered[i]
        local st = s.stats
        mx.drafts:inc(st.spec_decode_num_drafts)
        mx.draft_tokens:inc(st.spec_decode_num_draft_tokens)
        mx.accepted:inc(st.spec_decode_num_accepted_tokens)
        -- every position the stream could draft gets its series, accepted or not (as vLLM's counter has them)
        for p, a in ipairs(st.spec_decode_num_accepted_tokens_per_pos) do
            mx.accepted_pos:inc(a, { position = tostring(p - 1) })
        end
    end
    mx.generation:inc(tokens)
    mx.success:inc(1, { finished_reason = job.finish_reason or job.streams[1].finish_reason or "stop" })
    if job.t_first then
        mx.ttft:observe(job.t_first - job.t_arrival)
        local n = job.delivered[1]
        if n > 1 then mx.tpot:observe((job.t_last - job.t_first) / (n - 1)) end
    end
    mx.e2e:observe(now - job.t_arrival)
end

-- Cancels a job: queued ones leave the queue, running ones free their sequences (at the end of a round in
-- flight). No callback runs after this.
function Job:cancel()
    local sched = self.sched
    if self.state == "queued" then
        for i, j in ipairs(sched.queue) do
            if j == self then table.remove(sched.queue, i) break end
        end
    elseif self.state == "running" then
        for _, s in ipairs(self.streams) do
            if not s.done then sched.d:finish(s, "cancelled") end
        end
        if sched.mx then sched.mx.aborted:inc() end
    else
        return
    end
    self.state = "cancelled"
end

-- Ends choice i early (a stop string was reached); its on_finish follows with s.finish_reason = reason.
function Job:end_choice(i, reason)
    local s = self.streams[i]
    if s and not s.done then self.sched.d:finish(s, reason or "stop") end
end

-- Queued jobs that the next admission cannot take (those at the head that fit in the free slots will run at once).
function Sched:waiting()
    local free, n = self.max_num_seqs - self.d:active(), #self.queue
    for _, job in ipairs(self.queue) do
        free = free - #job.req.choices
        if free < 0 then break end
        n = n - 1
    end
    return n
end

-- Jobs waiting, and running.
function Sched:counts() return self:waiting(), #self.jobs end

-- Stops after the running jobs finish (queued jobs are still admitted). Closes the stepper once idle.
function Sched:close()
    self.closed = true
    for _, job in ipairs(self.queue) do job:cancel() end
    if self.idle then self:_resume(self.co) end
    self.kick_timer:close()
    self.stepper:close()
    self.cache:clear()
end

return M
