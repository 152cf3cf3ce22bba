-- The experts each MoE layer routed to most over a few prompts (docs/research.md).
--   bin/glm53 lua scripts/examples/top_experts.lua [MODEL_DIR]
local glm53 = require("glm53")
local dir = arg[1] or "models/glm53-tiny"
local m, tok = assert(glm53.model.load(dir)), assert(glm53.tokenizer.load(dir .. "/tokenizer.json"))
local count = {}                                             -- count[layer][expert] = routed tokens
for _, text in ipairs({ "The capital of France is", "def fib(n):", "3 + 4 * 5 =", "Once upon a time" }) do
    local ids = assert(tok:encode(text))
    local seq, batch = assert(m:seq({ max_tokens = #ids, capture = { experts = true } })), m:batch({ rows = #ids })
    batch:add(seq, ids)
    assert(m:step(batch))
    for layer = 0, m.config.text.num_hidden_layers - 1 do
        local cap = seq:captured_experts(layer)              -- nil on a dense layer
        count[layer] = count[layer] or (cap and {})
        for i = 0, cap and cap.n * cap.k - 1 or -1 do count[layer][cap.ids[i]] = (count[layer][cap.ids[i]] or 0) + 1 end
    end
    seq:free()
end
for layer = 0, m.config.text.num_hidden_layers - 1 do
    local experts, order = count[layer] or {}, {}
    for e in pairs(experts) do order[#order + 1] = e end
    table.sort(order, function(a, b) return experts[a] > experts[b] or (experts[a] == experts[b] and a < b) end)
    for i = 1, math.min(5, #order) do order[i] = ("%d (%d)"):format(order[i], experts[order[i]]) end
    if count[layer] then print(("layer %d: %s"):format(layer, table.concat(order, " ", 1, math.min(5, #order)))) end
end
