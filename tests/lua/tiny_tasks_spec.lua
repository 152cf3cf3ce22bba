-- evals/tiny*.lua: the tasks of the tiny model's held-out sets. Extraction and scoring on hand-written outputs
-- (right, wrong, malformed, tool calls whose arguments do not fit the schema), their edge cases, loading (the
-- key order of tool schemas survives it, so the rendered prompt is the one the model was trained on), and the
-- runner pieces they need: groups, modes that leave items out, in-process pictures, no tools over a server.
--
-- Every expected answer is read off the rules in each task's header comment by hand, never produced by running
-- this code.
local cjson = require("cjson")
local json = require("glm53.chat.json")
local chat = require("glm53.chat.template")
local tiny = require("evals.tiny")
local arith = require("evals.tiny_arith")
local mc = require("evals.tiny_mc")
local retrieval = require("evals.tiny_retrieval")
local tools = require("evals.tiny_tools")
local vision = require("evals.tiny_vision")

local DATA = "evals/data/tiny/"

local function tmpfile(content)
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(content)
    f:close()
    return path
end

-- The item of a task file with this id.
local function item_of(task, file, id)
    for _, item in ipairs(assert(task.load(DATA .. file))) do
        if item.id == id then return item end
    end
    error("no item " .. id)
end

-- extract then match under the task's default mode.
local function score(task, output, item)
    local answer = task.extract(output, nil, item)
    return answer, task.match(answer, task.gold(item))
end

describe("evals/tiny_arith.lua", function()
    local item = item_of(arith, "arith.jsonl", "arith-000000")   -- 39 * 8 = 312

    it("reads the number after the first '#### '", function()
        assert.are.same({ "312", true }, { score(arith, "39 * 8 = 312\n#### 312", item) })
        assert.are.same({ "80", false }, { score(arith, "39 * 8 = 80\n#### 80", item) })
        -- A sentence's full stop after the number is not part of it; a letter or digit right after it is.
        assert.are.same({ "312", true }, { score(arith, "#### 312.", item) })
        assert.is_nil(arith.extract("#### 312a", nil, item))
        -- The first well-formed line counts, later ones not.
        assert.are.same({ "80", false }, { score(arith, "#### 80\n#### 312", item) })
        assert.are.equal("-5", arith.extract("#### -5", nil, item))
    end)

    it("gives nothing for other formats, and compares text, not numbers", function()
        for _, out in ipairs({ "####312", "#### $312", "The answer is 312.", "", "#### " }) do
            assert.is_nil(arith.extract(out, nil, item), out)
            assert.is_false(arith.match(arith.extract(out, nil, item), "312"))
        end
        assert.are.same({ "312.0", false }, { score(arith, "#### 312.0", item) })
        assert.has_error(function() arith.extract("#### 1", "flexible", item) end)
        assert.has_error(function() arith.extract(42, nil, item) end)
    end)
end)

describe("evals/tiny_mc.lua", function()
    local item = item_of(mc, "mc.jsonl", "mc-000000")   -- gold C of 9 options

    it("reads the letter of 'Answer: X'", function()
        assert.are.same({ "C", true }, { score(mc, "Answer: C", item) })
        assert.are.same({ "C", true }, { score(mc, "Answer: C.", item) })
        assert.are.same({ "G", false }, { score(mc, "Answer: G", item) })
        assert.are.same({ "C", true }, { score(mc, "I think so.\nAnswer: C\nAnswer: D", item) })
    end)

    it("gives nothing for other formats", function()
        for _, out in ipairs({ "answer: C", "Answer:C", "Answer: Cat", "Answer: (C)", "C", "" }) do
            assert.is_nil(mc.extract(out, nil, item), out)
        end
        assert.are.equal(9, #item.options)
        assert.are.equal("C", mc.gold(item))
    end)
end)

describe("evals/tiny_retrieval.lua", function()
    it("takes the whole reply, stripped, and groups items by context length", function()
        local items = assert(retrieval.load(DATA .. "retrieval.jsonl"))
        assert.are.equal(200, #items)
        local per = {}
        for _, it in ipairs(items) do per[it.group] = (per[it.group] or 0) + 1 end
        assert.are.same({ ["256"] = 40, ["512"] = 40, ["1024"] = 40, ["2048"] = 40, ["4096"] = 40 }, per)
        local item = item_of(retrieval, "retrieval.jsonl", "retrieval-000003")
        assert.are.equal("2048", item.group)
        assert.are.equal("8276", retrieval.gold(item))
        assert.are.same({ "8276", true }, { score(retrieval, "8276", item) })
        assert.are.same({ "8276", true }, { score(retrieval, " 8276\n", item) })
        assert.are.same({ "8276.", false }, { score(retrieval, "8276.", item) })
        assert.are.same({ "The code is 8276.", false }, { score(retrieval, "The code is 8276.", item) })
        assert.are.same({ "", false }, { score(retrieval, "", item) })
    end)
end)

describe("evals/tiny_vision.lua", function()
    it("compares the stripped, lower-cased reply, and joins picture paths to the data directory", function()
        local item = item_of(vision, "vision.jsonl", "vision-000001")   -- "bottom right", a position question
        assert.are.equal("position", item.group)
        assert.are.same({ DATA .. "images/vision-000001.png" }, item.images)
        assert.are.equal(DATA .. "images/vision-000001.png", item.messages[1].content[1].image_url.url)
        assert.are.same({ "bottom right", true }, { score(vision, "Bottom Right", item) })
        assert.are.same({ "bottom right", true }, { score(vision, " bottom right\n", item) })
        assert.are.same({ "bottom-right", false }, { score(vision, "bottom-right", item) })
        assert.are.same({ "bottom right.", false }, { score(vision, "bottom right.", item) })
        assert.are.same({ "bottom left", false }, { score(vision, "bottom left", item) })
    end)
end)

describe("evals/tiny_tools.lua", function()
    -- tools-000002: send_email(to, subject), both strings; tools-000000: a second turn whose gold is a reply.
    local call_item = item_of(tools, "tools.jsonl", "tools-000002")
    local text_item = item_of(tools, "tools.jsonl", "tools-000000")
    local function call(name, args)
        local parts = { "<tool_call>", name }
        for _, kv in ipairs(args) do parts[#parts + 1] = "<arg_key>" .. kv[1] .. "</arg_key><arg_value>" .. kv[2] .. "</arg_value>" end
        parts[#parts + 1] = "</tool_call>"
        return table.concat(parts)
    end
    -- A tool_call item of set_timer(minutes: integer).
    local timer = {
        id = "t", answer_type = "tool_call", answer = json.decode('{"name": "set_timer", "arguments": {"minutes": 26}}'),
        tools = json.decode('[{"type": "function", "function": {"name": "set_timer", "parameters": {"type": "object", ' ..
                            '"properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]}}}]'),
    }

    it("scores a call by its name and arguments, in any order, as JSON values", function()
        local gold = '{"name": "send_email", "arguments": {"subject": "Happy birthday", "to": "eli@example.com"}}'
        assert.are.equal(gold, tools.gold(call_item))
        local right = call("send_email", { { "subject", "Happy birthday" }, { "to", "eli@example.com" } })
        assert.are.same({ gold, true }, { score(tools, right, call_item) })
        local wrong = call("send_email", { { "to", "dev@example.com" }, { "subject", "Happy birthday" } })
        assert.is_false(select(2, score(tools, wrong, call_item)))
        -- An integer parameter: the value is read as JSON, so "26" is 26 and equals the gold 26.
        assert.are.same({ '{"name": "set_timer", "arguments": {"minutes": 26}}', true },
                        { score(tools, call("set_timer", { { "minutes", " 26 " } }), timer) })
        -- 26.0 is a float: not the gold call, and not an integer.
        assert.is_false(select(2, score(tools, call("set_timer", { { "minutes", "26.0" } }), timer)))
        -- A reply without a call: nothing for a call item.
        assert.are.same({ nil, false }, { score(tools, "Sure, the email is sent.", call_item) })
    end)

    it("json-valid: a complete call whose arguments fit the tool's schema", function()
        local function valid(out, item)
            local answer, stage = tools.extract(out, "json-valid", item or timer)
            return tools.match(answer, tools.gold(item or timer), "json-valid"), stage
        end
        assert.are.same({ true, "valid" }, { valid(call("set_timer", { { "minutes", "5" } })) })
        -- A wrong value of the right type is a valid call (and a wrong one under "call").
        assert.are.same({ true, "valid" }, { valid(call("set_timer", { { "minutes", "99" } })) })
        assert.are.same({ false, "argument minutes: integer expected" }, { valid(call("set_timer", { { "minutes", "twenty" } })) })
        assert.are.same({ false, "argument minutes: integer expected" }, { valid(call("set_timer", { { "minutes", "26.0" } })) })
        assert.are.same({ false, "argument minutes: integer expected" }, { valid(call("set_timer", { { "minutes", "[26" } })) })
        assert.are.same({ false, "argument minutes is missing" }, { valid(call("set_timer", {})) })
        assert.are.same({ false, "unknown argument seconds" },
                        { valid(call("set_timer", { { "minutes", "1" }, { "seconds", "2" } })) })
        assert.are.same({ false, 'unknown tool "get_time"' }, { valid(call("get_time", { { "city", "Oslo" } })) })
        -- Malformed: an unterminated call, a bare JSON object, nothing.
        assert.are.same({ false, "no call" }, { valid("<tool_call>set_timer<arg_key>minutes</arg_key><arg_value>5</arg_value>") })
        assert.are.same({ false, "no call" }, { valid('{"name": "set_timer", "arguments": {"minutes": 5}}') })
        assert.are.same({ false, "no call" }, { valid("") })
        -- String parameters keep the text as written: any text is valid there.
        assert.are.same({ true, "valid" },
                        { valid(call("send_email", { { "to", "x" }, { "subject", "[not json" } }), call_item) })
    end)

    it("scores a text item by the exact reply, and json-valid only on call items", function()
        assert.are.equal("text", text_item.group)
        assert.are.same({ "Your timer for 26 minutes is running.", true },
                        { score(tools, " Your timer for 26 minutes is running.\n", text_item) })
        assert.is_false(select(2, score(tools, "Your timer for 26 minutes is running", text_item)))
        assert.is_false(select(2, score(tools, call("set_timer", { { "minutes", "26" } }), text_item)))
        assert.is_true(tools.scored(call_item, "json-valid"))
        assert.is_false(tools.scored(text_item, "json-valid"))
        assert.is_true(tools.scored(text_item, "call"))
    end)

    it("loads the tools in the file's key order, so the template renders the trained prompt", function()
        local fn = call_item.tools[1]["function"]
        assert.are.same({ "type", "function" }, json.keys(call_item.tools[1]))
        assert.are.same({ "name", "description", "parameters" }, json.keys(fn))
        assert.are.same({ "type", "properties", "required" }, json.keys(fn.parameters))
        assert.are.same({ "to", "subject" }, json.keys(fn.parameters.properties))
        local prompt = assert(chat.render(call_item.messages, tools.chat_opts(call_item)))
        assert.truthy(prompt:find('{"name": "send_email", "description": "Send a short email.", "parameters": ' ..
                                  '{"type": "object", "properties": {"to": {"type": "string"}, "subject": ' ..
                                  '{"type": "string"}}, "required": ["to", "subject"]}}', 1, true))
        -- What lua-cjson's unordered tables give: another prompt.
        local line
        for l in io.lines(DATA .. "tools.jsonl") do if l:find('"tools-000002"', 1, true) then line = l end end
        local row = cjson.decode(line)
        assert.are_not.equal(prompt, chat.render(row.messages, { tools = row.tools }))
    end)

    it("refuses items without tools, or with an unknown answer_type", function()
        local function load(row) return tools.load(tmpfile(row .. "\n")) end
        local _, err = load('{"id": "x", "family": "tools", "messages": [{"role": "user", "content": "hi"}], ' ..
                            '"answer": "hi", "answer_type": "text"}')
        assert.matches(':1: field "tools"', err)
        _, err = load('{"id": "x", "family": "tools", "messages": [{"role": "user", "content": "hi"}], "tools": [{}], ' ..
                      '"answer": "hi", "answer_type": "song"}')
        assert.matches('field "answer_type"', err)
        _, err = load('{"id": "x", "family": "arith", "messages": [], "answer": "1"}')
        assert.matches('field "family": "tools" expected', err)
    end)
end)

describe("evals/tiny.lua", function()
    it("loads the five families with ids, messages and the prompt as the file has it", function()
        for _, family in ipairs(tiny.FAMILIES) do
            local task = require("evals.tiny_" .. family)
            assert.are.equal("tiny_" .. family, task.name)
            local items = assert(task.load(DATA .. family .. ".jsonl", { repeats = 2 }))
            assert.are.equal(family == "retrieval" and 400 or 600, #items)
            assert.are.equal(family .. "-000000#1", items[1].id)
            assert.are.equal(items[1].messages, task.prompt(items[1]))
            assert.has_error(function() task.prompt(items[1], { fewshot = 1 }) end)
            assert.is_true(task.generation.max_gen_toks >= 16)
        end
    end)

    it("canonical sorts the keys of every object and keeps arrays", function()
        local v = json.decode('{"b": [{"d": 1, "c": 2}], "a": 1.0}', { exact = true })
        assert.are.equal('{"a": 1.0, "b": [{"c": 2, "d": 1}]}', json.encode(tiny.canonical(v)))
        assert.are.equal('{"b": [{"d": 1, "c": 2}], "a": 1.0}', json.encode(v))   -- the original is untouched
    end)

    it("reports a bad line with its file and line number", function()
        local _, err = arith.load(tmpfile('{"id": "arith-1", "family": "arith", "messages": [{"role": "user", ' ..
                                          '"content": "q"}], "answer": "1"}\nnot json\n'))
        assert.matches(":2: bad JSON", err)
        _, err = arith.load(tmpfile('{"id": "arith-1", "family": "arith", "messages": [{"role": "user", "content": "q"}], ' ..
                                    '"answer": "one"}\n'))
        assert.matches(':1: field "answer": an integer', err)
    end)
end)

---------------------------------------------------------------------------------------------------------------
-- The runner pieces the tiny tasks use
---------------------------------------------------------------------------------------------------------------
describe("the eval runner with the tiny tasks", function()
    local summary = require("glm53.eval.summary")
    local records = require("glm53.eval.records")
    local null = cjson.null

    it("summary: per-group accuracy, and a mode's n leaves out the items it does not score", function()
        local recs = {
            { id = "1", group = "tool_call", correct = { call = true, ["json-valid"] = true } },
            { id = "2", group = "tool_call", correct = { call = false, ["json-valid"] = true } },
            { id = "3", group = "text", correct = { call = true, ["json-valid"] = null } },
            { id = "4", group = "text", correct = { call = false, ["json-valid"] = null }, finish_reason = "length" },
            { id = "5", group = "text", error = "boom" },
        }
        local s = summary.compute(recs, { "call", "json-valid" })
        assert.are.same({ 4, 2 }, { s.modes[1].n, s.modes[1].correct })
        assert.are.same({ 2, 2, 1 }, { s.modes[2].n, s.modes[2].correct, s.modes[2].hi })   -- 2 of 2: the bound is 1
        assert.are.same({ "tool_call", "text" }, { s.groups[1].group, s.groups[2].group })
        assert.are.same({ 2, 1 }, { s.groups[1].modes[1].n, s.groups[1].modes[1].correct })
        assert.are.same({ 2, 1, 1 }, { s.groups[2].modes[1].n, s.groups[2].modes[1].correct, s.groups[2].modes[1].wrong_length })
        assert.are.equal(0, s.groups[2].modes[2].n)
        local _, rows = summary.group_table(s)
        assert.are.equal(3, #rows)   -- text has no json-valid row
        assert.is_nil(summary.group_table(summary.compute({ { id = "1", correct = { m = true } } }, { "m" })))
    end)

    it("records keep the group after the id and the task file's key order in the prompt", function()
        local msg = json.decode('{"role": "user", "content": "q", "a": 1.0}', { exact = true })
        assert.are.equal('{"id":"1","group":"2048","prompt":[{"role":"user","content":"q","a":1.0}]',
                         records.encode({ id = "1", group = "2048", prompt = { msg } }):match('^(.-),"output"'))
    end)

    it("refuses to send a task's tools to a server, which the request would lose", function()
        local runner = require("glm53.eval.runner")
        local dir = os.tmpname()
        os.remove(dir)
        local r, err = runner.run({ task = "tiny_tools", server = "http://127.0.0.1:9", out = dir, progress = false,
                                    log = function() end })
        assert.is_nil(r)
        assert.matches("in%-process", err)
    end)

    it("selects items by group, and says when none is left", function()
        local runner = require("glm53.eval.runner")
        local dir = os.tmpname()
        os.remove(dir)
        local r, err = runner.run({ task = "tiny_retrieval", model = "models/glm53-tiny", groups = { "3000" }, out = dir,
                                    progress = false, log = function() end })
        assert.is_nil(r)
        assert.matches("no item is in the groups 3000", err)
    end)

    it("sends a picture named by a local path as a data URL to a server", function()
        local openai = require("glm53.eval.openai")
        local item = item_of(vision, "vision.jsonl", "vision-000000")
        local wire = assert(openai.wire_messages(item.messages))
        assert.matches("^data:image/png;base64,iVBOR", wire[1].content[1].image_url.url)
        assert.are.equal(item.messages[1].content[2], wire[1].content[2])
        local bad = { { role = "user", content = { { type = "image_url", image_url = { url = "/nonexistent.png" } } } } }
        assert.is_nil(openai.wire_messages(bad))
    end)

    it("prepares a picture prompt in-process: the tower's rows at the placeholders", function()
        local generator = require("glm53.eval.generator")
        local m = assert(require("glm53.engine.model").load("models/glm53-tiny", { device = "cpu", threads = 1 }))
        local tok = assert(require("glm53.engine.tokenizer").load("models/glm53-tiny/tokenizer.json"))
        local item = item_of(vision, "vision.jsonl", "vision-000000")
        local p = assert(generator.prompt(m, tok, item.messages))
        local image_id, placed = tok:token_id("<|image|>"), 0
        for i, id in ipairs(p.ids) do
            if id == image_id then
                placed = placed + 1
                assert.are.equal(1, p.use[i - 1])
            else
                assert.are.equal(0, p.use[i - 1])
            end
        end
        assert.are.equal(16, placed)   -- 112 x 112 pixels: 4 x 4 merged patches
        local text = assert(generator.prompt(m, tok, { { role = "user", content = "hi" } }))
        assert.is_nil(text.embeddings)
        assert.are.same(assert(generator.encode(tok, { { role = "user", content = "hi" } })), text.ids)
        m:free()
    end)
end)
