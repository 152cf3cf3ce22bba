#!/usr/bin/env luajit
--[==[
serve.lua - an OpenAI- and Anthropic-compatible HTTP server for a GLM-5.3 checkpoint (docs/server.md).

    luajit scripts/serve.lua [--model DIR] [--host 127.0.0.1] [--port 8080] [--device cpu|cuda] [--api-key KEY]
                             [--served-model-name NAME] [--max-num-seqs N] [--max-model-len N] [--max-queue N]
                             [--script app.lua ...]

--model defaults to the bundled models/tiny; the model name to the directory's base name. The server listens
first and loads the model on a libuv pool thread: GET /health answers 503 until it serves, then 200. Each
--script FILE is a Lua file returning function(app) that extends the server before it starts (routes, limits,
policies: glm53.server). SIGINT or SIGTERM stops it gracefully (a second one at once).
]==]
local script = arg and arg[0] or "scripts/serve.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse(arg, {
    usage = "luajit scripts/serve.lua [--model DIR] [--host 127.0.0.1] [--port 8080] [options]",
    options = {
        model = { metavar = "DIR", help = "checkpoint directory (default: the bundled models/tiny)" },
        host = { default = "127.0.0.1", help = "IP address to bind (0.0.0.0 or :: for every interface)" },
        port = { type = "number", default = 8080, help = "0 picks a free port" },
        device = { default = "cpu", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0, help = "CPU threads of the engine (0 = the physical cores)" },
        api_key = { metavar = "KEY", help = "require Authorization: Bearer KEY (or x-api-key) on /v1/*" },
        served_model_name = { metavar = "NAME", help = "model name clients use (default: the directory's name)" },
        max_num_seqs = { type = "number", default = 16, help = "sequences in the running batch" },
        max_model_len = { type = "number", default = 8192, help = "prompt + output tokens per request" },
        max_queue = { type = "number", default = 256, help = "requests waiting for a slot; more get 429" },
        prefill_chunk = { type = "number", default = 256, help = "prompt rows per step (chunked prefill)" },
        speculative_max = { type = "number", help = "most MTP drafts a request may ask for (default 4 with an " ..
                                                    "MTP layer, else 0)" },
        prefix_cache_mb = { type = "number", default = 512, help = "memory for cached prompt prefixes" },
        max_body_mb = { type = "number", default = 16, help = "largest request body" },
        policy_dir = { metavar = "DIR", help = "where request policies are found (default scripts/policies)" },
        script = { list = true, metavar = "FILE", help = "a Lua file returning function(app)" },
    },
})

local uv = require("luv")
local server = require("glm53.server")

local function die(msg)
    io.stderr:write("serve.lua: ", msg, "\n")
    os.exit(1)
end

local ok, app = pcall(server.new, {
    model = args.model, host = args.host, port = args.port, device = args.device, threads = args.threads,
    api_key = args.api_key, served_model_name = args.served_model_name, max_num_seqs = args.max_num_seqs,
    max_model_len = args.max_model_len, max_queue = args.max_queue, prefill_chunk = args.prefill_chunk,
    speculative_max = args.speculative_max, prefix_cache_bytes = args.prefix_cache_mb * 1024 * 1024,
    max_body_bytes = math.floor(args.max_body_mb * 1024 * 1024), policy_dir = args.policy_dir,
})
if not ok then die(tostring(app):gsub("^[^:]*:%d+: ", "")) end
for _, path in ipairs(args.script) do
    local chunk, err = loadfile(path)
    if not chunk then die("--script: " .. err) end
    local made, extend = pcall(chunk)
    if not made or type(extend) ~= "function" then die("--script " .. path .. ": must return function(app)") end
    local ran, run_err = pcall(extend, app)
    if not ran then die("--script " .. path .. ": " .. tostring(run_err)) end
end
local started, err = app:start()
if not started then die(err) end
uv.run()
if app.state == "failed" then os.exit(1) end
