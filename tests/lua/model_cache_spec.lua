-- Batching, fork and truncate give the same logits as fresh single-sequence runs (issue 3, items 2-4).
-- Runs on every committed fixture that has tokens.npy; compares logits, so any reordering bug shows.
local ffi = require("ffi")
local npy = require("glm53.npy")
local model = require("glm53.model")
local fixtures = require("fixtures")
local device = require("device")

local function rel_err(a, b, n)
    local maxd, maxr = 0, 0
    for i = 0, n - 1 do
        local d = math.abs(a[i] - b[i])
        if d ~= d then return math.huge end
        if d > maxd then maxd = d end
        if math.abs(b[i]) > maxr then maxr = math.abs(b[i]) end
    end
    return maxr > 0 and maxd / maxr or maxd
end

-- Logits of every row when `tokens` (Lua array) is run as one prefill on a fresh sequence.
local function fresh_logits(m, tokens)
    local seq = assert(m:seq({ max_tokens = #tokens }))
    local batch = m:batch({ rows = #tokens, seqs = 1, outputs = #tokens })
    batch:add(seq, tokens, "all")
    assert(m:step(batch))
    local out = ffi.new("float[?]", #tokens * m.vocab_size)
    ffi.copy(out, batch:logits(0), #tokens * m.vocab_size * 4)
    seq:free()
    return out
end

local function slice(t, i, j)
    local s = {}
    for k = i, j do s[#s + 1] = t[k] end
    return s
end

for _, fx in ipairs(fixtures.list()) do
    describe("caches (" .. device.name .. ") on " .. fx.name, function()
        local m, tokens
        setup(function()
            m = assert(model.load(fx.dir, device.load_opts()))
            local arr = assert(npy.read(fx.dir .. "/tokens.npy"))
            tokens = {}
            for i = 0, math.min(arr.n, 48) - 1 do tokens[#tokens + 1] = arr.data[i] end
        end)
        teardown(function() m:free() end)

        it("four sequences of different lengths in one batch equal each alone", function()
            local V = m.vocab_size
            local lengths = { 5, 17, 1, 31 }
            local seqs, batch = {}, m:batch({ rows = 64, seqs = 4, outputs = 64 })
            local offset = 0
            for i, len in ipairs(lengths) do
                seqs[i] = assert(m:seq({ max_tokens = 64 }))
                batch:add(seqs[i], slice(tokens, i, i + len - 1), "all")
            end
            assert(m:step(batch))
            for i, len in ipairs(lengths) do
                local alone = fresh_logits(m, slice(tokens, i, i + len - 1))
                assert.is_true(rel_err(batch:logits(offset), alone, len * V) <= device.same, "sequence " .. i)
                offset = offset + len
            end
            -- A second, decode-sized step of the same batch (different positions per sequence).
            batch:clear()
            for i = 1, 4 do batch:add(seqs[i], { tokens[32 + i] }) end
            assert(m:step(batch))
            for i, len in ipairs(lengths) do
                local ref = fresh_logits(m, (function()
                    local t = slice(tokens, i, i + len - 1)
                    t[#t + 1] = tokens[32 + i]
                    return t
                end)())
                assert.is_true(rel_err(batch:logits(i - 1), ref + len * V, V) <= device.same, "decode of sequence " .. i)
            end
        end)

        it("a fork continues like a fresh run, for both copies", function()
            local V = m.vocab_size
            local prefix = slice(tokens, 1, 21)
            local seq = assert(m:seq({ max_tokens = 64 }))
            local batch = m:batch({ rows = 64, seqs = 2, outputs = 64 })
            batch:add(seq, prefix)
            assert(m:step(batch))
            local fork = assert(seq:fork())
            assert.are.equal(21, fork:length())
            local a, b = slice(tokens, 22, 30), slice(tokens, 31, 36)
            batch:clear()
            batch:add(seq, a, "all")
            batch:add(fork, b, "all")
            assert(m:step(batch))
            local full_a, full_b = {}, {}
            for _, t in ipairs(prefix) do full_a[#full_a + 1] = t; full_b[#full_b + 1] = t end
            for _, t in ipairs(a) do full_a[#full_a + 1] = t end
            for _, t in ipairs(b) do full_b[#full_b + 1] = t end
            local ref_a, ref_b = fresh_logits(m, full_a), fresh_logits(m, full_b)
            assert.is_true(rel_err(batch:logits(0), ref_a + #prefix * V, #a * V) <= device.same)
            assert.is_true(rel_err(batch:logits(#a), ref_b + #prefix * V, #b * V) <= device.same)
        end)

        it("truncate then continue equals a fresh run of the shorter prefix plus the new tokens", function()
            local V = m.vocab_size
            local batch = m:batch({ rows = 64, seqs = 1, outputs = 64 })
            for _, keep in ipairs({ 30, 29, 25, 22 }) do
                local seq = assert(m:seq({ max_tokens = 64, max_rollback = 8 }))
                batch:clear()
                batch:add(seq, slice(tokens, 1, 30))
                assert(m:step(batch))
                assert(seq:truncate(keep))
                assert.are.equal(keep, seq:length())
                local new = slice(tokens, 35, 40)
                batch:clear()
                batch:add(seq, new, "all")
                assert(m:step(batch))
                local full = slice(tokens, 1, keep)
                for _, t in ipairs(new) do full[#full + 1] = t end
                local ref = fresh_logits(m, full)
                assert.is_true(rel_err(batch:logits(0), ref + keep * V, #new * V) <= device.same, "keep " .. keep)
                seq:free()
            end
        end)

        it("refuses rollbacks whose state is gone, and changes nothing", function()
            local seq = assert(m:seq({ max_tokens = 64, max_rollback = 8 }))
            local batch = m:batch({ rows = 64, seqs = 1 })
            batch:add(seq, slice(tokens, 1, 30))
            assert(m:step(batch))
            local ok, err = seq:truncate(10)            -- 20 back, window is 8
            assert.is_nil(ok)
            assert.matches("max_rollback", err)
            assert.are.equal(30, seq:length())
            if m.config.text.linear_num_heads > 0 then
                -- Prefill kept the states of lengths 22..30 (ring of 9). Roll back to 22 and grow 2: within the
                -- window of 8, length 21 was never kept (its slot holds 30), so it is refused, not served stale.
                assert(seq:truncate(22))
                batch:clear()
                batch:add(seq, slice(tokens, 35, 36))
                assert(m:step(batch))
                ok, err = seq:truncate(21)
                assert.is_nil(ok)
                assert.matches("no longer kept", err)
                assert.are.equal(24, seq:length())
                assert(seq:truncate(22))
            end
        end)

        it("bad input is refused without changing the sequence", function()
            local seq = assert(m:seq({ max_tokens = 8 }))
            local batch = m:batch({ rows = 16, seqs = 1 })
            batch:add(seq, { 1, 2, 3 })
            assert(m:step(batch))
            batch:clear()
            batch:add(seq, { 1, m.vocab_size })
            local ok, err = m:step(batch)
            assert.is_nil(ok)
            assert.matches("GLM53_ERR_OUT_OF_RANGE", err)
            assert.are.equal(3, seq:length())
            batch:clear()
            batch:add(seq, { 1, 2, 3, 4, 5, 6 })
            ok, err = m:step(batch)
            assert.is_nil(ok)
            assert.matches("GLM53_ERR_CACHE_FULL", err)
            assert.are.equal(3, seq:length())
        end)
    end)
end
