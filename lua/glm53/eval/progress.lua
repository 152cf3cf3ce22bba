--[[
glm53.eval.progress - a progress bar with rate and ETA on stderr when it is a terminal, and a plain line every
N items otherwise (logs, CI).

    local progress = require("glm53.eval.progress")
    local bar = progress.new({ total = 1319, label = "gsm8k", every = 50 })
    bar:update(done, "acc 0.41")          -- items done so far; an optional note at the end of the line
    bar:finish()

On a terminal the line is redrawn at most ten times a second:
    gsm8k [##########..........]  660/1319  50%  12.3 it/s  eta 0:53  acc 0.41
opts: total, label, every (lines in a log; default 10% of the total, at least 1), out (default io.stderr),
tty (default: whether file descriptor 2 is a terminal), start (items already done when the run began, e.g.
resumed ones: they count in done/total, not in the rate).
]]
local ffi = require("ffi")
local clock = require("glm53.util.clock")

ffi.cdef("int isatty(int fd);")

local M = {}

local Bar = {}
Bar.__index = Bar

function M.new(opts)
    opts = opts or {}
    if type(opts.total) ~= "number" or opts.total < 0 then error("progress.new: opts.total must be a count", 2) end
    local tty = opts.tty
    if tty == nil then tty = ffi.C.isatty(2) == 1 end
    return setmetatable({
        total = opts.total, label = opts.label or "", out = opts.out or io.stderr, tty = tty,
        every = opts.every or math.max(1, math.floor(opts.total / 10)), start = opts.start or 0,
        t0 = clock.now(), last_draw = -1, last_line = nil, done = opts.start or 0,
    }, Bar)
end

local function duration(s)
    if s ~= s or s == math.huge then return "?" end
    s = math.floor(s + 0.5)
    if s >= 3600 then return string.format("%d:%02d:%02d", s / 3600, s % 3600 / 60, s % 60) end
    return string.format("%d:%02d", s / 60, s % 60)
end

function Bar:line(note)
    local n, total = self.done, self.total
    local frac = total > 0 and n / total or 1
    local elapsed = clock.now() - self.t0
    local ran = n - self.start
    local rate = elapsed > 0 and ran / elapsed or 0
    local eta = rate > 0 and (total - n) / rate or math.huge
    local width = 20
    local filled = math.floor(frac * width + 0.5)
    local count = string.rep(" ", #tostring(total) - #tostring(n)) .. n
    return string.format("%s [%s%s] %s/%d %3d%%  %.1f it/s  eta %s%s", self.label, string.rep("#", filled),
                         string.rep(".", width - filled), count, total, math.floor(frac * 100),
                         rate, duration(eta), note and note ~= "" and "  " .. note or "")
end

function Bar:update(done, note)
    self.done = done
    if self.tty then
        local now = clock.now()
        if now - self.last_draw < 0.1 and done < self.total then return end
        self.last_draw = now
        self.out:write("\r", self:line(note), "\27[K")
        self.out:flush()
    elseif (done - self.start) % self.every == 0 or done == self.total then
        if done ~= self.last_line then
            self.last_line = done
            self.out:write(self:line(note), "\n")
            self.out:flush()
        end
    end
end

function Bar:finish(note)
    if self.tty then
        self.out:write("\r", self:line(note), "\27[K\n")
    elseif self.done ~= self.last_line then
        self.out:write(self:line(note), "\n")
    end
    self.out:flush()
end

return M
