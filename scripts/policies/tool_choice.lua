--[[
tool_choice.lua - a tool call the request asked for: OpenAI's tool_choice "required" or {"type": "function",
"function": {"name": N}}, Anthropic's {"type": "any"} or {"type": "tool", "name": N}. The server sets it for those
fields (docs/server.md); it runs like any policy:

    "policy": {"name": "tool_choice", "names": ["get_weather", "get_time"]}

The model reasons as it likes while the prompt's <think> block is open (a special token other than </think> there
becomes </think>, so the answer always comes), then the answer starts with <tool_call> and a function name that
the model spells token by token among opts.names: a candidate is kept when the name stays a prefix of an allowed
one, and <arg_key> or </tool_call> once it is a whole one. The arguments and what follows are the model's own (the
chat template's format: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>).

Every pick is among the candidates the sampler passed (its filters applied): the most likely kept one for greedy
requests, else drawn by probability from the seeded stream. When none of them fits the name, the next token of the
first allowed name that does is taken (as the tokenizer splits the rest of that name).
opts: tokenizer (required), names (the allowed function names, at least one), thinking (false when the prompt
closed the think block already: the call comes first; default true).
]]
local sampler = require("glm53.engine.sampler")

return function(opts)
    local tok = opts.tokenizer or error("tool_choice policy: needs a tokenizer", 2)
    local names = opts.names
    if type(names) ~= "table" or #names == 0 then error("tool_choice policy: names must list at least one function", 2) end
    for _, n in ipairs(names) do
        if type(n) ~= "string" or n == "" then error("tool_choice policy: a function name must be a non-empty string", 2) end
    end
    local function special(s) return tok:token_id(s) or error("tool_choice policy: the tokenizer has no " .. s, 2) end
    local THINK_END, CALL, ARG_KEY, CALL_END = special("</think>"), special("<tool_call>"), special("<arg_key>"),
                                               special("</tool_call>")
    local state = opts.thinking == false and "call" or "thinking"   -- thinking -> call -> name -> free
    local name = ""          -- the function name so far
    local weights, index = {}, {}

    local function allowed_with_prefix(s)
        for _, n in ipairs(names) do if n:sub(1, #s) == s then return n end end
    end
    local function allowed(s)
        for _, n in ipairs(names) do if n == s then return true end end
        return false
    end
    -- One of the n kept candidates (weights[1..n], index[1..n]): the first for greedy requests, else drawn.
    local function choose(cand, n)
        if n == 1 or cand.sampler:greedy() then return cand.ids[index[1]] end
        for i = #weights, n + 1, -1 do weights[i], index[i] = nil, nil end
        return cand.ids[index[sampler.categorical(weights, cand.sampler:uniform())]]
    end
    local function model_pick(cand)
        for i = 0, cand.n - 1 do weights[i + 1], index[i + 1] = cand.probs[i], i end
        return choose(cand, cand.n)
    end

    return function(cand)
        if state == "thinking" then
            local id = model_pick(cand)
            if id ~= THINK_END and tok:is_special(id) then id = THINK_END end   -- no end of turn before the call
            if id == THINK_END then state = "call" end
            return id
        elseif state == "call" then
            state = "name"
            return CALL
        elseif state == "name" then
            local n = 0
            for i = 0, cand.n - 1 do
                local id, fits = cand.ids[i], false
                if id == ARG_KEY or id == CALL_END then
                    fits = allowed(name)
                elseif not tok:is_special(id) then
                    local piece = tok:piece(id)
                    fits = piece ~= nil and #piece > 0 and allowed_with_prefix(name .. piece) ~= nil
                end
                if fits then
                    n = n + 1
                    weights[n], index[n] = cand.probs[i], i
                end
            end
            local id
            if n > 0 then
                id = choose(cand, n)
            else
                local target = allowed_with_prefix(name)   -- name is always a prefix of an allowed one
                id = target == name and ARG_KEY or tok:encode(target:sub(#name + 1))[1]
            end
            if id == ARG_KEY or id == CALL_END then state = "free" else name = name .. tok:piece(id) end
            return id
        end
        return model_pick(cand)
    end
end
