--[[
draft_adaptive.lua - a draft policy: each round, the depth that maximises the expected tokens per unit of time,
from the stream's own running acceptance at each draft position.

For a stream, a_i = P(drafts 1..i all accepted | position i drafted), estimated from its statistics (drafted_i
rounds with a draft at i, accepted_i of them accepting through i) with a prior that continues the curve
geometrically from the positions before (so an untried position starts where the measured ones point):
    a_0 = 1,  prior_i = min(a_{i-1}, a_{i-1}^2 / a_{i-2})  (prior_1 = opts.first, default 0.5),
    a_i = (accepted_i + w * prior_i) / (drafted_i + w),   w = opts.prior (default 2).
A round of depth d takes 1 + d * c target-step times (c = opts.cost: one MTP draft step against one verification,
default 0.25) and emits 1 + a_1 + ... + a_d tokens on average, so the depth is the d in [min_depth, k] with the
most tokens per time; min_depth (default 1) keeps measuring position 1. Drafts are the MTP's (keep is always true).
Exact like every draft policy: it only changes how much is drafted, never what is emitted.

    bin/glm53 mtp-depth --draft adaptive:cost=0.25 ...
    local policy = dofile("scripts/policies/draft_adaptive.lua")({ cost = 0.3 })
    driver.new(m, { k = 8, draft = policy })
opts: cost, prior, first, min_depth (numbers, or strings of numbers as --policy-opt gives them).
]]
return function(opts)
    opts = opts or {}
    local cost = tonumber(opts.cost or 0.25)
    local w = tonumber(opts.prior or 2)
    local first = tonumber(opts.first or 0.5)
    local min_depth = tonumber(opts.min_depth or 1)
    assert(cost and cost > 0, "draft_adaptive: cost must be a number > 0")
    assert(w and w >= 0 and first and first >= 0 and first <= 1, "draft_adaptive: prior >= 0, 0 <= first <= 1")
    local policy = {}

    -- The estimates a_1 .. a_k for a stream's statistics.
    function policy.curve(stats)
        local drafted, accepted = stats.draft_tokens_per_pos, stats.spec_decode_num_accepted_tokens_per_pos
        local a, prev, prev2 = {}, 1, nil
        for i = 1, #drafted do
            local prior = i == 1 and first or math.min(prev, prev2 and prev2 > 0 and prev * prev / prev2 or prev)
            a[i] = (accepted[i] + w * prior) / (drafted[i] + w)
            if a[i] > prev then a[i] = prev end   -- accepting through i implies accepting through i - 1
            prev2, prev = prev, a[i]
        end
        return a
    end

    function policy:depth(ctx)
        local a = policy.curve(ctx.stream.stats)
        local best, best_rate, tokens = min_depth, -1, 1
        for d = 0, #a do
            if d > 0 then tokens = tokens + a[d] end
            local rate = tokens / (1 + d * cost)
            if d >= min_depth and rate > best_rate then best, best_rate = d, rate end
        end
        return best
    end

    function policy:keep() return true end
    return policy
end
