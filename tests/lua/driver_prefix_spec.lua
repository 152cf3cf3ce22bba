-- glm53.generation.driver additions the command line stands on: sampling limited to the tokenizer's vocabulary
-- (driver.new's tokenizer), a prefix that takes over another's cache (d:prefix(prompt, {from = ...}), the chat's
-- cache reuse) with the same tokens as a fresh prefill, prompts with image rows, and d:stop. Also
-- glm53.generation.defaults (end tokens and sampling defaults of a checkpoint directory).
local cjson = require("cjson")
local driver = require("glm53.generation.driver")
local defaults = require("glm53.generation.defaults")
local model = require("glm53.engine.model")
local tokenizer = require("glm53.engine.tokenizer")
local vision = require("glm53.engine.vision")
local file = require("glm53.util.file")
local h = require("spec_helpers")

local m = assert(model.load("models/tiny", { threads = 2 }))
local tok = assert(tokenizer.load("models/tiny/tokenizer.json"))
local N_VOCAB = tok:n_vocab()

local function range(a, b)
    local t = {}
    for i = a, b do t[#t + 1] = i end
    return t
end

local function concat(...)
    local out = {}
    for _, t in ipairs({ ... }) do for _, v in ipairs(t) do out[#out + 1] = v end end
    return out
end

-- Greedy generation of n tokens from a prefix of driver d.
local function from_prefix(d, pre, n)
    local s = assert(d:add(pre, { max_new = n }))
    assert(d:run())
    return s.generated
end

describe("driver.new with a tokenizer", function()
    it("never samples an id past the tokenizer's vocabulary (the padded embedding rows)", function()
        assert.is_true(N_VOCAB < m.vocab_size)   -- models/tiny: 804 of 832
        local function run(opts)
            local d = assert(driver.new(m, opts))
            local s = assert(d:add(range(1, 8), { max_new = 200 }))
            assert(d:run())
            local over = 0
            for _, id in ipairs(s.generated) do if id >= N_VOCAB then over = over + 1 end end
            d:free()
            return over
        end
        local hot = { temperature = 5, seed = 3 }
        assert.is_true(run({ k = 0, sampling = hot }) > 0)   -- without the limit the padded rows do come up
        assert.are.equal(0, run({ k = 0, sampling = hot, tokenizer = tok }))
        assert.are.equal(0, run({ k = 2, sampling = hot, tokenizer = tok }))
        assert.are.equal(0, run({ k = 0, tokenizer = tok }))   -- greedy
        assert.has_error(function() driver.new(m, { tokenizer = {} }) end)
    end)
end)

describe("d:prefix(prompt, {from = pre})", function()
    for _, k in ipairs({ 0, 2 }) do
        it("k = " .. k .. ": taking over a prefix gives the tokens of a fresh prefill", function()
            local d = assert(driver.new(m, { k = k, tokenizer = tok }))
            local p1 = range(1, 20)
            local p2 = concat(p1, range(100, 130))
            local fresh = from_prefix(d, assert(d:prefix(p2, { capacity = 200 })), 24)
            local pre1 = assert(d:prefix(p1, { capacity = 200 }))
            assert.are.equal(0, pre1.reused)
            local pre2 = assert(d:prefix(p2, { capacity = 200, from = pre1 }))
            assert.are.equal(#p1 - 1, pre2.reused)   -- every position pre1 had computed
            assert.is_nil(pre1.seq)                  -- the cache moved
            assert.is_nil(h.first_diff(fresh, from_prefix(d, pre2, 24)))
            -- a third turn on top of the second
            local p3 = concat(p2, range(200, 210))
            local pre3 = assert(d:prefix(p3, { capacity = 200, from = pre2 }))
            assert.are.equal(#p2 - 1, pre3.reused)
            assert.is_nil(h.first_diff(from_prefix(d, assert(d:prefix(p3, { capacity = 200 })), 16),
                                       from_prefix(d, pre3, 16)))
            assert.has_error(function() d:prefix(p3, { from = pre2 }) end)   -- pre2's cache is gone
            d:free()
        end)
    end

    it("rolls the cache back when the prompts differ inside the rollback window, else prefills afresh", function()
        local p1 = range(1, 10)                              -- positions 1..9 computed, 10 pending
        local near = concat(range(1, 8), { 50, 51, 52 })     -- differs at the last computed position
        local far = concat(range(1, 3), range(60, 70))       -- differs long before
        for _, case in ipairs({ { k = 0, prompt = near, reused = 8 }, { k = 2, prompt = near, reused = 0 },
                                { k = 0, prompt = far, reused = 0 }, { k = 2, prompt = far, reused = 0 } }) do
            local d = assert(driver.new(m, { k = case.k, tokenizer = tok }))
            local want = from_prefix(d, assert(d:prefix(case.prompt, { capacity = 64 })), 12)
            local pre1 = assert(d:prefix(p1, { capacity = 64 }))
            local pre2 = assert(d:prefix(case.prompt, { capacity = 64, from = pre1 }))
            assert.are.equal(case.reused, pre2.reused, "k = " .. case.k)
            assert.is_nil(h.first_diff(want, from_prefix(d, pre2, 12)), "k = " .. case.k)
            pre1:free()
            d:free()
        end
    end)
end)

describe("driver prompts with image rows", function()
    it("generate what plain greedy steps over the same embedding rows give", function()
        local img = assert(vision.image("tests/fixtures/vision/images/aligned_rgb.png"))
        local chat = require("glm53.chat.template")
        local text = assert(chat.render({ { role = "user", content = { { type = "image" },
                                                                         { type = "text", text = "what is it" } } } }))
        local p = assert(vision.prompt(m, tok, text, { img }))
        assert.is_true(p.n_media > 0)
        -- plain greedy over the embedded prompt
        local seq = assert(m:seq({ max_tokens = p.n + 16 }))
        local batch = m:batch({ rows = p.n, seqs = 1 })
        batch:add_embedded(seq, p.ids, p.n, p.embeddings, p.use, "last")
        assert(m:step(batch))
        local want = {}
        for i = 1, 10 do
            want[i] = m:argmax(batch:logits(0), N_VOCAB)
            batch:clear()
            batch:add(seq, { want[i] })
            assert(m:step(batch))
        end
        seq:free()
        local ids = {}
        for i = 0, p.n - 1 do ids[i + 1] = p.ids[i] end
        for _, k in ipairs({ 0, 2 }) do
            local d = assert(driver.new(m, { k = k, tokenizer = tok, chunk = 7 }))   -- chunks cross the image
            local s = assert(d:add(ids, { max_new = 10, embeddings = p.embeddings, use = p.use }))
            assert(d:run())
            assert.is_nil(h.first_diff(want, s.generated), "k = " .. k)
            d:free()
        end
        -- the last prompt row must be a token
        local d = assert(driver.new(m, { k = 0 }))
        local use = require("ffi").new("uint8_t[2]", { 0, 1 })
        assert.has_error(function() d:add({ 1, 802 }, { embeddings = p.embeddings, use = use }) end)
        assert.has_error(function() d:add({ 1, 2 }, { embeddings = p.embeddings }) end)
        d:free()
    end)
end)

describe("d:finish", function()
    it("ends an active stream with the reason given", function()
        local d = assert(driver.new(m, { k = 0 }))
        local s = assert(d:add({ 1, 2, 3 }, { max_new = 50 }))
        assert(d:round())
        assert.are.equal(1, d:active())
        d:finish(s, "stop")
        assert.are.equal(0, d:active())
        assert.are.equal("stop", s.finish_reason)
        assert.is_true(s.done)
        assert.has_error(function() d:finish(s) end, "driver:finish: the stream is not active")
        d:free()
    end)
end)

describe("glm53.generation.defaults", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it("reads eos_token_id from generation_config.json, then config.json, else the tokenizer's end tokens", function()
        local ids, source = defaults.eos_ids("models/tiny", tok)
        assert.are.same({ 768, 775, 777 }, ids)   -- <|endoftext|> <|user|> <|observation|>: GLM-5.3's list
        assert.matches("tokenizer", source)
        assert.are.same({}, (defaults.eos_ids("tests/fixtures/tiny-f32")))   -- no tokenizer, nothing in the files
        assert(file.write_file(dir .. "/config.json", cjson.encode({ text_config = { eos_token_id = 9 } })))
        assert.are.same({ { 9 }, "config.json" }, { defaults.eos_ids(dir, tok) })
        assert(file.write_file(dir .. "/generation_config.json",
                               cjson.encode({ eos_token_id = { 5, 7 }, temperature = 0.6, top_p = 0.95, do_sample = true })))
        assert.are.same({ { 5, 7 }, "generation_config.json" }, { defaults.eos_ids(dir, tok) })
        assert.are.same({ temperature = 0.6, top_p = 0.95 }, defaults.sampling(dir))
        assert.are.same({}, defaults.sampling("models/tiny"))
        assert(file.write_file(dir .. "/generation_config.json", "{not json"))
        local none, err = defaults.eos_ids(dir, tok)
        assert.is_nil(none)
        assert.matches("not a JSON object", err)
        assert.has_error(function() defaults.eos_ids(nil) end)
    end)
end)
