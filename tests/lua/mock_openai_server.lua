#!/usr/bin/env luajit
--[==[
mock_openai_server.lua - a small OpenAI-compatible server for the eval and load-generator tests, answering from
the engine in-process: glm53.server.listener for HTTP, glm53.server.sse for streaming, glm53.eval.generator for
the generation (the same code scripts/eval.lua runs in-process, so the two must agree).

    luajit tests/lua/mock_openai_server.lua --model models/tiny [--port 0] [--concurrency 4] [--spec-k K]

Prints "port N" on stdout once it listens. Routes: GET /v1/models; POST /v1/chat/completions (messages through
the chat template) and /v1/completions (prompt text as it is): max_tokens (or max_completion_tokens), stop,
seed, stream with stream_options.include_usage, ignore_eos; greedy decoding only (a temperature above 0 is a
400). The content is the raw generated text (no reasoning split, as vLLM without a reasoning parser). GET
/metrics: the driver's speculative-decoding counters with vLLM's Prometheus names. Streaming sends one chunk per
engine round that committed tokens to the request. SIGTERM or SIGINT closes it.
]==]
local script = arg and arg[0] or "tests/lua/mock_openai_server.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../../lua/?.lua;" .. dir .. "/../../lua/?/init.lua;" .. package.path

local uv = require("luv")
local cjson = require("cjson")
local cli = require("glm53.util.cli")
local listener = require("glm53.server.listener")
local sse = require("glm53.server.sse")
local model = require("glm53.engine.model")
local tokenizer = require("glm53.engine.tokenizer")
local generator = require("glm53.eval.generator")

local args = cli.parse_or_exit(arg, {
    prog = "mock_openai_server.lua",
    usage = "luajit tests/lua/mock_openai_server.lua --model DIR [--port N] [--concurrency N] [--spec-k K]",
    options = {
        { "model", required = true, metavar = "DIR" },
        { "port", type = "integer", min = 0, default = 0 },
        { "concurrency", type = "integer", min = 1, default = 4 },
        { "spec_k", type = "integer", min = 0, default = 0 },
        { "threads", type = "integer", min = 0, default = 1 },
    },
})

local m = assert(model.load(args.model, { threads = args.threads }))
local tok = assert(tokenizer.load(args.model .. "/tokenizer.json"))
local gen = assert(generator.new(m, tok, { max_seqs = args.concurrency, k = args.spec_k }))
local MODEL_ID = "glm53-mock"
local n_req = 0

local function json_response(res, status, obj)
    res:write_head(status, { ["Content-Type"] = "application/json" })
    res:finish(cjson.encode(obj))
end

local function bad_request(res, msg)
    res:write_head(400, { ["Content-Type"] = "application/json" })
    res:finish(listener.error_body(msg))
end

-- Generation runs one round per loop turn while requests wait, so the loop serves I/O between rounds.
local idle = uv.new_idle()
local idle_on = false
local after_step = {}   -- jobs with text to flush after the round

local function kick()
    if not idle_on then
        idle_on = true
        idle:start(function()
            gen:step()
            for job in pairs(after_step) do job.flush() end
            after_step = {}
            if gen:pending() == 0 then idle:stop() idle_on = false end
        end)
    end
end

local function completion(req, res, chat)
    local ok, body = pcall(cjson.decode, req.body)
    if not ok or type(body) ~= "table" then return bad_request(res, "the body is not a JSON object") end
    if type(body.temperature) == "number" and body.temperature > 0 then
        return bad_request(res, "the mock server decodes greedily only (temperature 0)")
    end
    local ids, err
    if chat then
        if type(body.messages) ~= "table" then return bad_request(res, "messages is required") end
        ids, err = generator.encode(tok, body.messages)
    else
        if type(body.prompt) ~= "string" then return bad_request(res, "prompt must be a string") end
        ids, err = generator.encode(tok, body.prompt)
    end
    if not ids then return bad_request(res, err) end
    local stop = body.stop
    if type(stop) == "string" then stop = { stop } end
    n_req = n_req + 1
    local id = (chat and "chatcmpl-" or "cmpl-") .. n_req
    local created = os.time()
    local object = chat and "chat.completion" or "text_completion"
    local function choice(text, finish, streaming)
        local c = { index = 0, finish_reason = finish or cjson.null }
        if not chat then c.text = text
        elseif streaming then c.delta = { content = text }
        else c.message = { role = "assistant", content = text } end
        return c
    end
    local function usage(r) return { prompt_tokens = r.tokens_in, completion_tokens = r.tokens_out,
                                     total_tokens = r.tokens_in + r.tokens_out } end
    local streaming = body.stream == true
    local include_usage = streaming and type(body.stream_options) == "table" and body.stream_options.include_usage
    local buffered, closed = {}, false
    local job
    local function chunk(text, finish)
        return sse.event(cjson.encode({ id = id, object = object .. (chat and ".chunk" or ""), created = created,
                                        model = MODEL_ID, choices = { choice(text, finish, true) } }))
    end
    local cb = {
        on_delta = function(text) buffered[#buffered + 1] = text end,
        on_done = function(r)
            if closed then return end
            if r.error then
                if streaming then res:finish(sse.event(listener.error_body(r.error)) .. sse.DONE) return end
                res:write_head(500, { ["Content-Type"] = "application/json" })
                return res:finish(listener.error_body(r.error))
            end
            if not streaming then
                return json_response(res, 200, { id = id, object = object, created = created, model = MODEL_ID,
                                                 choices = { choice(r.text, r.finish_reason) }, usage = usage(r) })
            end
            local out = { chunk(table.concat(buffered), r.finish_reason) }
            buffered = {}
            if include_usage then
                -- "choices": [] (lua-cjson writes an empty table as {}).
                out[#out + 1] = sse.event('{"choices":[],' .. cjson.encode({ id = id, created = created,
                    object = object .. (chat and ".chunk" or ""), model = MODEL_ID, usage = usage(r) }):sub(2))
            end
            out[#out + 1] = sse.DONE
            after_step[job] = nil
            res:finish(table.concat(out))
        end,
    }
    if streaming then
        res:write_head(200, sse.headers())
        cb.on_tokens = function(_, j) after_step[j] = true end
    end
    res:on_close(function() closed = true end)
    job = gen:submit({ ids = ids, max_tokens = body.max_tokens or body.max_completion_tokens or 256, stop = stop,
                       seed = body.seed, stop_ids = body.ignore_eos and {} or nil }, cb)
    job.flush = function()
        if closed or #buffered == 0 and not after_step[job] then return end
        res:write(chunk(table.concat(buffered), nil))
        buffered = {}
    end
    kick()
end

local function metrics(res)
    local st = gen:stats()
    local lines = {
        "# TYPE vllm:spec_decode_num_drafts counter",
        "vllm:spec_decode_num_drafts_total " .. st.spec_decode_num_drafts,
        "vllm:spec_decode_num_draft_tokens_total " .. st.spec_decode_num_draft_tokens,
        "vllm:spec_decode_num_accepted_tokens_total " .. st.spec_decode_num_accepted_tokens,
    }
    for i, a in ipairs(st.spec_decode_num_accepted_tokens_per_pos) do
        lines[#lines + 1] = string.format('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="%d"} %d', i - 1, a)
    end
    res:write_head(200, { ["Content-Type"] = "text/plain; version=0.0.4" })
    res:finish(table.concat(lines, "\n") .. "\n")
end

local server = assert(listener.listen({ port = args.port, signals = false, log = function() end }, function(req, res)
    if req.method == "GET" and req.path == "/v1/models" then
        return json_response(res, 200, { object = "list", data = { { id = MODEL_ID, object = "model",
                                                                      owned_by = "glm53", root = args.model } } })
    elseif req.method == "GET" and req.path == "/metrics" then
        return metrics(res)
    elseif req.method == "POST" and req.path == "/v1/chat/completions" then
        return completion(req, res, true)
    elseif req.method == "POST" and req.path == "/v1/completions" then
        return completion(req, res, false)
    end
    res:write_head(404, { ["Content-Type"] = "application/json" })
    res:finish(listener.error_body("no route for " .. req.method .. " " .. req.path))
end))

local signals = {}
for _, name in ipairs({ "sigterm", "sigint" }) do
    local sig = uv.new_signal()
    sig:start(name, function()
        server:close(1, function()
            idle:stop()
            if not idle:is_closing() then idle:close() end
            for _, s in ipairs(signals) do if not s:is_closing() then s:close() end end
        end)
    end)
    signals[#signals + 1] = sig
end

io.stdout:write("port ", server.port, "\n")
io.stdout:flush()
uv.run()
gen:free()
