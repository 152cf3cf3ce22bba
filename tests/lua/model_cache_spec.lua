-- Batching, fork and truncate give the same logits as fresh single-sequence runs (issue 3, items 2-4; issue 5,
-- item 4 on CUDA). Runs on every committed fixture that has tokens.npy; compares logits, so any reordering bug
-- shows. The token sequences come from the fixture's cache_tokens.json: make_fixtures.py grew them token by token
-- so that no routing, pool or argmax choice is within BF16 noise at any position run here, and CUDA's batched and
-- single runs (which round differently) can only differ by rounding, not by a flipped choice.
local ffi = require("ffi")
local npy = require("glm53.util.npy")
local model = require("glm53.engine.model")
local fixtures = require("fixtures")
local device = require("device")

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

local function concat(a, b)
    local s = slice(a, 1, #a)
    for _, t in ipairs(b) do s[#s + 1] = t end
    return s
end

for _, fx in ipairs(fixtures.list()) do
    describe("caches (" .. device.name .. ") on " .. fx.name, function()
        local m, tokens, cache
        setup(function()
            m = assert(model.load(fx.dir, device.load_opts()))
            local arr = assert(npy.read(fx.dir .. "/tokens.npy"))
            tokens = {}
            for i = 0, arr.n - 1 do tokens[#tokens + 1] = arr.data[i] end
            cache = assert(fixtures.read_json(fx.dir .. "/cache_tokens.json"), "no cache_tokens.json")
        end)
        teardown(function() m:free() end)

        it("four sequences of different lengths in one batch equal each alone", function()
            local V = m.vocab_size
            -- cache.batch: four sequences of 6, 18, 2 and 32 tokens; all but the last token go in one step.
            local seqs, batch = {}, m:batch({ rows = 64, seqs = 4, outputs = 64 })
            local offset = 0
            for i, toks in ipairs(cache.batch) do
                seqs[i] = assert(m:seq({ max_tokens = 64 }))
                batch:add(seqs[i], slice(toks, 1, #toks - 1), "all")
            end
            assert(m:step(batch))
            for i, toks in ipairs(cache.batch) do
                local len = #toks - 1
                local alone = fresh_logits(m, slice(toks, 1, len))
                assert.is_true(fixtures.rel_err(batch:logits(offset), alone, len * V) <= device.same, "sequence " .. i)
                offset = offset + len
            end
            -- A second, decode-sized step of the same batch (different positions per sequence).
            batch:clear()
            for i, toks in ipairs(cache.batch) do batch:add(seqs[i], { toks[#toks] }) end
            assert(m:step(batch))
            for i, toks in ipairs(cache.batch) do
                local ref = fresh_logits(m, toks)
                assert.is_true(fixtures.rel_err(batch:logits(i - 1), ref + (#toks - 1) * V, V) <= device.same,
                               "decode of sequence " .. i)
            end
        end)

        it("a fork continues like a fresh run, for both copies", function()
            local V = m.vocab_size
            local prefix = slice(tokens, 1, cache.fork_prefix)
            local seq = assert(m:seq({ max_tokens = 64 }))
            local batch = m:batch({ rows = 64, seqs = 2, outputs = 64 })
            batch:add(seq, prefix)
            assert(m:step(batch))
            local fork = assert(seq:fork())
            assert.are.equal(#prefix, fork:length())
            local a, b = cache.fork_a, cache.fork_b
            batch:clear()
            batch:add(seq, a, "all")
            batch:add(fork, b, "all")
            assert(m:step(batch))
            local ref_a, ref_b = fresh_logits(m, concat(prefix, a)), fresh_logits(m, concat(prefix, b))
            assert.is_true(fixtures.rel_err(batch:logits(0), ref_a + #prefix * V, #a * V) <= device.same)
            assert.is_true(fixtures.rel_err(batch:logits(#a), ref_b + #prefix * V, #b * V) <= device.same)
        end)

        it("truncate then continue equals a fresh run of the shorter prefix plus the new tokens", function()
            local V = m.vocab_size
            local batch = m:batch({ rows = 64, seqs = 1, outputs = 64 })
            for _, keep in ipairs(cache.truncate_keep) do
                local seq = assert(m:seq({ max_tokens = 64, max_rollback = 8 }))
                batch:clear()
                batch:add(seq, slice(tokens, 1, cache.truncate_prefix))
                assert(m:step(batch))
                assert(seq:truncate(keep))
                assert.are.equal(keep, seq:length())
                local new = cache.truncate_new
                batch:clear()
                batch:add(seq, new, "all")
                assert(m:step(batch))
                local ref = fresh_logits(m, concat(slice(tokens, 1, keep), new))
                assert.is_true(fixtures.rel_err(batch:logits(0), ref + keep * V, #new * V) <= device.same, "keep " .. keep)
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
