-- Reasoning and tool-call parsing: the hand-made oracles of
-- tests/chat/outputs.json, and streaming == non-streaming for every way of
-- splitting the text.

local json = require("glm53.chat.json")
local file = require("glm53.util.file")
local parsers = require("glm53.chat.parsers")

local function read_json(path)
    return assert(json.decode(assert(file.read_file(path)), { exact = true }))
end

local corpus = read_json("tests/chat/outputs.json")

local function counter_ids()
    local n = 0
    return function()
        n = n + 1
        return "call_" .. n
    end
end

local function tools_for(o)
    return o.tools and corpus.tools or nil
end

-- A parse result reduced to comparable plain data.
local function plain(r)
    local calls = {}
    for i, c in ipairs(r.tool_calls) do
        calls[i] = { id = c.id, type = c.type, name = c["function"].name, arguments = c["function"].arguments }
    end
    return { reasoning = r.reasoning, content = r.content, tool_calls = calls }
end

-- Feed the chunks to a fresh stream parser; return the accumulated result and
-- the concatenation of its events, checked to agree with each other.
local function stream_chunks(chunks, tools, opts)
    local p = parsers.stream(tools, opts)
    local reasoning, content, calls = {}, {}, {}
    local function take(events)
        for _, e in ipairs(events) do
            if e.type == "reasoning" then
                assert(#content == 0 and #calls == 0, "reasoning after content or calls")
                reasoning[#reasoning + 1] = e.text
            elseif e.type == "content" then
                content[#content + 1] = e.text
            else
                assert.are.equal(#calls, e.index)
                calls[#calls + 1] = e.tool_call
            end
            if e.text then assert(e.text ~= "", "empty delta") end
        end
    end
    for _, c in ipairs(chunks) do take(p:push(c)) end
    take(p:finish())
    local res = plain(p:result())
    local joined = table.concat(content)
    assert.are.equal(table.concat(reasoning), res.reasoning)
    assert.are.equal(joined ~= "" and joined or nil, res.content)
    assert.are.equal(#calls, #res.tool_calls)
    return res
end

-- UTF-8 characters of s.
local function chars(s)
    local out = {}
    for ch in s:gmatch("[%z\1-\127\194-\244][\128-\191]*") do out[#out + 1] = ch end
    return out
end

local function bytes(s)
    local out = {}
    for i = 1, #s do out[i] = s:sub(i, i) end
    return out
end

local function random_chunks(s, rng_max)
    local out, i = {}, 1
    while i <= #s do
        local n = math.random(1, rng_max)
        out[#out + 1] = s:sub(i, i + n - 1)
        i = i + n
    end
    return out
end

-- Every split of s into two pieces, plus three-piece splits around each '<'
-- and '>' (so every tag is cut at every inner position).
local function tag_splits(s)
    local splits = {}
    for i = 0, #s do splits[#splits + 1] = { s:sub(1, i), s:sub(i + 1) } end
    for a = 1, #s do
        local c = s:sub(a, a)
        if c == "<" then
            for b = a + 1, math.min(#s, a + 12) do
                splits[#splits + 1] = { s:sub(1, a), s:sub(a + 1, b), s:sub(b + 1) }
            end
        end
    end
    return splits
end

describe("parsers.parse", function()
    assert(#corpus.outputs >= 30)
    for _, o in ipairs(corpus.outputs) do
        it("gives the oracle result for " .. o.name, function()
            local r = plain(parsers.parse(o.text, tools_for(o), { id = counter_ids() }))
            local e = o.expected
            assert.are.equal(e.reasoning, r.reasoning)
            assert.are.equal(not json.is_null(e.content) and e.content or nil, r.content)
            assert.are.equal(#e.tool_calls, #r.tool_calls)
            for i, call in ipairs(e.tool_calls) do
                assert.are.same({ id = "call_" .. i, type = "function", name = call.name, arguments = call.arguments },
                    r.tool_calls[i])
            end
        end)
    end

    it("gives vLLM-shaped tool-call ids by default", function()
        local r = parsers.parse("</think><tool_call>f</tool_call><tool_call>g</tool_call>", nil, { tool_calls = true })
        assert.are.equal(2, #r.tool_calls)
        for _, c in ipairs(r.tool_calls) do assert.is_truthy(c.id:match("^chatcmpl%-tool%-%x+$")) end
        assert.are.equal(#"chatcmpl-tool-" + 32, #r.tool_calls[1].id)
        assert.are_not.equal(r.tool_calls[1].id, r.tool_calls[2].id)
    end)

    it("encodes a call as an OpenAI tool-call object", function()
        local r = parsers.parse("</think><tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", nil,
            { tool_calls = true, id = function() return "x" end })
        assert.are.equal('[{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]',
            json.encode(r.tool_calls))
    end)

    it("lets opts.tool_calls override the tools list", function()
        local text = "</think><tool_call>f</tool_call>"
        assert.are.equal(0, #parsers.parse(text, corpus.tools, { tool_calls = false }).tool_calls)
        assert.are.equal(1, #parsers.parse(text, nil, { tool_calls = true }).tool_calls)
        assert.are.equal(0, #parsers.parse(text, {}).tool_calls)
    end)

    it("raises on argument errors", function()
        assert.has_error(function() parsers.parse(nil) end)
        assert.has_error(function() parsers.parse("x", "tools") end)
        assert.has_error(function() parsers.parse("x", nil, { id = "fixed" }) end)
        assert.has_error(function() parsers.stream(42) end)
        local p = parsers.stream()
        assert.has_error(function() p:push(1) end)
        p:finish()
        assert.has_error(function() p:push("late") end)
    end)
end)

describe("parsers.stream", function()
    local function check_all_splits(o)
        local tools = tools_for(o)
        local expected = plain(parsers.parse(o.text, tools, { id = counter_ids() }))
        local function same(chunks, how)
            local got = stream_chunks(chunks, tools, { id = counter_ids() })
            if not pcall(assert.are.same, expected, got) then
                error(string.format("%s, %s: streaming %s differs from parse %s", o.name, how,
                    json.encode(got), json.encode(expected)), 0)
            end
        end
        same({ o.text }, "one chunk")
        same(chars(o.text), "character by character")
        same(bytes(o.text), "byte by byte")
        for _, split in ipairs(tag_splits(o.text)) do same(split, "split " .. json.encode(split)) end
        for k = 1, 20 do same(random_chunks(o.text, (k % 7) + 2), "random chunking " .. k) end
    end

    math.randomseed(4)
    for _, o in ipairs(corpus.outputs) do
        it("equals parse() however " .. o.name .. " is split", function() check_all_splits(o) end)
    end

    it("equals parse() on random tag soup", function()
        local pieces = { "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
            "<arg_value>", "</arg_value>", "get_weather", "city", "days", "x", "7", " ", "\n", "\\n", "<", "</",
            "<tool_", "</think", "é", "中", "\227\128\128", "{'a': 1}", "[1, 2]", "\"s\"" }
        math.randomseed(53)
        for _ = 1, 300 do
            local parts = {}
            for i = 1, math.random(1, 25) do parts[i] = pieces[math.random(#pieces)] end
            local o = { name = "soup", text = table.concat(parts), tools = math.random(4) > 1 }
            local tools = tools_for(o)
            local expected = plain(parsers.parse(o.text, tools, { id = counter_ids() }))
            for k = 1, 5 do
                local got = stream_chunks(random_chunks(o.text, k), tools, { id = counter_ids() })
                if not pcall(assert.are.same, expected, got) then
                    error(string.format("%q: streaming %s differs from parse %s", o.text,
                        json.encode(got), json.encode(expected)), 0)
                end
            end
        end
    end)

    it("emits reasoning and content as they arrive and holds only possible tags", function()
        local p = parsers.stream(corpus.tools, { id = counter_ids() })
        assert.are.same({ { type = "reasoning", text = "thinking" } }, p:push("thinking</thi"))
        assert.are.same({ { type = "content", text = "Hello" } }, p:push("nk>Hello<tool"))
        assert.are.same({ { type = "content", text = "<tool <tooling>" } }, p:push(" <tooling>"))
        assert.are.same({}, p:push("<tool_call>get_weather<arg_key>city</arg_key><arg_value>X"))
        local ev = p:push("</arg_value></tool_call>trailing")
        assert.are.equal(1, #ev)
        assert.are.equal("tool_call", ev[1].type)
        assert.are.equal(0, ev[1].index)
        assert.are.equal('{"city": "X"}', ev[1].tool_call["function"].arguments)
        assert.are.same({}, p:finish())
    end)

    it("holds blank content until it knows whether a call follows", function()
        local p = parsers.stream(corpus.tools, { id = counter_ids() })
        assert.are.same({}, p:push("</think>\n\n"))
        assert.are.same({ { type = "content", text = "\n\nHi" } }, p:push("Hi"))
        p = parsers.stream(corpus.tools, { id = counter_ids() })
        p:push("</think>\n")
        assert.are.same({ { type = "content", text = "\n" } }, p:finish())
    end)
end)

describe("Python behaviours the parsers rely on", function()
    local py = require("glm53.chat.pycompat")

    it("evaluates Python literals as ast.literal_eval does", function()
        local cases = {
            { "'abc'", '"abc"' }, { '"a\\nb"', '"a\\nb"' }, { "[1, 2, 'x']", '[1, 2, "x"]' }, { "(1,)", "[1]" },
            { "(1)", "1" }, { "{'a': 1, 2: True, None: [None]}", '{"a": 1, "2": true, "null": [null]}' },
            { "0x1F", "31" }, { "0o17", "15" }, { "0b101", "5" }, { "1_000", "1000" }, { ".5", "0.5" },
            { "5.", "5.0" }, { "-3", "-3" }, { "+ 2.5", "2.5" }, { "1e5", "100000.0" },
            { "'''tri'ple'''", '"tri\'ple"' }, { "r'a\\d'", '"a\\\\d"' }, { "'a' \"b\"", '"ab"' },
            { "1, 2", "[1, 2]" }, { "[1,\n 2]", "[1, 2]" }, { "00", "0" },
            { "12345678901234567890", "12345678901234567890" }, { "-12345678901234567890", "-12345678901234567890" },
            { "'\\x41\\u00e9\\U0001F600\\101'", '"Aé😀A"' }, { "-0x10", "-16" }, { "u'x'", '"x"' },
            { "[1, # comment\n 2]", "[1, 2]" }, { "()", "[]" }, { "{}", "{}" },
        }
        for _, c in ipairs(cases) do
            local v, err = py.literal_eval(c[1])
            assert(v ~= nil, c[1] .. ": " .. tostring(err))
            assert.are.equal(c[2], json.encode(v), c[1])
        end
    end)

    it("rejects what literal_eval rejects or json.dumps cannot write", function()
        for _, s in ipairs({ "{1, 2}", "1j", "b'x'", "f'x'", "foo", "1\n2", "01", "-True", "--1", "1 +", "[1",
            "'unterminated", "'new\nline'", "1__0", "0x", "set()", "...", "'\\N{DASH}'" }) do
            local v, err = py.literal_eval(s)
            assert(v == nil, s)
            assert.is_string(err)
        end
    end)

    it("strips Unicode whitespace as str.strip() does", function()
        assert.are.equal("a b", py.strip(" \t\n\v\f\r\28\29\30\31a b\194\133\194\160\225\154\128\226\128\128"
            .. "\226\128\138\226\128\168\226\128\169\226\128\175\226\129\159\227\128\128"))
        assert.are.equal("\226\128\139x\226\128\139", py.strip("\226\128\139x\226\128\139")) -- U+200B is not space
        assert.are.equal("", py.strip(" \227\128\128 "))
    end)

    it("writes Python str() and repr() of JSON values", function()
        local v = assert(json.decode('{"a": [1, 2.0, null, true, "it\'s"], "b": "q\\"\'", "c": "\\u00a0\\t"}',
            { exact = true }))
        assert.are.equal([[{'a': [1, 2.0, None, True, "it's"], 'b': 'q"\'', 'c': '\xa0\t'}]], py.str(v))
        assert.are.equal("None", py.str(json.null))
        assert.are.equal("", py.str(nil))
        assert.are.equal("1.5", py.str(1.5))
    end)
end)

-- Acceptance item 5 of issue 4: token ids one by one through the incremental
-- detokeniser, then the parsers, give exactly the non-streaming result.  Needs
-- libglm53 (built) and the bundled tiny tokenizer.
describe("parsers over the incremental detokeniser", function()
    local TOKENIZER = "models/tiny/tokenizer.json"
    local ok_mod, tokenizer = pcall(require, "glm53.engine.tokenizer")
    local tok = ok_mod and file.exists(TOKENIZER) and tokenizer.load(TOKENIZER)
    if not tok then
        pending("needs libglm53 and " .. TOKENIZER)
        return
    end

    -- The text decode gives, and the parse of the tokens streamed one at a time.
    local function stream_tokens(ids, tools)
        local detok = tok:stream()
        local p = parsers.stream(tools, { id = counter_ids() })
        local parts = {}
        for _, id in ipairs(ids) do
            local text = assert(detok:push(id))
            parts[#parts + 1] = text
            p:push(text)
        end
        local tail = detok:finish()
        parts[#parts + 1] = tail
        p:push(tail)
        p:finish()
        return table.concat(parts), plain(p:result())
    end

    it("uses the tags as single tokens", function()
        for _, tag in ipairs({ "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
            "<arg_value>", "</arg_value>" }) do
            assert.are.same({ tok:token_id(tag) }, tok:encode(tag))
        end
    end)

    for _, o in ipairs(corpus.outputs) do
        it("token by token gives parse()'s result for " .. o.name, function()
            local ids = assert(tok:encode(o.text))
            assert.are.equal(o.text, tok:decode(ids))
            local text, got = stream_tokens(ids, tools_for(o))
            assert.are.equal(o.text, text)
            assert.are.same(plain(parsers.parse(o.text, tools_for(o), { id = counter_ids() })), got)
        end)
    end

    it("token by token gives parse()'s result on random tag soup", function()
        local pieces = { "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
            "<arg_value>", "</arg_value>", "get_weather", "city", " ", "\n", "<", "</", "<tool_", "é", "中文",
            "😀", "[1, 2]", "'x'", "7" }
        math.randomseed(5)
        for _ = 1, 200 do
            local parts = {}
            for i = 1, math.random(1, 20) do parts[i] = pieces[math.random(#pieces)] end
            local text = table.concat(parts)
            local tools = math.random(4) > 1 and corpus.tools or nil
            local ids = assert(tok:encode(text))
            local streamed, got = stream_tokens(ids, tools)
            assert.are.equal(text, streamed)
            assert.are.same(plain(parsers.parse(text, tools, { id = counter_ids() })), got)
        end
    end)
end)
