-- scripts/demo.lua (make demo): it prints each of its three items with the answer the model gives under plain
-- greedy decoding (the demo decodes with MTP drafts, which must not change it), the gold answer, a verdict that
-- parses and agrees with the item's eval task, the speed and the MTP acceptance; it exits 0 whatever the verdicts.
--
-- EXPECT_CORRECT: flip to true when the trained model lands, so that the check also asks for three right answers.
local EXPECT_CORRECT = false

local h = require("spec_helpers")

local ITEMS = { "arith-000000", "retrieval-000003", "vision-000000" }   -- the demo's default items

-- The demo's output cut into one block per item: { id, family, answer, gold, verdict, speed }.
local function blocks(out)
    local list = {}
    local cur, field
    for line in (out .. "\n"):gmatch("([^\n]*)\n") do
        local n, id, family = line:match("^%[(%d+)/%d+%] (%S+) %((%a+)%)$")
        if n then
            cur = { id = id, family = family, lines = {} }
            list[#list + 1] = cur
            field = nil
        elseif cur then
            local label, rest = line:match("^(%a+):%s*(.*)$")
            if label and (label == "answer" or label == "gold" or label == "verdict" or label == "speed" or
                          label == "thinking" or label == "question" or label == "tools" or label == "user" or
                          label == "assistant" or label == "tool") then
                field = label
                cur[field] = rest
            elseif field and line:sub(1, 10) == string.rep(" ", 10) then
                cur[field] = cur[field] .. "\n" .. line:sub(11)
            else
                field = nil
            end
        end
    end
    return list
end

describe("scripts/demo.lua", function()
    it("streams the three items' answers (equal to plain greedy decoding), gold and verdicts, and exits 0", function()
        local out, rc = h.run("bin/glm53 lua scripts/demo.lua --threads 2")
        assert.are.equal(0, rc, out)
        assert.matches("^glm53 demo: models/glm53%-tiny on the CPU, 3 held%-out items", out)
        local got = blocks(out)
        assert.are.equal(#ITEMS, #got, out)

        -- The reference: each item decoded plainly (no MTP) by the eval generator, the eval task's verdict.
        local generator = require("glm53.eval.generator")
        local parsers = require("glm53.chat.parsers")
        local m = assert(require("glm53.engine.model").load("models/glm53-tiny", { device = "cpu", threads = 2 }))
        local tok = assert(require("glm53.engine.tokenizer").load("models/glm53-tiny/tokenizer.json"))
        local g = assert(generator.new(m, tok, { k = 0 }))
        local right = 0
        for i, id in ipairs(ITEMS) do
            local b = got[i]
            assert.are.equal(id, b.id)
            local family = id:match("^(%a+)")
            assert.are.equal(family, b.family)
            local task = require("evals.tiny_" .. family)
            local item
            for _, it in ipairs(assert(task.load("evals/data/tiny/" .. family .. ".jsonl"))) do
                if it.id == id then item = it end
            end
            local p = assert(generator.prompt(m, tok, item.messages))
            local text
            g:submit({ ids = p.ids, embeddings = p.embeddings, use = p.use, max_tokens = task.generation.max_gen_toks },
                     { on_done = function(r) text = r.text end })
            assert(g:run())
            local content = parsers.parse(text).content or ""
            assert.is_string(b.answer, out)
            assert.are.equal((content:gsub("^%s+", ""):gsub("%s+$", "")), (b.answer:gsub("%s+$", "")))
            assert.are.equal(task.gold(item), b.gold)
            local verdict = b.verdict and b.verdict:match("^(%a+)")
            assert.is_truthy(verdict == "right" or verdict == "wrong", "verdict: " .. tostring(b.verdict))
            local correct = task.match(task.extract(content, nil, item), task.gold(item))
            assert.are.equal(correct and "right" or "wrong", verdict)
            if correct then right = right + 1 end
            -- The speed line: prompt and decode rates, and the MTP acceptance of the drafted tokens.
            local accepted, drafted = b.speed:match("MTP acceptance %d%.%d+ %((%d+) of (%d+) drafted tokens%)")
            assert.is_truthy(accepted, b.speed)
            assert.is_true(tonumber(accepted) <= tonumber(drafted))
            assert.matches("^prompt %d+ tokens: [%d.]+ tok/s; decode %d+ tokens: [%d.]+ tok/s", b.speed)
        end
        g:free()
        m:free()
        assert.matches("\n" .. right .. " of 3 right; MTP acceptance over the run %d%.%d+", out)
        if EXPECT_CORRECT then assert.are.equal(#ITEMS, right, out) end
    end)

    it("takes other items, and refuses an unknown one", function()
        local out, rc = h.run("bin/glm53 lua scripts/demo.lua --items mc-000001 --spec-k 0")
        assert.are.equal(0, rc, out)
        assert.matches("%[1/1%] mc%-000001 %(mc%)", out)
        assert.is_nil(out:find("MTP acceptance", 1, true))
        out, rc = h.run("bin/glm53 lua scripts/demo.lua --items arith-999999")
        assert.are.equal(1, rc, out)
        assert.matches("no item arith%-999999", out)
    end)
end)
