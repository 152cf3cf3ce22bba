-- evals/tiny_retrieval.lua: the tiny model's long-context retrieval (evals/data/tiny/retrieval.jsonl): a list
-- of "The code of QZX-17 is 4821." lines, then the question for one key. The answer is the whole reply after
-- the think block, stripped of surrounding whitespace, and must equal the 4-digit code ("4821" and " 4821\n"
-- are right, "4821." and "The code is 4821." are not).
--
-- Items are grouped by their context length (meta.context_tokens_approx: 256, 512, 1024, 2048, 4096), so that a
-- run reports the accuracy at each length; past 259 tokens the sparse layers attend to the 256 positions their
-- indexer selects (index_topk), so the longer groups measure the selection.

local common = require("evals.common")
local tiny = require("evals.tiny")

local M = tiny.task({ family = "retrieval", modes = { "exact" }, max_tokens = 16 })

--- Items { id, messages, answer (the code), meta, group = the context length as text ("2048") }.
function M.load(path, opts)
    return tiny.load(path, opts, "retrieval", function(row, item)
        local answer, why = tiny.field(row, "answer")
        if not answer then return nil, why end
        local length = item.meta and item.meta.context_tokens_approx
        if type(length) ~= "number" then return nil, "field \"meta\": context_tokens_approx (a number) expected" end
        item.group = string.format("%d", length)
        return item
    end)
end

--- The reply, stripped.
function M.extract(output, mode, item)
    common.argcheck(type(output) == "string", 1, "extract", "output string expected")
    tiny.check_mode(M, mode, "extract")
    return common.strip(output)
end

--- The same text.
M.match = tiny.match_same

return M
