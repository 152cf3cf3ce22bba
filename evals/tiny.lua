-- evals/tiny.lua: what the five tasks of the tiny model's held-out sets share (evals/tiny_arith.lua,
-- tiny_mc.lua, tiny_retrieval.lua, tiny_tools.lua, tiny_vision.lua; the data and its fields:
-- evals/data/tiny/README.md, the tasks: docs/tiny-model.md).
--
-- Unlike the reference-harness tasks, these have no harness to copy: the prompt is the item's own chat
-- `messages` (with `tools` for the tools family) rendered with the chat template and its generation prompt,
-- and each family scores the one answer format the model was trained to write, strictly (a right answer in
-- another format is wrong). Rows are read with glm53.chat.json, not lua-cjson: it keeps the key order of
-- objects, and the chat template writes tool schemas and tool-call arguments in that order, so a decoder that
-- loses it renders another prompt than the one the model was trained and measured on.
--
--   tiny.load(path, opts, family, make)  items of a family's JSONL: { id, family, messages, answer, meta },
--                                        completed by make(row, item) -> item or nil, reason
--   tiny.task(def)                       a task module's common part: name, family, modes, generation,
--                                        prompt, gold
--   tiny.canonical(v)                    a JSON value with every object's keys sorted (order-free comparison)
--   tiny.check_mode(task, mode, fname)   the mode, defaulted to the task's first; raises for an unknown one
--   tiny.pattern_extract(task)           an extract(output, mode, item): the first group of task.PATTERN's first match
--   tiny.match_same                      a match(...) whose answer is right when it equals the gold text
--
-- Argument errors raise; runtime failures (unreadable file, bad line) return nil, "path:line: reason".

local common = require("evals.common")
local json = require("glm53.chat.json")

local argcheck, format = common.argcheck, string.format

local M = {}

M.FAMILIES = { "arith", "mc", "retrieval", "tools", "vision" }

-- One JSONL line as glm53.chat.json reads a request: objects keep their key order, numbers their Python form.
local function decode(line)
    return json.decode(line, { exact = true })
end
M.decode = decode

--- Items of the JSONL file of one family. Every row needs a string `id`, `family` equal to `family`, and a
-- non-empty `messages` list; make(row, item) checks and adds the family's fields and returns the item or nil,
-- reason. opts.repeats copies items as every task's load does (ids "<id>#r").
function M.load(path, opts, family, make)
    argcheck(type(family) == "string", 3, "load", "family string expected")
    return common.load(path, opts, function(row)
        local id, why = common.field(row, "id")
        if not id then return nil, why end
        if row.family ~= family then return nil, format("field \"family\": %q expected, got %s", family, tostring(row.family)) end
        local messages = row.messages
        if json.kind(messages) ~= "array" or #messages == 0 then
            return nil, "field \"messages\": a non-empty list of chat messages expected"
        end
        local item = { id = id, family = family, messages = messages, answer = row.answer,
                       meta = json.kind(row.meta) == "object" and row.meta or nil }
        return make(row, item)
    end, nil, decode)
end

--- The chat messages of an item, as they are in the file. The tiny tasks have no few-shot or text format.
local function prompt(item, opts)
    argcheck(type(item) == "table" and item.messages ~= nil, 1, "prompt", "item table expected")
    opts = opts or {}
    argcheck((opts.fewshot or 0) == 0, 2, "prompt", "the tiny tasks have no few-shot format")
    argcheck(opts.format == nil or opts.format == "chat", 2, "prompt", "the tiny tasks' prompts are chat messages")
    return item.messages
end

--- The gold answer as the file has it (a string; tools overrides this for its calls).
local function gold(item)
    return item.answer
end

--- The common part of a tiny task module. def: family, modes (the default first), max_tokens (the most tokens
-- generated: a bound for a model that has not learnt to stop, well above the longest gold answer).
function M.task(def)
    argcheck(type(def) == "table" and type(def.family) == "string", 1, "task", "def.family expected")
    return {
        name = "tiny_" .. def.family, family = def.family, modes = def.modes,
        generation = { max_gen_toks = def.max_tokens, do_sample = false, temperature = 0 },
        prompt = prompt, gold = gold,
    }
end

--- The mode an extract() call asks for: mode, or the task's first when nil; an unknown one raises.
function M.check_mode(task, mode, fname)
    mode = mode or task.modes[1]
    for _, m in ipairs(task.modes) do
        if m == mode then return mode end
    end
    error(format("bad argument #2 to '%s' (unknown mode %s)", fname or "extract", tostring(mode)), 3)
end

--- An extract(output, mode, item) for a task whose answer is the first group of the first match of task.PATTERN
-- (common.search), or nil when nothing matches.
function M.pattern_extract(task)
    return function(output, mode, item)
        argcheck(type(output) == "string", 1, "extract", "output string expected")
        M.check_mode(task, mode, "extract")
        local _, groups = common.search(task.PATTERN, output)
        return groups and groups[1] or nil
    end
end

--- A match for answers that must equal the gold text.
M.match_same = common.matcher(function(answer, gold) return answer == gold end)

--- v with every object's keys in sorted order, recursively (a copy; arrays stay arrays): two values that are
-- equal as JSON encode to the same text whatever order their keys came in.
function M.canonical(v)
    local kind = json.kind(v)
    if kind == "array" then
        local out = {}
        for i = 1, #v do out[i] = M.canonical(v[i]) end
        return json.array(out)
    elseif kind == "object" then
        local out = {}
        for _, k in ipairs(json.keys(v)) do out[k] = M.canonical(v[k]) end
        return json.object(out)   -- no key list: sorted
    end
    return v
end

--- A string row field, for make(): the value, or nil and a reason.
M.field = common.field

return M
