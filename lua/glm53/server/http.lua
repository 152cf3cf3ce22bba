-- glm53.server.http: a sans-I/O HTTP/1.1 codec for the server's transport layer.
--
-- Nothing here touches a socket: the parser is fed byte strings as they arrive and hands out
-- complete requests; the encoder turns a response into the bytes to write.  The luv connection
-- layer (glm53.server.listener) glues the two to a TCP stream.
--
--   local http = require("glm53.server.http")
--   local p = http.parser({ body_bytes = 1024 * 1024 })
--   p:feed("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
--   local req, err, status = p:next()    -- req, or nil (needs more bytes), or nil, message, status
--   print(req.method, req.path, req.query.x, req.headers["content-length"], req.body)
--   local enc = http.encoder(req)         -- framing follows req.method, req.version, req.keep_alive
--   local bytes = enc:full(200, { ["Content-Type"] = "application/json" }, '{"ok":true}')
--
-- Parser
--   http.parser([limits]) -> parser
--   parser:feed(bytes)     queue bytes; any split is fine (every byte apart, or many requests at once)
--   parser:next()          the next complete request, or nil when more bytes are needed, or
--                          nil, message, status (400, 413, 414, 417, 431, 501, 505) on a bad request;
--                          after an error the parser stays failed and drops its input
--   parser:pending()       the request whose head is parsed while its body is still arriving (nil
--                          otherwise): the caller answers `100 Continue` when .expect_continue is set
--   parser:started()       true once any byte of the next request has arrived
--   parser:buffered()      bytes fed but not yet parsed (pipelined input waits here)
-- Requests are parsed lazily, one per next() call, so a caller that answers in order can leave
-- pipelined requests unparsed in the queue until it is ready for them.
--
-- A request is a plain table:
--   method, target (as sent), path (target without query; "/" for an absolute-form target without
--   one), query (decoded table: a repeated key gives a list of its values), version ("1.0" or
--   "1.1"), headers, body (string, "" when none), keep_alive (boolean), expect_continue (boolean),
--   trailers (headers sent after a chunked body, nil for other bodies).
-- headers[i] = { name, value } in arrival order; headers["Content-Type"] looks up case-insensitively
-- and joins repeated fields with ", "; headers:get(name), headers:values(name) (a list) and
-- headers:has_token(name, token) (comma-separated, case-insensitive) say the same explicitly.
--
-- Input rules (RFC 9112): a bare LF ends a line like CRLF does (as Node and cpp-httplib accept);
-- a bare CR, a NUL or another control byte in the request line or a header is a 400, as are
-- obsolete line folding, whitespace before a header's colon, a missing or repeated Host in 1.1,
-- conflicting Content-Length values, Content-Length together with Transfer-Encoding and
-- Transfer-Encoding in a 1.0 request (RFC 9112 6.1: faulty framing).  Control bytes are refused as
-- they arrive, before their line ends (binary input, a TLS handshake on this port).  Empty
-- lines before a request line are skipped.  Transfer codings other than `chunked` are a 501,
-- HTTP versions other than 1.x a 505, an Expect other than 100-continue a 417.  A 1.x version
-- above 1.1 is read as 1.1.
--
-- Encoder
--   http.encoder({ method=, version=, keep_alive= }) -> enc   (a request works as the argument)
--   enc:head(status, headers)   the status line and headers; framing by Content-Length when the
--                               headers carry one, else chunked for 1.1, else until close for 1.0
--   enc:chunk(bytes)            framed body bytes ("" for HEAD and empty input)
--   enc:finish([bytes])         the last body bytes and, when chunked, the terminating chunk
--   enc:full(status, headers, body)  the whole response, with Content-Length = #body
--   enc.keep_alive              whether the connection may carry another request afterwards
-- headers: a map { Name = value | {values} } (written in sorted order) or a list of { name, value }.
-- Date and Server are added unless given; Connection is the encoder's to write (close when the
-- connection will close, keep-alive for a persistent 1.0 connection); Transfer-Encoding is the
-- encoder's alone.  HEAD responses carry the headers GET would and no body.  Misuse (a CR or LF in
-- a header, more bytes than Content-Length said, a body on a 204) raises: those are caller bugs.
-- http.CONTINUE is the interim `100 Continue` response, http.status_text[code] the reason phrases.

local byte, char, concat, find, format, gsub, lower, match, sub =
    string.byte, string.char, table.concat, string.find, string.format, string.gsub, string.lower,
    string.match, string.sub
local type, tonumber, tostring, pairs, ipairs, setmetatable, error =
    type, tonumber, tostring, pairs, ipairs, setmetatable, error

local http = {}

http.DEFAULT_LIMITS = {
    request_line = 8192,            -- bytes of the request line (414 beyond)
    header_count = 100,             -- header plus trailer fields (431 beyond)
    header_bytes = 16384,           -- bytes of header plus trailer lines, line ends included (431)
    body_bytes = 16 * 1024 * 1024,  -- decoded body bytes, Content-Length or chunked (413)
}

-- A chunk-size line holds a hex size and optional extensions; nobody needs more than this.
local CHUNK_LINE_MAX = 1024

http.status_text = {
    [100] = "Continue", [101] = "Switching Protocols",
    [200] = "OK", [201] = "Created", [202] = "Accepted", [204] = "No Content", [206] = "Partial Content",
    [301] = "Moved Permanently", [302] = "Found", [303] = "See Other", [304] = "Not Modified",
    [307] = "Temporary Redirect", [308] = "Permanent Redirect",
    [400] = "Bad Request", [401] = "Unauthorized", [403] = "Forbidden", [404] = "Not Found",
    [405] = "Method Not Allowed", [406] = "Not Acceptable", [408] = "Request Timeout", [409] = "Conflict",
    [410] = "Gone", [411] = "Length Required", [413] = "Content Too Large", [414] = "URI Too Long",
    [415] = "Unsupported Media Type", [417] = "Expectation Failed", [422] = "Unprocessable Content",
    [429] = "Too Many Requests", [431] = "Request Header Fields Too Large",
    [500] = "Internal Server Error", [501] = "Not Implemented", [502] = "Bad Gateway",
    [503] = "Service Unavailable", [504] = "Gateway Timeout", [505] = "HTTP Version Not Supported",
}

http.CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n"

local TOKEN = "^[!#$%%&'*+%-.^_`|~%w]+$"
local CTL_IN_LINE = "[%z\1-\8\10-\31\127]"   -- controls other than HTAB
-- Controls no line of a head may hold, CR aside (it may be half of a CRLF still arriving): seen in
-- a partial line they end the request at once instead of at the request timeout (binary input, a
-- TLS handshake sent to this plain-HTTP port).
local CTL_IN_PARTIAL = "[%z\1-\8\11\12\14-\31\127]"

------------------------------------------------------------------------------
-- Headers
------------------------------------------------------------------------------

local header_methods = {}

function header_methods.values(self, name)
    local key, out = lower(name), {}
    for i = 1, #self do
        local f = self[i]
        if lower(f[1]) == key then out[#out + 1] = f[2] end
    end
    return out
end

function header_methods.get(self, name)
    local vals = header_methods.values(self, name)
    if #vals == 0 then return nil end
    return concat(vals, ", ")
end

-- Comma-separated list membership, case-insensitive: has_token("Connection", "close").
function header_methods.has_token(self, name, token)
    token = lower(token)
    for _, v in ipairs(header_methods.values(self, name)) do
        for item in v:gmatch("[^,]+") do
            if lower(match(item, "^[ \t]*(.-)[ \t]*$")) == token then return true end
        end
    end
    return false
end

local headers_mt = {
    __index = function(self, key)
        local m = header_methods[key]
        if m then return m end
        if type(key) == "string" then return header_methods.get(self, key) end
        return nil
    end,
}

local function new_headers()
    return setmetatable({}, headers_mt)
end
http.new_headers = new_headers

------------------------------------------------------------------------------
-- Targets and queries
------------------------------------------------------------------------------

local function hex_byte(h) return char(tonumber(h, 16)) end

-- application/x-www-form-urlencoded decoding, as browsers and curl --data-urlencode write it.
function http.unescape(s)
    return (gsub(gsub(s, "%+", " "), "%%(%x%x)", hex_byte))
end

-- { key = value }; a key given twice maps to the list of its values in order.
function http.parse_query(qs)
    local out = {}
    for pair in qs:gmatch("[^&]+") do
        local k, v = match(pair, "^([^=]*)=(.*)$")
        if not k then k, v = pair, "" end
        k, v = http.unescape(k), http.unescape(v)
        local old = out[k]
        if old == nil then
            out[k] = v
        elseif type(old) == "table" then
            old[#old + 1] = v
        else
            out[k] = { old, v }
        end
    end
    return out
end

local function split_target(target)
    local rest = match(target, "^%a[%w+.-]*://[^/?#]*(.*)$") or target   -- absolute-form
    local path, qs = match(rest, "^([^?#]*)%??([^#]*)")
    if path == "" then path = "/" end
    return path, http.parse_query(qs)
end

------------------------------------------------------------------------------
-- Parser
------------------------------------------------------------------------------

local Parser = {}
Parser.__index = Parser

local function check_limits(limits)
    local out = {}
    for k, v in pairs(http.DEFAULT_LIMITS) do out[k] = v end
    if limits == nil then return out end
    if type(limits) ~= "table" then error("http.parser: limits must be a table", 3) end
    for k, v in pairs(limits) do
        if http.DEFAULT_LIMITS[k] == nil then error("http.parser: unknown limit '" .. tostring(k) .. "'", 3) end
        if type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
            error("http.parser: limit '" .. k .. "' must be a positive integer", 3)
        end
        out[k] = v
    end
    return out
end

function http.parser(limits)
    local self = setmetatable({ limits = check_limits(limits) }, Parser)
    self.queue, self.qhead, self.qtail, self.qoff, self.qbytes = {}, 1, 0, 1, 0
    self.line, self.line_len = {}, 0          -- pieces of a line whose LF has not arrived
    self:reset_request()
    return self
end

function Parser:reset_request()
    self.state = "start"
    self.req = nil
    self.fields, self.field_bytes = 0, 0      -- header + trailer budget of the current request
    self.body, self.body_len, self.remaining = {}, 0, 0
end

function Parser:feed(data)
    if type(data) ~= "string" then error("parser:feed: bytes must be a string", 2) end
    if self.state == "error" or #data == 0 then return end
    self.qtail = self.qtail + 1
    self.queue[self.qtail] = data
    self.qbytes = self.qbytes + #data
end

function Parser:buffered() return self.qbytes end

function Parser:started()
    return self.qbytes > 0 or self.line_len > 0 or self.state ~= "start"
end

function Parser:pending()
    local s = self.state
    if s == "body" or s == "chunk_size" or s == "chunk_data" or s == "chunk_crlf" or s == "trailer" then
        return self.req
    end
    return nil
end

function Parser:fail(status, message)
    self.state, self.err, self.status = "error", message, status
    self.queue, self.qhead, self.qtail, self.qoff, self.qbytes = {}, 1, 0, 1, 0
    self.line, self.line_len, self.body, self.req = {}, 0, {}, nil
    return nil, message, status
end

-- Drop n bytes from the front of the queue's head string s.
function Parser:consume(s, n)
    self.qbytes = self.qbytes - n
    self.qoff = self.qoff + n
    if self.qoff > #s then
        self.queue[self.qhead] = nil
        self.qhead, self.qoff = self.qhead + 1, 1
    end
end

-- The most bytes the line being read may take (line end included), and the status when it is over.
function Parser:line_budget()
    local s, L = self.state, self.limits
    if s == "start" then return L.request_line, 414, "request line too long" end
    if s == "header" or s == "trailer" then
        return L.header_bytes - self.field_bytes, 431, "header fields too large"
    end
    if s == "chunk_size" then return CHUNK_LINE_MAX, 400, "chunk size line too long" end
    return 2, 400, "missing CRLF after chunk data"   -- chunk_crlf
end

function Parser:next()
    if self.state == "error" then return nil, self.err, self.status end
    while true do
        local s = self.queue[self.qhead]
        if s == nil then return nil end
        local st = self.state
        if st == "body" or st == "chunk_data" then
            local avail = #s - self.qoff + 1
            local n = avail < self.remaining and avail or self.remaining
            local piece = (self.qoff == 1 and n == #s) and s or sub(s, self.qoff, self.qoff + n - 1)
            self.body[#self.body + 1] = piece
            self.body_len, self.remaining = self.body_len + n, self.remaining - n
            self:consume(s, n)
            if self.remaining == 0 then
                if st == "body" then return self:complete() end
                self.state = "chunk_crlf"
            end
        else
            local budget, status, why = self:line_budget()
            local nl = find(s, "\n", self.qoff, true)
            if nl == nil then
                local piece = sub(s, self.qoff)
                self.line[#self.line + 1] = piece
                self.line_len = self.line_len + #piece
                self:consume(s, #piece)
                if self.line_len >= budget then return self:fail(status, why) end
                if find(piece, CTL_IN_PARTIAL) then return self:fail(400, "control byte in the request head or chunk framing") end
            else
                local piece = sub(s, self.qoff, nl - 1)
                local len = self.line_len + #piece + 1
                self:consume(s, #piece + 1)
                if len > budget then return self:fail(status, why) end
                local line = piece
                if self.line_len > 0 then
                    self.line[#self.line + 1] = piece
                    line = concat(self.line)
                    self.line, self.line_len = {}, 0
                end
                if byte(line, -1) == 13 then line = sub(line, 1, -2) end
                if find(line, "\r", 1, true) then return self:fail(400, "bare CR in a line") end
                local req, err, err_status = self:on_line(line, len)
                if req or err then return req, err, err_status end
            end
        end
    end
end

-- One complete line (line end stripped) of the request line, headers, chunk framing or trailers.
-- Returns a finished request, or nil, message, status, or nothing to keep reading.
function Parser:on_line(line, len)
    local st = self.state
    if st == "start" then
        if line == "" then return end                  -- RFC 9112 2.2: ignore leading empty lines
        return self:on_request_line(line)
    elseif st == "header" or st == "trailer" then
        if line == "" then
            if st == "trailer" then return self:complete() end
            return self:on_head_end()
        end
        local fields = st == "header" and self.req.headers or self.req.trailers
        self.field_bytes = self.field_bytes + len
        return self:on_field(line, fields)
    elseif st == "chunk_size" then
        return self:on_chunk_size(line)
    else -- chunk_crlf
        if line ~= "" then return self:fail(400, "missing CRLF after chunk data") end
        self.state = "chunk_size"
    end
end

function Parser:on_request_line(line)
    local method, target, version = match(line, "^(%S+) (%S+) (%S+)$")
    if not method or not find(method, TOKEN) then return self:fail(400, "malformed request line") end
    if find(target, "[%z\1-\32\127]") then return self:fail(400, "control byte in request target") end
    local major, minor = match(version, "^HTTP/(%d)%.(%d)$")
    if not major then return self:fail(400, "malformed HTTP version") end
    if major ~= "1" then return self:fail(505, "HTTP version " .. sub(version, 6) .. " is not supported") end
    local path, query = split_target(target)
    self.req = {
        method = method, target = target, path = path, query = query,
        version = minor == "0" and "1.0" or "1.1",
        headers = new_headers(), body = "", keep_alive = false, expect_continue = false,
    }
    self.state = "header"
end

function Parser:on_field(line, fields)
    local c = byte(line, 1)
    if c == 32 or c == 9 then return self:fail(400, "obsolete header line folding") end
    self.fields = self.fields + 1
    if self.fields > self.limits.header_count then return self:fail(431, "too many header fields") end
    local name, value = match(line, "^([^:]*):[ \t]*(.-)[ \t]*$")
    if not name or not find(name, TOKEN) then return self:fail(400, "malformed header field") end
    if find(value, CTL_IN_LINE) then return self:fail(400, "control byte in header value") end
    fields[#fields + 1] = { name, value }
end

-- Body framing, connection persistence and expectations, decided once the head is complete.
function Parser:on_head_end()
    local req, h = self.req, self.req.headers
    if req.version == "1.1" and #h:values("host") ~= 1 then
        return self:fail(400, "HTTP/1.1 request needs exactly one Host header")
    end
    local te, cl = h:values("transfer-encoding"), h:values("content-length")
    local chunked, length = false, 0
    if #te > 0 then
        if req.version == "1.0" then return self:fail(400, "Transfer-Encoding in an HTTP/1.0 request") end
        if #cl > 0 then return self:fail(400, "both Content-Length and Transfer-Encoding") end
        local codings = 0
        for _, v in ipairs(te) do
            for item in (v .. ","):gmatch("([^,]*),") do
                local coding = lower(match(item, "^[ \t]*(.-)[ \t]*$"))
                if coding ~= "chunked" then
                    return self:fail(501, "transfer coding '" .. coding .. "' is not implemented")
                end
                codings = codings + 1
            end
        end
        if codings ~= 1 then return self:fail(400, "chunked applied more than once") end
        chunked = true
    elseif #cl > 0 then
        local digits
        for _, v in ipairs(cl) do
            for item in (v .. ","):gmatch("([^,]*),") do
                local d = match(item, "^[ \t]*(%d+)[ \t]*$")
                if not d or (digits and d ~= digits) then return self:fail(400, "invalid Content-Length") end
                digits = d
            end
        end
        digits = gsub(digits, "^0+(%d)", "%1")
        if #digits > 15 or tonumber(digits) > self.limits.body_bytes then
            return self:fail(413, "request body larger than " .. self.limits.body_bytes .. " bytes")
        end
        length = tonumber(digits)
    end
    local expect = h:get("expect")
    if expect and req.version == "1.1" then       -- RFC 9110 10.1.1: a 1.0 request's Expect is ignored
        if lower(expect) ~= "100-continue" then return self:fail(417, "unsupported expectation") end
        req.expect_continue = true
    end
    if h:has_token("connection", "close") then
        req.keep_alive = false
    elseif req.version == "1.1" then
        req.keep_alive = true
    else
        req.keep_alive = h:has_token("connection", "keep-alive")
    end
    if chunked then
        req.trailers = new_headers()
        self.state = "chunk_size"
    elseif length > 0 then
        self.state, self.remaining = "body", length
    else
        return self:complete()
    end
end

function Parser:on_chunk_size(line)
    local hex, ext = match(line, "^(%x+)(.*)$")
    if not hex or not (ext == "" or find(ext, "^[ \t]*;")) then return self:fail(400, "malformed chunk size") end
    hex = gsub(hex, "^0+(%x)", "%1")
    local size = #hex <= 12 and tonumber(hex, 16) or math.huge
    if size > self.limits.body_bytes - self.body_len then
        return self:fail(413, "request body larger than " .. self.limits.body_bytes .. " bytes")
    end
    if size == 0 then
        self.state = "trailer"
    else
        self.state, self.remaining = "chunk_data", size
    end
end

function Parser:complete()
    local req = self.req
    req.body = concat(self.body)
    self:reset_request()
    return req
end

------------------------------------------------------------------------------
-- Encoder
------------------------------------------------------------------------------

local DAYS = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" }
local MONTHS = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" }
local date_cache_time, date_cache

-- IMF-fixdate (RFC 9110 5.6.7) of `t` (default now), without the locale os.date("%a") would use.
function http.date(t)
    t = t or os.time()
    if t == date_cache_time then return date_cache end
    local d = os.date("!*t", t)
    local s = format("%s, %02d %s %04d %02d:%02d:%02d GMT", DAYS[d.wday], d.day, MONTHS[d.month], d.year,
        d.hour, d.min, d.sec)
    date_cache_time, date_cache = t, s
    return s
end

http.SERVER = "glm53"

-- The user's headers as a list of { name, value } strings, validated.
local function header_list(headers, where)
    local list = {}
    if headers == nil then return list end
    if type(headers) ~= "table" then error(where .. ": headers must be a table", 3) end
    local function add(name, value)
        if type(name) ~= "string" or not find(name, TOKEN) then
            error(where .. ": invalid header name " .. format("%q", tostring(name)), 4)
        end
        local tv = type(value)
        if tv == "number" then
            value = tostring(value)
        elseif tv ~= "string" then
            error(where .. ": header '" .. name .. "' value must be a string or number", 4)
        end
        if find(value, "[%z\r\n]") then error(where .. ": CR, LF or NUL in header '" .. name .. "'", 4) end
        list[#list + 1] = { name, value }
    end
    if #headers > 0 then
        for _, f in ipairs(headers) do add(f[1], f[2]) end
    else
        local names = {}
        for k in pairs(headers) do names[#names + 1] = k end
        table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
        for _, k in ipairs(names) do
            local v = headers[k]
            if type(v) == "table" then
                for _, item in ipairs(v) do add(k, item) end
            else
                add(k, v)
            end
        end
    end
    return list
end

local Encoder = {}
Encoder.__index = Encoder

function http.encoder(opts)
    if type(opts) ~= "table" then error("http.encoder: expected a table (a request or options)", 2) end
    local version = opts.version or "1.1"
    if version ~= "1.1" and version ~= "1.0" then error("http.encoder: version must be '1.0' or '1.1'", 2) end
    local keep_alive = opts.keep_alive
    if keep_alive == nil then keep_alive = version == "1.1" end
    return setmetatable({
        version = version, head_only = opts.method == "HEAD", keep_alive = keep_alive and true or false,
        mode = nil, sent = 0, length = nil, done = false,
    }, Encoder)
end

function Encoder:head(status, headers)
    if self.mode then error("encoder:head: the head was already written", 2) end
    if type(status) ~= "number" or status ~= math.floor(status) or status < 200 or status > 599 then
        error("encoder:head: status must be an integer in 200..599 (use http.CONTINUE for 100)", 2)
    end
    local list = header_list(headers, "encoder:head")
    local out = { format("HTTP/1.1 %d %s\r\n", status, http.status_text[status] or "Unknown") }
    local has_date, has_server = false, false
    for _, f in ipairs(list) do
        local key = lower(f[1])
        if key == "transfer-encoding" then
            error("encoder:head: Transfer-Encoding is written by the encoder", 2)
        elseif key == "content-length" then
            if not match(f[2], "^%d+$") or (self.length and self.length ~= tonumber(f[2])) then
                error("encoder:head: invalid Content-Length '" .. f[2] .. "'", 2)
            end
            self.length = tonumber(f[2])
        elseif key == "connection" then
            for item in f[2]:gmatch("[^,]+") do
                if lower(match(item, "^[ \t]*(.-)[ \t]*$")) == "close" then self.keep_alive = false end
            end
        else
            has_date = has_date or key == "date"
            has_server = has_server or key == "server"
            out[#out + 1] = f[1] .. ": " .. f[2] .. "\r\n"
        end
    end
    if status == 204 or status == 304 then
        if status == 204 and self.length and self.length > 0 then
            error("encoder:head: a 204 response has no body", 2)
        end
        if self.length then out[#out + 1] = "Content-Length: " .. self.length .. "\r\n" end
        self.mode = "none"
    elseif self.length then
        self.mode = "length"
        out[#out + 1] = "Content-Length: " .. self.length .. "\r\n"
    elseif self.version == "1.1" then
        self.mode = "chunked"
        out[#out + 1] = "Transfer-Encoding: chunked\r\n"
    else
        self.mode, self.keep_alive = "close", false
    end
    if not self.keep_alive then
        out[#out + 1] = "Connection: close\r\n"
    elseif self.version == "1.0" then
        out[#out + 1] = "Connection: keep-alive\r\n"
    end
    if not has_date then out[#out + 1] = "Date: " .. http.date() .. "\r\n" end
    if not has_server then out[#out + 1] = "Server: " .. http.SERVER .. "\r\n" end
    out[#out + 1] = "\r\n"
    return concat(out)
end

function Encoder:chunk(data)
    if type(data) ~= "string" then error("encoder:chunk: body bytes must be a string", 2) end
    if not self.mode then error("encoder:chunk: write the head first", 2) end
    if self.done then error("encoder:chunk: the response is finished", 2) end
    local n = #data
    if n == 0 then return "" end
    if self.mode == "none" then error("encoder:chunk: this status has no body", 2) end
    if self.length and self.sent + n > self.length then
        error(format("encoder:chunk: %d bytes exceed Content-Length %d", self.sent + n, self.length), 2)
    end
    self.sent = self.sent + n
    if self.head_only then return "" end
    if self.mode == "chunked" then return format("%x\r\n", n) .. data .. "\r\n" end
    return data
end

function Encoder:finish(data)
    local out = data ~= nil and self:chunk(data) or ""
    if self.length and self.sent ~= self.length and not self.head_only then
        error(format("encoder:finish: %d bytes sent of Content-Length %d", self.sent, self.length), 2)
    end
    self.done = true
    if self.mode == "chunked" and not self.head_only then out = out .. "0\r\n\r\n" end
    return out
end

function Encoder:full(status, headers, body)
    body = body or ""
    if type(body) ~= "string" then error("encoder:full: body must be a string", 2) end
    local list = header_list(headers, "encoder:full")
    if status ~= 204 and status ~= 304 then list[#list + 1] = { "Content-Length", tostring(#body) } end
    return self:head(status, list) .. self:finish(body)
end

return http
