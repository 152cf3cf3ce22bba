--[[
mirostat_v2.lua - Mirostat 2.0 (Basu et al. 2021), as llama.cpp implements it.

Targets a constant surprise tau (in bits): drops candidates whose surprise -log2 p exceeds mu (the most likely
always stays), draws from the rest renormalised, then moves mu by eta times the gap between the drawn token's
surprise (under the renormalised set) and tau. mu starts at 2 tau. One policy object per sequence: mu is state.

    bin/glm53 generate ... --policy mirostat_v2 --policy-opt tau=3 --policy-opt eta=0.1
opts: tau (default 5), eta (default 0.1).
]]
local sampler = require("glm53.engine.sampler")

local LN2 = math.log(2)

return function(opts)
    local tau, eta = tonumber(opts.tau or 5), tonumber(opts.eta or 0.1)
    local weights = {}
    local policy = { mu = 2 * tau }
    function policy:pick(cand)
        -- Candidates come most likely first, so the kept ones are a prefix.
        local keep = 1
        while keep < cand.n and -math.log(cand.probs[keep]) / LN2 <= self.mu do keep = keep + 1 end
        local total = 0
        for i = 1, keep do weights[i] = cand.probs[i - 1]; total = total + weights[i] end
        for i = #weights, keep + 1, -1 do weights[i] = nil end
        local pick = sampler.categorical(weights, cand.sampler:uniform())
        local surprise = -math.log(weights[pick] / total) / LN2
        self.mu = self.mu - eta * (surprise - tau)
        return cand.ids[pick - 1]
    end
    return policy
end
