-- docs/research.md's example (scripts/examples/top_experts.lua) runs as written, and its table is the top five
-- experts per MoE layer of the routing the capture recorded, counted here again, ties to the lower id.
local model = require("glm53.engine.model")
local tokenizer = require("glm53.engine.tokenizer")
local h = require("spec_helpers")

local PROMPTS = { "The capital of France is", "def fib(n):", "3 + 4 * 5 =", "Once upon a time" }

describe("the research example", function()
    it("prints each MoE layer's five most used experts with their counts", function()
        local out = h.stdout_of("bin/glm53 lua scripts/examples/top_experts.lua models/tiny 2>&1")
        local m = assert(model.load("models/tiny", { threads = 1 }))
        local tok = assert(tokenizer.load("models/tiny/tokenizer.json"))
        local want = {}
        for layer = 0, m.config.text.num_hidden_layers - 1 do
            local counts = {}
            for _, text in ipairs(PROMPTS) do
                local ids = assert(tok:encode(text))
                local seq = assert(m:seq({ max_tokens = #ids, capture = { experts = true } }))
                local batch = m:batch({ rows = #ids })
                batch:add(seq, ids)
                assert(m:step(batch))
                local cap = seq:captured_experts(layer)
                if cap then
                    assert.equals(#ids, cap.n)
                    for i = 0, cap.n * cap.k - 1 do counts[cap.ids[i]] = (counts[cap.ids[i]] or 0) + 1 end
                end
                seq:free()
            end
            if next(counts) then
                local ranked = {}
                for e, n in pairs(counts) do ranked[#ranked + 1] = { e, n } end
                table.sort(ranked, function(a, b) return a[2] > b[2] or (a[2] == b[2] and a[1] < b[1]) end)
                local cells = {}
                for i = 1, math.min(5, #ranked) do cells[i] = ranked[i][1] .. " (" .. ranked[i][2] .. ")" end
                want[#want + 1] = ("layer %d: %s"):format(layer, table.concat(cells, " "))
            end
        end
        m:free()
        assert.is_true(#want > 0)
        assert.equals(table.concat(want, "\n") .. "\n", out)
    end)
end)
