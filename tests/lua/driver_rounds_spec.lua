-- The generation driver in rounds mode (what the server runs): prefill chunks ride in the rounds next to decode
-- rows, streams carry their own sampling, policy and depth, start from prefixes kept with d:snapshot at a
-- boundary, report logprobs and prompt logprobs and what the research capture recorded, end early with d:finish,
-- and every step can go through a caller's step function (the server's async one). Each is checked against the
-- synchronous driver, plain greedy decoding or a one-pass prefill, token for token.
local ffi = require("ffi")
local uv = require("luv")
local model = require("glm53.engine.model")
local async = require("glm53.engine.async")
local driver = require("glm53.generation.driver")
local h = require("spec_helpers")

local MODEL = "models/tiny"
local N_NEW = 24

local function make_prompt(vocab, len, seed)
    local state, ids = seed, {}
    for j = 1, len do
        state = (state * 69069 + 1) % 4294967296
        ids[j] = math.floor(state / 65536) % vocab
    end
    return ids
end

-- Runs streams (a list of {prompt, opts}) through a driver made with dopts; returns the streams.
local function run(m, dopts, specs)
    local d = assert(driver.new(m, dopts))
    local streams = {}
    for i, sp in ipairs(specs) do streams[i] = assert(d:add(sp[1], sp[2])) end
    assert(d:run())
    d:free()
    return streams
end

local function log_softmax(row, n)
    local mx = -math.huge
    for i = 0, n - 1 do mx = math.max(mx, row[i]) end
    local z = 0
    for i = 0, n - 1 do z = z + math.exp(row[i] - mx) end
    local out = {}
    for i = 0, n - 1 do out[i] = row[i] - mx - math.log(z) end
    return out
end

describe("driver, prefill = 'rounds'", function()
    local m, prompts, refs
    setup(function()
        m = assert(model.load(MODEL, { threads = 1 }))
        prompts = {}
        for i, len in ipairs({ 3, 40, 300, 1, 17 }) do prompts[i] = make_prompt(768, len, 11 + i) end
        refs = {}
        for i, p in ipairs(prompts) do refs[i] = h.greedy(m, p, N_NEW) end
    end)
    teardown(function() m:free() end)

    it("greedy streams with their own depths, prefill chunks mixed into the rounds, equal plain greedy", function()
        local specs = {}
        for i, p in ipairs(prompts) do specs[i] = { p, { max_new = N_NEW, k = (i % 3 == 0) and 0 or i % 4 } } end
        local streams = run(m, { k = 3, max_seqs = #prompts, chunk = 16, prefill = "rounds" }, specs)
        for i, s in ipairs(streams) do
            assert.are.same(refs[i], s.generated, "prompt " .. i)
            assert.are.equal("length", s.finish_reason)
        end
    end)

    it("plain greedy rounds leave the logits rows on the device; a stream that needs them brings them back", function()
        -- Greedy streams without bias, penalty or logprobs take each verified row's token (and each draft) from the
        -- step's greedy output (top_k 1): the target and MTP batches run without logits rows. Any stream that
        -- needs the row (penalty, logprobs, sampling) turns them on for the round. Tokens equal plain greedy
        -- decoding either way.
        local function rounds_with(opts2)
            local d = assert(driver.new(m, { k = 2, max_seqs = 2, chunk = 64, prefill = "rounds" }))
            local a = assert(d:add(prompts[2], { max_new = N_NEW }))
            local b = opts2 and assert(d:add(prompts[5], opts2)) or nil
            local off_rounds, rounds, draft_off = 0, 0, 0
            while d:active() > 0 do
                assert(d:round())
                rounds = rounds + 1
                if d.vb.logits_off then off_rounds = off_rounds + 1 end
                if d.db.logits_off then draft_off = draft_off + 1 end
            end
            d:free()
            return a, b, off_rounds, rounds, draft_off
        end
        local a, _, off_rounds, rounds, draft_off = rounds_with(nil)
        assert.are.same(refs[2], a.generated)
        assert.are.equal(rounds, off_rounds, "every round of a plain greedy stream ran without logits rows")
        assert.is_true(draft_off > 0, "its drafts came from the MTP steps' top-1 outputs")
        local a2, b2, off2, rounds2 = rounds_with({ max_new = N_NEW, logprobs = 2 })
        assert.are.same(refs[2], a2.generated)
        assert.are.same(refs[5], b2.generated)
        assert.are.equal(N_NEW, #b2.logprobs)
        assert.is_true(off2 < rounds2, "the rounds that verified the logprobs stream ran with logits rows")
        local a3, _, off3, rounds3 = rounds_with({ max_new = 4, sampling = { temperature = 0, repetition_penalty = 1.3 } })
        assert.are.same(refs[2], a3.generated)
        assert.is_true(off3 < rounds3, "rounds with the penalised stream ran with logits rows")
        assert.is_true(off3 > 0, "once the penalised stream ended, the rounds ran without them again")
    end)

    it("a round prefills several streams, oldest first, within the chunk budget", function()
        -- prompts of 3, 40, 300, 1 and 17 tokens feed 2, 39, 299, 0 and 16 prefill rows; chunk 48
        local d = assert(driver.new(m, { k = 1, max_seqs = #prompts, chunk = 48, prefill = "rounds" }))
        local streams = {}
        for i, p in ipairs(prompts) do streams[i] = assert(d:add(p, { max_new = N_NEW, k = i % 2 })) end
        local function states()
            local out = {}
            for i, s in ipairs(streams) do out[i] = s.done and "done" or s.state end
            return out
        end
        assert(d:round())   -- 2 + 39 rows of the first two, 7 of the third; the one-token prompt decodes at once
        assert.are.same({ "decode", "decode", "prefill", "decode", "prefill" }, states())
        assert.are.equal(7, streams[3].L)
        assert(d:round())   -- 48 more of the third (the budget goes to the oldest first)
        assert.are.equal(55, streams[3].L)
        assert.are.equal(0, streams[5].L)
        assert(d:run())
        for i, s in ipairs(streams) do assert.are.same(refs[i], s.generated, "prompt " .. i) end
        d:free()
    end)

    it("sampled streams (own options and seeds) draw what the synchronous driver draws", function()
        local specs = {}
        for i, p in ipairs(prompts) do
            specs[i] = { p, { max_new = N_NEW, seed = 100 + i,
                              sampling = { temperature = 0.7 + 0.1 * i, top_p = 0.9, top_k = 10 * i } } }
        end
        local sync = {}
        for i, sp in ipairs(specs) do sync[i] = run(m, { k = 0 }, { sp })[1] end
        local rounds = run(m, { k = 0, max_seqs = #prompts, chunk = 32, prefill = "rounds" }, specs)
        for i = 1, #specs do assert.are.same(sync[i].generated, rounds[i].generated, "prompt " .. i) end
        -- and with speculation in the mix (exact in distribution; same draws per seed need the same k)
        local spec_sync = run(m, { k = 2 }, { specs[2] })[1]
        local spec_rounds = run(m, { k = 2, max_seqs = 2, chunk = 8, prefill = "rounds" }, { specs[1], specs[2] })
        assert.are.same(spec_sync.generated, spec_rounds[2].generated)
    end)

    it("sampled streams with a top_k below 64 draw from the step's top-k outputs what whole rows would give", function()
        -- no logits row comes to the host in their decode rounds (Driver:_device_top): sample_top draws from the
        -- row's top_k + 1 best logits the token sampler:sample draws from the whole row
        local sampling = { temperature = 0.9, top_k = 12, top_p = 0.95, seed = 7 }
        local d = assert(driver.new(m, { k = 0, max_seqs = 2, chunk = 64, prefill = "rounds" }))
        local a = assert(d:add(prompts[2], { max_new = N_NEW, sampling = sampling }))
        local b = assert(d:add(prompts[3], { max_new = N_NEW, sampling = { temperature = 0.6, top_k = 63, seed = 8 } }))
        local device_rounds = 0
        while not (a.done and b.done) do
            assert(d:round())
            if d.vb_top > 1 then device_rounds = device_rounds + 1 end
        end
        assert.is_true(device_rounds >= N_NEW - 1, "rounds without logits rows: " .. device_rounds)
        assert.are.same(h.sampled(m, prompts[2], N_NEW, sampling), a.generated)
        assert.are.same(h.sampled(m, prompts[3], N_NEW, { temperature = 0.6, top_k = 63, seed = 8 }), b.generated)
        d:free()
    end)

    it("a stream forked from a snapshot taken at a boundary continues like a fresh one", function()
        local d = assert(driver.new(m, { k = 2, max_seqs = 3, chunk = 8, prefill = "rounds" }))
        local system = make_prompt(768, 37, 5)
        local a_prompt, b_prompt = {}, {}
        for i, id in ipairs(system) do a_prompt[i], b_prompt[i] = id, id end
        for _, id in ipairs(make_prompt(768, 9, 6)) do a_prompt[#a_prompt + 1] = id end
        for _, id in ipairs(make_prompt(768, 14, 7)) do b_prompt[#b_prompt + 1] = id end
        local snap
        local a = assert(d:add(a_prompt, { max_new = N_NEW, boundary = #system, k = 2, capacity = 128,
                                           on_boundary = function(s) snap = assert(d:snapshot(s)) end }))
        assert(d:round())
        while not snap do assert(d:round()) end
        assert.are.equal(#system, snap.L)
        local b = assert(d:add(b_prompt, { max_new = N_NEW, prefix = snap, k = 2 }))
        local c = assert(d:add(b_prompt, { max_new = N_NEW, prefix = snap, k = 0 }))
        assert(d:run())
        assert.are.same(h.greedy(m, a_prompt, N_NEW), a.generated)
        local ref = h.greedy(m, b_prompt, N_NEW)
        assert.are.same(ref, b.generated)
        assert.are.same(ref, c.generated)
        assert.are.equal(0, snap.pins)
        snap:free()
        d:free()
    end)

    it("finish ends a stream at once between rounds, at the round's end during one; the others carry on", function()
        local finish_in_step   -- a stream the step function ends while its round runs (a client gone mid-step)
        local d
        local function step(batch, mtp)
            if finish_in_step then
                d:finish(finish_in_step, "gone")
                assert.is_truthy(finish_in_step.seq)   -- the step may hold its rows: freed when the round ends
                finish_in_step = nil
            end
            if mtp then return m:mtp_step(batch, mtp.mtp_layer, mtp.hidden_in) end
            return m:step(batch)
        end
        d = assert(driver.new(m, { k = 2, max_seqs = 4, chunk = 16, prefill = "rounds", step = step }))
        local a = assert(d:add(prompts[1], { max_new = N_NEW }))
        local b = assert(d:add(prompts[2], { max_new = N_NEW }))
        local c = assert(d:add(prompts[4], { max_new = N_NEW }))
        local q = assert(d:add(prompts[5], { max_new = N_NEW }))
        d:finish(q, "gone")                    -- still queued: freed now
        assert.are.equal(3, d:active())
        assert.are.equal("gone", q.finish_reason)
        for _ = 1, 5 do assert(d:round()) end
        d:finish(a, "cancelled")
        assert.is_nil(a.seq)
        assert.are.equal(2, d:active())
        local n_c = #c.generated
        finish_in_step = c
        assert(d:round())
        assert.is_nil(c.seq)
        assert.are.equal(n_c, #c.generated)    -- nothing of the round it left
        assert.are.equal("gone", c.finish_reason)
        assert.has_error(function() d:finish(c) end, "driver:finish: the stream is not active")
        assert(d:run())
        assert.are.same(refs[2], b.generated)
        assert.are.equal("cancelled", a.finish_reason)
        d:free()
    end)

    it("logprobs and prompt logprobs are the raw log-softmax of the rows that chose them", function()
        local V = 804
        local p = prompts[2]
        local d = assert(driver.new(m, { k = 1, max_seqs = 1, chunk = 16, prefill = "rounds",
                                         sampling = { n_valid = V } }))
        local s = assert(d:add(p, { max_new = 6, logprobs = 3, prompt_logprobs = 2 }))
        assert(d:run())
        -- reference: one prefill of prompt and output, the logits of every row
        local all = {}
        for _, id in ipairs(p) do all[#all + 1] = id end
        for _, id in ipairs(s.generated) do all[#all + 1] = id end
        local seq = assert(m:seq({ max_tokens = #all }))
        local b = m:batch({ rows = #all, seqs = 1, outputs = #all })
        b:add(seq, all, "all")
        assert(m:step(b))
        local function check(entry, row, id, top)
            local ls = log_softmax(b:logits(row), V)
            assert.is_true(math.abs(entry.logprob - ls[id]) < 1e-4)
            if top > 0 then
                assert.are.equal(top, #entry.top)
                for j = 1, top do
                    assert.is_true(math.abs(entry.top[j][2] - ls[entry.top[j][1]]) < 1e-4)
                    if j > 1 then assert.is_true(entry.top[j][2] <= entry.top[j - 1][2]) end
                end
                assert.are.equal(m:argmax(b:logits(row), V), entry.top[1][1])
            end
        end
        assert.is_nil(s.prompt_logprobs[1])
        for i = 2, #p do check(s.prompt_logprobs[i], i - 2, p[i], 2) end
        assert.are.equal(6, #s.logprobs)
        for i, id in ipairs(s.generated) do check(s.logprobs[i], #p + i - 2, id, 3) end
        seq:free()
        d:free()
    end)

    it("runs every step through a caller's step function on a luv loop (async steps in a coroutine)", function()
        local stepper = assert(async.new(m, uv))
        local function step(batch, mtp)
            local co = coroutine.running()
            local ok, err = stepper:step(batch, function(ok, err) assert(coroutine.resume(co, ok, err)) end, mtp)
            if not ok then return nil, err end
            return coroutine.yield()
        end
        local d = assert(driver.new(m, { k = 2, max_seqs = #prompts, chunk = 16, prefill = "rounds", step = step }))
        local streams = {}
        for i, p in ipairs(prompts) do streams[i] = assert(d:add(p, { max_new = N_NEW })) end
        local done, ticks = false, 0
        local timer = uv.new_timer()
        timer:start(1, 1, function() ticks = ticks + 1 end)
        local co = coroutine.create(function()
            assert(d:run())
            done = true
            timer:close()
            stepper:close()
        end)
        assert(coroutine.resume(co))
        uv.run()
        assert.is_true(done)
        for i, s in ipairs(streams) do assert.are.same(refs[i], s.generated) end
        assert.is_true(ticks > 0)
        d:free()
    end)

    it("capture: the routed experts and selected positions of the rows that chose each token, in every mode", function()
        local capture = { experts = true, selection = true }
        for _, dopts in ipairs({ { k = 0 }, { k = 2 }, { k = 2, max_seqs = 2, chunk = 16, prefill = "rounds" } }) do
            local streams = run(m, dopts, { { prompts[3], { max_new = N_NEW, capture = capture } },
                                            dopts.prefill and { prompts[2], { max_new = N_NEW } } or nil })
            local s = streams[1]
            assert.are.same(refs[3], s.generated)
            local experts, selection = h.capture_reference(m, prompts[3], s.generated)
            assert.are.equal(3, #experts[1])          -- models/tiny: 3 MoE layers, top 2
            assert.are.equal(2, #experts[1][1])
            assert.are.equal(1, #selection[1])        -- and one sparse layer
            assert.are.same(experts, s.routed_experts, "k = " .. dopts.k)
            assert.are.same(selection, s.indexer_topk, "k = " .. dopts.k)
            if streams[2] then assert.is_nil(streams[2].routed_experts) end
        end
        -- a stream forked from a prefix (which records nothing) captures with its own sequence
        local d = assert(driver.new(m, { k = 1, max_seqs = 2 }))
        local pre = assert(d:prefix(prompts[3]))
        local s = assert(d:add(pre, { max_new = N_NEW, capture = capture }))
        local plain = assert(d:add(pre, { max_new = N_NEW }))
        assert(d:run())
        local experts, selection = h.capture_reference(m, prompts[3], s.generated)
        assert.are.same(experts, s.routed_experts)
        assert.are.same(selection, s.indexer_topk)
        assert.is_nil(plain.routed_experts)
        assert.has_error(function() d:add({ 1, 2 }, { capture = { pools = true } }) end,
                         "driver:add: unknown capture option 'pools'")
        pre:free(); d:free()
    end)

    it("max_new = 0 computes prompt logprobs only; a failed sequence start ends the stream with its error", function()
        local d = assert(driver.new(m, { k = 0, max_seqs = 2, prefill = "rounds" }))
        local s = assert(d:add(prompts[1], { max_new = 0, prompt_logprobs = 0 }))
        local bad = assert(d:add(prompts[1], { max_new = 4, capacity = 0 }))
        assert(d:run())
        assert.are.equal(0, #s.generated)
        assert.are.equal(#prompts[1], #s.prompt_logprobs)
        assert.are.equal("error", bad.finish_reason)
        assert.matches("GLM53_ERR", bad.error)
        d:free()
    end)
end)
