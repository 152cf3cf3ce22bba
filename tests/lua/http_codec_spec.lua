-- glm53.server.http without sockets: the request parser under every split of its input, pipelining,
-- chunked bodies, each limit and error status, keep-alive decisions; the response encoder's framing.
local http = require("glm53.server.http")

-- Feeds `chunks` (a list of strings) and collects requests until the parser needs more or fails.
local function parse_chunks(chunks, limits)
    local p = http.parser(limits)
    local reqs = {}
    for _, c in ipairs(chunks) do
        p:feed(c)
        while true do
            local req, err, status = p:next()
            if req then
                reqs[#reqs + 1] = req
            elseif err then
                return reqs, err, status, p
            else
                break
            end
        end
    end
    return reqs, nil, nil, p
end

local function parse(raw, limits) return parse_chunks({ raw }, limits) end

-- The parts of a request a test compares, as plain tables.
local function plain(req)
    local function fields(h)
        if not h then return nil end
        local out = {}
        for i, f in ipairs(h) do out[i] = { f[1], f[2] } end
        return out
    end
    return {
        method = req.method, target = req.target, path = req.path, query = req.query, version = req.version,
        headers = fields(req.headers), body = req.body, keep_alive = req.keep_alive,
        expect_continue = req.expect_continue, trailers = fields(req.trailers),
    }
end

local function plain_all(reqs)
    local out = {}
    for i, r in ipairs(reqs) do out[i] = plain(r) end
    return out
end

-- raw cut into pieces of `size` bytes.
local function pieces(raw, size)
    local out = {}
    for i = 1, #raw, size do out[#out + 1] = raw:sub(i, i + size - 1) end
    return out
end

local function expect_error(raw, status, limits)
    local reqs, err, got = parse(raw, limits)
    assert.are.equal(0, #reqs)
    assert.is_string(err)
    assert.are.equal(status, got, "expected " .. status .. " for " .. string.format("%q", raw:sub(1, 80)) ..
        ", got " .. tostring(got) .. " (" .. tostring(err) .. ")")
    return err
end

local STREAM = table.concat({
    "GET /v1/models?x=1&y=a%20b HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n",
    "Content-Length: 17\r\n\r\n{\"messages\":[1]}\n",
    "POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
    "4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\nX-Sum: 3\r\n\r\n",
    "\r\n",   -- a stray CRLF between requests, as some clients send after a body
    "HEAD / HTTP/1.0\nConnection: keep-alive\n\n",
    "DELETE /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 3\r\n\r\n\0\1\2",
})

describe("request parser", function()
    it("parses the fields of a request", function()
        local reqs = parse("GET /v1/models?limit=10&q=a+b%21 HTTP/1.1\r\nHost: example\r\nX-Trace:  abc \r\n\r\n")
        assert.are.equal(1, #reqs)
        local r = reqs[1]
        assert.are.equal("GET", r.method)
        assert.are.equal("/v1/models?limit=10&q=a+b%21", r.target)
        assert.are.equal("/v1/models", r.path)
        assert.are.same({ limit = "10", q = "a b!" }, r.query)
        assert.are.equal("1.1", r.version)
        assert.are.equal("abc", r.headers["x-trace"])
        assert.are.equal("", r.body)
        assert.is_true(r.keep_alive)
        assert.is_false(r.expect_continue)
        assert.is_nil(r.trailers)
    end)

    it("parses a stream the same way under every split", function()
        local whole = plain_all((parse(STREAM)))
        assert.are.equal(5, #whole)
        for size = 1, 17 do
            local reqs, err = parse_chunks(pieces(STREAM, size))
            assert.is_nil(err)
            assert.are.same(whole, plain_all(reqs), "pieces of " .. size)
        end
        -- every two-way cut
        for cut = 1, #STREAM - 1 do
            local reqs, err = parse_chunks({ STREAM:sub(1, cut), STREAM:sub(cut + 1) })
            assert.is_nil(err)
            assert.are.same(whole, plain_all(reqs), "cut at " .. cut)
        end
        -- random splits, fixed seed
        math.randomseed(5)
        for _ = 1, 200 do
            local chunks, i = {}, 1
            while i <= #STREAM do
                local n = math.random(1, 40)
                chunks[#chunks + 1] = STREAM:sub(i, i + n - 1)
                i = i + n
            end
            assert.are.same(whole, plain_all((parse_chunks(chunks))))
        end
    end)

    it("answers pipelined requests one per next() and leaves the rest queued", function()
        local p = http.parser()
        p:feed(STREAM)
        assert.is_true(p:started())
        local first = assert(p:next())
        assert.are.equal("/v1/models", first.path)
        assert.are.equal(#STREAM - (STREAM:find("POST", 1, true) - 1), p:buffered())
        local methods = {}
        for _ = 1, 4 do methods[#methods + 1] = assert(p:next()).method end
        assert.are.same({ "POST", "POST", "HEAD", "DELETE" }, methods)
        assert.is_nil(p:next())
        assert.are.equal(0, p:buffered())
        assert.is_false(p:started())
    end)

    it("reads the chunked body and its trailers", function()
        local r = parse(STREAM)[3]
        assert.are.equal("Wikipedia in\r\n\r\nchunks.", r.body)
        assert.are.equal("never", r.trailers["expires"])
        assert.are.equal("3", r.trailers:get("X-SUM"))
        assert.is_nil(r.headers["expires"])
    end)

    it("takes chunk sizes in any hex case, with leading zeros, and an empty chunked body", function()
        local r = parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n" ..
            "0000A\r\n0123456789\r\na ; x=\"y\"\r\nabcdefghij\r\n000\r\n\r\n")[1]
        assert.are.equal("0123456789abcdefghij", r.body)
        r = parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")[1]
        assert.are.equal("", r.body)
        assert.are.equal(0, #r.trailers)
    end)

    it("keeps header names as sent, repeated fields in order, and looks up case-insensitively", function()
        local r = parse("GET / HTTP/1.1\r\nHost: h\r\nAccept: a\r\nX-Multi: 1\r\nx-multi: 2,3\r\nCookie:c=1\r\n\r\n")[1]
        assert.are.same({ "X-Multi", "1" }, { r.headers[3][1], r.headers[3][2] })
        assert.are.same({ "x-multi", "2,3" }, { r.headers[4][1], r.headers[4][2] })
        assert.are.equal("1, 2,3", r.headers["X-MULTI"])
        assert.are.same({ "1", "2,3" }, r.headers:values("x-multi"))
        assert.is_true(r.headers:has_token("x-multi", "3"))
        assert.is_false(r.headers:has_token("x-multi", "4"))
        assert.are.equal("c=1", r.headers.cookie)
        assert.is_nil(r.headers["absent"])
        assert.are.same({}, r.headers:values("absent"))
    end)

    it("decodes queries and splits targets", function()
        local function target(t) return parse("GET " .. t .. " HTTP/1.1\r\nHost: h\r\n\r\n")[1] end
        local r = target("/p?a=1&b&a=2&c=&=e&%41%2b=x+y&&")
        assert.are.equal("/p", r.path)
        assert.are.same({ a = { "1", "2" }, b = "", c = "", [""] = "e", ["A+"] = "x y" }, r.query)
        r = target("http://example.com:80/v1/x?k=v")
        assert.are.equal("/v1/x", r.path)
        assert.are.same({ k = "v" }, r.query)
        assert.are.equal("/", target("http://example.com").path)
        assert.are.equal("*", target("*").path)
        assert.are.same({}, target("/nothing?").query)
        assert.are.equal("/%2F%zz", target("/%2F%zz").path)     -- the path stays as sent
    end)

    it("accepts bare LF line ends and skips empty lines before a request", function()
        local r = parse("\r\n\n\r\nPOST /x HTTP/1.1\nHost: h\nContent-Length: 2\r\n\nok")[1]
        assert.are.equal("POST", r.method)
        assert.are.equal("ok", r.body)
        r = parse("POST / HTTP/1.1\nHost: h\nTransfer-Encoding: chunked\n\n2\nab\n0\nT: 1\n\n")[1]
        assert.are.equal("ab", r.body)
        assert.are.equal("1", r.trailers.t)
    end)

    it("carries NUL and other bytes in bodies unchanged", function()
        local body = {}
        for b = 0, 255 do body[#body + 1] = string.char(b) end
        body = table.concat(body)
        local r = parse("PUT / HTTP/1.1\r\nHost: h\r\nContent-Length: 256\r\n\r\n" .. body)[1]
        assert.are.equal(body, r.body)
    end)

    it("decides keep-alive by version and Connection", function()
        local function ka(version, conn)
            local raw = "GET / HTTP/" .. version .. "\r\nHost: h\r\n" .. (conn and ("Connection: " .. conn .. "\r\n") or "") .. "\r\n"
            return parse(raw)[1].keep_alive
        end
        assert.is_true(ka("1.1"))
        assert.is_false(ka("1.1", "close"))
        assert.is_false(ka("1.1", "Upgrade, CLOSE"))
        assert.is_true(ka("1.1", "keep-alive"))
        assert.is_false(ka("1.0"))
        assert.is_true(ka("1.0", "Keep-Alive"))
        assert.is_false(ka("1.0", "keep-alive, close"))
        local r = parse("GET / HTTP/1.7\r\nHost: h\r\n\r\n")[1]          -- a later 1.x reads as 1.1
        assert.are.equal("1.1", r.version)
        assert.is_true(r.keep_alive)
        assert.are.equal("1.0", parse("GET / HTTP/1.0\r\n\r\n")[1].version)   -- 1.0 needs no Host
    end)

    it("reports Expect: 100-continue once the head is in, before the body", function()
        local p = http.parser()
        p:feed("POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n")
        assert.is_nil(p:next())
        local head = assert(p:pending())
        assert.is_true(head.expect_continue)
        assert.are.equal("5", head.headers["content-length"])
        p:feed("he")
        assert.is_nil(p:next())
        assert.are.equal(head, p:pending())
        p:feed("llo")
        local r = assert(p:next())
        assert.are.equal(head, r)
        assert.are.equal("hello", r.body)
        assert.is_nil(p:pending())
        -- a 1.0 request's Expect is ignored, whatever it says
        r = parse("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx")[1]
        assert.is_false(r.expect_continue)
        assert.are.equal(1, #parse("GET / HTTP/1.0\r\nExpect: something\r\n\r\n"))
    end)

    it("has no pending head while reading a head", function()
        local p = http.parser()
        p:feed("GET / HTTP/1.1\r\nHo")
        assert.is_nil(p:next())
        assert.is_nil(p:pending())
        assert.is_true(p:started())
    end)
end)

describe("request parser errors", function()
    local CASES400 = {
        { "no version", "GET /\r\n\r\n" },
        { "two spaces", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n" },
        { "bad method byte", "GE(T / HTTP/1.1\r\nHost: h\r\n\r\n" },
        { "bad version", "GET / HTTP/1\r\nHost: h\r\n\r\n" },
        { "two-digit minor", "GET / HTTP/1.10\r\nHost: h\r\n\r\n" },
        { "bare CR in request line", "GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n" },
        { "bare CR in header", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n" },
        { "NUL in target", "GET /a\0b HTTP/1.1\r\nHost: h\r\n\r\n" },
        { "NUL in method", "G\0T / HTTP/1.1\r\nHost: h\r\n\r\n" },
        { "NUL in header value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n" },
        { "NUL in header name", "GET / HTTP/1.1\r\nHost: h\r\nX\0Y: a\r\n\r\n" },
        { "control byte in value", "GET / HTTP/1.1\r\nHost: h\r\nX: a\27b\r\n\r\n" },
        { "tab in target", "GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n" },
        { "obsolete folding", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n" },
        { "space before colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n" },
        { "no colon", "GET / HTTP/1.1\r\nHost: h\r\nnonsense\r\n\r\n" },
        { "empty name", "GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n" },
        { "no Host in 1.1", "GET / HTTP/1.1\r\n\r\n" },
        { "two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" },
        { "Content-Length and Transfer-Encoding",
          "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" },
        { "conflicting Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd" },
        { "conflicting Content-Length list", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 4\r\n\r\nabcd" },
        { "negative Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n" },
        { "hex Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n" },
        { "empty Content-Length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n" },
        { "chunk size not hex", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" },
        { "chunk size with junk", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\n" },
        { "chunk without CRLF", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n" },
        { "chunked twice", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n" },
        { "Transfer-Encoding in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" },
        { "bad trailer", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n" },
    }
    for _, case in ipairs(CASES400) do
        it("400: " .. case[1], function() expect_error(case[2], 400) end)
    end

    it("400 at once for binary input, without waiting for a line end", function()
        local tls_hello = "\22\3\1\2\0\1\0\1\252\3\3"
        local reqs, err, status, p = parse_chunks({ tls_hello })
        assert.are.equal(0, #reqs)
        assert.are.equal(400, status, err)
        assert.are.equal(0, p:buffered())
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nX-Partial: a\0", 400)
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\0", 400)
        assert.are.equal(0, #parse("GET / HTTP/1.1\r"))                   -- a CR may be half of a CRLF
        assert.is_nil(select(2, parse("GET / HTTP/1.1\r")))
    end)

    it("501 for transfer codings other than chunked", function()
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501)
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501)
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: br\r\n\r\n", 501)
    end)

    it("505 for versions other than 1.x", function()
        expect_error("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505)
        expect_error("GET / HTTP/0.9\r\n\r\n", 505)
        expect_error("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505)
    end)

    it("417 for expectations other than 100-continue", function()
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417)
    end)

    it("stays failed: further input is dropped and next() repeats the error", function()
        local p = http.parser()
        p:feed("BAD\r\n")
        local _, err, status = p:next()
        assert.are.equal(400, status)
        p:feed("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        assert.are.equal(0, p:buffered())
        local req, err2, status2 = p:next()
        assert.is_nil(req)
        assert.are.same({ err, 400 }, { err2, status2 })
    end)

    it("rejects bad limits and bad input types", function()
        assert.has_error(function() http.parser({ header_count = 0 }) end)
        assert.has_error(function() http.parser({ nonsense = 1 }) end)
        assert.has_error(function() http.parser({ body_bytes = 1.5 }) end)
        assert.has_error(function() http.parser():feed(42) end)
    end)
end)

describe("request parser on mutated input", function()
    it("never raises: every input gives requests, a need for more, or an error status", function()
        local seeds = {}
        for _, r in ipairs({ 1, 2, 3, 4 }) do seeds[r] = STREAM:sub(1, 60 * r) end
        local alphabet = "\r\n :;,0123456789abcdefABCDEF\0\t%+=&?/HTTP-chunkedContent-LengthTransfer-Encoding\255"
        local small = { body_bytes = 64, header_bytes = 256, request_line = 128, header_count = 8 }
        math.randomseed(11)
        local statuses = {}
        for _ = 1, 5000 do
            local s = seeds[math.random(#seeds)] .. STREAM
            for _ = 1, math.random(1, 6) do
                local op, pos = math.random(3), math.random(1, #s + 1)
                if op == 1 then
                    local c = math.random(#alphabet)
                    s = s:sub(1, pos - 1) .. alphabet:sub(c, c) .. s:sub(pos)
                elseif op == 2 then
                    s = s:sub(1, pos - 1) .. s:sub(pos + 1)
                else
                    local a = math.random(#s)
                    s = s:sub(1, pos - 1) .. s:sub(a, a + math.random(0, 20)) .. s:sub(pos)
                end
            end
            local reqs, err, status = parse_chunks(pieces(s, math.random(1, 9)), small)
            for _, r in ipairs(reqs) do http.encoder(r):full(200, nil, r.body) end
            if err then
                assert.is_number(status)
                statuses[status] = true
            end
        end
        assert.is_true(statuses[400] and statuses[413] and statuses[501] and true)
    end)
end)

describe("request parser limits", function()
    local L = { request_line = 64, header_count = 4, header_bytes = 128, body_bytes = 100 }

    it("414 past request_line, also before the line ends", function()
        local line = "GET /" .. string.rep("a", 64 - #"GET / HTTP/1.1\r\n") .. " HTTP/1.1\r\n"
        assert.are.equal(64, #line)
        assert.are.equal(1, #parse(line .. "Host: h\r\n\r\n", L))
        local long = "GET /" .. string.rep("a", 65 - #"GET / HTTP/1.1\r\n") .. " HTTP/1.1\r\nHost: h\r\n\r\n"
        expect_error(long, 414, L)
        expect_error("GET /" .. string.rep("a", 64), 414, L)        -- no line end at all
    end)

    it("refuses a 1 MB request line after the limit, holding no more than it", function()
        local mb = "GET /" .. string.rep("x", 1024 * 1024) .. " HTTP/1.1\r\nHost: h\r\n\r\n"
        local reqs, err, status, p = parse_chunks(pieces(mb, 65536))
        assert.are.equal(0, #reqs)
        assert.are.equal(414, status, err)
        assert.are.equal(0, p:buffered())
        -- fed at once, the default 8 KiB limit answers the same
        local _, _, status2 = parse(mb)
        assert.are.equal(414, status2)
        -- fed byte by byte it fails after the limit, long before the end
        p = http.parser()
        local fed
        for i = 1, #mb do
            p:feed(mb:sub(i, i))
            local _, _, st = p:next()
            if st then fed = i; assert.are.equal(414, st); break end
        end
        assert.are.equal(http.DEFAULT_LIMITS.request_line, fed)
    end)

    it("431 past header_count", function()
        local ok = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"
        assert.are.equal(1, #parse(ok, L))
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", 431, L)
    end)

    it("431 for a flood of headers, stopping at the limit", function()
        local flood = { "GET / HTTP/1.1\r\nHost: h\r\n" }
        for i = 1, 100000 do flood[#flood + 1] = "X-" .. i .. ": v\r\n" end
        local reqs, _, status, p = parse_chunks(pieces(table.concat(flood), 4096))
        assert.are.equal(0, #reqs)
        assert.are.equal(431, status)
        assert.are.equal(0, p:buffered())
    end)

    it("431 past header_bytes: many small fields, one big field, one that never ends", function()
        local near = "GET / HTTP/1.1\r\nHost: h\r\nX: " .. string.rep("v", 100) .. "\r\n\r\n"  -- 119 bytes of fields
        assert.are.equal(1, #parse(near, L))
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nX: " .. string.rep("v", 120) .. "\r\n\r\n", 431, L)
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nX: " .. string.rep("v", 1000), 431, L)
        local p, status = http.parser(), nil
        p:feed("GET / HTTP/1.1\r\nHost: h\r\nX: ")
        for _ = 1, 100000 do
            p:feed("vvvvvvvvvv")
            local _, _, st = p:next()
            if st then status = st; break end
        end
        assert.are.equal(431, status)
    end)

    it("trailers share the header budget", function()
        local head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nA: 1\r\n\r\n1\r\nx\r\n0\r\n"
        assert.are.equal(1, #parse(head .. "T: 1\r\n\r\n", L))           -- 3 header fields + 1 trailer
        expect_error(head .. "T: 1\r\nU: 2\r\n\r\n", 431, L)
    end)

    it("413 for a Content-Length past body_bytes, before any body byte", function()
        assert.are.equal(100, #parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" .. string.rep("b", 100), L)[1].body)
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n", 413, L)
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 123456789012345678901234567890\r\n\r\n", 413)
        assert.are.equal(1, #parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0000000000000000000000003\r\n\r\nabc", L))
    end)

    it("413 for chunked bodies past body_bytes: one big chunk, many chunks, an absurd size", function()
        local head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        assert.are.equal(100, #parse(head .. "64\r\n" .. string.rep("a", 100) .. "\r\n0\r\n\r\n", L)[1].body)
        expect_error(head .. "65\r\n", 413, L)
        expect_error(head .. "32\r\n" .. string.rep("a", 50) .. "\r\n33\r\n", 413, L)
        expect_error(head .. "ffffffffffffffffffffffffffffffff\r\n", 413)
        expect_error(head .. string.rep("0", 2000) .. "1\r\n", 400)   -- the size line itself is too long
    end)

    it("413 for a never-ending chunked body, after body_bytes", function()
        local p = http.parser({ body_bytes = 64 * 1024 })
        p:feed("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
        local sent, status = 0, nil
        for _ = 1, 100000 do
            p:feed("400\r\n" .. string.rep("z", 1024) .. "\r\n")
            sent = sent + 1024
            local _, _, st = p:next()
            if st then status = st; break end
        end
        assert.are.equal(413, status)
        assert.is_true(sent <= 64 * 1024 + 1024)
    end)
end)

describe("response encoder", function()
    local DATE = "Date: [A-Z][a-z][a-z], %d%d [A-Z][a-z][a-z] %d%d%d%d %d%d:%d%d:%d%d GMT\r\n"

    -- The response with its Date line blanked, so tests can compare bytes.
    local function undated(s) return (s:gsub("Date: [^\r]*\r\n", "Date: *\r\n")) end

    it("formats dates as IMF-fixdate", function()
        assert.are.equal("Sun, 06 Nov 1994 08:49:37 GMT", http.date(784111777))
        assert.are.equal("Thu, 01 Jan 1970 00:00:00 GMT", http.date(0))
        assert.truthy(("Date: " .. http.date() .. "\r\n"):find("^" .. DATE .. "$"))
    end)

    it("writes a whole response with Content-Length, Date and Server", function()
        local enc = http.encoder({ version = "1.1" })
        local out = enc:full(200, { ["Content-Type"] = "application/json", ["X-B"] = 2 }, '{"a":1}')
        assert.truthy(out:find(DATE))
        assert.are.equal("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-B: 2\r\nContent-Length: 7\r\n" ..
            "Date: *\r\nServer: glm53\r\n\r\n{\"a\":1}", undated(out))
        assert.is_true(enc.keep_alive)
    end)

    it("keeps the caller's Date and Server and repeated headers from a list", function()
        local out = http.encoder({}):full(404, { { "Set-Cookie", "a=1" }, { "Set-Cookie", "b=2" },
            { "Date", "yesterday" }, { "server", "mine" } }, "")
        assert.are.equal("HTTP/1.1 404 Not Found\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nDate: yesterday\r\n" ..
            "server: mine\r\nContent-Length: 0\r\n\r\n", out)
        out = http.encoder({}):full(200, { Vary = { "A", "B" } }, "x")
        assert.truthy(out:find("Vary: A\r\nVary: B\r\n", 1, true))
    end)

    it("frames a response without length as chunks and ends it with the last chunk", function()
        local enc = http.encoder({ method = "POST", version = "1.1", keep_alive = true })
        local head = enc:head(200, { ["Content-Type"] = "text/event-stream" })
        assert.are.equal("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n" ..
            "Date: *\r\nServer: glm53\r\n\r\n", undated(head))
        assert.are.equal("5\r\nhello\r\n", enc:chunk("hello"))
        assert.are.equal("", enc:chunk(""))       -- an empty chunk would end the body: nothing is written
        assert.are.equal("1a\r\n" .. string.rep("x", 26) .. "\r\n", enc:chunk(string.rep("x", 26)))
        assert.are.equal("3\r\nend\r\n0\r\n\r\n", enc:finish("end"))
        assert.has_error(function() enc:chunk("more") end)
        local e2 = http.encoder({})
        e2:head(200)
        assert.are.equal("0\r\n\r\n", e2:finish())
    end)

    it("frames chunks the request parser reads back", function()
        local enc = http.encoder({})
        enc:head(200)
        local body = enc:chunk("ab") .. enc:chunk(string.rep("c", 300)) .. enc:finish("d")
        local req = parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" .. body)[1]
        assert.are.equal("ab" .. string.rep("c", 300) .. "d", req.body)
    end)

    it("counts bytes against a given Content-Length", function()
        local enc = http.encoder({})
        local head = enc:head(200, { ["Content-Length"] = 5 })
        assert.truthy(head:find("Content-Length: 5\r\n", 1, true))
        assert.is_nil(head:find("Transfer-Encoding", 1, true))
        assert.are.equal("abc", enc:chunk("abc"))
        assert.has_error(function() enc:chunk("def") end)
        assert.has_error(function() enc:finish() end)         -- 3 of 5 bytes
        assert.are.equal("de", enc:finish("de"))
    end)

    it("writes HEAD responses with GET's headers and no body", function()
        local enc = http.encoder({ method = "HEAD", version = "1.1" })
        local out = enc:full(200, { ["Content-Type"] = "text/plain" }, "twelve bytes")
        assert.truthy(out:find("Content-Length: 12\r\n", 1, true))
        assert.are.equal("\r\n\r\n", out:sub(-4))
        enc = http.encoder({ method = "HEAD" })
        assert.truthy(enc:head(200):find("Transfer-Encoding: chunked", 1, true))
        assert.are.equal("", enc:chunk("data"))
        assert.are.equal("", enc:finish("more"))
        enc = http.encoder({ method = "HEAD" })
        enc:head(200, { ["Content-Length"] = 100 })
        assert.are.equal("", enc:finish())                  -- a HEAD answer need not send the 100 bytes
    end)

    it("writes no body or framing for 204 and 304", function()
        local out = http.encoder({}):full(204, nil, "")
        assert.are.equal("HTTP/1.1 204 No Content\r\nDate: *\r\nServer: glm53\r\n\r\n", undated(out))
        local enc = http.encoder({})
        enc:head(304, { ETag = '"x"' })
        assert.has_error(function() enc:chunk("x") end)
        assert.are.equal("", enc:finish())
        assert.has_error(function() http.encoder({}):full(204, nil, "body") end)
    end)

    it("closes after the response when the request or the caller asks", function()
        local enc = http.encoder({ version = "1.1", keep_alive = false })
        local out = enc:full(200, nil, "x")
        assert.truthy(out:find("Connection: close\r\n", 1, true))
        assert.is_false(enc.keep_alive)
        enc = http.encoder({ version = "1.1", keep_alive = true })
        out = enc:full(200, { Connection = "close" }, "x")
        assert.is_false(enc.keep_alive)
        local _, n = out:gsub("Connection:", "")
        assert.are.equal(1, n)
    end)

    it("answers HTTP/1.0: keep-alive only with a length, until close otherwise", function()
        local enc = http.encoder({ version = "1.0", keep_alive = true })
        local out = enc:full(200, nil, "abc")
        assert.truthy(out:find("Connection: keep-alive\r\n", 1, true))
        assert.is_true(enc.keep_alive)
        enc = http.encoder({ version = "1.0", keep_alive = true })
        local head = enc:head(200, { ["Content-Type"] = "text/event-stream" })
        assert.is_nil(head:find("Transfer-Encoding", 1, true))
        assert.truthy(head:find("Connection: close\r\n", 1, true))
        assert.is_false(enc.keep_alive)
        assert.are.equal("data", enc:chunk("data"))
        assert.are.equal("", enc:finish())
        assert.is_false(http.encoder({ version = "1.0" }).keep_alive)   -- the 1.0 default
    end)

    it("takes a request as its options", function()
        local req = parse("HEAD / HTTP/1.0\r\n\r\n")[1]
        local enc = http.encoder(req)
        assert.is_true(enc.head_only)
        assert.is_false(enc.keep_alive)
        assert.are.equal("1.0", enc.version)
    end)

    it("raises on misuse", function()
        local function head(status, headers) return function() http.encoder({}):head(status, headers) end end
        assert.has_error(head(200, { ["X-Bad"] = "a\r\nInjected: 1" }))
        assert.has_error(head(200, { ["X-Bad"] = "a\nb" }))
        assert.has_error(head(200, { ["X-Bad"] = "a\0b" }))
        assert.has_error(head(200, { ["Bad Name"] = "v" }))
        assert.has_error(head(200, { ["Transfer-Encoding"] = "chunked" }))
        assert.has_error(head(200, { ["Content-Length"] = "-1" }))
        assert.has_error(head(200, { ["X"] = true }))
        assert.has_error(head(100))
        assert.has_error(head(600))
        assert.has_error(head(200.5))
        assert.has_error(function() http.encoder({ version = "2" }) end)
        assert.has_error(function() http.encoder({}):chunk("x") end)   -- before the head
        local enc = http.encoder({})
        enc:head(200)
        assert.has_error(function() enc:head(200) end)
    end)

    it("has the interim 100 Continue and reason phrases", function()
        assert.are.equal("HTTP/1.1 100 Continue\r\n\r\n", http.CONTINUE)
        assert.are.equal("Content Too Large", http.status_text[413])
        assert.truthy(http.encoder({}):head(599):find("^HTTP/1.1 599 Unknown\r\n"))
    end)
end)
