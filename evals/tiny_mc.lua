-- evals/tiny_mc.lua: the tiny model's multiple-choice questions (evals/data/tiny/mc.jsonl; 4 to 10 options
-- A..J). The model answers "Answer: X"; the answer is the letter of the first "Answer: " followed by one capital
-- letter that no letter or digit follows ("Answer: C", "Answer: C." give C; "answer: C", "Answer:C",
-- "Answer: Cat" give nothing), compared with the gold letter.

local common = require("evals.common")
local tiny = require("evals.tiny")

local M = tiny.task({ family = "mc", modes = { "answer-letter" }, max_tokens = 64 })  -- reasoning first (docs/tiny-model.md)

M.PATTERN = "Answer: ([A-Z])(?![0-9A-Za-z])"

--- Items { id, messages, answer (the letter), options }.
function M.load(path, opts)
    return tiny.load(path, opts, "mc", function(row, item)
        local options, why = common.string_list(row, "options", 10)
        if not options then return nil, why end
        local answer = row.answer
        if type(answer) ~= "string" or #answer ~= 1 or not common.letters:sub(1, #options):find(answer, 1, true) then
            return nil, "field \"answer\": the letter of an option expected"
        end
        item.options = options
        return item
    end)
end

--- The letter after the first "Answer: ", or nil.
M.extract = tiny.pattern_extract(M)

--- The same letter.
M.match = tiny.match_same

return M
