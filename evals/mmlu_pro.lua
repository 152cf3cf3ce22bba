-- evals/mmlu_pro.lua: MMLU-Pro (ten-option multiple choice) with two scorers:
--   custom-extract  lm-evaluation-harness's mmlu_pro tasks (lm_eval/tasks/mmlu_pro/_default_template_yaml,
--                   utils.py): first "answer is (X)", exact_match ignoring case and punctuation
--   tiger-lab       the MMLU-Pro authors' chain (TIGER-AI-Lab/MMLU-Pro evaluate_from_api.py): "answer is
--                   (X)", else the first line with "Answer: X", else the last standalone letter, else a
--                   seeded random letter; compared as is
-- Prompts are lm-eval's by default (opts.style = "tiger-lab" gives evaluate_from_api.py's).
--
-- Rows are the dataset's (TIGER-Lab/MMLU-Pro): question_id, question, options, answer (letter),
-- answer_index (0-based), cot_content, category. Options may be shuffled per item (load's opts.shuffle):
-- the reference harnesses do not shuffle, so shuffled runs are a robustness check, not leaderboard numbers.

local common = require("evals.common")

local argcheck, format = common.argcheck, string.format

local M = {
    name = "mmlu_pro",
    modes = { "custom-extract", "tiger-lab" },
    generation = { ["until"] = { "Question:" }, max_gen_toks = 2048, do_sample = false, temperature = 0 },
    custom_extract = { pattern = "answer is \\(?([ABCDEFGHIJ])\\)?", group_select = 0 },
    metric = { ignore_case = true, ignore_punctuation = true },
}

local LETTERS = "ABCDEFGHIJ"

local function letter(index0) return LETTERS:sub(index0 + 1, index0 + 1) end

local function make_item(row, index, seed)
    local question, why = common.field(row, "question")
    if not question then return nil, why end
    local options, why2 = common.string_list(row, "options", #LETTERS)
    if not options then return nil, why2 end
    local answer_index = row.answer_index
    if answer_index == nil and type(row.answer) == "string" then
        local at = LETTERS:find(row.answer, 1, true)
        answer_index = at and #row.answer == 1 and at - 1 or nil
    end
    if type(answer_index) ~= "number" or answer_index < 0 or answer_index >= #options then
        return nil, "no answer: \"answer_index\" (0-based) or \"answer\" (a letter) naming an option expected"
    end
    if row.answer ~= nil and row.answer ~= letter(answer_index) then
        return nil, format("\"answer\" %s disagrees with \"answer_index\" %d", tostring(row.answer), answer_index)
    end
    local id = row.id or row.question_id or index - 1
    return {
        id = tostring(id),
        question = question,
        options = options,
        answer_index = answer_index,
        answer = letter(answer_index),
        cot_content = type(row.cot_content) == "string" and row.cot_content or "",
        category = type(row.category) == "string" and row.category or "",
        seed = seed,
    }
end

--- Items of an MMLU-Pro JSONL file. opts.shuffle: reorder each item's options by a permutation drawn
-- from (opts.seed, id, repeat) (item.permutation[k] = original position now at k; answer follows);
-- opts.seed (default 0) also seeds tiger-lab's random fallback; opts.repeats copies items (ids "<id>#r",
-- each copy its own shuffle).
function M.load(path, opts)
    local seed = opts and opts.seed or 0
    local function shuffle(item, r, original)
        local at
        item.options, at, item.permutation =
            common.shuffle(item.options, common.key("mmlu_pro", seed, original.id, r), item.answer_index + 1)
        item.answer_index = at - 1
        item.answer = letter(at - 1)
    end
    return common.load(path, opts, function(row, index) return make_item(row, index, seed) end,
        opts and opts.shuffle and shuffle or nil)
end

-- lm-eval utils.format_cot_example(including_answer=False): what both the question and each shot show.
local function lm_eval_text(item)
    local parts = { "Question:\n", item.question, "\n", "Options:\n" }
    for k, opt in ipairs(item.options) do
        parts[#parts + 1] = format("%s. %s\n", letter(k - 1), common.strip(opt))
    end
    parts[#parts + 1] = "Answer: Let's think step by step."
    return table.concat(parts)
end

-- evaluate_from_api.py format_example.
local function tiger_text(item, cot_content)
    if cot_content == "" then cot_content = "Let's think step by step." end
    if cot_content:sub(1, 3) == "A: " then cot_content = cot_content:sub(4) end
    local parts = { "Question: ", item.question, "\nOptions: " }
    for k, opt in ipairs(item.options) do parts[#parts + 1] = format("%s. %s\n", letter(k - 1), opt) end
    parts[#parts + 1] = "Answer: " .. cot_content .. "\n\n"
    return table.concat(parts)
end

--- The prompt of an item. opts.fewshot = n takes the first n of opts.shots (items of the same category
-- from the validation split, with cot_content: both references take the first five). opts.format:
-- "chat" (default without shots), "text" (default with shots), "multiturn" (lm-eval style only).
-- opts.style = "lm-eval" (default): the category's description as the system prompt, then
-- "Question:\n...\nOptions:\nA. ...\nAnswer: Let's think step by step." (shots followed by " " and their
-- cot_content without its "A: Let's think step by step. ").
-- opts.style = "tiger-lab": one user turn, the instruction, the shots and the question as
-- evaluate_from_api.py writes them.
function M.prompt(item, opts)
    local shots, n, fmt
    opts, shots, n, fmt = common.prompt_args(item, opts)
    local style = opts.style or "lm-eval"
    if style == "tiger-lab" then
        argcheck(fmt ~= "multiturn", 2, "prompt", "the tiger-lab style has no multiturn format")
        local parts = { format("The following are multiple choice questions (with answers) about %s. Think step by"
            .. " step and then output the answer in the format of \"The answer is (X)\" at the end.\n\n", item.category) }
        for k = 1, n do parts[#parts + 1] = tiger_text(shots[k], shots[k].cot_content) end
        parts[#parts + 1] = tiger_text(item, "")
        local text = table.concat(parts)
        if fmt == "text" then return text end
        return { { role = "user", content = text } }
    end
    argcheck(style == "lm-eval", 2, "prompt", "style must be \"lm-eval\" or \"tiger-lab\"")
    local turns = {}
    for k = 1, n do
        turns[k] = { lm_eval_text(shots[k]), common.replace(shots[k].cot_content, "A: Let's think step by step. ", "") }
    end
    return common.lm_eval_prompt({
        description = format("The following are multiple choice questions (with answers) about %s. Think step by"
            .. " step and then finish your answer with \"the answer is (X)\" where X is the correct letter choice.\n",
            item.category),
        shots = turns, query = lm_eval_text(item), format = fmt,
    })
end

--- The letter a model output gives under a mode, or nil (custom-extract's "[invalid]"). tiger-lab never
-- gives nil; its second result says which stage answered ("answer is", "Answer:", "last letter",
-- "random"), so a runner can count the random guesses or score them as wrong.
function M.extract(output, mode, item)
    argcheck(type(output) == "string", 1, "extract", "output string expected")
    mode = mode or M.modes[1]
    if mode == "custom-extract" then
        return common.regex_filter(output, M.custom_extract.pattern, M.custom_extract.group_select)
    end
    argcheck(mode == "tiger-lab", 2, "extract", "unknown mode " .. tostring(mode))
    argcheck(type(item) == "table" and item.options, 3, "extract", "tiger-lab needs the item")
    return common.tiger_extract(output, #item.options, common.key("guess", item.seed or 0, item.id))
end

--- custom-extract: lm-eval's exact_match ignoring case and ASCII punctuation; tiger-lab: pred == answer.
M.match = common.matcher(function(answer, gold, mode)
    if (mode or M.modes[1]) == "tiger-lab" then return answer == gold end
    return common.exact_match(answer, gold, M.metric)
end)

--- The gold letter (after any shuffle).
function M.gold(item)
    return item.answer
end

return M
