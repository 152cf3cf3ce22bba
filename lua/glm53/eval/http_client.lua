--[[
glm53.eval.http_client - a small HTTP/1.1 client on luv for the eval runner and the load generator: a pool of
keep-alive connections to one server, requests queued while every connection is busy, Content-Length, chunked
and read-until-close bodies, streamed bodies, Server-Sent Events, and timeouts. Plain http:// only.

    local uv = require("luv")
    local http_client = require("glm53.eval.http_client")
    local url = assert(http_client.parse_url("http://127.0.0.1:8000/v1"))   -- { host, port, path = "/v1" }
    local pool = http_client.pool(uv, url, { connections = 4, timeouts = { connect = 10, read = 300 } })
    pool:request({ method = "POST", path = url.path .. "/completions", body = '{"prompt":"hi"}',
                   headers = { ["Content-Type"] = "application/json" },
                   on_body = function(bytes) ... end },        -- optional: body pieces as they arrive
        function(res, err) print(res and res.status, res and res.body, err) end)
    uv.run()
    pool:close()

    local sse = http_client.sse_parser()                       -- WHATWG event-stream parsing
    for _, ev in ipairs(sse:feed("data: {}\n\n")) do print(ev.data) end

pool(uv, url, opts): opts.connections (most open at once, default 1), opts.timeouts in seconds: connect
(default 10), read (longest wait for the next byte of a response, default 600; 0 = none), request (longest
whole request, default 0 = none; req.timeout overrides it per request). A connection is kept for the next
request unless the response says Connection: close or is read until close; a request that finds its reused
connection closed by the server before any byte of the response arrived is sent again once on a new one.

pool:request(req, cb): req.method (default "GET"), req.path, req.headers (a map), req.body (a string),
req.timeout, req.on_head(res), req.on_body(bytes), req.on_dispatch() (called when the request leaves the
pool's queue for a connection, idle or about to be opened: where a client's own waiting ends). cb(res, err)
is called once: res = { status, reason, headers (lower-case names; repeated fields joined with ", "), body (the
whole body, "" when on_body took it) }, or nil and an error ("timeout: ...", "connect: ...", "closed before the response ended", a parse error).
Argument errors raise.

The response parser (http_client.response_parser) is sans-I/O and usable alone: feed it bytes in any split.
]]
local M = {}

local find, sub, lower, match = string.find, string.sub, string.lower, string.match

---------------------------------------------------------------------------------------------------------------
-- URLs
---------------------------------------------------------------------------------------------------------------
-- "http://host[:port][/path]" -> { host, port, path } (path without a trailing "/"; "" for none), or nil, err.
function M.parse_url(url)
    if type(url) ~= "string" then error("http_client.parse_url: url must be a string", 2) end
    local scheme, rest = match(url, "^(%a[%w+.-]*)://(.*)$")
    if not scheme then return nil, "not a URL: " .. url end
    if lower(scheme) ~= "http" then return nil, "only http:// URLs are supported, got " .. url end
    local authority, path = match(rest, "^([^/]*)(.*)$")
    local host, port = match(authority, "^%[([^%]]+)%]:?(%d*)$")   -- [IPv6]:port
    if not host then host, port = match(authority, "^([^:]+):?(%d*)$") end
    if not host or host == "" then return nil, "no host in " .. url end
    port = tonumber(port ~= "" and port or "80")
    if port < 1 or port > 65535 then return nil, "bad port in " .. url end
    path = path:gsub("/+$", "")
    return { host = host, port = port, path = path }
end

---------------------------------------------------------------------------------------------------------------
-- Response parser
---------------------------------------------------------------------------------------------------------------
local Parser = {}
Parser.__index = Parser

local CHUNK_LINE_MAX, HEAD_MAX = 4096, 64 * 1024

-- handlers: on_head(res), on_body(bytes), on_done(res); opts.method (a HEAD response has no body).
function M.response_parser(handlers, opts)
    handlers = handlers or {}
    return setmetatable({ h = handlers, head_only = opts and opts.method == "HEAD", buf = "", state = "status",
                          got_bytes = false }, Parser)
end

local function fail(self, msg)
    self.state, self.err = "error", msg
    return nil, msg
end

-- The next line of the buffer without its line end (CRLF or LF), or nil when it has not arrived.
local function take_line(self, limit)
    local nl = find(self.buf, "\n", 1, true)
    if not nl then
        if #self.buf > limit then return nil, "line too long" end
        return nil
    end
    local line = sub(self.buf, 1, nl - 1)
    self.buf = sub(self.buf, nl + 1)
    if sub(line, -1) == "\r" then line = sub(line, 1, -2) end
    return line
end

function Parser:_body(bytes)
    if #bytes == 0 then return end
    if self.h.on_body then self.h.on_body(bytes) else self.body[#self.body + 1] = bytes end
end

function Parser:_done()
    self.state = "done"
    local res = self.res
    res.body = table.concat(self.body)
    if self.h.on_done then self.h.on_done(res) end
end

-- Framing once the head is in (RFC 9112 6.3): no body for HEAD, 1xx, 204, 304; chunked; Content-Length; else
-- until the connection closes.
function Parser:_head_end()
    local res, status = self.res, self.res.status
    if status >= 100 and status < 200 then   -- an interim response: the real one follows
        self.state = "status"
        return true
    end
    local connection = lower(res.headers["connection"] or "")
    res.keep_alive = res.version == "1.1" and not find(connection, "close", 1, true) or
                     (res.version == "1.0" and find(connection, "keep-alive", 1, true) ~= nil)
    if self.h.on_head then self.h.on_head(res) end
    local te, cl = lower(res.headers["transfer-encoding"] or ""), res.headers["content-length"]
    if self.head_only or status == 204 or status == 304 then
        self:_done()
    elseif te ~= "" then
        if not match(te, "chunked%s*$") then return fail(self, "unsupported transfer coding '" .. te .. "'") end
        self.state = "chunk_size"
    elseif cl then
        local n = tonumber(match(cl, "^%s*(%d+)%s*$") or "")
        if not n then return fail(self, "bad Content-Length '" .. cl .. "'") end
        if n == 0 then self:_done() else self.state, self.remaining = "length", n end
    else
        self.state, res.keep_alive = "close", false
    end
    return true
end

-- Feeds bytes. Returns true (check .state == "done"), or nil, err on a malformed response.
function Parser:feed(data)
    if self.state == "error" then return nil, self.err end
    if #data > 0 then self.got_bytes = true end
    self.buf = self.buf .. data
    while true do
        local st = self.state
        if st == "done" then return true end
        if st == "status" or st == "header" or st == "trailer" or st == "chunk_size" or st == "chunk_crlf" then
            local line, err = take_line(self, st == "chunk_size" and CHUNK_LINE_MAX or HEAD_MAX)
            if err then return fail(self, err) end
            if not line then return true end
            if st == "status" then
                local version, status, reason = match(line, "^HTTP/1%.([01]) (%d%d%d) ?(.*)$")
                if not version then return fail(self, "malformed status line: " .. sub(line, 1, 80)) end
                self.res = { status = tonumber(status), reason = reason, version = "1." .. version, headers = {} }
                self.body = {}
                self.state = "header"
            elseif st == "header" or st == "trailer" then
                if line == "" then
                    if st == "trailer" then self:_done() else
                        local ok, err2 = self:_head_end()
                        if not ok then return nil, err2 end
                    end
                elseif st == "header" then
                    local name, value = match(line, "^([^:%s]+):%s*(.-)%s*$")
                    if not name then return fail(self, "malformed header line: " .. sub(line, 1, 80)) end
                    name = lower(name)
                    local old = self.res.headers[name]
                    self.res.headers[name] = old and (old .. ", " .. value) or value
                end
            elseif st == "chunk_size" then
                local size = tonumber(match(line, "^(%x+)") or "", 16)
                if not size then return fail(self, "malformed chunk size: " .. sub(line, 1, 40)) end
                if size == 0 then self.state = "trailer" else self.state, self.remaining = "chunk_data", size end
            else   -- chunk_crlf
                if line ~= "" then return fail(self, "missing CRLF after chunk data") end
                self.state = "chunk_size"
            end
        elseif st == "length" or st == "chunk_data" then
            if #self.buf == 0 then return true end
            local n = math.min(#self.buf, self.remaining)
            self:_body(sub(self.buf, 1, n))
            self.buf, self.remaining = sub(self.buf, n + 1), self.remaining - n
            if self.remaining == 0 then
                if st == "length" then self:_done() else self.state = "chunk_crlf" end
            end
        else   -- close: everything until EOF is body
            self:_body(self.buf)
            self.buf = ""
            return true
        end
    end
end

-- The connection closed. Returns true when that ends the response (read-until-close) or it had ended; nil, err
-- when the response was cut short.
function Parser:eof()
    if self.state == "done" then return true end
    if self.state == "close" then
        self:_done()
        return true
    end
    return fail(self, self.got_bytes and "connection closed before the response ended" or
                      "connection closed before any response")
end

---------------------------------------------------------------------------------------------------------------
-- Server-Sent Events (WHATWG HTML, "Parsing an event stream")
---------------------------------------------------------------------------------------------------------------
local Sse = {}
Sse.__index = Sse

function M.sse_parser()
    return setmetatable({ buf = "", data = nil, event = nil, id = nil }, Sse)
end

-- Feeds text; returns the events completed by it: { data =, event = (nil = "message"), id = }. Comment lines
-- (":...") are skipped; several data lines join with "\n"; lines end with CRLF, LF or CR.
function Sse:feed(text)
    local events = {}
    self.buf = self.buf .. text
    while true do
        local a, b = find(self.buf, "\r\n?", 1)
        local a2 = find(self.buf, "\n", 1, true)
        if a2 and (not a or a2 < a) then a, b = a2, a2 end
        if not a then break end
        -- A CR at the very end may be half of a CRLF still arriving.
        if sub(self.buf, a, b) == "\r" and b == #self.buf then break end
        local line = sub(self.buf, 1, a - 1)
        self.buf = sub(self.buf, b + 1)
        if line == "" then
            if self.data then
                events[#events + 1] = { data = table.concat(self.data, "\n"), event = self.event, id = self.id }
            end
            self.data, self.event = nil, nil
        elseif sub(line, 1, 1) ~= ":" then
            local field, value = match(line, "^([^:]*):? ?(.*)$")
            if field == "data" then
                self.data = self.data or {}
                self.data[#self.data + 1] = value
            elseif field == "event" then
                self.event = value
            elseif field == "id" and not find(value, "%z") then
                self.id = value
            end
        end
    end
    return events
end

---------------------------------------------------------------------------------------------------------------
-- Connection pool
---------------------------------------------------------------------------------------------------------------
local Pool = {}
Pool.__index = Pool

local DEFAULT_TIMEOUTS = { connect = 10, read = 600, request = 0 }
M.DEFAULT_TIMEOUTS = DEFAULT_TIMEOUTS

function M.pool(uv, url, opts)
    if type(uv) ~= "table" or type(uv.new_tcp) ~= "function" then error("http_client.pool: uv must be luv", 2) end
    if type(url) ~= "table" or type(url.host) ~= "string" or type(url.port) ~= "number" then
        error("http_client.pool: url must be a parse_url result", 2)
    end
    opts = opts or {}
    local timeouts = {}
    for k, v in pairs(DEFAULT_TIMEOUTS) do timeouts[k] = v end
    for k, v in pairs(opts.timeouts or {}) do
        if DEFAULT_TIMEOUTS[k] == nil then error("http_client.pool: unknown timeout '" .. tostring(k) .. "'", 2) end
        timeouts[k] = v
    end
    return setmetatable({
        uv = uv, host = url.host, port = url.port, max = opts.connections or 1, timeouts = timeouts,
        conns = {}, idle = {}, queue = {}, closed = false,
        host_header = (url.host:find(":", 1, true) and "[" .. url.host .. "]" or url.host) ..
                      (url.port ~= 80 and ":" .. url.port or ""),
    }, Pool)
end

local function close_handle(h)
    if h and not h:is_closing() then h:close() end
end

local function stop_timer(t)
    if t then t:stop() close_handle(t) end
end

-- Starts a one-shot timer of secs seconds. The loop's clock advances only while the loop runs; a pool used by a
-- process that did other work since (a test run, a script between loops) would count from a stale time, and a
-- timeout due before "now" fires at once (a 10-s connect timeout failed a connection that had not been tried).
local function start_timer(uv, timer, secs, cb)
    uv.update_time()
    timer:start(math.floor(secs * 1000), 0, cb)
end

-- Ends a job once: its timers stop and cb gets (res, err).
local function finish(job, res, err)
    if job.finished then return end
    job.finished = true
    stop_timer(job.total_timer)
    job.total_timer = nil
    job.cb(res, err)
end

function Pool:_drop(conn)
    if conn.dead then return end
    conn.dead = true
    stop_timer(conn.read_timer)
    conn.read_timer = nil
    close_handle(conn.tcp)
    for i, c in ipairs(self.conns) do if c == conn then table.remove(self.conns, i) break end end
    for i, c in ipairs(self.idle) do if c == conn then table.remove(self.idle, i) break end end
end

-- The read timer: restarted by every byte while a response is awaited.
function Pool:_arm_read(conn)
    local secs = self.timeouts.read
    if secs <= 0 then return end
    if not conn.read_timer then conn.read_timer = self.uv.new_timer() end
    conn.read_timer:stop()
    start_timer(self.uv, conn.read_timer, secs, function()
        local job = conn.job
        self:_drop(conn)
        if job then finish(job, nil, string.format("timeout: no response byte for %g s", secs)) end
        self:_dispatch()
    end)
end

function Pool:_on_read(conn, err, data)
    local job = conn.job
    if err or not data then
        -- Closed (or reset) by the server.
        local parser = conn.parser
        self:_drop(conn)
        if job then
            if parser and not parser.got_bytes and conn.reused and not job.retried then
                job.retried = true   -- a keep-alive connection the server had closed: send again once
                table.insert(self.queue, 1, job)
            elseif parser then
                local ok, perr = parser:eof()
                if not ok then finish(job, nil, err and ("read: " .. tostring(err)) or perr) end
            end
        end
        self:_dispatch()
        return
    end
    if not job then return end   -- bytes on an idle connection: ignore (the next request starts afresh)
    self:_arm_read(conn)
    local ok, perr = conn.parser:feed(data)
    if not ok then
        self:_drop(conn)
        finish(job, nil, perr)
        self:_dispatch()
    end
end

-- The response of conn's job is complete.
function Pool:_on_done(conn, res)
    local job = conn.job
    conn.job, conn.parser = nil, nil
    if conn.read_timer then conn.read_timer:stop() end
    if res.keep_alive and not self.closed then
        conn.reused = true
        self.idle[#self.idle + 1] = conn
    else
        self:_drop(conn)
    end
    finish(job, res)
    self:_dispatch()
end

function Pool:_send(conn, job)
    conn.job = job
    local req = job.req
    conn.parser = M.response_parser({
        on_head = req.on_head,
        on_body = req.on_body,
        on_done = function(res) self:_on_done(conn, res) end,
    }, { method = req.method })
    local body = req.body or ""
    local lines = { (req.method or "GET") .. " " .. (req.path ~= "" and req.path or "/") .. " HTTP/1.1",
                    "Host: " .. self.host_header, "Content-Length: " .. #body }
    for name, value in pairs(req.headers or {}) do
        if find(name, "[\r\n:]") or find(tostring(value), "[\r\n]") then
            error("http_client: CR, LF or ':' in header " .. name, 0)
        end
        lines[#lines + 1] = name .. ": " .. tostring(value)
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = body
    self:_arm_read(conn)
    conn.tcp:write(table.concat(lines, "\r\n"), function(werr)
        if werr and not conn.dead then
            self:_drop(conn)
            finish(job, nil, "write: " .. tostring(werr))
            self:_dispatch()
        end
    end)
end

function Pool:_connect(on_ready)
    local uv = self.uv
    local conn = { tcp = uv.new_tcp() }
    self.conns[#self.conns + 1] = conn
    local timer = uv.new_timer()
    local function failed(msg)
        stop_timer(timer)
        self:_drop(conn)
        on_ready(nil, msg)
    end
    start_timer(uv, timer, self.timeouts.connect, function()
        failed(string.format("connect: timeout after %g s to %s:%d", self.timeouts.connect, self.host, self.port))
    end)
    local function connect(ip)
        conn.tcp:connect(ip, self.port, function(err)
            if conn.dead then return end
            if err then return failed("connect: " .. tostring(err) .. " (" .. self.host .. ":" .. self.port .. ")") end
            stop_timer(timer)
            conn.tcp:nodelay(true)
            conn.tcp:read_start(function(rerr, data) self:_on_read(conn, rerr, data) end)
            on_ready(conn)
        end)
    end
    if self.ip then return connect(self.ip) end
    uv.getaddrinfo(self.host, nil, { socktype = "stream" }, function(err, res)
        if conn.dead then return end
        if err or not res or not res[1] then
            return failed("connect: cannot resolve " .. self.host .. ": " .. tostring(err))
        end
        self.ip = res[1].addr
        connect(self.ip)
    end)
end

-- Hands waiting jobs to idle connections, opening new ones up to the limit.
function Pool:_dispatch()
    while #self.queue > 0 and not self.closed do
        local job = table.remove(self.queue, 1)
        local dispatch = job.req.on_dispatch
        if job.finished then
            -- timed out while waiting
        elseif #self.idle > 0 then
            if dispatch and not job.retried then dispatch() end
            self:_send(table.remove(self.idle), job)
        elseif #self.conns < self.max then
            if dispatch and not job.retried then dispatch() end
            self:_connect(function(conn, err)
                if not conn then
                    finish(job, nil, err)
                elseif job.finished then
                    self.idle[#self.idle + 1] = conn
                else
                    self:_send(conn, job)
                end
                self:_dispatch()
            end)
        else
            table.insert(self.queue, 1, job)
            return
        end
    end
end

function Pool:request(req, cb)
    if type(req) ~= "table" or type(req.path) ~= "string" then error("pool:request: req.path must be a string", 2) end
    if type(cb) ~= "function" then error("pool:request: cb must be a function", 2) end
    if self.closed then error("pool:request: the pool is closed", 2) end
    local job = { req = req, cb = cb }
    local secs = req.timeout or self.timeouts.request
    if secs and secs > 0 then
        job.total_timer = self.uv.new_timer()
        start_timer(self.uv, job.total_timer, secs, function()
            for _, conn in ipairs(self.conns) do
                if conn.job == job then self:_drop(conn) break end
            end
            finish(job, nil, string.format("timeout: request took more than %g s", secs))
            self:_dispatch()
        end)
    end
    self.queue[#self.queue + 1] = job
    self:_dispatch()
end

-- Requests waiting or in flight.
function Pool:pending()
    local n = #self.queue
    for _, conn in ipairs(self.conns) do if conn.job then n = n + 1 end end
    return n
end

-- Closes every connection; requests still waiting or in flight end with "pool closed".
function Pool:close()
    self.closed = true
    local jobs = self.queue
    self.queue = {}
    for _, conn in ipairs(self.conns) do if conn.job then jobs[#jobs + 1] = conn.job end end
    for i = #self.conns, 1, -1 do self:_drop(self.conns[i]) end
    for _, job in ipairs(jobs) do finish(job, nil, "pool closed") end
end

return M
