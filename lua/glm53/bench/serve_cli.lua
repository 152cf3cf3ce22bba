--[[
glm53.bench.serve_cli - the command line of the load generator (glm53.bench.serve): options, a sweep over
--max-concurrency values, the vLLM-style result block on stdout, and the run directory (requests.jsonl,
summary.json, summary.md, report.html). scripts/bench_serve.lua calls main(arg); another front end can too.

    local serve_cli = require("glm53.bench.serve_cli")
    os.exit(serve_cli.main({ "--server", "http://127.0.0.1:8000", "--num-prompts", "50" }, "bench_serve.lua"))

main(argv, name) returns the exit status (0, or 1 after printing the error); bad options exit with status 2
(glm53.util.cli).
]]
local cjson = require("cjson")
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")
local serve = require("glm53.bench.serve")
local records = require("glm53.eval.records")
local svg = require("glm53.report.svg")
local html = require("glm53.report.html")
local markdown = require("glm53.report.markdown")
local text = require("glm53.report.text")

local M = {}

M.USAGE = "--server URL [--server-b URL | --extra-b JSON] [--model NAME] [--endpoint completions|chat] " ..
          "[--prompts FILE | --task TASK [--data FILE] | --input-len WORDS] [--num-prompts N] [--output-len N] " ..
          "[--ignore-eos] [--request-rate R] [--burstiness B] [--max-concurrency N[,N...]] [--duration S] " ..
          "[--goodput ttft:MS tpot:MS e2el:MS] [--percentiles 50,90,99] [--seed S] [--warmup N] [--out DIR]"

M.OPTIONS = {
    "Servers:",
    { "server", required = true, metavar = "URL", help = "OpenAI-compatible server (A in an A/B run)" },
    { "server_b", metavar = "URL", help = "paired A/B against this server" },
    { "extra", metavar = "JSON", help = "fields merged into every request body (A's in an A/B run)" },
    { "extra_b", metavar = "JSON", help = "paired A/B of two settings: B's request fields" },
    { "model", metavar = "NAME", help = "model field (default: the server's first model)" },
    { "endpoint", default = "completions", choices = { "completions", "chat" }, help = "for text prompts" },
    "Prompts:",
    { "prompts", metavar = "FILE", help = 'JSONL of {"prompt": text} or {"messages": [...]}, optional "max_tokens"' },
    { "task", metavar = "TASK", help = "the prompts of an eval task (evals/TASK.lua)" },
    { "data", metavar = "FILE", help = "the task's JSONL" },
    { "input_len", type = "integer", min = 1, default = 32, help = "words per random prompt" },
    { "num_prompts", type = "integer", min = 1, default = 100 },
    { "output_len", type = "integer", min = 1, default = 64, help = "max_tokens per request" },
    { "ignore_eos", flag = true, help = "ask for exactly --output-len tokens (vLLM's ignore_eos)" },
    { "temperature", type = "number", min = 0, default = 0 },
    "Load:",
    { "request_rate", default = "inf", metavar = "R", help = "requests/s, or inf" },
    { "burstiness", default = "1", metavar = "B", help = "gamma shape of the gaps: 1 = Poisson, inf = fixed rate" },
    { "max_concurrency", metavar = "LIST", help = "requests in flight (a list sweeps; A/B: pairs in flight)" },
    { "duration", type = "number", gt = 0, help = "seconds to keep sending (prompts cycle) instead of --num-prompts" },
    { "warmup", type = "integer", min = 0, default = 0, help = "requests sent and awaited before measuring" },
    { "timeout", type = "number", gt = 0, default = 600, help = "seconds a request may wait for a byte" },
    { "seed", type = "integer", min = 0, default = 0 },
    "Results:",
    { "goodput", list = true, metavar = "NAME:MS", help = "SLOs: ttft:MS tpot:MS e2el:MS" },
    { "percentiles", default = "50,90,99", metavar = "LIST" },
    { "no_spec_metrics", flag = true, help = "do not read the server's /metrics" },
    { "out", default = "reports/bench-serve", metavar = "DIR" },
}

-- vLLM's --goodput takes several values after one flag: "--goodput ttft:500 tpot:50" becomes two.
local function split_goodput(argv)
    local out, i = {}, 1
    while i <= #argv do
        out[#out + 1] = argv[i]
        if argv[i] == "--goodput" then
            local first = true
            while argv[i + 1] and argv[i + 1]:match("^%a+:") do
                if not first then out[#out + 1] = "--goodput" end
                out[#out + 1] = argv[i + 1]
                first, i = false, i + 1
            end
        end
        i = i + 1
    end
    return out
end

local function number_or_inf(s, what)
    if s == "inf" then return math.huge end
    local v = tonumber(s)
    if not v or v <= 0 then return nil, what .. " must be a positive number or inf, got " .. tostring(s) end
    return v
end

local function list_of_numbers(s, what)
    local out = {}
    for v in s:gmatch("[^,]+") do
        local n = tonumber(v)
        if not n then return nil, what .. ": '" .. v .. "' is not a number" end
        out[#out + 1] = n
    end
    return out
end

local function decode_object(s, what)
    if not s then return nil end
    local ok, v = pcall(cjson.decode, s)
    if not ok or type(v) ~= "table" then return nil, what .. " must be a JSON object" end
    return v
end

-- The prompts of the run: a file, an eval task's, or random words.
local function load_prompts(args)
    if args.prompts then
        local txt, ferr = file.read_file(args.prompts)
        if not txt then return nil, ferr end
        local recs = {}
        for line in txt:gmatch("[^\n]+") do
            local ok, v = pcall(cjson.decode, line)
            if not ok or type(v) ~= "table" then
                return nil, args.prompts .. ": line " .. (#recs + 1) .. " is not a JSON object"
            end
            recs[#recs + 1] = v
        end
        for i, r in ipairs(recs) do
            if type(r.prompt) ~= "string" and type(r.messages) ~= "table" then
                return nil, args.prompts .. ": line " .. i .. " has neither prompt nor messages"
            end
        end
        return recs
    end
    if args.task then
        local runner = require("glm53.eval.runner")
        local task, err = runner.task(args.task)
        if not task then return nil, err end
        local data = args.data or (runner.DEFAULT_DATA[args.task] and runner.ROOT .. "/" .. runner.DEFAULT_DATA[args.task])
        local items
        items, err = task.load(data, { seed = args.seed })
        if not items then return nil, err end
        local out = {}
        for i = 1, math.min(#items, args.num_prompts) do
            local p = task.prompt(items[i], {})
            out[i] = type(p) == "table" and { messages = p } or { prompt = p }
        end
        return out
    end
    return serve.random_prompts(args.num_prompts, args.input_len, args.seed)
end

local function ms(x) return string.format("%.2f", x) end

-- vLLM's result block.
local function print_block(label, m, pcts, goodput)
    local function row(name, value) print(string.format("%-40s %-10s", name, value)) end
    print(string.rep("=", 12) .. " Serving Benchmark Result " .. label .. " " .. string.rep("=", 12))
    row("Successful requests:", m.completed)
    row("Failed requests:", m.failed)
    row("Benchmark duration (s):", string.format("%.2f", m.duration))
    row("Total input tokens:", m.total_input)
    row("Total generated tokens:", m.total_output)
    row("Request throughput (req/s):", string.format("%.2f", m.request_throughput))
    if goodput then row("Request goodput (req/s):", string.format("%.2f", m.request_goodput)) end
    row("Output token throughput (tok/s):", string.format("%.2f", m.output_throughput))
    row("Total token throughput (tok/s):", string.format("%.2f", m.total_token_throughput))
    row("Peak concurrent requests:", m.max_concurrency_observed)
    for _, metric in ipairs({ { "ttft", "Time to First Token" }, { "tpot", "Time per Output Token (excl. 1st token)" },
                              { "itl", "Inter-token Latency" }, { "e2el", "End-to-end Latency" } }) do
        local d = m[metric[1] .. "_ms"]
        print(string.format("%s%s%s", string.rep("-", 3), metric[2], string.rep("-", 3)))
        local up = metric[1]:upper()
        row("Mean " .. up .. " (ms):", ms(d.mean))
        row("Median " .. up .. " (ms):", ms(d.median))
        for _, p in ipairs(pcts) do row("P" .. p .. " " .. up .. " (ms):", ms(d["p" .. p])) end
    end
end

local function ms_list(xs)
    local out = {}
    for i, x in ipairs(xs) do out[i] = x * 1000 end
    return out
end

-- The per-request line of requests.jsonl.
local function request_line(level, o, t0)
    local n = o.output_tokens or o.chunks or 0
    return records.json(records.ordered(
        { "level", "index", "success", "error", "prompt_len", "output_tokens", "tokens_from", "finish_reason",
          "start_s", "ttft_ms", "tpot_ms", "e2el_ms", "itl_ms" },
        { level = level, index = o.index, success = o.success, error = o.error, prompt_len = o.prompt_len,
          output_tokens = n, tokens_from = o.tokens_from, finish_reason = o.finish_reason,
          start_s = o.start_time and o.start_time - t0 or nil, ttft_ms = o.ttft * 1000,
          tpot_ms = n > 1 and (o.latency - o.ttft) / (n - 1) * 1000 or nil, e2el_ms = o.latency * 1000,
          itl_ms = ms_list(o.itl or {}) }))
end

local function cdf_plot(title, series)
    return svg.plot({ title = title, xlabel = "milliseconds", ylabel = "fraction", series = series, x_ticks = true,
                      markers = false, y_floor = 0 })
end

local function metric_values(outputs, which)
    local xs = {}
    for _, o in ipairs(outputs) do
        if o.success then
            local n = o.output_tokens or o.chunks or 0
            if which == "ttft" then xs[#xs + 1] = o.ttft * 1000
            elseif which == "e2el" then xs[#xs + 1] = o.latency * 1000
            elseif which == "tpot" then if n > 1 then xs[#xs + 1] = (o.latency - o.ttft) / (n - 1) * 1000 end
            else for _, g in ipairs(o.itl or {}) do xs[#xs + 1] = g * 1000 end end
        end
    end
    return xs
end

local function write_outputs(dir, doc, json, lines, title)
    local ok, err = file.write_file(dir .. "/summary.json", cjson.encode(json) .. "\n", { atomic = true })
    if ok then ok, err = file.write_file(dir .. "/summary.md", doc.markdown, { atomic = true }) end
    if ok then ok, err = file.write_file(dir .. "/report.html", html.page(title, doc.html_parts) .. "\n", { atomic = true }) end
    if ok then ok, err = file.write_file(dir .. "/requests.jsonl", table.concat(lines, "\n") .. "\n", { atomic = true }) end
    return ok, err
end

local function settings_rows(args, goodput)
    local rows = {}
    for _, k in ipairs({ "server", "server_b", "model", "endpoint", "prompts", "task", "input_len", "num_prompts",
                         "duration", "output_len", "ignore_eos", "temperature", "request_rate", "burstiness",
                         "max_concurrency", "seed", "warmup", "extra", "extra_b" }) do
        if args[k] ~= nil and args[k] ~= false then rows[#rows + 1] = { k:gsub("_", "-"), tostring(args[k]) } end
    end
    if goodput then
        local g = {}
        for _, k in ipairs({ "ttft", "tpot", "e2el" }) do if goodput[k] then g[#g + 1] = k .. ":" .. goodput[k] end end
        rows[#rows + 1] = { "goodput SLOs (ms)", table.concat(g, " ") }
    end
    return rows
end

-- A plain load (a sweep when --max-concurrency lists several values).
local function run_load(args, base_opts, levels, goodput, pcts)
    local results = {}
    for _, level in ipairs(levels) do
        local o = {}
        for k, v in pairs(base_opts) do o[k] = v end
        o.max_concurrency = level
        io.stderr:write(string.format("bench_serve: %s, max concurrency %s, %s\n", args.server, tostring(level or "unbounded"),
                                      args.duration and (args.duration .. " s") or (args.num_prompts .. " requests")))
        local r, err = serve.run(o)
        if not r then return nil, err end
        r.level = level
        r.metrics = serve.metrics(r.outputs, r.duration, { goodput = goodput, percentiles = pcts })
        print_block(level and ("(max concurrency " .. level .. ")") or "", r.metrics, pcts, goodput)
        if r.spec then
            print(string.format("Speculative decoding: acceptance rate %.3f, acceptance length %.2f, drafts %d",
                                r.spec.acceptance_rate, r.spec.acceptance_length, r.spec.num_drafts))
        end
        results[#results + 1] = r
    end
    print(string.rep("=", 50))

    local top = "p" .. pcts[#pcts]   -- the highest percentile asked for (p99 by default)
    local header = { "max concurrency", "ok", "failed", "duration s", "req/s", "goodput req/s", "output tok/s",
                     "total tok/s", "TTFT median ms", "TTFT " .. top, "TPOT median ms", "TPOT " .. top,
                     "ITL median ms", "ITL " .. top, "E2EL median ms", "E2EL " .. top }
    local rows, lines, json_runs = {}, {}, {}
    local series = { ttft = {}, tpot = {}, itl = {}, e2el = {} }
    local tput, goodput_pts, acc_series = {}, {}, {}
    for _, r in ipairs(results) do
        local m = r.metrics
        local name = r.level and ("concurrency " .. r.level) or "unbounded"
        rows[#rows + 1] = { tostring(r.level or "-"), tostring(m.completed), tostring(m.failed), string.format("%.2f", m.duration),
            string.format("%.2f", m.request_throughput), goodput and string.format("%.2f", m.request_goodput) or "-",
            string.format("%.1f", m.output_throughput), string.format("%.1f", m.total_token_throughput),
            ms(m.ttft_ms.median), ms(m.ttft_ms[top]), ms(m.tpot_ms.median), ms(m.tpot_ms[top]),
            ms(m.itl_ms.median), ms(m.itl_ms[top]), ms(m.e2el_ms.median), ms(m.e2el_ms[top]) }
        for metric, list in pairs(series) do list[#list + 1] = svg.cdf(name, metric_values(r.outputs, metric)) end
        if r.level then
            tput[#tput + 1] = { x = r.level, y = m.output_throughput }
            if goodput then goodput_pts[#goodput_pts + 1] = { x = r.level, y = m.request_goodput } end
        end
        local t0 = math.huge
        for _, o in ipairs(r.outputs) do if o.start_time and o.start_time < t0 then t0 = o.start_time end end
        for _, o in ipairs(r.outputs) do lines[#lines + 1] = request_line(r.level or cjson.null, o, t0) end
        if r.spec and #r.spec.per_position_acceptance_rates > 0 then
            local pts = {}
            for i, a in ipairs(r.spec.per_position_acceptance_rates) do pts[i] = { x = i, y = a } end
            acc_series[#acc_series + 1] = { name = name, points = pts }
        end
        json_runs[#json_runs + 1] = { max_concurrency = r.level, model = r.model, metrics = m, spec = r.spec }
    end
    print(text.table(header, rows))

    local blocks = {
        { md = "# Serving benchmark: " .. args.server .. "\n\nModel `" .. tostring(results[1].model) .. "`. " ..
               "Definitions as vLLM's serving benchmark (docs/benchmarking.md); percentiles are numpy's linear " ..
               "interpolation; tokens from the server's usage where it sends it." },
        { table = { header = header, rows = rows } },
        { md = "## Settings" },
        { table = { header = { "setting", "value" }, rows = settings_rows(args, goodput), align = { "l", "l" } } },
        { md = "## Plots" },
        { svg = cdf_plot("TTFT (CDF)", series.ttft), md = "(plots: see report.html)" },
        { svg = cdf_plot("TPOT (CDF)", series.tpot) },
        { svg = cdf_plot("ITL, pooled over requests (CDF)", series.itl) }, { svg = cdf_plot("E2EL (CDF)", series.e2el) },
    }
    if #tput >= 2 then
        local s = { { name = "output tok/s", points = tput } }
        blocks[#blocks + 1] = { svg = svg.plot({ title = "output throughput vs max concurrency", xlabel = "max concurrency",
                                                 ylabel = "output tokens/s", series = s, y_floor = 0 }) }
        if goodput then
            blocks[#blocks + 1] = { svg = svg.plot({ title = "goodput vs max concurrency", xlabel = "max concurrency",
                ylabel = "requests/s meeting the SLOs", series = { { name = "goodput", points = goodput_pts } }, y_floor = 0 }) }
        end
    end
    if #acc_series > 0 then
        blocks[#blocks + 1] = { svg = svg.plot({ title = "MTP acceptance per draft position (server /metrics)",
            xlabel = "draft position", ylabel = "accepted / drafts", series = acc_series, y_floor = 0 }) }
    end
    local doc, err = markdown.document(blocks)
    if not doc then return nil, err end
    local ok, werr = write_outputs(args.out, doc, { server = args.server, settings = args, runs = json_runs }, lines,
                                   "serving benchmark")
    if not ok then return nil, werr end
    return results
end

-- The paired A/B run.
local function run_pair(args, base_opts, levels, pcts)
    local o = {}
    for k, v in pairs(base_opts) do o[k] = v end
    o.max_concurrency = levels[1] or 1
    local extra_b, err = decode_object(args.extra_b, "--extra-b")
    if args.extra_b and not extra_b then return nil, err end
    o.a = { server = args.server, extra = base_opts.extra }
    o.b = { server = args.server_b or args.server, extra = extra_b or base_opts.extra }
    io.stderr:write(string.format("bench_serve: paired A/B, %d prompts, %d pairs in flight\n", args.num_prompts, o.max_concurrency))
    local r
    r, err = serve.run_ab(o)
    if not r then return nil, err end
    local paired = serve.paired(r.a, r.b, { seed = args.seed })
    local header = { "metric (ms)", "pairs", "median A", "median B", "median of B - A", "95% CI (bootstrap)" }
    local rows = {}
    for _, p in ipairs(paired) do
        rows[#rows + 1] = { p.metric, tostring(p.n), p.n > 0 and ms(p.median_a) or "-", p.n > 0 and ms(p.median_b) or "-",
                            p.n > 0 and string.format("%+.2f", p.median_diff) or "-",
                            p.n > 0 and string.format("[%+.2f, %+.2f]", p.lo, p.hi) or "-" }
    end
    print("A: " .. args.server .. (args.extra and (" " .. args.extra) or ""))
    print("B: " .. (args.server_b or args.server) .. (args.extra_b and (" " .. args.extra_b) or ""))
    print(text.table(header, rows))
    local lines = {}
    for key, outs in pairs({ A = r.a, B = r.b }) do
        local t0 = math.huge
        for _, x in pairs(outs) do if x.start_time < t0 then t0 = x.start_time end end
        for i = 1, #outs do lines[#lines + 1] = request_line(key, outs[i], t0) end
    end
    table.sort(lines)
    local e2e = { svg.cdf("A", metric_values(r.a, "e2el")), svg.cdf("B", metric_values(r.b, "e2el")) }
    local ttft = { svg.cdf("A", metric_values(r.a, "ttft")), svg.cdf("B", metric_values(r.b, "ttft")) }
    local doc
    doc, err = markdown.document({
        { md = "# Paired A/B serving benchmark\n\nA: `" .. args.server .. (args.extra and (" " .. args.extra) or "") ..
               "`; B: `" .. (args.server_b or args.server) .. (args.extra_b and (" " .. args.extra_b) or "") .. "`. " ..
               "Each prompt goes to both, one after the other, in alternating order; the interval is a percentile " ..
               "bootstrap of the median of the paired differences (10,000 resamples, seed " .. args.seed .. ")." },
        { table = { header = header, rows = rows } },
        { md = "## Settings" },
        { table = { header = { "setting", "value" }, rows = settings_rows(args), align = { "l", "l" } } },
        { md = "## Plots" },
        { svg = cdf_plot("E2EL, A and B (CDF)", e2e), md = "(plots: see report.html)" },
        { svg = cdf_plot("TTFT, A and B (CDF)", ttft) },
    })
    if not doc then return nil, err end
    local ok, werr = write_outputs(args.out, doc, { a = args.server, b = args.server_b or args.server,
                                                    settings = args, paired = paired }, lines, "paired A/B benchmark")
    if not ok then return nil, werr end
    return paired
end

function M.main(argv, name)
    name = name or "bench_serve.lua"
    local args = cli.parse_or_exit(split_goodput(argv), {
        prog = name, usage = (name:find(" ") and name or "luajit scripts/" .. name) .. " " .. M.USAGE,
        summary = "A serving load generator with vLLM's definitions (TTFT, TPOT, ITL, E2EL, goodput), sweeps and " ..
                  "paired A/B runs; docs/benchmarking.md.",
        options = M.OPTIONS,
    })
    local function fail(msg)
        io.stderr:write(name, ": ", msg, "\n")
        return 1
    end
    local rate, err = number_or_inf(args.request_rate, "--request-rate")
    if not rate then return fail(err) end
    local burst
    burst, err = number_or_inf(args.burstiness, "--burstiness")
    if not burst then return fail(err) end
    local levels = { false }
    if args.max_concurrency then
        levels, err = list_of_numbers(args.max_concurrency, "--max-concurrency")
        if not levels then return fail(err) end
    end
    if args.duration and rate == math.huge and not levels[1] then
        return fail("--duration with --request-rate inf needs --max-concurrency (else nothing bounds the requests)")
    end
    local pcts
    pcts, err = list_of_numbers(args.percentiles, "--percentiles")
    if not pcts then return fail(err) end
    local goodput
    for _, kv in ipairs(args.goodput) do
        local k, v = kv:match("^(%a+):([%d%.]+)$")
        if not k or (k ~= "ttft" and k ~= "tpot" and k ~= "e2el") then
            return fail("--goodput: expected ttft:MS, tpot:MS or e2el:MS, got " .. kv)
        end
        goodput = goodput or {}
        goodput[k] = tonumber(v)
    end
    local extra
    extra, err = decode_object(args.extra, "--extra")
    if args.extra and not extra then return fail(err) end
    local prompts
    prompts, err = load_prompts(args)
    if not prompts then return fail(err) end
    local made, merr = file.mkdir_p(args.out)
    if not made then return fail(merr) end
    local base_opts = {
        server = args.server, model = args.model, prompts = prompts, num_prompts = args.num_prompts,
        max_tokens = args.output_len, endpoint = args.endpoint, extra = extra, ignore_eos = args.ignore_eos,
        temperature = args.temperature, request_rate = rate, burstiness = burst, duration = args.duration,
        warmup = args.warmup, seed = args.seed, timeout = args.timeout, spec_metrics = not args.no_spec_metrics,
    }
    local ok
    if args.server_b or args.extra_b then
        ok, err = run_pair(args, base_opts, levels, pcts)
    else
        ok, err = run_load(args, base_opts, levels, goodput, pcts)
    end
    if not ok then return fail(err) end
    io.stderr:write("bench_serve: wrote " .. args.out .. "/report.html, summary.json, summary.md, requests.jsonl\n")
    return 0
end

return M
