#!/usr/bin/env luajit
--[[
bench.lua - prefill and decode speed of a checkpoint against the hardware floor.

    luajit scripts/bench.lua --model DIR [--device cuda] [--prompt 512] [--decode 64] [--repeat 3]
                             [--bandwidth 4.3e12] [--flops 7.9e14]

Random prompt ids; greedy decode. The floor of a decode step is the weight bytes one token must read (every
weight once, but only top-k of the routed experts and one row of the embedding) over the memory bandwidth;
the floor of a prefill is the larger of that and 2 x active parameters x tokens over the BF16 peak. Prints one
table (best of --repeat runs). Defaults are the H200 figures measured on the test machine (KINDS.md).
]]
local script = arg and arg[0] or "scripts/bench.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse(arg, {
    usage = "luajit scripts/bench.lua --model DIR [options]",
    options = {
        model = { required = true, metavar = "DIR" },
        device = { default = "cuda", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0 },
        prompt = { type = "number", default = 512, help = "prompt tokens" },
        decode = { type = "number", default = 64, help = "decode steps" },
        ["repeat"] = { type = "number", default = 3 },
        bandwidth = { type = "number", default = 4.3e12, help = "bytes/s" },
        flops = { type = "number", default = 7.9e14, help = "BF16 FLOP/s" },
    },
})

local ffi = require("ffi")
local model = require("glm53.engine.model")
local checkpoint = require("glm53.engine.checkpoint")
local clock = require("glm53.util.clock")

-- Bytes one decode token reads, and the active parameter count (for the prefill FLOP floor).
local function step_floor(dir_path, cfg)
    local ckpt = assert(checkpoint.open(dir_path))
    local bytes, params = 0, 0
    local sizes = { F32 = 4, BF16 = 2, F16 = 2, F8_E4M3 = 1 }
    local share = cfg.text.num_experts_per_tok / math.max(cfg.text.n_routed_experts, 1)
    for _, t in ipairs(ckpt:list()) do
        local b, n = t.numel * (sizes[t.dtype] or 0), t.numel
        if t.name:find("%.mlp%.experts%.") then b, n = b * share, n * share end
        if t.name:find("embed_tokens") then b, n = b / cfg.text.vocab_size, 0 end
        if t.name:find("^model%.visual%.") or t.name:find("%.layers%.(%d+)%.") and
           tonumber(t.name:match("%.layers%.(%d+)%.")) >= cfg.text.num_hidden_layers then
            b, n = 0, 0   -- vision tower and MTP layers take no part in a text step
        end
        bytes, params = bytes + b, params + n
    end
    ckpt:free()
    return bytes, params
end

local m = assert(model.load(args.model, { device = args.device, threads = args.threads, load_mtp = false }))
local cfg = m.config
local read_bytes, active = step_floor(args.model, cfg)
local V = m.vocab_size

math.randomseed(1)
local prompt = ffi.new("int32_t[?]", args.prompt)
for i = 0, args.prompt - 1 do prompt[i] = math.random(0, V - 1) end

local best_prefill, best_decode = math.huge, math.huge
for r = 1, args["repeat"] do
    local seq = assert(m:seq({ max_tokens = args.prompt + args.decode + 1, max_rollback = 1 }))
    local batch = m:batch({ rows = args.prompt, seqs = 1 })
    batch:add(seq, prompt, "last", args.prompt)
    local t0 = clock.now()
    assert(m:step(batch))
    local t1 = clock.now()
    for _ = 1, args.decode do
        local id = m:argmax(batch:logits(0))
        batch:clear()
        batch:add(seq, { id })
        assert(m:step(batch))
    end
    local t2 = clock.now()
    best_prefill = math.min(best_prefill, t1 - t0)
    best_decode = math.min(best_decode, (t2 - t1) / args.decode)
    io.stderr:write(string.format("run %d: prefill %.1f ms, decode %.2f ms/token\n", r, (t1 - t0) * 1e3,
                                  (t2 - t1) / args.decode * 1e3))
    seq:free()
end

local decode_floor = read_bytes / args.bandwidth
local prefill_floor = math.max(read_bytes / args.bandwidth, 2 * active * args.prompt / args.flops)
print(string.format("model %s: %d layers, %.2f GB of weights, %.2f GB read per decode token, %.2f B active params",
    args.model, cfg.text.num_hidden_layers, m:weight_bytes() / 1e9, read_bytes / 1e9, active / 1e9))
print(string.format("%-26s %12s %12s %12s %10s", "", "measured", "floor", "tok/s", "x floor"))
print(string.format("%-26s %9.2f ms %9.3f ms %12.0f %10.1f", "prefill " .. args.prompt .. " tokens",
    best_prefill * 1e3, prefill_floor * 1e3, args.prompt / best_prefill, best_prefill / prefill_floor))
print(string.format("%-26s %9.3f ms %9.3f ms %12.1f %10.1f", "decode (per token)", best_decode * 1e3,
    decode_floor * 1e3, 1 / best_decode, best_decode / decode_floor))
