#!/usr/bin/env luajit
--[==[
bench_serve.lua - load generator for OpenAI-compatible servers (ours, vLLM, SGLang) with vLLM's serving-benchmark
definitions: TTFT, TPOT, ITL, E2EL (mean, median, std, p50/p90/p99), request and token throughput, goodput under
SLOs; Poisson, gamma (burstiness) or fixed-rate arrivals, or a concurrency bound (a list of bounds sweeps them);
a paired A/B mode for two servers or two request settings.

    luajit scripts/bench_serve.lua --server URL [--max-concurrency 1,2,4,8] [--num-prompts N | --duration S]
                                   [--request-rate R --burstiness B] [--goodput ttft:MS tpot:MS e2el:MS] ...
    luajit scripts/bench_serve.lua --server URL --server-b URL2          # paired A/B of two servers
    luajit scripts/bench_serve.lua --server URL --extra '{"x":0}' --extra-b '{"x":1}'   # of two settings

Prints vLLM's result block per run and a table; writes --out DIR (default reports/bench-serve): requests.jsonl,
summary.json, summary.md, report.html. `--help` lists every option; docs/benchmarking.md is the protocol.
]==]
local script = arg and arg[0] or "scripts/bench_serve.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

os.exit(require("glm53.bench.serve_cli").main(arg, "bench_serve.lua"))
