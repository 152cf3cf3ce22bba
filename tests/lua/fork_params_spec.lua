-- seq:fork(n, opts): a fork with parameters of its own (a small prefix starting a large request, a smaller
-- rollback window) continues exactly as a sequence that computed the same tokens itself: its logits equal a
-- fresh sequence's bit for bit on the CPU (the same steps on the same rows). The reference is that fresh
-- sequence, never the fork's source.
local model = require("glm53.engine.model")
local h = require("spec_helpers")

describe("seq:fork with other parameters", function()
    local m, prompt, cont
    setup(function()
        m = assert(model.load("models/tiny", { threads = 1 }))
        prompt = h.make_prompts(m.vocab_size, { 40 }, 5)[1]
        cont = h.make_prompts(m.vocab_size, { 30 }, 9)[1]
    end)
    teardown(function() m:free() end)

    -- Logits of each step of `cont`, one token per step, after seq holds its tokens (copied as floats).
    local function continue(seq)
        local batch, out = m:batch({ rows = 1, seqs = 1 }), {}
        for i, id in ipairs(cont) do
            batch:clear()
            batch:add(seq, { id })
            assert(m:step(batch))
            local row = batch:logits(0)
            out[i] = {}
            for v = 0, m.vocab_size - 1 do out[i][v] = row[v] end
        end
        return out
    end

    local function prefilled(n, opts)
        local seq = assert(m:seq(opts))
        local batch = m:batch({ rows = n, seqs = 1 })
        local ids = {}
        for i = 1, n do ids[i] = prompt[i] end
        batch:add(seq, ids)
        assert(m:step(batch))
        return seq
    end

    local function same(a, b, what)
        for i = 1, #a do
            for v = 0, m.vocab_size - 1 do
                if a[i][v] ~= b[i][v] then
                    error(("%s: step %d, token %d: %.9g vs %.9g"):format(what, i, v, a[i][v], b[i][v]))
                end
            end
        end
    end

    for _, case in ipairs({
        { n = 40, opts = { max_tokens = 200, max_rollback = 4 }, what = "at the end, larger, smaller window" },
        { n = 37, opts = { max_tokens = 200, max_rollback = 4 }, what = "3 back, larger, smaller window" },
        { n = 31, opts = { max_tokens = 72, max_rollback = 30 }, what = "9 back, a larger window" },
        { n = 38, opts = { max_tokens = 72 }, what = "2 back, the same window" },
    }) do
        it(("continues like a fresh sequence: fork %s"):format(case.what), function()
            local prefix = prefilled(40, { max_tokens = 48, max_rollback = 16 })
            local fork = assert(prefix:fork(case.n, case.opts))
            assert.equals(case.n, fork:length())
            assert.equals(case.opts.max_tokens, fork:capacity())
            prefix:free()   -- the fork owns its caches
            local fresh = prefilled(case.n, { max_tokens = case.opts.max_tokens, max_rollback = case.opts.max_rollback })
            same(continue(fork), continue(fresh), case.what)
            fork:free()
            fresh:free()
        end)
    end

    it("keeps the rollback the new window allows, and refuses what cannot hold the kept tokens", function()
        local prefix = prefilled(40, { max_tokens = 48, max_rollback = 16 })
        local fork = assert(prefix:fork(37, { max_tokens = 100, max_rollback = 4 }))
        local ok, err = fork:truncate(36)   -- only length 37's state was carried into the smaller rings
        assert.is_nil(ok)
        assert.matches("no longer kept", err)
        assert.is_true(fork:truncate(37))
        local same_window = assert(prefix:fork(40, { max_tokens = 100 }))
        assert.is_true(same_window:truncate(30))   -- the same rings: the source's history came along
        local none, why = prefix:fork(40, { max_tokens = 39 })
        assert.is_nil(none)
        assert.matches("more than its max_tokens", why)
        assert.has_error(function() prefix:fork(40, 7) end, "seq:fork: opts must be a table")
        fork:free()
        same_window:free()
        prefix:free()
    end)
end)
