--[[
glm53.server.params - request validation for the API routes: typed field readers that raise API errors (an HTTP
status, a message and the offending parameter), and the sampling fields every generation route shares.

    local params = require("glm53.server.params")
    local ok, err = pcall(function()
        local body = params.decode(req.body)                       -- a JSON object, or a 400
        local n = params.integer(body, "n", { min = 1, max = 16, default = 1 })
        local g = params.generation(app, body, { max_tokens = "max_tokens" })
    end)
    if not ok then ... params.is_error(err) and err.status, err.message, err.param ... end

params.fail(status, message, param, code) raises an API error from anywhere inside a route (app:route catches it
and answers in the route's error shape). Numbers decoded from JSON may be boxed floats (glm53.chat.json keeps 1.0
a float for the chat template); the readers unbox them.
]]
local json = require("glm53.chat.json")

local M = {}

local api_error_mt = { __tostring = function(e) return e.status .. " " .. e.message end }

function M.fail(status, message, param, code)
    error(setmetatable({ status = status, message = message, param = param, code = code }, api_error_mt), 0)
end

function M.is_error(v) return getmetatable(v) == api_error_mt end

-- The request body as a JSON object (key order kept, numbers exact), or a 400.
function M.decode(body)
    if body == nil or body == "" then M.fail(400, "the request body is empty; a JSON object is expected") end
    local v, err = json.decode(body, { exact = true })
    if v == nil then M.fail(400, "invalid JSON in the request body: " .. tostring(err):gsub("^json%.decode: ", "")) end
    if type(v) ~= "table" or json.kind(v) ~= "object" then M.fail(400, "the request body must be a JSON object") end
    return v
end

local function value(body, key)
    local v = body[key]
    if json.is_null(v) then return nil end
    if json.is_number_box(v) then return json.tonumber(v) end
    return v
end
M.value = value

local function kind_of(v)
    if type(v) == "table" then
        if json.is_null(v) then return "null" end
        local k = json.kind(v)
        if k == "array" then return "array" end
        if k == "object" then return "object" end
        return next(v) == nil and "array" or (#v > 0 and "array" or "object")
    end
    return type(v)
end
M.kind_of = kind_of

local function typed(body, key, want, opts)
    local v = value(body, key)
    if v == nil then
        if opts and opts.required then M.fail(400, "'" .. key .. "' is required", key) end
        return opts and opts.default
    end
    local have = kind_of(v)
    if have ~= want then M.fail(400, "'" .. key .. "' must be " .. (want == "array" and "an array" or
                                    want == "object" and "an object" or "a " .. want) .. ", got " .. have, key) end
    return v
end

function M.string(body, key, opts) return typed(body, key, "string", opts) end
function M.boolean(body, key, opts) return typed(body, key, "boolean", opts) end
function M.array(body, key, opts) return typed(body, key, "array", opts) end
function M.object(body, key, opts) return typed(body, key, "object", opts) end

-- opts: min, max (inclusive), above (exclusive lower bound), default, required.
function M.number(body, key, opts)
    opts = opts or {}
    local v = typed(body, key, "number", opts)
    if v == nil then return nil end
    if v ~= v or v == math.huge or v == -math.huge then M.fail(400, "'" .. key .. "' must be finite", key) end
    if opts.min and v < opts.min then M.fail(400, "'" .. key .. "' must be >= " .. opts.min .. ", got " .. v, key) end
    if opts.max and v > opts.max then M.fail(400, "'" .. key .. "' must be <= " .. opts.max .. ", got " .. v, key) end
    if opts.above and v <= opts.above then
        M.fail(400, "'" .. key .. "' must be > " .. opts.above .. ", got " .. v, key)
    end
    return v
end

function M.integer(body, key, opts)
    local v = M.number(body, key, opts)
    if v ~= nil and v % 1 ~= 0 then M.fail(400, "'" .. key .. "' must be an integer, got " .. v, key) end
    return v
end

-- A string or a list of non-empty strings (OpenAI's stop), as a list.
function M.strings(body, key)
    local v = value(body, key)
    if v == nil then return {} end
    if type(v) == "string" then v = { v } end
    if kind_of(v) ~= "array" then M.fail(400, "'" .. key .. "' must be a string or an array of strings", key) end
    local out = {}
    for i, s in ipairs(v) do
        if type(s) ~= "string" then M.fail(400, "'" .. key .. "[" .. (i - 1) .. "]' must be a string", key) end
        if s ~= "" then out[#out + 1] = s end
    end
    return out
end

-- A list of token ids below n; param names the request field in errors (default key).
function M.token_ids(body, key, n, param)
    param = param or key
    local v = M.array(body, key)
    if v == nil then return nil end
    local out = {}
    for i, id in ipairs(v) do
        if json.is_number_box(id) then id = json.tonumber(id) end
        if type(id) ~= "number" or id % 1 ~= 0 or id < 0 or id >= n then
            M.fail(400, "'" .. param .. "[" .. (i - 1) .. "]' must be a token id in [0, " .. n .. ")", param)
        end
        out[i] = id
    end
    return out
end

-- The sampling and generation fields every route shares (OpenAI's names; Anthropic's are mapped by its route).
-- names.max_tokens: the field(s) holding the output limit. Returns the table glm53.server.generation.start takes,
-- without prompt and the event handler.
function M.generation(app, body, opts)
    opts = opts or {}
    local g = {}
    local max_tokens
    for _, key in ipairs(opts.max_tokens_keys or { "max_completion_tokens", "max_tokens" }) do
        max_tokens = max_tokens or M.integer(body, key, { min = opts.min_max_tokens or 1, required = false })
    end
    if opts.max_tokens_required and max_tokens == nil then
        M.fail(400, "'" .. opts.max_tokens_keys[1] .. "' is required", opts.max_tokens_keys[1])
    end
    g.max_tokens = max_tokens
    g.min_tokens = M.integer(body, "min_tokens", { min = 0 }) or 0   -- vLLM's; checked against max_tokens at start
    local s = {}
    s.temperature = M.number(body, "temperature", { min = 0, max = opts.max_temperature or 100, default = 1 })
    s.top_p = M.number(body, "top_p", { above = 0, max = 1 })
    local top_k = M.integer(body, "top_k", { min = -1 })
    if top_k and top_k > 0 then s.top_k = top_k end
    s.min_p = M.number(body, "min_p", { min = 0, max = 1 })
    s.presence_penalty = M.number(body, "presence_penalty", { min = -2, max = 2 })
    s.frequency_penalty = M.number(body, "frequency_penalty", { min = -2, max = 2 })
    s.repetition_penalty = M.number(body, "repetition_penalty", { above = 0, max = 100 })
    s.n_valid = app.n_valid
    local bias = M.object(body, "logit_bias")
    if bias then
        local t = {}
        for _, k in ipairs(json.keys(bias)) do
            local id = tonumber(k)
            if not id or id % 1 ~= 0 or id < 0 or id >= app.n_valid then
                M.fail(400, "'logit_bias' keys must be token ids in [0, " .. app.n_valid .. "), got '" .. k .. "'",
                       "logit_bias")
            end
            local b = value(bias, k)
            if type(b) ~= "number" or b < -100 or b > 100 then
                M.fail(400, "'logit_bias' values must be numbers in [-100, 100]", "logit_bias")
            end
            t[id] = b
        end
        s.logit_bias = t
    end
    g.sampling = s
    g.seed = M.integer(body, "seed", { min = -2 ^ 63, max = 2 ^ 63 })
    if g.seed == nil then g.seed = app:random_seed() end
    g.n = M.integer(body, "n", { min = 1, max = app.max_num_seqs, default = 1 })
    g.stop = M.strings(body, opts.stop_key or "stop")
    g.include_stop = M.boolean(body, "include_stop_str_in_output", { default = false })   -- vLLM's
    local stop_ids = M.token_ids(body, "stop_token_ids", app.n_valid) or {}
    if not M.boolean(body, "ignore_eos", { default = false }) then
        for _, id in ipairs(app.stop_ids) do stop_ids[#stop_ids + 1] = id end
    end
    g.stop_ids = stop_ids
    g.skip_special_tokens = M.boolean(body, "skip_special_tokens", { default = true })
    g.new_policy = app:resolve_policy(value(body, "policy"))
    g.k, g.new_draft = app:resolve_speculative(value(body, "speculative"))
    g.return_token_ids = M.boolean(body, "return_token_ids", { default = false })
    return g
end

return M
