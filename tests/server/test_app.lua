-- A --script for the server's black-box tests: the "script" policy writes a given text (its tokens, one per
-- step) and then ends the sequence, so tests can drive tool calls and stop strings through a random-weight model.
--   "policy": {"name": "script", "text": "...</think><tool_call>get_weather<arg_key>city</arg_key>..."}
return function(app)
    app:policy("script", function(opts)
        local ids = opts.tokenizer and opts.text and assert(opts.tokenizer:encode(opts.text)) or {}
        local i = 0
        return function()
            i = i + 1
            if ids[i] == nil then return nil, "script done" end
            return ids[i]
        end
    end)
end
