--[[
glm53.eval.openai - OpenAI-compatible completion requests (ours, vLLM, SGLang) over glm53.eval.http_client,
with the client-side timings the load generator needs: the send time, the arrival time of every streamed
chunk that carries a choice, and the end.

    local openai = require("glm53.eval.openai")
    openai.complete(pool, {
        base = "/v1", model = "glm53",
        messages = { { role = "user", content = "hi" } },   -- /v1/chat/completions; or prompt = "text": /v1/completions
        max_tokens = 64, temperature = 0, seed = 1, stop = { "Question:" },
        stream = true,                                      -- SSE with stream_options.include_usage
        extra = { ignore_eos = true },                      -- merged into the request body
    }, function(r) print(r.ok, r.text, r.finish_reason, r.completion_tokens, r.ttft, #r.itl) end)

A result r: ok (a 200 response with a choice), status, error (when not ok: the HTTP status and the server's
error message, or the transport error), text (message content, or the completion text), reasoning (the
message's reasoning_content, or its reasoning, when the server split it off; nil otherwise), finish_reason,
prompt_tokens and completion_tokens (from usage; nil when the server sent none), chunks (streamed chunks
that carried a choice), and the times (clock.now() seconds): t_start,
t_first (the first chunk with a choice), t_last (the last one), t_end (the response complete); t_start is when
the request leaves the client's queue for a connection (an idle one, or one being opened: connecting counts, as
it does in vLLM's client), so a request that waits for a free connection is not charged for the wait; ttft =
t_first - t_start, itl = the gaps between successive chunks with a choice, latency = t_last - t_start when
streaming (vLLM's benchmarks/lib/endpoint_request_func.py: only chunks with a token advance the end; the
trailing usage chunk does not), t_end - t_start otherwise. Argument errors raise.

Media parts of chat messages that name a local file ({type = "image", path = ...}, as evals/mmmu_pro.lua writes
them, or an image_url part whose url is a path, as the tiny tasks' files have them) are sent as OpenAI image_url
parts with base64 data URLs.
]]
local cjson = require("cjson")
local clock = require("glm53.util.clock")
local http_client = require("glm53.eval.http_client")
local base64 = require("glm53.util.base64")
local file = require("glm53.util.file")

local M = {}

local MIME = { png = "image/png", jpg = "image/jpeg", jpeg = "image/jpeg", gif = "image/gif", webp = "image/webp" }

local function lower_ext(path)
    return (path:match("%.(%w+)$") or ""):lower()
end

-- The local file an image part names, or nil: {type = "image", path = p}, or an image_url part whose url is a
-- path (not a data:, http: or https: URL).
local function local_image(part)
    if type(part) ~= "table" then return nil end
    if part.type == "image" then return part.path end
    if part.type == "image_url" and type(part.image_url) == "table" then
        local url = part.image_url.url
        if type(url) == "string" and not url:match("^data:") and not url:match("^https?://") then
            return (url:gsub("^file://", ""))
        end
    end
    return nil
end

-- Messages with local image parts (local_image) turned into image_url parts with data URLs; nil, err when an
-- image cannot be read.
function M.wire_messages(messages)
    local out = {}
    for i, msg in ipairs(messages) do
        local m = {}
        for k, v in pairs(msg) do m[k] = v end
        if type(msg.content) == "table" then
            local parts = {}
            for j, part in ipairs(msg.content) do
                local path = local_image(part)
                if path then
                    local bytes, err = file.read_file(path)
                    if not bytes then return nil, "message " .. i .. " part " .. j .. ": " .. tostring(err) end
                    local mime = MIME[lower_ext(path)] or "application/octet-stream"
                    parts[j] = { type = "image_url",
                                 image_url = { url = "data:" .. mime .. ";base64," .. base64.encode(bytes) } }
                else
                    parts[j] = part
                end
            end
            m.content = parts
        end
        out[i] = m
    end
    return out
end

local function request_body(opts)
    local body = { model = opts.model, max_tokens = opts.max_tokens, temperature = opts.temperature,
                   seed = opts.seed, stream = opts.stream or false }
    if opts.stop and #opts.stop > 0 then body.stop = opts.stop end
    if opts.stream then body.stream_options = { include_usage = true } end
    if opts.messages then
        local msgs, err = M.wire_messages(opts.messages)
        if not msgs then return nil, err end
        body.messages = msgs
    else
        body.prompt = opts.prompt
    end
    for k, v in pairs(opts.extra or {}) do body[k] = v end
    return cjson.encode(body)
end

-- The server's error text from an error body (OpenAI shape, or anything else cut short).
local function error_text(status, body)
    local ok, v = pcall(cjson.decode, body or "")
    local msg = ok and type(v) == "table" and type(v.error) == "table" and v.error.message
    return "HTTP " .. tostring(status) .. ": " .. tostring(msg or (body or ""):sub(1, 200))
end

-- Reads the choice of a response or chunk into r (content or text, reasoning, finish_reason); true when it
-- carried a choice.
local function take_choice(r, obj, chat, streaming)
    local choices = type(obj) == "table" and obj.choices
    local c = type(choices) == "table" and choices[1]
    if type(obj) == "table" and type(obj.usage) == "table" then
        r.prompt_tokens = tonumber(obj.usage.prompt_tokens) or r.prompt_tokens
        r.completion_tokens = tonumber(obj.usage.completion_tokens) or r.completion_tokens
    end
    if type(c) ~= "table" then return false end
    local piece, reasoning
    if chat then
        local m = streaming and c.delta or c.message
        if type(m) == "table" then
            piece = m.content
            reasoning = m.reasoning_content
            if reasoning == nil then reasoning = m.reasoning end
        end
    else
        piece = c.text
    end
    if type(piece) == "string" then r.parts[#r.parts + 1] = piece end
    if type(reasoning) == "string" then
        r.reasoning_parts = r.reasoning_parts or {}
        r.reasoning_parts[#r.reasoning_parts + 1] = reasoning
    end
    if type(c.finish_reason) == "string" then r.finish_reason = c.finish_reason end
    return true
end

-- opts: base (path prefix, e.g. "/v1"), model, messages or prompt, max_tokens, temperature, seed, stop, stream,
-- extra, api_key (default $OPENAI_API_KEY), timeout (seconds, this request). cb(r) once.
function M.complete(pool, opts, cb)
    if type(opts) ~= "table" or (opts.messages == nil) == (opts.prompt == nil) then
        error("openai.complete: give exactly one of opts.messages and opts.prompt", 2)
    end
    if type(cb) ~= "function" then error("openai.complete: cb must be a function", 2) end
    local chat = opts.messages ~= nil
    local r = { parts = {}, chunks = 0, itl = {} }
    local body, berr = request_body(opts)
    if not body then
        r.ok, r.error = false, berr
        return cb(r)
    end
    local headers = { ["Content-Type"] = "application/json", ["Accept"] = opts.stream and "text/event-stream" or nil }
    local key = opts.api_key or os.getenv("OPENAI_API_KEY")
    if key and key ~= "" then headers["Authorization"] = "Bearer " .. key end

    local status, sse, bad_chunk
    local function on_chunk(obj)
        local now = clock.now()
        if take_choice(r, obj, chat, true) then
            r.chunks = r.chunks + 1
            if r.t_first then r.itl[#r.itl + 1] = now - r.t_last else r.t_first = now end
            r.t_last = now
        end
    end
    local req = {
        method = "POST", path = (opts.base or "/v1") .. (chat and "/chat/completions" or "/completions"),
        headers = headers, body = body, timeout = opts.timeout,
        on_dispatch = function() r.t_start = clock.now() end,
        on_head = function(res)
            status = res.status
            if opts.stream and status == 200 then sse = http_client.sse_parser() end
        end,
    }
    if opts.stream then
        req.on_body = function(bytes)
            if not sse then   -- an error response: keep its body for the message
                r.error_body = (r.error_body or "") .. bytes
                return
            end
            for _, ev in ipairs(sse:feed(bytes)) do
                if ev.data ~= "[DONE]" then
                    local ok, obj = pcall(cjson.decode, ev.data)
                    if ok then on_chunk(obj) else bad_chunk = bad_chunk or ev.data:sub(1, 120) end
                end
            end
        end
    end
    pool:request(req, function(res, err)
        r.t_end = clock.now()
        r.t_start = r.t_start or r.t_end   -- never dispatched (the pool closed first)
        r.status = res and res.status
        if not res then
            r.ok, r.error = false, err
        elseif res.status ~= 200 then
            r.ok, r.error = false, error_text(res.status, r.error_body or res.body)
        elseif opts.stream then
            r.ok = r.t_first ~= nil
            if bad_chunk then r.ok, r.error = false, "a streamed chunk is not JSON: " .. bad_chunk
            elseif not r.ok then r.error = "the stream carried no choice" end
        else
            local ok, obj = pcall(cjson.decode, res.body)
            if not ok then
                r.ok, r.error = false, "the response is not JSON: " .. res.body:sub(1, 120)
            else
                r.ok = take_choice(r, obj, chat, false)
                if not r.ok then r.error = "the response has no choice" end
                r.t_first, r.t_last = r.t_end, r.t_end
            end
        end
        if r.ok then
            r.text = table.concat(r.parts)
            r.reasoning = r.reasoning_parts and table.concat(r.reasoning_parts) or nil
            r.ttft = r.t_first - r.t_start
            r.latency = (opts.stream and r.t_last or r.t_end) - r.t_start
        end
        r.parts, r.reasoning_parts, r.error_body = nil, nil, nil
        cb(r)
    end)
end

-- The id of the server's first model (GET base/models), as vLLM's benchmark asks when no model is named.
-- cb(id) or cb(nil, err).
function M.first_model(pool, base, cb)
    pool:request({ method = "GET", path = (base or "/v1") .. "/models" }, function(res, err)
        if not res then return cb(nil, err) end
        if res.status ~= 200 then return cb(nil, error_text(res.status, res.body)) end
        local ok, obj = pcall(cjson.decode, res.body)
        local first = ok and type(obj) == "table" and type(obj.data) == "table" and obj.data[1]
        if type(first) ~= "table" or type(first.id) ~= "string" then return cb(nil, "no model in " .. res.body:sub(1, 120)) end
        cb(first.id)
    end)
end

return M
