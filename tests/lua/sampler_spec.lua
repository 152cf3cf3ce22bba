-- glm53.engine.sampler (the FFI wrapper and the policy hook) and the example policies in scripts/policies/.
-- The filters themselves are checked against a double-precision reference in tests/c/test_sampling.c.
local ffi = require("ffi")
local sampler = require("glm53.engine.sampler")

local V = 37

local function row(values)
    local r = ffi.new("float[?]", V)
    for i = 0, V - 1 do r[i] = values and values[i + 1] or math.sin(i * 1.7) * 3 end
    return r
end

describe("glm53.engine.sampler", function()
    it("raises on argument errors", function()
        assert.has_error(function() sampler.new(0) end)
        assert.has_error(function() sampler.new(V, { nosuch = 1 }) end)
        assert.has_error(function() sampler.new(V, { top_p = "x" }) end)
        assert.has_error(function() sampler.new(V, { top_p = 0 }) end, nil)
        assert.has_error(function() sampler.new(V, { logit_bias = { [V] = 1 } }) end)
        local s = sampler.new(V)
        assert.has_error(function() s:sample({ 1, 2 }) end)
        assert.has_error(function() s:set({ min_p = 2 }) end)
        assert.has_error(function() s:candidates(row(), 1000) end)
    end)

    it("returns nil, err on runtime failures (a NaN logit, a bad id)", function()
        local s = sampler.new(V, { temperature = 1 })
        local r = row()
        r[5] = 0 / 0
        local id, err = s:sample(r)
        assert.is_nil(id)
        assert.matches("GLM53_ERR_INVALID_ARG.*token 5", err)
        local ok, err2 = s:accept(V)
        assert.is_nil(ok)
        assert.matches("GLM53_ERR_OUT_OF_RANGE", err2)
    end)

    it("is greedy by default and reproducible by seed otherwise", function()
        local r = row()
        local best = 0
        for i = 1, V - 1 do if r[i] > r[best] then best = i end end
        assert.are.equal(best, sampler.new(V):sample(r))
        local a, b = sampler.new(V, { temperature = 1, seed = 5 }), sampler.new(V, { temperature = 1, seed = 5 })
        local c = sampler.new(V, { temperature = 1, seed = 6 })
        local same, diff = true, 0
        for _ = 1, 100 do
            local x = a:sample(r)
            same = same and x == b:sample(r)
            if x ~= c:sample(r) then diff = diff + 1 end
        end
        assert.is_true(same)
        assert.is_true(diff > 20)
        a:reset()
        b:reset()
        assert.are.equal(a:uniform(), b:uniform())
    end)

    it("gives candidates most likely first, renormalised, matching probs", function()
        local s = sampler.new(V, { temperature = 0.7, top_k = 9, candidates = 5 })
        local r = row()
        local p = s:probs(r)
        local cand = s:candidates(r)
        assert.are.equal(5, cand.n)
        local total = 0
        for i = 0, 4 do total = total + p[cand.ids[i]] end
        for i = 0, 4 do
            assert.are.near(p[cand.ids[i]] / total, cand.probs[i], 1e-6)
            if i > 0 then assert.is_true(cand.probs[i] <= cand.probs[i - 1]) end
        end
        local kept = 0
        for i = 0, V - 1 do if p[i] > 0 then kept = kept + 1 end end
        assert.are.equal(9, kept)
    end)

    it("applies logit_bias and the penalties, and rewinds them", function()
        local s = sampler.new(V, { logit_bias = { [3] = 100 } })
        assert.are.equal(3, s:sample(row()))
        s:set({ logit_bias = { [3] = -math.huge, [4] = 100 } })
        assert.are.equal(4, s:sample(row()))
        local flat = row({})
        for i = 0, V - 1 do flat[i] = 1 end
        flat[7] = 2
        local p = sampler.new(V, { temperature = 1, frequency_penalty = 0.5, presence_penalty = 0.25 })
        local before = p:probs(flat)[7]
        p:accept(7)
        local after = p:probs(flat)[7]
        assert.is_true(after < before)
        p:rewind(1)
        assert.are.equal(before, p:probs(flat)[7])
        local q = sampler.new(V, { temperature = 1, repetition_penalty = 2 })
        q:add_prompt({ 7 })
        assert.is_true(q:probs(flat)[7] < before)
    end)

    it("runs policies: function or table, checked ids, nil to stop", function()
        local s = sampler.new(V, { temperature = 1 })
        local r = row()
        local ctx = {}
        assert.are.equal(11, s:pick(r, function(cand, c)
            assert.are.equal(ctx, c)
            assert.is_true(cand.n >= 1 and cand.sampler == s)
            return 11
        end, ctx))
        assert.are.equal(12, s:pick(r, { pick = function() return 12 end }, ctx))
        local id, why = s:pick(r, function() return nil, "enough" end, ctx)
        assert.is_nil(id)
        assert.are.equal("enough", why)
        assert.has_error(function() s:pick(r, function() return V end, ctx) end)
        assert.has_error(function() s:pick(r, function() return 1.5 end, ctx) end)
    end)

    it("sample_residual draws from max(0, p - q)", function()
        local s = sampler.new(V, { seed = 3 })
        local p, q = ffi.new("float[?]", V), ffi.new("float[?]", V)
        p[1], p[2], q[1], q[2] = 0.5, 0.5, 0.5, 0.2
        for _ = 1, 50 do assert.are.equal(2, s:sample_residual(p, q)) end
        assert.are.equal(2, sampler.categorical({ 0, 3, 0 }, 0.9))
        assert.are.equal(2, sampler.categorical({ 1, 1 }, 0.75))
    end)
end)

-- A synthetic candidate set: ids 100.., probabilities given; the sampler stub replays uniforms.
local function fake_cand(probs, uniforms)
    local cand = { n = #probs, ids = {}, logits = {}, probs = {} }
    for i, p in ipairs(probs) do cand.ids[i - 1], cand.probs[i - 1], cand.logits[i - 1] = 100 + i - 1, p, math.log(p) end
    local k = 0
    cand.sampler = { uniform = function() k = k + 1 return uniforms[(k - 1) % #uniforms + 1] end }
    return cand
end

describe("sampler:sample_top on a model step's top-k outputs", function()
    -- The step chooses each row's 64 best logits where the logits are (on the GPU with GLM53_DEVICE=cuda, where
    -- this spec then checks the device's selection too); draws from them must be the whole row's draws.
    local device = require("device")
    local model = require("glm53.engine.model")

    it("draws sample()'s tokens from the row's best logits for every setting it serves, refuses the rest", function()
        local m = assert(model.load("tests/fixtures/tiny-mtp", device.load_opts()))
        local n_valid = m.vocab_size - 3
        local seq = assert(m:seq({ max_tokens = 16 }))
        local b = m:batch({ rows = 8, seqs = 1, top_k = 64, n_valid = n_valid })
        b:add(seq, { 5, 17, 2, 9 })
        assert(m:step(b))
        local logits = b:logits(0)
        local ids, vals, k = b:top(0)
        assert.are.equal(64, k)
        local draws = 0
        for _, settings in ipairs({
            { temperature = 0 },
            { temperature = 0.6, top_k = 1 },
            { temperature = 0.8, top_k = 20, top_p = 0.9 },
            { temperature = 1.5, top_k = 63, min_p = 0.05 },
            { temperature = 1.0, top_k = 40, top_p = 0.5, min_p = 0.01 },
        }) do
            for seed = 1, 6 do
                settings.seed, settings.n_valid = seed, n_valid
                local whole, top = sampler.new(m.vocab_size, settings), sampler.new(m.vocab_size, settings)
                assert.is_true(top:top_needed() >= 1 and top:top_needed() <= 64)
                for _ = 1, 8 do
                    assert.are.equal(whole:sample(logits), top:sample_top(ids, vals, k))
                    draws = draws + 1
                end
            end
        end
        assert.are.equal(5 * 6 * 8, draws)
        local without_top_k = sampler.new(m.vocab_size, { temperature = 0.8, top_p = 0.9, n_valid = n_valid })
        assert.are.equal(0, without_top_k:top_needed())
        local id, err = without_top_k:sample_top(ids, vals, k)
        assert.is_nil(id)
        assert.matches("GLM53_ERR_UNSUPPORTED: .*need the whole row", err)
        local penalised = sampler.new(m.vocab_size, { temperature = 0.8, top_k = 5, repetition_penalty = 1.2 })
        assert.are.equal(0, penalised:top_needed())
        seq:free()
        m:free()
    end)
end)

describe("scripts/policies", function()
    it("typical keeps the candidates closest to the entropy until their mass reaches `mass`", function()
        local typical = dofile("scripts/policies/typical.lua")({ mass = 0.5 })
        -- H of {0.5, 0.3, 0.2} = 1.0297 nats; surprises 0.693, 1.204, 1.609: order 0.3, 0.5, 0.2; mass 0.5
        -- is reached by {0.3, 0.5}, so token 102 (p 0.2) is never drawn.
        local seen = {}
        for u = 0, 0.99, 0.01 do seen[typical(fake_cand({ 0.5, 0.3, 0.2 }, { u }), {})] = true end
        assert.is_true(seen[100] and seen[101])
        assert.is_nil(seen[102])
    end)

    it("mirostat_v2 truncates at surprise mu and moves mu toward tau", function()
        local miro = dofile("scripts/policies/mirostat_v2.lua")({ tau = 1, eta = 0.5 })
        assert.are.equal(2, miro.mu)
        -- surprises (bits): 0.737, 2.0, 3.32: mu = 2 keeps the first two (renormalised 0.6/0.25 -> 0.706, 0.294).
        local id = miro:pick(fake_cand({ 0.6, 0.25, 0.1, 0.05 }, { 0.99 }), {})
        assert.are.equal(101, id)
        local surprise = -math.log(0.25 / 0.85) / math.log(2)
        assert.are.near(2 - 0.5 * (surprise - 1), miro.mu, 1e-9)
    end)

    it("stop_confidence stops once the top candidate is below the threshold", function()
        local stop = dofile("scripts/policies/stop_confidence.lua")({ threshold = 0.4, min_tokens = 1 })
        assert.are.equal(100, stop(fake_cand({ 0.3, 0.3, 0.4 }, { 0.1 }), { generated = {} }))   -- min_tokens
        local id, why = stop(fake_cand({ 0.3, 0.3, 0.4 }, { 0.1 }), { generated = { 1 } })
        assert.is_nil(id)
        assert.matches("confidence 0.300 < 0.400", why)
        assert.are.equal(100, stop(fake_cand({ 0.9, 0.1 }, { 0.1 }), { generated = { 1 } }))
    end)

    it("json masks candidates that would break JSON and stops when the value is complete", function()
        local json = dofile("scripts/policies/json.lua")
        local texts = { [100] = "hello", [101] = "{\"", [102] = "[1", [103] = "a\"", [104] = ": tr", [105] = "ue}",
                        [106] = "<special>", [107] = "}" }
        local tok = { piece = function(_, id) return texts[id] end, is_special = function(_, id) return id == 106 end }
        local policy = json({ tokenizer = tok })
        -- Each step offers the candidates listed, most likely first; u = 0 takes the first one JSON allows.
        local steps = { { 100, 106, 101 }, { 103 }, { 107, 102, 104 }, { 101, 105 }, { 100 } }
        local out = {}
        for _, ids in ipairs(steps) do
            local cand = fake_cand({ 0.4, 0.35, 0.25 }, { 0 })
            cand.n = #ids
            for i, id in ipairs(ids) do cand.ids[i - 1] = id end
            local id, why = policy(cand, {})
            out[#out + 1] = id and texts[id] or why
        end
        assert.are.same({ "{\"", "a\"", ": tr", "ue}", "JSON value complete" }, out)
        assert.is_true(json.prefix('{"a": [1, -2.5e3, "x\\n"], "b": null}'))
        assert.is_false((json.prefix('{"a" 1}')))
        assert.is_false((json.prefix("[1,]")))
        assert.is_false((json.prefix("01")))
    end)
end)
