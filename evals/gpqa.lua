-- evals/gpqa.lua: GPQA (four-option graduate-level questions) as lm-evaluation-harness's chain-of-thought
-- tasks: gpqa_*_cot_zeroshot (lm_eval/tasks/gpqa/cot_zeroshot/_gpqa_cot_zeroshot_yaml, utils.py) for
-- zero-shot prompts and gpqa_*_cot_n_shot (cot_n_shot/_gpqa_cot_n_shot_yaml) with shots. Both score
-- "strict-match" (the rest of the line after "The answer is ", less its last character) and
-- "flexible-extract" (lm-eval's multi_choice_regex: the last "(X)", else the last option text quoted
-- back, else ": X") with exact_match ignoring case and punctuation against "(A)".."(D)".
--
-- Rows are the dataset's (Idavidrein/gpqa): "Question", "Correct Answer", "Incorrect Answer 1".."3",
-- "Record ID". lm-eval shuffles the four answers with Python's unseeded global random; here the order is
-- a permutation drawn from (opts.seed, id, repeat), so it is reproducible but not lm-eval's order.

local common = require("evals.common")

local argcheck, format = common.argcheck, string.format

local M = {
    name = "gpqa",
    modes = { "strict-match", "flexible-extract" },
    generation = { ["until"] = { "</s>" }, do_sample = false, temperature = 0 },
    filters = {
        ["strict-match"] = { pattern = "(?<=The answer is )(.*)(?=.)", group_select = 0 },
        ["flexible-extract"] = {
            pattern = "(\\([A-Z]\\))", group_select = -1, ignore_case = true, ignore_punctuation = true,
        },
    },
    metric = { ignore_case = true, ignore_punctuation = true },
}

-- utils.preprocess of the lm-eval task.
local function preprocess(text)
    if type(text) ~= "string" then return " " end
    text = common.replace(common.strip(text), " [title]", ". ")
    return common.replace(text, "  ", " ")
end

--- Items {id, question, choices (4), answer = "(A)".."(D)"} of a GPQA JSONL file. opts.seed (default 0)
-- and the id pick each item's answer order (item.permutation[k] = which of Incorrect 1..3, Correct (1..4)
-- is choice k); opts.repeats copies items (ids "<id>#r", each copy its own order).
function M.load(path, opts)
    local seed = opts and opts.seed or 0
    return common.load(path, opts, function(row, index)
        local question, why = common.field(row, "Question")
        if not question then return nil, why end
        if type(row["Correct Answer"]) ~= "string" then return nil, "field \"Correct Answer\": string expected" end
        local id = row.id or row["Record ID"] or index - 1
        return {
            id = tostring(id),
            question = question,
            answers = {
                preprocess(row["Incorrect Answer 1"]), preprocess(row["Incorrect Answer 2"]),
                preprocess(row["Incorrect Answer 3"]), preprocess(row["Correct Answer"]),
            },
            seed = seed,
        }
    end, function(item, r, original)
        local choices, _, perm = common.shuffle(item.answers, common.key("gpqa", seed, original.id, r), 4)
        item.choices, item.permutation = choices, perm
        -- choices.index(correct): the first choice equal to the correct text.
        local at = 1
        while item.choices[at] ~= item.answers[4] do at = at + 1 end
        item.answer = format("(%s)", common.letters:sub(at, at))
        item.answers = nil
    end)
end

local function choices_text(item)
    local c = item.choices
    return format("Choices:\n(A) %s\n(B) %s\n(C) %s\n(D) %s\nLet's think step by step: ", c[1], c[2], c[3], c[4])
end

--- The prompt of an item: zero-shot, cot_zeroshot's "What is the correct answer to this question:...";
-- with opts.fewshot = n, cot_n_shot's description and "Question: ..." after the first n of opts.shots
-- (lm-eval draws them at random from the same split, leaving the item out), each followed by " " and its
-- answer "(X)". opts.format: "chat" (default without shots), "text" (default with shots), "multiturn".
function M.prompt(item, opts)
    local _, shots, n, fmt = common.prompt_args(item, opts)
    if n == 0 then
        return common.lm_eval_prompt({
            query = "What is the correct answer to this question:" .. item.question .. "\n" .. choices_text(item),
            format = fmt,
        })
    end
    local turns = {}
    for k = 1, n do turns[k] = { "Question: " .. shots[k].question .. "\n" .. choices_text(shots[k]), shots[k].answer } end
    return common.lm_eval_prompt({
        description = "Here are some example questions from experts. Answer the final question yourself,"
            .. " following the format of the previous questions exactly.\n",
        shots = turns, query = "Question: " .. item.question .. "\n" .. choices_text(item), format = fmt,
    })
end

--- The filtered answer under a mode (nil where lm-eval writes "[invalid]"). strict-match returns what
-- the line holds ("(B)", "B", "(B) because ..." less a character, possibly ""); flexible-extract "(X)" or
-- whatever its choice lookup gives back.
function M.extract(output, mode, item)
    argcheck(type(output) == "string", 1, "extract", "output string expected")
    mode = mode or M.modes[1]
    local f = M.filters[mode]
    argcheck(f ~= nil, 2, "extract", "unknown mode " .. tostring(mode))
    if mode == "strict-match" then return common.regex_filter(output, f.pattern, f.group_select) end
    argcheck(type(item) == "table" and item.choices, 3, "extract", "flexible-extract needs the item's choices")
    return common.multi_choice_filter(output, item.choices, f)
end

--- exact_match ignoring case and ASCII punctuation: "(b)", "B" and "b." all equal "(B)".
M.match = common.matcher(function(answer, gold) return common.exact_match(answer, gold, M.metric) end)

--- The gold target "(A)".."(D)".
function M.gold(item)
    return item.answer
end

return M
