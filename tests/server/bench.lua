#!/usr/bin/env luajit
--[==[
bench.lua - the server's batching, liveness and prefix-cache figures (docs/server.md):

  1. throughput: generated tokens per second of one streaming request against --streams concurrent ones (greedy,
     ignore_eos, --tokens each), best of --reps; next to it the same ratio of the engine alone on the same work,
     measured in this process on the same checkpoint before the server starts: the same prompts, tokenised as the
     server does, --tokens greedy tokens each, in sequences like the server's, with no HTTP, JSON or detokenising;
  2. liveness: /health probes (every 20 ms) while a --prefill-tokens-token prompt prefills, --liveness-reps
     times (a different prompt each time): each prefill's slowest probe, and the 90th percentile of all probes.
     Single probes of 160-210 ms were seen in about one run in seven on a busy shared 2-vCPU VM and in one CI
     run, none in 79 runs on a quiet one (docs/server.md); a server that stops answering while it prefills is
     slow at every prefill, which the percentile shows;
  3. prefix cache: time to first token of a chat request with a --system-tokens-token system prompt, then of a
     second request sharing that system prompt with another user message; and /metrics' prefix-cache hits.

    luajit tests/server/bench.lua [--model DIR] [--streams 16] [--tokens 128] [--prefill-tokens 4000]
                                  [--liveness-reps 3] [--system-tokens 1000] [--server-arg ARG ...] [--json]

It starts scripts/serve.lua itself on a free port (--model DIR is passed on, default the bundled models/glm53-tiny).
Prints a table; --json adds a JSON line. The client runs on the same machine as the server, so it does as little
as it can per streamed chunk: it keeps the chunks and reads them once the response has ended.
]==]
local script = arg and arg[0] or "tests/server/bench.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../../lua/?.lua;" .. dir .. "/../../lua/?/init.lua;" .. dir .. "/../lua/?.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse_or_exit(arg, {
    prog = "bench.lua",
    usage = "luajit tests/server/bench.lua [--model DIR] [--streams 16] [--tokens 128] [options]",
    options = {
        { "model", metavar = "DIR", help = "checkpoint the server loads (default: the bundled models/glm53-tiny)" },
        { "streams", type = "integer", min = 1, default = 16 },
        { "tokens", type = "integer", min = 1, default = 128, help = "tokens per throughput request" },
        { "reps", type = "integer", min = 1, default = 3 },
        { "prefill_tokens", type = "integer", min = 1, default = 4000 },
        { "liveness_reps", type = "integer", min = 1, default = 3, help = "prefills probed with /health" },
        { "system_tokens", type = "integer", min = 1, default = 1000 },
        { "server_arg", list = true, metavar = "ARG", help = "an argument for scripts/serve.lua" },
        { "json", flag = true },
    },
})

local uv = require("luv")
local cjson = require("cjson")
local H = require("server_helpers")

local server_args = {}
if args.model then server_args = { "--model", args.model } end
for _, a in ipairs(args.server_arg) do server_args[#server_args + 1] = a end

-- The throughput requests' prompts (request i of n asks about city i).
local function throughput_prompt(i) return "The weather in city " .. i end

-- The engine alone on the throughput test's work: n sequences like the server's (its capacity, no rollback: plain
-- decoding), the same prompts tokenised as the server does, one step prefilling them all, then one decode step per
-- token, each row's next token the argmax over the tokenizer's ids (the server's greedy sampling). Generated tokens
-- per second, best of --reps. Distinct prompts matter: identical rows route to the same experts and share their
-- weight loads, which the server's streams do not.
local function engine_alone()
    local dir = require("glm53.server").DEFAULT_MODEL   -- the server's own default when --model is not given
    for i, a in ipairs(server_args) do if a == "--model" then dir = server_args[i + 1] end end
    local C = require("glm53.ffi.core").C
    local m = assert(require("glm53.engine.model").load(dir, {}))
    local tok = assert(require("glm53.engine.tokenizer").load(dir .. "/tokenizer.json"))
    local n_valid = math.min(tok:n_vocab(), m.vocab_size)
    local prompts, rows = {}, 0
    for i = 1, args.streams do
        prompts[i] = assert(tok:encode(throughput_prompt(i)))
        rows = rows + #prompts[i]
    end
    local function rate(n)
        local b = m:batch({ rows = math.max(rows, n), seqs = n })
        local seqs, next_ids, one = {}, {}, {}
        local best = 0
        for _ = 1, args.reps do
            -- the server's default capacity: --max-model-len 8192, 4 drafts, 1 (a step's cost does not depend on it)
            for i = 1, n do seqs[i] = assert(m:seq({ max_tokens = 8197, max_rollback = 0 })) end
            local t0 = uv.hrtime()
            b:clear()
            for i = 1, n do b:add(seqs[i], prompts[i]) end
            for t = 1, args.tokens do
                assert(m:step(b))
                for i = 1, n do next_ids[i] = C.glm53_argmax_f32(b:logits(i - 1), n_valid) end
                if t == args.tokens then break end
                b:clear()
                for i = 1, n do
                    one[1] = next_ids[i]
                    b:add(seqs[i], one)
                end
            end
            best = math.max(best, n * args.tokens / ((uv.hrtime() - t0) / 1e9))
            for i = 1, n do seqs[i]:free() end
        end
        return best
    end
    rate(1)   -- warm-up
    local one, many = rate(1), rate(args.streams)
    tok:free()
    m:free()
    return one, many
end
local engine_one, engine_many = engine_alone()

local srv = H.start(server_args)
uv.update_time()   -- timers count from now, not from when luv was loaded

-- Runs fn(done) in the loop until done() is called.
local function loop(fn)
    local finished = false
    fn(function() finished = true end)
    while not finished do uv.run("once") end
end

-- A streamed request. Only when on_first is given does the client look at the chunks as they arrive (to time the
-- first token): looking means joining all received so far, which a 128-token stream must not pay per chunk.
local function stream_request(path, body, on_first, on_end)
    body.stream = true
    local t0, first = uv.hrtime(), nil
    H.raw(srv.port, "POST", path, body, on_first and function(all)
        if not first and all:find("data: {", 1, true) then
            first = uv.hrtime()
            on_first((first - t0) / 1e9)
        end
    end, function(all)
        local text = H.dechunk(all)
        local usage = text:match('"usage":(%b{})')
        on_end(usage and cjson.decode(usage) or {}, (uv.hrtime() - t0) / 1e9, first and (first - t0) / 1e9, text)
    end)
end

-- 1. Throughput
local function throughput(n)
    local best = 0
    for _ = 1, args.reps do
        local tokens, left, t0 = 0, n, uv.hrtime()
        loop(function(done)
            for i = 1, n do
                stream_request("/v1/completions", { prompt = throughput_prompt(i), max_tokens = args.tokens,
                                                    temperature = 0, ignore_eos = true,
                                                    stream_options = { include_usage = true } },
                               nil, function(usage)
                                   tokens = tokens + (usage.completion_tokens or 0)
                                   left = left - 1
                                   if left == 0 then done() end
                               end)
            end
        end)
        best = math.max(best, tokens / ((uv.hrtime() - t0) / 1e9))
    end
    return best
end
throughput(1)   -- warm-up
local one = throughput(1)
local many = throughput(args.streams)

-- 2. /health during long prefills: every probe's time, and each prefill's slowest
local probe_ms, worst_per_prefill, prefill_s = {}, {}, 0
for rep = 1, args.liveness_reps do
    local long = {}
    for i = 1, args.prefill_tokens do long[i] = (i * 7919 + 13 * rep) % 700 + 1 end   -- a new prompt: no cache hit
    local worst = 0
    loop(function(done)
        local finished = false
        local t0 = uv.hrtime()
        H.raw(srv.port, "POST", "/v1/completions", { prompt = long, max_tokens = 1, temperature = 0 }, nil, function()
            finished = true
            prefill_s = prefill_s + (uv.hrtime() - t0) / 1e9 / args.liveness_reps
            done()
        end)
        local timer = uv.new_timer()
        local function probe()
            if finished then return timer:close() end
            local p0 = uv.hrtime()
            H.raw(srv.port, "GET", "/health", nil, nil, function(all)
                if all:find("200 OK", 1, true) then
                    local ms = (uv.hrtime() - p0) / 1e6
                    probe_ms[#probe_ms + 1] = ms
                    worst = math.max(worst, ms)
                end
                if not finished then timer:start(20, 0, probe) end
            end)
        end
        timer:start(20, 0, probe)
    end)
    worst_per_prefill[rep] = worst
end
table.sort(probe_ms)
local p90_ms = probe_ms[math.max(1, math.ceil(0.9 * #probe_ms))] or 0
local worst_ms = probe_ms[#probe_ms] or 0

-- 3. Prefix cache: two requests sharing a long system prompt
local WORDS = { "forecast", "pressure", "humidity", "storm", "breeze", "front", "drizzle", "gust", "haze", "frost" }
local words = {}
local sys_tokens = 0
while sys_tokens < args.system_tokens do
    for _ = 1, 50 do words[#words + 1] = WORDS[(#words * 7) % #WORDS + 1] .. (#words % 13) end
    local r = H.post(srv, "/tokenize", { messages = { { role = "system", content = table.concat(words, " ") } },
                                         add_generation_prompt = false })
    sys_tokens = r.json.count
end
local system = table.concat(words, " ")
local hits0 = H.metric(H.metrics(srv), "vllm:prefix_cache_hits_total")
local function ttft(user)
    local t
    loop(function(done)
        stream_request("/v1/chat/completions", { messages = { { role = "system", content = system },
                                                              { role = "user", content = user } },
                                                 max_tokens = 1, temperature = 0 },
                       function(first) t = first end, function() done() end)
    end)
    return t
end
local ttft_first = ttft("What is the forecast for tomorrow?")
local ttft_second = ttft("Will it rain in the afternoon?")
local hits = H.metric(H.metrics(srv), "vllm:prefix_cache_hits_total") - hits0
srv.stop()

local result = {
    one_stream_tok_s = one, streams = args.streams, many_streams_tok_s = many, speedup = many / one,
    engine_one_stream_tok_s = engine_one, engine_many_streams_tok_s = engine_many,
    engine_speedup = engine_many / engine_one,
    prefill_tokens = args.prefill_tokens, prefill_s = prefill_s, liveness_reps = args.liveness_reps,
    health_probes = #probe_ms, health_p90_ms = p90_ms, health_worst_ms = worst_ms,
    health_worst_ms_per_prefill = worst_per_prefill,
    system_tokens = sys_tokens, ttft_first_s = ttft_first, ttft_second_s = ttft_second,
    ttft_ratio = ttft_second / ttft_first, prefix_cache_hit_tokens = hits,
}
print(string.format("throughput    1 stream %.0f tok/s, %d streams %.0f tok/s: %.2fx (the engine alone on the same " ..
                    "work: %.0f and %.0f tok/s, %.2fx)", one, args.streams, many, result.speedup, engine_one,
                    engine_many, result.engine_speedup))
local per_prefill = {}
for i, ms in ipairs(worst_per_prefill) do per_prefill[i] = string.format("%.1f", ms) end
print(string.format("liveness      %d-token prefill %.2f s, %d times: %d /health probes, 90%% within %.1f ms, " ..
                    "slowest %.1f ms (per prefill: %s ms)", args.prefill_tokens, prefill_s, args.liveness_reps,
                    #probe_ms, p90_ms, worst_ms, table.concat(per_prefill, ", ")))
print(string.format("prefix cache  %d-token system prompt: TTFT %.3f s, then %.3f s with it cached (%.2f); " ..
                    "%d prompt tokens hit", sys_tokens, ttft_first, ttft_second, result.ttft_ratio, hits))
if args.json then print(cjson.encode(result)) end
