-- evals/gsm8k.lua: GSM8K as lm-evaluation-harness's `gsm8k` task (lm_eval/tasks/gsm8k/gsm8k.yaml):
-- "Question: ...\nAnswer:" prompts, 5-shot by default in the harness, scored by exact_match after the
-- "strict-match" or "flexible-extract" filter. gsm8k_cot.lua is the chain-of-thought variant.
--
--   local gsm8k = require("evals.gsm8k")
--   local items = assert(gsm8k.load("evals/data/gsm8k/test.jsonl"))
--   local messages = gsm8k.prompt(items[1])                      -- zero-shot, one user turn
--   local text = gsm8k.prompt(items[1], { fewshot = 5, shots = train_items })
--   local answer = gsm8k.extract(output, "flexible-extract", items[1])
--   local correct = gsm8k.match(answer, gsm8k.gold(items[1]), "flexible-extract")

local common = require("evals.common")

local argcheck = common.argcheck

-- A GSM8K task from its lm-eval settings. spec: name, strict (the strict-match pattern), doc_to_text
-- (item, has_shots -> prompt text), shots(opts) -> { {question=, target=}, ... }, gold (item -> target),
-- until (stop strings).
local function variant(spec)
    local M = {
        name = spec.name,
        modes = { "strict-match", "flexible-extract" },
        variant = variant,
        -- generation_kwargs of the task: greedy, stop at any of `until`.
        generation = { ["until"] = spec["until"], do_sample = false, temperature = 0 },
        -- filter_list: regex with group_select, then take_first.
        filters = {
            ["strict-match"] = { pattern = spec.strict, group_select = 0 },
            ["flexible-extract"] = { pattern = "(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select = -1 },
        },
        -- metric_list, the same in every gsm8k variant: exact_match with these options.
        metric = {
            ignore_case = true,
            ignore_punctuation = false,
            regexes_to_ignore = { ",", "\\$", "(?s).*#### ", "\\.$" },
        },
    }

    --- Items {id, question, answer} of a GSM8K JSONL file ({"question", "answer"} per line). The id is
    -- the row's "id" if it has one, else its 0-based position (lm-eval's doc_id). opts.repeats copies
    -- each item (ids "<id>#r").
    function M.load(path, opts)
        return common.load(path, opts, function(row, index)
            local question, why = common.field(row, "question")
            if not question then return nil, why end
            local answer, why2 = common.field(row, "answer")
            if not answer then return nil, why2 end
            return { id = tostring(row.id or index - 1), question = question, answer = answer }
        end)
    end

    --- The prompt of an item: a messages array by default, text with shots (opts.fewshot = n), or
    -- opts.format = "chat" | "text" | "multiturn".
    function M.prompt(item, opts)
        local _, shots, n, fmt = common.prompt_args(item, opts, spec.shots(opts or {}))
        local turns = {}
        for k = 1, n do turns[k] = { spec.doc_to_text(shots[k], true), shots[k].target } end
        return common.lm_eval_prompt({ shots = turns, query = spec.doc_to_text(item, n > 0), format = fmt })
    end

    --- The filtered answer of a model output under a mode (nil where lm-eval writes "[invalid]").
    function M.extract(output, mode, item)
        argcheck(type(output) == "string", 1, "extract", "output string expected")
        local f = M.filters[mode or M.modes[1]]
        argcheck(f ~= nil, 2, "extract", "unknown mode " .. tostring(mode))
        return common.regex_filter(output, f.pattern, f.group_select)
    end

    --- exact_match of an extracted answer against the gold target under the ignore rules (the same for
    -- both modes).
    M.match = common.matcher(function(answer, gold) return common.exact_match(answer, gold, M.metric) end)

    --- The target the metric compares with (the task's doc_to_target).
    M.gold = spec.gold

    return M
end

-- gsm8k.yaml: "Question: ...\nAnswer:", shots drawn by lm-eval at random (seed 1234) from the train
-- split, which is not bundled: pass them as opts.shots (items with question and answer); each shot's
-- target is its whole answer, as doc_to_target "{{answer}}" is.
return variant({
    name = "gsm8k",
    strict = "#### (\\-?[0-9\\.\\,]+)",
    ["until"] = { "Question:", "</s>", "<|im_end|>" },
    doc_to_text = function(item) return "Question: " .. item.question .. "\nAnswer:" end,
    shots = function(opts)
        local out = {}
        for k, shot in ipairs(opts.shots or {}) do out[k] = { question = shot.question, target = shot.answer } end
        return out
    end,
    -- doc_to_target "{{answer}}": the whole solution; the "(?s).*#### " ignore rule leaves its number.
    gold = function(item) return item.answer end,
})
