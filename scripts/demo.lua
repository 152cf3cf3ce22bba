#!/usr/bin/env luajit
--[==[
demo.lua - what `make demo` runs: the trained tiny model (models/glm53-tiny) answers held-out items of its task
families (evals/data/tiny), streamed, on the CPU.

    luajit scripts/demo.lua [--model DIR] [--items ID,ID,...] [--spec-k K] [--threads N]
    bin/glm53 lua scripts/demo.lua ...           (what the Makefile runs: the same, with bin/glm53's LuaJIT)

For each item (default: an arithmetic problem, a retrieval question after about 2,048 tokens of context, a
question about a picture) it prints the question (long contexts abbreviated), the answer as it is generated
(greedy; the reasoning, when the model writes any, under "thinking:"), the gold answer and the verdict the item's
eval task gives (evals/tiny_<family>.lua: "verdict: right" or "verdict: wrong"), the prompt and decode speed, and
the acceptance of the MTP drafts: decoding is speculative with the checkpoint's MTP layer drafting --spec-k tokens
per step (default 1; 0 decodes plainly), which gives exactly the greedy output of plain decoding. The last line
sums the verdicts and the acceptance. Exit status 0 whatever the verdicts; 1 (2 for a bad option) on an error.

Item ids are `<family>-NNNNNN` of the files in evals/data/tiny (arith, mc, retrieval, tools, vision).
]==]
local script = arg and arg[0] or "scripts/demo.lua"
local here = script:match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. here .. "/../?.lua;" .. package.path

local cli = require("glm53.util.cli")

local ROOT = here .. "/.."
local DEFAULT_ITEMS = "arith-000000,retrieval-000003,vision-000000"
local INDENT = string.rep(" ", 10)     -- the width of the labels ("question: ")

local command = {
    prog = "demo.lua",
    usage = "luajit scripts/demo.lua [--model DIR] [--items ID,ID,...] [--spec-k K] [--threads N]",
    summary = "Streams the tiny model's answers to held-out items of evals/data/tiny, with the gold answers, the " ..
              "verdicts, the speed and the MTP acceptance.",
    options = {
        { "model", metavar = "DIR", help = "checkpoint directory (default models/glm53-tiny)" },
        { "items", default = DEFAULT_ITEMS, metavar = "LIST", help = "item ids of evals/data/tiny" },
        { "spec_k", type = "integer", min = 0, default = 1, help = "MTP drafts per step (0: plain decoding)" },
        { "threads", type = "integer", min = 0, default = 0, help = "CPU threads (0 = all cores)" },
    },
}

-- The item with this id and its task module (evals/tiny_<family>.lua), or a failure.
local function find_item(id)
    local family = id:match("^(%a+)%-%d+$")
    if not family then cli.usage_error("--items: ids look like arith-000001, got '" .. id .. "'") end
    local ok, task = pcall(require, "evals.tiny_" .. family)
    if not ok then cli.usage_error("--items: no task family '" .. family .. "' (arith, mc, retrieval, tools, vision)") end
    local items, err = task.load(ROOT .. "/evals/data/tiny/" .. family .. ".jsonl")
    if not items then cli.fail(err) end
    for _, item in ipairs(items) do
        if item.id == id then return item, task end
    end
    cli.fail("--items: no item " .. id .. " in evals/data/tiny/" .. family .. ".jsonl")
end

-- Writes text under a label, its later lines indented to the label's width.
local function labelled(label, text)
    io.write(label, string.rep(" ", math.max(1, #INDENT - #label)), (text:gsub("\n", "\n" .. INDENT)), "\n")
end

-- A message's text parts, its pictures as "[picture PATH]".
local function message_text(msg)
    if type(msg.content) == "string" then return msg.content end
    local parts = {}
    for _, part in ipairs(type(msg.content) == "table" and msg.content or {}) do
        if part.type == "text" then parts[#parts + 1] = part.text
        elseif part.type == "image_url" then
            local path = part.image_url.url
            parts[#parts + 1] = "[picture " .. (path:sub(1, #ROOT + 1) == ROOT .. "/" and path:sub(#ROOT + 2) or path) .. "]"
        end
    end
    return table.concat(parts, "\n")
end

-- Long texts keep their first three and last two lines.
local function abbreviate(text)
    local lines = {}
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
    if #lines <= 8 then return text end
    return table.concat({ lines[1], lines[2], lines[3],
                          string.format("[... %d lines left out ...]", #lines - 5),
                          lines[#lines - 1], lines[#lines] }, "\n")
end

-- The conversation of an item as the demo shows it.
local function show_question(item)
    local json = require("glm53.chat.json")
    if item.tools then
        local names = {}
        for _, t in ipairs(item.tools) do names[#names + 1] = (t["function"] or t).name end
        labelled("tools:", table.concat(names, ", "))
    end
    for _, msg in ipairs(item.messages) do
        local label = #item.messages == 1 and "question:" or (msg.role .. ":")
        local text = abbreviate(message_text(msg))
        for _, call in ipairs(msg.tool_calls or {}) do
            text = text .. (text ~= "" and "\n" or "") .. "calls " .. call["function"].name ..
                   json.encode(call["function"].arguments)
        end
        labelled(label, text)
    end
end

-- Streams the generated text: reasoning under "thinking:", the answer under "answer:". Returns a writer and a
-- function that ends the block.
local function answer_writer()
    local parsers = require("glm53.chat.parsers")
    local output = require("glm53.cli.output")
    local safe = output.isatty(io.stdout)
    local parser, phase = parsers.stream(nil), nil
    local function put(kind, text)
        if kind == "content" and phase ~= "content" then
            text = text:gsub("^%s+", "")   -- the blank start of the answer after </think>
            if text == "" then return end
        end
        if kind ~= phase then
            if phase then io.write("\n") end
            io.write(kind == "reasoning" and "thinking: " or "answer:   ")
            phase = kind
        end
        if safe then text = output.printable(text) end
        io.write((text:gsub("\n", "\n" .. INDENT)))
        io.stdout:flush()
    end
    local function feed(events)
        for _, ev in ipairs(events) do
            if ev.type == "reasoning" or ev.type == "content" then put(ev.type, ev.text) end
        end
    end
    return function(delta) feed(parser:push(delta)) end, function()
        feed(parser:finish())
        if phase ~= "content" then
            if phase then io.write("\n") end
            io.write("answer:   ")
        end
        io.write("\n")
    end
end

function command.run(args)
    local clock = require("glm53.util.clock")
    local common = require("glm53.cli.common")
    local driver = require("glm53.generation.driver")
    local generator = require("glm53.eval.generator")
    local parsers = require("glm53.chat.parsers")

    local ids = {}
    for id in args.items:gmatch("[^,%s]+") do ids[#ids + 1] = id end
    if #ids == 0 then cli.usage_error("--items: no item ids") end
    local picked = {}
    for i, id in ipairs(ids) do
        local item, task = find_item(id)
        picked[i] = { item = item, task = task }
    end

    local model_dir = args.model or (ROOT .. "/models/glm53-tiny")
    local ctx = common.load({ model = model_dir, device = "cpu", threads = args.threads }, { need_tokenizer = true })
    local ok, d, err = pcall(driver.new, ctx.m, { k = args.spec_k, sampling = { temperature = 0 }, tokenizer = ctx.tok })
    if not ok then cli.fail(d) end
    if not d then cli.fail(err) end
    print(string.format("glm53 demo: %s on the CPU, %d held-out items of evals/data/tiny, greedy, %s",
                        args.model or "models/glm53-tiny",
                        #picked, args.spec_k > 0 and ("MTP drafts K=" .. args.spec_k) or "plain decoding"))

    local right, totals = 0, { draft_tokens = 0, accepted = 0 }
    for n, p in ipairs(picked) do
        local item, task = p.item, p.task
        print(string.format("\n[%d/%d] %s (%s)", n, #picked, item.id, item.family))
        show_question(item)
        local prompt
        prompt, err = generator.prompt(ctx.m, ctx.tok, item.messages, task.chat_opts and task.chat_opts(item) or nil)
        if not prompt then cli.fail(item.id .. ": " .. err) end
        local t0 = clock.now()
        local s
        s, err = d:add(prompt.ids, { max_new = task.generation.max_gen_toks, stop_ids = ctx.eos,
                                     embeddings = prompt.embeddings, use = prompt.use })
        if not s then cli.fail(item.id .. ": " .. err) end
        local write, finish = answer_writer()
        local r
        r, err = common.stream(d, s, ctx, { write = write })
        if not r then cli.fail(item.id .. ": " .. err) end
        local t_end = clock.now()
        finish()

        local content = parsers.parse(r.text).content or ""
        local answer = task.extract(content, nil, item)
        local correct = task.match(answer, task.gold(item))
        if correct then right = right + 1 end
        labelled("gold:", task.gold(item))
        labelled("verdict:", (correct and "right" or "wrong") ..
                             (answer == nil and " (no answer in the format the task reads)" or
                              " (the answer read: " .. answer .. ")"))

        local st = s.stats
        local decoded = #r.ids - r.first_round
        local speed = string.format("prompt %d tokens: %.1f tok/s; decode %d tokens: %.1f tok/s", #prompt.ids,
                                    #prompt.ids / math.max(r.t_first - t0, 1e-9), decoded,
                                    decoded > 0 and decoded / math.max(t_end - r.t_first, 1e-9) or 0)
        if args.spec_k > 0 then
            speed = speed .. string.format("; MTP acceptance %.3f (%d of %d drafted tokens)",
                                           driver.summary(st).acceptance_rate, st.spec_decode_num_accepted_tokens,
                                           st.spec_decode_num_draft_tokens)
        end
        labelled("speed:", speed)
        totals.draft_tokens = totals.draft_tokens + st.spec_decode_num_draft_tokens
        totals.accepted = totals.accepted + st.spec_decode_num_accepted_tokens
    end
    d:free()
    local line = string.format("\n%d of %d right", right, #picked)
    if args.spec_k > 0 then
        line = line .. string.format("; MTP acceptance over the run %.3f (%d of %d drafted tokens)",
                                     totals.draft_tokens > 0 and totals.accepted / totals.draft_tokens or 0,
                                     totals.accepted, totals.draft_tokens)
    end
    print(line)
    return 0
end

os.exit(cli.run(command, arg))
