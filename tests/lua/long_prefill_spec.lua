-- A long prompt in one step (the hardening issue): the engine splits it into passes of step_rows rows, so the
-- step's scratch stays bounded whatever the prompt length. Before, 16k tokens took 537 MB and 100k 10.6 GB on
-- the 1.2 MB bundled model (the indexer's scores were prompt x prompt); a 100k prompt now peaks at ~130 MB, most
-- of it the 84 MB cache (measured for the issue note). Here at 12k tokens, in a child process so the peak
-- is this step's alone, with the same next token as a prefill in 512-token chunks.
local ffi = require("ffi")
local model = require("glm53.engine.model")

local MODEL, T = "models/tiny", 12000

describe("a long prefill in one step", function()
    it("peaks far below the quadratic scratch and gives the chunked prefill's next token", function()
        local p = assert(io.popen(string.format("luajit tests/lua/long_prefill_child.lua %s %d 2>&1", MODEL, T)))
        local out = p:read("*a")
        p:close()
        local peak, before, argmax = out:match("peak_mb=([%d.]+) before_mb=([%d.]+) argmax=(%d+)")
        assert.is_truthy(peak, out)
        peak, before, argmax = tonumber(peak), tonumber(before), tonumber(argmax)
        local m = assert(model.load(MODEL, { threads = 1 }))
        local s = assert(m:seq({ max_tokens = T }))
        local cache_mb = s:cache_bytes() / 2 ^ 20
        print(string.format("  %d tokens in one step: peak %.0f MB (%.0f MB before the step; cache %.0f MB)", T,
                            peak, before, cache_mb))
        -- the cache itself plus bounded scratch: under 64 MB over the cache (prompt x prompt scores would be 275 MB)
        assert.is_true(peak - before < cache_mb + 64, "the step's memory grew beyond cache + bounded scratch")

        local ids = ffi.new("int32_t[?]", T)
        for i = 0, T - 1 do ids[i] = (i * 7919 + 13) % 768 end
        local b = m:batch({ rows = 512, seqs = 1 })
        for pos = 0, T - 1, 512 do
            b:clear()
            b:add(s, ids + pos, "last", math.min(512, T - pos))
            assert(m:step(b))
        end
        assert.are.equal(argmax, m:argmax(b:logits(0)), "next token of the one-step prefill vs the chunked one")
        s:free()
        m:free()
    end)
end)
