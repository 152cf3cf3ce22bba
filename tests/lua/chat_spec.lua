-- The Lua renderer against jinja2's renderings of the GLM-5.3 template
-- (tests/chat/make_refs.py wrote the references).

local json = require("glm53.chat.json")
local file = require("glm53.util.file")
local chat = require("glm53.chat.template")

local function read_json(path)
    return assert(json.decode(assert(file.read_file(path)), { exact = true }))
end

-- The options of a conversation as chat.render takes them.
local function render_opts(options)
    local opts = {}
    for _, k in ipairs(json.keys(options)) do opts[k] = options[k] end
    return opts
end

-- First differing byte, with some context, for readable failures.
local function first_diff(a, b)
    local n = math.min(#a, #b)
    for i = 1, n do
        if a:byte(i) ~= b:byte(i) then
            return string.format("byte %d: expected %q, got %q", i, a:sub(i, i + 40), b:sub(i, i + 40))
        end
    end
    local longer = #a > #b and a or b
    return string.format("lengths differ: expected %d, got %d (tail %q)", #a, #b, longer:sub(n + 1, n + 40))
end

local function check(conv, ref)
    local prompt, err = chat.render(conv.messages, render_opts(conv.options))
    if ref.error then
        assert(prompt == nil, conv.name .. ": jinja2 raised (" .. ref.error .. ") but the renderer returned a prompt")
        assert.is_string(err)
    else
        assert(prompt ~= nil, conv.name .. ": " .. tostring(err))
        if prompt ~= ref.prompt then
            error(conv.name .. ": " .. first_diff(ref.prompt, prompt), 0)
        end
    end
end

describe("chat.render", function()
    local convs = read_json("tests/chat/conversations.json")
    local refs = read_json("tests/chat/refs.json").refs

    it("has a reference for every conversation", function()
        assert.are.equal(#convs, #refs)
        assert.is_true(#convs >= 40)
        for i = 1, #convs do assert.are.equal(convs[i].name, refs[i].name) end
    end)

    for i = 1, #convs do
        it("matches jinja2 on " .. convs[i].name, function()
            check(convs[i], refs[i])
        end)
    end

    it("matches jinja2 on the seeded random conversations", function()
        local fuzz = read_json("tests/chat/fuzz_refs.json").conversations
        assert.is_true(#fuzz > 0)
        for i = 1, #fuzz do check(fuzz[i], fuzz[i]) end
    end)

    it("renders the golden one-turn prompt", function()
        assert.are.equal("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi<|assistant|><think>",
            chat.render({ { role = "user", content = "hi" } }))
    end)

    it("ends the generation prompt with <|assistant|><think> whatever thinking flags say", function()
        local msgs = { { role = "user", content = "x" } }
        local variants = { {}, { thinking = false }, { enable_thinking = false }, { reasoning_effort = "low" } }
        for _, opts in ipairs(variants) do
            local p = chat.render(msgs, opts)
            assert.are.equal("<|assistant|><think>", p:sub(-#"<|assistant|><think>"))
            assert.is_nil(p:find("<think></think>", 1, true))
        end
        local p = chat.render(msgs, { add_generation_prompt = false })
        assert.are.equal("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>x", p)
    end)

    it("accepts messages and tools as JSON text", function()
        local from_text = chat.render('[{"role":"user","content":"hi"}]',
            { tools = '[{"type":"function","function":{"name":"f","parameters":{"b":1.0,"a":[]}}}]' })
        assert.is_truthy(from_text:find('{"name": "f", "parameters": {"b": 1.0, "a": []}}\n', 1, true))
    end)

    it("writes ordered Lua-built tools in the order given", function()
        local tool = json.ordered { "name", "f", "description", "d", "parameters",
            json.ordered { "type", "object", "required", json.array() } }
        local p = chat.render({ { role = "user", content = "hi" } }, { tools = { tool } })
        local want = '{"name": "f", "description": "d", "parameters": {"type": "object", "required": []}}'
        assert.is_truthy(p:find(want, 1, true))
    end)

    it("decodes JSON-text tool-call arguments keeping their key order", function()
        local p = chat.render({
            { role = "user", content = "x" },
            { role = "assistant", content = "", tool_calls = { { id = "1", type = "function",
                ["function"] = { name = "f", arguments = '{"z": 1.0, "a": "s", "m": [1, {"q": null}]}' } } } },
        }, { add_generation_prompt = false })
        assert.is_truthy(p:find("<tool_call>f<arg_key>z</arg_key><arg_value>1.0</arg_value><arg_key>a</arg_key>"
            .. "<arg_value>s</arg_value><arg_key>m</arg_key>"
            .. '<arg_value>[1, {"q": null}]</arg_value></tool_call>', 1, true))
    end)

    it("returns nil and a message where the template raises", function()
        local bad_call = { ["function"] = { name = "f", arguments = "{bad" } }
        local p, err = chat.render({ { role = "assistant", tool_calls = { bad_call } } })
        assert.is_nil(p)
        assert.is_truthy(err:find("not valid JSON", 1, true))
        p, err = chat.render("[{", {})
        assert.is_nil(p)
        assert.is_truthy(err:find("line 1 column 3", 1, true))
    end)

    it("raises on argument errors", function()
        assert.has_error(function() chat.render(42) end)
        assert.has_error(function() chat.render({}, "opts") end)
    end)
end)
