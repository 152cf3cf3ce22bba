#!/usr/bin/env luajit
--[==[
compare.lua - paired comparison of two eval runs on the same items (their records.jsonl, joined by id): the
difference of accuracies B - A with a paired bootstrap 95% interval (seeded, 10,000 resamples) and McNemar's
exact test on the items only one run got right, per extraction mode, printed as a table.

    luajit scripts/compare.lua A.jsonl B.jsonl [--mode M[,M]] [--seed S] [--resamples N] [--json]

A and B are records files of scripts/eval.lua (a run directory works too: its records.jsonl is read). Items in
only one file, or with an error in either, are left out and counted. --json prints one JSON object instead.
The definitions are in docs/evals.md ("Comparing runs").
]==]
local script = arg and arg[0] or "scripts/compare.lua"
local dir = script:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

os.exit(require("glm53.eval.cli").compare(arg, "compare.lua"))
