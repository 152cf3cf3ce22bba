#!/usr/bin/env luajit
--[[
demo.lua - `make demo`: load the bundled tiny GLM-5.3-architecture checkpoint, render a chat prompt, run a
few greedy steps, print the text and the timings.

The bundled model (models/tiny) has the real architecture (mHC, KDA, sparse MLA with the KPool indexer, MoE,
an MTP layer) at toy size, with RANDOM weights: its output is gibberish by construction. It shows the pipeline
works end to end; point --model at a real checkpoint for real text.
]]
local script = arg and arg[0] or "scripts/demo.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse(arg, {
    usage = "luajit scripts/demo.lua [--model DIR] [--prompt TEXT] [--max-tokens N] [--device cpu|cuda]",
    options = {
        model = { default = dir .. "/../models/tiny", metavar = "DIR" },
        prompt = { default = "Write a haiku about linear attention." },
        max_tokens = { type = "number", default = 24 },
        device = { default = "cpu", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0 },
    },
})

local model = require("glm53.engine.model")
local tokenizer = require("glm53.engine.tokenizer")
local chat = require("glm53.chat.template")
local clock = require("glm53.util.clock")

local function die(msg)
    io.stderr:write("demo: ", msg, "\n")
    os.exit(1)
end

print("glm53 demo: " .. args.model)
print("NOTE: the bundled tiny model has random weights; the text below is noise by design.\n")

local t0 = clock.now()
local m, err = model.load(args.model, { device = args.device, threads = args.threads })
if not m then die(err) end
local tok
tok, err = tokenizer.load(args.model .. "/tokenizer.json")
if not tok then die(err) end
local t_load = clock.now() - t0

local prompt = chat.render({ { role = "user", content = args.prompt } })
local ids = tok:encode(prompt)
print(string.format("model: %d layers, hidden %d, vocab %d, %.2f MB of weights, loaded in %.1f ms",
    m.config.text.num_hidden_layers, m.hidden_size, m.vocab_size, m:weight_bytes() / 1e6, t_load * 1e3))
print("prompt: " .. prompt)
print(string.format("prompt tokens: %d", #ids))

local seq = assert(m:seq({ max_tokens = #ids + args.max_tokens + 1 }))
local batch = m:batch({ rows = #ids, seqs = 1 })
local stream = tok:stream()
io.write("output: ")
local t1 = clock.now()
batch:add(seq, ids)
assert(m:step(batch))
local t2 = clock.now()
-- Ids past the tokenizer's vocabulary are embedding padding (vocab_size is rounded up); never pick them.
local n_vocab = math.min(tok:n_vocab(), m.vocab_size)
for i = 1, args.max_tokens do
    local next_id = m:argmax(batch:logits(0), n_vocab)
    local text = stream:push(next_id)
    io.write(text)
    io.flush()
    if i == args.max_tokens then break end
    batch:clear()
    batch:add(seq, { next_id })
    assert(m:step(batch))
end
local t3 = clock.now()
io.write((stream:finish()))
print(string.format("\n\nprefill: %d tokens in %.2f ms (%.0f tok/s); decode: %d tokens in %.2f ms (%.0f tok/s)",
    #ids, (t2 - t1) * 1e3, #ids / (t2 - t1), args.max_tokens - 1, (t3 - t2) * 1e3,
    (args.max_tokens - 1) / math.max(t3 - t2, 1e-9)))
