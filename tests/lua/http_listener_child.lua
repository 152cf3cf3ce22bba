-- A server for http_listener_spec.lua's shutdown tests, run as a child process from the worktree root:
--   luajit tests/lua/http_listener_child.lua GRACE_SECONDS
-- It logs to stderr (the spec reads the port from the "listening on" line) and serves
--   /slow     five "tick N" lines 100 ms apart, then ends
--   /forever  a "tick N" line every 100 ms until the client or the server closes
--   anything else: "ok"
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local uv = require("luv")
local listener = require("glm53.server.listener")

local grace = tonumber(arg[1]) or 10

local function ticker(res, limit)
    res:write_head(200, { ["Content-Type"] = "text/plain" })
    local n, timer = 0, uv.new_timer()
    res:on_close(function()
        timer:close()
        io.stderr:write("on_close fired after ", n, " ticks\n")
    end)
    timer:start(0, 100, function()
        n = n + 1
        res:write("tick " .. n .. "\n")
        if n == limit then
            timer:close()
            res:finish()
        end
    end)
end

assert(listener.listen({ port = 0, timeouts = { shutdown = grace } }, function(req, res)
    if req.path == "/slow" then return ticker(res, 5) end
    if req.path == "/forever" then return ticker(res, math.huge) end
    res:finish("ok")
end))
uv.run()
io.stderr:write("loop ended\n")
