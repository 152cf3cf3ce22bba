-- The server under load (tests/server/load.lua, 64 streaming clients for 20 s: the 2-minute run's figures are in
-- docs/server.md) and its batching, liveness and prefix-cache figures (tests/server/bench.lua), both on models/tiny
-- (the small random-weight test model, named explicitly; docs/server.md has the figures on the default
-- models/glm53-tiny too).
local cjson = require("cjson")
local H = require("server_helpers")

local function run_json(cmd)
    local p = io.popen(H.quote(H.LUAJIT) .. " " .. cmd .. " --json 2>&1; echo \"rc=$?\"")
    local out = p:read("*a")
    p:close()
    io.write("\n", (out:gsub("\n{.*$", ""):gsub("rc=%d+%s*$", "")))
    local rc = tonumber(out:match("rc=(%d+)%s*$"))
    local json = out:match("\n(%b{})%s*rc=")
    return json and cjson.decode(json), rc, out
end

describe("server under load", function()
    it("64 concurrent streaming clients for 20 s: no failure, every stream ends with [DONE], RSS flat", function()
        -- A 4 MiB prefix cache is full within the warm-up, so growth after it would be a leak; with the default
        -- 512 MiB the cache itself still fills during a 20-s run (+11% seen once).
        local r, rc, out = run_json("tests/server/load.lua --clients 64 --seconds 20 " ..
                                    "--server-arg=--model=models/tiny --server-arg=--prefix-cache-mb=4")
        assert.is_table(r, out)
        assert.are.equal(0, r.failed, out)
        assert.are.equal(0, r.without_done, out)
        assert.is_true(r.requests > 64, out)
        assert.is_true(r.rss_growth < 0.10, out)
        assert.are.equal(0, rc, out)
    end)

    it("batches concurrent streams, answers /health during a long prefill, serves a shared system prompt cached", function()
        local r, rc, out = run_json("tests/server/bench.lua --model models/tiny --reps 2")
        assert.are.equal(0, rc, out)
        -- r.speedup is printed, not asserted: on models/tiny the CPU step itself costs about 0.13 ms per row
        -- (docs/server.md), so the figure says more about the engine and the machine's load than the server.
        -- /health within 50 ms during the 4,000-token prefills, judged on the 90th percentile of all probes over
        -- three prefills: a server that stops answering while it prefills is slow at every prefill, while the
        -- rare single probe of 160-210 ms seen on busy shared VMs (not explained: docs/server.md) is one of 15.
        -- Each prefill's slowest probe is printed above.
        assert.is_true(r.liveness_reps >= 3 and r.health_probes >= 3 * r.liveness_reps, out)
        assert.is_true(r.health_p90_ms < 50, out)
        assert.is_true(r.ttft_ratio <= 1 / 3, out)
        assert.is_true(r.prefix_cache_hit_tokens >= r.system_tokens - 8, out)
    end)
end)
