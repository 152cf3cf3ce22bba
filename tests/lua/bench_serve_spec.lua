-- glm53.bench.serve and scripts/bench_serve.lua (acceptance 4): the metrics of a small hand-made trace,
-- computed by hand below with vLLM's definitions (vllm/benchmarks/serve.py, calculate_metrics; numpy's linear
-- percentiles); the arrival schedules; a 30-second load against a server; the sweep, A/B and /metrics paths of the
-- command line. The server is ours (scripts/serve.lua on models/tiny, the small random-weight test model,
-- tests/lua/eval_helpers.start_server).
local cjson = require("cjson")
local file = require("glm53.util.file")
local serve = require("glm53.bench.serve")
local h = require("eval_helpers")

local function near(expected, got, what)
    assert.is_true(type(got) == "number" and math.abs(expected - got) < 1e-9,
                   string.format("%s: expected %.9g, got %s", what, expected, tostring(got)))
end

describe("serve.metrics on a hand-made trace", function()
    -- Times in seconds. itl lists the gaps between successive chunks that carried a choice.
    --   R1 start 0.00: chunks at 0.100 0.150 0.210 0.260; usage 4 tokens, prompt 10
    --      ttft 0.100, itl 0.050 0.060 0.050, latency 0.260, tpot (0.260 - 0.100) / 3 = 53.333 ms
    --   R2 start 0.05: chunks at 0.25 0.45; usage 2, prompt 20: ttft 0.200, itl 0.200, latency 0.400, tpot 200 ms
    --   R3 start 0.10: one chunk at 0.40; usage 1, prompt 5: ttft 0.300, latency 0.300; no tpot (one token;
    --      tpot 0 for goodput)
    --   R4 failed
    --   R5 start 0.30: chunks at 0.35 0.37 0.41, no usage: 3 tokens counted from chunks, prompt 0
    --      ttft 0.050, itl 0.020 0.040, latency 0.110, tpot (0.110 - 0.050) / 2 = 30 ms
    local trace = {
        { success = true, start_time = 0.00, ttft = 0.100, itl = { 0.050, 0.060, 0.050 }, latency = 0.260,
          output_tokens = 4, prompt_len = 10 },
        { success = true, start_time = 0.05, ttft = 0.200, itl = { 0.200 }, latency = 0.400, output_tokens = 2,
          prompt_len = 20 },
        { success = true, start_time = 0.10, ttft = 0.300, itl = {}, latency = 0.300, output_tokens = 1, prompt_len = 5 },
        { success = false, error = "HTTP 500" },
        { success = true, start_time = 0.30, ttft = 0.050, itl = { 0.020, 0.040 }, latency = 0.110, chunks = 3,
          prompt_len = 0 },
    }

    it("counts requests and tokens, and the throughputs over the duration", function()
        local m = serve.metrics(trace, 1.0)
        assert.are.same({ 4, 1, 35, 10 }, { m.completed, m.failed, m.total_input, m.total_output })  -- 10+20+5+0; 4+2+1+3
        near(4, m.request_throughput, "req/s") near(10, m.output_throughput, "out tok/s")
        near(45, m.total_token_throughput, "total tok/s")
        assert.is_nil(m.request_goodput)                                -- no SLO given
        -- In flight: R1 [0, .26), R2 [.05, .45), R3 [.1, .4), R5 [.3, .41): three at once at most.
        assert.are.equal(3, m.max_concurrency_observed)
    end)

    it("gives TTFT, TPOT, pooled ITL and E2EL with numpy's linear percentiles", function()
        local m = serve.metrics(trace, 2.0)
        -- TTFT ms {100, 200, 300, 50}: mean 162.5; sorted 50 100 200 300: median 150;
        -- p90: h = 3 * 0.9 = 2.7 -> 200 + 0.7 * 100 = 270; p99: h = 2.97 -> 297;
        -- std: squared deviations 3906.25 1406.25 18906.25 12656.25, sum 36875 / 4 = 9218.75 -> sqrt
        near(162.5, m.ttft_ms.mean, "ttft mean") near(150, m.ttft_ms.median, "ttft median")
        near(270, m.ttft_ms.p90, "ttft p90") near(297, m.ttft_ms.p99, "ttft p99")
        near(math.sqrt(9218.75), m.ttft_ms.std, "ttft std")
        -- TPOT ms {53.333, 200, 30} (R3 has none): sorted 30, 53.333, 200: median 53.333; mean 283.333 / 3;
        -- p90: h = 1.8 -> 53.333 + 0.8 * 146.667 = 170.667; p99: h = 1.98 -> 53.333 + 0.98 * 146.667
        local t1 = 160 / 3
        assert.are.equal(3, m.tpot_ms.n)
        near(t1, m.tpot_ms.median, "tpot median") near((t1 + 230) / 3, m.tpot_ms.mean, "tpot mean")
        near(t1 + 0.8 * (200 - t1), m.tpot_ms.p90, "tpot p90") near(t1 + 0.98 * (200 - t1), m.tpot_ms.p99, "tpot p99")
        -- ITL ms pooled {50, 60, 50, 200, 20, 40}: sorted 20 40 50 50 60 200: median 50, mean 70;
        -- p90: h = 4.5 -> 60 + 0.5 * 140 = 130; p99: h = 4.95 -> 60 + 0.95 * 140 = 193
        assert.are.equal(6, m.itl_ms.n)
        near(50, m.itl_ms.median, "itl median") near(70, m.itl_ms.mean, "itl mean")
        near(130, m.itl_ms.p90, "itl p90") near(193, m.itl_ms.p99, "itl p99")
        -- E2EL ms {260, 400, 300, 110}: sorted 110 260 300 400: median 280, mean 267.5, p99: h = 2.97 -> 397
        near(280, m.e2el_ms.median, "e2el median") near(267.5, m.e2el_ms.mean, "e2el mean")
        near(397, m.e2el_ms.p99, "e2el p99")
    end)

    it("counts goodput as vLLM does: every SLO met, one-token requests with tpot 0", function()
        -- ttft <= 250 and tpot <= 60: R1 (100, 53.3) yes; R2 (tpot 200) no; R3 (ttft 300) no; R5 (50, 30) yes.
        near(2 / 1.0, serve.metrics(trace, 1.0, { goodput = { ttft = 250, tpot = 60 } }).request_goodput, "goodput")
        -- Adding e2el <= 200 drops R1 (260): one good request in 0.5 s.
        near(1 / 0.5, serve.metrics(trace, 0.5, { goodput = { ttft = 250, tpot = 60, e2el = 200 } }).request_goodput, "gp")
        -- tpot <= 0 alone: only R3, whose one token counts as tpot 0.
        near(1, serve.metrics(trace, 1.0, { goodput = { tpot = 0 } }).request_goodput, "tpot 0")
        assert.has_error(function() serve.metrics(trace, 1.0, { goodput = { itl = 5 } }) end)
    end)

    it("reports zeros for a metric no request produced", function()
        local m = serve.metrics({ { success = false } }, 1)
        assert.are.same({ 0, 1, 0, 0, 0 }, { m.completed, m.failed, m.ttft_ms.mean, m.tpot_ms.p99, m.itl_ms.median })
    end)
end)

describe("serve.arrivals", function()
    local function gaps(t)
        local g, prev = {}, 0
        for i, x in ipairs(t) do g[i], prev = x - prev, x end
        return g
    end
    local function cv(xs)
        local mean, var = 0, 0
        for _, x in ipairs(xs) do mean = mean + x end
        mean = mean / #xs
        for _, x in ipairs(xs) do var = var + (x - mean) ^ 2 end
        return math.sqrt(var / #xs) / mean
    end

    it("sends all at once at an infinite rate, at fixed gaps for infinite burstiness", function()
        assert.are.same({ 0, 0, 0 }, serve.arrivals(3, math.huge))
        local t = serve.arrivals(4, 2, math.huge)
        for i = 1, 4 do near(i / 2, t[i], "fixed " .. i) end
    end)

    it("draws gamma gaps, rescaled so the last request is due at n / rate", function()
        local poisson = serve.arrivals(4000, 10, 1, 7)
        near(400, poisson[4000], "last of Poisson")
        assert.is_true(math.abs(cv(gaps(poisson)) - 1) < 0.05, "Poisson gaps have CV 1")
        local bursty = serve.arrivals(4000, 10, 0.25, 7)
        assert.is_true(math.abs(cv(gaps(bursty)) - 2) < 0.15, "gamma shape 1/4 gaps have CV 2")
        assert.are.same(serve.arrivals(50, 3, 1, 9), serve.arrivals(50, 3, 1, 9))   -- seeded
        for i = 2, 4000 do assert.is_true(poisson[i] >= poisson[i - 1]) end
    end)
end)

describe("serve.run against a server", function()
    local server
    setup(function() server = h.start_server({ "--model", "models/tiny", "--max-num-seqs", "4" }) end)
    teardown(function() if server then server:stop() end end)

    it("keeps a load of 4 concurrent streams for 30 seconds", function()
        local r = assert(serve.run({ server = server.url, prompts = serve.random_prompts(8, 24, 1), max_tokens = 16,
                                     extra = { speculative = 2 },
                                     ignore_eos = true, max_concurrency = 4, duration = 30, seed = 1 }))
        assert.is_true(r.duration >= 30 and r.duration < 45, "duration " .. r.duration)
        local m = serve.metrics(r.outputs, r.duration)
        assert.are.equal(0, m.failed)
        assert.is_true(m.completed > 100, m.completed .. " requests in 30 s")
        assert.are.equal(4, m.max_concurrency_observed)
        assert.are.equal(16 * m.completed, m.total_output)            -- ignore_eos: exactly max_tokens each
        for _, o in ipairs(r.outputs) do
            assert.are.equal("usage", o.tokens_from)
            assert.is_true(o.ttft > 0 and o.latency >= o.ttft)
            assert.are.equal(o.chunks - 1, #o.itl)
        end
        assert.is_true(m.ttft_ms.median > 0 and m.tpot_ms.median > 0 and m.itl_ms.p99 >= m.itl_ms.median)
        assert.is_true(m.output_throughput > 0)
        -- The requests ask for 2 MTP drafts: /metrics before and after give the acceptance per position.
        assert.truthy(r.spec)
        assert.are.equal(2, #r.spec.per_position_acceptance_rates)
        assert.is_true(r.spec.acceptance_rate >= 0 and r.spec.acceptance_rate <= 1)
    end)

    it("sends at a request rate", function()
        local r = assert(serve.run({ server = server.url, prompts = serve.random_prompts(4, 8, 2), max_tokens = 4,
                                     num_prompts = 20, request_rate = 40, burstiness = math.huge, spec_metrics = false }))
        local starts = {}
        for i, o in ipairs(r.outputs) do starts[i] = o.start_time end
        table.sort(starts)
        -- Fixed gaps of 25 ms: the 20th request leaves 19 gaps after the first (0.475 s); timers add a little.
        assert.is_true(starts[20] - starts[1] >= 0.46 and starts[20] - starts[1] < 0.7, tostring(starts[20] - starts[1]))
        assert.are.equal(0, serve.metrics(r.outputs, r.duration).failed)
    end)

    it("runs the command lines: a concurrency sweep with goodput, and a paired A/B", function()
        local dir = os.tmpname()
        os.remove(dir)
        -- the sweep through `scripts/bench.lua serve` (= glm53 bench serve), the A/B through scripts/bench_serve.lua
        local p = io.popen(h.LUAJIT .. " scripts/bench.lua serve --server " .. server.url .. " --num-prompts 12 " ..
                           "--max-concurrency 1,2 --output-len 8 --ignore-eos --goodput ttft:5000 tpot:1000 " ..
                           "--extra '{\"speculative\":2}' --out " ..
                           dir .. " 2>&1; echo \"exit status $?\"")
        local out = p:read("*a")
        p:close()
        assert.truthy(out:find("exit status 0", 1, true), out)
        assert.truthy(out:find("Request goodput (req/s):", 1, true))
        local s = cjson.decode((assert(file.read_file(dir .. "/summary.json"))))
        assert.are.equal(2, #s.runs)
        assert.are.equal(12, s.runs[2].metrics.completed)
        assert.are.equal(12, s.runs[2].metrics.good)
        assert.are.equal(24, h.count_lines(dir .. "/requests.jsonl"))
        local html = assert(file.read_file(dir .. "/report.html"))
        assert.truthy(html:find("output throughput vs max concurrency", 1, true))
        assert.truthy(html:find("MTP acceptance per draft position", 1, true))
        p = io.popen(h.LUAJIT .. " scripts/bench_serve.lua --server " .. server.url .. " --extra-b '{\"max_tokens\":1}' " ..
                     "--num-prompts 10 --output-len 64 --ignore-eos --out " .. dir .. "/ab 2>&1; echo \"exit status $?\"")
        out = p:read("*a")
        p:close()
        assert.truthy(out:find("exit status 0", 1, true), out)
        local ab = cjson.decode((assert(file.read_file(dir .. "/ab/summary.json"))))
        local e2el
        for _, row in ipairs(ab.paired) do if row.metric == "e2el" then e2el = row end end
        assert.are.equal(10, e2el.n)
        -- B asks for 1 token instead of 64: its end-to-end latency is shorter, and the interval says so.
        assert.is_true(e2el.median_diff < 0 and e2el.hi < 0, cjson.encode(e2el))
        os.execute("rm -rf " .. h.quote(dir))
    end)
end)
