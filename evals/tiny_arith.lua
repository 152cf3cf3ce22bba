-- evals/tiny_arith.lua: the tiny model's arithmetic word problems (evals/data/tiny/arith.jsonl). The model
-- writes one "a op b = c" line per step and then "#### N", GSM8K style; the answer is the number after the
-- first "#### " (one space, an optional minus sign and decimals, not followed by a letter or digit), compared
-- with the gold `answer` as text: "#### 312" and "#### 312." give 312, "####312" and "#### $312" give
-- nothing, "#### 312.0" is not 312.

local tiny = require("evals.tiny")

local M = tiny.task({ family = "arith", modes = { "final-number" }, max_tokens = 96 })

M.PATTERN = "#### (-?[0-9]+(?:\\.[0-9]+)?)(?![0-9A-Za-z])"

--- Items { id, messages, answer (the number as text), solution (the gold worked lines) }.
function M.load(path, opts)
    return tiny.load(path, opts, "arith", function(row, item)
        local answer, why = tiny.field(row, "answer")
        if not answer then return nil, why end
        if not answer:find("^%-?%d+$") then return nil, "field \"answer\": an integer as text expected" end
        item.solution = type(row.solution) == "string" and row.solution or nil
        return item
    end)
end

--- The number after the first "#### ", or nil.
M.extract = tiny.pattern_extract(M)

--- The same text.
M.match = tiny.match_same

return M
