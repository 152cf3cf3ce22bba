--[[
glm53.server - an OpenAI- and Anthropic-compatible HTTP server over the engine, as an app object that scripts
extend with routes, limits and policies (docs/server.md).

    local uv = require("luv")
    local server = require("glm53.server")
    local app = server.new({ model = "models/glm53-tiny", port = 8080 })
    app:route("GET", "/v1/version", function(req, res) app:send(res, 200, { version = "1" }) end)
    app:use(function(req, res)                         -- runs before every route; true = answered
        if req.headers["x-tenant"] == "blocked" then return app:fail(req, res, 403, "tenant blocked") end
    end)
    app:admit(function(job, req)                       -- every generation request, once parsed
        if job.max_tokens > 512 then return 400, "max_tokens is capped at 512 here" end
    end)
    app:policy("greedy_first", function(opts) return function(cand) return cand.ids[0] end end)
    assert(app:start())                                -- listens, then loads the model off the loop
    uv.run()

server.new(opts): model (checkpoint directory; default server.DEFAULT_MODEL, the bundled models/glm53-tiny),
device ("cpu" | "cuda"), threads, tp, ep, communicator (tensor and expert parallelism, as glm53.engine.model.load
takes them; docs/multi-gpu.md), host ("127.0.0.1"), port (8080; 0 picks one), api_key, served_model_name (default:
the directory's base name, so "glm53-tiny" for the default model),
max_num_seqs (16), max_model_len (8192; tokens of prompt and output per request), max_queue (256),
prefill_chunk (256 rows per step), speculative_max (most MTP drafts a request may ask for; default 4 with an MTP
layer, else 0), prefix_cache_bytes (512 MiB), max_body_bytes (16 MiB), policy_dir (scripts/policies),
allowed_origins (the origins whose pages may call the server from a browser, CORS: a list of origins, or { "*" }
for any, the default as in vLLM; {} for none), access_log (default true: a line per request, as uvicorn writes
under vLLM), stats_interval (seconds between throughput lines while requests run, as vLLM's; default 10, 0 = none),
log (function(level, message)), plus listener timeouts / limits (glm53.server.listener).

Routes: app:route(method, path, handler) with handler(req, res, app); a path starting with "^" is a Lua pattern
whose captures arrive in req.params. A route's errors: app:fail(req, res, status, message[, param, code]) answers
in OpenAI's shape ({"error": {"message", "type", "param", "code"}}), or Anthropic's on /v1/messages routes;
raising params.fail(...) inside a handler does the same. Unknown paths get 404, known paths with another method
405 (with Allow). app:use(fn(req, res, app)) adds middleware, app:admit(fn(job, req)) an admission hook for
generation requests (job: prompt_tokens, max_tokens, n, route, body; return status, message to refuse),
app:policy(name, ctor) a sampling policy by name (requests: "policy": "name" or {"name": ..., options}),
app:draft_policy(name, ctor) a speculative draft policy (requests: "speculative": {"k": 4, "draft": "name"}; besides
those, "threshold" and the policy directory's draft_NAME.lua files: "adaptive", "budget").

Lifecycle: app:start() listens first (one log line says where), then loads the model on a libuv pool thread
(glm53.engine.model.load_async): /health answers 503 while that runs and 200 once the server serves; the
tokenizer loads right after, on the loop (a short pause). app:close() stops like SIGINT does.
]]
local uv = require("luv")
local json = require("glm53.chat.json")
local listener = require("glm53.server.listener")
local params = require("glm53.server.params")
local metrics = require("glm53.server.metrics")

local M = {}

local App = {}
App.__index = App

local function source_root()
    local src = debug.getinfo(1, "S").source
    if src:sub(1, 1) ~= "@" then return "." end
    local root = src:sub(2):match("^(.*)/lua/glm53/server/init%.lua$") or "."
    repeat local before = root; root = root:gsub("[^/]+/%.%./", "", 1) until root == before   -- "scripts/../x" -> "x"
    return (root:gsub("^[^/]+/%.%.$", "."))
end
M.ROOT = source_root()

-- The checkpoint served when opts.model is nil: the bundled model the glm53 commands default to
-- (glm53.cli.common.BUNDLED_MODEL: the trained models/glm53-tiny, docs/tiny-model.md).
M.DEFAULT_MODEL = M.ROOT .. "/models/" .. require("glm53.cli.common").BUNDLED_MODEL

local function default_log(level, message)
    io.stderr:write(os.date("%Y-%m-%d %H:%M:%S"), " glm53.server ", level, ": ", message, "\n")
end

local OPENAI_TYPES = { [400] = "invalid_request_error", [401] = "invalid_request_error", [403] = "permission_error",
                       [404] = "invalid_request_error", [405] = "invalid_request_error", [413] = "invalid_request_error",
                       [429] = "rate_limit_error", [500] = "server_error", [503] = "server_error" }
local ANTHROPIC_TYPES = { [400] = "invalid_request_error", [401] = "authentication_error", [403] = "permission_error",
                          [404] = "not_found_error", [405] = "invalid_request_error", [413] = "request_too_large",
                          [429] = "rate_limit_error", [500] = "api_error", [503] = "overloaded_error" }

function M.new(opts)
    opts = opts or {}
    if type(opts) ~= "table" then error("server.new: opts must be a table", 2) end
    local model_dir = opts.model or M.DEFAULT_MODEL
    local self = setmetatable({
        opts = opts, model_dir = model_dir, log = opts.log or default_log,
        served_model_name = opts.served_model_name or model_dir:gsub("/+$", ""):match("([^/]+)$"),
        max_num_seqs = opts.max_num_seqs or 16, max_model_len = opts.max_model_len or 8192,
        max_queue = opts.max_queue or 256, api_key = opts.api_key,
        policy_dir = opts.policy_dir or (M.ROOT .. "/scripts/policies"),
        allowed_origins = opts.allowed_origins or { "*" }, access_log = opts.access_log ~= false,
        stats_interval = opts.stats_interval or 10,
        routes = {}, pattern_routes = {}, middleware = {}, admission = {}, policies = {}, drafts = {},
        state = "loading", created = os.time(), seed_counter = 0,
    }, App)
    for _, k in ipairs({ "max_num_seqs", "max_model_len", "max_queue" }) do
        if type(self[k]) ~= "number" or self[k] < 1 or self[k] % 1 ~= 0 then
            error("server.new: " .. k .. " must be a positive integer", 2)
        end
    end
    self.registry = metrics.registry({ model_name = self.served_model_name })
    self.registry:gauge("glm53:ready", "1 once the model is loaded and the server serves.", function()
        return self.state == "ready" and 1 or 0
    end)
    require("glm53.server.routes_openai").register(self)
    require("glm53.server.routes_anthropic").register(self)
    require("glm53.server.routes_responses").register(self)
    self:route("GET", "/health", function(req, res) self:health(req, res) end)
    -- vLLM's: /ping as /health (SageMaker probes it, GET or POST); /version the library's version
    self:route("GET", "/ping", function(req, res) self:health(req, res) end)
    self:route("POST", "/ping", function(req, res) self:health(req, res) end)
    self:route("GET", "/version", function(_, res)
        local core = require("glm53.ffi.core")
        self:send(res, 200, { version = core.ffi.string(core.C.glm53_version()) })
    end)
    self:route("GET", "/metrics", function(_, res)
        res:write_head(200, { ["Content-Type"] = metrics.CONTENT_TYPE })
        res:finish(self.registry:render())
    end)
    self:route("GET", "/", function(_, res)
        res:write_head(200, { ["Content-Type"] = "text/html; charset=utf-8", ["Cache-Control"] = "no-cache" })
        res:finish(require("glm53.server.page").html(self))
    end)
    if type(self.allowed_origins) ~= "table" then error("server.new: allowed_origins must be a list", 2) end
    self:use(function(req, res) return self:cors(req, res) end)   -- first: a preflight carries no API key
    self:use(function(req, res) return self:check_key(req, res) end)
    return self
end

---------------------------------------------------------------------------------------------------------------
-- Extension points
---------------------------------------------------------------------------------------------------------------
function App:route(method, path, handler)
    if type(method) ~= "string" or type(path) ~= "string" then error("app:route: method and path are strings", 2) end
    if type(handler) ~= "function" then error("app:route: handler must be a function", 2) end
    method = method:upper()
    if path:sub(1, 1) == "^" then
        for _, r in ipairs(self.pattern_routes) do
            if r.pattern == path then r.methods[method] = handler return self end
        end
        self.pattern_routes[#self.pattern_routes + 1] = { pattern = path, methods = { [method] = handler } }
    else
        self.routes[path] = self.routes[path] or {}
        self.routes[path][method] = handler
    end
    return self
end

function App:use(fn)
    if type(fn) ~= "function" then error("app:use: expected a function", 2) end
    self.middleware[#self.middleware + 1] = fn
    return self
end

function App:admit(fn)
    if type(fn) ~= "function" then error("app:admit: expected a function", 2) end
    self.admission[#self.admission + 1] = fn
    return self
end

function App:policy(name, ctor)
    if type(name) ~= "string" or type(ctor) ~= "function" then error("app:policy: a name and a constructor", 2) end
    self.policies[name] = ctor
    return self
end

function App:draft_policy(name, ctor)
    if type(name) ~= "string" or type(ctor) ~= "function" then error("app:draft_policy: a name and a constructor", 2) end
    self.drafts[name] = ctor
    return self
end

---------------------------------------------------------------------------------------------------------------
-- Replies
---------------------------------------------------------------------------------------------------------------
function App:send(res, status, value, headers)
    local h = { ["Content-Type"] = "application/json" }
    for k, v in pairs(headers or {}) do h[k] = v end
    res:write_head(status, h)
    res:finish(json.encode(value, { compact = true }))
end

-- The error shape of a request: Anthropic's on /v1/messages, else OpenAI's (req.error_shape overrides).
local function shape_of(req)
    if req and req.error_shape then return req.error_shape end
    if req and req.path and req.path:find("^/v1/messages") then return "anthropic" end
    return "openai"
end

function App:error_body(req, status, message, param, code)
    if shape_of(req) == "anthropic" then
        return { type = "error", error = { type = ANTHROPIC_TYPES[status] or "api_error", message = message } }
    end
    return { error = { message = message, type = OPENAI_TYPES[status] or (status >= 500 and "server_error" or
                       "invalid_request_error"), param = param or json.null, code = code or json.null } }
end

-- Answers an error (returns true, so middleware can `return app:fail(...)`).
function App:fail(req, res, status, message, param, code, headers)
    if res.closed or res.finished then return true end
    self:send(res, status, self:error_body(req, status, message, param, code), headers)
    return true
end

---------------------------------------------------------------------------------------------------------------
-- Dispatch
---------------------------------------------------------------------------------------------------------------
function App:match(method, path)
    local want = method == "HEAD" and "GET" or method
    local exact = self.routes[path]
    if exact then
        if exact[want] then return exact[want], {} end
        return nil, nil, exact
    end
    for _, r in ipairs(self.pattern_routes) do
        local caps = { path:match(r.pattern) }
        if caps[1] ~= nil then
            if r.methods[want] then return r.methods[want], caps end
            return nil, nil, r.methods
        end
    end
end

-- The access log: one line per request once its response is sent or abandoned (client address, request line,
-- status, seconds).
function App:log_access(req, res)
    local t0 = uv.hrtime()
    local function line(outcome)
        self.log("info", string.format('%s:%s "%s %s" %d %.3f s%s', tostring(req.remote_addr or "-"),
                                       tostring(req.remote_port or "-"), req.method, req.target or req.path,
                                       res.status or 0, (uv.hrtime() - t0) / 1e9, outcome))
    end
    res:on_finish(function() line("") end)
    res:on_close(function() line(", the connection closed before the end") end)
end

function App:handle(req, res)
    if self.access_log then self:log_access(req, res) end
    local ok, err = xpcall(function()
        for _, fn in ipairs(self.middleware) do
            if fn(req, res, self) then return end
        end
        local handler, caps, others = self:match(req.method, req.path)
        if handler then
            req.params = caps
            return handler(req, res, self)
        end
        if others then
            local allow = {}
            for m in pairs(others) do allow[#allow + 1] = m end
            table.sort(allow)
            return self:fail(req, res, 405, "method " .. req.method .. " is not allowed on " .. req.path, nil, nil,
                             { Allow = table.concat(allow, ", ") })
        end
        return self:fail(req, res, 404, "no route for " .. req.method .. " " .. req.path)
    end, function(e)
        if params.is_error(e) then return e end
        return debug.traceback(e)
    end)
    if not ok then
        if params.is_error(err) then return self:fail(req, res, err.status, err.message, err.param, err.code) end
        self.log("error", req.method .. " " .. req.path .. ": " .. tostring(err))
        return self:fail(req, res, 500, "internal server error")
    end
end

-- Middleware: CORS (the Fetch standard's), for pages of another origin calling the server from a browser. A request
-- with an Origin among allowed_origins gets Access-Control-Allow-Origin on its response ("*" when any origin is
-- allowed, else the origin itself, with Vary: Origin); a preflight (OPTIONS with Access-Control-Request-Method) of
-- such an origin is answered here: 204 with the methods and the headers it asked for. A preflight of another
-- origin gets 403; its other requests go on without the header, so the browser keeps their answers from the page.
function App:cors(req, res)
    local origin = req.headers["origin"]
    if not origin then return false end
    local allow
    for _, o in ipairs(self.allowed_origins) do
        if o == "*" then allow = "*" break end
        if o == origin then allow = origin break end
    end
    local preflight = req.method == "OPTIONS" and req.headers["access-control-request-method"] ~= nil
    if not allow then
        if preflight then return self:fail(req, res, 403, "origin " .. origin .. " is not allowed (--allowed-origins)") end
        return false
    end
    res:set_header("Access-Control-Allow-Origin", allow)
    if allow ~= "*" then res:set_header("Vary", "Origin") end
    if not preflight then return false end
    res:write_head(204, { ["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS",
                          ["Access-Control-Allow-Headers"] = req.headers["access-control-request-headers"] or "*",
                          ["Access-Control-Max-Age"] = "600" })
    res:finish()
    return true
end

-- Middleware: the API key, when one is set, guards /v1/* and the tokenizer routes (/, /health and /metrics stay
-- open, as in vLLM). Accepts Authorization: Bearer KEY and Anthropic's x-api-key: KEY.
function App:check_key(req, res)
    if not self.api_key then return false end
    local p = req.path
    if not (p:find("^/v1/") or p == "/tokenize" or p == "/detokenize") then return false end
    local auth = req.headers["authorization"]
    local bearer = auth and auth:match("^[Bb]earer%s+(.-)%s*$")
    if bearer == self.api_key or req.headers["x-api-key"] == self.api_key then return false end
    local msg = (auth or req.headers["x-api-key"]) and "invalid API key" or
                "missing API key (send Authorization: Bearer KEY or x-api-key: KEY)"
    return self:fail(req, res, 401, msg, nil, "invalid_api_key", { ["WWW-Authenticate"] = "Bearer" })
end

-- 200 {"status": "ok"} once serving, 503 with the error shape while loading (or after a failed load).
function App:health(req, res)
    if self.state == "ready" then return self:send(res, 200, { status = "ok" }) end
    local msg = self.state == "loading" and "the model is loading" or ("the model failed to load: " .. tostring(self.load_error))
    self:send(res, 503, { status = self.state, error = { message = msg, type = "unavailable_error", param = json.null,
                                                             code = 503 } })
end

-- Routes that need the engine call this first: false (and a 503 sent) until the model is loaded.
function App:ready_or_fail(req, res)
    if self.state == "ready" then return true end
    self:fail(req, res, 503, self.state == "loading" and "the model is still loading; retry shortly" or
              "the model failed to load", nil, nil, { ["Retry-After"] = "1" })
    return false
end

---------------------------------------------------------------------------------------------------------------
-- Policies and speculative decoding per request
---------------------------------------------------------------------------------------------------------------
-- Whether v can be called: a function, or a table whose metatable has __call (scripts/policies/json.lua is one,
-- so that the module also exposes its automaton).
local function callable(v)
    if type(v) == "function" then return true end
    local mt = type(v) == "table" and getmetatable(v)
    return mt and type(mt.__call) == "function" or false
end

-- The constructor policy_dir/FILE.lua returns, kept in cache[name]; nil when there is no such file. A file that
-- does not load, or returns no constructor, fails the request (param: the request field; what: "policy" or
-- "draft policy").
local function load_policy_file(app, cache, name, file, param, what)
    local chunk = loadfile(app.policy_dir .. "/" .. file .. ".lua")
    if not chunk then return nil end
    local ok, made = pcall(chunk)
    if not ok then params.fail(400, what .. " '" .. name .. "' did not load: " .. tostring(made), param) end
    if not callable(made) then
        params.fail(400, what .. " '" .. name .. "' did not load: " .. file .. ".lua returned a " .. type(made) ..
                    ", not a policy constructor (a function of the options)", param)
    end
    cache[name] = made
    return made
end

-- A request's "policy" ("name" or {"name": ..., options...}) -> a constructor of one policy per stream, or nil.
-- extra: options the server adds (the tool_choice policy's names, say).
function App:resolve_policy(spec, extra)
    if spec == nil then return nil end
    local name, popts = spec, {}
    if type(spec) == "table" then
        name = params.value(spec, "name")
        for _, k in ipairs(json.keys(spec)) do if k ~= "name" then popts[k] = params.value(spec, k) end end
    end
    if type(name) ~= "string" or not name:match("^[%w_]+$") then
        params.fail(400, "'policy' must be a policy name or {\"name\": ..., options}", "policy")
    end
    local ctor = self.policies[name] or load_policy_file(self, self.policies, name, name, "policy", "policy")
    if not ctor then params.fail(400, "unknown policy '" .. name .. "'", "policy") end
    for k, v in pairs(extra or {}) do popts[k] = v end
    popts.vocab_size = self.model.vocab_size
    popts.tokenizer = self.tokenizer
    local ok, probe = pcall(ctor, popts)   -- bad options fail the request now, not on the engine loop
    if not ok then params.fail(400, "policy '" .. name .. "': " .. tostring(probe):gsub("^[^:]*:%d+: ", ""), "policy") end
    return function() return ctor(popts) end
end

-- A request's forced tool call (OpenAI tool_choice "required" or a named function, Anthropic "any" or "tool"):
-- names lists the functions the call may name; thinking, whether the prompt left the think block open. The
-- request's own "policy" and a forced call do not combine (400).
function App:tool_choice_policy(g, names, thinking, param)
    if g.new_policy then
        params.fail(400, "'" .. param .. "' that forces a tool call cannot be combined with 'policy' or JSON mode", param)
    end
    g.new_policy = self:resolve_policy("tool_choice", { names = names, thinking = thinking })
end

local BUILTIN_DRAFTS = {
    threshold = function(opts)
        return require("glm53.generation.driver").draft_threshold(tonumber(opts.threshold) or 0.3)
    end,
}

-- A request's "speculative" (K, or {"k": K, "draft": name, options...}) -> k and a draft policy constructor.
function App:resolve_speculative(spec)
    if spec == nil then return 0, nil end
    local k, draft, dopts = spec, nil, {}
    if type(spec) == "table" then
        k = params.value(spec, "k")
        draft = params.value(spec, "draft")
        for _, key in ipairs(json.keys(spec)) do dopts[key] = params.value(spec, key) end
    end
    if type(k) ~= "number" or k % 1 ~= 0 or k < 0 then
        params.fail(400, "'speculative' must be a draft depth K >= 0 or {\"k\": K, \"draft\": name}", "speculative")
    end
    if k > self.speculative_max then
        params.fail(400, "'speculative' k = " .. k .. " exceeds this server's limit of " .. self.speculative_max ..
                    (self.model:n_mtp() == 0 and " (the model has no MTP layer)" or " (--speculative-max)"),
                    "speculative")
    end
    if draft == nil or draft == "fixed" or k == 0 then return k, nil end
    if type(draft) ~= "string" then params.fail(400, "'speculative.draft' must be a name", "speculative") end
    -- registered, built in, or one the command line's --draft-policy NAME loads: draft_NAME.lua of the policy directory
    local ctor = self.drafts[draft] or BUILTIN_DRAFTS[draft] or (draft:match("^[%w_]+$") and
        load_policy_file(self, self.drafts, draft, "draft_" .. draft, "speculative", "draft policy"))
    if not ctor then params.fail(400, "unknown draft policy '" .. draft .. "'", "speculative") end
    local ok, err = pcall(ctor, dopts)
    if not ok then params.fail(400, "draft policy '" .. draft .. "': " .. tostring(err), "speculative") end
    return k, function() return ctor(dopts) end
end

-- A seed for requests that give none (each request its own stream of draws).
function App:random_seed()
    self.seed_counter = self.seed_counter + 1
    if not self.seed_base then
        local f = io.open("/dev/urandom", "rb")
        local b = f and f:read(4) or tostring(os.time())
        if f then f:close() end
        self.seed_base = (b:byte(1) * 16777216 + b:byte(2) * 65536 + b:byte(3) * 256 + b:byte(4)) % 2 ^ 31
    end
    return (self.seed_base + self.seed_counter * 2654435761) % 2 ^ 48
end

-- Runs the admission hooks for a parsed generation request; raises the API error of the first refusal.
function App:check_admission(job, req)
    for _, fn in ipairs(self.admission) do
        local status, message = fn(job, req, self)
        if status then params.fail(status, message or "request refused") end
    end
end

---------------------------------------------------------------------------------------------------------------
-- Lifecycle
---------------------------------------------------------------------------------------------------------------
function App:start(on_ready)
    local opts = self.opts
    local limits = {}
    for k, v in pairs(opts.limits or {}) do limits[k] = v end
    limits.body_bytes = opts.max_body_bytes or limits.body_bytes
    local server, err = listener.listen({ host = opts.host, port = opts.port, limits = limits,
                                          timeouts = opts.timeouts, log = self.log, signals = false },
                                        function(req, res) self:handle(req, res) end)
    if not server then return nil, err end
    self.server = server
    -- SIGINT / SIGTERM: stop accepting, let responses in flight finish (a second signal: close everything now)
    self.signals = {}
    if opts.signals ~= false then
        for _, name in ipairs({ "sigint", "sigterm" }) do
            local sig = uv.new_signal()
            sig:start(name, function()
                if self.closing then
                    self.log("warn", name .. " again: closing every connection now")
                    return self.server:close(0)
                end
                self.log("info", name .. ": shutting down")
                self:close()
            end)
            self.signals[#self.signals + 1] = sig
        end
    end
    self.host, self.port = server.host, server.port
    local t0 = uv.hrtime()
    self.log("info", "loading " .. self.model_dir .. " (/health answers 503 until it serves)")
    local load_opts = { device = opts.device, threads = opts.threads, tp = opts.tp, ep = opts.ep,
                        communicator = opts.communicator }
    require("glm53.engine.model").load_async(uv, self.model_dir, load_opts,
        function(m, load_err)
            if self.closing then if m then m:free() end return end
            if not m then return self:load_failed(load_err) end
            local ok, e = pcall(self.serve_model, self, m)
            if not ok then return self:load_failed(e) end
            self.log("info", string.format("model %s loaded in %.2f s; serving as '%s'", self.model_dir,
                                           (uv.hrtime() - t0) / 1e9, self.served_model_name))
            if on_ready then on_ready(self) end
        end)
    return self
end

function App:load_failed(err)
    self.state, self.load_error = "failed", err
    self.log("error", "loading " .. self.model_dir .. " failed: " .. tostring(err))
    if self.opts.exit_on_load_failure ~= false then self:close() end
end

-- Everything that needs the loaded model: tokenizer, stop ids, limits, the scheduler.
function App:serve_model(m)
    local tokenizer = require("glm53.engine.tokenizer")
    local tok = assert(tokenizer.load(self.model_dir .. "/tokenizer.json"))
    self.model, self.tokenizer = m, tok
    self.n_valid = math.min(tok:n_vocab(), m.vocab_size)
    self.stop_ids = assert(require("glm53.generation.defaults").eos_ids(self.model_dir, tok))
    -- (the C config does not carry max_position_embeddings; config.json does)
    local text = require("glm53.util.file").read_file(self.model_dir .. "/config.json")
    local cfg_ok, cfg = pcall(require("cjson").decode, text or "")
    local tc = cfg_ok and type(cfg) == "table" and (cfg.text_config or cfg) or {}
    local max_pos = tonumber(tc.max_position_embeddings) or 0
    if max_pos > 0 and self.max_model_len > max_pos then
        error(string.format("max_model_len %d exceeds the model's max_position_embeddings %d", self.max_model_len, max_pos))
    end
    local spec_max = self.opts.speculative_max
    if spec_max == nil then spec_max = m:n_mtp() > 0 and 4 or 0 end
    if spec_max > 0 and m:n_mtp() == 0 then error("--speculative-max needs a checkpoint with an MTP layer") end
    self.speculative_max = spec_max
    self.scheduler = require("glm53.server.scheduler").new(m, {
        uv = uv, max_num_seqs = self.max_num_seqs, max_queue = self.max_queue, chunk = self.opts.prefill_chunk,
        spec_k = spec_max, capacity = self.max_model_len + spec_max + 1, n_valid = self.n_valid,
        prefix_cache_bytes = self.opts.prefix_cache_bytes, registry = self.registry, log = self.log,
    })
    self.state = "ready"
    if self.stats_interval > 0 then self:start_stats() end
end

-- Every stats_interval seconds in which requests ran: the prompt and generated tokens per second, the running and
-- waiting requests and the cache in use (vLLM's periodic line). The numbers are /metrics' own.
function App:start_stats()
    local sched = self.scheduler
    local last = { t = uv.hrtime(), prompt = 0, generation = 0 }
    self.stats_timer = uv.new_timer()
    self.stats_timer:start(self.stats_interval * 1000, self.stats_interval * 1000, function()
        local now = { t = uv.hrtime(), prompt = sched.mx.prompt:get(), generation = sched.mx.generation:get() }
        local running, waiting = #sched.jobs, sched:waiting()
        if now.prompt ~= last.prompt or now.generation ~= last.generation or running + waiting > 0 then
            local s = (now.t - last.t) / 1e9
            self.log("info", string.format("prompt %.1f tok/s, generation %.1f tok/s; running %d, waiting %d " ..
                                           "requests; cache %.1f MB (prefixes %.1f MB)", (now.prompt - last.prompt) / s,
                                           (now.generation - last.generation) / s, running, waiting,
                                           self.model:cache_bytes() / 1e6, sched.cache.bytes / 1e6))
        end
        last = now
    end)
end

function App:close(grace)
    if self.closing then return end
    self.closing = true
    local function done()
        if self.stats_timer then self.stats_timer:close() end
        self.stats_timer = nil
        if self.scheduler then self.scheduler:close() end
        for _, sig in ipairs(self.signals or {}) do sig:close() end
        self.signals = {}
    end
    if self.server then self.server:close(grace, done) else done() end
end

return M
