--[[
glm53.engine.async - engine steps on a luv event loop: each step runs on the model's worker thread and its
callback runs on the loop when it completes, so the loop keeps accepting, streaming and timing meanwhile.

    local uv = require("luv")
    local async = require("glm53.engine.async")
    local stepper = assert(async.new(m, uv))
    stepper:step(batch, function(ok, err) ... end)              -- a step of the model
    stepper:step(batch, cb, { mtp_layer = 0, hidden_in = h })    -- a step of an MTP layer
    stepper:close()                                             -- stops watching (queued steps still complete)

A step is submitted at once (Model:submit); the completion descriptor is watched with a uv poll handle, and
every completion waiting is handed to its callback in submission order. Argument errors raise; a step refused
at submission returns nil, err and its callback is never called; a step that fails later calls back with
nil, err. Errors raised by a callback are caught and reported to on_error (default: written to stderr), so
they never stop the loop.
]]
local M = {}

local Stepper = {}
Stepper.__index = Stepper

-- opts.on_error(err): where callback errors go.
function M.new(m, uv, opts)
    if type(m) ~= "table" or type(m.submit) ~= "function" then error("async.new: m must be a model", 2) end
    if type(uv) ~= "table" or type(uv.new_poll) ~= "function" then error("async.new: uv must be the luv module", 2) end
    opts = opts or {}
    local fd, err = m:completion_fd()
    if not fd then return nil, err end
    local self = setmetatable({
        m = m, callbacks = {},
        on_error = opts.on_error or function(e) io.stderr:write("glm53.engine.async: ", tostring(e), "\n") end,
    }, Stepper)
    local poll = uv.new_poll(fd)
    self.poll = poll
    poll:start("r", function(poll_err)
        if poll_err then return self.on_error(poll_err) end
        self:_drain()
    end)
    return self
end

function Stepper:_drain()
    while true do
        local tag, ok, err = self.m:poll()
        if not tag then return end
        local cb = self.callbacks[tag]
        self.callbacks[tag] = nil
        if cb then
            local called, cb_err = pcall(cb, ok, err)
            if not called then self.on_error(cb_err) end
        end
    end
end

-- Submits a step of batch (opts as Model:submit); cb(ok, err) runs on the loop when it completes. Returns the
-- tag, or nil and an error when the step is refused at once.
function Stepper:step(batch, cb, opts)
    if type(cb) ~= "function" then error("stepper:step: cb must be a function", 2) end
    if not self.poll then error("stepper:step: the stepper is closed", 2) end
    local tag, err = self.m:submit(batch, opts)
    if not tag then return nil, err end
    self.callbacks[tag] = cb
    return tag
end

-- Steps submitted and not yet called back.
function Stepper:pending()
    local n = 0
    for _ in pairs(self.callbacks) do n = n + 1 end
    return n
end

function Stepper:close()
    if self.poll then
        self.poll:stop()
        self.poll:close()
        self.poll = nil
    end
end

return M
