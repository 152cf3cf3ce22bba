-- The server (scripts/serve.lua, glm53.server) black-box, as a child process on an ephemeral loopback port with
-- models/tiny (the random-weight test model, named explicitly: the default is models/glm53-tiny, checked by the
-- SIGTERM test below; tests/lua/server_clients_spec.lua runs the npm clients against the default): routes and wire
-- formats through curl; greedy and seeded outputs against scripts/generate.lua (token ids); stop strings split
-- across tokens, streamed and not; logprobs, echo and prompt logprobs; n; tool calls and reasoning (driven by a
-- scripted policy, tests/server/test_app.lua); Anthropic messages; OpenAI Responses; images; speculative decoding;
-- JSON mode, forced tool calls, continue_final_message, min_tokens, CORS; the routed experts
-- and indexer selections of research capture against an in-process run; every bad input with its 4xx JSON error and
-- a normal request after it; the API key; the queue limit; disconnects mid-stream; prefix-cache hits. (/health
-- during a long prefill: server_load_spec.)
local cjson = require("cjson")
local uv = require("luv")
local H = require("server_helpers")
local h = require("spec_helpers")

local USER = { { role = "user", content = "Tell me about the weather." } }
local SYSTEM = { { role = "system", content = "You are a helpful assistant who answers briefly." },
                 { role = "user", content = "hi there" } }

local function chat(srv, body) return H.post(srv, "/v1/chat/completions", body) end

local function ids_csv(list) return table.concat(list, ",") end

-- Each body, sent to the chat route, gets a 400 whose error names param.
local function refused(srv, bodies, param)
    for _, body in ipairs(bodies) do
        local e = chat(srv, body)
        assert.are.equal(400, e.status, e.body)
        assert.are.equal(param, e.json.error.param, e.body)
    end
end

local function tokenize_messages(srv, messages)
    local r = H.post(srv, "/tokenize", { messages = messages })
    assert.are.equal(200, r.status, r.body)
    return r.json.tokens
end

-- Runs the luv loop until fn(done) calls done() or `seconds` pass.
local function loop(seconds, fn)
    uv.update_time()   -- the loop's clock is stale after the blocking curl calls: timers would fire at once
    local finished = false
    local guard = uv.new_timer()
    guard:start(seconds * 1000, 0, function() uv.stop() end)
    fn(function() finished = true; uv.stop() end)
    uv.run()
    guard:close()
    uv.walk(function(h) if not h:is_closing() then h:close() end end)
    uv.run()
    assert.is_true(finished, "timed out after " .. seconds .. " s")
end

describe("server", function()
    local srv, stops
    setup(function()
        srv = H.start({ "--model", "models/tiny", "--script", "tests/server/test_app.lua", "--max-model-len", "8192" })
        stops = "768,775,777"   -- the tiny tokenizer's <|endoftext|>, <|user|>, <|observation|>
    end)
    teardown(function() srv.stop() end)

    it("answers /health, /ping, /version, /v1/models, GET / and /metrics", function()
        local r = H.request(srv, "GET", "/health")
        assert.are.equal(200, r.status)
        assert.are.same({ status = "ok" }, r.json)
        for _, method in ipairs({ "GET", "POST" }) do
            assert.are.same({ status = "ok" }, H.request(srv, method, "/ping").json)
        end
        assert.matches("^%d+%.%d+%.%d+", H.request(srv, "GET", "/version").json.version)
        r = H.request(srv, "GET", "/v1/models")
        assert.are.equal("list", r.json.object)
        assert.are.equal("tiny", r.json.data[1].id)
        assert.are.equal(200, H.request(srv, "GET", "/v1/models/tiny").status)
        assert.are.equal(404, H.request(srv, "GET", "/v1/models/other").status)
        r = H.request(srv, "GET", "/")
        assert.are.equal(200, r.status)
        assert.matches("text/html", r.headers["content-type"])
        assert.matches("<title>glm53 chat</title>", r.body, 1, true)
        r = H.request(srv, "GET", "/metrics")
        assert.matches("text/plain; version=0.0.4", r.headers["content-type"], 1, true)
        for _, name in ipairs({ "vllm:num_requests_running", "vllm:num_requests_waiting",
                                "vllm:time_to_first_token_seconds_bucket", "vllm:time_per_output_token_seconds_count",
                                "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                                "vllm:spec_decode_num_drafts_total", "vllm:prefix_cache_hits_total" }) do
            assert.matches(name, r.body, 1, true)
        end
    end)

    it("greedy chat output equals scripts/generate.lua's for the same prompt ids, streamed or not", function()
        for _, messages in ipairs({ USER, SYSTEM, SYSTEM }) do   -- the repeat is served from the prefix cache
            local ids = tokenize_messages(srv, messages)
            local r = chat(srv, { messages = messages, max_tokens = 40, temperature = 0, return_token_ids = true })
            assert.are.equal(200, r.status, r.body)
            local ref = H.generate("--model models/tiny --tokens " .. ids_csv(ids) .. " --max-tokens 40 --stop-ids " .. stops)
            assert.are.same(ref.ids, r.json.choices[1].token_ids)
            assert.are.same(ids, r.json.prompt_token_ids)
            assert.are.equal(#ids, r.json.usage.prompt_tokens)
            assert.are.equal(#ref.ids, r.json.usage.completion_tokens)
            -- the same request streamed: deltas add up to the message
            local s = chat(srv, { messages = messages, max_tokens = 40, temperature = 0, stream = true,
                                  stream_options = { include_usage = true } })
            assert.matches("text/event-stream", s.headers["content-type"], 1, true)
            local datas = H.sse(s.body)
            assert.are.equal("[DONE]", datas[#datas])
            local reasoning, content, finish, usage = {}, {}, nil, nil
            for i = 1, #datas - 1 do
                local c = cjson.decode(datas[i])
                assert.are.equal("chat.completion.chunk", c.object)
                if c.usage then usage = c.usage end
                for _, ch in ipairs(c.choices) do
                    reasoning[#reasoning + 1] = ch.delta.reasoning_content
                    content[#content + 1] = ch.delta.content
                    if ch.finish_reason ~= cjson.null then finish = ch.finish_reason end
                end
            end
            local msg = r.json.choices[1].message
            assert.are.equal(msg.reasoning_content == cjson.null and "" or msg.reasoning_content, table.concat(reasoning))
            assert.are.equal(msg.content == cjson.null and "" or msg.content, table.concat(content))
            assert.are.equal(r.json.choices[1].finish_reason, finish)
            assert.are.same(r.json.usage, usage)
        end
        local m = H.metrics(srv)
        assert.is_true(H.metric(m, "vllm:prefix_cache_hits_total") > 0, "the repeated system prompt hit the cache")
    end)

    it("seeded sampling equals scripts/generate.lua --seed with the same options; n > 1 uses seed + i", function()
        local ids = tokenize_messages(srv, USER)
        local body = { messages = USER, max_tokens = 30, temperature = 0.8, top_p = 0.9, top_k = 20, min_p = 0.01,
                       presence_penalty = 0.5, frequency_penalty = 0.2, repetition_penalty = 1.1, seed = 7,
                       return_token_ids = true, n = 3 }
        local r = chat(srv, body)
        assert.are.equal(200, r.status, r.body)
        assert.are.equal(3, #r.json.choices)
        for i = 1, 3 do
            local ref = H.generate("--model models/tiny --tokens " .. ids_csv(ids) .. " --max-tokens 30 --stop-ids " ..
                                   stops .. " --temperature 0.8 --top-p 0.9 --top-k 20 --min-p 0.01 " ..
                                   "--presence-penalty 0.5 --frequency-penalty 0.2 --repetition-penalty 1.1 --seed " ..
                                   (7 + i - 1))
            assert.are.same(ref.ids, r.json.choices[i].token_ids, "choice " .. i)
        end
        -- a Lua policy by name, seeded, equals generate.lua --policy
        r = chat(srv, { messages = USER, max_tokens = 20, seed = 3, policy = { name = "typical", mass = 0.9 },
                        return_token_ids = true })
        local ref = H.generate("--model models/tiny --tokens " .. ids_csv(ids) .. " --max-tokens 20 --stop-ids " .. stops ..
                               " --seed 3 --policy typical --policy-opt mass=0.9")
        assert.are.same(ref.ids, r.json.choices[1].token_ids)
    end)

    it("JSON mode (response_format json_object, or the json policy): the content is JSON, streamed or not", function()
        local json_policy = dofile("scripts/policies/json.lua")
        local body = { messages = USER, max_tokens = 40, seed = 5, response_format = { type = "json_object" } }
        local r = chat(srv, body)
        assert.are.equal(200, r.status, r.body)
        local msg, choice = r.json.choices[1].message, r.json.choices[1]
        -- without a thinking block: the value is the content, none of it reasoning
        assert.is_string(msg.content, r.body)
        assert.are.equal(cjson.null, msg.reasoning_content, r.body)
        local is_prefix, complete = json_policy.prefix(msg.content)
        assert.is_true(is_prefix, msg.content)
        -- the policy ends the output when the value is complete, or when none of the candidates it sees keeps the
        -- text JSON (random weights: it happens), each with its reason
        if choice.finish_reason == "stop" then
            assert.are.equal(complete, choice.stop_reason == "JSON value complete", r.body)
        else
            assert.are.equal("length", choice.finish_reason, r.body)
        end
        -- streamed, the same seed: the deltas add up to the same content
        body.stream = true
        local sr = H.post(srv, "/v1/chat/completions", body)
        assert.are.equal(200, sr.status, sr.body)
        local text = {}
        for data in sr.body:gmatch("data: (%b{})") do
            local delta = cjson.decode(data).choices[1].delta
            assert.is_nil(delta.reasoning_content, data)
            text[#text + 1] = type(delta.content) == "string" and delta.content or nil
        end
        assert.are.equal(msg.content, table.concat(text))
        -- the policy by name, as a request field
        r = chat(srv, { messages = USER, max_tokens = 40, seed = 5, policy = "json" })
        assert.are.equal(200, r.status, r.body)
        msg = r.json.choices[1].message
        local out = {}   -- with thinking on, the value may be parsed as reasoning: both fields, in order
        for _, field in ipairs({ "reasoning_content", "content" }) do
            if type(msg[field]) == "string" then out[#out + 1] = msg[field] end
        end
        assert.is_true(json_policy.prefix(table.concat(out)), r.body)
    end)

    it("min_tokens holds back the stop ids and stop strings, equal to generate.lua --min-tokens", function()
        local ids = tokenize_messages(srv, USER)
        local base = chat(srv, { messages = USER, max_tokens = 30, temperature = 0, return_token_ids = true })
        assert.are.equal(200, base.status, base.body)
        local third = base.json.choices[1].token_ids[3]
        for _, min in ipairs({ 0, 2, 6 }) do
            -- the third greedy token as a stop id: it ends the output at once unless min_tokens holds it back
            local r = chat(srv, { messages = USER, max_tokens = 30, temperature = 0, return_token_ids = true,
                                  stop_token_ids = { third }, min_tokens = min })
            assert.are.equal(200, r.status, r.body)
            local got = r.json.choices[1].token_ids
            local ref = H.generate("--model models/tiny --tokens " .. ids_csv(ids) .. " --max-tokens 30 --stop-ids " ..
                                   stops .. "," .. third .. " --min-tokens " .. min)
            assert.are.same(ref.ids, got, "min_tokens " .. min)
            if min < 3 then assert.are.equal(3, #got) else assert.is_true(#got > 3 and got[3] ~= third) end
        end
        -- a stop string is looked for after the first min_tokens tokens only
        local function out(r)
            local m = r.json.choices[1].message
            return (type(m.reasoning_content) == "string" and m.reasoning_content or "") ..
                   (type(m.content) == "string" and m.content or "")
        end
        local char = out(base):match("[%a]", 2)
        local without = chat(srv, { messages = USER, max_tokens = 30, temperature = 0, stop = { char } })
        local with = chat(srv, { messages = USER, max_tokens = 30, temperature = 0, stop = { char }, min_tokens = 25 })
        assert.is_true(#out(with) > #out(without), out(with) .. " | " .. out(without))
        refused(srv, { { messages = USER, max_tokens = 5, min_tokens = 6 } }, "min_tokens")
    end)

    it("Responses API: greedy output equals generate.lua's; instructions, items, JSON mode, images", function()
        -- instructions + a user message item = a system and a user message on the chat route
        local as_chat = { { role = "system", content = "Answer briefly." }, USER[1] }
        local ids = tokenize_messages(srv, as_chat)
        local ref = H.generate("--model models/tiny --tokens " .. ids_csv(ids) .. " --max-tokens 20 --stop-ids " .. stops)
        local r = H.post(srv, "/v1/responses", { instructions = "Answer briefly.", max_output_tokens = 20,
                                                 temperature = 0,
                                                 input = { { role = "user", content = { { type = "input_text",
                                                             text = USER[1].content } } } } })
        assert.are.equal(200, r.status, r.body)
        local c = chat(srv, { messages = as_chat, max_tokens = 20, temperature = 0, return_token_ids = true })
        assert.are.same(ref.ids, c.json.choices[1].token_ids)
        assert.are.equal(#ref.ids, r.json.usage.output_tokens)
        assert.are.equal(#ids, r.json.usage.input_tokens)
        local text = {}
        for _, item in ipairs(r.json.output) do
            if item.type == "reasoning" then text[#text + 1] = item.content[1].text end
            if item.type == "message" then text[#text + 1] = item.content[1].text end
        end
        local m = c.json.choices[1].message
        local want = (type(m.reasoning_content) == "string" and m.reasoning_content or "") ..
                     (type(m.content) == "string" and m.content or "")
        assert.are.equal(want, table.concat(text))
        assert.are.equal(r.json.status, c.json.choices[1].finish_reason == "length" and "incomplete" or "completed")
        -- JSON mode: the message is a JSON prefix
        local j = H.post(srv, "/v1/responses", { input = "A JSON object, please.", max_output_tokens = 30, seed = 5,
                                                 text = { format = { type = "json_object" } } })
        assert.are.equal(200, j.status, j.body)
        assert.are.equal("message", j.json.output[1].type, j.body)
        assert.is_true(dofile("scripts/policies/json.lua").prefix(j.json.output[1].content[1].text), j.body)
        -- an image part reaches the model: another answer than without it (tests/fixtures/vision's image)
        local f = assert(io.open("tests/fixtures/vision/images/aligned_rgb.png", "rb"))
        local png = f:read("*a")
        f:close()
        local url = "data:image/png;base64," .. require("glm53.util.base64").encode(png)
        local with = H.post(srv, "/v1/responses", { max_output_tokens = 1, temperature = 0,
            input = { { role = "user", content = { { type = "input_image", image_url = url },
                                                   { type = "input_text", text = "What is this?" } } } } })
        assert.are.equal(200, with.status, with.body)
        assert.is_true(with.json.usage.input_tokens > 20, with.body)   -- the image's placeholder rows
    end)

    it("continue_final_message continues the assistant's message as content, equal to generate.lua", function()
        local messages = { { role = "user", content = "Count to five." }, { role = "assistant", content = "1, 2," } }
        local t = H.post(srv, "/tokenize", { messages = messages, add_generation_prompt = false })
        assert.are.equal(200, t.status, t.body)
        for _, body in ipairs({ { continue_final_message = true }, { add_generation_prompt = false } }) do
            body.messages, body.max_tokens, body.temperature, body.return_token_ids = messages, 12, 0, true
            local r = chat(srv, body)
            assert.are.equal(200, r.status, r.body)
            assert.are.same(t.json.tokens, r.json.prompt_token_ids)
            local ref = H.generate("--model models/tiny --tokens " .. ids_csv(t.json.tokens) .. " --max-tokens 12 " ..
                                   "--stop-ids " .. stops)
            assert.are.same(ref.ids, r.json.choices[1].token_ids)
            -- the template left the think block closed: the continuation is content, none of it reasoning
            assert.are.equal(cjson.null, r.json.choices[1].message.reasoning_content, r.body)
        end
        refused(srv, { { messages = messages, continue_final_message = true, add_generation_prompt = true },
                       { messages = USER, continue_final_message = true } }, "continue_final_message")
    end)

    it("tool_choice required or a named function forces a call to one of the tools (OpenAI and Anthropic)", function()
        local function tool(name)
            return { type = "function", ["function"] = { name = name, parameters = { type = "object",
                     properties = { city = { type = "string" } } } } }
        end
        local tools = { tool("get_weather"), tool("get_time") }
        -- The generated text, special tokens included. Random weights: the arguments after the name are noise
        -- and may not close the call, so the text is checked rather than the parsed tool_calls.
        local function generated(ids)
            local r = H.post(srv, "/detokenize", { tokens = ids })
            assert.are.equal(200, r.status, r.body)
            return r.json.prompt
        end
        local function called(text)
            return text:match("^<tool_call>([%w_]+)<arg_key>") or text:match("^<tool_call>([%w_]+)</tool_call>")
        end
        local no_thinking = { enable_thinking = false }   -- the call comes first (else after </think>)
        for _, case in ipairs({ { choice = { type = "function", ["function"] = { name = "get_time" } }, names = { get_time = true } },
                                { choice = "required", names = { get_weather = true, get_time = true } } }) do
            for _, seed in ipairs({ 1, 2, 3 }) do
                local r = chat(srv, { messages = USER, tools = tools, tool_choice = case.choice, max_tokens = 24,
                                      temperature = 1, seed = seed, chat_template_kwargs = no_thinking,
                                      return_token_ids = true })
                assert.are.equal(200, r.status, r.body)
                local text = generated(r.json.choices[1].token_ids)
                assert.is_true(case.names[called(text) or ""] ~= nil, text)
            end
        end
        -- with thinking on, the call follows the reasoning
        local r = chat(srv, { messages = USER, tools = tools, tool_choice = "required", max_tokens = 400, seed = 4,
                              return_token_ids = true })
        assert.are.equal(200, r.status, r.body)
        local text = generated(r.json.choices[1].token_ids)
        local after = text:match("</think>(.*)$")
        assert.is_string(after, text)
        assert.is_string(called(after), text)
        -- Anthropic: {"type": "tool", "name": N} (thinking is off unless asked for)
        local a = H.post(srv, "/v1/messages", { model = "tiny", max_tokens = 24, messages = USER,
                                               tools = { { name = "get_weather", input_schema = { type = "object" } },
                                                         { name = "get_time", input_schema = { type = "object" } } },
                                               tool_choice = { type = "tool", name = "get_weather" },
                                               return_token_ids = true })
        assert.are.equal(200, a.status, a.body)
        -- the call as a parsed tool_use block when the noise closed it, else the raw text
        local block = a.json.content[1]
        if block.type == "tool_use" then
            assert.are.equal("get_weather", block.name)
        else
            assert.matches("^<tool_call>get_weather", block.text)
        end
        -- the request errors
        refused(srv, { { messages = USER, tool_choice = "required" },
                       { messages = USER, tools = tools, tool_choice = { type = "function", ["function"] = { name = "nope" } } },
                       { messages = USER, tools = tools, tool_choice = 5 },
                       { messages = USER, tools = tools, tool_choice = "required", policy = "typical" } }, "tool_choice")
    end)

    it("speculative decoding (MTP drafts, fixed or adaptive) keeps the greedy output and counts drafts", function()
        local base = chat(srv, { messages = USER, max_tokens = 30, temperature = 0, return_token_ids = true })
        local before = H.metric(H.metrics(srv), "vllm:spec_decode_num_drafts_total")
        for _, spec in ipairs({ 3, { k = 4, draft = "threshold", threshold = 0.0 }, { k = 2, draft = "adaptive" },
                                { k = 3, draft = "budget", budget = 4 } }) do
            local r = chat(srv, { messages = USER, max_tokens = 30, temperature = 0, return_token_ids = true,
                                  speculative = spec })
            assert.are.equal(200, r.status, r.body)
            assert.are.same(base.json.choices[1].token_ids, r.json.choices[1].token_ids)
        end
        assert.is_true(H.metric(H.metrics(srv), "vllm:spec_decode_num_drafts_total") > before)
    end)

    it("return_routed_experts / return_indexer_topk equal an in-process run of the same prompt with capture", function()
        local m = assert(require("glm53.engine.model").load("models/tiny", { threads = 1 }))
        local capture = { return_routed_experts = true, return_indexer_topk = true, return_token_ids = true,
                          temperature = 0, max_tokens = 12 }
        local function with(fields)
            local body = {}
            for k, v in pairs(capture) do body[k] = v end
            for k, v in pairs(fields) do body[k] = v end
            return body
        end
        -- chat (SYSTEM's prompt is in the prefix cache by now: the request forks it into a capturing sequence),
        -- plain and speculative, then streamed: the choice's last chunk carries both lists
        local hits = H.metric(H.metrics(srv), "vllm:prefix_cache_hits_total")
        for _, speculative in ipairs({ 0, 2 }) do
            local r = chat(srv, with({ messages = SYSTEM, speculative = speculative }))
            assert.are.equal(200, r.status, r.body)
            local ch = r.json.choices[1]
            local experts, selection = h.capture_reference(m, r.json.prompt_token_ids, ch.token_ids)
            assert.are.equal(#ch.token_ids, #ch.routed_experts)
            assert.are.same(experts, ch.routed_experts)
            assert.are.same(selection, ch.indexer_topk)
            assert.are.equal(3, #ch.routed_experts[1])      -- models/tiny: 3 MoE layers of top-2 routing
            assert.are.equal(2, #ch.routed_experts[1][1])
            assert.are.equal(1, #ch.indexer_topk[1])        -- and one sparse layer
        end
        assert.is_true(H.metric(H.metrics(srv), "vllm:prefix_cache_hits_total") > hits)
        local s = chat(srv, with({ messages = USER, stream = true }))
        local last
        for _, d in ipairs(H.sse(s.body)) do
            if d ~= "[DONE]" then
                for _, c in ipairs(cjson.decode(d).choices) do
                    if c.routed_experts then
                        assert.is_nil(last, "only the finish chunk carries them")
                        last = c
                    end
                end
            end
        end
        assert.are.equal("length", last.finish_reason)
        local plain = chat(srv, with({ messages = USER }))
        local experts, selection = h.capture_reference(m, plain.json.prompt_token_ids, plain.json.choices[1].token_ids)
        assert.are.same(experts, last.routed_experts)
        assert.are.same(selection, last.indexer_topk)
        -- completions: a prompt of ids, only the routed experts asked for
        local prompt_ids = { 5, 6, 7, 8, 9, 10, 11 }
        local c = H.post(srv, "/v1/completions", with({ prompt = prompt_ids, return_indexer_topk = false }))
        assert.are.equal(200, c.status, c.body)
        experts = h.capture_reference(m, prompt_ids, c.json.choices[1].token_ids)
        assert.are.same(experts, c.json.choices[1].routed_experts)
        assert.is_nil(c.json.choices[1].indexer_topk)
        -- off by default, and a boolean
        assert.is_nil(chat(srv, { messages = USER, max_tokens = 2 }).json.choices[1].routed_experts)
        assert.are.equal(400, chat(srv, { messages = USER, return_routed_experts = "yes" }).status)
        m:free()
    end)

    it("completions: text, echo with prompt logprobs, max_tokens = 0, a list of prompts", function()
        local r = H.post(srv, "/v1/completions", { prompt = "The weather today", max_tokens = 8, temperature = 0,
                                                   logprobs = 2, echo = true })
        assert.are.equal(200, r.status, r.body)
        local ch = r.json.choices[1]
        assert.are.equal("text_completion", r.json.object)
        assert.are.equal("The weather today", ch.text:sub(1, 17))
        local lp = ch.logprobs
        local n_prompt = r.json.usage.prompt_tokens
        assert.are.equal(n_prompt + r.json.usage.completion_tokens, #lp.tokens)
        assert.are.equal(cjson.null, lp.token_logprobs[1])
        assert.are.equal(cjson.null, lp.top_logprobs[1])
        for i = 2, #lp.tokens do
            assert.is_true(lp.token_logprobs[i] <= 0)
            local n = 0
            for _ in pairs(lp.top_logprobs[i]) do n = n + 1 end
            assert.is_true(n >= 1 and n <= 2)
        end
        -- prompt logprobs alone (the loglikelihood eval shape) agree with the echoed ones
        local z = H.post(srv, "/v1/completions", { prompt = "The weather today", max_tokens = 0, echo = true,
                                                   logprobs = 1 })
        assert.are.equal(200, z.status, z.body)
        assert.are.equal(0, z.json.usage.completion_tokens)
        for i = 2, n_prompt do
            assert.is_true(math.abs(z.json.choices[1].logprobs.token_logprobs[i] - lp.token_logprobs[i]) < 1e-9)
        end
        -- greedy with logprobs: each chosen token is its row's best
        local g = H.post(srv, "/v1/completions", { prompt = "The weather today", max_tokens = 6, temperature = 0,
                                                   logprobs = 1 })
        for i, tokv in ipairs(g.json.choices[1].logprobs.tokens) do
            local best = -math.huge
            for _, v in pairs(g.json.choices[1].logprobs.top_logprobs[i]) do best = math.max(best, v) end
            assert.is_true(math.abs(best - g.json.choices[1].logprobs.token_logprobs[i]) < 1e-9, tokv)
        end
        local b = H.post(srv, "/v1/completions", { prompt = { "one", "two", { 5, 6, 7 } }, max_tokens = 3, n = 2,
                                                   temperature = 0.5, seed = 1 })
        assert.are.equal(200, b.status, b.body)
        assert.are.equal(6, #b.json.choices)
        for i, c in ipairs(b.json.choices) do assert.are.equal(i - 1, c.index) end
        -- streamed completion text adds up to the non-streamed one
        local s = H.post(srv, "/v1/completions", { prompt = "The weather today", max_tokens = 8, temperature = 0,
                                                   stream = true })
        local text = {}
        for _, d in ipairs(H.sse(s.body)) do
            if d ~= "[DONE]" then for _, c in ipairs(cjson.decode(d).choices) do text[#text + 1] = c.text end end
        end
        assert.are.equal(ch.text:sub(18), table.concat(text))
    end)

    it("chat logprobs: top_logprobs per token, streamed and not", function()
        local r = chat(srv, { messages = USER, max_tokens = 5, temperature = 0, logprobs = true, top_logprobs = 3 })
        local content = r.json.choices[1].logprobs.content
        assert.are.equal(5, #content)
        for _, e in ipairs(content) do
            assert.are.equal(3, #e.top_logprobs)
            assert.are.equal(e.top_logprobs[1].logprob, e.logprob)
            assert.is_true(type(e.bytes) == "table")
        end
        local s = chat(srv, { messages = USER, max_tokens = 5, temperature = 0, logprobs = true, top_logprobs = 3,
                              stream = true })
        local n = 0
        for _, d in ipairs(H.sse(s.body)) do
            if d ~= "[DONE]" then
                for _, c in ipairs(cjson.decode(d).choices) do
                    if c.logprobs ~= cjson.null then n = n + #c.logprobs.content end
                end
            end
        end
        assert.are.equal(5, n)
    end)

    it("stop strings that span tokens end the output before them, streamed or not, never leaking", function()
        local base = H.post(srv, "/v1/completions", { prompt = "Once upon a time", max_tokens = 40, temperature = 0,
                                                      logprobs = 0 })
        local toks = base.json.choices[1].logprobs.tokens
        local text = base.json.choices[1].text
        -- a stop string made of the end of one token and the start of the next, first found at that seam
        local stop, at
        local offset = 0
        for i = 1, #toks - 1 do
            local a, b = toks[i], toks[i + 1]
            offset = offset + #a
            if #a >= 2 and #b >= 2 and not (a .. b):find("[\128-\255]") then
                local cand = a:sub(-2) .. b:sub(1, 2)
                local first = text:find(cand, 1, true)
                if first == offset - 1 then stop, at = cand, first break end
            end
        end
        assert.is_truthy(stop, "a seam to stop at: " .. text)
        local want = text:sub(1, at - 1)
        local r = H.post(srv, "/v1/completions", { prompt = "Once upon a time", max_tokens = 40, temperature = 0,
                                                   stop = { "never-appears", stop } })
        assert.are.equal(want, r.json.choices[1].text)
        assert.are.equal("stop", r.json.choices[1].finish_reason)
        assert.are.equal(stop, r.json.choices[1].stop_reason)
        local s = H.post(srv, "/v1/completions", { prompt = "Once upon a time", max_tokens = 40, temperature = 0,
                                                   stop = stop, stream = true })
        local parts, finish = {}, nil
        for _, d in ipairs(H.sse(s.body)) do
            if d ~= "[DONE]" then
                for _, c in ipairs(cjson.decode(d).choices) do
                    parts[#parts + 1] = c.text
                    if c.finish_reason ~= cjson.null then finish = c.finish_reason end
                end
            end
        end
        assert.are.equal(want, table.concat(parts))
        assert.are.equal("stop", finish)
        -- include_stop_str_in_output (vLLM's): the text ends with the stop string, streamed or not
        local inc = H.post(srv, "/v1/completions", { prompt = "Once upon a time", max_tokens = 40, temperature = 0,
                                                     stop = stop, include_stop_str_in_output = true })
        assert.are.equal(want .. stop, inc.json.choices[1].text)
        s = H.post(srv, "/v1/completions", { prompt = "Once upon a time", max_tokens = 40, temperature = 0, stop = stop,
                                             include_stop_str_in_output = true, stream = true })
        parts = {}
        for _, d in ipairs(H.sse(s.body)) do
            if d ~= "[DONE]" then
                for _, c in ipairs(cjson.decode(d).choices) do parts[#parts + 1] = c.text end
            end
        end
        assert.are.equal(want .. stop, table.concat(parts))
    end)

    it("reasoning and tool calls are parsed per the chat template, streamed as deltas too", function()
        local tools = { { type = "function", ["function"] = { name = "get_weather", description = "Weather in a city",
            parameters = { type = "object", properties = { city = { type = "string" }, days = { type = "integer" } } } } } }
        local script = "Let me look that up.</think>Checking.<tool_call>get_weather<arg_key>city</arg_key>" ..
                       "<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
        local body = { messages = USER, tools = tools, max_tokens = 100, policy = { name = "script", text = script } }
        local r = chat(srv, body)
        assert.are.equal(200, r.status, r.body)
        local msg = r.json.choices[1].message
        assert.are.equal("Let me look that up.", msg.reasoning_content)
        assert.are.equal("Checking.", msg.content)
        assert.are.equal("tool_calls", r.json.choices[1].finish_reason)
        assert.are.equal("get_weather", msg.tool_calls[1]["function"].name)
        assert.are.same({ city = "Paris", days = 3 }, cjson.decode(msg.tool_calls[1]["function"].arguments))
        assert.matches("^chatcmpl%-tool%-", msg.tool_calls[1].id)
        body.stream = true
        local s = chat(srv, body)
        local reasoning, content, calls, finish = {}, {}, {}, nil
        for _, d in ipairs(H.sse(s.body)) do
            if d ~= "[DONE]" then
                for _, c in ipairs(cjson.decode(d).choices) do
                    reasoning[#reasoning + 1] = c.delta.reasoning_content
                    content[#content + 1] = c.delta.content
                    for _, tc in ipairs(c.delta.tool_calls or {}) do calls[#calls + 1] = tc end
                    if c.finish_reason ~= cjson.null then finish = c.finish_reason end
                end
            end
        end
        assert.are.equal("Let me look that up.", table.concat(reasoning))
        assert.are.equal("Checking.", table.concat(content))
        assert.are.equal(1, #calls)
        assert.are.equal(0, calls[1].index)
        assert.are.equal("tool_calls", finish)
        -- thinking off (chat_template_kwargs.enable_thinking = false): everything is content
        r = chat(srv, { messages = USER, max_tokens = 100, chat_template_kwargs = { enable_thinking = false },
                        policy = { name = "script", text = "Plain answer." } })
        assert.are.equal("Plain answer.", r.json.choices[1].message.content)
        assert.are.equal(cjson.null, r.json.choices[1].message.reasoning_content)
    end)

    it("Anthropic messages: text, thinking and tool_use blocks, streamed as named events", function()
        local base = { model = "tiny", max_tokens = 12, temperature = 0, messages = { { role = "user", content = "hi" } } }
        local r = H.post(srv, "/v1/messages", base)
        assert.are.equal(200, r.status, r.body)
        assert.are.equal("message", r.json.type)
        assert.are.equal("assistant", r.json.role)
        assert.are.equal("text", r.json.content[1].type)
        assert.are.equal("max_tokens", r.json.stop_reason)
        assert.are.equal(12, r.json.usage.output_tokens)
        base.stream = true
        local s = H.post(srv, "/v1/messages", base)
        local datas, names = H.sse(s.body)
        assert.are.equal("message_start", names[1])
        assert.are.equal("message_stop", names[#names])
        local text = {}
        for i, d in ipairs(datas) do
            local ev = cjson.decode(d)
            assert.are.equal(names[i], ev.type)
            if ev.type == "content_block_delta" then text[#text + 1] = ev.delta.text end
        end
        assert.are.equal(r.json.content[1].text, table.concat(text))
        -- thinking and a tool call
        local tools = { { name = "get_weather", description = "Weather", input_schema = { type = "object",
                          properties = { city = { type = "string" } } } } }
        local script = "Thinking it over.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris" ..
                       "</arg_value></tool_call>"
        local t = H.post(srv, "/v1/messages", { model = "tiny", max_tokens = 100, tools = tools,
            thinking = { type = "enabled", budget_tokens = 1024 }, messages = { { role = "user", content = "Weather?" } },
            policy = { name = "script", text = script } })
        assert.are.equal(200, t.status, t.body)
        assert.are.equal("thinking", t.json.content[1].type)
        assert.are.equal("Thinking it over.", t.json.content[1].thinking)
        assert.are.equal("tool_use", t.json.content[2].type)
        assert.are.same({ city = "Paris" }, t.json.content[2].input)
        assert.are.equal("tool_use", t.json.stop_reason)
        -- a conversation with the tool result goes back in
        local follow = H.post(srv, "/v1/messages", { model = "tiny", max_tokens = 5, tools = tools, messages = {
            { role = "user", content = "Weather?" },
            { role = "assistant", content = { { type = "tool_use", id = t.json.content[2].id, name = "get_weather",
                                                input = { city = "Paris" } } } },
            { role = "user", content = { { type = "tool_result", tool_use_id = t.json.content[2].id,
                                           content = "18 C" } } } } })
        assert.are.equal(200, follow.status, follow.body)
        local count = H.post(srv, "/v1/messages/count_tokens", { model = "tiny", messages = { { role = "user",
                                                                                              content = "hi" } } })
        assert.is_true(count.json.input_tokens > 3)
    end)

    it("images in chat messages (data URLs) reach the model", function()
        local function data_url(path)
            return "data:image/png;base64," .. require("glm53.util.base64").encode(H.read_all(path))
        end
        local function ask(path)
            return chat(srv, { max_tokens = 12, temperature = 0, return_token_ids = true, messages = { { role = "user",
                content = { { type = "text", text = "What is this?" },
                            { type = "image_url", image_url = { url = data_url(path) } } } } } })
        end
        local a1, a2 = ask("tests/fixtures/vision/images/aligned_rgb.png"), ask("tests/fixtures/vision/images/aligned_rgb.png")
        local b = ask("tests/fixtures/vision/images/gray.png")
        assert.are.equal(200, a1.status, a1.body)
        assert.are.same(a1.json.choices[1].token_ids, a2.json.choices[1].token_ids)
        assert.are.equal(200, b.status, b.body)
        assert.is_true(a1.json.usage.prompt_tokens > 20)
        assert.are_not.same(a1.json.choices[1].token_ids, b.json.choices[1].token_ids)
    end)

    it("every bad input gets its 4xx JSON error, and the next normal request succeeds", function()
        local ok_body = { messages = USER, max_tokens = 1 }
        local huge = string.rep("word ", 9000)
        local cases = {
            { "POST", "/v1/chat/completions", "{bad json", 400 },
            { "POST", "/v1/chat/completions", "[1, 2]", 400 },
            { "POST", "/v1/chat/completions", "", 400 },
            { "POST", "/v1/chat/completions", string.rep("[", 3000) .. string.rep("]", 3000), 400 },
            { "POST", "/v1/chat/completions", {}, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = "hi" }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = {} }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = { 5 } }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = { { role = 5 } } }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = USER, temperature = "hot" }, 400, "temperature" },
            { "POST", "/v1/chat/completions", { messages = USER, temperature = -1 }, 400, "temperature" },
            { "POST", "/v1/chat/completions", { messages = USER, max_tokens = -5 }, 400, "max_tokens" },
            { "POST", "/v1/chat/completions", { messages = USER, max_tokens = 1.5 }, 400, "max_tokens" },
            { "POST", "/v1/chat/completions", { messages = USER, n = 0 }, 400, "n" },
            { "POST", "/v1/chat/completions", { messages = USER, n = 1000 }, 400, "n" },
            { "POST", "/v1/chat/completions", { messages = USER, top_p = 0 }, 400, "top_p" },
            { "POST", "/v1/chat/completions", { messages = USER, stop = 5 }, 400, "stop" },
            { "POST", "/v1/chat/completions", { messages = USER, stream = "yes" }, 400, "stream" },
            { "POST", "/v1/chat/completions", { messages = USER, top_logprobs = 3 }, 400, "top_logprobs" },
            { "POST", "/v1/chat/completions", { messages = USER, logprobs = true, top_logprobs = 50 }, 400, "top_logprobs" },
            { "POST", "/v1/chat/completions", { messages = USER, logit_bias = { abc = 1 } }, 400, "logit_bias" },
            { "POST", "/v1/chat/completions", { messages = USER, seed = "x" }, 400, "seed" },
            { "POST", "/v1/chat/completions", { messages = USER, policy = "no_such_policy" }, 400, "policy" },
            { "POST", "/v1/chat/completions", { messages = USER, policy = "../etc" }, 400, "policy" },
            { "POST", "/v1/chat/completions", { messages = USER, speculative = 99 }, 400, "speculative" },
            { "POST", "/v1/chat/completions", { messages = USER, speculative = { k = 2, draft = "nope" } }, 400, "speculative" },
            { "POST", "/v1/chat/completions", { messages = USER, tools = { 5 } }, 400, "tools" },
            { "POST", "/v1/chat/completions", { model = "gpt-4", messages = USER }, 404, "model" },
            { "POST", "/v1/chat/completions", { messages = { { role = "user", content = huge } } }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = USER, max_tokens = 9000 }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = { { role = "assistant", content = "",
                tool_calls = { { ["function"] = { name = "f", arguments = "[1]" } } } } } }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = { { role = "user", content = { { type = "image_url",
                image_url = { url = "data:image/png;base64,AAAA" } } } } } }, 400, "messages" },
            { "POST", "/v1/chat/completions", { messages = { { role = "user", content = { { type = "image_url",
                image_url = { url = "http://example.com/a.png" } } } } } }, 400, "messages" },
            { "POST", "/v1/completions", {}, 400, "prompt" },
            { "POST", "/v1/completions", { prompt = {} }, 400, "prompt" },
            { "POST", "/v1/completions", { prompt = { 99999 } }, 400, "prompt" },
            { "POST", "/v1/completions", { prompt = "x", max_tokens = 0 }, 400, "max_tokens" },
            { "POST", "/v1/completions", { prompt = "x", logprobs = 21 }, 400, "logprobs" },
            { "POST", "/v1/responses", {}, 400, "input" },
            { "POST", "/v1/responses", { input = { { type = "web_search_call" } } }, 400, "input" },
            { "POST", "/v1/responses", { input = { { role = "robot", content = "x" } } }, 400, "input" },
            { "POST", "/v1/responses", { input = { { type = "function_call", call_id = "c", name = "f",
                                                      arguments = "[1]" } } }, 400, "input" },
            { "POST", "/v1/responses", { input = "hi", tools = { { type = "web_search" } } }, 400, "tools" },
            { "POST", "/v1/responses", { input = "hi", tool_choice = "required" }, 400, "tool_choice" },
            { "POST", "/v1/responses", { input = "hi", text = { format = { type = "json_schema" } } }, 400, "text" },
            { "POST", "/v1/responses", { input = "hi", previous_response_id = "resp_1" }, 400, "previous_response_id" },
            { "POST", "/v1/responses", { input = "hi", max_output_tokens = 0 }, 400, "max_output_tokens" },
            { "POST", "/v1/messages", { messages = USER }, 400 },
            { "POST", "/v1/messages", "{", 400 },
            { "POST", "/v1/messages", { max_tokens = 5, messages = { { role = "system", content = "x" } } }, 400 },
            { "POST", "/v1/messages", { max_tokens = 5, messages = USER, temperature = 1.5 }, 400 },
            { "POST", "/tokenize", {}, 400, "prompt" },
            { "POST", "/detokenize", { tokens = "x" }, 400, "tokens" },
            { "GET", "/v1/chat/completions", nil, 405 },
            { "DELETE", "/v1/models", nil, 405 },
            { "GET", "/no/such/route", nil, 404 },
            { "POST", "/v1/chat/completions", string.rep("x", 17 * 1024 * 1024), 413 },
        }
        for i, c in ipairs(cases) do
            local r = H.request(srv, c[1], c[2], c[3])
            local what = "case " .. i .. " (" .. c[1] .. " " .. c[2] .. "): " .. tostring(r.body):sub(1, 300)
            assert.are.equal(c[4], r.status, what)
            assert.matches("application/json", r.headers["content-type"] or "", 1, true)
            assert.is_table(r.json, what)
            if c[2]:find("^/v1/messages") and c[4] ~= 413 then
                assert.are.equal("error", r.json.type, what)
                assert.is_string(r.json.error.type, what)
                assert.is_string(r.json.error.message, what)
            else
                assert.is_string(r.json.error.message, what)
                assert.is_string(r.json.error.type, what)
                assert.is_not_nil(r.json.error.param, what)
                assert.is_not_nil(r.json.error.code, what)
                if c[5] then assert.are.equal(c[5], r.json.error.param, what) end
            end
            if c[4] == 405 then assert.is_string(r.headers["allow"], what) end
            local ok = chat(srv, ok_body)
            assert.are.equal(200, ok.status, "after " .. what .. ": " .. ok.body)
        end
        assert.is_true(srv.alive())
    end)

    it("a client that disconnects mid-stream cancels its request and frees its cache", function()
        local before = H.metric(H.metrics(srv), "glm53:requests_aborted_total")
        local base_bytes = H.metric(H.metrics(srv), "glm53:cache_bytes")
        loop(30, function(done)
            local left = 8
            for _ = 1, 8 do
                H.raw(srv.port, "POST", "/v1/chat/completions",
                      { messages = USER, max_tokens = 4000, stream = true, temperature = 1, ignore_eos = true },
                      function(all, c)
                          local events = select(2, all:gsub("data: ", ""))
                          if events >= 3 and not c.closed then
                              c.close()
                              left = left - 1
                              if left == 0 then done() end
                          end
                      end)
            end
        end)
        local m
        for _ = 1, 100 do
            m = H.metrics(srv)
            if H.metric(m, "vllm:num_requests_running") == 0 then break end
            H.sleep(20)
        end
        assert.are.equal(0, H.metric(m, "vllm:num_requests_running"))
        assert.are.equal(before + 8, H.metric(m, "glm53:requests_aborted_total"))
        assert.are.equal(base_bytes, H.metric(m, "glm53:cache_bytes"))
        assert.is_true(srv.alive(), "writes to the closed sockets did not end the server (SIGPIPE)")
        assert.are.equal(200, chat(srv, { messages = USER, max_tokens = 1 }).status)
    end)
end)

describe("server limits", function()
    it("--api-key guards /v1/* (Bearer or x-api-key) and leaves /health open", function()
        local srv = H.start({ "--model", "models/tiny", "--api-key", "sekrit" })
        local body = { messages = USER, max_tokens = 1 }
        local r = chat(srv, body)
        assert.are.equal(401, r.status)
        assert.are.equal("invalid_api_key", r.json.error.code)
        assert.are.equal(401, H.request(srv, "POST", "/v1/chat/completions", body, { Authorization = "Bearer nope" }).status)
        assert.are.equal(200, H.request(srv, "POST", "/v1/chat/completions", body, { Authorization = "Bearer sekrit" }).status)
        assert.are.equal(200, H.request(srv, "POST", "/v1/messages", { max_tokens = 1, messages = USER },
                                        { ["x-api-key"] = "sekrit" }).status)
        local a = H.request(srv, "POST", "/v1/messages", { max_tokens = 1, messages = USER })
        assert.are.equal(401, a.status)
        assert.are.equal("authentication_error", a.json.error.type)
        assert.are.equal(200, H.request(srv, "GET", "/health").status)
        srv.stop()
    end)

    it("CORS: --allowed-origins lists the origins that get Access-Control-Allow-Origin; a preflight is answered", function()
        local srv = H.start({ "--model", "models/tiny", "--allowed-origins", "http://a.example,http://b.example",
                              "--api-key", "sekrit" })
        local preflight = { Origin = "http://b.example", ["Access-Control-Request-Method"] = "POST",
                            ["Access-Control-Request-Headers"] = "content-type, authorization" }
        -- a preflight carries no API key and is answered before the key check
        local r = H.request(srv, "OPTIONS", "/v1/chat/completions", nil, preflight)
        assert.are.equal(204, r.status, r.body)
        assert.are.equal("http://b.example", r.headers["access-control-allow-origin"])
        assert.are.equal("Origin", r.headers["vary"])
        assert.matches("POST", r.headers["access-control-allow-methods"], 1, true)
        assert.are.equal("content-type, authorization", r.headers["access-control-allow-headers"])
        -- the request itself, streamed or not, carries the header
        local auth = { Origin = "http://a.example", Authorization = "Bearer sekrit" }
        r = H.request(srv, "POST", "/v1/chat/completions", { messages = USER, max_tokens = 2 }, auth)
        assert.are.equal(200, r.status, r.body)
        assert.are.equal("http://a.example", r.headers["access-control-allow-origin"])
        r = H.request(srv, "POST", "/v1/chat/completions", { messages = USER, max_tokens = 2, stream = true }, auth)
        assert.are.equal(200, r.status, r.body)
        assert.are.equal("http://a.example", r.headers["access-control-allow-origin"])
        -- an error response too (the browser must be able to read it)
        r = H.request(srv, "POST", "/v1/chat/completions", { messages = USER }, { Origin = "http://a.example" })
        assert.are.equal(401, r.status, r.body)
        assert.are.equal("http://a.example", r.headers["access-control-allow-origin"])
        -- another origin: its preflight is refused, its requests get no header (the browser hides the answer)
        preflight.Origin = "http://c.example"
        r = H.request(srv, "OPTIONS", "/v1/chat/completions", nil, preflight)
        assert.are.equal(403, r.status, r.body)
        assert.are.equal("permission_error", r.json.error.type)
        r = H.request(srv, "GET", "/health", nil, { Origin = "http://c.example" })
        assert.are.equal(200, r.status)
        assert.is_nil(r.headers["access-control-allow-origin"])
        -- no Origin, no header
        assert.is_nil(H.request(srv, "GET", "/health").headers["access-control-allow-origin"])
        srv.stop()
        -- the default allows any origin; "none" no origin
        srv = H.start({ "--model", "models/tiny" })
        r = H.request(srv, "GET", "/v1/models", nil, { Origin = "http://x.example" })
        assert.are.equal("*", r.headers["access-control-allow-origin"])
        assert.is_nil(r.headers["vary"])
        srv.stop()
        srv = H.start({ "--model", "models/tiny", "--allowed-origins", "none" })
        r = H.request(srv, "GET", "/v1/models", nil, { Origin = "http://x.example" })
        assert.are.equal(200, r.status)
        assert.is_nil(r.headers["access-control-allow-origin"])
        srv.stop()
    end)

    it("logs a line per request and throughput lines while requests run; --no-access-log, --stats-interval 0", function()
        local srv = H.start({ "--model", "models/tiny", "--stats-interval", "0.2" })
        assert.are.equal(200, chat(srv, { messages = USER, max_tokens = 200, ignore_eos = true }).status)
        assert.are.equal(404, H.request(srv, "GET", "/no/such/route").status)
        H.request(srv, "POST", "/v1/completions", { prompt = "hi", max_tokens = 3000, ignore_eos = true, stream = true },
                  nil, { "--max-time", "0.3" })
        H.sleep(500)
        local log = H.read_all(srv.log)
        assert.matches('127%.0%.0%.1:%d+ "POST /v1/chat/completions" 200 [%d.]+ s\n', log)
        assert.matches('"GET /no/such/route" 404 [%d.]+ s\n', log)
        assert.matches('"POST /v1/completions" 200 [%d.]+ s, the connection closed before the end', log)
        assert.matches("generation [%d.]+ tok/s; running %d+, waiting %d+ requests; cache [%d.]+ MB", log)
        srv.stop()
        srv = H.start({ "--model", "models/tiny", "--no-access-log", "--stats-interval", "0" })
        assert.are.equal(200, chat(srv, { messages = USER, max_tokens = 200, ignore_eos = true }).status)
        local quiet = H.read_all(srv.log)
        assert.is_nil(quiet:find('"POST /v1/chat/completions"', 1, true), quiet)
        assert.is_nil(quiet:find("tok/s", 1, true), quiet)
        srv.stop()
    end)

    it("a full queue answers 429 and the server keeps serving", function()
        local srv = H.start({ "--model", "models/tiny", "--max-num-seqs", "1", "--max-queue", "1" })
        local statuses = H.concurrent(srv.port, 4, "POST", "/v1/chat/completions",
                                      { messages = USER, max_tokens = 200, temperature = 0, ignore_eos = true })
        table.sort(statuses)
        assert.are.same({ 200, 200, 429, 429 }, statuses)
        assert.are.equal(1, H.metric(H.metrics(srv), "glm53:requests_rejected_total") >= 1 and 1 or 0)
        assert.are.equal(200, chat(srv, { messages = USER, max_tokens = 1 }).status)
        srv.stop()
    end)

    it("scripts add a route, a limit and a policy (scripts/examples/serve_app.lua)", function()
        local srv = H.start({ "--model", "models/tiny", "--script", "scripts/examples/serve_app.lua" })
        local r = H.request(srv, "GET", "/v1/stats")
        assert.are.equal(200, r.status)
        assert.are.equal(0, r.json.running)
        r = chat(srv, { messages = USER, max_tokens = 2000 })
        assert.are.equal(400, r.status)
        assert.matches("1024 output tokens", r.json.error.message)
        r = chat(srv, { messages = USER, max_tokens = 5, seed = 1, policy = { name = "ratio", ratio = 0.5 } })
        assert.are.equal(200, r.status, r.body)
        local codes = H.concurrent(srv.port, 40, "POST", "/tokenize", { prompt = "hi" })
        local limited = 0
        for _, c in ipairs(codes) do if c == 429 then limited = limited + 1 end end
        assert.is_true(limited > 0 and limited < 40, "some requests were rate limited: " .. limited)
        srv.stop()
    end)

    it("serves the bundled models/glm53-tiny as glm53-tiny without --model; SIGTERM stops it gracefully", function()
        local srv = H.start({})
        local r = H.request(srv, "GET", "/v1/models")
        assert.are.equal(200, r.status, r.body)
        assert.are.equal("glm53-tiny", r.json.data[1].id)
        assert.are.equal(200, H.request(srv, "GET", "/v1/models/glm53-tiny").status)
        assert.are.equal(404, H.request(srv, "GET", "/v1/models/tiny").status)
        assert.matches("/models/glm53%-tiny$", require("glm53.server").DEFAULT_MODEL)
        os.execute("kill -TERM " .. srv.pid)
        for _ = 1, 100 do
            if not srv.alive() then break end
            H.sleep(50)
        end
        assert.is_false(srv.alive())
        srv.stop()
    end)
end)
