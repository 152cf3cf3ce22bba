--[==[
glm53.cli.mtp_depth - `glm53 mtp-depth`: how deep should MTP drafting go? Sweeps the draft depth K and sampling
modes / draft policies over prompt sets (per task family), and reports per-position acceptance with intervals,
tokens per target step and wall-clock speed-up over K = 0, and the best fixed K and best draft policy per family.

    glm53 mtp-depth --model models/glm53-tiny --task evals/data/tiny/arith.jsonl --task evals/data/tiny/mc.jsonl \
                    --k 0,1,2,3,4,6,8 --modes greedy,sample --draft fixed,threshold:0.3,adaptive --reps 5 --out /tmp/mtp

Prompts: --task FILE (repeatable: JSONL items with `messages` (+ `tools`), rendered with the chat template and its
generation prompt, or `prompt` text; grouped by their `family` field, the first --per-family of each), or
--prompts FILE (one per line: comma- or space-separated token ids; with --tokenizer FILE, text), or by default
--n-prompts random id prompts of lengths around --prompt-len (seeded by --seed; ids below the tokenizer's
vocabulary when the checkpoint has one, and only those are sampled). Every configuration runs all prompts of a
family together (one speculative driver, one batch), --max-new tokens each, --reps times after one warm-up; the
repetitions of all configurations interleave so that drift in machine speed hits them alike.

Modes: greedy (temperature 0) and sample (temperature 0.8, top-p 0.9, top-k 20; the seed changes per
repetition). Draft policies (--draft, a list): fixed (always K drafts), threshold:P (stop a round's drafting at
the first draft less likely than P; glm53.generation.driver.draft_threshold), and NAME[:key=value,...] for
scripts/policies/draft_NAME.lua: adaptive (the depth with the most expected tokens per time from the stream's
running acceptance per position), budget (a per-request draft budget). K is then the most a policy may draft.

Prints the tables, and writes --out DIR/report.html (the tables, and inline SVG plots per family: acceptance vs
position with Wilson 95% intervals, speed-up vs K with t-based 95% intervals) and DIR/report.json (every
number). Speed-up of a configuration = for each repetition, wall time of K = 0 in the same family and mode /
wall time of the configuration; mean and a t-based 95% interval over repetitions. Acceptance per position uses
vLLM's definition: accepted at position i / drafts. "Best" per family and mode: the fixed K and the policy
configuration with the highest mean speed-up; policy vs fixed is the per-repetition ratio of their wall times
(> 1: the policy is faster), with its t-based interval. Progress goes to stderr.
]==]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 mtp-depth",
    usage = "glm53 mtp-depth [--task FILE ...] [--k 0,1,2,4,8] [--modes greedy,sample] [--draft fixed,adaptive] [--out DIR] [...]",
    summary = "Sweeps the MTP draft depth K: acceptance per position, tokens per step, speed-up; an HTML report.",
    options = common.options(common.model_options(), {
        "Sweep:",
        { "k", default = "0,1,2,3,4,5,6,7,8", metavar = "LIST", help = "draft depths (0 is the baseline)" },
        { "modes", default = "greedy", metavar = "LIST", help = "greedy, sample" },
        { "draft", default = "fixed", metavar = "LIST", help = "fixed, threshold:P, adaptive[:k=v,...], budget[:...]" },
        { "task", list = true, metavar = "FILE", help = "JSONL of chat items (messages, tools, family)" },
        { "per_family", type = "integer", min = 1, default = 8, help = "prompts per family of --task" },
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
    local generator = require("glm53.eval.generator")
    local clock = require("glm53.util.clock")
    local file = require("glm53.util.file")
    local stats = require("glm53.report.stats")
    local svg = require("glm53.report.svg")
    local html = require("glm53.report.html")
    local text = require("glm53.report.text")

    local die = cli.fail

    local function split(list)
        local out = {}
        for item in list:gmatch("[^,]+") do out[#out + 1] = item end
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
    -- --draft is a comma list whose policies take comma-separated options after a colon: "adaptive:cost=0.3"
    -- is one entry; "fixed,threshold:0.3,adaptive" three. An entry is a new one when it names a policy.
    local drafts = {}
    for _, piece in ipairs(split(args.draft)) do
        if #drafts > 0 and piece:match("^[%w_]+=") and drafts[#drafts].name:find(":", 1, true) then
            drafts[#drafts].name = drafts[#drafts].name .. "," .. piece
        elseif #drafts > 0 and piece:match("^[%w_]+=") then
            drafts[#drafts].name = drafts[#drafts].name .. ":" .. piece
        else
            drafts[#drafts + 1] = { name = piece }
        end
    end
    for _, d in ipairs(drafts) do d.policy = common.draft_policy(d.name) end

    local ctx = common.load(args, { need_tokenizer = #args.task > 0 })
    local m, err = ctx.m, nil
    if k_max > 0 and m:n_mtp() == 0 then die(ctx.dir .. " has no MTP layer: only --k 0 can run") end

    -- The prompt groups: { name, prompts = { ids, ... } }.
    local groups = {}
    if #args.task > 0 then
        local by_family = {}
        for _, path in ipairs(args.task) do
            common.each_task_item(path, function(item, line_no)
                local family = type(item.family) == "string" and item.family or "all"
                local g = by_family[family]
                if not g then
                    g = { name = family, prompts = {} }
                    by_family[family] = g
                    groups[#groups + 1] = g
                end
                if #g.prompts < args.per_family then
                    local prompt = item.messages or item.prompt
                    if prompt == nil then die(("--task %s:%d: no messages or prompt"):format(path, line_no)) end
                    local ids, eerr = generator.encode(ctx.tok, prompt, { tools = item.tools })
                    if not ids then die(("--task %s:%d: %s"):format(path, line_no, eerr)) end
                    g.prompts[#g.prompts + 1] = ids
                end
            end)
        end
    elseif args.prompts then
        local g = { name = "all", prompts = {} }
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
                if #ids > 0 then g.prompts[#g.prompts + 1] = ids end
            end
        end
        f:close()
        groups[1] = g
    else
        local g = { name = "random", prompts = {} }
        math.randomseed(args.seed)
        for i = 1, args.n_prompts do
            local len = math.max(1, math.floor(args.prompt_len * (0.5 + (i - 1) % 3 * 0.5)))   -- L/2, L, 3L/2, ...
            local ids = {}
            for j = 1, len do ids[j] = math.random(0, ctx.n_valid - 1) end
            g.prompts[#g.prompts + 1] = ids
        end
        groups[1] = g
    end
    if #groups == 0 or #groups[1].prompts == 0 then die("no prompts") end

    ---------------------------------------------------------------------------------------------------------------
    -- Runs
    ---------------------------------------------------------------------------------------------------------------
    local stop_ids = common.stop_ids(ctx, { ignore_eos = true })   -- a fixed length: every config the same work
    -- One run of a configuration over its group's prompts: wall seconds and the summed statistics.
    local function run_once(c, rep)
        local sampling = {}
        for key, v in pairs(MODES[c.mode]) do sampling[key] = v end
        local d, driver_err = generation.new(m, { k = c.k, sampling = sampling, draft = c.draft.policy,
                                                  max_seqs = #c.group.prompts, tokenizer = ctx.tok })
        if not d then die(driver_err) end
        local t0 = clock.now()
        for i, ids in ipairs(c.group.prompts) do
            local s, add_err = d:add(ids, { max_new = args.max_new, seed = rep * 1000 + i, stop_ids = stop_ids })
            if not s then die(add_err) end
        end
        local ok, run_err = d:run()
        if not ok then die(run_err) end
        return clock.now() - t0, d.stats
    end

    local configs = {}
    for _, group in ipairs(groups) do
        for _, mode in ipairs(modes) do
            for di, draft in ipairs(drafts) do
                for _, k in ipairs(ks) do
                    -- K = 0 has no drafts: one baseline per family and mode, under the first draft policy's name.
                    if k > 0 or di == 1 then
                        configs[#configs + 1] = { group = group, mode = mode, draft = k > 0 and draft or { name = "-" },
                                                  k = k, times = {}, stats = nil }
                    end
                end
            end
        end
    end

    -- Progress: one rewritten line on a terminal, one line per run in a log.
    local progress_end = require("glm53.cli.output").isatty(io.stderr) and "\r" or "\n"

    local total_runs = #configs * args.reps
    local done = 0
    local n_prompts = 0
    for _, g in ipairs(groups) do n_prompts = n_prompts + #g.prompts end
    io.stderr:write(string.format("mtp_depth: %d configurations x %d repetitions, %d families, %d prompts, %d new " ..
                                  "tokens each\n", #configs, args.reps, #groups, n_prompts, args.max_new))
    run_once({ group = groups[1], mode = modes[1], draft = drafts[1], k = k_max }, 0)   -- warm-up: page in, grow
    local t_start = clock.now()
    for rep = 1, args.reps do
        for _, c in ipairs(configs) do
            local seconds, run_stats = run_once(c, rep)
            c.times[rep] = seconds
            if c.stats then generation.add_stats(c.stats, run_stats) else c.stats = run_stats end
            done = done + 1
            local elapsed = clock.now() - t_start
            io.stderr:write(string.format("[%d/%d] %-10s %-6s %-14s K=%d rep %d/%d  %.3f s   eta %.0f s   %s", done,
                                          total_runs, c.group.name, c.mode, c.draft.name, c.k, rep, args.reps,
                                          seconds, elapsed / done * (total_runs - done), progress_end))
        end
    end
    if progress_end == "\r" then io.stderr:write("\n") end

    local baseline = {}
    for _, c in ipairs(configs) do if c.k == 0 then baseline[c.group.name .. "/" .. c.mode] = c end end
    for _, c in ipairs(configs) do
        local base, ratios = baseline[c.group.name .. "/" .. c.mode], {}
        for rep = 1, args.reps do ratios[rep] = base.times[rep] / c.times[rep] end
        c.speedup, c.speedup_lo, c.speedup_hi = stats.mean_ci(ratios)
        c.summary = generation.summary(c.stats)
        c.tok_s = c.stats.tokens / stats.sum(c.times)
        c.acceptance = {}   -- per position: accepted / drafts with its Wilson interval
        for i = 1, c.k do
            c.acceptance[i] = stats.proportion(c.stats.spec_decode_num_accepted_tokens_per_pos[i],
                                               c.stats.spec_decode_num_drafts)
        end
    end

    -- The best fixed K and the best policy configuration per family and mode, and the policy against the fixed K.
    local best = {}
    for _, group in ipairs(groups) do
        for _, mode in ipairs(modes) do
            local fixed, policy
            for _, c in ipairs(configs) do
                if c.group == group and c.mode == mode then
                    local is_fixed = c.k == 0 or c.draft.name == "fixed"
                    if is_fixed and (not fixed or c.speedup > fixed.speedup) then fixed = c end
                    if not is_fixed and (not policy or c.speedup > policy.speedup) then policy = c end
                end
            end
            local row = { family = group.name, mode = mode, fixed = fixed, policy = policy }
            if policy then
                local ratios = {}
                for rep = 1, args.reps do ratios[rep] = fixed.times[rep] / policy.times[rep] end
                row.ratio, row.ratio_lo, row.ratio_hi = stats.mean_ci(ratios)
            end
            best[#best + 1] = row
        end
    end

    ---------------------------------------------------------------------------------------------------------------
    -- Tables
    ---------------------------------------------------------------------------------------------------------------
    local function fmt(x, digits) return string.format("%." .. (digits or 3) .. "f", x) end
    local function ci(lo, hi, digits) return "[" .. fmt(lo, digits) .. ", " .. fmt(hi, digits) .. "]" end

    local header = { "family", "mode", "draft", "K" }
    for i = 1, k_max do header[#header + 1] = "acc@" .. i end
    for _, h in ipairs({ "accept", "mean len", "tok/step", "tok/s", "speed-up", "95% CI" }) do header[#header + 1] = h end
    local rows = {}
    for _, c in ipairs(configs) do
        local row = { c.group.name, c.mode, c.draft.name, tostring(c.k) }
        for i = 1, k_max do row[#row + 1] = i <= c.k and fmt(c.summary.acceptance_rate_per_pos[i]) or "" end
        row[#row + 1] = c.k > 0 and fmt(c.summary.acceptance_rate) or ""
        row[#row + 1] = fmt(c.summary.mean_acceptance_length, 2)
        row[#row + 1] = fmt(c.summary.tokens_per_target_step, 2)
        row[#row + 1] = fmt(c.tok_s, 0)
        row[#row + 1] = fmt(c.speedup, 2)
        row[#row + 1] = ci(c.speedup_lo, c.speedup_hi, 2)
        rows[#rows + 1] = row
    end
    local best_header = { "family", "mode", "best fixed", "speed-up", "95% CI", "best policy", "speed-up", "95% CI",
                          "policy / fixed", "95% CI" }
    local best_rows = {}
    for _, b in ipairs(best) do
        local f, p = b.fixed, b.policy
        best_rows[#best_rows + 1] = {
            b.family, b.mode, "K=" .. f.k, fmt(f.speedup, 2), ci(f.speedup_lo, f.speedup_hi, 2),
            p and (p.draft.name .. " K=" .. p.k) or "-", p and fmt(p.speedup, 2) or "", p and ci(p.speedup_lo, p.speedup_hi, 2) or "",
            p and fmt(b.ratio, 3) or "", p and ci(b.ratio_lo, b.ratio_hi, 3) or "",
        }
    end
    print(string.format("model %s, %d families, %d prompts, %d new tokens each, %d repetitions, threads %d", ctx.dir,
                        #groups, n_prompts, args.max_new, args.reps, args.threads))
    print(text.table(header, rows))
    print()
    print(text.table(best_header, best_rows))

    ---------------------------------------------------------------------------------------------------------------
    -- The HTML report: the tables and two plots per family
    ---------------------------------------------------------------------------------------------------------------
    local esc = html.escape
    local parts = {
        "<h1>MTP depth sweep</h1>",
        string.format("<p>model <code>%s</code>; %d families, %d prompts, %d new tokens each; %d repetitions after " ..
                      "a warm-up; threads %d; device %s. Speed-up = wall time of K = 0 / wall time, per " ..
                      "repetition; mean and t-based 95%% interval. Acceptance at position i = accepted at " ..
                      "i / drafts (vLLM), with its Wilson 95%% interval.</p>", esc(ctx.dir), #groups, n_prompts,
                      args.max_new, args.reps, args.threads, args.device),
        "<p>command: <code>" .. esc(args.command_line) .. "</code></p>",
        "<h2>Best fixed K and best draft policy</h2>",
        html.table(best_header, best_rows),
        "<h2>Every configuration</h2>",
        html.table(header, rows),
    }
    for _, group in ipairs(groups) do
        local acc_series, speed_series = {}, {}
        for _, c in ipairs(configs) do
            if c.group == group and c.k == k_max and c.k > 0 then
                local points = {}
                for i = 1, c.k do points[i] = { x = i, y = c.acceptance[i].p, lo = c.acceptance[i].lo, hi = c.acceptance[i].hi } end
                acc_series[#acc_series + 1] = { name = c.mode .. " " .. c.draft.name .. " K=" .. c.k, points = points }
            end
        end
        for _, mode in ipairs(modes) do
            for _, draft in ipairs(drafts) do
                local points = {}
                for _, c in ipairs(configs) do
                    if c.group == group and c.mode == mode and (c.k == 0 or c.draft.name == draft.name) then
                        points[#points + 1] = { x = c.k, y = c.speedup, lo = c.speedup_lo, hi = c.speedup_hi }
                    end
                end
                speed_series[#speed_series + 1] = { name = mode .. " " .. draft.name, points = points }
            end
        end
        parts[#parts + 1] = "<h2>" .. esc(group.name) .. "</h2>"
        parts[#parts + 1] = svg.plot({ title = group.name .. ": acceptance per draft position (K = " .. k_max .. ")",
                                       xlabel = "draft position", ylabel = "accepted / drafts", series = acc_series,
                                       y_floor = 0 })
        parts[#parts + 1] = svg.plot({ title = group.name .. ": wall-clock speed-up over K = 0 (95% CI)",
                                       xlabel = "K (most drafts per step)", ylabel = "speed-up", series = speed_series })
    end
    local page = html.page("MTP depth sweep", parts)

    assert(file.mkdir_p(args.out))
    assert(file.write_file(args.out .. "/report.html", page .. "\n"))

    local json_rows = {}
    for _, c in ipairs(configs) do
        json_rows[#json_rows + 1] = {
            family = c.group.name, mode = c.mode, draft = c.draft.name, k = c.k, times = c.times, speedup = c.speedup,
            speedup_ci = { c.speedup_lo, c.speedup_hi }, tok_s = c.tok_s, stats = c.stats, summary = c.summary,
            acceptance = c.acceptance,
        }
    end
    local json_best = {}
    for _, b in ipairs(best) do
        json_best[#json_best + 1] = {
            family = b.family, mode = b.mode, fixed_k = b.fixed.k, fixed_speedup = b.fixed.speedup,
            policy = b.policy and b.policy.draft.name, policy_k = b.policy and b.policy.k,
            policy_speedup = b.policy and b.policy.speedup, policy_over_fixed = b.ratio,
            policy_over_fixed_ci = b.policy and { b.ratio_lo, b.ratio_hi } or nil,
        }
    end
    assert(file.write_file(args.out .. "/report.json",
                           cjson.encode({ model = ctx.dir, families = #groups, prompts = n_prompts,
                                          max_new = args.max_new, reps = args.reps, header = header, rows = rows,
                                          configs = json_rows, best = json_best }) .. "\n"))
    io.stderr:write("wrote " .. args.out .. "/report.html and report.json\n")
    return true
end

return M
