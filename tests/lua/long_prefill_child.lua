-- Child process of long_prefill_spec.lua: prefills arg[2] tokens of models/tiny in ONE step and prints
-- "peak_mb=<VmHWM> before_mb=<VmHWM before the step> argmax=<id>", so the parent measures this step's memory alone.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local ffi = require("ffi")
local model = require("glm53.engine.model")

local function peak_mb()
    for line in io.lines("/proc/self/status") do
        local kb = line:match("^VmHWM:%s+(%d+)")
        if kb then return tonumber(kb) / 1024 end
    end
end

local dir, T = arg[1], tonumber(arg[2])
local m = assert(model.load(dir, { threads = 1 }))
local ids = ffi.new("int32_t[?]", T)
for i = 0, T - 1 do ids[i] = (i * 7919 + 13) % 768 end
local s = assert(m:seq({ max_tokens = T }))
local b = m:batch({ rows = T, seqs = 1 })
b:add(s, ids, "last", T)
local before = peak_mb()
assert(m:step(b))
print(string.format("peak_mb=%.1f before_mb=%.1f argmax=%d", peak_mb(), before, m:argmax(b:logits(0))))
