#!/usr/bin/env luajit
--[[
generate.lua - greedy generation from token ids.

    luajit scripts/generate.lua --model DIR --tokens 1,2,3 --max-tokens N [--device cpu|cuda] [--threads N]
                                [--json]

Prints the generated ids; with --json the last line of output is one JSON object
    {"ids": [generated ids], "prefill_tok_s": x, "decode_tok_s": y}
(tests and benchmarks read that line; later options add fields, never remove them).
]]
local script = arg and arg[0] or "scripts/generate.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.cli")
local args = cli.parse(arg, {
    usage = "luajit scripts/generate.lua --model DIR --tokens 1,2,3 --max-tokens N [options]",
    options = {
        model = { required = true, metavar = "DIR" },
        tokens = { required = true, metavar = "IDS", help = "comma-separated prompt token ids" },
        max_tokens = { type = "number", default = 16, help = "tokens to generate" },
        device = { default = "cpu", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0 },
        json = { flag = true, help = "end with a JSON line" },
    },
})

local cjson = require("cjson")
local model = require("glm53.model")
local clock = require("glm53.clock")

local function die(msg)
    io.stderr:write("generate.lua: ", msg, "\n")
    os.exit(1)
end

local prompt = {}
for id in args.tokens:gmatch("[^,%s]+") do
    prompt[#prompt + 1] = tonumber(id) or die("--tokens: '" .. id .. "' is not a number")
end
if #prompt == 0 then die("--tokens: no ids") end
if args.max_tokens < 0 then die("--max-tokens must be >= 0") end

local m, err = model.load(args.model, { device = args.device, threads = args.threads })
if not m then die(err) end
local seq = assert(m:seq({ max_tokens = #prompt + args.max_tokens + 1 }))
local batch = m:batch({ rows = #prompt, seqs = 1 })

local ids = {}
local t0 = clock.now()
batch:add(seq, prompt)
local ok, step_err = m:step(batch)
if not ok then die(step_err) end
local t1 = clock.now()
for i = 1, args.max_tokens do
    local next_id = m:argmax(batch:logits(0))
    ids[i] = next_id
    if not args.json then io.write(next_id, i < args.max_tokens and " " or "\n") io.flush() end
    if i == args.max_tokens then break end
    batch:clear()
    batch:add(seq, { next_id })
    ok, step_err = m:step(batch)
    if not ok then die(step_err) end
end
local t2 = clock.now()

local decode_steps = math.max(args.max_tokens - 1, 0)
local result = {
    ids = setmetatable(ids, cjson.array_mt),
    prefill_tok_s = #prompt / math.max(t1 - t0, 1e-9),
    decode_tok_s = decode_steps > 0 and decode_steps / math.max(t2 - t1, 1e-9) or 0,
}
if args.json then
    -- Field order as documented: ids first.
    print(string.format('{"ids": %s, "prefill_tok_s": %s, "decode_tok_s": %s}', cjson.encode(result.ids),
                        cjson.encode(result.prefill_tok_s), cjson.encode(result.decode_tok_s)))
else
    io.stderr:write(string.format("prefill %d tokens: %.1f tok/s; decode %d tokens: %.1f tok/s\n", #prompt,
                                  result.prefill_tok_s, decode_steps, result.decode_tok_s))
end
