#!/usr/bin/env luajit
--[==[
eval.lua - accuracy evals: a task module of evals/ run in-process with the engine or against an OpenAI-compatible
server (ours, vLLM, SGLang), with per-item JSONL records, accuracy and its Wilson 95% interval per extraction
mode, and an HTML report.

    luajit scripts/eval.lua TASK [--model DIR | --server URL] [--data FILE] [--group G[,G]] [--limit N] [--concurrency N]
                                 [--out DIR] [--seed S] [--mode M[,M]] [--fewshot N [--shots FILE]]
                                 [--max-tokens N] [--temperature T] [--device cpu|cuda] [--threads N]
                                 [--spec-k K] [--reasoning split|keep] [--task-opt KEY=VALUE ...]
                                 [--model-name NAME] [--timeout S] [--progress-every N]

TASK is a module of evals/ (gsm8k, gsm8k_cot, mmlu_pro, gpqa, mmmu_pro; tiny_arith, tiny_mc, tiny_retrieval,
tiny_tools, tiny_vision for models/glm53-tiny, which `glm53 tiny-scores` runs together). Without --model or
--server the bundled models/glm53-tiny runs in-process (glm53.eval.runner.DEFAULT_MODEL). Generation is greedy
unless --temperature says otherwise, with the task's stop strings and max tokens (--max-tokens overrides), the
model's chat template for chat prompts, up to --concurrency items at once. With --server, chat prompts go to
URL/v1/chat/completions and text prompts (few-shot) to URL/v1/completions, --concurrency requests in flight.

--out DIR (default reports/eval-TASK) gets records.jsonl (one record per item, written and flushed as items
finish, in item order), run.json (the settings), summary.json, summary.md and report.html. Run the same command
again to resume: finished items are skipped, errored ones retried. Prints the accuracy table on stdout; the
progress bar and log lines go to stderr. docs/evals.md has the details.
]==]
local script = arg and arg[0] or "scripts/eval.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

os.exit(require("glm53.eval.cli").eval(arg, "eval.lua"))
