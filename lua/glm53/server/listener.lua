-- glm53.server.listener: HTTP/1.1 connections on a luv (libuv) TCP listener.
--
-- It owns the sockets: keep-alive, pipelining answered in order, limits, timeouts, backpressure
-- and graceful shutdown.  Parsing and framing are glm53.server.http's; routes are the handler's.
--
--   local uv = require("luv")
--   local listener = require("glm53.server.listener")
--   local server = assert(listener.listen({ port = 8080 }, function(req, res)
--       if req.path ~= "/health" then
--           res:write_head(404, { ["Content-Type"] = "application/json" })
--           return res:finish(listener.error_body("no route for " .. req.path))
--       end
--       res:write_head(200, { ["Content-Type"] = "application/json" })
--       res:finish('{"status":"ok"}')
--   end))
--   uv.run()        -- returns once SIGINT/SIGTERM has shut the server down
--
-- listener.listen(opts, handler) -> server | nil, err
--   opts.host       IP address to bind (default "127.0.0.1"); opts.port (default 8080, 0 = any free)
--   opts.limits     glm53.server.http's parser limits plus pipeline_bytes, write_high, write_low,
--                   connections (listener.DEFAULT_LIMITS)
--   opts.timeouts   seconds: idle, request, write, linger, shutdown (listener.DEFAULT_TIMEOUTS); 0 turns
--                   idle, request or write off
--   opts.backlog    listen(2) backlog (default 511)
--   opts.signals    handle SIGINT and SIGTERM by a graceful shutdown (default true); a second signal
--                   closes everything at once
--   opts.log        function(level, message), level "info" | "warn" | "error"; default: stderr
--   handler(req, res) runs once per request, in arrival order per connection; req is the codec's
--   request table plus remote_addr and remote_port (the client's).  The handler may answer at once
--   or later, from any luv callback.
-- server.host, server.port   where it listens (port resolved when 0 was asked)
-- server:close([grace_s], [on_closed])  stop accepting, close idle connections, let in-flight
--   responses finish for up to grace_s (default timeouts.shutdown), then close the rest;
--   on_closed() runs once every connection is gone.
--
-- Response (res)
--   res:write_head(status, headers)  record status and headers; they go out with the first write
--   res:set_header(name, value)  a header this response carries whatever write_head gives (middleware's: CORS),
--                        unless write_head names it too; before the head goes out
--   res:write(bytes)     send body bytes (chunked unless headers gave a Content-Length; "" sends
--                        just the head).  Returns true, or false once more than limits.write_high
--                        bytes wait in libuv's queue (wait for res:on_drain), or nil, "closed"
--   res:finish([bytes])  end the response; without a prior write, Content-Length = #bytes
--   res:on_drain(fn)     fn() once the queue is down to limits.write_low (next loop turn if it is)
--   res:on_finish(fn)    fn() once res:finish() has handed the whole response to the socket
--   res:on_close(fn)     fn() once if the response ends without res:finish(): the client went away,
--                        a timeout or shutdown closed the connection, or the handler raised
--   res.closed           true once that has happened; writes then return nil, "closed"
--   res:buffered()       bytes waiting in the write queue
--
-- Errors: bad arguments raise; a bind failure returns nil, err.  Errors raised inside the handler
-- or any callback are caught and logged: before the head went out the client gets a 500, after it
-- the connection is closed.  Requests the codec rejects get their status with an OpenAI-shaped
-- JSON error body (listener.error_body), then the connection closes.

local uv = require("luv")
local cjson = require("cjson")
local http = require("glm53.server.http")

local format, traceback, type, tostring, pairs, ipairs, setmetatable, error, xpcall =
    string.format, debug.traceback, type, tostring, pairs, ipairs, setmetatable, error, xpcall

local listener = {}

listener.DEFAULT_LIMITS = {
    pipeline_bytes = 64 * 1024,     -- bytes read ahead while a response is in flight; reading pauses beyond
    write_high = 1024 * 1024,       -- res:write returns false above this many queued bytes
    write_low = 256 * 1024,         -- res:on_drain fires at or below this many
    connections = 1024,             -- open connections; more are accepted and closed at once
}
for k, v in pairs(http.DEFAULT_LIMITS) do listener.DEFAULT_LIMITS[k] = v end

listener.DEFAULT_TIMEOUTS = {
    idle = 30,        -- keep-alive connection with no request under way
    request = 60,     -- from a request's first byte to its last (head and body); 408 after
    write = 60,       -- queued response bytes with no progress (a client that stopped reading)
    linger = 2,       -- after the last response: wait this long for the client's FIN, reading and discarding
    shutdown = 10,    -- grace for in-flight responses in server:close()
}

-- The OpenAI error shape, as a JSON string.
function listener.error_body(message, kind)
    return '{"error":{"message":' .. cjson.encode(tostring(message)) .. ',"type":' ..
        cjson.encode(kind or "invalid_request_error") .. ',"param":null,"code":null}}'
end

local function default_log(level, message)
    io.stderr:write(os.date("%Y-%m-%d %H:%M:%S"), " glm53.server ", level, ": ", message, "\n")
end

-- Runs fn(...) and logs instead of raising: an error escaping a luv callback would end the process.
local function protect(server, what, fn, ...)
    local ok, err = xpcall(fn, traceback, ...)
    if not ok then server.log("error", what .. ": " .. tostring(err)) end
    return ok, err
end

------------------------------------------------------------------------------
-- Response
------------------------------------------------------------------------------

local Response = {}
Response.__index = Response

local function new_response(conn, req)
    return setmetatable({
        conn = conn, closed = false, finished = false, head_sent = false, status = 200, headers = nil,
        enc = http.encoder({ method = req.method, version = req.version,
                             keep_alive = req.keep_alive and not conn.server.closing }),
        close_cbs = {}, drain_cbs = {},
    }, Response)
end

function Response:write_head(status, headers)
    if self.finished then error("res:write_head: the response is finished", 2) end
    if self.head_sent then error("res:write_head: the head was already sent", 2) end
    if type(status) ~= "number" or status % 1 ~= 0 or status < 200 or status > 599 then
        error("res:write_head: status must be an integer in 200..599", 2)
    end
    if headers ~= nil and type(headers) ~= "table" then error("res:write_head: headers must be a table", 2) end
    self.status, self.headers = status, headers
end

function Response:set_header(name, value)
    if self.head_sent then error("res:set_header: the head was already sent", 2) end
    if type(name) ~= "string" or type(value) ~= "string" then error("res:set_header: name and value are strings", 2) end
    self.extra_headers = self.extra_headers or {}
    self.extra_headers[name] = value
end

-- write_head's headers with set_header's added (write_head's win: header names compared case-insensitively).
local function head_headers(self)
    local extra = self.extra_headers
    if not extra then return self.headers end
    local merged, named = {}, {}
    for k, v in pairs(self.headers or {}) do
        merged[k] = v
        named[k:lower()] = true
    end
    for k, v in pairs(extra) do
        if not named[k:lower()] then merged[k] = v end
    end
    return merged
end

function Response:write(data)
    if self.finished then error("res:write: the response is finished", 2) end
    if type(data) ~= "string" then error("res:write: bytes must be a string", 2) end
    if self.closed then return nil, "closed" end
    local out
    if self.head_sent then
        out = self.enc:chunk(data)
    else
        out = self.enc:head(self.status, head_headers(self))
        self.head_sent = true
        out = out .. self.enc:chunk(data)
    end
    if #out > 0 then self.conn:send(out) end
    if self.closed then return nil, "closed" end
    return self.conn:queued() <= self.conn.limits.write_high
end

function Response:finish(data)
    if self.finished then error("res:finish: the response is already finished", 2) end
    if data ~= nil and type(data) ~= "string" then error("res:finish: bytes must be a string", 2) end
    if self.closed then
        self.finished = true
        return nil, "closed"
    end
    local out
    if self.head_sent then
        out = self.enc:finish(data)
    else
        out = self.enc:full(self.status, head_headers(self), data or "")
        self.head_sent = true
    end
    self.finished = true
    if #out > 0 then self.conn:send(out) end
    local cbs = self.finish_cbs
    self.finish_cbs = nil
    for _, fn in ipairs(cbs or {}) do protect(self.conn.server, "on_finish callback", fn) end
    self.conn:after_response(self)
    return true
end

function Response:on_finish(fn)
    if type(fn) ~= "function" then error("res:on_finish: expected a function", 2) end
    if self.finished or self.closed then return end
    self.finish_cbs = self.finish_cbs or {}
    self.finish_cbs[#self.finish_cbs + 1] = fn
end

function Response:buffered()
    return self.closed and 0 or self.conn:queued()
end

function Response:on_close(fn)
    if type(fn) ~= "function" then error("res:on_close: expected a function", 2) end
    if self.closed then
        protect(self.conn.server, "on_close callback", fn)
    elseif not self.finished then
        self.close_cbs[#self.close_cbs + 1] = fn
    end
end

function Response:on_drain(fn)
    if type(fn) ~= "function" then error("res:on_drain: expected a function", 2) end
    if self.closed or self.finished then return end
    if self.conn:queued() <= self.conn.limits.write_low then
        local t = uv.new_timer()
        t:start(0, 0, function()
            t:close()
            if not self.closed and not self.finished then protect(self.conn.server, "on_drain callback", fn) end
        end)
    else
        self.drain_cbs[#self.drain_cbs + 1] = fn
    end
end

-- The response ends without finish(): tell whoever registered on_close.
function Response:abandon()
    if self.finished or self.closed then return end
    self.closed = true
    local cbs = self.close_cbs
    self.close_cbs, self.drain_cbs = {}, {}
    for _, fn in ipairs(cbs) do protect(self.conn.server, "on_close callback", fn) end
end

function Response:drained()
    local cbs = self.drain_cbs
    if #cbs == 0 then return end
    self.drain_cbs = {}
    for _, fn in ipairs(cbs) do protect(self.conn.server, "on_drain callback", fn) end
end

------------------------------------------------------------------------------
-- Connection
------------------------------------------------------------------------------

-- Phases, and the one timer that guards each:
--   idle      keep-alive, nothing of the next request yet          timeouts.idle, then close
--   request   part of a request read                               timeouts.request, then 408
--   busy      the handler owns the response                        none while nothing is queued
--   write     response bytes queued (any phase)                    timeouts.write without progress
--   ending    last response written, FIN sent, reading to discard  timeouts.linger, then close
local Conn = {}
Conn.__index = Conn

local function new_conn(server, tcp)
    local self = setmetatable({
        server = server, tcp = tcp, limits = server.limits, timeouts = server.timeouts,
        parser = http.parser(server.codec_limits), timer = uv.new_timer(), timer_kind = nil,
        res = nil, closed = false, reading = false, ending = false, eof = false, shut = false,
        in_process = false, continued = nil,
    }, Conn)
    self.on_read_cb = function(err, data) protect(server, "read", self.on_read, self, err, data) end
    self.on_write_cb = function(err) protect(server, "write", self.on_write, self, err) end
    self.on_timer_cb = function() protect(server, "timer", self.on_timer, self) end
    return self
end

function Conn:start()
    self.tcp:nodelay(true)     -- SSE events are small; do not hold them back for Nagle
    self.peer = self.tcp:getpeername()
    self:read(true)
    self:update_timer()
end

function Conn:read(on)
    if self.closed or on == self.reading then return end
    if on then
        local ok, err = self.tcp:read_start(self.on_read_cb)
        if not ok then return self:close("read_start: " .. tostring(err)) end
    else
        self.tcp:read_stop()
    end
    self.reading = on
end

function Conn:queued()
    return self.tcp:get_write_queue_size()
end

function Conn:on_read(err, data)
    if self.closed then return end
    if err then return self:close("read: " .. err) end
    if data == nil then                                    -- the client's FIN
        if self.ending and not self.shut then
            self.eof = true                                -- close once our own FIN is out
            return self:read(false)
        end
        return self:close("client closed")
    end
    if self.ending then return end                         -- lingering: discard
    self.parser:feed(data)
    if not self.res then self:process() end
    -- Input queued behind a response in flight is bounded: stop reading until it is answered.
    if self.res and self.parser:buffered() > self.limits.pipeline_bytes then self:read(false) end
end

-- Parse and dispatch requests until one is in flight or more bytes are needed.
function Conn:process()
    if self.in_process then return end
    self.in_process = true
    while not self.closed and not self.ending and not self.res do
        local req, message, status = self.parser:next()
        if req then
            self:dispatch(req)
        elseif message then
            self:fail(status, message)
        else
            local head = self.parser:pending()
            if head and head.expect_continue and self.continued ~= head then
                self.continued = head
                self:send(http.CONTINUE)
            end
            break
        end
    end
    self.in_process = false
    self:update_timer()
end

function Conn:dispatch(req)
    if self.peer then req.remote_addr, req.remote_port = self.peer.ip, self.peer.port end
    local res = new_response(self, req)
    self.res = res
    self:update_timer()
    local ok, err = xpcall(self.server.handler, traceback, req, res)
    if ok then return end
    self.server.log("error", "handler " .. req.method .. " " .. req.target .. ": " .. tostring(err))
    if self.res ~= res then return end                     -- it finished before raising
    local head_sent = res.head_sent
    res:abandon()
    self.res = nil
    if head_sent then return self:close("handler error") end
    self:fail(500, "internal server error", "server_error")
end

function Conn:after_response(res)
    if self.res ~= res then return end
    self.res = nil
    if self.closed then return end
    if not res.enc.keep_alive or self.server.closing then return self:finish_connection() end
    self:read(true)
    self:process()
end

function Conn:send(data)
    if self.closed then return false end
    -- With nothing queued, the socket takes the bytes now (try_write: no write request, no callback, no timer
    -- change): a streamed token is one such write per stream. What it does not take is queued as usual.
    if self.tcp:get_write_queue_size() == 0 then
        local n = self.tcp:try_write(data)
        if n == #data then return true end
        if type(n) == "number" and n > 0 then data = data:sub(n + 1) end
    end
    local req, err = self.tcp:write(data, self.on_write_cb)
    if not req then
        self:close("write: " .. tostring(err))
        return false
    end
    self:update_timer()
    return true
end

function Conn:on_write(err)
    if self.closed then return end
    if err then return self:close("write: " .. err) end
    local queued = self:queued()
    if self.res and queued <= self.limits.write_low then self.res:drained() end
    if queued == 0 then self:update_timer() end
end

-- Answer a request the codec (or the handler) could not serve, then close.
function Conn:fail(status, message, kind)
    if self.closed or self.ending then return end
    local peer = self.peer and (self.peer.ip .. ":" .. self.peer.port) or "?"
    self.server.log("info", format("%s: %d %s", peer, status, message))
    local enc = http.encoder({ version = "1.1", keep_alive = false })
    self:send(enc:full(status, { ["Content-Type"] = "application/json" }, listener.error_body(message, kind)))
    self:finish_connection()
end

-- Send our FIN once the queue is written, then read and discard until the client's FIN or the
-- linger timeout: closing with unread input makes the kernel send a RST, which can destroy the
-- response before the client has read it (a 413 answered while the body still streams in).
function Conn:finish_connection()
    if self.closed or self.ending then return end
    self.ending = true
    self.parser = nil
    self:read(true)
    local ok, err = self.tcp:shutdown(function(e)
        protect(self.server, "shutdown", self.on_shutdown, self, e)
    end)
    if not ok then return self:close("shutdown: " .. tostring(err)) end
    self:update_timer()
end

function Conn:on_shutdown(err)
    if self.closed then return end
    if err or self.eof then return self:close(err and ("shutdown: " .. err) or "done") end
    self.shut = true
    self:update_timer()
end

function Conn:update_timer()
    if self.closed then return end
    local kind
    if self:queued() > 0 then
        kind = "write"
    elseif self.ending then
        kind = self.shut and "linger" or nil
    elseif self.res then
        kind = nil
    elseif self.parser:started() then
        kind = "request"
    else
        kind = "idle"
    end
    if kind == self.timer_kind then return end
    self.timer:stop()
    self.timer_kind = kind
    local seconds = kind and self.timeouts[kind]
    if not seconds or (seconds == 0 and kind ~= "linger") then return end
    if kind == "write" then self.write_mark = self:queued() end
    self.timer:start(math.floor(seconds * 1000 + 0.5), 0, self.on_timer_cb)
end

function Conn:on_timer()
    if self.closed then return end
    local kind = self.timer_kind
    self.timer_kind = nil
    if kind == "idle" then
        self:close("idle timeout")
    elseif kind == "request" then
        self:fail(408, format("request not complete within %g s", self.timeouts.request))
    elseif kind == "write" then
        if self:queued() < self.write_mark then return self:update_timer() end   -- slow, but moving
        self:close("write timeout: the client stopped reading")
    else -- linger
        self:close("linger timeout")
    end
end

function Conn:close(reason)
    if self.closed then return end
    self.closed = true
    self.close_reason = reason
    self.timer:close()
    if not self.tcp:is_closing() then self.tcp:close() end
    local res = self.res
    self.res = nil
    if res then res:abandon() end
    self.server:forget(self)
end

------------------------------------------------------------------------------
-- Server
------------------------------------------------------------------------------

local Server = {}
Server.__index = Server

local function check_table(value, defaults, what)
    local out = {}
    for k, v in pairs(defaults) do out[k] = v end
    if value == nil then return out end
    if type(value) ~= "table" then error("listener.listen: " .. what .. " must be a table", 3) end
    for k, v in pairs(value) do
        if defaults[k] == nil then error("listener.listen: unknown " .. what .. " '" .. tostring(k) .. "'", 3) end
        if type(v) ~= "number" or v < 0 then error("listener.listen: " .. what .. "." .. k .. " must be a number >= 0", 3) end
        out[k] = v
    end
    return out
end

-- A write to a socket whose peer has gone raises SIGPIPE, whose default action ends the process (libuv does not
-- ignore it, Node does). Catching it on the loop turns such writes into EPIPE errors, which close the connection.
-- One unreferenced handle per process: it never keeps the loop alive.
local sigpipe
local function catch_sigpipe()
    if sigpipe and not sigpipe:is_closing() then return end
    sigpipe = uv.new_signal()
    sigpipe:start("sigpipe", function() end)
    sigpipe:unref()
end

function listener.listen(opts, handler)
    if opts == nil then opts = {} end
    if type(opts) ~= "table" then error("listener.listen: opts must be a table", 2) end
    if type(handler) ~= "function" then error("listener.listen: handler must be a function", 2) end
    local host, port = opts.host or "127.0.0.1", opts.port or 8080
    if type(host) ~= "string" then error("listener.listen: host must be a string", 2) end
    if type(port) ~= "number" or port < 0 or port > 65535 or port ~= math.floor(port) then
        error("listener.listen: port must be an integer in 0..65535", 2)
    end
    if opts.log ~= nil and type(opts.log) ~= "function" then error("listener.listen: log must be a function", 2) end
    local limits = check_table(opts.limits, listener.DEFAULT_LIMITS, "limits")
    local codec_limits = {}
    for k in pairs(http.DEFAULT_LIMITS) do
        if limits[k] < 1 then error("listener.listen: limits." .. k .. " must be >= 1", 2) end
        codec_limits[k] = limits[k]
    end
    if limits.write_low > limits.write_high then error("listener.listen: limits.write_low > write_high", 2) end

    local self = setmetatable({
        handler = handler, limits = limits, codec_limits = codec_limits,
        timeouts = check_table(opts.timeouts, listener.DEFAULT_TIMEOUTS, "timeouts"),
        log = opts.log or default_log, conns = {}, count = 0, closing = false, done = false,
        closed_cbs = {}, signals = {},
    }, Server)

    -- A failed handle is closed only inside a running loop, which reaps it.  Outside one it is left to
    -- exit: with luv before 1.45 (Debian's 1.44) a handle closed but never reaped crashes lua_close at
    -- exit (luvit/luv#437, fixed by luv PR #654), and a failed listen is usually followed by an exit.
    catch_sigpipe()
    local tcp = uv.new_tcp()
    local function drop() if uv.loop_mode() then tcp:close() end end
    local bound, ok, err = pcall(tcp.bind, tcp, host, port)
    if not bound then                                      -- luv raises on a host that is not an IP address
        drop()
        error("listener.listen: host must be an IP address, got '" .. host .. "'", 2)
    end
    if ok then
        ok, err = tcp:listen(opts.backlog or 511, function(e)
            protect(self, "accept", self.on_connection, self, e)
        end)
    end
    if not ok then
        drop()
        return nil, format("listen on %s:%d: %s", host, port, tostring(err))
    end
    self.tcp = tcp
    local addr = tcp:getsockname()
    self.host, self.port = addr.ip, addr.port
    if opts.signals ~= false then
        for _, name in ipairs({ "sigint", "sigterm" }) do
            local sig = uv.new_signal()
            sig:start(name, function() protect(self, "signal", self.on_signal, self, name) end)
            self.signals[#self.signals + 1] = sig
        end
    end
    local shown = self.host:find(":", 1, true) and ("[" .. self.host .. "]") or self.host
    self.log("info", format("listening on http://%s:%d", shown, self.port))
    return self
end

function Server:on_connection(err)
    if err then return self.log("error", "accept: " .. tostring(err)) end
    local client = uv.new_tcp()
    local ok, aerr = self.tcp:accept(client)
    if not ok then
        client:close()
        return self.log("error", "accept: " .. tostring(aerr))
    end
    if self.closing or self.count >= self.limits.connections then
        client:close()
        if not self.full_logged and not self.closing then
            self.full_logged = true
            self.log("warn", format("%d connections open: refusing new ones", self.count))
        end
        return
    end
    local conn = new_conn(self, client)
    self.conns[conn] = true
    self.count = self.count + 1
    conn:start()
end

function Server:on_signal(name)
    if self.closing then
        self.log("warn", name .. " again: closing every connection now")
        return self:close(0)
    end
    self.log("info", format("%s: shutting down (grace %g s)", name, self.timeouts.shutdown))
    self:close()
end

function Server:forget(conn)
    if not self.conns[conn] then return end
    self.conns[conn] = nil
    self.count = self.count - 1
    if self.count < self.limits.connections then self.full_logged = false end
    self:check_done()
end

function Server:close(grace, on_closed)
    if grace ~= nil and (type(grace) ~= "number" or grace < 0) then
        error("server:close: grace must be a number of seconds >= 0", 2)
    end
    if on_closed ~= nil and type(on_closed) ~= "function" then error("server:close: on_closed must be a function", 2) end
    if on_closed then
        if self.done then
            protect(self, "on_closed callback", on_closed)
        else
            self.closed_cbs[#self.closed_cbs + 1] = on_closed
        end
    end
    if self.done then return end
    if not self.closing then
        self.closing = true
        self.tcp:close()
        for conn in pairs(self.conns) do
            if not conn.res and not conn.ending and not conn.parser:started() then conn:close("shutdown") end
        end
        self.grace_timer = uv.new_timer()
    end
    grace = grace or self.timeouts.shutdown
    self.grace_timer:stop()
    self.grace_timer:start(math.floor(grace * 1000 + 0.5), 0, function()
        protect(self, "shutdown", function()
            local n = self.count
            for conn in pairs(self.conns) do conn:close("shutdown grace over") end
            if n > 0 then self.log("warn", format("grace over: closed %d connection(s)", n)) end
        end)
    end)
    self:check_done()
end

function Server:check_done()
    if not self.closing or self.done or self.count > 0 then return end
    self.done = true
    self.grace_timer:close()
    for _, sig in ipairs(self.signals) do sig:close() end
    self.log("info", "stopped")
    local cbs = self.closed_cbs
    self.closed_cbs = {}
    for _, fn in ipairs(cbs) do protect(self, "on_closed callback", fn) end
end

return listener
