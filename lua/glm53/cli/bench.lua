--[[
glm53.cli.bench - `glm53 bench`: prefill and decode speed of a checkpoint against the hardware floor.

    glm53 bench --model DIR [--device cpu|cuda] [--prompt 512] [--decode 64] [--repeat 3]
                [--bandwidth BYTES_PER_S] [--flops FLOP_PER_S] [--batch 1,2,4,8,16]
    glm53 bench serve --server URL [...]      the serving load generator (glm53.bench.serve_cli)

Random prompt ids (below the tokenizer's vocabulary when the checkpoint has one); greedy decode. The floor of a
decode step is the weight bytes one token must read (every weight once, but only top-k of the routed experts and
one row of the embedding) over the memory bandwidth; the floor of a prefill is the larger of that and 2 x active
parameters x tokens over the dense BF16 peak. Prints one table (best of --repeat runs).

The hardware figures: --bandwidth and --flops, else the device's defaults below. The CPU has none (machines differ
too much): its floor is "n/a" unless you give them. With only --bandwidth the floors are the bytes term alone,
which is still a lower bound on the time.

--batch N[,N...] adds batched decode: for each N, N sequences each hold their own --prompt-token prompt and decode
greedily together, N rows per step (what a server's continuous batching runs). The table gives the step time (the
engine's step alone, best of --repeat runs of --decode steps), per row, tokens/s and the rows per second over the
1-row step's.
]]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

-- Default hardware figures per device, with where they come from.
local HARDWARE = {
    cuda = { bandwidth = 4.3e12, flops = 7.9e14,
             source = "H200 (the test machine): 4.3 TB/s measured copy bandwidth, 790 TFLOP/s dense BF16 " ..
                      "(DESIGN.md section 9); give --bandwidth and --flops for another GPU" },
}

local M = {
    prog = "glm53 bench",
    usage = "glm53 bench [options]",
    summary = "Measures prefill and decode speed and compares them with the hardware floor. `glm53 bench serve " ..
              "--server URL` is the serving load generator instead (its own --help; docs/benchmarking.md).",
    subcommands = {
        serve = function(argv) return require("glm53.bench.serve_cli").main(argv, "glm53 bench serve") end,
    },
    options = common.options(common.model_options(), {
        "Benchmark:",
        { "prompt", type = "integer", min = 1, default = 512, help = "prompt tokens" },
        { "decode", type = "integer", min = 1, default = 64, help = "decode steps" },
        { "repeat", type = "integer", min = 1, default = 3, help = "runs (the best is reported)" },
        { "bandwidth", type = "number", gt = 0, help = "memory bandwidth, bytes/s (CUDA default: H200's 4.3e12)" },
        { "flops", type = "number", gt = 0, help = "dense BF16 peak, FLOP/s (CUDA default: H200's 7.9e14)" },
        { "batch", type = "ids", metavar = "N[,N...]",
          help = "also time decode steps of N sequences together (one row each), for each N" },
    }),
}

-- Bytes one decode token reads, and the active parameter count (for the prefill FLOP floor).
local function step_reads(dir, cfg)
    local checkpoint = require("glm53.engine.checkpoint")
    local ckpt, err = checkpoint.open(dir)
    if not ckpt then cli.fail(err) end
    local bytes, params = 0, 0
    local sizes = { F32 = 4, BF16 = 2, F16 = 2, F8_E4M3 = 1 }
    local share = cfg.text.num_experts_per_tok / math.max(cfg.text.n_routed_experts, 1)
    for _, t in ipairs(ckpt:list()) do
        local b, n = t.numel * (sizes[t.dtype] or 0), t.numel
        if t.name:find("%.mlp%.experts%.") then b, n = b * share, n * share end
        if t.name:find("embed_tokens") then b, n = b / cfg.text.vocab_size, 0 end
        local layer = tonumber(t.name:match("%.layers%.(%d+)%."))
        if t.name:find("^model%.visual%.") or (layer and layer >= cfg.text.num_hidden_layers) then
            b, n = 0, 0   -- vision tower and MTP layers take no part in a text step
        end
        bytes, params = bytes + b, params + n
    end
    ckpt:free()
    return bytes, params
end

function M.run(args)
    local ffi = require("ffi")
    local clock = require("glm53.util.clock")
    local ctx = common.load(args, { load = { load_mtp = false } })
    local m = ctx.m
    local cfg = m.config
    local read_bytes, active = step_reads(ctx.dir, cfg)
    local hw = HARDWARE[args.device] or {}
    local bandwidth = args.bandwidth or hw.bandwidth
    local flops = args.flops or hw.flops
    local source = (args.bandwidth or args.flops) and "given on the command line" or hw.source

    math.randomseed(1)
    local prompt = ffi.new("int32_t[?]", args.prompt)
    for i = 0, args.prompt - 1 do prompt[i] = math.random(0, ctx.n_valid - 1) end
    local next_id = { 0 }

    local best_prefill, best_decode = math.huge, math.huge
    for r = 1, args["repeat"] do
        local seq, err = m:seq({ max_tokens = args.prompt + args.decode + 1, max_rollback = 1 })
        if not seq then cli.fail(err) end
        local batch = m:batch({ rows = args.prompt, seqs = 1 })
        batch:add(seq, prompt, "last", args.prompt)
        local t0 = clock.now()
        local ok, step_err = m:step(batch)
        if not ok then cli.fail(step_err) end
        local t1 = clock.now()
        for _ = 1, args.decode do
            next_id[1] = m:argmax(batch:logits(0), ctx.n_valid)
            batch:clear()
            batch:add(seq, next_id)
            ok, step_err = m:step(batch)
            if not ok then cli.fail(step_err) end
        end
        local t2 = clock.now()
        best_prefill = math.min(best_prefill, t1 - t0)
        best_decode = math.min(best_decode, (t2 - t1) / args.decode)
        io.stderr:write(string.format("run %d: prefill %.1f ms, decode %.2f ms/token\n", r, (t1 - t0) * 1e3,
                                      (t2 - t1) / args.decode * 1e3))
        seq:free()
    end

    -- Floors from the figures known: each term is a lower bound on the time, so is their maximum.
    local decode_floor = bandwidth and read_bytes / bandwidth or nil
    local prefill_floor = decode_floor
    if flops then prefill_floor = math.max(prefill_floor or 0, 2 * active * args.prompt / flops) end
    local function size(x, unit)   -- 1.23 GB / 4.56 MB, 1.20 B / 3.40 M
        if x >= 1e9 then return string.format("%.2f %s", x / 1e9, unit == "B" and "GB" or "B") end
        return string.format("%.2f %s", x / 1e6, unit == "B" and "MB" or "M")
    end
    print(string.format("model %s: %d layers, %s of weights, %s read per decode token, %s active params", ctx.dir,
                        cfg.text.num_hidden_layers, size(m:weight_bytes(), "B"), size(read_bytes, "B"), size(active, "")))
    print("floor: " .. (source or "n/a (no hardware figures for " .. args.device .. ": give --bandwidth and --flops)"))
    local function ms(x, digits) return x and string.format("%." .. digits .. "f ms", x * 1e3) or "n/a" end
    local function ratio(x, floor) return floor and string.format("%.1f", x / floor) or "n/a" end
    print(string.format("%-26s %12s %12s %12s %10s", "", "measured", "floor", "tok/s", "x floor"))
    print(string.format("%-26s %12s %12s %12.0f %10s", "prefill " .. args.prompt .. " tokens", ms(best_prefill, 2),
                        ms(prefill_floor, 3), args.prompt / best_prefill, ratio(best_prefill, prefill_floor)))
    print(string.format("%-26s %12s %12s %12.1f %10s", "decode (per token)", ms(best_decode, 3), ms(decode_floor, 3),
                        1 / best_decode, ratio(best_decode, decode_floor)))
    if args.batch and #args.batch > 0 then M.batched(args, ctx, prompt) end
    return true
end

-- Batched decode: for each N of --batch, the best mean time of a decode step over N sequences (one row each), after
-- each sequence prefilled its own prompt (the first --prompt ids rotated by its index, so no two are equal). Only
-- m:step is timed: the argmax that picks each row's next token is outside.
function M.batched(args, ctx, prompt)
    local ffi = require("ffi")
    local clock = require("glm53.util.clock")
    local m = ctx.m
    local rows = {}
    for _, n in ipairs(args.batch) do
        if n < 1 then cli.usage_error("--batch: every N must be at least 1") end
        local own = ffi.new("int32_t[?]", args.prompt)
        local best = math.huge
        for _ = 1, args["repeat"] do
            local seqs, next_ids = {}, {}
            local batch = m:batch({ rows = math.max(args.prompt, n), seqs = n })
            for i = 1, n do
                local seq, err = m:seq({ max_tokens = args.prompt + args.decode + 1, max_rollback = 1 })
                if not seq then cli.fail(err) end
                seqs[i] = seq
                for j = 0, args.prompt - 1 do own[j] = prompt[(j + i - 1) % args.prompt] end
                batch:clear()
                batch:add(seq, own, "last", args.prompt)
                local ok, err2 = m:step(batch)
                if not ok then cli.fail(err2) end
                next_ids[i] = { m:argmax(batch:logits(0), ctx.n_valid) }
            end
            local spent = 0
            for _ = 1, args.decode do
                batch:clear()
                for i = 1, n do batch:add(seqs[i], next_ids[i]) end
                local t0 = clock.now()
                local ok, err = m:step(batch)
                spent = spent + (clock.now() - t0)
                if not ok then cli.fail(err) end
                for i = 1, n do next_ids[i][1] = m:argmax(batch:logits(i - 1), ctx.n_valid) end
            end
            best = math.min(best, spent / args.decode)
            for i = 1, n do seqs[i]:free() end
        end
        rows[#rows + 1] = { n = n, step = best }
    end
    local base = rows[1].n == 1 and rows[1].step or nil
    print(string.format("batched decode after a %d-token prompt each (%d steps, best of %d):", args.prompt,
                        args.decode, args["repeat"]))
    print(string.format("%-10s %12s %12s %12s %14s", "rows", "step", "per row", "tok/s", "rows/s vs 1"))
    for _, r in ipairs(rows) do
        print(string.format("%-10d %9.3f ms %9.3f ms %12.0f %14s", r.n, r.step * 1e3, r.step / r.n * 1e3, r.n / r.step,
                            base and string.format("%.2fx", r.n * base / r.step) or "n/a"))
    end
end

return M
