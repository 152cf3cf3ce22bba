-- Speculative decoding with MTP drafts (issue 6): greedy exactness for K = 1..8 (acceptance 1), forced zero,
-- full and alternating acceptance (acceptance 3), the statistics under vLLM's names (acceptance 5), policies
-- through the verifier, checkpoints without MTP, and generate.lua's options.
--
-- Exactness rests on the CPU backend being batch-invariant: a verification step over K + 1 rows gives each row
-- the logits a single-row step would, bit for bit; the first test checks that directly.
local model = require("glm53.engine.model")
local spec = require("glm53.generation.driver")
local h = require("spec_helpers")

local N_NEW = 200
local PROMPT_LENGTHS = { 3, 4, 5, 9, 33 }   -- around index_kpool 4 and index_topk 8 of the tiny models

local make_prompts = h.make_prompts

-- A draft policy proposing a known continuation: ref_of(stream)[position] (nil past its end stops drafting);
-- corrupt(stream, depth) -> true replaces the proposal with a token guaranteed wrong.
local function oracle(vocab, ref_of, corrupt)
    return function(ctx, depth)
        local want = ref_of(ctx.stream)[#ctx.generated + depth]
        if want == nil then return false end
        if corrupt and corrupt(ctx.stream, depth) then return true, (want + 1) % vocab end
        return true, want
    end
end

-- Runs prompts (one stream each) through a driver; returns the streams.
local function run(m, prompts, opts, max_new)
    opts.max_seqs = #prompts
    local d = assert(spec.new(m, opts))
    local streams = {}
    for i, p in ipairs(prompts) do streams[i] = assert(d:add(p, { max_new = max_new })) end
    assert(d:run())
    return streams, d
end

local function describe_model(path, ks, lengths)
    describe("greedy speculative decoding on " .. path, function()
        local m, prompts, refs
        setup(function()
            m = assert(model.load(path, { threads = 1 }))
            prompts = make_prompts(m.vocab_size, lengths, 7)
            refs = {}
            for i, p in ipairs(prompts) do refs[i] = h.greedy(m, p, N_NEW) end
        end)
        teardown(function() m:free() end)

        it("a verification step gives every row the logits of single-row steps, bit for bit", function()
            local ffi = require("ffi")
            local p = prompts[#prompts]
            local seq = assert(m:seq({ max_tokens = 64 }))
            local batch = m:batch({ rows = 64, seqs = 1, outputs = 64 })
            batch:add(seq, p, "all")
            assert(m:step(batch))
            local many = ffi.new("float[?]", #p * m.vocab_size)
            ffi.copy(many, batch:logits(0), #p * m.vocab_size * 4)
            seq:free()
            seq = assert(m:seq({ max_tokens = 64 }))
            for i = 1, #p do
                batch:clear()
                batch:add(seq, { p[i] })
                assert(m:step(batch))
                for v = 0, m.vocab_size - 1 do
                    if batch:logits(0)[v] ~= many[(i - 1) * m.vocab_size + v] then
                        error(string.format("row %d, token %d: %.9g vs %.9g", i, v, batch:logits(0)[v],
                                            many[(i - 1) * m.vocab_size + v]))
                    end
                end
            end
            seq:free()
        end)

        it("with MTP drafts equals plain greedy, token for token, for every K", function()
            for _, k in ipairs(ks) do
                local streams, d = run(m, prompts, { k = k }, N_NEW)
                for i, s in ipairs(streams) do
                    local at = h.first_diff(s.generated, refs[i])
                    assert.is_nil(at, string.format("K=%d prompt of %d tokens: first difference at token %s", k,
                                                    #prompts[i], tostring(at)))
                end
                local sm = spec.summary(d.stats)
                print(string.format("  %s MTP drafts K=%d: %d prompts x %d tokens identical; %d drafts, acceptance %.3f",
                                    path, k, #prompts, N_NEW, d.stats.spec_decode_num_drafts, sm.acceptance_rate))
            end
        end)

        it("with partially wrong drafts (every acceptance length) equals plain greedy for every K", function()
            for _, k in ipairs(ks) do
                local counter, by_stream = 0, {}
                local draft = oracle(m.vocab_size, function(s) return by_stream[s] end, function()
                    counter = (counter * 69069 + 1) % 4294967296
                    return math.floor(counter / 65536) % 4 == 0   -- one proposal in four is wrong
                end)
                local d = assert(spec.new(m, { k = k, draft = draft, max_seqs = #prompts }))
                local streams = {}
                for i, p in ipairs(prompts) do
                    streams[i] = assert(d:add(p, { max_new = N_NEW }))
                    by_stream[streams[i]] = refs[i]
                end
                assert(d:run())
                for i, s in ipairs(streams) do
                    local at = h.first_diff(s.generated, refs[i])
                    assert.is_nil(at, string.format("K=%d prompt of %d tokens: first difference at token %s", k,
                                                    #prompts[i], tostring(at)))
                end
                local per_pos = d.stats.spec_decode_num_accepted_tokens_per_pos
                for pos = 1, k do
                    assert.is_true(per_pos[pos] > 0, "K=" .. k .. ": no draft accepted at position " .. pos)
                end
                print(string.format("  %s oracle drafts K=%d: identical; accepted per position %s, %.2f tokens/step",
                                    path, k, table.concat(per_pos, " "),
                                    spec.summary(d.stats).tokens_per_target_step))
            end
        end)
    end)
end

describe_model("models/tiny", { 1, 2, 3, 4, 5, 6, 7, 8 }, PROMPT_LENGTHS)
describe_model("tests/fixtures/tiny-mtp2", { 1, 2, 3, 8 }, { 3, 33 })   -- two MTP layers: layer d at depth d

describe("forced acceptance patterns keep greedy exact", function()
    local m
    setup(function() m = assert(model.load("models/tiny", { threads = 1 })) end)
    teardown(function() m:free() end)

    -- 100 target steps of one pattern: "full" (every draft right), "zero" (the first draft wrong), "alternate"
    -- (full, zero and no drafts at all, in turn).
    local function pattern_run(k, pattern)
        local prompt = make_prompts(m.vocab_size, { 9 }, 11)[1]
        local steps = 100
        local max_new = pattern == "full" and steps * (k + 1) or pattern == "zero" and steps or nil
        if pattern == "alternate" then max_new = 34 * (k + 1) + 33 + 33 end   -- rounds 0, 3, ..., 99 are full
        local ref = h.greedy(m, prompt, max_new)
        local kinds = { "full", "zero", "none" }
        local draft = function(ctx, depth)
            local kind = pattern
            if pattern == "alternate" then kind = kinds[ctx.stream.stats.target_steps % 3 + 1] end
            if kind == "none" then return false end
            local want = ref[#ctx.generated + depth]
            if want == nil then return false end
            if kind == "zero" then return true, (want + 1) % m.vocab_size end
            return true, want
        end
        local d = assert(spec.new(m, { k = k, draft = draft }))
        local s = assert(d:add(prompt, { max_new = max_new }))
        assert(d:run())
        assert.is_nil(h.first_diff(s.generated, ref), "K=" .. k .. " " .. pattern .. ": differs from plain greedy")
        assert.are.equal(steps, s.stats.target_steps, "K=" .. k .. " " .. pattern .. ": target steps")
        return s.stats
    end

    for _, k in ipairs({ 1, 3, 8 }) do
        it("K=" .. k .. ": full acceptance for 100 steps", function()
            local st = pattern_run(k, "full")
            assert.are.equal(100 * k, st.spec_decode_num_accepted_tokens)
            assert.are.equal(st.spec_decode_num_draft_tokens, st.spec_decode_num_accepted_tokens)
            assert.are.equal(100 * (k + 1), st.tokens)
        end)
        it("K=" .. k .. ": zero acceptance for 100 steps", function()
            local st = pattern_run(k, "zero")
            assert.are.equal(0, st.spec_decode_num_accepted_tokens)
            assert.are.equal(100, st.spec_decode_num_drafts)
            assert.are.equal(100, st.tokens)
        end)
        it("K=" .. k .. ": full, zero and no drafts in turn for 100 steps", function()
            local st = pattern_run(k, "alternate")
            assert.are.equal(67, st.spec_decode_num_drafts)            -- 34 full + 33 zero rounds drafted
            assert.are.equal(34 * k, st.spec_decode_num_accepted_tokens)
        end)
    end

    it("two streams in one batch, one always fully accepted, one never, stay exact", function()
        local prompts = make_prompts(m.vocab_size, { 5, 33 }, 3)
        local k = 4
        local refs = { h.greedy(m, prompts[1], 100 * (k + 1)), h.greedy(m, prompts[2], 100) }
        local which = {}
        local d = assert(spec.new(m, { k = k, max_seqs = 2, draft = function(ctx, depth)
            local i = which[ctx.stream]
            local want = refs[i][#ctx.generated + depth]
            if want == nil then return false end
            return true, i == 1 and want or (want + 1) % m.vocab_size
        end }))
        for i = 1, 2 do which[assert(d:add(prompts[i], { max_new = #refs[i] }))] = i end
        local streams = {}
        for s, i in pairs(which) do streams[i] = s end
        assert(d:run())
        for i = 1, 2 do assert.is_nil(h.first_diff(streams[i].generated, refs[i]), "stream " .. i) end
        assert.are.equal(100, streams[1].stats.target_steps)
        assert.are.equal(100, streams[2].stats.target_steps)
    end)
end)

describe("draft policies and penalties", function()
    local m, prompt, ref
    setup(function()
        m = assert(model.load("models/tiny", { threads = 1 }))
        prompt = make_prompts(m.vocab_size, { 9 }, 13)[1]
        ref = h.greedy(m, prompt, 80)
    end)
    teardown(function() m:free() end)

    it("a table policy sets each round's depth; thresholds stop drafting", function()
        local rounds = 0
        local adaptive = {
            depth = function(_, ctx) rounds = rounds + 1 return ctx.stream.stats.target_steps % 2 + 1 end,
            keep = function(_, ctx, depth) return true, ref[#ctx.generated + depth] end,
        }
        local d = assert(spec.new(m, { k = 5, draft = adaptive }))
        local s = assert(d:add(prompt, { max_new = 80 }))
        assert(d:run())
        assert.is_nil(h.first_diff(s.generated, ref))
        local per_pos = s.stats.draft_tokens_per_pos
        assert.is_true(per_pos[1] > 0 and per_pos[2] > 0)
        assert.are.same({ 0, 0, 0 }, { per_pos[3], per_pos[4], per_pos[5] })
        assert.are.equal(rounds, s.stats.target_steps)

        for _, case in ipairs({ { 2, 0 }, { 0, 80 } }) do   -- never confident enough / always
            d = assert(spec.new(m, { k = 3, draft = spec.draft_threshold(case[1]) }))
            s = assert(d:add(prompt, { max_new = 80 }))
            assert(d:run())
            assert.is_nil(h.first_diff(s.generated, ref))
            assert.are.equal(case[2], s.stats.spec_decode_num_drafts)
        end
    end)

    it("min_new bans the stop ids until then, with drafts too (exact), and the request's bias comes back", function()
        local stop = ref[3]   -- plain greedy's third token, as a stop id
        local sampling = { logit_bias = { [ref[5]] = 3 } }
        local function run(k, draft, min_new, bias)
            local d = assert(spec.new(m, { k = k, draft = draft, sampling = bias and sampling or nil }))
            local s = assert(d:add(prompt, { max_new = 40, min_new = min_new, stop_ids = { stop } }))
            assert(d:run())
            return s.generated
        end
        assert.are.equal(3, #run(0, nil, 0))   -- without min_new the stop id ends it at once
        for _, bias in ipairs({ false, true }) do
            local plain = run(0, nil, 6, bias)
            assert.is_true(#plain > 6)
            for i = 1, 6 do assert.are_not.equal(stop, plain[i]) end
            -- drafts offer the stop id at every banned position (rejected) and the right tokens after
            local drafted = run(3, function(ctx, depth)
                local pos = #ctx.generated + depth
                if pos <= 6 then return true, stop end
                if plain[pos] == nil then return false end
                return true, plain[pos]
            end, 6, bias)
            assert.is_nil(h.first_diff(drafted, plain), bias and "with a bias" or "without a bias")
        end
        -- the request's bias is back after min_new, not dropped with the ban: +100 on one id makes every token it
        local x = stop == 7 and 8 or 7
        sampling = { logit_bias = { [x] = 100 } }
        local forced = run(0, nil, 6, true)
        assert.are.equal(40, #forced)
        for i = 1, 40 do assert.are.equal(x, forced[i]) end
    end)

    it("greedy with penalties and a logit bias is exact too (penalty history advanced per draft)", function()
        local sampling = { repetition_penalty = 1.3, presence_penalty = 0.5, frequency_penalty = 0.2,
                           logit_bias = { [ref[1]] = -5, [7] = 2 } }
        local outs = {}
        for _, k in ipairs({ 0, 3 }) do
            local plain_ref = outs[1] and outs[1] or nil
            local d = assert(spec.new(m, { k = k, sampling = sampling, draft = plain_ref and oracle(m.vocab_size,
                function() return plain_ref end, function(_, depth) return depth == 3 end) or nil }))
            local s = assert(d:add(prompt, { max_new = 80 }))
            assert(d:run())
            outs[#outs + 1] = s.generated
            if k > 0 then assert.is_true(s.stats.spec_decode_num_accepted_tokens > 40) end
        end
        assert.is_not_nil(h.first_diff(outs[1], ref))   -- the penalties do change the output
        assert.is_nil(h.first_diff(outs[2], outs[1]))
    end)
end)

describe("statistics", function()
    it("use vLLM's names, add up, and summarise", function()
        local m = assert(model.load("models/tiny", { threads = 1 }))
        local prompts = make_prompts(m.vocab_size, { 4, 9 }, 5)
        local refs = { h.greedy(m, prompts[1], 60), h.greedy(m, prompts[2], 60) }
        local which = {}
        local d = assert(spec.new(m, { k = 3, max_seqs = 2, draft = oracle(m.vocab_size,
            function(s) return refs[which[s]] end, function(_, depth) return depth == 3 end) }))
        local streams = {}
        for i = 1, 2 do
            streams[i] = assert(d:add(prompts[i], { max_new = 60 }))
            which[streams[i]] = i
        end
        assert(d:run())
        local total = { spec_decode_num_drafts = 0, spec_decode_num_draft_tokens = 0,
                        spec_decode_num_accepted_tokens = 0 }
        for _, s in ipairs(streams) do
            local st = s.stats
            for _, key in ipairs({ "spec_decode_num_drafts", "spec_decode_num_draft_tokens",
                                   "spec_decode_num_accepted_tokens" }) do
                assert.are.equal("number", type(st[key]), key)
                total[key] = total[key] + st[key]
            end
            local per_pos = st.spec_decode_num_accepted_tokens_per_pos
            assert.are.equal(3, #per_pos)
            assert.are.equal(st.spec_decode_num_accepted_tokens, per_pos[1] + per_pos[2] + per_pos[3])
            assert.are.equal(0, per_pos[3])                -- the third proposal is always wrong
            assert.is_true(per_pos[1] >= per_pos[2])
            assert.are.equal(60, #s.generated)
            assert.are.equal(st.tokens + 0, 60)
            local sm = spec.summary(st)
            assert.are.near(st.spec_decode_num_accepted_tokens / st.spec_decode_num_draft_tokens, sm.acceptance_rate,
                            1e-12)
            assert.are.near(1 + st.spec_decode_num_accepted_tokens / st.spec_decode_num_drafts,
                            sm.mean_acceptance_length, 1e-12)
            assert.are.near(per_pos[1] / st.spec_decode_num_drafts, sm.acceptance_rate_per_pos[1], 1e-12)
            assert.are.near(60 / st.target_steps, sm.tokens_per_target_step, 1e-12)
        end
        for key, v in pairs(total) do assert.are.equal(v, d.stats[key], "driver total " .. key) end
        m:free()
    end)
end)

describe("policies through the verifier", function()
    local m, tok
    setup(function()
        m = assert(model.load("models/tiny", { threads = 1 }))
        tok = require("glm53.engine.tokenizer").load("models/tiny/tokenizer.json")
    end)
    teardown(function() m:free() end)

    -- A policy's picks are the output, drafts only decide how far a step goes: with the same seed the output is
    -- the same token for token, whatever K (the policy's draws come from the stream's sampler in the same order).
    for _, name in ipairs({ "typical", "mirostat_v2", "json", "stop_confidence" }) do
        it(name .. ": the same tokens for K = 0, 1, 3", function()
            local ctor = dofile("scripts/policies/" .. name .. ".lua")
            local prompt = make_prompts(m.vocab_size, { 6 }, 9)[1]
            local outs = {}
            for _, k in ipairs({ 0, 1, 3 }) do
                local policy = ctor({ tokenizer = tok, threshold = "0.004" })
                local d = assert(spec.new(m, { k = k, policy = policy,
                                               sampling = { temperature = 1, candidates = m.vocab_size } }))
                local s = assert(d:add(prompt, { max_new = 40, seed = 99 }))
                assert(d:run())
                outs[#outs + 1] = { ids = s.generated, finish = s.finish_reason }
            end
            assert.is_true(#outs[1].ids > 0)
            for i = 2, #outs do
                assert.is_nil(h.first_diff(outs[i].ids, outs[1].ids), name .. ": K differs from K = 0")
                assert.are.equal(outs[1].finish, outs[i].finish)
            end
            if name == "json" then
                local text = tok:decode(outs[1].ids)
                assert.is_true(dofile("scripts/policies/json.lua").prefix(text), "not a JSON prefix: " .. text)
            end
        end)
    end
end)

describe("checkpoints without an MTP layer", function()
    it("spec.new with k > 0 returns a clear error; k = 0 works; Model:mtp_step surfaces the core's error", function()
        local m = assert(model.load("tests/fixtures/tiny-f32", { threads = 1 }))
        local d, err = spec.new(m, { k = 2 })
        assert.is_nil(d)
        assert.matches("GLM53_ERR_UNSUPPORTED", err)
        assert.matches("MTP layer", err)
        assert.matches("num_nextn_predict_layers = 0", err)
        d = assert(spec.new(m, { k = 0 }))
        local s = assert(d:add({ 1, 2, 3 }, { max_new = 5 }))
        assert(d:run())
        assert.is_nil(h.first_diff(s.generated, h.greedy(m, { 1, 2, 3 }, 5)))
        local batch = m:batch({ rows = 4, seqs = 1, hidden = true })
        local seq = assert(m:seq({ max_tokens = 8 }))
        batch:add(seq, { 1 })
        local ok, mtp_err = m:mtp_step(batch, 0, batch:hidden(0))
        assert.is_nil(ok)
        assert.matches("GLM53_ERR_UNSUPPORTED", mtp_err)
        assert.matches("no MTP layer", mtp_err)
        seq:free()
        m:free()
    end)
end)

describe("scripts/generate.lua", function()
    local function run_script(cmd) return h.run("luajit scripts/generate.lua " .. cmd) end

    it("--spec-k on a checkpoint without MTP fails with the reason", function()
        local out, rc = run_script("--model tests/fixtures/tiny-f32 --tokens 1,2,3 --max-tokens 4 --spec-k 2")
        assert.are_not.equal(0, rc)
        assert.matches("GLM53_ERR_UNSUPPORTED: speculative decoding with k = 2 drafts needs an MTP layer", out)
    end)

    it("--spec-k keeps greedy ids and reports the spec counters in --json", function()
        local cjson = require("cjson")
        local plain = run_script("--model models/tiny --tokens 5,6,7,8,9 --max-tokens 30 --json")
        local sp = run_script("--model models/tiny --tokens 5,6,7,8,9 --max-tokens 30 --spec-k 3 --json")
        local a = cjson.decode(plain:match("(%b{})%s*rc="))
        local b = cjson.decode(sp:match("(%b{})%s*rc="))
        assert.are.same(a.ids, b.ids)
        assert.is_true(sp:match("%b{}"):find('^{"ids": %[') ~= nil)   -- ids first, as documented
        assert.are.equal(30, b.spec.drafts)
        assert.are.equal(3, #b.spec.accepted_per_pos)
        assert.is_true(b.spec.draft_tokens >= 30 and b.spec.accepted >= 0)
        assert.are.equal(0, a.spec.drafts)
    end)

    it("samples with --temperature/--top-p/--top-k/--min-p/--seed reproducibly, and loads --policy", function()
        local args = "--model models/tiny --tokens 1,2,3 --max-tokens 12 --temperature 0.8 --top-p 0.9 --top-k 20 " ..
                     "--min-p 0.01 --seed 7 --json"
        local x, y = run_script(args), run_script(args)
        assert.are.equal(x:match("%[[%d,]*%]"), y:match("%[[%d,]*%]"))
        local other = run_script(args:gsub("--seed 7", "--seed 8"))
        assert.are_not.equal(x:match("%[[%d,]*%]"), other:match("%[[%d,]*%]"))
        local out, rc = run_script("--model models/tiny --tokens 1,2 --max-tokens 6 --policy mirostat_v2 --spec-k 2 --json")
        assert.are.equal(0, rc, out)
        out, rc = run_script("--model models/tiny --tokens 1,2 --max-tokens 6 --policy nosuch")
        assert.are_not.equal(0, rc)
        assert.matches("nosuch", out)
    end)
end)

describe("force_acceptance (timing speculative decoding at a fixed acceptance)", function()
    local m
    setup(function() m = assert(model.load("models/tiny", { threads = 1 })) end)
    teardown(function() m:free() end)

    it("takes every draft or none whatever the target says, and needs greedy streams", function()
        local prompt = { 5, 6, 7, 8, 9 }
        local function go(k, force)
            local d = assert(spec.new(m, { k = k, force_acceptance = force }))
            local s = assert(d:add(prompt, { max_new = 17 }))
            assert(d:run())
            local st = spec.summary(s.stats)
            local out = { generated = s.generated, rounds = s.stats.target_steps, accepted = s.stats.spec_decode_num_accepted_tokens,
                          drafted = s.stats.spec_decode_num_draft_tokens, rate = st.acceptance_rate }
            d:free()
            return out
        end
        local all, none = go(3, "all"), go(3, "none")
        assert.are.equal(17, #all.generated)
        assert.are.equal(5, all.rounds)             -- 4 + 4 + 4 + 4 + 1 tokens
        assert.are.equal(1, all.rate)
        assert.are.equal(17, #none.generated)
        assert.are.equal(17, none.rounds)           -- one token a round
        assert.are.equal(0, none.accepted)
        -- "none" commits the target's own token every round: plain greedy's ids
        assert.are.same(h.greedy(m, prompt, 17), none.generated)
        assert.has_error(function() spec.new(m, { k = 2, force_acceptance = "some" }) end,
                         "driver.new: force_acceptance must be 'all' or 'none'")
        local d = assert(spec.new(m, { k = 2, force_acceptance = "all", sampling = { temperature = 0.7 } }))
        assert.has_error(function() d:add(prompt, { max_new = 4 }) end,
                         "driver:add: force_acceptance needs greedy streams (temperature 0, no policy)")
        d:free()
    end)
end)
