--[[
glm53.report.stats - the statistics of benchmark and eval reports: sums and means, the mean with a t-based 95%
interval over repetitions, and a proportion with its Wilson score 95% interval.

    local stats = require("glm53.report.stats")
    local mean, lo, hi = stats.mean_ci({ 1.21, 1.18, 1.25, 1.19 })   -- speed-ups of four repetitions
    local lo2, hi2 = stats.wilson(81, 263)                          -- 0.2553, 0.3662
    local acc = stats.proportion(81, 263)                           -- { k = 81, n = 263, p = 0.308, lo =, hi = }

mean_ci uses Student's t with n - 1 degrees of freedom (two-sided 95%, the quantiles of a printed t table to
three decimals, 1.96 beyond 30 degrees of freedom). wilson is the score interval of Wilson (1927), the one
Newcombe (1998) recommends over the Wald interval p +- 1.96 sqrt(p(1 - p) / n), which collapses at p = 0 or 1
and is too narrow for small n. Argument errors raise; nothing here fails at run time.
]]
local M = {}

-- Two-sided 95% quantiles of Student's t for 1 .. 30 degrees of freedom.
local T95 = { 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
              2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
              2.045, 2.042 }
M.Z95 = 1.959963984540054   -- the two-sided 95% quantile of the standard normal distribution

local function check_numbers(xs, at_least, what)
    if type(xs) ~= "table" then error(what .. ": expected an array of numbers", 3) end
    if #xs < at_least then error(what .. ": needs at least " .. at_least .. " values, got " .. #xs, 3) end
    for i, x in ipairs(xs) do
        if type(x) ~= "number" then error(what .. ": value " .. i .. " is not a number", 3) end
    end
end

function M.sum(xs)
    check_numbers(xs, 0, "stats.sum")
    local s = 0
    for _, x in ipairs(xs) do s = s + x end
    return s
end

function M.mean(xs)
    check_numbers(xs, 1, "stats.mean")
    return M.sum(xs) / #xs
end

-- The mean of xs (at least two values) and the bounds of its t-based 95% confidence interval: mean, lo, hi.
function M.mean_ci(xs)
    check_numbers(xs, 2, "stats.mean_ci")
    local n = #xs
    local mean, var = M.mean(xs), 0
    for _, x in ipairs(xs) do var = var + (x - mean) ^ 2 end
    local half = (T95[n - 1] or 1.96) * math.sqrt(var / (n - 1) / n)
    return mean, mean - half, mean + half
end

local function check_counts(k, n, what)
    if type(k) ~= "number" or type(n) ~= "number" or k ~= math.floor(k) or n ~= math.floor(n) or k < 0 or k > n then
        error(what .. ": need whole numbers 0 <= k <= n, got k = " .. tostring(k) .. ", n = " .. tostring(n), 3)
    end
end

-- The Wilson score interval of k successes in n trials: lo, hi (95% unless another normal quantile z is given).
-- With n = 0 there is no information: 0, 1.
function M.wilson(k, n, z)
    check_counts(k, n, "stats.wilson")
    z = z or M.Z95
    if type(z) ~= "number" or z <= 0 then error("stats.wilson: z must be a positive number", 2) end
    if n == 0 then return 0, 1 end
    local p, z2 = k / n, z * z
    local denom = 1 + z2 / n
    local center = (p + z2 / (2 * n)) / denom
    local half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    -- At k = 0 or k = n one bound is exactly 0 or 1; rounding must not push it past.
    return math.max(0, center - half), math.min(1, center + half)
end

-- k successes in n trials as { k, n, p = k / n, lo, hi } with the Wilson 95% interval (p = 0 when n = 0).
function M.proportion(k, n)
    check_counts(k, n, "stats.proportion")
    local lo, hi = M.wilson(k, n)
    return { k = k, n = n, p = n > 0 and k / n or 0, lo = lo, hi = hi }
end

return M
