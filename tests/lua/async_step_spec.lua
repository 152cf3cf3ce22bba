-- Async steps (issue 11): a step submitted to the model's worker thread runs off the luv loop, so a 10 ms timer
-- keeps firing through a long prefill; its logits equal the synchronous step's bit for bit; a failed step's
-- error travels with its completion; a sequence freed while its step is queued fails that step cleanly; freeing
-- the model with steps queued cancels them and waits for the running one.
local ffi = require("ffi")
local uv = require("luv")
local model = require("glm53.engine.model")
local async = require("glm53.engine.async")

local MODEL = "models/tiny"
local T = 3000   -- prompt rows: long enough that the prefill takes well over a few timer periods

local function prompt(m, n)
    local ids = ffi.new("int32_t[?]", n)
    for i = 0, n - 1 do ids[i] = (i * 7919 + 13) % 768 end   -- ordinary (non-special) ids of the tiny vocabulary
    return ids
end

describe("async steps", function()
    local m
    setup(function() m = assert(model.load(MODEL, { threads = 1 })) end)
    teardown(function() m:free() end)

    it("a long prefill runs on the worker while a 10 ms luv timer keeps firing, with the synchronous logits", function()
        local ids = prompt(m, T)
        local ref_seq = assert(m:seq({ max_tokens = T }))
        local ref = m:batch({ rows = T, seqs = 1 })
        ref:add(ref_seq, ids, "last", T)
        assert(m:step(ref))

        local seq = assert(m:seq({ max_tokens = T }))
        local batch = m:batch({ rows = T, seqs = 1 })
        batch:add(seq, ids, "last", T)
        local stepper = assert(async.new(m, uv))
        local ticks, result = {}, nil
        local timer = uv.new_timer()
        local t0 = uv.hrtime()
        timer:start(10, 10, function() ticks[#ticks + 1] = uv.hrtime() end)
        assert(stepper:step(batch, function(ok, err)
            result = { ok = ok, err = err, at = uv.hrtime() }
            timer:stop()
            timer:close()
            stepper:close()
        end))
        uv.run()
        assert.is_truthy(result, "the completion callback ran")
        assert.is_true(result.ok, tostring(result.err))
        local elapsed_ms = (result.at - t0) / 1e6
        local max_gap, prev = 0, t0
        for _, t in ipairs(ticks) do
            max_gap = math.max(max_gap, (t - prev) / 1e6)
            prev = t
        end
        print(string.format("  prefill of %d rows on the worker: %.0f ms, %d timer ticks, longest gap %.1f ms", T,
                            elapsed_ms, #ticks, max_gap))
        assert.is_true(elapsed_ms > 100, "the prefill is long enough to show anything")
        assert.is_true(#ticks >= elapsed_ms / 10 * 0.5, "the timer kept firing during the prefill")
        assert.is_true(max_gap < 60, "no tick was held up by the step")
        local a, b = ffi.cast("uint32_t *", batch:logits(0)), ffi.cast("uint32_t *", ref:logits(0))
        local differ = 0
        for i = 0, m.vocab_size - 1 do differ = differ + (a[i] ~= b[i] and 1 or 0) end
        assert.are.equal(0, differ, "logits that differ from the synchronous step's, bit for bit")
        seq:free()
        ref_seq:free()
    end)

    it("a failed step's error travels with its completion", function()
        local seq = assert(m:seq({ max_tokens = 16 }))
        local batch = m:batch({ rows = 4, seqs = 1 })
        batch:add(seq, { 1, 2, 3 })
        batch.tokens[1] = m.vocab_size + 5   -- out of range: checked by the step, on the worker
        local tag = assert(m:submit(batch))
        local got, ok, err = m:wait()
        assert.are.equal(tag, got)
        assert.is_nil(ok)
        assert.matches("GLM53_ERR_OUT_OF_RANGE: .*token id %d+ at row 1 is outside", err)
        assert.are.equal(0, seq:length(), "nothing changed")
        seq:free()
    end)

    it("a sequence freed while its step is queued fails that step cleanly", function()
        local long_seq = assert(m:seq({ max_tokens = T }))
        local long = m:batch({ rows = T, seqs = 1 })
        long:add(long_seq, prompt(m, T), "last", T)
        local doomed = assert(m:seq({ max_tokens = 16 }))
        local short = m:batch({ rows = 4, seqs = 1 })
        short:add(doomed, { 1, 2, 3 })
        local first = assert(m:submit(long))
        local second = assert(m:submit(short))
        doomed:free()   -- queued behind the long prefill: its step must refuse the freed sequence
        local tag1, ok1, err1 = m:wait()
        local tag2, ok2, err2 = m:wait()
        assert.are.same({ first, true }, { tag1, ok1 }, tostring(err1))
        assert.are.equal(second, tag2)
        assert.is_nil(ok2)
        assert.matches("not a live sequence", err2)
        -- and a freed sequence is refused at submission (by its Lua object; C refuses a dead handle too)
        local again = m:batch({ rows = 4, seqs = 1 })
        local gone = assert(m:seq({ max_tokens = 16 }))
        again:add(gone, { 4 })
        gone:free()
        local refused, why = m:submit(again)
        assert.is_nil(refused)
        assert.matches("GLM53_ERR_INVALID_ARG: model:submit: sequence 1 of the batch was freed", why)
        long_seq:free()
    end)

    it("freeing the model cancels queued steps and waits for the running one", function()
        local m2 = assert(model.load(MODEL, { threads = 1 }))
        local seqs, batches = {}, {}
        for i = 1, 3 do
            seqs[i] = assert(m2:seq({ max_tokens = T }))
            batches[i] = m2:batch({ rows = T, seqs = 1 })
            batches[i]:add(seqs[i], prompt(m2, T), "last", T)
            assert(m2:submit(batches[i]))
        end
        m2:free()   -- returns once the running prefill is done; the queued ones never run
        for i = 1, 3 do seqs[i]:free() end
    end)
end)
