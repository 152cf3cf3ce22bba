#!/usr/bin/env luajit
--[==[
eval.lua - accuracy evals: a task module of evals/ run in-process with the engine or against an OpenAI-compatible
server (ours, vLLM, SGLang), with per-item JSONL records, accuracy and its Wilson 95% interval per extraction
mode, and an HTML report.

    luajit scripts/eval.lua TASK [--model DIR | --server URL] [--data FILE] [--limit N] [--concurrency N]
                                 [--out DIR] [--seed S] [--mode M[,M]] [--fewshot N [--shots FILE]]
                                 [--max-tokens N] [--temperature T] [--device cpu|cuda] [--threads N]
                                 [--spec-k K] [--reasoning split|keep] [--task-opt KEY=VALUE ...]
                                 [--model-name NAME] [--timeout S] [--progress-every N]

TASK is a module of evals/ (gsm8k, gsm8k_cot, mmlu_pro, gpqa, mmmu_pro). Without --model or --server the
bundled checkpoint runs in-process (glm53.eval.runner.DEFAULT_MODEL). Generation is greedy unless
--temperature says otherwise, with the task's stop strings and max tokens (--max-tokens overrides), the model's
chat template for chat prompts, up to --concurrency items at once. With --server, chat prompts go to
URL/v1/chat/completions and text prompts (few-shot) to URL/v1/completions, --concurrency requests in flight.

--out DIR (default reports/eval-TASK) gets records.jsonl (one record per item, written and flushed as items
finish, in item order), run.json (the settings), summary.json, summary.md and report.html. Run the same command
again to resume: finished items are skipped, errored ones retried. Prints the accuracy table on stdout; the
progress bar and log lines go to stderr. docs/evals.md has the details.
]==]
local script = arg and arg[0] or "scripts/eval.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local runner = require("glm53.eval.runner")
local summary = require("glm53.eval.summary")

local function die(msg)
    io.stderr:write("eval.lua: ", msg, "\n")
    os.exit(1)
end

local usage = "luajit scripts/eval.lua TASK [--model DIR | --server URL] [options]"
local task = arg[1]
if task == "-h" or task == "--help" or task == nil then
    cli.parse({ "--help" }, { usage = usage, options = {} })
end
local argv = {}
for i = 2, #arg do argv[#argv + 1] = arg[i] end
if task:sub(1, 2) == "--" then die("the first argument is the task (a module of evals/), got " .. task) end

local args = cli.parse(argv, {
    usage = usage,
    options = {
        model = { metavar = "DIR", help = "checkpoint to run in-process (default " .. runner.DEFAULT_MODEL .. ")" },
        server = { metavar = "URL", help = "OpenAI-compatible server base URL" },
        data = { metavar = "FILE", help = "the task's JSONL (default: its bundled data)" },
        limit = { type = "number", help = "the first N items" },
        concurrency = { type = "number", default = 1, help = "items generated at once / requests in flight" },
        out = { metavar = "DIR", help = "run directory (default reports/eval-TASK)" },
        seed = { type = "number", default = 0 },
        mode = { metavar = "LIST", help = "extraction modes to score (default all)" },
        fewshot = { type = "number", default = 0 },
        shots = { metavar = "FILE", help = "JSONL of shots for --fewshot" },
        max_tokens = { type = "number", help = "default: the task's, else " .. runner.DEFAULT_MAX_TOKENS },
        temperature = { type = "number", default = 0 },
        device = { default = "cpu", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0 },
        spec_k = { type = "number", default = 0, help = "MTP drafts per step, in-process" },
        reasoning = { default = "split", choices = { "split", "keep" }, help = "read answers after </think>, or everything" },
        task_opt = { list = true, metavar = "KEY=VALUE", help = "passed to the task's load and prompt" },
        model_name = { metavar = "NAME", help = "model field of server requests (default: its first model)" },
        timeout = { type = "number", default = 600, help = "seconds per server request" },
        progress_every = { type = "number", help = "a log line every N items when stderr is not a terminal" },
        tokenizer = { metavar = "FILE", help = "in-process tokenizer (default DIR/tokenizer.json)" },
    },
})

if args.model and args.server then die("give --model or --server, not both") end
local model = args.model or (not args.server and runner.DEFAULT_MODEL) or nil
local task_opts = {}
for _, kv in ipairs(args.task_opt) do
    local k, v = kv:match("^([%w_]+)=(.*)$")
    if not k then die("--task-opt: expected KEY=VALUE, got '" .. kv .. "'") end
    task_opts[k] = tonumber(v) or (v == "true" and true) or (v == "false" and false) or v
end
local modes
if args.mode then
    modes = {}
    for m in args.mode:gmatch("[^,]+") do modes[#modes + 1] = m end
end

local ok, result, err = pcall(runner.run, {
    task = task, model = model, server = args.server, data = args.data, limit = args.limit,
    concurrency = args.concurrency, out = args.out or ("reports/eval-" .. task), seed = args.seed, modes = modes,
    fewshot = args.fewshot, shots = args.shots, max_tokens = args.max_tokens, temperature = args.temperature,
    device = args.device, threads = args.threads, spec_k = args.spec_k, reasoning = args.reasoning,
    task_opts = task_opts, model_name = args.model_name, timeout = args.timeout, tokenizer = args.tokenizer,
    progress = { every = args.progress_every },
    command = "luajit " .. script .. " " .. table.concat(arg, " "),
})
if not ok then die(tostring(result)) end     -- an argument error of a task (more shots than given, ...)
if not result then die(err) end

local s = result.summary
local header, rows = summary.table(s)
print(require("glm53.report.text").table(header, rows))
print(string.format("%d items, %d errors, %d stopped by max tokens; records, summary and report.html in %s",
                    s.items, s.errors, s.length_stops, result.dir))
