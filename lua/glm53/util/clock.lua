--[[
glm53.util.clock - a monotonic wall clock in seconds (clock_gettime(CLOCK_MONOTONIC)) for timings in scripts.

    local clock = require("glm53.util.clock")
    local t0 = clock.now()
    assert(m:step(batch))
    print(string.format("step: %.3f ms", (clock.now() - t0) * 1e3))
]]
local ffi = require("ffi")

ffi.cdef [[
struct glm53_clock_timespec { long tv_sec; long tv_nsec; };
int clock_gettime(int clk_id, struct glm53_clock_timespec *tp);
]]

local CLOCK_MONOTONIC = 1
local ts = ffi.new("struct glm53_clock_timespec")

local M = {}

function M.now()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

return M
