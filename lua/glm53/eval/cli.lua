--[[
glm53.eval.cli - the command lines of scripts/eval.lua (an eval run) and scripts/compare.lua (a paired
comparison of two runs), as functions that another front end can call with its own arguments.

    local eval_cli = require("glm53.eval.cli")
    os.exit(eval_cli.eval({ "gsm8k", "--limit", "20" }, "eval.lua"))
    os.exit(eval_cli.compare({ "runA", "runB/records.jsonl", "--mode", "flexible-extract" }, "compare.lua"))

Each returns the exit status (0; 1 after printing the error on stderr); --help and bad options exit at once
(glm53.util.cli: status 0 and 2). The options are in each script's header and in docs/evals.md.
]]
local cjson = require("cjson")
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")
local records = require("glm53.eval.records")
local runner = require("glm53.eval.runner")
local summary = require("glm53.eval.summary")
local compare = require("glm53.eval.compare")
local text = require("glm53.report.text")

local M = {}

local function failure(name, msg)
    io.stderr:write(name, ": ", msg, "\n")
    return 1
end

local function split_list(s)
    if not s then return nil end
    local out = {}
    for v in s:gmatch("[^,]+") do out[#out + 1] = v end
    return out
end

M.EVAL_USAGE = "TASK [--model DIR | --server URL] [--data FILE] [--limit N] [--concurrency N] [--out DIR] " ..
               "[--seed S] [--mode M[,M]] [--fewshot N [--shots FILE]] [--max-tokens N] [--device cpu|cuda] [...]"

M.EVAL_OPTIONS = {
    "Where it runs:",
    { "model", metavar = "DIR", help = "checkpoint to run in-process (default " .. runner.DEFAULT_MODEL .. ")" },
    { "server", metavar = "URL", help = "OpenAI-compatible server base URL" },
    { "model_name", metavar = "NAME", help = "model field of server requests (default: its first model)" },
    { "timeout", type = "number", gt = 0, default = 600, help = "seconds per server request" },
    { "device", default = "cpu", choices = { "cpu", "cuda" } },
    { "threads", type = "integer", min = 0, default = 0 },
    { "tokenizer", metavar = "FILE", help = "in-process tokenizer (default DIR/tokenizer.json)" },
    "The task:",
    { "data", metavar = "FILE", help = "the task's JSONL (default: its bundled data)" },
    { "group", metavar = "LIST", help = "only the items of these groups (a task's item.group: tiny_retrieval's lengths)" },
    { "limit", type = "integer", min = 1, help = "the first N items (of the groups chosen)" },
    { "mode", metavar = "LIST", help = "extraction modes to score (default all)" },
    { "fewshot", type = "integer", min = 0, default = 0 },
    { "shots", metavar = "FILE", help = "JSONL of shots for --fewshot" },
    { "task_opt", list = true, metavar = "KEY=VALUE", help = "passed to the task's load and prompt" },
    { "reasoning", default = "split", choices = { "split", "keep" }, help = "read answers after </think>, or all" },
    "Generation:",
    { "max_tokens", type = "integer", min = 1, help = "default: the task's, else " .. runner.DEFAULT_MAX_TOKENS },
    { "temperature", type = "number", min = 0, default = 0 },
    { "seed", type = "integer", min = 0, default = 0 },
    { "spec_k", type = "integer", min = 0, default = 0, help = "MTP drafts per step, in-process" },
    { "concurrency", type = "integer", min = 1, default = 1, help = "items generated at once / requests in flight" },
    "Output:",
    { "out", metavar = "DIR", help = "run directory (default reports/eval-TASK)" },
    { "progress_every", type = "integer", min = 1, help = "a log line every N items when stderr is not a terminal" },
}

-- scripts/eval.lua: argv[1] is the task, the rest options.
function M.eval(argv, name)
    name = name or "eval.lua"
    local args = cli.parse_or_exit(argv, {
        prog = name, usage = "luajit scripts/" .. name .. " " .. M.EVAL_USAGE,
        summary = "Runs an accuracy eval (a module of evals/) in-process or against a server; rerunning resumes.",
        options = M.EVAL_OPTIONS, args = { { "task", metavar = "TASK" } },
    })
    local task = args.task
    if args.model and args.server then return failure(name, "give --model or --server, not both") end
    local task_opts = {}
    for _, kv in ipairs(args.task_opt) do
        local k, v = kv:match("^([%w_]+)=(.*)$")
        if not k then return failure(name, "--task-opt: expected KEY=VALUE, got '" .. kv .. "'") end
        task_opts[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v
    end
    local ok, result, err = pcall(runner.run, {
        task = task, model = args.model or (not args.server and runner.DEFAULT_MODEL) or nil, server = args.server,
        data = args.data, groups = split_list(args.group), limit = args.limit, concurrency = args.concurrency, out = args.out or ("reports/eval-" .. task),
        seed = args.seed, modes = split_list(args.mode), fewshot = args.fewshot, shots = args.shots,
        max_tokens = args.max_tokens, temperature = args.temperature, device = args.device, threads = args.threads,
        spec_k = args.spec_k, reasoning = args.reasoning, task_opts = task_opts, model_name = args.model_name,
        timeout = args.timeout, tokenizer = args.tokenizer, progress = { every = args.progress_every },
        command = "luajit scripts/" .. name .. " " .. table.concat(argv, " "),
    })
    if not ok then return failure(name, tostring(result)) end   -- an argument error of a task (more shots than given)
    if not result then return failure(name, err) end
    local s = result.summary
    print(text.table(summary.table(s)))
    if s.groups then print("\n" .. text.table(summary.group_table(s))) end
    print(string.format("%d items, %d errors, %d stopped by max tokens; records, summary and report.html in %s",
                        s.items, s.errors, s.length_stops, result.dir))
    return 0
end

-- A records file (or a run directory holding one): its records, the modes its run.json lists, its path.
local function load_run(path)
    if not path:match("%.jsonl$") and file.exists(path .. "/records.jsonl") then path = path .. "/records.jsonl" end
    local recs, err = records.read(path)
    if not recs then return nil, err end
    local ok, run = pcall(cjson.decode, file.read_file((path:match("^(.*)/[^/]*$") or ".") .. "/run.json") or "")
    return { records = recs, modes = ok and type(run) == "table" and run.modes or nil, path = path }
end

-- scripts/compare.lua: A B [options].
function M.compare(argv, name)
    name = name or "compare.lua"
    local args = cli.parse_or_exit(argv, {
        prog = name, usage = "luajit scripts/" .. name .. " A.jsonl B.jsonl [--mode M[,M]] [--seed S] [--resamples N] [--json]",
        summary = "Compares two eval runs item by item: a paired bootstrap interval of the accuracy difference B - A " ..
                  "and McNemar's exact test.",
        options = {
            { "mode", metavar = "LIST", help = "modes to compare (default: every mode both runs scored)" },
            { "seed", type = "integer", min = 0, default = 0, help = "bootstrap seed" },
            { "resamples", type = "integer", min = 1, default = 10000 },
            { "json", flag = true },
        },
        args = { { "a", metavar = "A" }, { "b", metavar = "B" } },
    })
    local a, err = load_run(args.a)
    if not a then return failure(name, err) end
    local b
    b, err = load_run(args.b)
    if not b then return failure(name, err) end
    local modes = split_list(args.mode)
    if not modes then
        modes = {}
        local in_b = {}
        for _, m in ipairs(compare.modes(b.records)) do in_b[m] = true end
        for _, m in ipairs(compare.modes(a.records, a.modes)) do if in_b[m] then modes[#modes + 1] = m end end
    end
    if #modes == 0 then return failure(name, "the two runs share no scored mode") end
    local results = {}
    for _, mode in ipairs(modes) do
        results[#results + 1] = compare.paired(a.records, b.records, mode, { seed = args.seed, resamples = args.resamples })
    end
    if args.json then
        print(cjson.encode({ a = a.path, b = b.path, seed = args.seed, resamples = args.resamples, results = results }))
        return 0
    end
    print("A: " .. a.path)
    print("B: " .. b.path)
    print(text.table(compare.table(results)))
    local r = results[1]
    print(string.format("%d items joined by id; left out: %d only in A, %d only in B, %d with an error; bootstrap: " ..
                        "%d resamples, seed %d", r.n, r.only_a, r.only_b, r.errors, args.resamples, args.seed))
    return 0
end

return M
