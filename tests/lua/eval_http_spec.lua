-- glm53.eval.http_client and glm53.eval.openai: the response parser and the SSE parser fed in every split, and
-- the connection pool and the OpenAI client against a real server (glm53.server.listener) on loopback in this
-- process's luv loop: keep-alive reuse, the connection limit, streamed bodies, timeouts, a closed keep-alive
-- connection, a refused connection, chat and completion responses, streams with usage, error bodies.
local uv = require("luv")
local cjson = require("cjson")
local listener = require("glm53.server.listener")
local sse_enc = require("glm53.server.sse")
local http_client = require("glm53.eval.http_client")
local openai = require("glm53.eval.openai")

-- Feeds text to a parser one byte at a time, then whole; both must give the same response.
local function parse_all(text, method, eof)
    local results = {}
    for _, split in ipairs({ 1, #text }) do
        local pieces, res = {}, nil
        local p = http_client.response_parser({ on_done = function(r) res = r end }, { method = method })
        for i = 1, #text, split do assert(p:feed(text:sub(i, i + split - 1))) end
        if eof then assert(p:eof()) end
        results[#results + 1] = res
        pieces[#pieces + 1] = res
    end
    assert.are.same(results[1], results[2])
    return results[1]
end

describe("http_client.response_parser", function()
    it("reads Content-Length, chunked (extensions, trailers) and read-until-close bodies in any split", function()
        local r = parse_all("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello")
        assert.are.equal(200, r.status) assert.are.equal("hello", r.body) assert.are.equal("1, 2", r.headers["x-a"])
        assert.is_true(r.keep_alive)
        r = parse_all("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nT: x\r\n\r\n")
        assert.are.equal("hello!", r.body)
        r = parse_all("HTTP/1.0 200 OK\nContent-Type: text/plain\n\nuntil the end", nil, true)
        assert.are.equal("until the end", r.body) assert.is_false(r.keep_alive)
        r = parse_all("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        assert.are.equal(201, r.status) assert.are.equal("ok", r.body) assert.is_false(r.keep_alive)
        r = parse_all("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "HEAD")
        assert.are.equal("", r.body)
        r = parse_all("HTTP/1.1 204 No Content\r\n\r\n")
        assert.are.equal(204, r.status)
    end)

    it("hands streamed bodies to on_body and refuses malformed or cut responses", function()
        local pieces = {}
        local p = http_client.response_parser({ on_body = function(b) pieces[#pieces + 1] = b end })
        assert(p:feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"))
        assert(p:feed("2\r\nde\r\n0\r\n\r\n"))
        assert.are.same({ "abc", "de" }, pieces)
        assert.are.equal("done", p.state)
        local bad = http_client.response_parser()
        local ok, err = bad:feed("HTTP/2 200\r\n\r\n")
        assert.is_nil(ok) assert.truthy(err:find("malformed status line", 1, true))
        local cut = http_client.response_parser()
        assert(cut:feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
        ok, err = cut:eof()
        assert.is_nil(ok) assert.truthy(err:find("before the response ended", 1, true))
        local chunk = http_client.response_parser()
        ok, err = chunk:feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        assert.is_nil(ok) assert.truthy(err:find("chunk size", 1, true))
    end)
end)

describe("http_client.sse_parser", function()
    it("splits events on blank lines with any line end, joins data lines, skips comments", function()
        local stream = ": ping\n\ndata: {\"a\":1}\n\ndata:b\r\ndata: c\r\n\r\nevent: x\rid: 7\rdata: y\r\rdata: tail"
        for _, split in ipairs({ 1, 2, 3, #stream }) do
            local p, events = http_client.sse_parser(), {}
            for i = 1, #stream, split do
                for _, ev in ipairs(p:feed(stream:sub(i, i + split - 1))) do events[#events + 1] = ev end
            end
            assert.are.same({ { data = '{"a":1}' }, { data = "b\nc" }, { data = "y", event = "x", id = "7" } }, events,
                            "split " .. split)
        end
        -- What glm53.server.sse writes reads back.
        local p = http_client.sse_parser()
        assert.are.same({ { data = "line 1\nline 2" }, { data = "[DONE]" } }, p:feed(sse_enc.event("line 1\nline 2") .. sse_enc.DONE))
    end)
end)

-- Runs body(ctx) in the loop with a server whose handler is handler(req, res, ctx); body calls ctx.done().
local function with_server(opts, handler, body)
    local ctx = { ports = {} }
    local guard = uv.new_timer()
    local server
    local function finish(failure)
        if ctx.finished then return end
        ctx.finished, ctx.failure = true, failure
        guard:stop()
        guard:close()
        if ctx.pool then ctx.pool:close() end
        server:close(0)
    end
    function ctx.wrap(fn)
        return function(...)
            local ok, err = xpcall(fn, debug.traceback, ...)
            if not ok then finish(err) end
        end
    end
    function ctx.done() finish(nil) end
    function ctx.after(ms, fn)
        local t = uv.new_timer()
        t:start(ms, 0, ctx.wrap(function() t:close() fn() end))
    end
    server = assert(listener.listen({ port = 0, signals = false, log = function() end, timeouts = opts.timeouts },
        function(req, res)
            ctx.ports[#ctx.ports + 1] = req.remote_port
            local ok, err = xpcall(handler, debug.traceback, req, res, ctx)
            if not ok then finish(err) end
        end))
    ctx.url = assert(http_client.parse_url("http://127.0.0.1:" .. server.port .. "/v1"))
    guard:start((opts.seconds or 10) * 1000, 0, function() finish("timed out") end)
    ctx.wrap(body)(ctx)
    uv.run()
    if ctx.failure then error(ctx.failure, 0) end
    return ctx
end

local function reply(res, status, body, headers)
    headers = headers or { ["Content-Type"] = "application/json" }
    res:write_head(status, headers)
    res:finish(body)
end

describe("http_client.pool against a real server", function()
    it("parses URLs", function()
        assert.are.same({ host = "127.0.0.1", port = 8000, path = "/v1" }, http_client.parse_url("http://127.0.0.1:8000/v1/"))
        assert.are.same({ host = "localhost", port = 80, path = "" }, http_client.parse_url("http://localhost"))
        assert.are.same({ host = "::1", port = 9, path = "/x" }, http_client.parse_url("http://[::1]:9/x"))
        assert.is_nil(http_client.parse_url("https://example.com"))
        assert.is_nil(http_client.parse_url("localhost:8000"))
    end)

    it("reuses a keep-alive connection and keeps to its connection limit", function()
        local ctx = with_server({}, function(req, res, c)
            c.in_flight = (c.in_flight or 0) + 1
            c.peak = math.max(c.peak or 0, c.in_flight)
            c.after(30, function()
                c.in_flight = c.in_flight - 1
                reply(res, 200, req.path)
            end)
        end, function(c)
            c.pool = http_client.pool(uv, c.url, { connections = 2 })
            c.pool:request({ path = "/first" }, c.wrap(function(r1)
                assert.are.equal("/first", r1.body)
                c.pool:request({ path = "/second" }, c.wrap(function(r2)
                    assert.are.equal("/second", r2.body)
                    local left = 5
                    for i = 1, 5 do
                        c.pool:request({ path = "/p" .. i }, c.wrap(function(r)
                            assert.are.equal(200, r.status)
                            left = left - 1
                            if left == 0 then c.done() end
                        end))
                    end
                end))
            end))
        end)
        assert.are.equal(7, #ctx.ports)
        assert.are.equal("number", type(ctx.ports[1]))
        assert.are.equal(ctx.ports[1], ctx.ports[2])   -- the same client port: one connection for both
        assert.are.equal(2, ctx.peak)                  -- five requests, two connections
    end)

    it("streams a chunked body as it arrives", function()
        with_server({}, function(_, res, c)
            res:write_head(200, { ["Content-Type"] = "text/plain" })
            res:write("one ")
            c.after(50, function() res:write("two ") c.after(50, function() res:finish("three") end) end)
        end, function(c)
            c.pool = http_client.pool(uv, c.url)
            local pieces, times = {}, {}
            c.pool:request({ path = "/s", on_body = function(b) pieces[#pieces + 1] = b times[#times + 1] = uv.now() end },
                c.wrap(function(res)
                    assert.are.equal("", res.body)
                    assert.are.equal("one two three", table.concat(pieces))
                    assert.is_true(#pieces >= 3)
                    assert.is_true(times[#times] - times[1] >= 80)
                    c.done()
                end))
        end)
    end)

    it("times out a silent server, and a request past its own timeout", function()
        with_server({}, function() end, function(c)
            c.pool = http_client.pool(uv, c.url, { timeouts = { read = 0.1 } })
            c.pool:request({ path = "/silent" }, c.wrap(function(res, err)
                assert.is_nil(res)
                assert.truthy(err:find("timeout: no response byte", 1, true))
                c.pool:request({ path = "/again", timeout = 0.05 }, c.wrap(function(res2, err2)
                    assert.is_nil(res2)
                    assert.truthy(err2:find("timeout", 1, true))
                    c.done()
                end))
            end))
        end)
    end)

    it("counts timeouts from the request, not from the loop's last run", function()
        with_server({}, function(_, res) reply(res, 200, "hi") end, function(c)
            os.execute("sleep 1.2")   -- work outside the loop: its clock stays 1.2 s behind
            c.pool = http_client.pool(uv, c.url, { timeouts = { connect = 1, read = 1, request = 1 } })
            c.pool:request({ path = "/late" }, c.wrap(function(res, err)
                assert.are.equal("hi", res and res.body, err)
                c.done()
            end))
        end)
    end)

    it("opens a new connection after the server closed one (Connection: close, idle timeout)", function()
        local ctx = with_server({ timeouts = { idle = 0.05 } }, function(req, res)
            if req.path == "/close" then
                reply(res, 200, "bye", { ["Connection"] = "close" })
            else
                reply(res, 200, "hi")
            end
        end, function(c)
            c.pool = http_client.pool(uv, c.url)
            c.pool:request({ path = "/close" }, c.wrap(function(r1)
                assert.are.equal("bye", r1.body)
                c.pool:request({ path = "/a" }, c.wrap(function(r2)
                    assert.are.equal("hi", r2.body)
                    -- The server drops the idle keep-alive connection after 50 ms; the next request still works.
                    c.after(150, function()
                        c.pool:request({ path = "/b" }, c.wrap(function(r3, err)
                            assert.are.equal("hi", r3 and r3.body, err)
                            c.done()
                        end))
                    end)
                end))
            end))
        end)
        assert.are.equal(3, #ctx.ports)
        assert.are_not.equal(ctx.ports[1], ctx.ports[2])
    end)

    it("reports a refused connection", function()
        local done, got = false, nil
        local pool = http_client.pool(uv, assert(http_client.parse_url("http://127.0.0.1:1")), { timeouts = { connect = 2 } })
        pool:request({ path = "/" }, function(res, err) done, got = true, { res, err } end)
        uv.run()
        pool:close()
        assert.is_true(done)
        assert.is_nil(got[1])
        assert.truthy(got[2]:find("^connect: "))
    end)
end)

describe("glm53.eval.openai against a scripted server", function()
    local CHAT = { id = "c", object = "chat.completion", choices = { { index = 0, finish_reason = "stop",
                   message = { role = "assistant", content = "The answer is 4.", reasoning_content = "2+2" } } },
                   usage = { prompt_tokens = 11, completion_tokens = 7 } }

    it("reads chat and completion responses, streamed or not, with usage and timings", function()
        with_server({}, function(req, res, c)
            local body = cjson.decode(req.body)
            c.bodies = c.bodies or {}
            c.bodies[#c.bodies + 1] = body
            if not body.stream then
                if req.path == "/v1/chat/completions" then return reply(res, 200, cjson.encode(CHAT)) end
                return reply(res, 200, cjson.encode({ choices = { { text = "42", finish_reason = "length" } } }))
            end
            res:write_head(200, sse_enc.headers())
            local deltas = { "The ", "answer ", "is 4." }
            local i = 0
            local function step()
                i = i + 1
                if i <= #deltas then
                    res:write(sse_enc.event(cjson.encode({ choices = { { index = 0, delta = { content = deltas[i] },
                        finish_reason = i == #deltas and "stop" or cjson.null } } })))
                    return c.after(20, step)
                end
                res:finish(sse_enc.event('{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}') .. sse_enc.DONE)
            end
            step()
        end, function(c)
            c.pool = http_client.pool(uv, c.url, { connections = 2 })
            local msgs = { { role = "user", content = "2+2?" } }
            openai.complete(c.pool, { base = "/v1", model = "m", messages = msgs, max_tokens = 8, temperature = 0,
                                      seed = 3, stop = { "Q:" } }, c.wrap(function(r)
                assert.is_true(r.ok, r.error)
                assert.are.same({ "The answer is 4.", "2+2", "stop", 11, 7 },
                                { r.text, r.reasoning, r.finish_reason, r.prompt_tokens, r.completion_tokens })
                local sent = c.bodies[1]
                assert.are.same({ "m", 8, 0, 3, { "Q:" }, false }, { sent.model, sent.max_tokens, sent.temperature,
                                                                     sent.seed, sent.stop, sent.stream })
                openai.complete(c.pool, { base = "/v1", model = "m", prompt = "Q: 6*7\nA:", max_tokens = 2 },
                    c.wrap(function(r2)
                        assert.are.same({ true, "42", "length" }, { r2.ok, r2.text, r2.finish_reason })
                        openai.complete(c.pool, { base = "/v1", model = "m", messages = msgs, stream = true },
                            c.wrap(function(r3)
                                assert.is_true(r3.ok, r3.error)
                                assert.are.same({ "The answer is 4.", "stop", 9, 3, 3 },
                                                { r3.text, r3.finish_reason, r3.prompt_tokens, r3.completion_tokens,
                                                  r3.chunks })
                                assert.are.same({ include_usage = true }, c.bodies[3].stream_options)
                                assert.are.equal(2, #r3.itl)
                                assert.is_true(r3.itl[1] >= 0.015 and r3.itl[2] >= 0.015)
                                -- latency ends at the last chunk with a choice, not at the usage chunk.
                                assert.is_true(math.abs(r3.latency - (r3.ttft + r3.itl[1] + r3.itl[2])) < 1e-6)
                                c.done()
                            end))
                    end))
            end))
        end)
    end)

    it("turns an error response into its message and finds the first model", function()
        with_server({}, function(req, res)
            if req.path == "/v1/models" then return reply(res, 200, '{"data":[{"id":"served-name"}]}') end
            reply(res, 400, listener.error_body("max_tokens is too large"))
        end, function(c)
            c.pool = http_client.pool(uv, c.url)
            openai.first_model(c.pool, "/v1", c.wrap(function(id)
                assert.are.equal("served-name", id)
                openai.complete(c.pool, { base = "/v1", model = id, prompt = "x", stream = true }, c.wrap(function(r)
                    assert.is_false(r.ok)
                    assert.are.equal("HTTP 400: max_tokens is too large", r.error)
                    c.done()
                end))
            end))
        end)
    end)
end)
