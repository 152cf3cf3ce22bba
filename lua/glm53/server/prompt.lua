--[[
glm53.server.prompt - prompts for the generation routes: chat messages rendered with the GLM-5.3 template
(glm53.chat.template) and tokenised, images placed (glm53.engine.vision), the prefix-cache boundary found, and the
length checked against --max-model-len.

    local prompt = require("glm53.server.prompt")
    local p = prompt.chat(app, messages, { tools = tools, reasoning_effort = "low", thinking = true })
    -- p.ids (token ids), p.text (the rendered prompt), p.media (vision items or nil), p.boundary (or nil)
    local max_tokens = prompt.check_length(app, #p.ids, body_max_tokens, "messages")

The boundary is the end of the system block - the rendered system messages and tools, which many requests share -
when the system block's own tokens are a prefix of the prompt's; the scheduler keeps a prefix sequence there
(glm53.server.prefix_cache). thinking = false closes the think block the template opens ("</think>" after the
generation prompt), the known way to get GLM-5.3's answer without reasoning. Failures raise API errors (400).
]]
local chat = require("glm53.chat.template")
local params = require("glm53.server.params")

local M = {}

local function has_media(messages)
    for _, msg in ipairs(messages) do
        if type(msg) == "table" and type(msg.content) == "table" then
            for _, part in ipairs(msg.content) do
                local t = type(part) == "table" and part.type
                if t == "image" or t == "image_url" or t == "video" or t == "video_url" then return true end
            end
        end
    end
    return false
end

-- Token ids of text, or a 400.
function M.encode(app, text, param)
    local ids, err = app.tokenizer:encode(text)
    if not ids then params.fail(400, "cannot tokenize the " .. param .. ": " .. tostring(err), param) end
    return ids
end

-- The leading system messages and tools rendered alone: the block many requests share.
local function boundary(app, messages, opts, ids)
    local head = {}
    for _, msg in ipairs(messages) do
        if msg.role ~= "system" then break end
        head[#head + 1] = msg
    end
    if #head == 0 and not (opts.tools and #opts.tools > 0) then return nil end
    local text = chat.render(head, { tools = opts.tools, reasoning_effort = opts.reasoning_effort,
                                     add_generation_prompt = false })
    if not text then return nil end
    local sys = app.tokenizer:encode(text)
    if not sys or #sys >= #ids then return nil end
    for i = 1, #sys do
        if sys[i] ~= ids[i] then return nil end   -- the split tokenised differently: no boundary
    end
    return #sys
end

-- messages: OpenAI-shaped (decoded with glm53.chat.json, key order kept). opts: tools, reasoning_effort,
-- clear_thinking, add_generation_prompt (default true), thinking (default true).
function M.chat(app, messages, opts)
    opts = opts or {}
    for i, msg in ipairs(messages) do
        if params.kind_of(msg) ~= "object" then params.fail(400, "messages[" .. (i - 1) .. "] must be an object", "messages") end
        if type(msg.role) ~= "string" then params.fail(400, "messages[" .. (i - 1) .. "].role must be a string", "messages") end
    end
    local render_opts = { tools = opts.tools, reasoning_effort = opts.reasoning_effort,
                          clear_thinking = opts.clear_thinking, add_generation_prompt = opts.add_generation_prompt }
    local ok, text, err = pcall(chat.render, messages, render_opts)
    if not ok then params.fail(400, "messages: " .. tostring(text):gsub("^[^:]*:%d+: ", ""), "messages") end
    if not text then params.fail(400, "the chat template rejected the messages: " .. tostring(err), "messages") end
    if opts.thinking == false and opts.add_generation_prompt ~= false then text = text .. "</think>" end
    local out = { text = text }
    if has_media(messages) then
        local vision = require("glm53.engine.vision")
        if app.model.config.has_vision == 0 then
            params.fail(400, "this model has no vision tower; images are not supported", "messages")
        end
        local items, merr = vision.message_media(messages)
        if not items then params.fail(400, "messages: " .. tostring(merr), "messages") end
        local expanded, eerr = vision.expand(text, items)
        if not expanded then params.fail(400, "messages: " .. tostring(eerr), "messages") end
        out.media, out.ids = items, M.encode(app, expanded, "messages")
    else
        out.ids = M.encode(app, text, "messages")
        out.boundary = boundary(app, messages, opts, out.ids)
    end
    return out
end

-- The output limit of a request with n_prompt prompt tokens: max_tokens (nil: what the context leaves, as vLLM),
-- or a 400 when prompt and output exceed --max-model-len.
function M.check_length(app, n_prompt, max_tokens, param)
    local limit = app.max_model_len
    if n_prompt >= limit or (max_tokens and n_prompt + max_tokens > limit) then
        params.fail(400, string.format("This model's maximum context length is %d tokens. However, you requested %d " ..
            "tokens (%d in the %s, %d for the completion). Please reduce the length of the %s or the completion.",
            limit, n_prompt + (max_tokens or 0), n_prompt, param, max_tokens or 0, param), param,
            "context_length_exceeded")
    end
    return max_tokens or (limit - n_prompt)
end

return M
