--[[
glm53.cli.tiny_scores - `glm53 tiny-scores`: the held-out scores of the trained tiny model, its five task families
run in-process on the CPU (glm53.eval.tiny_scores), as one table.

    glm53 tiny-scores                                            # all of evals/data/tiny on models/glm53-tiny
    glm53 tiny-scores --limit 40 --retrieval-lengths 2048 --json scores.json
    glm53 tiny-scores --families arith,vision --model DIR --threads 2

Prints per family correct/n, accuracy and its 95% Wilson interval, then indented: retrieval per context length
(2048, marked, is the acceptance length: there the sparse layers attend only to the positions their indexer
selects), the tools family per answer type and the share of its tool-call items answered by a call that is valid
against the item's tools, vision per question kind. --json FILE writes the same as JSON (docs/cli.md). Progress
goes to stderr. Exit status 1 when an item failed to generate (the table is printed first).
]]
local cli = require("glm53.util.cli")

local M = {
    prog = "glm53 tiny-scores",
    usage = "glm53 tiny-scores [--model DIR] [--families LIST] [--limit N] [--retrieval-lengths LIST] [--threads N] " ..
            "[--json FILE]",
    summary = "Runs the tiny model's five held-out task families (evals/data/tiny) on the CPU and prints accuracy " ..
              "with 95% Wilson intervals, retrieval per context length and the tool-call validity rate.",
    options = {
        { "model", metavar = "DIR", help = "checkpoint directory (default models/glm53-tiny)" },
        { "families", metavar = "LIST", help = "some of arith,mc,retrieval,tools,vision (default all)" },
        { "limit", type = "integer", min = 1, help = "the first N items of each family" },
        { "retrieval_lengths", metavar = "LIST", help = "retrieval items of these context lengths only (256,512,1024,2048,4096)" },
        { "threads", type = "integer", min = 0, default = 0, help = "CPU threads (0 = all cores)" },
        { "concurrency", type = "integer", min = 1, default = 4, help = "items generated at once" },
        { "json", metavar = "FILE", help = "also write the results as JSON to FILE" },
        { "out", metavar = "DIR", help = "keep each family's eval run directory in DIR/FAMILY (rerunning resumes them)" },
        { "progress_every", type = "integer", min = 1, help = "a progress line every N items when stderr is no terminal" },
    },
}

local function list(s)
    if not s then return nil end
    local out = {}
    for v in s:gmatch("[^,%s]+") do out[#out + 1] = v end
    return out
end

function M.run(args)
    local file = require("glm53.util.file")
    local tiny_scores = require("glm53.eval.tiny_scores")
    if args.model and not file.exists(args.model .. "/config.json") then
        cli.fail(args.model .. ": not a checkpoint directory (no config.json)")
    end
    local lengths = list(args.retrieval_lengths)
    for _, l in ipairs(lengths or {}) do
        if not l:match("^%d+$") then cli.usage_error("--retrieval-lengths: numbers expected, got '" .. l .. "'") end
    end
    local result, err = tiny_scores.run({
        model = args.model, families = list(args.families), limit = args.limit, retrieval_lengths = lengths,
        threads = args.threads, concurrency = args.concurrency, out = args.out,
        progress = { every = args.progress_every },
    })
    if not result then
        if err:find("unknown family", 1, true) then cli.usage_error("--families: " .. err) end
        cli.fail(err)
    end
    print(tiny_scores.table(result))
    if args.json then
        local ok, werr = file.write_file(args.json, tiny_scores.json(result) .. "\n", { atomic = true })
        if not ok then cli.fail("--json: " .. werr) end
    end
    for _, f in ipairs(result.families) do
        if f.errors > 0 then cli.fail(f.family .. ": " .. f.errors .. " items failed to generate; their records say why (--out DIR keeps them)") end
    end
    return 0
end

return M
