--[[
stop_confidence.lua - sample as the sampler's filters say, but stop generating once the model is unsure.

Before each token it looks at the probability of the most likely candidate; below `threshold` (after
`min_tokens` tokens) it ends the sequence instead of emitting a token (glm53 generate reports the reason as the
finish reason). Probabilities are the candidate set's, so they depend on temperature and the other filters.

    bin/glm53 generate ... --policy stop_confidence --policy-opt threshold=0.3
opts: threshold (default 0.2), min_tokens (default 1).
]]
local sampler = require("glm53.engine.sampler")

return function(opts)
    local threshold, min_tokens = tonumber(opts.threshold or 0.2), tonumber(opts.min_tokens or 1)
    local weights = {}
    return function(cand, ctx)
        local top = cand.probs[0]
        if #ctx.generated >= min_tokens and top < threshold then
            return nil, string.format("confidence %.3f < %.3f", top, threshold)
        end
        for i = 1, cand.n do weights[i] = cand.probs[i - 1] end
        for i = #weights, cand.n + 1, -1 do weights[i] = nil end
        return cand.ids[sampler.categorical(weights, cand.sampler:uniform()) - 1]
    end
end
