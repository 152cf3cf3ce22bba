--[[
typical.lua - locally typical sampling (Meister et al. 2022; transformers' typical_p).

Keeps the candidates whose surprise -log p is closest to the entropy H of the distribution, the fewest whose
mass reaches `mass`, and draws among them. The entropy is that of the candidate set (the top candidates after
the sampler's filters, renormalised): give the sampler enough candidates (--policy-opt candidates is the
sampler's option) for it to stand for the whole distribution.

    bin/glm53 generate ... --policy typical --policy-opt mass=0.9
opts: mass (default 0.95).
]]
local sampler = require("glm53.engine.sampler")

return function(opts)
    local mass = tonumber(opts.mass or 0.95)
    local order, weights, dist = {}, {}, {}
    return function(cand)
        local n, probs = cand.n, cand.probs
        local entropy = 0
        for i = 0, n - 1 do entropy = entropy - probs[i] * math.log(probs[i]) end
        for i = 1, n do
            order[i] = i - 1
            dist[i - 1] = math.abs(-math.log(probs[i - 1]) - entropy)
        end
        for i = #order, n + 1, -1 do order[i] = nil end
        table.sort(order, function(a, b) return dist[a] < dist[b] or (dist[a] == dist[b] and a < b) end)
        local keep, total = 0, 0
        repeat
            keep = keep + 1
            total = total + probs[order[keep]]
        until total >= mass or keep == n
        for i = 1, keep do weights[i] = probs[order[i]] end
        for i = #weights, keep + 1, -1 do weights[i] = nil end
        return cand.ids[order[sampler.categorical(weights, cand.sampler:uniform())]]
    end
end
