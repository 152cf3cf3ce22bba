-- The draft policies of scripts/policies (draft_adaptive, draft_budget): exact like every draft policy (greedy
-- output equals plain greedy), and each decides what its header says: the adaptive depth follows the stream's
-- acceptance per position, the budget caps a stream's draft tokens.
local model = require("glm53.engine.model")
local driver = require("glm53.generation.driver")
local h = require("spec_helpers")

local adaptive = dofile("scripts/policies/draft_adaptive.lua")
local budget = dofile("scripts/policies/draft_budget.lua")

-- A stream's statistics with per-position counts: drafted[i] rounds drafted position i, accepted[i] of them
-- accepted through it.
local function stats_of(drafted, accepted)
    local total = 0
    for _, n in ipairs(drafted) do total = total + n end
    return { draft_tokens_per_pos = drafted, spec_decode_num_accepted_tokens_per_pos = accepted,
             spec_decode_num_draft_tokens = total }
end

describe("draft_adaptive", function()
    it("drafts deep when drafts are accepted and shallow when they are not", function()
        local p = adaptive({ cost = 0.25 })
        local ctx = { stream = { stats = stats_of({ 100, 100, 100, 100 }, { 95, 90, 85, 80 }) } }
        assert.equals(4, p:depth(ctx))
        ctx.stream.stats = stats_of({ 100, 100, 100, 100 }, { 10, 1, 0, 0 })
        assert.equals(1, p:depth(ctx))                                 -- min_depth keeps measuring position 1
        assert.equals(0, adaptive({ cost = 0.25, min_depth = 0 }):depth(ctx))
        -- expensive drafts (a CPU, where a verified row costs almost a step) are not worth it even when accepted
        ctx.stream.stats = stats_of({ 100, 100 }, { 60, 30 })
        assert.equals(0, adaptive({ cost = 1.0, min_depth = 0 }):depth(ctx))
    end)

    it("estimates untried positions from the measured ones, never above the position before", function()
        local a = adaptive({}).curve(stats_of({ 50, 0, 0 }, { 40, 0, 0 }))
        assert.is_true(a[1] > 0.7 and a[1] < 0.8)                      -- (40 + 2 * 0.5) / 52
        assert.is_true(a[2] <= a[1] and a[3] <= a[2])
        assert.is_true(math.abs(a[2] - a[1] * a[1]) < 1e-12)           -- the geometric continuation
        assert.has_error(function() adaptive({ cost = 0 }) end)
    end)
end)

describe("draft_budget", function()
    it("stops drafting when the stream has spent its budget, and under the threshold", function()
        local p = budget({ budget = 10, threshold = 0.2 })
        assert.equals(10, p:depth({ stream = { stats = stats_of({ 0 }, { 0 }) } }))
        assert.equals(3, p:depth({ stream = { stats = stats_of({ 7 }, { 2 }) } }))
        assert.equals(0, p:depth({ stream = { stats = stats_of({ 12 }, { 2 }) } }))
        assert.is_true(p:keep({}, 1, 5, 0.5))
        assert.is_false(p:keep({}, 1, 5, 0.1))
    end)
end)

describe("draft policies in generation", function()
    local m, prompts, refs
    setup(function()
        m = assert(model.load("models/tiny", { threads = 1 }))
        prompts = h.make_prompts(m.vocab_size, { 3, 9, 33 }, 21)
        refs = {}
        for i, p in ipairs(prompts) do refs[i] = h.greedy(m, p, 80) end
    end)
    teardown(function() m:free() end)

    for _, case in ipairs({
        { "adaptive", adaptive({ cost = 0.1 }) },
        { "budget", budget({ budget = 24, threshold = 0.01 }) },
    }) do
        it(case[1] .. " keeps greedy output exact and its statistics consistent", function()
            local d = assert(driver.new(m, { k = 4, draft = case[2], max_seqs = #prompts }))
            local streams = {}
            for i, p in ipairs(prompts) do streams[i] = assert(d:add(p, { max_new = 80 })) end
            assert(d:run())
            for i, s in ipairs(streams) do
                assert.is_nil(h.first_diff(s.generated, refs[i]), case[1] .. ": prompt " .. i)
                if case[1] == "budget" then assert.is_true(s.stats.spec_decode_num_draft_tokens <= 24) end
            end
            assert.is_true(d.stats.spec_decode_num_drafts > 0)
        end)
    end
end)
