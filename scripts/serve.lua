#!/usr/bin/env luajit
--[==[
serve.lua - an OpenAI- and Anthropic-compatible HTTP server for a GLM-5.3 checkpoint (docs/server.md).

    luajit scripts/serve.lua [--model DIR] [--host 127.0.0.1] [--port 8080] [--device cpu|cuda] [--tp N] [--ep N]
                             [--api-key KEY] [--served-model-name NAME] [--max-num-seqs N] [--max-model-len N]
                             [--max-queue N] [--allowed-origins LIST] [--script app.lua ...]

--model defaults to the bundled models/glm53-tiny; the model name to the directory's base name. --tp, --ep and
--communicator spread the model over ranks (docs/multi-gpu.md), as on every command that loads one. The server
listens first and loads the model on a libuv pool thread: GET /health answers 503 until it serves, then 200. Each
--script FILE is a Lua file returning function(app) that extends the server before it starts (routes, limits,
policies: glm53.server). SIGINT or SIGTERM stops it gracefully (a second one at once).
]==]
local script = arg and arg[0] or "scripts/serve.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local command = {
    prog = "serve.lua",
    usage = "luajit scripts/serve.lua [--model DIR] [--host 127.0.0.1] [--port 8080] [options]",
    summary = "an OpenAI- and Anthropic-compatible HTTP server with a chat page, scriptable in Lua (docs/server.md)",
    options = common.options(common.model_options(), {
        "Server:",
        { "host", default = "127.0.0.1", help = "IP address to bind (0.0.0.0 or :: for every interface)" },
        { "port", type = "integer", min = 0, max = 65535, default = 8080, help = "0 picks a free port" },
        { "api_key", metavar = "KEY", help = "require Authorization: Bearer KEY (or x-api-key) on /v1/*" },
        { "served_model_name", metavar = "NAME", help = "model name clients use (default: the directory's name)" },
        { "script", list = true, metavar = "FILE", help = "a Lua file returning function(app)" },
        { "policy_dir", metavar = "DIR", help = "where request policies are found (default scripts/policies)" },
        { "allowed_origins", metavar = "LIST", default = "*",
          help = "origins whose pages may call the server from a browser (CORS): *, comma-separated origins, or none" },
        { "no_access_log", flag = true, help = "no log line per request" },
        { "stats_interval", type = "number", min = 0, default = 10,
          help = "seconds between throughput lines while requests run (0: none)" },
        "Limits and scheduling:",
        { "max_num_seqs", type = "integer", min = 1, default = 16, help = "sequences in the running batch" },
        { "max_model_len", type = "integer", min = 2, default = 8192, help = "prompt + output tokens per request" },
        { "max_queue", type = "integer", min = 0, default = 256, help = "requests waiting for a slot; more get 429" },
        { "prefill_chunk", type = "integer", min = 1, default = 256, help = "prompt rows per step (chunked prefill)" },
        { "speculative_max", type = "integer", min = 0,
          help = "most MTP drafts a request may ask for (default 4 with an MTP layer, else 0)" },
        { "prefix_cache_mb", type = "number", min = 0, default = 512, help = "memory for cached prompt prefixes" },
        { "max_body_mb", type = "number", gt = 0, default = 16, help = "largest request body" },
    }),
}

-- --allowed-origins: "*", "none", or origins separated by commas -> the list server.new takes.
local function origins(list)
    local out = {}
    if list == "none" then return out end
    for o in list:gmatch("[^,%s]+") do out[#out + 1] = o end
    return out
end

function command.run(args)
    local uv = require("luv")
    local server = require("glm53.server")
    local made, app = pcall(server.new, {
        model = args.model, host = args.host, port = args.port, device = args.device, threads = args.threads,
        tp = args.tp, ep = args.ep, communicator = args.communicator,
        api_key = args.api_key, served_model_name = args.served_model_name, max_num_seqs = args.max_num_seqs,
        max_model_len = args.max_model_len, max_queue = args.max_queue, prefill_chunk = args.prefill_chunk,
        speculative_max = args.speculative_max, prefix_cache_bytes = math.floor(args.prefix_cache_mb * 1024 * 1024),
        max_body_bytes = math.floor(args.max_body_mb * 1024 * 1024), policy_dir = args.policy_dir,
        allowed_origins = origins(args.allowed_origins), access_log = not args.no_access_log,
        stats_interval = args.stats_interval,
    })
    if not made then cli.fail(cli.one_line(app)) end
    for _, path in ipairs(args.script) do
        local chunk, err = loadfile(path)
        if not chunk then cli.fail("--script: " .. err) end
        local loaded, extend = pcall(chunk)
        if not loaded or type(extend) ~= "function" then
            cli.fail("--script " .. path .. ": must return function(app)")
        end
        local ran, run_err = pcall(extend, app)
        if not ran then cli.fail("--script " .. path .. ": " .. cli.one_line(run_err)) end
    end
    local started, err = app:start()
    if not started then return nil, err end
    uv.run()
    return app.state == "failed" and 1 or 0
end

os.exit(cli.run(command, arg))
