#!/usr/bin/env luajit
--[==[
load.lua - N concurrent streaming chat clients against the server for a while: every request must end with
data: [DONE], none may fail, and the server's resident memory must stay flat after warm-up.

    luajit tests/server/load.lua [--clients 64] [--seconds 120] [--warmup 0.25] [--max-tokens 64]
                                 [--server-arg ARG ...] [--json]

It starts scripts/serve.lua itself (on a free port, with the --server-arg arguments), runs the clients in one luv
loop (each sends a request, reads the stream to its end, sends the next), samples the server's VmRSS every
second, and prints: requests, failures, streams without [DONE], generated tokens per second, time to first
token (p50 / p99), and RSS at the end of warm-up (--warmup x the run) against the largest and the last sample
after it. Exit status 1 when a request failed, a stream ended without [DONE], or RSS grew by 10% or more.
]==]
local script = arg and arg[0] or "tests/server/load.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../../lua/?.lua;" .. dir .. "/../../lua/?/init.lua;" .. dir .. "/../lua/?.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse_or_exit(arg, {
    prog = "load.lua",
    usage = "luajit tests/server/load.lua [--clients 64] [--seconds 120] [options]",
    options = {
        { "clients", type = "integer", min = 1, default = 64 },
        { "seconds", type = "number", gt = 0, default = 120 },
        { "warmup", type = "number", min = 0, max = 1, default = 0.25,
          help = "fraction of the run before the RSS baseline" },
        { "max_tokens", type = "integer", min = 1, default = 64,
          help = "output tokens per request (random 1/4 .. 1x)" },
        { "server_arg", list = true, metavar = "ARG", help = "an argument for scripts/serve.lua" },
        { "json", flag = true, help = "end with a JSON line of the figures" },
    },
})

local uv = require("luv")
local cjson = require("cjson")
local H = require("server_helpers")

local function rss_kb(pid)
    local f = io.open("/proc/" .. pid .. "/status", "r")
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return tonumber(s:match("VmRSS:%s*(%d+)"))
end

local srv = H.start(args.server_arg)
uv.update_time()   -- timers count from now, not from when luv was loaded
local t_start = uv.hrtime() / 1e9
local t_end = t_start + args.seconds
local t_warm = t_start + args.seconds * args.warmup
local stats = { requests = 0, failed = 0, no_done = 0, tokens = 0, ttft = {}, errors = {} }
local rss = { samples = {}, warm = nil }
math.randomseed(7)

local WORDS = { "weather", "rain", "sun", "tomorrow", "city", "wind", "cloud", "forecast", "cold", "warm" }
local function prompt()
    local n, w = math.random(3, 30), {}
    for i = 1, n do w[i] = WORDS[math.random(#WORDS)] end
    return table.concat(w, " ")
end

local active = 0
local function client()
    if uv.hrtime() / 1e9 >= t_end then return end
    active = active + 1
    local t0 = uv.hrtime()
    local first
    local body = {
        messages = { { role = "system", content = "You answer questions about the weather." },
                     { role = "user", content = prompt() } },
        max_tokens = math.random(math.max(1, math.floor(args.max_tokens / 4)), args.max_tokens),
        temperature = 1, stream = true, stream_options = { include_usage = true },
    }
    H.raw(srv.port, "POST", "/v1/chat/completions", body, function(all)
        if not first and all:find("data: {", 1, true) then first = uv.hrtime() end
    end, function(all, err)
        active = active - 1
        stats.requests = stats.requests + 1
        local status = tonumber(all:match("^HTTP/1%.1 (%d+)"))
        local text = H.dechunk(all)
        if err or status ~= 200 then
            stats.failed = stats.failed + 1
            if #stats.errors < 5 then stats.errors[#stats.errors + 1] = tostring(err or all:sub(1, 300)) end
        elseif not text:find("data: %[DONE%]\n\n$") then
            stats.no_done = stats.no_done + 1
            if #stats.errors < 5 then stats.errors[#stats.errors + 1] = "no [DONE]: " .. text:sub(-300) end
        else
            local usage = text:match('"usage":(%b{})')
            if usage then stats.tokens = stats.tokens + (cjson.decode(usage).completion_tokens or 0) end
            if first then stats.ttft[#stats.ttft + 1] = (first - t0) / 1e9 end
        end
        client()
    end)
end

local sampler = uv.new_timer()
sampler:start(1000, 1000, function()
    local now = uv.hrtime() / 1e9
    local kb = rss_kb(srv.pid)
    if kb then
        rss.samples[#rss.samples + 1] = { t = now - t_start, kb = kb }
        if not rss.warm and now >= t_warm then rss.warm = kb end
    end
    if now >= t_end then sampler:stop() end
end)
for _ = 1, args.clients do client() end
uv.run()
sampler:close()
uv.run()
local elapsed = uv.hrtime() / 1e9 - t_start
local final_rss = rss_kb(srv.pid)
local metrics = H.metrics(srv)
srv.stop()

table.sort(stats.ttft)
local function pct(p) return stats.ttft[math.max(1, math.ceil(#stats.ttft * p))] or 0 end
local max_after = 0
for _, s in ipairs(rss.samples) do
    if s.t >= args.seconds * args.warmup then max_after = math.max(max_after, s.kb) end
end
local warm = rss.warm or final_rss
local growth = warm and warm > 0 and (math.max(max_after, final_rss or 0) - warm) / warm or 0
local result = {
    clients = args.clients, seconds = elapsed, requests = stats.requests, failed = stats.failed,
    without_done = stats.no_done, tokens = stats.tokens, tokens_per_s = stats.tokens / elapsed,
    ttft_p50 = pct(0.5), ttft_p99 = pct(0.99), rss_warm_kb = warm, rss_max_after_kb = max_after,
    rss_final_kb = final_rss, rss_growth = growth,
    prefix_cache_hits = H.metric(metrics, "vllm:prefix_cache_hits_total"),
}
print(string.format("%d clients, %.0f s: %d requests, %d failed, %d without [DONE]; %d tokens (%.0f tok/s); " ..
                    "TTFT p50 %.3f s, p99 %.3f s", result.clients, result.seconds, result.requests, result.failed,
                    result.without_done, result.tokens, result.tokens_per_s, result.ttft_p50, result.ttft_p99))
print(string.format("RSS after warm-up %.1f MB, largest after %.1f MB, final %.1f MB: growth %+.1f%%",
                    warm / 1024, max_after / 1024, (final_rss or 0) / 1024, growth * 100))
for _, e in ipairs(stats.errors) do print("error: " .. e) end
if args.json then print(cjson.encode(result)) end
local ok = stats.failed == 0 and stats.no_done == 0 and growth < 0.10 and stats.requests > 0
os.exit(ok and 0 or 1)
