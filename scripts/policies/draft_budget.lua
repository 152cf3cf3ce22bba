--[[
draft_budget.lua - a draft policy with a per-request budget: a stream drafts at most `budget` tokens in all
(then it decodes plainly), and within a round stops at the first draft less likely than `threshold` (0: never).
For a server that caps the speculative work a request may cost, or to study how acceptance changes along a
generation. Exact like every draft policy.

    local policy = dofile("scripts/policies/draft_budget.lua")({ budget = 32, threshold = 0.1 })
opts: budget (default 64), threshold (default 0).
]]
return function(opts)
    opts = opts or {}
    local budget = tonumber(opts.budget or 64)
    local threshold = tonumber(opts.threshold or 0)
    assert(budget and budget >= 0, "draft_budget: budget must be a number >= 0")
    assert(threshold and threshold >= 0 and threshold <= 1, "draft_budget: threshold must be in [0, 1]")
    local policy = {}
    function policy:depth(ctx)
        return math.max(0, budget - ctx.stream.stats.spec_decode_num_draft_tokens)
    end
    function policy:keep(ctx, depth, token, prob) return prob >= threshold end
    return policy
end
