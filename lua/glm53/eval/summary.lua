--[[
glm53.eval.summary - what an eval run's records add up to, and its report: accuracy with the Wilson 95%
interval per extraction mode, errors and length stops counted apart from wrong answers, token counts,
latencies, speculative-decoding acceptance when the records carry it; written as summary.json, summary.md and
report.html (Markdown through cmark, a table, SVG plots).

    local summary = require("glm53.eval.summary")
    local s = summary.compute(records, { "strict-match", "flexible-extract" })
    print(s.modes[1].p, s.modes[1].lo, s.modes[1].hi, s.errors, s.length_stops)
    assert(summary.write("out", s, { title = "gsm8k on models/glm53-tiny", settings = { { "seed", "0" } } }))

Per mode: n = records without an error that the mode scored (a task may leave items out of a mode: their
`correct` is null there); correct; wrong = not correct and not cut by max_tokens; wrong_length = not correct and
finish_reason "length" (the answer may not have been written yet); p = correct / n with the Wilson interval lo,
hi (glm53.report.stats.proportion). errors = records with an error (no output: they are not in n, and a resumed
run tries them again); length_stops = all records with finish_reason "length". When records carry a `group`,
s.groups lists per group, in order of first appearance, { group, items, modes = the same per-mode counts }.
]]
local cjson = require("cjson")
local stats = require("glm53.report.stats")
local svg = require("glm53.report.svg")
local html = require("glm53.report.html")
local markdown = require("glm53.report.markdown")
local file = require("glm53.util.file")

local M = {}

local null = cjson.null

local function present(v) return v ~= nil and v ~= null end

-- Sums the "spec" counters of the records (nil when none has them).
local function spec_totals(recs)
    local total
    for _, r in ipairs(recs) do
        local sp = r.spec
        if present(sp) then
            total = total or { drafts = 0, draft_tokens = 0, accepted = 0, accepted_per_pos = {} }
            total.drafts = total.drafts + (sp.drafts or 0)
            total.draft_tokens = total.draft_tokens + (sp.draft_tokens or 0)
            total.accepted = total.accepted + (sp.accepted or 0)
            for i, a in ipairs(sp.accepted_per_pos or {}) do
                total.accepted_per_pos[i] = (total.accepted_per_pos[i] or 0) + a
            end
        end
    end
    if total then
        -- vLLM's definitions: acceptance rate = accepted / draft tokens; at position i = accepted at i / drafts.
        total.acceptance_rate = total.draft_tokens > 0 and total.accepted / total.draft_tokens or 0
        total.acceptance_rate_per_pos = {}
        for i, a in ipairs(total.accepted_per_pos) do
            total.acceptance_rate_per_pos[i] = total.drafts > 0 and a / total.drafts or 0
        end
        total.mean_acceptance_length = total.drafts > 0 and 1 + total.accepted / total.drafts or 1
    end
    return total
end

-- The per-mode counts of records (see the header).
local function mode_counts(recs, modes)
    local out = {}
    for _, mode in ipairs(modes) do
        local n, correct, wrong_length = 0, 0, 0
        for _, r in ipairs(recs) do
            local c = present(r.correct) and r.correct[mode]
            if not present(r.error) and c ~= null then
                n = n + 1
                if c == true then correct = correct + 1
                elseif r.finish_reason == "length" then wrong_length = wrong_length + 1 end
            end
        end
        local pr = stats.proportion(correct, n)
        out[#out + 1] = { mode = mode, n = n, correct = correct, wrong = n - correct - wrong_length,
                          wrong_length = wrong_length, p = pr.p, lo = pr.lo, hi = pr.hi }
    end
    return out
end

function M.compute(recs, modes)
    if type(recs) ~= "table" or type(modes) ~= "table" then error("summary.compute: records and modes must be arrays", 2) end
    local s = { items = #recs, errors = 0, length_stops = 0, tokens_in = 0, tokens_out = 0, modes = {} }
    local latencies = {}
    for _, r in ipairs(recs) do
        if present(r.error) then
            s.errors = s.errors + 1
        else
            if r.finish_reason == "length" then s.length_stops = s.length_stops + 1 end
            if type(r.tokens_in) == "number" then s.tokens_in = s.tokens_in + r.tokens_in end
            if type(r.tokens_out) == "number" then s.tokens_out = s.tokens_out + r.tokens_out end
            if type(r.latency_s) == "number" then latencies[#latencies + 1] = r.latency_s end
        end
    end
    s.modes = mode_counts(recs, modes)
    local by_group, order = {}, {}
    for _, r in ipairs(recs) do
        if present(r.group) then
            local g = tostring(r.group)
            if not by_group[g] then by_group[g], order[#order + 1] = {}, g end
            local list = by_group[g]
            list[#list + 1] = r
        end
    end
    if #order > 0 then
        s.groups = {}
        for i, g in ipairs(order) do
            s.groups[i] = { group = g, items = #by_group[g], modes = mode_counts(by_group[g], modes) }
        end
    end
    s.latency = stats.describe(latencies)
    s.latency_s = latencies
    s.spec = spec_totals(recs)
    return s
end

local function fmt(x, d) return string.format("%." .. (d or 3) .. "f", x) end

-- The accuracy table: header and rows of strings.
function M.table(s)
    local header = { "mode", "n", "correct", "accuracy", "95% CI (Wilson)", "wrong", "wrong, cut by max tokens" }
    local rows = {}
    for _, m in ipairs(s.modes) do
        rows[#rows + 1] = { m.mode, tostring(m.n), tostring(m.correct), fmt(m.p), "[" .. fmt(m.lo) .. ", " .. fmt(m.hi) .. "]",
                            tostring(m.wrong), tostring(m.wrong_length) }
    end
    return header, rows
end

-- The per-group accuracy table (nil when the records have no groups): header and rows of strings; a mode that
-- scored no item of a group has no row there.
function M.group_table(s)
    if not s.groups then return nil end
    local header = { "group", "mode", "n", "correct", "accuracy", "95% CI (Wilson)" }
    local rows = {}
    for _, g in ipairs(s.groups) do
        for _, m in ipairs(g.modes) do
            if m.n > 0 then
                rows[#rows + 1] = { g.group, m.mode, tostring(m.n), tostring(m.correct), fmt(m.p),
                                    "[" .. fmt(m.lo) .. ", " .. fmt(m.hi) .. "]" }
            end
        end
    end
    return header, rows
end

-- info: title, intro (Markdown), settings ({ {name, value}, ... }), notes (Markdown, after the tables).
-- Writes dir/summary.json, dir/summary.md and dir/report.html. Returns true, or nil, err.
function M.write(dir, s, info)
    info = info or {}
    local header, rows = M.table(s)
    local settings_rows = {}
    for _, kv in ipairs(info.settings or {}) do settings_rows[#settings_rows + 1] = { kv[1], tostring(kv[2]) } end

    local acc_series, labels = {}, {}
    for i, m in ipairs(s.modes) do
        labels[i] = m.mode
        acc_series[i] = { name = m.mode, points = { { x = i, y = m.p, lo = m.lo, hi = m.hi } } }
    end
    local blocks = {
        { md = "# " .. (info.title or "eval run") .. "\n\n" .. (info.intro or "") },
        { table = { header = header, rows = rows } },
        { md = string.format("%d items: %d scored, %d errors (not scored; a resumed run retries them), %d stopped " ..
                             "by max tokens. Tokens: %d in, %d out. Latency per item (s): median %s, p90 %s, p99 %s.",
                             s.items, s.items - s.errors, s.errors, s.length_stops, s.tokens_in, s.tokens_out,
                             fmt(s.latency.median), fmt(s.latency.p90), fmt(s.latency.p99)) },
    }
    if s.groups then
        local gh, gr = M.group_table(s)
        blocks[#blocks + 1] = { md = "## Per group" }
        blocks[#blocks + 1] = { table = { header = gh, rows = gr, align = { "l", "l", "r", "r", "r", "r" } } }
    end
    if #settings_rows > 0 then
        blocks[#blocks + 1] = { md = "## Settings" }
        blocks[#blocks + 1] = { table = { header = { "setting", "value" }, rows = settings_rows, align = { "l", "l" } } }
    end
    if s.spec then
        local sp = s.spec
        blocks[#blocks + 1] = { md = string.format("## Speculative decoding\n\n%d draft rounds, %d draft tokens, " ..
            "%d accepted: acceptance rate %s, mean acceptance length %s.", sp.drafts, sp.draft_tokens, sp.accepted,
            fmt(sp.acceptance_rate), fmt(sp.mean_acceptance_length, 2)) }
    end
    blocks[#blocks + 1] = { md = "## Plots" }
    blocks[#blocks + 1] = { md = "(plots: see report.html)", svg = svg.plot({
        title = "accuracy per mode (95% Wilson interval)", xlabel = "extraction mode", ylabel = "accuracy",
        series = acc_series, x_labels = labels, y_floor = 0 }) }
    if #s.latency_s > 0 then
        blocks[#blocks + 1] = { svg = svg.plot({ title = "latency per item (CDF)", xlabel = "seconds",
            ylabel = "fraction of items", series = { svg.cdf("latency", s.latency_s) }, x_ticks = true,
            markers = false, y_floor = 0 }) }
    end
    if s.spec and #s.spec.acceptance_rate_per_pos > 0 then
        local points = {}
        for i, a in ipairs(s.spec.acceptance_rate_per_pos) do points[i] = { x = i, y = a } end
        blocks[#blocks + 1] = { svg = svg.plot({ title = "MTP acceptance per draft position",
            xlabel = "draft position", ylabel = "accepted / drafts", series = { { name = "acceptance", points = points } },
            y_floor = 0 }) }
    end
    if info.notes then blocks[#blocks + 1] = { md = info.notes } end

    local doc, err = markdown.document(blocks)
    if not doc then return nil, err end
    local json = { title = info.title, settings = {}, items = s.items, errors = s.errors,
                   length_stops = s.length_stops, tokens_in = s.tokens_in, tokens_out = s.tokens_out,
                   modes = s.modes, groups = s.groups, latency = s.latency, spec = s.spec }
    for _, kv in ipairs(info.settings or {}) do json.settings[kv[1]] = kv[2] end
    local ok, werr = file.write_file(dir .. "/summary.json", cjson.encode(json) .. "\n", { atomic = true })
    if ok then ok, werr = file.write_file(dir .. "/summary.md", doc.markdown, { atomic = true }) end
    if ok then
        ok, werr = file.write_file(dir .. "/report.html", html.page(info.title or "eval run", doc.html_parts) .. "\n",
                                   { atomic = true })
    end
    if not ok then return nil, werr end
    return true
end

return M
