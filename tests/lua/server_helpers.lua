-- Helpers for the server's black-box specs: start scripts/serve.lua as a child process on an ephemeral loopback
-- port, talk to it with curl (blocking) or raw luv sockets (concurrent), read SSE streams and /metrics.
local cjson = require("cjson")
local uv = require("luv")

local M = {}

M.LUAJIT = uv.exepath()

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.quote = sh_quote

local function read_all(path)
    local f = io.open(path, "rb")
    if not f then return "" end
    local s = f:read("*a")
    f:close()
    return s
end
M.read_all = read_all

local function sleep(ms) uv.sleep(ms) end
M.sleep = sleep

-- Starts the server with extra command-line arguments (a list); waits until it listens and /health is 200
-- (or, with opts.no_wait_ready, only until it listens). Returns a handle: port, pid, log path, url(path),
-- stop().
function M.start(args, opts)
    opts = opts or {}
    local log = os.tmpname()
    local parts = { sh_quote(M.LUAJIT), "scripts/serve.lua", "--port", "0" }
    for _, a in ipairs(args or {}) do parts[#parts + 1] = sh_quote(a) end
    local cmd = table.concat(parts, " ") .. " > " .. log .. " 2>&1 & echo $!"
    local p = io.popen(cmd)
    local pid = tonumber(p:read("*l"))
    p:close()
    local srv = { pid = pid, log = log }
    function srv.url(path) return "http://127.0.0.1:" .. srv.port .. path end
    function srv.alive() return os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0 end
    function srv.stop()
        if srv.stopped then return end
        srv.stopped = true
        os.execute("kill -TERM " .. pid .. " 2>/dev/null")
        for _ = 1, 100 do
            if not srv.alive() then break end
            sleep(50)
        end
        if srv.alive() then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
        os.remove(log)
    end
    for _ = 1, 400 do
        local text = read_all(log)
        srv.port = tonumber(text:match("listening on http://127%.0%.0%.1:(%d+)"))
        if srv.port then break end
        if not srv.alive() then error("the server exited:\n" .. text) end
        sleep(25)
    end
    if not srv.port then error("the server did not listen:\n" .. read_all(log)) end
    if not opts.no_wait_ready then
        for _ = 1, 400 do
            if M.request(srv, "GET", "/health").status == 200 then break end
            sleep(25)
        end
    end
    return srv
end

-- A blocking request through curl. body: a string (sent as is) or a table (JSON). Returns {status, body,
-- headers (lowercase names), json (decoded body or nil), time (seconds)}.
function M.request(srv, method, path, body, headers, extra)
    local hfile, bfile = os.tmpname(), nil
    local parts = { "curl", "-s", "--noproxy", "'*'", "-X", method, "-D", hfile, "-o", "-", "-w", "'\\n%{http_code} %{time_total}'" }
    for k, v in pairs(headers or {}) do parts[#parts + 1] = "-H " .. sh_quote(k .. ": " .. v) end
    if body ~= nil then
        if type(body) == "table" then body = cjson.encode(body) end
        bfile = os.tmpname()
        local f = io.open(bfile, "wb")
        f:write(body)
        f:close()
        parts[#parts + 1] = "--data-binary @" .. bfile
        if not (headers and headers["Content-Type"]) then parts[#parts + 1] = "-H 'Content-Type: application/json'" end
    end
    for _, a in ipairs(extra or {}) do parts[#parts + 1] = a end
    parts[#parts + 1] = sh_quote(srv.url(path))
    local p = io.popen(table.concat(parts, " "))
    local out = p:read("*a")
    p:close()
    if bfile then os.remove(bfile) end
    local head = read_all(hfile)
    os.remove(hfile)
    local text, status, t = out:match("^(.*)\n(%d+) ([%d.]+)$")
    local res = { status = tonumber(status), body = text or out, time = tonumber(t), headers = {} }
    for line in head:gmatch("[^\r\n]+") do
        local k, v = line:match("^([^:]+):%s*(.*)$")
        if k then res.headers[k:lower()] = v end
    end
    local ok, v = pcall(cjson.decode, res.body)
    if ok then res.json = v end
    return res
end

function M.post(srv, path, body, headers) return M.request(srv, "POST", path, body, headers) end

-- The data payloads of an SSE body (a list of strings), and the event names when present.
function M.sse(body)
    local datas, names = {}, {}
    for ev in (body .. "\n\n"):gmatch("(.-)\n\n") do
        local data, name = {}, nil
        for line in ev:gmatch("[^\n]+") do
            local v = line:match("^data: ?(.*)$")
            if v then data[#data + 1] = v end
            name = line:match("^event: ?(.*)$") or name
        end
        if #data > 0 then
            datas[#datas + 1] = table.concat(data, "\n")
            names[#datas] = name
        end
    end
    return datas, names
end

-- A metric's value from /metrics text (the first series whose line starts with name and has the labels).
function M.metric(text, name, label)
    for line in text:gmatch("[^\n]+") do
        if line:sub(1, #name) == name and line:sub(#name + 1, #name + 1):match("[{ ]") then
            if not label or line:find(label, 1, true) then return tonumber(line:match(" ([%d.eE+-]+)$")) end
        end
    end
    return nil
end

function M.metrics(srv) return M.request(srv, "GET", "/metrics").body end

-- Runs generate.lua with arguments; returns its JSON line.
function M.generate(args)
    local p = io.popen(sh_quote(M.LUAJIT) .. " scripts/generate.lua " .. args .. " --json 2>&1")
    local out = p:read("*a")
    p:close()
    local line = out:match("(%b{})%s*$")
    assert(line, "generate.lua: " .. out)
    return cjson.decode(line)
end

---------------------------------------------------------------------------------------------------------------
-- Concurrent clients on luv (raw HTTP/1.1 over TCP)
---------------------------------------------------------------------------------------------------------------
-- Sends one request; callbacks: on_data(all_so_far, client) as bytes arrive, on_end(all, err). Returns the
-- client (c.tcp, c.close()).
function M.raw(port, method, path, body, on_data, on_end)
    local c = { tcp = uv.new_tcp(), data = {}, closed = false }
    function c.all() return table.concat(c.data) end
    function c.close()
        if not c.closed then c.closed = true; c.tcp:close() end
    end
    body = type(body) == "table" and cjson.encode(body) or (body or "")
    c.tcp:connect("127.0.0.1", port, function(err)
        if err then c.close(); if on_end then on_end("", err) end return end
        c.tcp:read_start(function(rerr, chunk)
            if chunk then
                c.data[#c.data + 1] = chunk
                if on_data then on_data(c.all(), c) end
            else
                c.close()
                if on_end then on_end(c.all(), rerr) end
            end
        end)
        c.tcp:write(method .. " " .. path .. " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" ..
                    "Content-Length: " .. #body .. "\r\nConnection: close\r\n\r\n" .. body)
    end)
    return c
end

-- Sends `n` copies of a request at once (body: a table, or a function of i giving one) and runs the luv loop
-- until every response has ended (or `seconds` pass); returns their HTTP statuses in arrival order.
function M.concurrent(port, n, method, path, body, seconds)
    uv.update_time()   -- the loop's clock is stale after blocking calls: timers would fire at once
    local statuses, left = {}, n
    local guard = uv.new_timer()
    guard:start((seconds or 60) * 1000, 0, function() uv.stop() end)
    for i = 1, n do
        M.raw(port, method, path, type(body) == "function" and body(i) or body, nil, function(all)
            statuses[#statuses + 1] = tonumber(all:match("^HTTP/1%.1 (%d+)")) or 0
            left = left - 1
            if left == 0 then uv.stop() end
        end)
    end
    uv.run()
    guard:close()
    uv.walk(function(h) if not h:is_closing() then h:close() end end)
    uv.run()
    assert(left == 0, "requests still open after " .. (seconds or 60) .. " s")
    return statuses
end

-- The body of a raw response, chunked encoding undone.
function M.dechunk(response)
    local head, body = response:match("^(.-)\r\n\r\n(.*)$")
    if not head then return response end
    if not head:lower():find("transfer%-encoding: chunked") then return body end
    local out, pos = {}, 1
    while true do
        local size_hex, after = body:match("^(%x+)[^\r\n]*\r\n()", pos)
        if not size_hex then break end
        local n = tonumber(size_hex, 16)
        if n == 0 then break end
        out[#out + 1] = body:sub(after, after + n - 1)
        pos = after + n + 2
    end
    return table.concat(out)
end

return M
