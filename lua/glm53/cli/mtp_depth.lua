--[==[
glm53.cli.mtp_depth - `glm53 mtp-depth`: how deep should MTP drafting go? Sweeps the draft depth K and sampling
modes / draft policies over a prompt set, and reports per-position acceptance, tokens per target step and
wall-clock speed-up over K = 0.

    glm53 mtp-depth --model models/tiny --k 0,1,2,3,4,6,8 --modes greedy,sample --draft fixed,threshold:0.3 \
                    --reps 5 --out /tmp/mtp

Prompts: --prompts FILE (one per line: comma- or space-separated token ids; with --tokenizer FILE, text), or by
default --n-prompts random id prompts of lengths around --prompt-len (seeded by --seed; ids below the tokenizer's
vocabulary when the checkpoint has one, and only those are sampled). Every configuration runs all prompts together
(one speculative driver, one batch), --max-new tokens each, --reps times after one warm-up; the repetitions of all
configurations interleave so that drift in machine speed hits them alike.

Modes: greedy (temperature 0) and sample (temperature 0.8, top-p 0.9, top-k 20; the seed changes per
repetition). Draft policies: fixed (always K drafts) and threshold:P (stop a round's drafting at the first
draft less likely than P; glm53.generation.driver.draft_threshold).

Prints a table, and writes --out DIR/report.html (the table, and inline SVG plots of acceptance vs position
and speed-up vs K with 95% intervals) and DIR/report.json (every number). Speed-up of a configuration = for
each repetition, wall time of K = 0 in the same mode / wall time of the configuration; mean and a t-based 95%
interval over repetitions. Acceptance per position uses vLLM's definition: accepted at position i / drafts.
Progress goes to stderr.
]==]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 mtp-depth",
    usage = "glm53 mtp-depth [--k 0,1,2,4,8] [--modes greedy,sample] [--draft fixed,threshold:P] [--out DIR] [...]",
    summary = "Sweeps the MTP draft depth K: acceptance per position, tokens per step, speed-up; an HTML report.",
    options = common.options(common.model_options(), {
        "Sweep:",
        { "k", default = "0,1,2,3,4,5,6,7,8", metavar = "LIST", help = "draft depths (0 is the baseline)" },
        { "modes", default = "greedy", metavar = "LIST", help = "greedy, sample" },
        { "draft", default = "fixed", metavar = "LIST", help = "fixed, threshold:P" },
        { "prompts", metavar = "FILE", help = "one prompt per line" },
        { "tokenizer", metavar = "FILE", help = "read --prompts lines as text" },
        { "n_prompts", type = "integer", min = 1, default = 4 },
        { "prompt_len", type = "integer", min = 1, default = 16 },
        { "max_new", type = "integer", min = 1, default = 64 },
        { "reps", type = "integer", min = 2, default = 3, help = "repetitions (the speed-up interval needs two)" },
        { "seed", type = "integer", min = 0, default = 1 },
        { "out", default = "mtp_depth", metavar = "DIR", help = "report directory" },
    }),
}
-- One thread by default: the timing of a single core is the steadier measurement of the speed-up.
for _, o in ipairs(M.options) do if type(o) == "table" and o[1] == "threads" then o.default = 1 end end

function M.run(args)
    local cjson = require("cjson")
    local generation = require("glm53.generation.driver")
    local clock = require("glm53.util.clock")
    local file = require("glm53.util.file")
    local stats = require("glm53.report.stats")
    local svg = require("glm53.report.svg")
    local html = require("glm53.report.html")
    local text = require("glm53.report.text")

    local die = cli.fail

    local function split(text)
        local out = {}
        for item in text:gmatch("[^,]+") do out[#out + 1] = item end
        return out
    end

    ---------------------------------------------------------------------------------------------------------------
    -- Configuration
    ---------------------------------------------------------------------------------------------------------------
    local ks = {}
    for _, v in ipairs(split(args.k)) do ks[#ks + 1] = tonumber(v) or die("--k: '" .. v .. "' is not a number") end
    table.sort(ks)
    if ks[1] ~= 0 then table.insert(ks, 1, 0) end   -- the baseline every speed-up is measured against
    local k_max = ks[#ks]

    local MODES = {
        greedy = { temperature = 0 },
        sample = { temperature = 0.8, top_p = 0.9, top_k = 20 },
    }
    local modes = {}
    for _, name in ipairs(split(args.modes)) do
        if not MODES[name] then die("--modes: unknown mode '" .. name .. "' (greedy, sample)") end
        modes[#modes + 1] = name
    end
    local drafts = {}
    for _, name in ipairs(split(args.draft)) do
        local t = name:match("^threshold:([%d%.eE%-]+)$")
        if name ~= "fixed" and not tonumber(t or "") then die("--draft: '" .. name .. "' is not fixed or threshold:P") end
        drafts[#drafts + 1] = { name = name, policy = t and generation.draft_threshold(tonumber(t)) or nil }
    end

    local ctx = common.load(args)
    local m, err = ctx.m, nil
    if k_max > 0 and m:n_mtp() == 0 then die(ctx.dir .. " has no MTP layer: only --k 0 can run") end

    local prompts = {}
    if args.prompts then
        local tok = args.tokenizer and ctx.tok   -- lines are text only with an explicit --tokenizer
        local f, ferr = io.open(args.prompts)
        if not f then die("--prompts: " .. ferr) end
        for line in f:lines() do
            if line:match("%S") then
                local ids
                if tok then
                    ids, err = tok:encode(line)
                    if not ids then die("--prompts: " .. err) end
                else
                    ids = {}
                    for id in line:gmatch("[^,%s]+") do ids[#ids + 1] = tonumber(id) or die("--prompts: bad id '" .. id .. "'") end
                end
                if #ids > 0 then prompts[#prompts + 1] = ids end
            end
        end
        f:close()
    else
        math.randomseed(args.seed)
        for i = 1, args.n_prompts do
            local len = math.max(1, math.floor(args.prompt_len * (0.5 + (i - 1) % 3 * 0.5)))   -- L/2, L, 3L/2, ...
            local ids = {}
            for j = 1, len do ids[j] = math.random(0, ctx.n_valid - 1) end
            prompts[#prompts + 1] = ids
        end
    end
    if #prompts == 0 then die("no prompts") end

    ---------------------------------------------------------------------------------------------------------------
    -- Runs
    ---------------------------------------------------------------------------------------------------------------
    -- One run of a configuration over all prompts: wall seconds and the summed statistics.
    local function run_once(mode, draft, k, rep)
        local sampling = {}
        for key, v in pairs(MODES[mode]) do sampling[key] = v end
        local d, driver_err = generation.new(m, { k = k, sampling = sampling, draft = draft.policy, max_seqs = #prompts,
                                                  tokenizer = ctx.tok })
        if not d then die(driver_err) end
        local t0 = clock.now()
        for i, ids in ipairs(prompts) do
            local s, add_err = d:add(ids, { max_new = args.max_new, seed = rep * 1000 + i })
            if not s then die(add_err) end
        end
        local ok, run_err = d:run()
        if not ok then die(run_err) end
        return clock.now() - t0, d.stats
    end

    local configs = {}
    for _, mode in ipairs(modes) do
        for di, draft in ipairs(drafts) do
            for _, k in ipairs(ks) do
                -- K = 0 has no drafts: one baseline per mode, under the first draft policy's name.
                if k > 0 or di == 1 then
                    configs[#configs + 1] = { mode = mode, draft = k > 0 and draft or { name = "-" }, k = k,
                                              times = {}, stats = nil }
                end
            end
        end
    end

    -- Progress: one rewritten line on a terminal, one line per run in a log.
    local progress_end = require("glm53.cli.output").isatty(io.stderr) and "\r" or "\n"

    local total_runs = #configs * args.reps
    local done = 0
    io.stderr:write(string.format("mtp_depth: %d configurations x %d repetitions, %d prompts, %d new tokens each\n",
                                  #configs, args.reps, #prompts, args.max_new))
    run_once(modes[1], drafts[1], k_max, 0)   -- warm-up: page in the weights, grow the allocator
    local t_start = clock.now()
    for rep = 1, args.reps do
        for _, c in ipairs(configs) do
            local seconds, run_stats = run_once(c.mode, c.draft, c.k, rep)
            c.times[rep] = seconds
            if c.stats then generation.add_stats(c.stats, run_stats) else c.stats = run_stats end
            done = done + 1
            local elapsed = clock.now() - t_start
            io.stderr:write(string.format("[%d/%d] %-6s %-14s K=%d rep %d/%d  %.3f s   eta %.0f s   %s", done,
                                          total_runs, c.mode, c.draft.name, c.k, rep, args.reps, seconds,
                                          elapsed / done * (total_runs - done), progress_end))
        end
    end
    if progress_end == "\r" then io.stderr:write("\n") end

    local baseline = {}
    for _, c in ipairs(configs) do if c.k == 0 then baseline[c.mode] = c end end
    for _, c in ipairs(configs) do
        local ratios = {}
        for rep = 1, args.reps do ratios[rep] = baseline[c.mode].times[rep] / c.times[rep] end
        c.speedup, c.speedup_lo, c.speedup_hi = stats.mean_ci(ratios)
        c.summary = generation.summary(c.stats)
        c.tok_s = c.stats.tokens / stats.sum(c.times)
    end

    ---------------------------------------------------------------------------------------------------------------
    -- Table
    ---------------------------------------------------------------------------------------------------------------
    local function fmt(x, digits) return string.format("%." .. (digits or 3) .. "f", x) end

    local header = { "mode", "draft", "K" }
    for i = 1, k_max do header[#header + 1] = "acc@" .. i end
    for _, h in ipairs({ "accept", "mean len", "tok/step", "tok/s", "speed-up", "95% CI" }) do header[#header + 1] = h end
    local rows = {}
    for _, c in ipairs(configs) do
        local row = { c.mode, c.draft.name, tostring(c.k) }
        for i = 1, k_max do row[#row + 1] = i <= c.k and fmt(c.summary.acceptance_rate_per_pos[i]) or "" end
        row[#row + 1] = c.k > 0 and fmt(c.summary.acceptance_rate) or ""
        row[#row + 1] = fmt(c.summary.mean_acceptance_length, 2)
        row[#row + 1] = fmt(c.summary.tokens_per_target_step, 2)
        row[#row + 1] = fmt(c.tok_s, 0)
        row[#row + 1] = fmt(c.speedup, 2)
        row[#row + 1] = "[" .. fmt(c.speedup_lo, 2) .. ", " .. fmt(c.speedup_hi, 2) .. "]"
        rows[#rows + 1] = row
    end
    print(string.format("model %s, %d prompts, %d new tokens each, %d repetitions, threads %d", ctx.dir, #prompts,
                        args.max_new, args.reps, args.threads))
    print(text.table(header, rows))

    ---------------------------------------------------------------------------------------------------------------
    -- The HTML report: the table and two plots
    ---------------------------------------------------------------------------------------------------------------
    local acc_series, speed_series = {}, {}
    for _, c in ipairs(configs) do
        if c.k > 0 then
            local points = {}
            for i = 1, c.k do points[i] = { x = i, y = c.summary.acceptance_rate_per_pos[i] } end
            acc_series[#acc_series + 1] = { name = c.mode .. " " .. c.draft.name .. " K=" .. c.k, points = points }
        end
    end
    for _, mode in ipairs(modes) do
        for _, draft in ipairs(drafts) do
            local points = {}
            for _, c in ipairs(configs) do
                if c.mode == mode and (c.k == 0 or c.draft.name == draft.name) then
                    points[#points + 1] = { x = c.k, y = c.speedup, lo = c.speedup_lo, hi = c.speedup_hi }
                end
            end
            speed_series[#speed_series + 1] = { name = mode .. " " .. draft.name, points = points }
        end
    end

    local esc = html.escape
    local page = html.page("MTP depth sweep", {
        "<h1>MTP depth sweep</h1>",
        string.format("<p>model <code>%s</code>; %d prompts, %d new tokens each; %d repetitions after a " ..
                      "warm-up; threads %d; device %s. Speed-up = wall time of K = 0 / wall time, per " ..
                      "repetition; mean and t-based 95%% interval. Acceptance at position i = accepted at " ..
                      "i / drafts (vLLM).</p>", esc(ctx.dir), #prompts, args.max_new, args.reps,
                      args.threads, args.device),
        "<p>command: <code>" .. esc(args.command_line) .. "</code></p>",
        html.table(header, rows),
        "<h2>Acceptance vs draft position</h2>",
        svg.plot({ title = "acceptance rate per position", xlabel = "draft position", ylabel = "accepted / drafts",
                   series = acc_series, y_floor = 0 }),
        "<h2>Speed-up vs K</h2>",
        svg.plot({ title = "wall-clock speed-up over K = 0 (95% CI)", xlabel = "K (drafts per step)",
                   ylabel = "speed-up", series = speed_series }),
    })

    assert(file.mkdir_p(args.out))
    assert(file.write_file(args.out .. "/report.html", page .. "\n"))

    local json_rows = {}
    for _, c in ipairs(configs) do
        json_rows[#json_rows + 1] = {
            mode = c.mode, draft = c.draft.name, k = c.k, times = c.times, speedup = c.speedup,
            speedup_ci = { c.speedup_lo, c.speedup_hi }, tok_s = c.tok_s, stats = c.stats, summary = c.summary,
        }
    end
    assert(file.write_file(args.out .. "/report.json",
                           cjson.encode({ model = ctx.dir, prompts = #prompts, max_new = args.max_new,
                                          reps = args.reps, header = header, rows = rows, configs = json_rows }) .. "\n"))
    io.stderr:write("wrote " .. args.out .. "/report.html and report.json\n")
    return true
end

return M
