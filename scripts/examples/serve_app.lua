--[[
serve_app.lua - extending the server from a script: a route, a limit and a policy (docs/server.md).

    luajit scripts/serve.lua --script scripts/examples/serve_app.lua

A --script file returns function(app); it runs before the server starts. app is glm53.server's app object.
]]
return function(app)
    -- A route: what the scheduler is doing, as JSON.
    app:route("GET", "/v1/stats", function(req, res)
        if not app:ready_or_fail(req, res) then return end
        local waiting, running = app.scheduler:counts()
        app:send(res, 200, { waiting = waiting, running = running, prefix_cache_entries = app.scheduler.cache:count() })
    end)

    -- A limit: a token bucket per client (API key, else address) on the API routes - 10 requests a second,
    -- bursts of 20 - answered with 429 and Retry-After, in the route's error shape.
    local RATE, BURST, buckets = 10, 20, {}
    local uv = require("luv")
    app:use(function(req, res)
        if req.method ~= "POST" then return end
        local who = req.headers["authorization"] or req.headers["x-api-key"] or req.remote_addr or "?"
        local now = uv.now() / 1000
        local b = buckets[who] or { tokens = BURST, at = now }
        buckets[who] = b
        b.tokens = math.min(BURST, b.tokens + (now - b.at) * RATE)
        b.at = now
        if b.tokens < 1 then
            return app:fail(req, res, 429, "rate limit: " .. RATE .. " requests per second", nil, "rate_limit_exceeded",
                            { ["Retry-After"] = tostring(math.ceil((1 - b.tokens) / RATE)) })
        end
        b.tokens = b.tokens - 1
    end)

    -- Another limit, on parsed generation requests: at most 1024 output tokens per request.
    app:admit(function(job)
        if job.max_tokens * job.n > 1024 then return 400, "at most 1024 output tokens per request on this server" end
    end)

    -- A policy: requests name it with "policy": {"name": "ratio", "ratio": 0.2}. It samples only among the
    -- candidates at least `ratio` times as likely as the best one (docs/sampling.md).
    local sampler = require("glm53.engine.sampler")
    app:policy("ratio", function(opts)
        local ratio, w = tonumber(opts.ratio or 0.1), {}
        return function(cand)
            local n = 0
            while n < cand.n and cand.probs[n] >= ratio * cand.probs[0] do n = n + 1; w[n] = cand.probs[n - 1] end
            for i = #w, n + 1, -1 do w[i] = nil end
            return cand.ids[sampler.categorical(w, cand.sampler:uniform()) - 1]
        end
    end)
end
