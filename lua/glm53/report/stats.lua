--[[
glm53.report.stats - the statistics of benchmark and eval reports: sums and means, the mean with a t-based 95%
interval over repetitions, and a proportion with its Wilson score 95% interval.

    local stats = require("glm53.report.stats")
    local mean, lo, hi = stats.mean_ci({ 1.21, 1.18, 1.25, 1.19 })   -- speed-ups of four repetitions
    local lo2, hi2 = stats.wilson(81, 263)                          -- 0.2553, 0.3662
    local acc = stats.proportion(81, 263)                           -- { k = 81, n = 263, p = 0.308, lo =, hi = }

    local p99 = stats.percentile({ 0.12, 0.31, 0.08, 0.25 }, 99)       -- numpy's default (linear) percentile
    local rng = stats.rng(1234)                                     -- a seeded stream: rng:uniform(), rng:below(n)
    local lo3, hi3 = stats.bootstrap(#d, function(idx, n) ... end, { seed = 1 })   -- percentile bootstrap
    local p = stats.mcnemar_exact(7, 2)                             -- exact two-sided p of 7 vs 2 discordant pairs

mean_ci uses Student's t with n - 1 degrees of freedom (two-sided 95%, the quantiles of a printed t table to
three decimals, 1.96 beyond 30 degrees of freedom). wilson is the score interval of Wilson (1927), the one
Newcombe (1998) recommends over the Wald interval p +- 1.96 sqrt(p(1 - p) / n), which collapses at p = 0 or 1
and is too narrow for small n.

percentile is numpy.percentile's default method ("linear", type 7 of Hyndman and Fan 1996): the sorted values
x[0..n-1], h = (n - 1) p / 100, x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]); vLLM's serving
benchmark reports its p50/p90/p99 this way. std is numpy.std's default, the population standard deviation
(divisor n). rng is PCG32 (O'Neill 2014: a 64-bit LCG state, XSH-RR output), the same numbers on every machine
for a seed. bootstrap is Efron's percentile interval over resamples of n indices drawn with replacement.
mcnemar_exact is McNemar's test done exactly: under the null each discordant pair goes either way with
probability 1/2, so p = min(1, 2 P(X <= min(b, c))) with X ~ Binomial(b + c, 1/2). Argument errors raise;
nothing here fails at run time.
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
    -- At k = 0 or k = n one bound is exactly 0 or 1 (center and half are equal there); rounding leaves them a few
    -- ulps apart, on either side.
    local lo = k == 0 and 0 or math.max(0, center - half)
    local hi = k == n and 1 or math.min(1, center + half)
    return lo, hi
end

-- k successes in n trials as { k, n, p = k / n, lo, hi } with the Wilson 95% interval (p = 0 when n = 0).
function M.proportion(k, n)
    check_counts(k, n, "stats.proportion")
    local lo, hi = M.wilson(k, n)
    return { k = k, n = n, p = n > 0 and k / n or 0, lo = lo, hi = hi }
end

---------------------------------------------------------------------------------------------------------------
-- Order statistics
---------------------------------------------------------------------------------------------------------------
-- A sorted copy of xs.
local function sorted(xs)
    local out = {}
    for i, x in ipairs(xs) do out[i] = x end
    table.sort(out)
    return out
end

-- The p-th percentile (0 <= p <= 100) of a sorted array, numpy's linear interpolation.
local function percentile_sorted(s, p)
    local h = (#s - 1) * p / 100
    local lo = math.floor(h)
    if lo + 1 >= #s then return s[#s] end
    return s[lo + 1] + (h - lo) * (s[lo + 2] - s[lo + 1])
end

-- The p-th percentile of xs (at least one value; 0 <= p <= 100) as numpy.percentile(xs, p) computes it.
function M.percentile(xs, p)
    check_numbers(xs, 1, "stats.percentile")
    if type(p) ~= "number" or p < 0 or p > 100 then error("stats.percentile: p must be in [0, 100]", 2) end
    return percentile_sorted(sorted(xs), p)
end

function M.median(xs)
    check_numbers(xs, 1, "stats.median")
    return percentile_sorted(sorted(xs), 50)
end

-- The population standard deviation (numpy.std with ddof = 0).
function M.std(xs)
    check_numbers(xs, 1, "stats.std")
    local mean, var = M.mean(xs), 0
    for _, x in ipairs(xs) do var = var + (x - mean) ^ 2 end
    return math.sqrt(var / #xs)
end

-- Mean, std, median and the percentiles asked for (default 50, 90, 99) of xs in one table:
-- { n, mean, std, median, p50 =, p90 =, p99 = } (key "p" .. the percentile); all 0 when xs is empty (as vLLM
-- reports a metric no request produced).
function M.describe(xs, percentiles)
    check_numbers(xs, 0, "stats.describe")
    percentiles = percentiles or { 50, 90, 99 }
    local out = { n = #xs, mean = 0, std = 0, median = 0 }
    local s = sorted(xs)
    if #xs > 0 then out.mean, out.std, out.median = M.mean(xs), M.std(xs), percentile_sorted(s, 50) end
    for _, p in ipairs(percentiles) do out["p" .. p] = #xs > 0 and percentile_sorted(s, p) or 0 end
    return out
end

---------------------------------------------------------------------------------------------------------------
-- A seeded random stream: PCG32
---------------------------------------------------------------------------------------------------------------
local ffi = require("ffi")
local bit = require("bit")
local PCG_MULT = 6364136223846793005ULL

local Rng = {}
Rng.__index = Rng

-- The next 32 random bits, as a number in [0, 2^32).
function Rng:u32()
    local old = self.state
    self.state = old * PCG_MULT + self.inc
    local xorshifted = tonumber(bit.band(bit.rshift(bit.bxor(bit.rshift(old, 18), old), 27), 0xffffffffULL))
    local r = bit.ror(xorshifted, tonumber(bit.rshift(old, 59)))
    return r < 0 and r + 4294967296 or r
end

-- A number in [0, 1) with 53 random bits.
function Rng:uniform()
    local hi, lo = math.floor(self:u32() / 32), math.floor(self:u32() / 64)   -- 27 and 26 bits
    return (hi * 67108864 + lo) / 9007199254740992
end

-- An integer in [0, n): the multiply-shift map of 32 random bits (bias below n / 2^32).
function Rng:below(n)
    return math.floor(self:u32() * n / 4294967296)
end

-- A standard normal draw (Box-Muller).
function Rng:normal()
    local u = 1 - self:uniform()   -- (0, 1]
    return math.sqrt(-2 * math.log(u)) * math.cos(2 * math.pi * self:uniform())
end

-- A Gamma(shape, scale) draw: Marsaglia and Tsang (2000) for shape >= 1; for shape < 1 the same at shape + 1
-- times U^(1/shape).
function Rng:gamma(shape, scale)
    if type(shape) ~= "number" or shape <= 0 then error("rng:gamma: shape must be > 0", 2) end
    scale = scale or 1
    local boost = 1
    if shape < 1 then
        boost = (1 - self:uniform()) ^ (1 / shape)
        shape = shape + 1
    end
    local d = shape - 1 / 3
    local c = 1 / math.sqrt(9 * d)
    while true do
        local x, v
        repeat
            x = self:normal()
            v = 1 + c * x
        until v > 0
        v = v * v * v
        local u = 1 - self:uniform()
        if math.log(u) < 0.5 * x * x + d - d * v + d * math.log(v) then return d * v * scale * boost end
    end
end

-- A random stream seeded by an integer seed (default 0) and an optional stream number.
function M.rng(seed, stream)
    seed, stream = seed or 0, stream or 0
    if type(seed) ~= "number" or seed % 1 ~= 0 or type(stream) ~= "number" or stream % 1 ~= 0 then
        error("stats.rng: seed and stream must be integers", 2)
    end
    -- PCG32's seeding: inc odd, one step, add the seed, one step.
    local self = setmetatable({ state = 0ULL, inc = ffi.new("uint64_t", stream) * 2ULL + 1ULL }, Rng)
    self:u32()
    self.state = self.state + ffi.new("uint64_t", seed < 0 and seed + 2 ^ 53 or seed)
    self:u32()
    return self
end

---------------------------------------------------------------------------------------------------------------
-- Resampling and exact tests
---------------------------------------------------------------------------------------------------------------
-- The percentile bootstrap interval of a statistic over n paired items: for each of opts.resamples (default
-- 10000) resamples, idx[1..n] are item numbers (1-based) drawn with replacement from a stream seeded by
-- opts.seed (default 0), and statistic(idx, n) returns the statistic on them (idx is reused: read it, do not
-- keep it). Returns lo, hi at opts.level (default 0.95), and the array of resampled values.
function M.bootstrap(n, statistic, opts)
    if type(n) ~= "number" or n < 1 or n % 1 ~= 0 then error("stats.bootstrap: n must be an integer >= 1", 2) end
    if type(statistic) ~= "function" then error("stats.bootstrap: statistic must be a function", 2) end
    opts = opts or {}
    local resamples, level = opts.resamples or 10000, opts.level or 0.95
    if resamples < 2 or level <= 0 or level >= 1 then error("stats.bootstrap: need resamples >= 2, 0 < level < 1", 2) end
    local rng, idx, values = M.rng(opts.seed or 0), {}, {}
    for r = 1, resamples do
        for i = 1, n do idx[i] = rng:below(n) + 1 end
        values[r] = statistic(idx, n)
    end
    local s = sorted(values)
    local tail = (1 - level) / 2 * 100
    return percentile_sorted(s, tail), percentile_sorted(s, 100 - tail), values
end

-- The exact two-sided p-value of McNemar's test from the discordant counts b and c (pairs where only the
-- first, or only the second, is a success).
function M.mcnemar_exact(b, c)
    check_counts(b, b + c, "stats.mcnemar_exact")
    local n, k = b + c, math.min(b, c)
    if n == 0 then return 1 end
    -- P(X <= k) for X ~ Binomial(n, 1/2), with log C(n, j) built up term by term.
    local log_c, log_half_n, tail = 0, n * math.log(0.5), 0
    for j = 0, k do
        if j > 0 then log_c = log_c + math.log(n - j + 1) - math.log(j) end
        tail = tail + math.exp(log_c + log_half_n)
    end
    return math.min(1, 2 * tail)
end

return M
