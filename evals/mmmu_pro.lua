-- evals/mmmu_pro.lua: MMMU-Pro (multimodal multiple choice, up to ten options) as its authors run it
-- (MMMU-Benchmark/MMMU, mmmu-pro/): prompts of infer/infer_transformers.py with prompts.yaml, scored by
-- evaluate.py's parse_multi_choice_response (mode "mmmu-pro") or by MMLU-Pro's letter chain (mode
-- "tiger-lab", evals/common.lua tiger_extract, which reads the "Answer: X" line the prompts ask for).
--
-- Rows follow the dataset (MMMU/MMMU_Pro): id, question, options (a list), answer (a letter), and image
-- paths relative to the JSONL file: image_1..image_7 for the "standard" setting (the question and options
-- name them as "<image N>"), image (a screenshot of the whole question) for the "vision" setting.

local common = require("evals.common")

local argcheck, format = common.argcheck, string.format

-- Quoted from MMMU-Benchmark/MMMU mmmu-pro/prompts.yaml (Apache-2.0).
local PROMPTS = {
    cot = {
        vision = "Write out the multiple-choice question in the image and then solve it. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of options. Think step by step before answering.",
        standard = "Answer the preceding multiple choice question. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of options. Think step by step before answering.",
    },
    direct = {
        vision = "Answer with the option letter from the given choices directly. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of options.",
        standard = "Answer with the option letter from the given choices directly.",
    },
}

local M = {
    name = "mmmu_pro",
    modes = { "mmmu-pro", "tiger-lab" },
    prompts = PROMPTS,
}

-- construct_prompt + replace_images_tokens of infer_transformers.py: the text with "<image N>" written
-- "[image]", and the image paths in the order the tokens appear. nil, reason for a token naming no image.
local function standard_prompt(item, method)
    local lines = { item.question }
    for k, opt in ipairs(item.options) do lines[#lines + 1] = format("%s. %s", common.letters:sub(k, k), opt) end
    lines[#lines + 1] = PROMPTS[method].standard
    local text = table.concat(lines, "\n")
    local images = {}
    for _, digits in ipairs(common.findall("<image\\s+(\\d+)>", text)) do
        local n = digits:find("^[0-9]+$") and tonumber(digits)
        if not n then return nil, "image token with non-ASCII digits: " .. digits end
        if not item.images[n] then return nil, format("\"<image %d>\" names no image_%d", n, n) end
        images[#images + 1] = item.images[n]
    end
    return common.sub("<image\\s+\\d+>", "[image]", text), images
end

--- Items of an MMMU-Pro JSONL file: {id, question, options, answer, setting = "standard" | "vision",
-- images = {[N] = path of image_N}, image = path (vision)}, relative paths joined to the file's directory.
-- opts.seed (default 0) seeds the random fallback of extract; opts.repeats copies items (ids "<id>#r").
function M.load(path, opts)
    local dir, seed = common.dirname(path), opts and opts.seed or 0
    local function resolve(p) return p:sub(1, 1) == "/" and p or dir .. p end
    return common.load(path, opts, function(row, index)
        local options, why = common.string_list(row, "options", 10)
        if not options then return nil, why end
        local answer = row.answer
        if type(answer) ~= "string" or #answer ~= 1 or not common.letters:sub(1, #options):find(answer, 1, true) then
            return nil, "field \"answer\": the letter of an option expected"
        end
        local item = {
            id = tostring(row.id or index - 1), options = options, answer = answer, images = {}, seed = seed,
            subject = type(row.subject) == "string" and row.subject or nil,
        }
        if row.image ~= nil then
            if type(row.image) ~= "string" then return nil, "field \"image\": path string expected" end
            item.setting, item.image = "vision", resolve(row.image)
            return item
        end
        local question, why2 = common.field(row, "question")
        if not question then return nil, why2 end
        item.setting, item.question = "standard", question
        for n = 1, 7 do
            local p = row["image_" .. n]
            if type(p) == "string" then item.images[n] = resolve(p) end
        end
        local ok, reason = standard_prompt(item, "cot")
        if not ok then return nil, reason end
        return item
    end)
end

--- The chat messages of an item: one user turn, the text part first and then its images
-- ({type = "image", path = ...}), as infer_transformers.py builds it. opts.method = "cot" (default) or
-- "direct" picks the prompts.yaml instruction. MMMU-Pro has no few-shot format.
function M.prompt(item, opts)
    argcheck(type(item) == "table", 1, "prompt", "item table expected")
    opts = opts or {}
    local method = opts.method or "cot"
    argcheck(PROMPTS[method] ~= nil, 2, "prompt", "method must be \"cot\" or \"direct\"")
    argcheck((opts.fewshot or 0) == 0, 2, "prompt", "MMMU-Pro has no few-shot format")
    argcheck(opts.format == nil or opts.format == "chat", 2, "prompt", "MMMU-Pro prompts are chat messages")
    local text, images
    if item.setting == "vision" then
        text, images = PROMPTS[method].vision, { item.image }
    else
        text, images = standard_prompt(item, method)
    end
    local content = { { type = "text", text = text } }
    for _, p in ipairs(images) do content[#content + 1] = { type = "image", path = p } end
    return { { role = "user", content = content } }
end

local function rfind(s, needle) -- Python's str.rfind, as a byte position (-1 when absent)
    if needle == "" then return #s end
    local at, from = -1, 1
    while true do
        local a = s:find(needle, from, true)
        if not a then return at end
        at, from = a, a + 1
    end
end

local function strip_char(s, ch) -- str.strip(ch) for one ASCII character
    local a, b = 1, #s
    while a <= b and s:sub(a, a) == ch do a = a + 1 end
    while b >= a and s:sub(b, b) == ch do b = b - 1 end
    return s:sub(a, b)
end

-- evaluate.py parse_multi_choice_response; the random choice is a seeded draw.
local function parse_multi_choice_response(response, options, guess_key)
    response = common.text(response)
    local letters = {}
    for k = 1, #options do letters[k] = common.letters:sub(k, k) end
    local last = rfind(response, "Answer:")
    if last ~= -1 then
        local answer_str = common.strip(response:sub(last + #"Answer:"))
        local matching = {}
        for _, l in ipairs(letters) do
            if answer_str:find(l, 1, true) then matching[#matching + 1] = l end
        end
        if #matching == 1 then return matching[1], "Answer:" end
    end
    for _, ch in ipairs({ ",", ".", "!", "?", ";", ":", "'" }) do response = strip_char(response, ch) end
    response = " " .. response .. " "

    local candidates, stage = {}, nil
    local function collect(name, text_of)
        for _, l in ipairs(letters) do
            if response:find(text_of(l), 1, true) then candidates[#candidates + 1] = l end
        end
        if #candidates > 0 then stage = name end
    end
    collect("(X)", function(l) return "(" .. l .. ")" end)
    if not stage then collect("X ", function(l) return l .. " " end) end
    if not stage then collect("X.", function(l) return l .. "." end) end
    local lowered
    if not stage and common.split_count(response) > 5 then
        lowered = common.lower(response)
        for k, l in ipairs(letters) do
            if lowered:find(common.lower(options[k]), 1, true) then candidates[#candidates + 1] = l end
        end
        if #candidates > 0 then stage = "option text" end
    end
    if not stage then return letters[1 + common.below(#letters, guess_key)], "random" end
    if #candidates == 1 then return candidates[1], stage end
    -- Several: the one found last (np.argmax keeps the first of equal positions).
    local best, best_at = nil, nil
    for _, l in ipairs(candidates) do
        local at
        if stage == "option text" then at = rfind(lowered, common.lower(options[l:byte() - 64]))
        elseif stage == "(X)" then at = rfind(response, "(" .. l .. ")")
        else at = rfind(response, " " .. l .. " ") end
        if not best_at or at > best_at then best, best_at = l, at end
    end
    return best, stage
end

--- The letter a model output gives, and the stage that gave it. mmmu-pro: evaluate.py's parser (stages
-- "Answer:", "(X)", "X ", "X.", "option text", "random"); tiger-lab: MMLU-Pro's chain. Both end in a
-- random letter seeded by (load's seed, id) where nothing matches, as the references draw one unseeded.
function M.extract(output, mode, item)
    argcheck(type(output) == "string", 1, "extract", "output string expected")
    argcheck(type(item) == "table" and item.options, 3, "extract", "the item is needed")
    mode = mode or M.modes[1]
    local key = common.key("guess", item.seed or 0, item.id)
    if mode == "tiger-lab" then return common.tiger_extract(output, #item.options, key) end
    argcheck(mode == "mmmu-pro", 2, "extract", "unknown mode " .. tostring(mode))
    return parse_multi_choice_response(output, item.options, key)
end

--- eval_multi_choice: the letters are equal.
M.match = common.matcher(function(answer, gold) return answer == gold end)

--- The gold letter.
function M.gold(item)
    return item.answer
end

return M
