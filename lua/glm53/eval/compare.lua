--[[
glm53.eval.compare - a paired comparison of two eval runs over the same items (records joined by id): the
difference of accuracies with a paired bootstrap 95% interval, and McNemar's exact test on the discordant pairs.

    local compare = require("glm53.eval.compare")
    local a = assert(require("glm53.eval.records").read("runA/records.jsonl"))
    local b = assert(require("glm53.eval.records").read("runB/records.jsonl"))
    local c = compare.paired(a, b, "flexible-extract", { seed = 0, resamples = 10000 })
    print(c.n, c.acc_a, c.acc_b, c.diff, c.lo, c.hi, c.a_only, c.b_only, c.p)

Items in only one run, or with an error in either, are left out (c.only_a, c.only_b, c.errors count them).
diff = accuracy of B - accuracy of A over the joined items. The interval is the percentile bootstrap: each
of the resamples (default 10,000; seeded, default seed 0) draws n joined items with replacement, the same
items for both runs (that is what makes it paired), and takes the mean of b_i - a_i. McNemar's exact p: with
a_only = items A got right and B wrong, b_only = the reverse, p = min(1, 2 P(X <= min)) for X ~
Binomial(a_only + b_only, 1/2) (glm53.report.stats.mcnemar_exact); concordant items do not enter it.
]]
local cjson = require("cjson")
local stats = require("glm53.report.stats")

local M = {}

local null = cjson.null

local function scored(r, mode)
    if r.error ~= nil and r.error ~= null then return nil end
    if type(r.correct) ~= "table" then return nil end
    local c = r.correct[mode]
    if c == nil or c == null then return nil end
    return c == true
end

-- The modes scored in a record list, sorted (or in the order of `preferred` where given).
function M.modes(recs, preferred)
    local seen, out = {}, {}
    for _, r in ipairs(recs) do
        if type(r.correct) == "table" then for k in pairs(r.correct) do seen[k] = true end end
    end
    for _, m in ipairs(preferred or {}) do if seen[m] then out[#out + 1] = m seen[m] = nil end end
    local rest = {}
    for m in pairs(seen) do rest[#rest + 1] = m end
    table.sort(rest)
    for _, m in ipairs(rest) do out[#out + 1] = m end
    return out
end

function M.paired(a, b, mode, opts)
    if type(a) ~= "table" or type(b) ~= "table" then error("compare.paired: a and b must be record arrays", 2) end
    if type(mode) ~= "string" then error("compare.paired: mode must be a string", 2) end
    opts = opts or {}
    local by_id = {}
    for _, r in ipairs(b) do by_id[tostring(r.id)] = r end
    local xa, xb = {}, {}
    local res = { mode = mode, only_a = 0, only_b = 0, errors = 0, a_only = 0, b_only = 0, both = 0, neither = 0 }
    local in_a = {}
    for _, ra in ipairs(a) do
        local id = tostring(ra.id)
        in_a[id] = true
        local rb = by_id[id]
        if not rb then
            res.only_a = res.only_a + 1
        else
            local ca, cb = scored(ra, mode), scored(rb, mode)
            if ca == nil or cb == nil then
                res.errors = res.errors + 1
            else
                xa[#xa + 1], xb[#xb + 1] = ca and 1 or 0, cb and 1 or 0
                if ca and cb then res.both = res.both + 1
                elseif ca then res.a_only = res.a_only + 1
                elseif cb then res.b_only = res.b_only + 1
                else res.neither = res.neither + 1 end
            end
        end
    end
    for _, rb in ipairs(b) do if not in_a[tostring(rb.id)] then res.only_b = res.only_b + 1 end end
    local n = #xa
    res.n = n
    if n == 0 then
        res.acc_a, res.acc_b, res.diff, res.lo, res.hi, res.p = 0, 0, 0, 0, 0, 1
        return res
    end
    res.acc_a, res.acc_b = stats.mean(xa), stats.mean(xb)
    res.diff = res.acc_b - res.acc_a
    res.lo, res.hi = stats.bootstrap(n, function(idx, k)
        local s = 0
        for i = 1, k do local j = idx[i] s = s + xb[j] - xa[j] end
        return s / k
    end, { seed = opts.seed or 0, resamples = opts.resamples or 10000 })
    res.p = stats.mcnemar_exact(res.a_only, res.b_only)
    return res
end

-- The comparison table of several modes: header and rows of strings.
function M.table(results)
    local header = { "mode", "n", "acc A", "acc B", "B - A", "95% CI (paired bootstrap)", "A only right",
                     "B only right", "McNemar exact p" }
    local rows = {}
    local function f(x) return string.format("%.3f", x) end
    for _, c in ipairs(results) do
        rows[#rows + 1] = { c.mode, tostring(c.n), f(c.acc_a), f(c.acc_b), string.format("%+.3f", c.diff),
                            "[" .. string.format("%+.3f", c.lo) .. ", " .. string.format("%+.3f", c.hi) .. "]",
                            tostring(c.a_only), tostring(c.b_only), string.format("%.4g", c.p) }
    end
    return header, rows
end

return M
