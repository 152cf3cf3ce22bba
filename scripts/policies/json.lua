--[[
json.lua - constrained decoding: the output is always a prefix of one JSON value (RFC 8259), and generation ends
when the value is complete.

The policy runs a JSON prefix automaton over the decoded text. For each candidate it feeds the token's bytes
(tokenizer:piece) to a copy of the automaton state; candidates that break JSON (and special tokens) are masked
out, and the pick is drawn from the rest, renormalised. No valid candidate ends the sequence with a reason.
The state is three strings, so trying a candidate copies nothing.

    bin/glm53 generate "Give me a JSON object." --policy json        (the checkpoint's tokenizer is passed along)
opts: tokenizer (required: an object with :piece(id) and :is_special(id)).
]]
local sampler = require("glm53.engine.sampler")

local WS = { [" "] = true, ["\t"] = true, ["\n"] = true, ["\r"] = true }
local LITERAL = { t = "rue", f = "alse", n = "ull" }     -- what must follow the first letter
local ESCAPE = { ['"'] = true, ["\\"] = true, ["/"] = true, b = true, f = true, n = true, r = true, t = true }

-- The automaton: (mode, stack, aux) + one byte -> the next state, or nil. stack holds the open "{" and "[";
-- aux: "first" right after an opening bracket (where a closing one may follow), the string kind ("k" key, "v"
-- value) and pending \u digits, the number part, or the rest of a literal.
local step
local function begin_value(c, stack)
    if c == "{" then return "key", stack .. "{", "first" end
    if c == "[" then return "value", stack .. "[", "first" end
    if c == '"' then return "str", stack, "v" end
    if c == "-" then return "num", stack, "-" end
    if c == "0" then return "num", stack, "0" end
    if c:find("^%d") then return "num", stack, "int" end
    if LITERAL[c] then return "lit", stack, LITERAL[c] end
end

-- Number parts: - | 0 | int | . | frac | e | esign | exp, the grammar -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
local NUMBER_NEXT = {
    ["-"] = { digit = "int", zero = "0" }, ["0"] = { dot = ".", e = "e" }, int = { digit = "int", zero = "int",
    dot = ".", e = "e" }, ["."] = { digit = "frac", zero = "frac" }, frac = { digit = "frac", zero = "frac", e = "e" },
    e = { digit = "exp", zero = "exp", sign = "esign" }, esign = { digit = "exp", zero = "exp" },
    exp = { digit = "exp", zero = "exp" },
}
local NUMBER_DONE = { ["0"] = true, int = true, frac = true, exp = true }

step = function(mode, stack, aux, c)
    if mode == "value" then
        if WS[c] then return mode, stack, aux end
        if c == "]" and aux == "first" then return "after", stack:sub(1, -2), "" end
        return begin_value(c, stack)
    elseif mode == "key" then
        if WS[c] then return mode, stack, aux end
        if c == '"' then return "str", stack, "k" end
        if c == "}" and aux == "first" then return "after", stack:sub(1, -2), "" end
    elseif mode == "colon" then
        if WS[c] then return mode, stack, aux end
        if c == ":" then return "value", stack, "" end
    elseif mode == "after" then   -- after a value: with an empty stack only whitespace may follow
        if WS[c] then return mode, stack, aux end
        local top = stack:sub(-1)
        if c == "," and top == "{" then return "key", stack, "" end
        if c == "," and top == "[" then return "value", stack, "" end
        if (c == "}" and top == "{") or (c == "]" and top == "[") then return "after", stack:sub(1, -2), "" end
    elseif mode == "str" then
        if c == '"' then return aux == "k" and "colon" or "after", stack, "" end
        if c == "\\" then return "esc", stack, aux end
        if c:byte() >= 32 then return mode, stack, aux end
    elseif mode == "esc" then
        if ESCAPE[c] then return "str", stack, aux end
        if c == "u" then return "hex", stack, aux .. "4" end
    elseif mode == "hex" then
        if c:find("^%x") then
            local left = tonumber(aux:sub(2)) - 1
            if left == 0 then return "str", stack, aux:sub(1, 1) end
            return mode, stack, aux:sub(1, 1) .. left
        end
    elseif mode == "num" then
        local class = c == "0" and "zero" or c:find("^%d") and "digit" or c == "." and "dot" or
                      (c == "e" or c == "E") and "e" or (c == "+" or c == "-") and "sign" or nil
        local next_part = class and NUMBER_NEXT[aux][class]
        if next_part then return mode, stack, next_part end
        if NUMBER_DONE[aux] then return step("after", stack, "", c) end   -- the number ended before c
    elseif mode == "lit" then
        if c == aux:sub(1, 1) then
            if #aux == 1 then return "after", stack, "" end
            return mode, stack, aux:sub(2)
        end
    end
    return nil
end

-- Feeds text to a state; nil when some byte breaks JSON.
local function feed(mode, stack, aux, text)
    for i = 1, #text do
        mode, stack, aux = step(mode, stack, aux, text:sub(i, i))
        if not mode then return nil end
    end
    return mode, stack, aux
end

local function new_policy(opts)
    local tok = opts.tokenizer or error("json policy: needs a tokenizer (glm53 generate passes the checkpoint's, or --tokenizer FILE)", 2)
    local mode, stack, aux = "value", "", ""
    local pieces = {}    -- id -> bytes, or false for special tokens and ids without a token
    local weights, index = {}, {}
    local function piece(id)
        local p = pieces[id]
        if p == nil then
            p = not tok:is_special(id) and tok:piece(id) or false
            pieces[id] = p
        end
        return p
    end
    return function(cand)
        if mode == "after" and stack == "" then return nil, "JSON value complete" end
        local n = 0
        for i = 0, cand.n - 1 do
            local text = piece(cand.ids[i])
            if text and #text > 0 and feed(mode, stack, aux, text) then
                n = n + 1
                weights[n], index[n] = cand.probs[i], i
            end
        end
        if n == 0 then return nil, "no candidate keeps the output valid JSON" end
        for i = #weights, n + 1, -1 do weights[i], index[i] = nil, nil end
        local id = cand.ids[index[sampler.categorical(weights, cand.sampler:uniform())]]
        mode, stack, aux = feed(mode, stack, aux, piece(id))
        return id
    end
end

-- Calling the module makes a policy; json.prefix(text) exposes the automaton (for tests): whether text is a prefix
-- of a JSON value, and whether that value is complete.
return setmetatable({
    prefix = function(text)
        local mode, stack = feed("value", "", "", text)
        return mode ~= nil, mode == "after" and stack == ""
    end,
}, { __call = function(_, opts) return new_policy(opts) end })
