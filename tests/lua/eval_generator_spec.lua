-- glm53.eval.generator (requests over the generation driver with stop strings) and driver:finish, on
-- models/tiny: outputs do not depend on how many streams share the driver or on MTP drafting, stop strings end
-- a request with the text before them, and an ended stream leaves the driver at once.
local model = require("glm53.engine.model")
local tokenizer = require("glm53.engine.tokenizer")
local driver = require("glm53.generation.driver")
local generator = require("glm53.eval.generator")

local m = assert(model.load("models/tiny", { threads = 1 }))
local tok = assert(tokenizer.load("models/tiny/tokenizer.json"))

local QUESTIONS = { "What is 2 + 3?", "Name a prime.", "Say hi.", "Count to five.", "Why is the sky blue?" }

-- Runs every question through one generator; results by question index.
local function run_all(opts, req_extra)
    local g = assert(generator.new(m, tok, opts))
    local out = {}
    for i, q in ipairs(QUESTIONS) do
        local ids = assert(generator.encode(tok, { { role = "user", content = q } }))
        local req = { ids = ids, max_tokens = 30 }
        for k, v in pairs(req_extra or {}) do req[k] = v end
        g:submit(req, { on_done = function(r) out[i] = r end })
    end
    assert(g:run())
    assert.are.equal(0, g:pending())
    g:free()
    return out
end

describe("driver:finish", function()
    it("ends one stream between rounds while the others go on", function()
        local d = driver.new(m, { k = 0, max_seqs = 2 })
        local a = assert(d:add({ 1, 2, 3 }, { max_new = 20 }))
        local b = assert(d:add({ 4, 5, 6 }, { max_new = 20 }))
        assert(d:round())
        assert(d:round())
        d:finish(a, "stop")
        assert.are.equal(1, d:active())
        assert.are.equal("stop", a.finish_reason)
        assert.are.equal(2, #a.generated)
        assert.are.equal(2, d.stats.tokens)           -- a's counters went into the driver's totals
        assert(d:run())
        assert.are.equal(20, #b.generated)
        assert.has_error(function() d:finish(a) end)  -- no longer active
        d:free()
    end)
end)

describe("glm53.eval.generator", function()
    local base = run_all({ max_seqs = 1 })

    it("generates the same text one stream at a time, five at once, and with MTP drafts", function()
        for _, opts in ipairs({ { max_seqs = 5 }, { max_seqs = 2, k = 2 } }) do
            local got = run_all(opts)
            for i = 1, #QUESTIONS do
                assert.are.same(base[i].ids, got[i].ids, "question " .. i)
                assert.are.equal(base[i].text, got[i].text)
                assert.are.equal(base[i].finish_reason, got[i].finish_reason)
            end
        end
        for i = 1, #QUESTIONS do
            local r = base[i]
            assert.are.equal(#r.ids, r.tokens_out)
            assert.is_true(r.tokens_in > 10)
            assert.are.equal(tok:decode(r.ids, { skip_special_tokens = true }), r.text)
            assert.is_true(r.t_submit <= r.t_start and r.t_start <= r.t_end)
        end
    end)

    it("stops at a stop string: the text before it, the ids up to the token that completed it", function()
        -- A stop string taken from the middle of each plain output.
        local stops = {}
        for i, r in ipairs(base) do
            assert.is_true(#r.text >= 6, "output " .. i .. " is long enough to cut")
            stops[i] = r.text:sub(4, 5)
        end
        for i, q in ipairs(QUESTIONS) do
            local g = assert(generator.new(m, tok, { max_seqs = 2, k = 1 }))
            local ids = assert(generator.encode(tok, { { role = "user", content = q } }))
            local got
            g:submit({ ids = ids, max_tokens = 30, stop = { stops[i] } }, { on_done = function(r) got = r end })
            assert(g:run())
            g:free()
            local at = base[i].text:find(stops[i], 1, true)
            assert.are.equal("stop", got.finish_reason)
            assert.are.equal(stops[i], got.stop)
            assert.are.equal(base[i].text:sub(1, at - 1), got.text)
            -- The fewest leading ids whose text holds the stop string.
            local n = 1
            while not tok:decode({ unpack(base[i].ids, 1, n) }, { skip_special_tokens = true }):find(stops[i], 1, true) do
                n = n + 1
            end
            assert.are.same({ unpack(base[i].ids, 1, n) }, got.ids)
        end
    end)

    it("stops at a stop id and at max_tokens, and reports what it stopped at", function()
        assert.are.same({ 768, 775, 777 }, generator.stop_ids(m, tok))   -- <|endoftext|> <|user|> <|observation|>
        local out = run_all({ max_seqs = 3, stop_ids = { base[1].ids[3] } })
        assert.are.equal("stop", out[1].finish_reason)
        assert.are.same({ unpack(base[1].ids, 1, 3) }, out[1].ids)
        local short = run_all({ max_seqs = 3 }, { max_tokens = 4 })
        for i = 1, #QUESTIONS do
            if #base[i].ids >= 4 then
                assert.are.equal("length", short[i].finish_reason)
                assert.are.same({ unpack(base[i].ids, 1, 4) }, short[i].ids)
            end
        end
    end)

    it("takes chat messages and text, and sends media parts to generator.prompt, which needs the model", function()
        local ids = assert(generator.encode(tok, "Question: 1+1?\nAnswer:"))
        assert.are.same(tok:encode("Question: 1+1?\nAnswer:"), ids)
        local chat_ids = assert(generator.encode(tok, { { role = "user", content = "hi" } }))
        assert.are.same(tok:encode("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi<|assistant|><think>"), chat_ids)
        local none, err = generator.encode(tok, { { role = "user", content = { { type = "text", text = "x" },
                                                                               { type = "image", path = "a.png" } } } })
        assert.is_nil(none)
        assert.truthy(err:find("generator.prompt", 1, true))
    end)
end)
