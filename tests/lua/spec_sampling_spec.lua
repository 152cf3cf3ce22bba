-- Speculative sampling is exact (issue 6, acceptance 2): with temperature 0.8, top-p 0.9, top-k 20 and K = 3
-- drafts, the first three sampled tokens follow the distribution of plain sampling; a deliberately broken
-- variant (the verifier's q skips the filters the draft was drawn with) fails the same test.
--
-- The model: models/tiny cut to a tiny-vocabulary config (main layers 0 = KDA and 3 = DSA, its MTP layer, the
-- first 48 token ids; spec_helpers.derive_checkpoint). Same format, same random weights: a small vocabulary
-- makes the joint distribution of three tokens small enough to test with 20000 samples, and the MTP layer
-- overlaps the target often enough (acceptance ~15%) that every branch of the verifier runs thousands of times.
--
-- The reference is exact, not sampled: plain sampling draws token t from p_t = the sampler's filtered
-- distribution of the target's logits after the prompt and tokens 1..t-1, so P(x1, x2, x3) = p1(x1) p2(x2|x1)
-- p3(x3|x1,x2), enumerated over the kept tokens (at most 20 + 400 target steps). Plain sampling through the
-- driver (K = 0) is tested against it too. Tests: Pearson chi-square on the joint (cells expected under 5 pooled)
-- and on each position's marginal; a variant fails when any of its four p-values is below 1e-3.
local model = require("glm53.engine.model")
local spec = require("glm53.generation.driver")
local sampler = require("glm53.engine.sampler")
local h = require("spec_helpers")

local SAMPLING = { temperature = 0.8, top_p = 0.9, top_k = 20 }
local PROMPT = { 3, 17, 5, 40, 22, 9 }
local N = 20000
local N_BROKEN = 5000   -- fewer draws make the test weaker, so detection at 5000 implies detection at 20000
local ALPHA = 1e-3

describe("speculative sampling (K = 3) against the exact distribution of plain sampling", function()
    local dir, m, V, exact

    -- The kept tokens of the filtered distribution of one logits row: { [id] = p }.
    local function dist(smp, logits)
        local p = assert(smp:probs(logits))
        local out = {}
        for id = 0, V - 1 do if p[id] > 0 then out[id] = p[id] end end
        return out
    end

    setup(function()
        dir = h.tmpdir()
        h.derive_checkpoint("models/tiny", dir, { 0, 3 }, 48)
        m = assert(model.load(dir, { threads = 1 }))
        V = m.vocab_size
        -- Enumerate P(x1, x2, x3) with one sequence, stepping forward and truncating back.
        local smp = sampler.new(V, SAMPLING)
        local seq = assert(m:seq({ max_tokens = #PROMPT + 4, max_rollback = 4 }))
        local batch = m:batch({ rows = #PROMPT, seqs = 1 })
        local function step(tokens)
            batch:clear()
            batch:add(seq, tokens)
            assert(m:step(batch))
            return batch:logits(0)
        end
        exact = {}
        local p1 = dist(smp, step(PROMPT))
        for x1, a in pairs(p1) do
            local p2 = dist(smp, step({ x1 }))
            for x2, b in pairs(p2) do
                local p3 = dist(smp, step({ x2 }))
                for x3, c in pairs(p3) do exact[x1 .. "," .. x2 .. "," .. x3] = a * b * c end
                assert(seq:truncate(#PROMPT + 1))
            end
            assert(seq:truncate(#PROMPT))
        end
        seq:free()
        smp:free()
    end)

    teardown(function()
        m:free()
        os.execute("rm -rf '" .. dir .. "'")
        spec._testing.unfiltered_draft_q = false
    end)

    -- Marginal of position i of the joint table.
    local function marginal(joint, i)
        local out = {}
        for key, v in pairs(joint) do
            local x = key:match(i == 1 and "^(%d+)" or i == 2 and "^%d+,(%d+)" or "(%d+)$")
            out[x] = (out[x] or 0) + v
        end
        return out
    end

    -- Draws n samples of the first three tokens with a driver of depth k; returns the joint counts and stats.
    local function draw(k, broken, n)
        spec._testing.unfiltered_draft_q = broken
        local d = assert(spec.new(m, { k = k, sampling = SAMPLING }))
        spec._testing.unfiltered_draft_q = false
        local pre = assert(d:prefix(PROMPT, { max_new = 3 }))
        local counts = {}
        for i = 1, n do
            local s = assert(d:add(pre, { max_new = 3, seed = i }))
            assert(d:run())
            local g = s.generated
            local key = g[1] .. "," .. g[2] .. "," .. g[3]
            counts[key] = (counts[key] or 0) + 1
        end
        pre:free()
        return counts, d.stats
    end

    -- Chi-square tests of the joint and the marginals; prints them; returns the smallest p-value.
    local function report(name, counts, n)
        local worst = 1
        local tests = { { "joint", counts, exact } }
        for i = 1, 3 do tests[#tests + 1] = { "token " .. i, marginal(counts, i), marginal(exact, i) } end
        for _, t in ipairs(tests) do
            local stat, df, p, tv = h.chi_square(t[2], t[3], n)
            print(string.format("  %-28s %-8s chi2 %9.1f  df %4d  p %.3g  TV %.4f", name, t[1], stat, df, p, tv))
            worst = math.min(worst, p)
        end
        return worst
    end

    it("plain sampling (K = 0) and speculative sampling (K = 3) pass; the broken variant fails", function()
        local cells = 0
        for _ in pairs(exact) do cells = cells + 1 end
        print(string.format("\n  exact joint over %d cells of a %d-token vocabulary; %d samples (broken: %d)", cells,
                            V, N, N_BROKEN))
        local plain = draw(0, false, N)
        local p_plain = report("plain (K = 0)", plain, N)
        local good, stats = draw(3, false, N)
        local p_good = report("speculative (K = 3)", good, N)
        local sm = spec.summary(stats)
        print(string.format("  K = 3: acceptance %.3f, per position %.3f %.3f %.3f, %.2f tokens per target step",
                            sm.acceptance_rate, sm.acceptance_rate_per_pos[1], sm.acceptance_rate_per_pos[2],
                            sm.acceptance_rate_per_pos[3], sm.tokens_per_target_step))
        local bad = draw(3, true, N_BROKEN)
        local p_bad = report("broken: draft q unfiltered", bad, N_BROKEN)
        assert.is_true(p_plain > ALPHA, "plain sampling differs from the exact distribution")
        assert.is_true(p_good > ALPHA, "speculative sampling differs from plain sampling")
        assert.is_true(p_bad < ALPHA, "the broken variant was not detected")
        assert.is_true(stats.spec_decode_num_accepted_tokens > 1000, "too few accepted drafts to test the verifier")
    end)
end)
