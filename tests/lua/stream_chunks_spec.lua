-- The server's streamed chunks of plain deltas (glm53.server.routes_openai's text_chunk and delta_chunk, built
-- from the request's fixed parts) are byte for byte what the generic path writes: sse.event of the chunk object
-- encoded by glm53.chat.json. And the detokeniser's ASCII fast path gives what decode gives.
local json = require("glm53.chat.json")
local sse = require("glm53.server.sse")
local routes = require("glm53.server.routes_openai")
local null, array = json.null, json.array

local function generic(object, id, created, model, choice)
    return sse.event(json.encode({ id = id, object = object, created = created, model = model,
                                   choices = array({ choice }) }, { compact = true }))
end

local TEXTS = { "", "hello", " world", "a\"b\\c\n\r\t\1\31\127", "é漢字\u{2028}\u{2029}", "</script>",
                string.char(200, 201), "data: x\n\ndata: y" }
do   -- random bytes, every value 0-255 likely somewhere
    local state = 12345
    for _ = 1, 200 do
        local bytes = {}
        for j = 1, state % 13 do
            state = (state * 1103515245 + 12345) % 2147483648
            bytes[j] = string.char(state % 256)
        end
        TEXTS[#TEXTS + 1] = table.concat(bytes)
    end
end

describe("streamed chunks of plain deltas", function()
    it("completions: text_chunk equals the encoded chunk", function()
        for _, model in ipairs({ "tiny", "glm53-tiny", "a\"model" }) do
            local tail = routes.chunk_tail("cmpl-0a1b", 1733390000, model, "text_completion")
            for _, index in ipairs({ 0, 1, 17 }) do
                for _, text in ipairs(TEXTS) do
                    assert.are.equal(generic("text_completion", "cmpl-0a1b", 1733390000, model,
                                             { index = index, text = text, logprobs = null, finish_reason = null }),
                                     routes.text_chunk(tail, index, text))
                end
            end
        end
    end)

    it("chat: delta_chunk equals the encoded chunk (content, reasoning, both)", function()
        local tail = routes.chunk_tail("chatcmpl-0a1b", 1733390000, "tiny", "chat.completion.chunk")
        for _, index in ipairs({ 0, 5 }) do
            for _, text in ipairs(TEXTS) do
                for _, pair in ipairs({ { text, nil }, { nil, text }, { text, "r" .. text } }) do
                    local delta = { content = pair[1], reasoning_content = pair[2] }
                    assert.are.equal(generic("chat.completion.chunk", "chatcmpl-0a1b", 1733390000, "tiny",
                                             { index = index, finish_reason = null, logprobs = null, delta = delta }),
                                     routes.delta_chunk(tail, index, pair[1], pair[2]))
                end
            end
        end
    end)
end)

describe("the streaming detokeniser", function()
    it("gives decode's text for every id, pushed one by one, with and without special tokens", function()
        local tokenizer = require("glm53.engine.tokenizer")
        local tok = assert(tokenizer.load("models/tiny/tokenizer.json"))
        local ids = {}
        for i = 1, 3000 do ids[i] = (i * 7919 + 13) % tok:n_vocab() end
        for _, skip in ipairs({ false, true }) do
            local s, parts = tok:stream({ skip_special_tokens = skip }), {}
            for _, id in ipairs(ids) do parts[#parts + 1] = assert(s:push(id)) end
            parts[#parts + 1] = s:finish()
            assert.are.equal(tok:decode(ids, { skip_special_tokens = skip }), table.concat(parts))
        end
        tok:free()
    end)
end)
