--[[
glm53.bench.serve - a load generator for OpenAI-compatible servers (ours, vLLM, SGLang) with the definitions of
vLLM's serving benchmark (vllm/benchmarks/serve.py, `vllm bench serve`; earlier benchmarks/benchmark_serving.py),
so numbers taken here can stand next to numbers taken there. scripts/bench_serve.lua is its command line;
docs/benchmarking.md is the protocol.

    local serve = require("glm53.bench.serve")
    local result = assert(serve.run({ server = "http://127.0.0.1:8000", prompts = serve.random_prompts(100, 64, 0),
                                      max_tokens = 128, max_concurrency = 8, request_rate = math.huge }))
    local m = serve.metrics(result.outputs, result.duration, { goodput = { ttft = 500, tpot = 50 } })
    print(m.request_throughput, m.output_throughput, m.ttft_ms.p99, m.request_goodput)

Per request (an output of run): success, error, prompt_len and output_tokens (the server's usage, with
stream_options.include_usage; without it, the number of streamed chunks that carried a choice), start_time
(just before the request is written), ttft (first chunk with a choice - start), itl (gaps between successive
such chunks), latency (the last such chunk - start: vLLM's end of a request; the usage chunk does not count).

metrics(outputs, duration, opts), as vLLM's calculate_metrics:
  completed / failed; total_input, total_output (successful requests)
  tpot per request with output_tokens > 1: (latency - ttft) / (output_tokens - 1)
  itl: pooled over all requests; ttft, e2el (= latency): per request
  request_throughput = completed / duration; output_throughput = total_output / duration;
  total_token_throughput = (total_input + total_output) / duration; duration = benchmark start to last response
  request_goodput = requests meeting every SLO given (opts.goodput = { ttft =, tpot =, e2el = } in ms; a request
    with one output token has tpot 0 there) / duration
  for ttft, tpot, itl, e2el (in ms): mean, median, std (numpy's population std), p50, p90, p99 (numpy's linear
    percentile, stats.percentile; opts.percentiles changes the list)
  max_concurrency_observed: the most requests in flight at once (a sweep over [start, end) intervals)

Arrivals (serve.arrivals) follow vLLM's get_request: request_rate = inf sends everything at once; otherwise gaps
are Gamma(shape = burstiness, scale = 1 / (rate * burstiness)) draws (burstiness 1 = Poisson, inf = a fixed
rate), accumulated and rescaled so the last request is due at n / rate. max_concurrency bounds the requests in
flight (a request past its arrival time waits for a free slot, as vLLM's semaphore does). The random stream is
glm53.report.stats.rng (PCG32), not numpy's: same distribution, other draws.

run_ab(opts) is the paired A/B mode: each prompt goes to A and to B, one after the other, in alternating order
(A first for even prompts, B first for odd ones) so that drift hits both alike; paired(...) gives per metric the
median of the differences B - A with a percentile bootstrap 95% interval (seeded, 10,000 resamples).
]]
local uv = require("luv")
local clock = require("glm53.util.clock")
local stats = require("glm53.report.stats")
local http_client = require("glm53.eval.http_client")
local openai = require("glm53.eval.openai")

local M = {}

---------------------------------------------------------------------------------------------------------------
-- Metrics
---------------------------------------------------------------------------------------------------------------
local MS = 1000

-- The output-token count of an output: usage when the server sent it, else the chunks with a choice.
local function output_len(o)
    return o.output_tokens or o.chunks or 0
end

function M.metrics(outputs, duration, opts)
    if type(outputs) ~= "table" then error("serve.metrics: outputs must be an array", 2) end
    if type(duration) ~= "number" or duration <= 0 then error("serve.metrics: duration must be > 0 seconds", 2) end
    opts = opts or {}
    local goodput = opts.goodput or {}
    for k, v in pairs(goodput) do
        if k ~= "ttft" and k ~= "tpot" and k ~= "e2el" then error("serve.metrics: goodput SLO names are ttft, tpot, e2el", 2) end
        if type(v) ~= "number" or v < 0 then error("serve.metrics: an SLO is a number of milliseconds >= 0", 2) end
    end
    local m = { completed = 0, failed = 0, total_input = 0, total_output = 0, good = 0 }
    local ttfts, tpots, itls, e2els = {}, {}, {}, {}
    local events = {}
    for _, o in ipairs(outputs) do
        if o.success then
            local n = output_len(o)
            m.completed = m.completed + 1
            m.total_input = m.total_input + (o.prompt_len or 0)
            m.total_output = m.total_output + n
            local tpot = 0   -- vLLM: a request with <= 1 output token counts as tpot 0 for goodput
            if n > 1 then
                tpot = (o.latency - o.ttft) / (n - 1)
                tpots[#tpots + 1] = tpot * MS
            end
            for _, g in ipairs(o.itl or {}) do itls[#itls + 1] = g * MS end
            ttfts[#ttfts + 1] = o.ttft * MS
            e2els[#e2els + 1] = o.latency * MS
            local good = true
            if goodput.ttft and o.ttft * MS > goodput.ttft then good = false end
            if goodput.tpot and tpot * MS > goodput.tpot then good = false end
            if goodput.e2el and o.latency * MS > goodput.e2el then good = false end
            if next(goodput) and good then m.good = m.good + 1 end
            if o.start_time then
                events[#events + 1] = { o.start_time, 1 }
                events[#events + 1] = { o.start_time + o.latency, -1 }
            end
        else
            m.failed = m.failed + 1
        end
    end
    m.duration = duration
    m.request_throughput = m.completed / duration
    m.request_goodput = next(goodput) and m.good / duration or nil
    m.output_throughput = m.total_output / duration
    m.total_token_throughput = (m.total_input + m.total_output) / duration
    local pcts = opts.percentiles
    m.ttft_ms, m.tpot_ms = stats.describe(ttfts, pcts), stats.describe(tpots, pcts)
    m.itl_ms, m.e2el_ms = stats.describe(itls, pcts), stats.describe(e2els, pcts)
    -- Half-open [start, end): an end at the same time as a start comes first.
    table.sort(events, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
    local cur, peak = 0, 0
    for _, e in ipairs(events) do cur = cur + e[2] if cur > peak then peak = cur end end
    m.max_concurrency_observed = peak
    return m
end

---------------------------------------------------------------------------------------------------------------
-- Arrivals and prompts
---------------------------------------------------------------------------------------------------------------
-- The send times (seconds after the start) of n requests at request_rate (math.huge: all at 0) with the given
-- burstiness (default 1; math.huge: a fixed rate), from a stream seeded by seed.
function M.arrivals(n, request_rate, burstiness, seed)
    burstiness = burstiness or 1
    if type(n) ~= "number" or n < 1 then error("serve.arrivals: n must be >= 1", 2) end
    if type(request_rate) ~= "number" or request_rate <= 0 then error("serve.arrivals: request_rate must be > 0", 2) end
    if type(burstiness) ~= "number" or burstiness <= 0 then error("serve.arrivals: burstiness must be > 0", 2) end
    local t = {}
    if request_rate == math.huge then
        for i = 1, n do t[i] = 0 end
        return t
    end
    local rng = stats.rng(seed or 0)
    local acc = 0
    for i = 1, n do
        local gap = burstiness == math.huge and 1 / request_rate or rng:gamma(burstiness, 1 / (request_rate * burstiness))
        acc = acc + gap
        t[i] = acc
    end
    local scale = (n / request_rate) / t[n]   -- vLLM: the last request is due at n / rate, whatever the draws
    for i = 1, n do t[i] = t[i] * scale end
    return t
end

local WORDS = { "the", "model", "engine", "token", "batch", "cache", "layer", "expert", "router", "stream", "server",
                "prompt", "answer", "question", "number", "river", "mountain", "city", "garden", "window", "music",
                "paper", "light", "water", "stone", "green", "quiet", "rapid", "simple", "bright", "ancient", "modern",
                "write", "read", "count", "measure", "build", "carry", "follow", "explain", "and", "of", "to", "in",
                "with", "for", "on", "at", "by", "from", "about", "under", "over", "between", "through", "after" }

-- n prompts of `words` random words each (seeded): text prompts for a synthetic load, in the spirit of
-- vLLM's random dataset (which draws token ids; a client here has no tokenizer, so it draws words).
function M.random_prompts(n, words, seed)
    local rng = stats.rng(seed or 0, 1)
    local out = {}
    for i = 1, n do
        local w = {}
        for j = 1, words do w[j] = WORDS[rng:below(#WORDS) + 1] end
        out[i] = { prompt = table.concat(w, " ") }
    end
    return out
end

---------------------------------------------------------------------------------------------------------------
-- Running a load
---------------------------------------------------------------------------------------------------------------
-- One streamed request; cb(output).
local function send(pool, base, model, p, opts, cb)
    local req = { base = base, model = model, max_tokens = p.max_tokens or opts.max_tokens, stream = true,
                  temperature = opts.temperature or 0, extra = opts.extra, timeout = opts.timeout,
                  api_key = opts.api_key }
    if p.messages or opts.endpoint == "chat" then
        req.messages = p.messages or { { role = "user", content = p.prompt } }
    else
        req.prompt = p.prompt
    end
    if opts.ignore_eos then
        req.extra = {}
        for k, v in pairs(opts.extra or {}) do req.extra[k] = v end
        req.extra.ignore_eos = true
    end
    openai.complete(pool, req, function(r)
        cb({ success = r.ok, error = r.error, prompt_len = r.prompt_tokens or 0, output_tokens = r.completion_tokens,
             chunks = r.chunks, tokens_from = r.completion_tokens and "usage" or "chunks", start_time = r.t_start,
             ttft = r.ttft or 0, itl = r.itl or {}, latency = r.latency or (r.t_end - r.t_start),
             finish_reason = r.finish_reason, generated_chars = r.text and #r.text or 0 })
    end)
end

-- The counters of the server's Prometheus /metrics that speculative decoding writes (vLLM's names, or the
-- same under a glm53: prefix), or nil. cb(counters | nil).
local function fetch_spec(pool, cb)
    pool:request({ method = "GET", path = "/metrics", timeout = 10 }, function(res)
        if not res or res.status ~= 200 then return cb(nil) end
        local c = { num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0, per_pos = {} }
        local found = false
        for line in res.body:gmatch("[^\n]+") do
            local name, labels, value = line:match("^%a+:spec_decode_([%w_]+)_total(%b{}) ([%d%.eE+%-]+)")
            if not name then
                name, value = line:match("^%a+:spec_decode_([%w_]+)_total ([%d%.eE+%-]+)")
            end
            if name then
                found = true
                value = tonumber(value) or 0
                local pos = labels and tonumber(labels:match('position="(%d+)"'))
                if name == "num_accepted_tokens_per_pos" and pos then
                    c.per_pos[pos + 1] = (c.per_pos[pos + 1] or 0) + value
                elseif c[name] then
                    c[name] = c[name] + value
                end
            end
        end
        cb(found and c or nil)
    end)
end

-- The difference of two /metrics readings as vLLM reports it (rates in [0, 1] here, not percent).
local function spec_delta(before, after)
    if not before or not after then return nil end
    local drafts = after.num_drafts - before.num_drafts
    local tokens = after.num_draft_tokens - before.num_draft_tokens
    local accepted = after.num_accepted_tokens - before.num_accepted_tokens
    if tokens <= 0 then return nil end
    local per_pos = {}
    for i = 1, #after.per_pos do
        per_pos[i] = drafts > 0 and ((after.per_pos[i] or 0) - (before.per_pos[i] or 0)) / drafts or 0
    end
    return { num_drafts = drafts, draft_tokens = tokens, accepted_tokens = accepted, acceptance_rate = accepted / tokens,
             acceptance_length = drafts > 0 and 1 + accepted / drafts or 0, per_position_acceptance_rates = per_pos }
end
M.spec_delta = spec_delta

local function connect(server, opts, connections)
    local url, err = http_client.parse_url(server)
    if not url then return nil, err end
    local pool = http_client.pool(uv, url, { connections = connections,
                                             timeouts = { read = opts.timeout or 600, connect = 10 } })
    return pool, url.path ~= "" and url.path or "/v1"
end

-- The model to name in requests: opts.model, else the server's first (cb(model | nil, err)).
local function resolve_model(pool, base, opts, cb)
    if opts.model then return cb(opts.model) end
    openai.first_model(pool, base, cb)
end

-- opts: server (URL), model, prompts ({ {prompt = text | messages = ...[, max_tokens =]}, ... }: cycled),
-- num_prompts (default #prompts), max_tokens, endpoint ("completions" for text prompts, default; "chat"),
-- extra (request body fields), ignore_eos, temperature (default 0), request_rate (default math.huge),
-- burstiness (default 1), max_concurrency (default: unbounded), duration (seconds: keep sending until then,
-- prompts cycling; otherwise num_prompts requests), warmup (requests sent and awaited first, not counted),
-- seed, timeout, spec_metrics (default true: read /metrics before and after).
-- Returns { outputs = { ... } in send order, duration, model, spec = (spec_delta or nil) } or nil, err.
function M.run(opts)
    if type(opts) ~= "table" or type(opts.server) ~= "string" then error("serve.run: opts.server is required", 2) end
    if type(opts.prompts) ~= "table" or #opts.prompts == 0 then error("serve.run: opts.prompts must be non-empty", 2) end
    local rate, burst = opts.request_rate or math.huge, opts.burstiness or 1
    local limit = opts.max_concurrency
    local n = opts.num_prompts or #opts.prompts
    local pool, base = connect(opts.server, opts, limit or math.min(n, 256))
    if not pool then return nil, base end
    local result = { outputs = {} }
    local failure
    local schedule = not opts.duration and M.arrivals(n, rate, burst, opts.seed) or nil
    local rng = stats.rng(opts.seed or 0, 2)   -- gaps drawn as they go with --duration

    local function main(model)
        local spec_before
        local t0, in_flight, sent, waiting = nil, 0, 0, {}
        local timer = uv.new_timer()
        local done_sending, finished = false, false
        local function finish_all()
            if finished then return end
            finished = true
            result.duration = clock.now() - t0
            local function close() timer:close() pool:close() end
            if opts.spec_metrics == false then return close() end
            fetch_spec(pool, function(after)
                result.spec = spec_delta(spec_before, after)
                close()
            end)
        end
        local function maybe_done()
            if done_sending and in_flight == 0 and #waiting == 0 then finish_all() end
        end
        local pump
        local function start(i)
            in_flight = in_flight + 1
            local p = opts.prompts[(i - 1) % #opts.prompts + 1]
            send(pool, base, model, p, opts, function(out)
                in_flight = in_flight - 1
                out.index = i
                result.outputs[i] = out
                if #waiting > 0 and (not limit or in_flight < limit) then start(table.remove(waiting, 1)) end
                -- With --duration at an infinite rate the freed slot is refilled at once.
                if opts.duration and rate == math.huge and not done_sending then pump() end
                maybe_done()
            end)
        end
        local function arrive(i)
            if not limit or in_flight < limit then start(i) else waiting[#waiting + 1] = i end
        end
        -- Sends every request whose time has come, then sleeps until the next one.
        local next_at = 0
        function pump()
            if finished then return end
            local now = clock.now() - t0
            while not done_sending do
                if opts.duration then
                    if now >= opts.duration then done_sending = true break end
                    if rate == math.huge then
                        -- Keep the concurrency bound full (or one request per free slot without a bound).
                        if limit and in_flight + #waiting >= limit then break end
                        if not limit and sent >= n then done_sending = true break end
                        sent = sent + 1
                        arrive(sent)
                    else
                        if next_at > now then break end
                        sent = sent + 1
                        arrive(sent)
                        next_at = next_at + (burst == math.huge and 1 / rate or rng:gamma(burst, 1 / (rate * burst)))
                    end
                else
                    if sent >= n then done_sending = true break end
                    if schedule[sent + 1] > now then break end
                    sent = sent + 1
                    arrive(sent)
                end
            end
            if done_sending then
                timer:stop()
                maybe_done()
                return
            end
            local wait = opts.duration and (rate == math.huge and 0.005 or math.max(0, next_at - now)) or
                         math.max(0, schedule[sent + 1] - now)
            timer:start(math.max(1, math.floor(wait * 1000)), 0, pump)
        end
        local function go()
            t0 = clock.now()
            pump()
        end
        local function after_warmup()
            if opts.spec_metrics == false then return go() end
            fetch_spec(pool, function(c) spec_before = c go() end)
        end
        local warm = opts.warmup or 0
        if warm == 0 then return after_warmup() end
        local left = warm
        for i = 1, warm do
            send(pool, base, model, opts.prompts[(i - 1) % #opts.prompts + 1], opts, function(out)
                if not out.success then failure = failure or ("warm-up request failed: " .. tostring(out.error)) end
                left = left - 1
                if left == 0 then
                    if failure then pool:close() timer:close() else after_warmup() end
                end
            end)
        end
    end

    resolve_model(pool, base, opts, function(model, err)
        if not model then
            failure = "--server " .. opts.server .. ": cannot list its models (" .. tostring(err) .. "); name one with --model"
            pool:close()
            return
        end
        result.model = model
        main(model)
    end)
    uv.run()
    if failure then return nil, failure end
    return result
end

-- Paired A/B: opts as run, plus a = { server =, extra = }, b = { server =, extra = } (each defaults to
-- opts.server / opts.extra); max_concurrency = pairs in flight (default 1). Returns { a = outputs, b = outputs }
-- (aligned by prompt), or nil, err.
function M.run_ab(opts)
    if type(opts.a) ~= "table" or type(opts.b) ~= "table" then error("serve.run_ab: opts.a and opts.b are required", 2) end
    local n = opts.num_prompts or #opts.prompts
    local pairs_at_once = opts.max_concurrency or 1
    local sides = {}
    for _, key in ipairs({ "a", "b" }) do
        local side = opts[key]
        local server = side.server or opts.server
        local pool, base = connect(server, opts, pairs_at_once)
        if not pool then return nil, base end
        local side_opts = {}
        for k, v in pairs(opts) do side_opts[k] = v end
        side_opts.extra = side.extra or opts.extra
        sides[key] = { pool = pool, base = base, server = server, opts = side_opts, model = side.model or opts.model }
    end
    local result = { a = {}, b = {} }
    local failure
    local next_i, running = 0, 0
    local function close_all() sides.a.pool:close() sides.b.pool:close() end
    local function start_pair()
        if next_i >= n then
            if running == 0 then close_all() end
            return
        end
        next_i, running = next_i + 1, running + 1
        local i = next_i
        local p = opts.prompts[(i - 1) % #opts.prompts + 1]
        local order = i % 2 == 0 and { "a", "b" } or { "b", "a" }   -- A first for even prompts
        local function one(k)
            local key = order[k]
            local s = sides[key]
            send(s.pool, s.base, s.model, p, s.opts, function(out)
                out.index = i
                result[key][i] = out
                if k == 1 then return one(2) end
                running = running - 1
                start_pair()
            end)
        end
        one(1)
    end
    local resolved = 0
    for _, key in ipairs({ "a", "b" }) do
        local s = sides[key]
        resolve_model(s.pool, s.base, s.opts, function(model, err)
            if not model then
                failure = failure or (s.server .. ": cannot list its models (" .. tostring(err) .. "); name one with --model")
                close_all()
                return
            end
            s.model = model
            resolved = resolved + 1
            if resolved == 2 and not failure then
                for _ = 1, pairs_at_once do start_pair() end
            end
        end)
    end
    uv.run()
    if failure then return nil, failure end
    result.model_a, result.model_b = sides.a.model, sides.b.model
    return result
end

-- Per metric of the paired A/B outputs: { metric, n, median_a, median_b, median_diff (B - A), lo, hi } for
-- ttft, tpot and e2el (ms); pairs where either request failed, or (for tpot) produced <= 1 token, are left out.
function M.paired(a, b, opts)
    opts = opts or {}
    local out = {}
    local getters = {
        ttft = function(o) return o.ttft * MS end,
        tpot = function(o) local n = output_len(o) return n > 1 and (o.latency - o.ttft) / (n - 1) * MS or nil end,
        e2el = function(o) return o.latency * MS end,
    }
    for _, metric in ipairs({ "ttft", "tpot", "e2el" }) do
        local xa, xb, d = {}, {}, {}
        for i, oa in pairs(a) do
            local ob = b[i]
            if oa.success and ob and ob.success then
                local va, vb = getters[metric](oa), getters[metric](ob)
                if va and vb then xa[#xa + 1], xb[#xb + 1], d[#d + 1] = va, vb, vb - va end
            end
        end
        local row = { metric = metric, n = #d }
        if #d > 0 then
            row.median_a, row.median_b, row.median_diff = stats.median(xa), stats.median(xb), stats.median(d)
            local buf = {}
            row.lo, row.hi = stats.bootstrap(#d, function(idx, k)
                for j = 1, k do buf[j] = d[idx[j]] end
                for j = k + 1, #buf do buf[j] = nil end
                return stats.median(buf)
            end, { seed = opts.seed or 0, resamples = opts.resamples or 10000 })
        end
        out[#out + 1] = row
    end
    return out
end

return M
