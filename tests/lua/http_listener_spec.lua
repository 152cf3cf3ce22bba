-- glm53.server.listener black-box: a real server on a loopback ephemeral port inside this process's
-- luv loop, driven by real clients: curl (spawned through luv) and raw luv TCP sockets for input curl
-- will not send.  Shutdown by signal runs the server in a child luajit (http_listener_child.lua).
local uv = require("luv")
local cjson = require("cjson")
local listener = require("glm53.server.listener")
local sse = require("glm53.server.sse")

local LUAJIT = uv.exepath()

-- Runs body(ctx) inside the loop until ctx.done() or `seconds` pass, then closes every handle left.
-- Errors in callbacks wrapped by ctx.wrap fail the test instead of ending the process.
local function run(seconds, body)
    local ctx = { logs = {}, finished = false }
    function ctx.wrap(fn)
        return function(...)
            local ok, err = xpcall(fn, debug.traceback, ...)
            if not ok and not ctx.failure then
                ctx.failure = err
                uv.stop()
            end
        end
    end
    function ctx.done()
        ctx.finished = true
        uv.stop()
    end
    function ctx.countdown(n)              -- a function that ends the run on its n-th call
        return function()
            n = n - 1
            if n == 0 then ctx.done() end
        end
    end
    function ctx.log(level, message) ctx.logs[#ctx.logs + 1] = level .. ": " .. message end
    function ctx.after(ms, fn)
        local t = uv.new_timer()
        t:start(ms, 0, ctx.wrap(function() t:close(); fn() end))
        return t
    end
    function ctx.listen(opts, handler)
        opts.port, opts.log, opts.signals = 0, ctx.log, false
        local server = assert(listener.listen(opts, handler))
        ctx.server = server
        return server
    end
    -- Timers count from the loop's clock, last updated when the loop last ran (maybe many seconds and spec files
    -- ago): bring it to now, or the guard starts in the past and stops the loop at once.
    uv.update_time()
    local guard = uv.new_timer()
    guard:start(seconds * 1000, 0, function() uv.stop() end)
    ctx.wrap(body)(ctx)
    if not ctx.failure then uv.run() end
    guard:close()
    uv.walk(function(h) if not h:is_closing() then h:close() end end)
    uv.run()
    if ctx.failure then error(ctx.failure, 0) end
    assert(ctx.finished, "timed out after " .. seconds .. " s; log:\n" .. table.concat(ctx.logs, "\n"))
    return ctx
end

-- Spawns a program; on_exit(code, stdout, stderr) once it has exited and both pipes are drained.
local function spawn(ctx, file, args, on_exit, on_stdout, on_stderr)
    local out, err = uv.new_pipe(false), uv.new_pipe(false)
    local got, left, code = { {}, {} }, 3, nil
    local function part_done()
        left = left - 1
        if left == 0 then on_exit(code, table.concat(got[1]), table.concat(got[2])) end
    end
    local proc
    proc = assert(uv.spawn(file, { args = args, stdio = { nil, out, err } }, ctx.wrap(function(c)
        code = c
        proc:close()
        part_done()
    end)))
    for i, pipe in ipairs({ out, err }) do
        local watcher = i == 1 and on_stdout or on_stderr
        pipe:read_start(ctx.wrap(function(_, data)
            if data then
                got[i][#got[i] + 1] = data
                if watcher then watcher(table.concat(got[i])) end
            else
                pipe:close()
                part_done()
            end
        end))
    end
    return proc
end

local function curl(ctx, args, on_exit, on_stdout)
    local full = { "-s", "--noproxy", "*" }
    for _, a in ipairs(args) do full[#full + 1] = a end
    return spawn(ctx, "curl", full, on_exit, on_stdout)
end

local function url(server, path) return "http://127.0.0.1:" .. server.port .. path end

-- A raw client: c.data collects what arrives, c.on_data(all) and c.on_end(all, err) watch it.
local function connect(ctx, port, on_connect)
    local c = { tcp = uv.new_tcp(), data = {}, ended = false }
    function c.all() return table.concat(c.data) end
    function c.send(bytes) c.tcp:write(bytes) end
    c.tcp:connect("127.0.0.1", port, ctx.wrap(function(cerr)
        assert(not cerr, cerr)
        c.tcp:read_start(ctx.wrap(function(rerr, chunk)
            if chunk then
                c.data[#c.data + 1] = chunk
                if c.on_data then c.on_data(c.all()) end
            else
                c.ended, c.err = true, rerr
                c.tcp:close()
                if c.on_end then c.on_end(c.all(), rerr) end
            end
        end))
        on_connect(c)
    end))
    return c
end

local function status_of(response) return tonumber(response:match("^HTTP/1%.%d (%d%d%d)")) end

local function json_body(response)
    return cjson.decode(response:match("\r\n\r\n(.*)$"))
end

local function errors_logged(ctx)
    local out = {}
    for _, l in ipairs(ctx.logs) do if l:find("^error") then out[#out + 1] = l end end
    return out
end

local function hello(req, res)
    res:write_head(200, { ["Content-Type"] = "text/plain" })
    res:finish(req.method .. " " .. req.path .. " " .. #req.body .. " " .. tostring(req.remote_port) .. "\n")
end

-- One raw connection to a fresh server: sends `input` (bytes, or function(c) that sends), collects
-- everything until the server closes.  Returns the run's ctx with ctx.all.
local function exchange(opts, handler, input)
    return run(10, function(ctx)
        local server = ctx.listen(opts, handler)
        connect(ctx, server.port, function(c)
            if type(input) == "function" then input(c) else c.send(input) end
            c.on_end = function(all)
                ctx.all = all
                ctx.done()
            end
        end)
    end)
end

-- The bodies in a run of responses, each matched by `pattern` right after its head.
local function bodies(all, pattern)
    local out = {}
    for b in all:gmatch("\r\n\r\n(" .. pattern .. ")") do out[#out + 1] = b end
    return out
end

describe("listener with curl", function()
    it("logs where it listens and keeps the connection alive between requests", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, hello)
            curl(ctx, { "-v", url(server, "/a"), "--next", "--data", "xyz", url(server, "/b"), "--next", url(server, "/c") },
                function(code, out, err)
                    ctx.code, ctx.out, ctx.err = code, out, err
                    ctx.done()
                end)
        end)
        assert.are.equal(0, ctx.code, ctx.err)
        assert.truthy(ctx.logs[1]:find("^info: listening on http://127%.0%.0%.1:%d+$"), ctx.logs[1])
        local _, reused = ctx.err:gsub("Re%-using existing connection", "")
        assert.are.equal(2, reused, ctx.err)
        local ports = {}
        for method, path, n, port in ctx.out:gmatch("(%u+) (%S+) (%d+) (%d+)\n") do
            ports[#ports + 1] = port
            assert.are.equal(path == "/b" and "POST" or "GET", method)
        end
        assert.are.equal(3, #ports)
        assert.are.equal(ports[1], ports[2])           -- the server saw one client socket
        assert.are.equal(ports[1], ports[3])
        assert.are.same({}, errors_logged(ctx))
    end)

    it("streams a chunked SSE response as the handler writes it", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, function(_, res)
                res:write_head(200, sse.headers())
                local n, timer = 0, uv.new_timer()
                timer:start(0, 30, function()
                    n = n + 1
                    if n <= 3 then
                        res:write(sse.event(cjson.encode({ n = n })))
                    else
                        timer:close()
                        res:finish(sse.DONE)
                    end
                end)
            end)
            curl(ctx, { "-v", "-N", url(server, "/v1/chat/completions") }, function(code, out, err)
                ctx.code, ctx.out, ctx.err = code, out, err
                ctx.done()
            end)
            ctx.raw = {}
            connect(ctx, server.port, function(c)
                c.send("GET /raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                c.on_end = function(all) ctx.raw = all end
            end)
        end)
        assert.are.equal(0, ctx.code)
        assert.truthy(ctx.err:find("< Transfer%-Encoding: chunked"))
        assert.truthy(ctx.err:find("< Content%-Type: text/event%-stream"))
        assert.are.equal('data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\ndata: [DONE]\n\n', ctx.out)
        -- the bytes on the wire: one chunk per write, then the last chunk
        assert.truthy(ctx.raw:find('\r\n\r\nf\r\ndata: {"n":1}\n\n\r\nf\r\ndata: {"n":2}\n\n\r\n', 1, true), ctx.raw)
        assert.are.equal("\r\n0\r\n\r\n", ctx.raw:sub(-7))
    end)

    it("answers HEAD with headers only and HTTP/1.0 without chunks", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, function(req, res)
                res:write_head(200, { ["Content-Type"] = "text/plain" })
                if req.path == "/stream" then
                    res:write("part1,")
                    return res:finish("part2")
                end
                res:finish("hello")
            end)
            local one_done = ctx.countdown(2)
            curl(ctx, { "-I", url(server, "/") }, function(code, out)
                ctx.head_code, ctx.head_out = code, out
                one_done()
            end)
            curl(ctx, { "-0", "-v", url(server, "/stream") }, function(code, out, err)
                ctx.old_code, ctx.old_out, ctx.old_err = code, out, err
                one_done()
            end)
        end)
        assert.are.equal(0, ctx.head_code)
        assert.truthy(ctx.head_out:find("^HTTP/1.1 200 OK\r\n"))
        assert.truthy(ctx.head_out:find("Content-Length: 5\r\n", 1, true))
        assert.is_nil(ctx.head_out:find("hello", 1, true))
        assert.are.equal(0, ctx.old_code)
        assert.are.equal("part1,part2", ctx.old_out)
        assert.is_nil(ctx.old_err:find("chunked", 1, true))
        assert.truthy(ctx.old_err:find("< Connection: close", 1, true))
    end)

    it("lets a writer wait for a slow reader instead of queueing without bound", function()
        local CHUNK = string.rep("x", 64 * 1024)
        local high = 128 * 1024
        local stats = { sent = 0, blocked = 0, max_queue = 0 }
        local ctx = run(30, function(ctx)
            local server = ctx.listen({ limits = { write_high = high, write_low = 32 * 1024 } }, function(_, res)
                res:write_head(200, { ["Content-Type"] = "application/octet-stream" })
                local function pump()
                    while true do
                        local ok = res:write(CHUNK)
                        stats.sent = stats.sent + #CHUNK
                        stats.max_queue = math.max(stats.max_queue, res:buffered())
                        if ok == nil then return end
                        if not ok then
                            stats.blocked = stats.blocked + 1
                            if stats.blocked == 3 then return res:finish() end
                            return res:on_drain(pump)
                        end
                    end
                end
                pump()
            end)
            curl(ctx, { "--limit-rate", "4M", "-o", "/dev/null", "-w", "%{size_download}", url(server, "/big") },
                function(code, out)
                    ctx.code, ctx.size = code, tonumber(out)
                    ctx.done()
                end)
        end)
        assert.are.equal(0, ctx.code)
        assert.are.equal(3, stats.blocked)
        assert.is_true(stats.max_queue <= high + #CHUNK + 4096, "queue reached " .. stats.max_queue)
        assert.are.equal(stats.sent, ctx.size)
    end)

    it("runs on_finish once the response is sent, and not for one the client left", function()
        local seen = { finished = 0, closed = 0 }
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, function(req, res)
                res:on_finish(function() seen.finished = seen.finished + 1 end)
                res:on_close(function() seen.closed = seen.closed + 1 end)
                if req.path == "/done" then return res:finish("ok") end
                local timer = uv.new_timer()
                res:write_head(200, sse.headers())
                res:on_close(function() timer:close() ctx.after(50, function() ctx.done() end) end)
                timer:start(0, 20, function() res:write(sse.comment("tick")) end)
            end)
            curl(ctx, { url(server, "/done") }, function()
                curl(ctx, { "-N", "--max-time", "0.3", url(server, "/forever") }, function() end)
            end)
        end)
        assert.are.same({ finished = 1, closed = 1 }, seen)
        assert.are.same({}, errors_logged(ctx))
    end)

    it("runs on_close when the client goes away mid-response; writes then report closed", function()
        local seen = {}
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, function(_, res)
                res:write_head(200, sse.headers())
                local timer = uv.new_timer()
                res:on_close(function()
                    seen.closed_flag = res.closed
                    timer:close()
                    seen.write = { res:write("late") }
                    ctx.after(50, function() ctx.done() end)
                end)
                timer:start(0, 20, function() res:write(sse.comment("tick")) end)
            end)
            curl(ctx, { "-N", "--max-time", "0.5", url(server, "/forever") }, function(code)
                seen.curl_code = code
            end)
        end)
        assert.are.equal(28, seen.curl_code)       -- curl: operation timed out
        assert.is_true(seen.closed_flag)
        assert.are.same({ nil, "closed" }, seen.write)
        assert.are.same({}, errors_logged(ctx))
    end)

    it("answers an oversize body with 413, before the body when asked to continue", function()
        local path = os.tmpname()
        local f = assert(io.open(path, "wb"))
        f:write(string.rep("b", 3000))
        f:close()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({ limits = { body_bytes = 2000 } }, hello)
            local one_done, results = ctx.countdown(3), {}
            ctx.results = results
            local function one(name, args)
                curl(ctx, args, function(code, out, err)
                    results[name] = { code = code, out = out, err = err }
                    one_done()
                end)
            end
            one("plain", { "-v", "--data-binary", "@" .. path, "-H", "Expect:", url(server, "/v1/completions") })
            one("expect", { "-v", "--data-binary", "@" .. path, "-H", "Expect: 100-continue", url(server, "/e") })
            one("small", { "-v", "--data-binary", "1234", "-H", "Expect: 100-continue", url(server, "/s") })
        end)
        os.remove(path)
        local r = ctx.results
        for _, name in ipairs({ "plain", "expect" }) do
            assert.are.equal(0, r[name].code, r[name].err)
            assert.truthy(r[name].err:find("< HTTP/1.1 413 Content Too Large", 1, true), r[name].err)
            local body = cjson.decode(r[name].out)
            assert.are.equal("invalid_request_error", body.error.type)
            assert.truthy(body.error.message:find("2000", 1, true))
            assert.are.equal(cjson.null, body.error.param)
            assert.are.equal(cjson.null, body.error.code)
        end
        assert.is_nil(r.expect.err:find("100 Continue", 1, true))
        assert.truthy(r.small.err:find("< HTTP/1.1 100 Continue", 1, true), r.small.err)
        assert.truthy(r.small.out:find("^POST /s 4 "))
    end)

    it("answers a malformed request with 400 and keeps serving", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, hello)
            curl(ctx, { "-v", "--request-target", "/a b", url(server, "/") }, function(code, out, err)
                ctx.bad = { code = code, out = out, err = err }
                curl(ctx, { url(server, "/after") }, function(code2, out2)
                    ctx.after_code, ctx.after_out = code2, out2
                    ctx.done()
                end)
            end)
        end)
        assert.truthy(ctx.bad.err:find("< HTTP/1.1 400 Bad Request", 1, true), ctx.bad.err)
        assert.truthy(ctx.bad.err:find("< Connection: close", 1, true))
        assert.are.equal("malformed request line", cjson.decode(ctx.bad.out).error.message)
        assert.are.equal(0, ctx.after_code)
        assert.truthy(ctx.after_out:find("^GET /after 0 "))
    end)

    it("turns a handler error into a 500 before the head, a closed connection after it", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({}, function(req, res)
                if req.path == "/late" then
                    res:write("partial")
                end
                error("boom")
            end)
            curl(ctx, { "-v", url(server, "/early") }, function(code, out, err)
                ctx.early = { code = code, out = out, err = err }
                curl(ctx, { url(server, "/late") }, function(code2, out2)
                    ctx.late = { code = code2, out = out2 }
                    ctx.done()
                end)
            end)
        end)
        assert.truthy(ctx.early.err:find("< HTTP/1.1 500 Internal Server Error", 1, true))
        assert.are.equal("server_error", cjson.decode(ctx.early.out).error.type)
        assert.are.equal(18, ctx.late.code)        -- curl: transfer closed with data outstanding
        assert.are.equal("partial", ctx.late.out)
        local errs = errors_logged(ctx)
        assert.are.equal(2, #errs)
        assert.truthy(errs[1]:find("handler GET /early: .*boom"))
    end)
end)

describe("listener with raw sockets", function()
    it("answers pipelined requests in order, whatever order the handlers finish in", function()
        local ctx = exchange({}, function(req, res)
            local timer = uv.new_timer()
            timer:start(tonumber(req.query.delay), 0, function()
                timer:close()
                res:finish(req.path)
            end)
        end, "GET /one?delay=150 HTTP/1.1\r\nHost: h\r\n\r\n" ..
             "GET /two?delay=0 HTTP/1.1\r\nHost: h\r\n\r\n" ..
             "GET /three?delay=50 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        assert.are.same({ "/one", "/two", "/three" }, bodies(ctx.all, "/%l+"))
    end)

    it("closes an idle keep-alive connection after the idle timeout", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({ timeouts = { idle = 0.2 } }, hello)
            local t0 = uv.hrtime()
            connect(ctx, server.port, function(c)
                c.on_end = function(_, err)
                    ctx.silent_ms, ctx.silent_err = (uv.hrtime() - t0) / 1e6, err
                    local t1
                    connect(ctx, server.port, function(c2)
                        c2.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
                        c2.on_data = function() t1 = t1 or uv.hrtime() end
                        c2.on_end = function(all)
                            ctx.after_ms, ctx.answer = (uv.hrtime() - t1) / 1e6, all
                            ctx.done()
                        end
                    end)
                end
            end)
        end)
        assert.is_nil(ctx.silent_err)
        assert.is_true(ctx.silent_ms >= 180 and ctx.silent_ms < 1500, ctx.silent_ms)
        assert.are.equal(200, status_of(ctx.answer))
        assert.is_true(ctx.after_ms >= 150 and ctx.after_ms < 1500, ctx.after_ms)
    end)

    it("answers 408 when a request does not complete within the request timeout", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({ timeouts = { request = 0.3, idle = 5 } }, hello)
            connect(ctx, server.port, function(c)
                c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc")
                -- trickling bytes does not extend the request timeout
                local t = uv.new_timer()
                t:start(50, 50, function() if not c.ended then c.send("x") end end)
                c.on_end = function(all)
                    t:close()
                    ctx.all = all
                    ctx.done()
                end
            end)
        end)
        assert.are.equal(408, status_of(ctx.all))
        assert.truthy(json_body(ctx.all).error.message:find("0.3 s", 1, true))
    end)

    it("survives hostile input: each gets its status, the connection closes, the server goes on", function()
        local flood = { "GET / HTTP/1.1\r\nHost: h\r\n" }
        for i = 1, 20000 do flood[#flood + 1] = "X-Flood-" .. i .. ": y\r\n" end
        local cases = {
            { 414, "GET /" .. string.rep("a", 1024 * 1024) .. " HTTP/1.1\r\nHost: h\r\n\r\n" },
            { 431, table.concat(flood) .. "\r\n" },
            { 400, "GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n" },
            { 400, "GET / HTTP/1.1\r\nHost: h\r\nX: \0\r\n\r\n" },
            { 400, "\0\0\0\0\r\n\r\n" },
            { 400, string.rep("\0garbage", 1000) },                 -- no line end: refused at once
            { 400, "\22\3\1\2\0\1\0\1\252\3\3" },                 -- a TLS ClientHello on the HTTP port
            { 505, "GET / HTTP/2.0\r\n\r\n" },
            { 501, "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n" },
        }
        for _, case in ipairs(cases) do
            local ctx = exchange({}, hello, case[2])
            assert.are.equal(case[1], status_of(ctx.all), ctx.all:sub(1, 200))
            assert.truthy(ctx.all:find("Connection: close\r\n", 1, true))
            assert.are.equal("invalid_request_error", json_body(ctx.all).error.type)
        end
    end)

    it("stops a never-ending chunked body at body_bytes with 413", function()
        local ctx = exchange({ limits = { body_bytes = 256 * 1024 } }, hello, function(c)
            c.send("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
            local chunk = "1000\r\n" .. string.rep("z", 4096) .. "\r\n"
            local t = uv.new_timer()
            t:start(0, 1, function()
                if c.ended then return t:close() end
                for _ = 1, 16 do c.send(chunk) end
            end)
        end)
        assert.are.equal(413, status_of(ctx.all))
    end)

    it("accepts bare LF line ends", function()
        local ctx = exchange({}, hello, "POST /lf HTTP/1.1\nHost: h\nContent-Length: 2\nConnection: close\n\nok")
        assert.are.equal(200, status_of(ctx.all))
        assert.truthy(ctx.all:find("POST /lf 2 ", 1, true))
    end)

    it("runs on_close when the client closes while the handler is still working", function()
        local seen = {}
        run(10, function(ctx)
            local server = ctx.listen({}, function(_, res)
                local engine = ctx.after(5000, function() res:finish("too late") end)
                res:on_close(function()
                    seen.cancelled = true
                    engine:close()
                    ctx.done()
                end)
            end)
            connect(ctx, server.port, function(c)
                c.send("POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
                ctx.after(100, function() c.tcp:close() end)
            end)
        end)
        assert.is_true(seen.cancelled)
    end)

    it("closes the connection of a client that stops reading, after the write timeout", function()
        local seen = { queued = 0 }
        local ctx = run(10, function(ctx)
            local server = ctx.listen({ timeouts = { write = 0.3 } }, function(_, res)
                local chunk = string.rep("w", 256 * 1024)
                res:on_close(function()
                    seen.closed_at = uv.hrtime()
                    ctx.done()
                end)
                local function pump()
                    while res:write(chunk) do end
                    seen.queued = math.max(seen.queued, res:buffered())
                    seen.blocked_at = uv.hrtime()
                    res:on_drain(pump)
                end
                pump()
            end)
            connect(ctx, server.port, function(c)
                c.tcp:read_stop()
                c.send("GET /download HTTP/1.1\r\nHost: h\r\n\r\n")
            end)
        end)
        assert.is_true(seen.queued > 0)
        local ms = (seen.closed_at - seen.blocked_at) / 1e6
        assert.is_true(ms >= 250 and ms < 2000, ms)
        assert.truthy(table.concat(ctx.logs, "\n"):find("^info: listening"))
    end)

    it("pauses reading pipelined input past pipeline_bytes and resumes after the response", function()
        local body = string.rep("p", 512 * 1024)
        local ctx = exchange({ limits = { pipeline_bytes = 16 * 1024 } }, function(req, res)
            local timer = uv.new_timer()
            timer:start(req.path == "/first" and 200 or 0, 0, function()
                timer:close()
                res:finish(req.path .. ":" .. #req.body)
            end)
        end, "GET /first HTTP/1.1\r\nHost: h\r\n\r\n" ..
             "POST /second HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: " .. #body ..
             "\r\n\r\n" .. body)
        assert.are.same({ "/first:0", "/second:" .. #body }, bodies(ctx.all, "/%l+:%d+"))
    end)

    it("refuses connections past limits.connections", function()
        local ctx = run(10, function(ctx)
            local server = ctx.listen({ limits = { connections = 2 } }, hello)
            connect(ctx, server.port, function()
                connect(ctx, server.port, function()
                    connect(ctx, server.port, function(c3)
                        c3.on_end = function(all)
                            ctx.third = all
                            ctx.done()
                        end
                    end)
                end)
            end)
        end)
        assert.are.equal("", ctx.third)
        assert.truthy(ctx.logs[2]:find("^warn: 2 connections open"))
    end)

    it("server:close() closes idle connections at once and lets a response in flight finish", function()
        local ctx = run(10, function(ctx)
            local server
            server = ctx.listen({}, function(req, res)
                if req.path == "/slow" then
                    res:write("first,")
                    server:close(5, function()
                        ctx.closed_at = uv.hrtime()
                        ctx.done()
                    end)
                    ctx.after(200, function() res:finish("second") end)
                else
                    res:finish("quick")
                end
            end)
            connect(ctx, server.port, function(idle)
                idle.send("GET /quick HTTP/1.1\r\nHost: h\r\n\r\n")
                idle.on_data = function()
                    connect(ctx, server.port, function(busy)
                        busy.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
                        busy.on_end = function(all) ctx.busy = all end
                    end)
                end
                idle.on_end = function() ctx.idle_closed = true end
            end)
        end)
        assert.is_true(ctx.idle_closed)
        assert.truthy(ctx.busy:find("6\r\nfirst,\r\n6\r\nsecond\r\n0\r\n\r\n$"), ctx.busy)
        assert.is_number(ctx.closed_at)
    end)
end)

describe("listener setup", function()
    it("returns nil, err when the port is taken", function()
        local ctx = run(5, function(ctx)
            local server = ctx.listen({}, hello)
            local again, err = listener.listen({ port = server.port, log = ctx.log, signals = false }, hello)
            ctx.again, ctx.err = again, err
            server:close(0, ctx.done)
        end)
        assert.is_nil(ctx.again)
        assert.truthy(ctx.err:find("EADDRINUSE", 1, true), ctx.err)
    end)

    it("raises on bad arguments", function()
        assert.has_error(function() listener.listen({}, nil) end)
        assert.has_error(function() listener.listen({ port = 70000 }, hello) end)
        assert.has_error(function() listener.listen({ host = "localhost", port = 0, signals = false }, hello) end,
            "listener.listen: host must be an IP address, got 'localhost'")
        assert.has_error(function() listener.listen({ limits = { bogus = 1 } }, hello) end)
        assert.has_error(function() listener.listen({ limits = { body_bytes = 0 } }, hello) end)
        assert.has_error(function() listener.listen({ timeouts = { idle = -1 } }, hello) end)
        assert.has_error(function() listener.listen({ limits = { write_low = 10, write_high = 5 } }, hello) end)
    end)

    it("builds OpenAI-shaped error bodies", function()
        local body = cjson.decode(listener.error_body('bad "x"'))
        assert.are.same({ message = 'bad "x"', type = "invalid_request_error", param = cjson.null, code = cjson.null },
            body.error)
        assert.are.equal("server_error", cjson.decode(listener.error_body("m", "server_error")).error.type)
    end)
end)

describe("listener shutdown by signal (child process)", function()
    -- Starts the child; on_port(port, proc) once it listens.  Returns its result table.
    local function child(ctx, grace, on_port)
        local result, started = {}, false
        local proc
        proc = spawn(ctx, LUAJIT, { "tests/lua/http_listener_child.lua", tostring(grace) },
            function(code, _, err)
                result.code, result.err = code, err
                result.exited_at = uv.hrtime()
                if result.on_exit then result.on_exit() end
            end, nil,
            function(err)
                local port = err:match("listening on http://127%.0%.0%.1:(%d+)")
                if port and not started then
                    started = true
                    on_port(tonumber(port), proc)
                end
            end)
        return result
    end

    it("SIGTERM: stops accepting, lets the response in flight finish, exits 0", function()
        local ctx = run(15, function(ctx)
            local one_done = ctx.countdown(3)
            ctx.child = child(ctx, 5, function(port, proc)
                local signalled = false
                curl(ctx, { "-N", "http://127.0.0.1:" .. port .. "/slow" }, function(code, out)
                    ctx.slow = { code = code, out = out }
                    one_done()
                end, function(out)
                    if signalled or not out:find("tick 1\n", 1, true) then return end
                    signalled = true
                    proc:kill("sigterm")
                    ctx.after(100, function()
                        curl(ctx, { "http://127.0.0.1:" .. port .. "/" }, function(code)
                            ctx.refused = code
                            one_done()
                        end)
                    end)
                end)
            end)
            ctx.child.on_exit = one_done
        end)
        assert.are.equal(0, ctx.slow.code)
        assert.are.equal("tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n", ctx.slow.out)
        assert.are.equal(7, ctx.refused)            -- curl: failed to connect
        assert.are.equal(0, ctx.child.code, ctx.child.err)
        assert.truthy(ctx.child.err:find("sigterm: shutting down (grace 5 s)", 1, true), ctx.child.err)
        assert.truthy(ctx.child.err:find("info: stopped\nloop ended\n", 1, true), ctx.child.err)
        assert.is_nil(ctx.child.err:find("on_close fired", 1, true))
    end)

    it("SIGTERM: closes a response that outlives the grace period, and on_close fires", function()
        local t_signal
        local ctx = run(15, function(ctx)
            local one_done = ctx.countdown(2)
            ctx.child = child(ctx, 0.3, function(port, proc)
                curl(ctx, { "-N", "http://127.0.0.1:" .. port .. "/forever" }, function(code, out)
                    ctx.forever = { code = code, out = out }
                    one_done()
                end, function(out)
                    if t_signal or not out:find("tick 2\n", 1, true) then return end
                    t_signal = uv.hrtime()
                    proc:kill("sigterm")
                end)
            end)
            ctx.child.on_exit = one_done
        end)
        assert.are.equal(18, ctx.forever.code)      -- the chunked body never ended
        assert.are.equal(0, ctx.child.code, ctx.child.err)
        local waited_ms = (ctx.child.exited_at - t_signal) / 1e6
        assert.is_true(waited_ms >= 250 and waited_ms < 3000, waited_ms)
        assert.truthy(ctx.child.err:find("on_close fired", 1, true), ctx.child.err)
        assert.truthy(ctx.child.err:find("grace over: closed 1 connection(s)", 1, true), ctx.child.err)
    end)
end)
