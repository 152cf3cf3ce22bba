#!/usr/bin/env luajit
--[==[
generate.lua - generation from token ids: greedy or sampled, a Lua policy, speculative decoding with MTP drafts.

    luajit scripts/generate.lua --model DIR --tokens 1,2,3 --max-tokens N [--device cpu|cuda] [--threads N]
                                [--temperature T --top-p P --top-k K --min-p M --seed S]
                                [--policy NAME [--policy-opt KEY=VALUE ...] [--tokenizer FILE]]
                                [--spec-k K [--draft-threshold P]] [--stop-ids 1,2] [--json]

Defaults are greedy (temperature 0) without speculation. --policy NAME loads scripts/policies/NAME.lua (a
constructor taking the options: its --policy-opt values, tokenizer, vocab_size) and lets it pick every token;
the temperature then defaults to 1. --spec-k K drafts up to K tokens per step with the checkpoint's MTP layers
and verifies them in one target step (exact: greedy output is identical, sampled output has the same
distribution; docs/mtp.md). --draft-threshold stops a step's drafting at the first draft less likely than P.

Prints the generated ids as they come; with --json the last line of output is one JSON object
    {"ids": [generated ids], "prefill_tok_s": x, "decode_tok_s": y,
     "spec": {"drafts": n, "draft_tokens": n, "accepted": n, "accepted_per_pos": [n, ...]}, "finish_reason": s}
(tests and benchmarks read that line; later options add fields, never remove them; finish_reason is "length",
"stop" for a --stop-ids token, or the reason a policy gave for ending). prefill_tok_s is prompt
tokens per second up to the first generated token; decode_tok_s the other generated tokens per second after it.
]==]
local script = arg and arg[0] or "scripts/generate.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse(arg, {
    usage = "luajit scripts/generate.lua --model DIR --tokens 1,2,3 --max-tokens N [options]",
    options = {
        model = { required = true, metavar = "DIR" },
        tokens = { required = true, metavar = "IDS", help = "comma-separated prompt token ids" },
        max_tokens = { type = "number", default = 16, help = "tokens to generate" },
        device = { default = "cpu", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0 },
        json = { flag = true, help = "end with a JSON line" },
        temperature = { type = "number", help = "0 = greedy (default; 1 with --policy)" },
        top_p = { type = "number", default = 1 },
        top_k = { type = "number", default = 0, help = "0 = off" },
        min_p = { type = "number", default = 0 },
        repetition_penalty = { type = "number", default = 1 },
        presence_penalty = { type = "number", default = 0 },
        frequency_penalty = { type = "number", default = 0 },
        seed = { type = "number", default = 0 },
        policy = { metavar = "NAME", help = "scripts/policies/NAME.lua picks each token" },
        policy_opt = { list = true, metavar = "KEY=VALUE", help = "an option for the policy" },
        tokenizer = { metavar = "FILE", help = "tokenizer.json, for policies that read token text" },
        candidates = { type = "number", default = 64, help = "most candidates a policy sees" },
        spec_k = { type = "number", default = 0, help = "MTP drafts per step (0 = off)" },
        draft_threshold = { type = "number", help = "stop drafting below this draft probability" },
        stop_ids = { metavar = "IDS", help = "comma-separated ids that end generation" },
        n_valid = { type = "number", help = "ids at or above N are never produced (default: the vocabulary of " ..
                                             "DIR/tokenizer.json when there is one; else every id)" },
    },
})

local cjson = require("cjson")
local model = require("glm53.engine.model")
local generation = require("glm53.generation.driver")
local clock = require("glm53.util.clock")

local function die(msg)
    io.stderr:write("generate.lua: ", msg, "\n")
    os.exit(1)
end

local function id_list(text, what)
    local ids = {}
    for id in text:gmatch("[^,%s]+") do ids[#ids + 1] = tonumber(id) or die(what .. ": '" .. id .. "' is not a number") end
    return ids
end

local prompt = id_list(args.tokens, "--tokens")
if #prompt == 0 then die("--tokens: no ids") end
if args.max_tokens < 0 then die("--max-tokens must be >= 0") end
if args.spec_k < 0 or args.spec_k ~= math.floor(args.spec_k) then die("--spec-k must be an integer >= 0") end

local m, err = model.load(args.model, { device = args.device, threads = args.threads })
if not m then die(err) end

-- The padded embedding rows past the tokenizer's vocabulary are never produced (the server samples the same way).
local n_valid = args.n_valid
if n_valid == nil then
    local tokenizer = require("glm53.engine.tokenizer")
    local path = args.tokenizer or (args.model .. "/tokenizer.json")
    local f = io.open(path, "rb")
    if f then
        f:close()
        local tok = tokenizer.load(path)
        if tok then n_valid = math.min(tok:n_vocab(), m.vocab_size) tok:free() end
    end
end

local policy
if args.policy then
    if not args.policy:match("^[%w_]+$") then die("--policy: a name from scripts/policies, got '" .. args.policy .. "'") end
    local path = dir .. "/policies/" .. args.policy .. ".lua"
    local chunk, load_err = loadfile(path)
    if not chunk then die("--policy: " .. load_err) end
    local popts = { vocab_size = m.vocab_size }
    for _, kv in ipairs(args.policy_opt) do
        local k, v = kv:match("^([%w_]+)=(.*)$")
        if not k then die("--policy-opt: expected KEY=VALUE, got '" .. kv .. "'") end
        popts[k] = v
    end
    if args.tokenizer then
        local tokenizer = require("glm53.engine.tokenizer")
        local tok, tok_err = tokenizer.load(args.tokenizer)
        if not tok then die("--tokenizer: " .. tok_err) end
        popts.tokenizer = tok
    end
    local ok, made = pcall(function() return chunk()(popts) end)
    if not ok then die("--policy " .. args.policy .. ": " .. tostring(made)) end
    policy = made
end

local sampling = {
    temperature = args.temperature or (policy and 1 or 0), top_p = args.top_p, top_k = args.top_k,
    min_p = args.min_p, repetition_penalty = args.repetition_penalty, presence_penalty = args.presence_penalty,
    frequency_penalty = args.frequency_penalty, seed = args.seed, candidates = args.candidates, n_valid = n_valid,
}
local ok, driver, driver_err = pcall(generation.new, m, {
    k = args.spec_k, sampling = sampling, policy = policy,
    draft = args.draft_threshold and generation.draft_threshold(args.draft_threshold) or nil,
})
if not ok then die(driver) end            -- a bad option (argument errors raise)
if not driver then die(driver_err) end    -- e.g. --spec-k on a checkpoint without an MTP layer

local ids, stats, finish = {}, nil, "length"
local t0, t_first, t_end = clock.now(), nil, nil
local first_round = 0
if args.max_tokens > 0 then
    local s, add_err = driver:add(prompt, { max_new = args.max_tokens,
                                            stop_ids = args.stop_ids and id_list(args.stop_ids, "--stop-ids") })
    if not s then die(add_err) end
    local printed = 0
    while driver:active() > 0 do
        local n, round_err = driver:round()
        if not n then die(round_err) end
        if not t_first then t_first, first_round = clock.now(), n end
        if not args.json then
            for i = printed + 1, #s.generated do io.write(s.generated[i], " ") end
            io.flush()
        end
        printed = #s.generated
    end
    ids, stats, finish = s.generated, s.stats, s.finish_reason
    if not args.json then io.write("\n") io.flush() end
end
t_end = clock.now()
t_first = t_first or t_end

local decode_tokens = #ids - first_round
local prefill_tok_s = #prompt / math.max(t_first - t0, 1e-9)
local decode_tok_s = decode_tokens > 0 and decode_tokens / math.max(t_end - t_first, 1e-9) or 0
local drafts, draft_tokens, accepted, per_pos = 0, 0, 0, {}
if stats then
    drafts, draft_tokens = stats.spec_decode_num_drafts, stats.spec_decode_num_draft_tokens
    accepted, per_pos = stats.spec_decode_num_accepted_tokens, stats.spec_decode_num_accepted_tokens_per_pos
end
if args.json then
    -- Field order as documented: ids, prefill_tok_s, decode_tok_s first.
    print(string.format('{"ids": [%s], "prefill_tok_s": %s, "decode_tok_s": %s, "spec": {"drafts": %d, ' ..
                        '"draft_tokens": %d, "accepted": %d, "accepted_per_pos": [%s]}, "finish_reason": %s}',
                        table.concat(ids, ","), cjson.encode(prefill_tok_s), cjson.encode(decode_tok_s), drafts,
                        draft_tokens, accepted, table.concat(per_pos, ","), cjson.encode(finish or "length")))
else
    local line = string.format("prefill %d tokens: %.1f tok/s; decode %d tokens: %.1f tok/s; finish: %s",
                               #prompt, prefill_tok_s, decode_tokens, decode_tok_s, finish or "length")
    if args.spec_k > 0 and stats then
        local sm = generation.summary(stats)
        line = line .. string.format("; spec k=%d: %d drafts, acceptance %.3f, %.2f tokens/step", args.spec_k,
                                     stats.spec_decode_num_drafts, sm.acceptance_rate, sm.tokens_per_target_step)
    end
    io.stderr:write(line, "\n")
end
