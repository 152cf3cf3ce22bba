--[[
glm53.eval.tiny_scores - the held-out scores of the trained tiny model (models/glm53-tiny): its five task families
(evals/tiny_*.lua over evals/data/tiny) run in-process on the CPU by the eval runner, greedy, and put in one
table: accuracy with the 95% Wilson interval per family, retrieval per context length, the tools family per
answer type and the validity of its tool calls, vision per question kind. `glm53 tiny-scores` is its command line.

    local tiny_scores = require("glm53.eval.tiny_scores")
    local r = assert(tiny_scores.run({ limit = 40, families = { "arith", "retrieval" }, retrieval_lengths = { 2048 } }))
    print(tiny_scores.table(r))                 -- the table for a terminal
    local text = tiny_scores.json(r)            -- the same as JSON (docs/cli.md describes its fields)
    print(r.families[1].family, r.families[1].p, r.families[1].lo, r.families[1].hi)

opts:
  model              checkpoint directory (default tiny_scores.DEFAULT_MODEL, models/glm53-tiny)
  families           which of tiny_scores.FAMILIES to run, in that order (default all five)
  limit              the first N items of each family (after retrieval_lengths)
  retrieval_lengths  only the retrieval items of these context lengths (numbers or strings; default all five)
  threads            CPU threads (default 0: every core); concurrency: items generated at once (default 4)
  out                keep each family's run directory (records.jsonl, summary, report.html) in out/<family>;
                     default: a temporary directory, removed at the end (a run never resumes old records)
  log                function(line) for progress (default: lines on stderr); progress: the runner's progress
                     option ({ every = N } or false)

The result: { model, threads, limit, retrieval_lengths, seconds, families = { row, ... } } where a family's row is
{ family, task, items, n, correct, p, lo, hi, errors, length_stops, tokens_in, tokens_out, seconds, groups =
{ { group, n, correct, p, lo, hi }, ... } (retrieval: "256" .. "4096", tools: "tool_call", "text", vision: the
kinds), json_valid = { n, correct, p, lo, hi } (tools: of the items whose gold is a call, those whose reply holds
a call valid against the item's tools) }. n leaves out items whose generation failed (errors counts them).
Returns nil, err when a family cannot run (an unreadable model, a bad option).
]]
local ffi = require("ffi")
local clock = require("glm53.util.clock")
local records = require("glm53.eval.records")
local runner = require("glm53.eval.runner")

local M = {}

M.FAMILIES = { "arith", "mc", "retrieval", "tools", "vision" }
M.DEFAULT_MODEL = runner.ROOT .. "/models/glm53-tiny"
-- The context length whose retrieval accuracy docs/tiny-model.md's acceptance names: past 259 tokens the sparse
-- layers attend only to the 256 positions their indexer selects, so it measures retrieval through the selection.
M.ACCEPTANCE_LENGTH = "2048"

ffi.cdef("char *mkdtemp(char *template);")

-- A fresh directory under $TMPDIR (or /tmp), or nil, err.
local function temp_dir()
    local template = (os.getenv("TMPDIR") or "/tmp") .. "/glm53-tiny-scores-XXXXXX"
    local buf = ffi.new("char[?]", #template + 1)
    ffi.copy(buf, template)
    if ffi.C.mkdtemp(buf) == nil then return nil, "cannot make a directory like " .. template end
    return ffi.string(buf)
end

-- Removes what the runner writes into a run directory, then the directory (left in place if anything else is
-- in it).
local RUN_FILES = { "records.jsonl", "run.json", "summary.json", "summary.md", "report.html" }
local function remove_run_dir(dir)
    for _, name in ipairs(RUN_FILES) do os.remove(dir .. "/" .. name) end
    os.remove(dir)
end

local function counts(m)
    return { n = m.n, correct = m.correct, p = m.p, lo = m.lo, hi = m.hi }
end

-- The row of one family from the runner's result.
local function family_row(family, result, seconds)
    local s = result.summary
    local main = s.modes[1]
    local row = {
        family = family, task = "tiny_" .. family, items = s.items, n = main.n, correct = main.correct, p = main.p,
        lo = main.lo, hi = main.hi, errors = s.errors, length_stops = s.length_stops, tokens_in = s.tokens_in,
        tokens_out = s.tokens_out, seconds = seconds,
    }
    if s.groups then
        row.groups = {}
        for i, g in ipairs(s.groups) do
            local c = counts(g.modes[1])
            c.group = g.group
            row.groups[i] = c
        end
    end
    for _, m in ipairs(s.modes) do
        if m.mode == "json-valid" then row.json_valid = counts(m) end
    end
    return row
end

local function check_families(list)
    local known = {}
    for _, f in ipairs(M.FAMILIES) do known[f] = true end
    local wanted = {}
    for _, f in ipairs(list) do
        if not known[f] then return nil, "unknown family " .. tostring(f) .. " (" .. table.concat(M.FAMILIES, ", ") .. ")" end
        wanted[f] = true
    end
    local out = {}
    for _, f in ipairs(M.FAMILIES) do if wanted[f] then out[#out + 1] = f end end
    return out
end

function M.run(opts)
    opts = opts or {}
    if type(opts) ~= "table" then error("tiny_scores.run: opts must be a table", 2) end
    local families, err = check_families(opts.families or M.FAMILIES)
    if not families then return nil, err end
    local log = opts.log or function(line) io.stderr:write(line, "\n") end
    local model = opts.model or M.DEFAULT_MODEL
    local lengths
    if opts.retrieval_lengths then
        lengths = {}
        for i, l in ipairs(opts.retrieval_lengths) do lengths[i] = tostring(l) end
    end
    local root, keep = opts.out, opts.out ~= nil
    if not root then
        root, err = temp_dir()
        if not root then return nil, err end
    end
    local result = { model = model, threads = opts.threads or 0, limit = opts.limit, retrieval_lengths = lengths,
                     families = {} }
    local t_all = clock.now()
    for _, family in ipairs(families) do
        local dir = root .. "/" .. family
        local t0 = clock.now()
        local r, rerr = runner.run({
            task = "tiny_" .. family, model = model, device = "cpu", threads = opts.threads or 0,
            concurrency = opts.concurrency or 4, limit = opts.limit, groups = family == "retrieval" and lengths or nil,
            out = dir, log = log, progress = opts.progress == nil and {} or opts.progress,
            intro = "One family of `glm53 tiny-scores`.",
        })
        if not keep then remove_run_dir(dir) end
        if not r then
            if not keep then os.remove(root) end
            return nil, "tiny-scores " .. family .. ": " .. tostring(rerr)
        end
        local row = family_row(family, r, clock.now() - t0)
        result.families[#result.families + 1] = row
        log(string.format("tiny-scores: %s %d/%d = %.3f [%.3f, %.3f] in %.1f s%s", family, row.correct, row.n, row.p,
                          row.lo, row.hi, row.seconds, row.errors > 0 and (", " .. row.errors .. " errors") or ""))
    end
    if not keep then os.remove(root) end
    result.out = keep and root or nil
    result.seconds = clock.now() - t_all
    return result
end

---------------------------------------------------------------------------------------------------------------
-- Output
---------------------------------------------------------------------------------------------------------------
local function fmt(x) return string.format("%.3f", x) end
local function interval(c) return "[" .. fmt(c.lo) .. ", " .. fmt(c.hi) .. "]" end

local GROUP_LABEL = {
    retrieval = function(g) return g .. " tokens" .. (g == M.ACCEPTANCE_LENGTH and " *" or "") end,
    tools = function(g) return g == "tool_call" and "gold is a call" or g == "text" and "gold is a reply" or g end,
}

--- The table: header and rows of strings (a family's row, then its groups indented), for glm53.report.text.
function M.rows(result)
    local header = { "family", "correct/n", "accuracy", "95% CI (Wilson)", "seconds" }
    local rows = {}
    local function add(label, c, seconds)
        rows[#rows + 1] = { label, c.correct .. "/" .. c.n, fmt(c.p), interval(c), seconds and string.format("%.1f", seconds) or "" }
    end
    for _, f in ipairs(result.families) do
        add(f.family, f, f.seconds)
        local label = GROUP_LABEL[f.family] or function(g) return g end
        for _, g in ipairs(f.groups or {}) do add("  " .. label(g.group), g) end
        if f.json_valid then add("  tool-call JSON valid", f.json_valid) end
    end
    -- Labels left-aligned: the text table right-aligns every column.
    local width = #header[1]
    for _, r in ipairs(rows) do width = math.max(width, #r[1]) end
    header[1] = header[1] .. string.rep(" ", width - #header[1])
    for _, r in ipairs(rows) do r[1] = r[1] .. string.rep(" ", width - #r[1]) end
    return header, rows
end

--- The table as text, with its notes.
function M.table(result)
    local text = require("glm53.report.text")
    local lines = { (text.table(M.rows(result)):gsub(" +\n", "\n"):gsub(" +$", "")) }   -- no trailing blanks
    for _, f in ipairs(result.families) do
        if f.family == "retrieval" and f.groups then
            lines[#lines + 1] = "* the acceptance length: past 259 tokens the sparse layers attend to the 256 positions " ..
                                "their indexer selects"
        end
        if f.errors > 0 then
            lines[#lines + 1] = string.format("%s: %d items failed to generate (not in n)", f.family, f.errors)
        end
    end
    local limit = result.limit and (", the first " .. result.limit .. " items of each family") or ""
    lines[#lines + 1] = string.format("model %s, CPU, %s%s; greedy; %.1f s", result.model,
                                      result.threads == 0 and "all cores" or (result.threads .. " threads"), limit,
                                      result.seconds)
    return table.concat(lines, "\n")
end

local COUNT_KEYS = { "n", "correct", "p", "lo", "hi" }

local function ordered_counts(c, first)
    local keys = first and { first } or {}
    for _, k in ipairs(COUNT_KEYS) do keys[#keys + 1] = k end
    return records.ordered(keys, c)
end

--- The result as one JSON object (keys in a fixed order).
function M.json(result)
    local families = {}
    for i, f in ipairs(result.families) do
        local groups
        if f.groups then
            groups = {}
            for j, g in ipairs(f.groups) do groups[j] = ordered_counts(g, "group") end
        end
        families[i] = records.ordered(
            { "family", "task", "items", "n", "correct", "p", "lo", "hi", "groups", "json_valid", "errors",
              "length_stops", "tokens_in", "tokens_out", "seconds" },
            { family = f.family, task = f.task, items = f.items, n = f.n, correct = f.correct, p = f.p, lo = f.lo,
              hi = f.hi, groups = groups, json_valid = f.json_valid and ordered_counts(f.json_valid),
              errors = f.errors, length_stops = f.length_stops, tokens_in = f.tokens_in, tokens_out = f.tokens_out,
              seconds = f.seconds })
    end
    return records.json(records.ordered(
        { "model", "device", "threads", "limit", "retrieval_lengths", "acceptance_length", "seconds", "families" },
        { model = result.model, device = "cpu", threads = result.threads, limit = result.limit,
          retrieval_lengths = result.retrieval_lengths, acceptance_length = M.ACCEPTANCE_LENGTH,
          seconds = result.seconds, families = families }))
end

return M
