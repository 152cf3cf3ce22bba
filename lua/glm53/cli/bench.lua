--[[
glm53.cli.bench - `glm53 bench`: prefill and decode speed of a checkpoint against the hardware floor.

    glm53 bench --model DIR [--device cpu|cuda] [--prompt 512] [--decode 64] [--repeat 3]
                [--bandwidth BYTES_PER_S] [--flops FLOP_PER_S] [--batch 1,2,4,8,16]
    glm53 bench serve --server URL [...]      the serving load generator (glm53.bench.serve_cli)

Random prompt ids (below the tokenizer's vocabulary when the checkpoint has one); greedy decode. The floor of a
decode step is the bytes it must move over the memory bandwidth: every weight once (but only the routed experts
the step reads and one embedding row per row), the KDA states read and written, the latent-cache rows and
indexer keys at the step's context (decode_reads says exactly what is counted); it is printed part by part. The
floor of a prefill is the larger of that and 2 x active parameters x tokens over the dense BF16 peak. Prints the
floor table, then one table of measured times (best of --repeat runs).

The hardware figures: --bandwidth and --flops, else the device's defaults below. The CPU has none (machines differ
too much): its floor is "n/a" unless you give them. With only --bandwidth the floors are the bytes term alone,
which is still a lower bound on the time.

--batch N[,N...] adds batched decode: for each N, N sequences each hold their own --prompt-token prompt and decode
greedily together, N rows per step (what a server's continuous batching runs). The table gives the step time (the
engine's step alone, best of --repeat runs of --decode steps), per row, tokens/s and the rows per second over the
1-row step's, the routed experts the rows' routing read (distinct experts per MoE layer, mean over steps,
recorded by one more untimed run) and the floor that union gives.

--spec-k K[,K...] adds speculative decoding through the generation driver (glm53.generation.driver): for each K
and each --accept mode, one greedy stream of the --prompt ids generates --decode tokens with K MTP drafts per
round. "all" and "none" force the verdict (every draft taken: K + 1 tokens a round; none: 1), so the cost of a
round at a given depth is measured on any checkpoint, random ones included, whose own acceptance means nothing;
"real" keeps the model's verdict. Only the rounds are timed (the prefill is not); the table gives the rounds,
the mean round, tokens per round, tokens/s and the speed over K = 0 (plain decoding through the same driver).
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
        { "spec_k", type = "ids", metavar = "K[,K...]",
          help = "also time speculative decoding with K MTP drafts per round, for each K (0: plain, same driver)" },
        { "accept", default = "all,none", metavar = "LIST",
          help = "acceptance for --spec-k: all (every draft taken), none, real (the model's verdict)" },
    }),
}

-- The parts of a decode step's reads, in the order the floor table prints them.
local PARTS = {
    { "attention", "attention weights (KDA, MLA, indexer)" },
    { "dense", "dense MLP weights" },
    { "routed", "routed experts read" },
    { "shared", "shared experts" },
    { "small", "router, mHC, norms" },
    { "embedding", "embedding rows" },
    { "head", "LM head" },
    { "state", "KDA state (F32, read + write)" },
    { "cache", "latent cache + indexer keys (BF16)" },
}

-- The bytes a decode step of `rows` rows at `context` tokens of context must move, by part (PARTS), and the
-- active parameter count (for the prefill FLOP floor). Weights are read once per step whatever the rows; routed
-- experts: `experts` per MoE layer when given (the union the rows' routing touched, measured), else top-k for one
-- row and, for more rows, the union expected of independent uniform routing, E (1 - (1 - k/E)^rows) (an
-- assumption: trained routers are not uniform). Per row: one embedding row, the KDA state of each KDA layer read
-- and written (F32 [heads, dk, dv]), and per sparse MLA layer the latent rows of the selected positions
-- (min(context, index_topk) x kv_lora_rank) and the pooled indexer keys (context / kpool x index_head_dim), both
-- BF16 as the CUDA caches hold them. The vision tower and MTP layers take no part in a text step.
local function decode_reads(dir, cfg, rows, context, experts)
    local checkpoint = require("glm53.engine.checkpoint")
    local ckpt, err = checkpoint.open(dir)
    if not ckpt then cli.fail(err) end
    local t = cfg.text
    local E, k = math.max(t.n_routed_experts, 1), t.num_experts_per_tok
    experts = experts or (rows == 1 and k or E * (1 - (1 - k / E) ^ rows))
    local bytes, params = {}, 0
    for _, part in ipairs(PARTS) do bytes[part[1]] = 0 end
    local sizes = { F32 = 4, BF16 = 2, F16 = 2, F8_E4M3 = 1 }
    for _, w in ipairs(ckpt:list()) do
        local b, n = w.numel * (sizes[w.dtype] or 0), w.numel
        local layer = tonumber(w.name:match("%.layers%.(%d+)%."))
        local part
        if w.name:find("^model%.visual%.") or (layer and layer >= t.num_hidden_layers) then
            b, n = 0, 0
        elseif w.name:find("embed_tokens") then
            part, b, n = "embedding", b / t.vocab_size * rows, 0
        elseif w.name:find("lm_head") then
            part = "head"
        elseif w.name:find("%.mlp%.experts%.") then
            part, b, n = "routed", b * experts / E, n * k / E
        elseif w.name:find("%.mlp%.shared_experts%.") then
            part = "shared"
        elseif w.name:find("%.mlp%.[a-z]+_proj%.") then
            part = "dense"
        elseif w.name:find("%.self_attn%.") then
            part = "attention"
        else
            part = "small"
        end
        if part then bytes[part] = bytes[part] + b end
        params = params + n
    end
    ckpt:free()
    local C = require("glm53.ffi.core").C
    for l = 0, t.num_hidden_layers - 1 do
        if t.layer_types[l] == C.GLM53_LAYER_KDA then
            bytes.state = bytes.state + rows * 2 * 4 * t.linear_num_heads * t.linear_head_dim * t.linear_head_dim
        else
            local selected = math.min(context, t.index_topk)
            local pooled = math.ceil(context / math.max(t.index_kpool, 1))
            bytes.cache = bytes.cache + rows * 2 * (selected * t.kv_lora_rank + pooled * t.index_head_dim)
        end
    end
    local total = 0
    for _, part in ipairs(PARTS) do total = total + bytes[part[1]] end
    return total, params, bytes
end

local function size(x, unit)   -- 1.23 GB / 4.56 MB, 1.20 B / 3.40 M
    if x >= 1e9 then return string.format("%.2f %s", x / 1e9, unit == "B" and "GB" or "B") end
    return string.format("%.2f %s", x / 1e6, unit == "B" and "MB" or "M")
end

-- The floor table of one decode step: each part's bytes and time at `bandwidth`.
local function print_floor_table(title, bytes, total, bandwidth)
    print(title)
    for _, part in ipairs(PARTS) do
        print(string.format("  %-40s %12s %12s", part[2], size(bytes[part[1]], "B"),
                            bandwidth and string.format("%.3f ms", bytes[part[1]] / bandwidth * 1e3) or "n/a"))
    end
    print(string.format("  %-40s %12s %12s", "total", size(total, "B"),
                        bandwidth and string.format("%.3f ms", total / bandwidth * 1e3) or "n/a"))
end

function M.run(args)
    local ffi = require("ffi")
    local clock = require("glm53.util.clock")
    local ctx = common.load(args, { load = { load_mtp = args.spec_k ~= nil and #args.spec_k > 0 } })
    local m = ctx.m
    local cfg = m.config
    local read_bytes, active, parts = decode_reads(ctx.dir, cfg, 1, args.prompt)
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
        -- The next token is the step's greedy output, chosen where the logits are: a step copies 4 bytes to the
        -- host, not the vocabulary row, as a greedy decode loop runs it.
        local batch = m:batch({ rows = args.prompt, seqs = 1, logits = false, top_k = 1, n_valid = ctx.n_valid })
        batch:add(seq, prompt, "last", args.prompt)
        local t0 = clock.now()
        local ok, step_err = m:step(batch)
        if not ok then cli.fail(step_err) end
        local t1 = clock.now()
        for _ = 1, args.decode do
            next_id[1] = batch:greedy(0)
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
    print(string.format("model %s: %d layers, %s of weights, %s read per decode token, %s active params", ctx.dir,
                        cfg.text.num_hidden_layers, size(m:weight_bytes(), "B"), size(read_bytes, "B"), size(active, "")))
    print("floor: " .. (source or "n/a (no hardware figures for " .. args.device .. ": give --bandwidth and --flops)"))
    print_floor_table(string.format("floor of a decode step, 1 row at context %d (bytes it must move):", args.prompt),
                      parts, read_bytes, bandwidth)
    local function ms(x, digits) return x and string.format("%." .. digits .. "f ms", x * 1e3) or "n/a" end
    local function ratio(x, floor) return floor and string.format("%.1f", x / floor) or "n/a" end
    print(string.format("%-26s %12s %12s %12s %10s", "", "measured", "floor", "tok/s", "x floor"))
    print(string.format("%-26s %12s %12s %12.0f %10s", "prefill " .. args.prompt .. " tokens", ms(best_prefill, 2),
                        ms(prefill_floor, 3), args.prompt / best_prefill, ratio(best_prefill, prefill_floor)))
    print(string.format("%-26s %12s %12s %12.1f %10s", "decode (per token)", ms(best_decode, 3), ms(decode_floor, 3),
                        1 / best_decode, ratio(best_decode, decode_floor)))
    if args.batch and #args.batch > 0 then M.batched(args, ctx, prompt, bandwidth) end
    if args.spec_k and #args.spec_k > 0 then M.speculative(args, ctx, prompt) end
    return true
end

-- Speculative decoding at forced or real acceptance (--spec-k, --accept): the best of --repeat runs per (K, mode).
function M.speculative(args, ctx, prompt)
    local driver = require("glm53.generation.driver")
    local clock = require("glm53.util.clock")
    local modes = {}
    for mode in args.accept:gmatch("[^,]+") do
        if mode ~= "all" and mode ~= "none" and mode ~= "real" then
            cli.usage_error("--accept: a comma-separated list of all, none, real")
        end
        modes[#modes + 1] = mode
    end
    local ids = {}
    for i = 0, args.prompt - 1 do ids[#ids + 1] = prompt[i] end
    -- One run: seconds spent in rounds, tokens generated, target steps (rounds).
    local function run(k, mode)
        local d, err = driver.new(ctx.m, { k = k, sampling = { n_valid = ctx.n_valid },
                                           force_acceptance = k > 0 and mode ~= "real" and mode or nil })
        if not d then cli.fail(err) end
        local s = d:add(ids, { max_new = args.decode })
        local t0 = clock.now()
        local ok, run_err = d:run()
        local spent = clock.now() - t0
        if not ok then d:free() cli.fail(run_err) end
        local tokens, rounds = #s.generated, s.stats.target_steps
        d:free()
        return spent, tokens, rounds
    end
    local function best(k, mode)
        local b
        for _ = 1, args["repeat"] do
            local spent, tokens, rounds = run(k, mode)
            if not b or spent < b.spent then b = { spent = spent, tokens = tokens, rounds = rounds } end
        end
        return b
    end
    local plain = best(0, "real")
    print(string.format("speculative decoding, one greedy stream after a %d-token prompt, %d tokens (best of %d; " ..
                        "rounds timed, prefill not):", args.prompt, args.decode, args["repeat"]))
    print(string.format("%-4s %-7s %8s %12s %14s %10s %10s", "K", "accept", "rounds", "round", "tokens/round",
                        "tok/s", "vs K = 0"))
    local function line(k, mode, r)
        print(string.format("%-4d %-7s %8d %9.3f ms %14.2f %10.1f %9.2fx", k, mode, r.rounds, r.spent / r.rounds * 1e3,
                            r.tokens / r.rounds, r.tokens / r.spent,
                            (r.tokens / r.spent) / (plain.tokens / plain.spent)))
    end
    line(0, "-", plain)
    for _, k in ipairs(args.spec_k) do
        if k < 0 then cli.usage_error("--spec-k: every K must be at least 0") end
        if k > 0 then
            for _, mode in ipairs(modes) do line(k, mode, best(k, mode)) end
        end
    end
end

-- Batched decode: for each N of --batch, the best mean time of a decode step over N sequences (one row each), after
-- each sequence prefilled its own prompt (the first --prompt ids rotated by its index, so no two are equal). Only
-- m:step is timed; each row's next token is its greedy output, chosen on the device (top_k = 1). One more, untimed
-- run records the routed experts of every row (sequence capture), so the floor counts the union of experts each
-- step read.
function M.batched(args, ctx, prompt, bandwidth)
    local ffi = require("ffi")
    local clock = require("glm53.util.clock")
    local m = ctx.m
    local t = m.config.text
    local C = require("glm53.ffi.core").C
    -- One run of --decode steps over n sequences: the mean step time, and (capture) the mean over steps and MoE
    -- layers of the number of distinct experts the n rows were routed to.
    local function run(n, capture)
        local own = ffi.new("int32_t[?]", args.prompt)
        local seqs, next_ids = {}, {}
        local batch = m:batch({ rows = math.max(args.prompt, n), seqs = n, logits = false, top_k = 1,
                                n_valid = ctx.n_valid })
        for i = 1, n do
            local seq, err = m:seq({ max_tokens = args.prompt + args.decode + 1, max_rollback = 1,
                                     capture = capture and { experts = true } or nil })
            if not seq then cli.fail(err) end
            seqs[i] = seq
            for j = 0, args.prompt - 1 do own[j] = prompt[(j + i - 1) % args.prompt] end
            batch:clear()
            batch:add(seq, own, "last", args.prompt)
            local ok, err2 = m:step(batch)
            if not ok then cli.fail(err2) end
            next_ids[i] = { batch:greedy(0) }
        end
        local spent = 0
        for _ = 1, args.decode do
            batch:clear()
            for i = 1, n do batch:add(seqs[i], next_ids[i]) end
            local t0 = clock.now()
            local ok, err = m:step(batch)
            spent = spent + (clock.now() - t0)
            if not ok then cli.fail(err) end
            for i = 1, n do next_ids[i][1] = batch:greedy(i - 1) end
        end
        local union
        if capture then
            local sum, count = 0, 0
            for l = 0, t.num_hidden_layers - 1 do
                if t.mlp_types[l] == C.GLM53_MLP_MOE then
                    local caps = {}
                    for i = 1, n do caps[i] = assert(seqs[i]:captured_experts(l)) end
                    for step = 0, args.decode - 1 do
                        local seen, distinct = {}, 0
                        for i = 1, n do
                            local cap, row = caps[i], args.prompt + step
                            for j = 0, cap.k - 1 do
                                local e = cap.ids[row * cap.k + j]
                                if not seen[e] then seen[e], distinct = true, distinct + 1 end
                            end
                        end
                        sum, count = sum + distinct, count + 1
                    end
                end
            end
            union = count > 0 and sum / count or nil
        end
        for i = 1, n do seqs[i]:free() end
        return spent / args.decode, union
    end

    local rows = {}
    for _, n in ipairs(args.batch) do
        if n < 1 then cli.usage_error("--batch: every N must be at least 1") end
        local best = math.huge
        for _ = 1, args["repeat"] do best = math.min(best, (run(n, false))) end
        local _, union = run(n, true)
        local context = args.prompt + math.floor(args.decode / 2)
        local floor_bytes = decode_reads(ctx.dir, m.config, n, context, union)
        rows[#rows + 1] = { n = n, step = best, union = union, floor = bandwidth and floor_bytes / bandwidth }
    end
    local base = rows[1].n == 1 and rows[1].step or nil
    print(string.format("batched decode after a %d-token prompt each (%d steps, best of %d; floor at the middle " ..
                        "step's context, routed experts = the union the rows' routing read, mean per MoE layer):",
                        args.prompt, args.decode, args["repeat"]))
    print(string.format("%-6s %12s %12s %10s %14s %9s %11s %9s", "rows", "step", "per row", "tok/s", "rows/s vs 1",
                        "experts", "floor", "x floor"))
    for _, r in ipairs(rows) do
        print(string.format("%-6d %9.3f ms %9.3f ms %10.0f %14s %9s %11s %9s", r.n, r.step * 1e3, r.step / r.n * 1e3,
                            r.n / r.step, base and string.format("%.2fx", r.n * base / r.step) or "n/a",
                            r.union and string.format("%.1f", r.union) or "-",
                            r.floor and string.format("%.3f ms", r.floor * 1e3) or "n/a",
                            r.floor and string.format("%.1f", r.step / r.floor) or "n/a"))
    end
end

return M
