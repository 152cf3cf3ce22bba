-- glm53.chat.json: order preservation, Python json.dumps output, strict decoding
-- with positioned errors.

local json = require("glm53.chat.json")

local function roundtrip(text, opts)
    local v, err = json.decode(text, opts)
    assert(v ~= nil, err)
    return json.encode(v, opts and opts.encode)
end

describe("json.decode", function()
    it("decodes every value kind", function()
        local v = assert(json.decode(
            ' {"s": "x", "n": -12.5e1, "i": 7, "t": true, "f": false, "z": null, "a": [1, [], {}]} '))
        assert.are.equal("x", v.s)
        assert.are.equal(-125, v.n)
        assert.are.equal(7, v.i)
        assert.is_true(v.t)
        assert.is_false(v.f)
        assert.are.equal(json.null, v.z)
        assert.are.equal(1, v.a[1])
        assert.is_true(json.is_array(v.a[2]))
        assert.is_true(json.is_object(v.a[3]))
    end)

    it("keeps object key order, last duplicate value at the first position", function()
        local v = assert(json.decode('{"z": 1, "a": 2, "m": {"y": 1, "b": 2}, "z": 3}'))
        assert.are.same({ "z", "a", "m" }, json.keys(v))
        assert.are.same({ "y", "b" }, json.keys(v.m))
        assert.are.equal(3, v.z)
        assert.are.equal('{"z": 3, "a": 2, "m": {"y": 1, "b": 2}}', json.encode(v))
    end)

    it("decodes escapes, including surrogate pairs", function()
        local v = assert(json.decode('"\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0041 \\u00e9 \\u4e2d \\ud83d\\ude00"'))
        assert.are.equal('" \\ / \b \f \n \r \t A é 中 😀', v)
    end)

    it("replaces unpaired surrogates with U+FFFD", function()
        assert.are.equal("\239\191\189x", json.decode('"\\ud800x"'))
        assert.are.equal("\239\191\189", json.decode('"\\udc00"'))
        assert.are.equal("\239\191\189A", json.decode('"\\ud800\\u0041"'))
    end)

    it("passes raw UTF-8 through and rejects malformed UTF-8", function()
        assert.are.equal("日本 👩‍💻", json.decode('"日本 👩‍💻"'))
        local v, err = json.decode('["ok", "bad \255"]')
        assert.is_nil(v)
        assert.is_truthy(err:find("invalid UTF-8 in string at line 1 column 13 (byte 13)", 1, true))
        assert.is_nil((json.decode('"\237\160\128"'))) -- encoded surrogate
        assert.is_nil((json.decode('"\192\128"')))     -- overlong NUL
    end)

    it("keeps numbers exact on request", function()
        local text = "[1.0, 1e5, -0.0, 12345678901234567890, 9007199254740993, 0.5, 3, -0]"
        local v = assert(json.decode(text, { exact = true }))
        assert.is_true(json.is_number_box(v[1]))
        assert.are.equal(1, json.tonumber(v[1]))
        assert.are.equal("[1.0, 100000.0, -0.0, 12345678901234567890, 9007199254740993, 0.5, 3, 0]", json.encode(v))
        local plain = assert(json.decode("[1.0, 1e5, 0.5]"))
        assert.are.equal("number", type(plain[1]))
        assert.are.equal("[1, 100000, 0.5]", json.encode(plain))
    end)

    it("accepts NaN and Infinity only when asked", function()
        assert.is_nil((json.decode("NaN")))
        local v = assert(json.decode("[NaN, Infinity, -Infinity]", { allow_nan = true }))
        assert.is_true(v[1] ~= v[1])
        assert.are.equal(math.huge, v[2])
        assert.are.equal(-math.huge, v[3])
    end)

    local malformed = {
        { "", "unexpected end of input, expected a value at line 1 column 1 (byte 1)" },
        { "  ", "unexpected end of input" },
        { "[1, 2", "expected ',' or ']' but found end of input at line 1 column 6" },
        { "[1 2]", "expected ',' or ']' but found '2' at line 1 column 4" },
        { '{"a" 1}', "expected ':' but found '1' at line 1 column 6" },
        { "{a: 1}", "expected string key but found 'a' at line 1 column 2" },
        { '{"a": 1,}', "expected string key but found '}' at line 1 column 9" },
        { "[1,]", "expected a value but found ']' at line 1 column 4" },
        { "01", "leading zeros are not allowed at line 1 column 1" },
        { "1.", "digits expected after decimal point at line 1 column 2" },
        { "1e", "digits expected in exponent at line 1 column 2" },
        { "-", "invalid number at line 1 column 1" },
        { ".5", "expected a value but found '.'" },
        { "+1", "expected a value but found '+'" },
        { '"abc', "unterminated string at line 1 column 1" },
        { '"a\nb"', "unescaped control character in string at line 1 column 3" },
        { '"\\x"', "invalid escape '\\x' at line 1 column 2" },
        { '"\\u12"', "invalid \\u escape at line 1 column 4" },
        { "tru", "expected a value but found 't'" },
        { "nul", "expected a value but found 'n'" },
        { "[1]x", "extra data after the value: 'x' at line 1 column 4" },
        { "{}\n\n  ]", "extra data after the value: ']' at line 3 column 3 (byte 7)" },
        { "\239\187\191{}", "unexpected UTF-8 byte order mark" },
        { "[\1]", "expected a value but found byte 0x01" },
        { string.rep("[", 1001) .. string.rep("]", 1001), "too deeply nested" },
    }
    for _, case in ipairs(malformed) do
        it("rejects " .. string.format("%q", case[1]:sub(1, 20)) .. " with a positioned message", function()
            local v, err = json.decode(case[1])
            assert.is_nil(v)
            assert.is_string(err)
            assert(err:find(case[2], 1, true), "got: " .. err)
        end)
    end

    it("raises on a non-string argument", function()
        assert.has_error(function() json.decode(nil) end)
        assert.has_error(function() json.decode({}) end)
    end)
end)

describe("json.encode", function()
    it("writes Python's json.dumps output", function()
        assert.are.equal('{"a": [1, 2.5, "x"], "b": null, "c": true}',
            json.encode(json.ordered { "a", json.array { 1, 2.5, "x" }, "b", json.null, "c", true }))
        -- control characters escaped (lower-case hex); DEL and U+2028 written as they are
        assert.are.equal('"\\u0000\\u001f\\"\\\\/é😀\127\226\128\168"',
            json.encode('\0\31"\\/é😀\127\226\128\168'))
        assert.are.equal('"\\b\\f\\n\\r\\t"', json.encode("\b\f\n\r\t"))
    end)

    it("formats floats as Python's repr", function()
        local cases = {
            { 0.1, "0.1" }, { 1.5e300, "1.5e+300" }, { 1e-7, "1e-07" }, { 5e-324, "5e-324" },
            { 0.0001, "0.0001" }, { 123456789012345.6, "123456789012345.6" }, { 1 / 3, "0.3333333333333333" },
            { 2.5, "2.5" }, { 971494685127620.25, "971494685127620.2" }, { -1.5e-5, "-1.5e-05" },
        }
        for _, c in ipairs(cases) do assert.are.equal(c[2], json.encode(c[1])) end
        assert.are.equal("1.0", json.encode(json.float(1)))
        assert.are.equal("-0.0", json.encode(json.float(-0.0)))
        assert.are.equal("1e+16", json.encode(json.float(1e16)))
    end)

    it("writes integral Lua numbers below 2^63 as integers, others as floats", function()
        assert.are.equal("[0, 0, 42, -7, 9007199254740992, 10000000000000000, 1.1805916207174113e+21]",
            json.encode(json.array { 0, -0.0, 42, -7, 2 ^ 53, 1e16, 2 ^ 70 }))
    end)

    it("writes NaN and infinities like Python unless allow_nan is false", function()
        assert.are.equal("[NaN, Infinity, -Infinity]", json.encode(json.array { 0 / 0, math.huge, -math.huge }))
        assert.has_error(function() json.encode(math.huge, { allow_nan = false }) end)
    end)

    it("escapes non-ASCII with ensure_ascii, with surrogate pairs", function()
        assert.are.equal('"\\u00e9\\ud83d\\ude00 \\u4e2d"', json.encode("é😀 中", { ensure_ascii = true }))
        assert.has_error(function() json.encode("\255", { ensure_ascii = true }) end)
    end)

    it("supports separators, compact output, indent and sort_keys", function()
        local v = json.ordered { "b", json.array { 1, json.ordered { "a", json.array() } }, "a", json.object() }
        assert.are.equal('{"b":[1,{"a":[]}],"a":{}}', json.encode(v, { compact = true }))
        assert.are.equal('{"b";[1|{"a";[]}]|"a";{}}', json.encode(v, { separators = { "|", ";" } }))
        assert.are.equal('{"a": {}, "b": [1, {"a": []}]}', json.encode(v, { sort_keys = true }))
        assert.are.equal('{\n  "b": [\n    1,\n    {\n      "a": []\n    }\n  ],\n  "a": {}\n}',
            json.encode(v, { indent = 2 }))
    end)

    it("orders plain Lua tables: sequences as arrays, other keys sorted", function()
        assert.are.equal("[1, 2, 3]", json.encode({ 1, 2, 3 }))
        assert.are.equal('{"a": 1, "b": 2, "c": 3}', json.encode({ c = 3, a = 1, b = 2 }))
        assert.are.equal("{}", json.encode({}))
        assert.are.equal("[]", json.encode(json.array()))
        assert.are.equal('{"1": "x", "3": "y"}', json.encode({ [1] = "x", [3] = "y" }))
    end)

    it("appends keys added with json.set to the recorded order", function()
        local v = assert(json.decode('{"z": 1, "a": 2}'))
        json.set(v, "m", 3)
        json.set(v, "z", 4)
        v.late = true -- added without json.set: written after the ordered keys
        assert.are.equal('{"z": 4, "a": 2, "m": 3, "late": true}', json.encode(v))
        v.a = nil
        assert.are.equal('{"z": 4, "m": 3, "late": true}', json.encode(v))
    end)

    it("understands cjson's null (and empty_array where that cjson has it)", function()
        local cjson = require("cjson")
        assert.are.equal("[null, 1]", json.encode({ cjson.null, 1 }))
        if cjson.empty_array then assert.are.equal("[[]]", json.encode({ cjson.empty_array })) end
    end)

    it("raises on values it cannot write", function()
        assert.has_error(function() json.encode(function() end) end)
        local t = {}
        t[1] = t
        assert.has_error(function() json.encode(t) end, nil)
        assert.has_error(function() json.encode({ [{}] = 1 }) end)
    end)

    it("round-trips text already in Python's format", function()
        local texts = {
            '{"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1.0}}, '
                .. '"required": ["x"]}}',
            '[1, -2, 3.5, 1e-07, 1e+16, 12345678901234567890, true, false, null, "\\u0000 é 😀", [], {}]',
            '{"nested": [[[{"deep": [0.1, 0.2, 0.30000000000000004]}]]], "": ""}',
        }
        for _, t in ipairs(texts) do assert.are.equal(t, roundtrip(t, { exact = true })) end
    end)

    it("round-trips random values through encode and decode", function()
        math.randomseed(53)
        local function gen(depth)
            local r = math.random(depth > 3 and 5 or 7)
            if r == 1 then return math.random(-1e6, 1e6) end
            if r == 2 then return (math.random() - 0.5) * 10 ^ math.random(-20, 20) end
            if r == 3 then
                local t = {}
                for i = 1, math.random(0, 8) do t[i] = string.char(math.random(0, 127)) end
                return table.concat(t) .. ({ "", "é", "中文", "😀" })[math.random(4)]
            end
            if r == 4 then return math.random(2) == 1 end
            if r == 5 then return json.null end
            if r == 6 then
                local a = json.array()
                for i = 1, math.random(0, 4) do a[i] = gen(depth + 1) end
                return a
            end
            local o = json.object({}, {})
            for _ = 1, math.random(0, 4) do json.set(o, "k" .. math.random(100), gen(depth + 1)) end
            return o
        end
        for _ = 1, 300 do
            local text = json.encode(gen(0))
            assert.are.equal(text, roundtrip(text, { exact = true }))
        end
    end)
end)
