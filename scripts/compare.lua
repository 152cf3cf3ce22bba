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

local cjson = require("cjson")
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")
local records = require("glm53.eval.records")
local compare = require("glm53.eval.compare")
local text = require("glm53.report.text")

local function die(msg)
    io.stderr:write("compare.lua: ", msg, "\n")
    os.exit(1)
end

local usage = "luajit scripts/compare.lua A.jsonl B.jsonl [--mode M] [--seed S] [--resamples N] [--json]"
-- The two files are the arguments that are neither options nor their values.
local TAKES_VALUE = { ["--mode"] = true, ["--seed"] = true, ["--resamples"] = true }
local paths, rest = {}, {}
local i = 1
while i <= #arg do
    local a = arg[i]
    if a:sub(1, 1) == "-" then
        rest[#rest + 1] = a
        if TAKES_VALUE[a] and arg[i + 1] then rest[#rest + 1] = arg[i + 1] i = i + 1 end
    else
        paths[#paths + 1] = a
    end
    i = i + 1
end
local args = cli.parse(rest, {
    usage = usage,
    options = {
        mode = { metavar = "LIST", help = "modes to compare (default: every mode both runs scored)" },
        seed = { type = "number", default = 0, help = "bootstrap seed" },
        resamples = { type = "number", default = 10000 },
        json = { flag = true },
    },
})
if #paths ~= 2 then die("need two records files\nusage: " .. usage) end

local function load(path)
    if not path:match("%.jsonl$") and file.exists(path .. "/records.jsonl") then path = path .. "/records.jsonl" end
    local recs, err = records.read(path)
    if not recs then die(err) end
    local run_json = file.read_file((path:match("^(.*)/[^/]*$") or ".") .. "/run.json")
    local ok, run = pcall(cjson.decode, run_json or "")
    return recs, ok and type(run) == "table" and run.modes or nil, path
end
local a, modes_a, path_a = load(paths[1])
local b, _, path_b = load(paths[2])

local modes = {}
if args.mode then
    for m in args.mode:gmatch("[^,]+") do modes[#modes + 1] = m end
else
    local in_b = {}
    for _, m in ipairs(compare.modes(b)) do in_b[m] = true end
    for _, m in ipairs(compare.modes(a, modes_a)) do if in_b[m] then modes[#modes + 1] = m end end
end
if #modes == 0 then die("the two runs share no scored mode") end

local results = {}
for _, mode in ipairs(modes) do
    results[#results + 1] = compare.paired(a, b, mode, { seed = args.seed, resamples = args.resamples })
end
if args.json then
    print(cjson.encode({ a = path_a, b = path_b, seed = args.seed, resamples = args.resamples, results = results }))
    os.exit(0)
end
print("A: " .. path_a)
print("B: " .. path_b)
local header, rows = compare.table(results)
print(text.table(header, rows))
local r = results[1]
print(string.format("%d items joined by id; left out: %d only in A, %d only in B, %d with an error; bootstrap: %d " ..
                    "resamples, seed %d", r.n, r.only_a, r.only_b, r.errors, args.resamples, args.seed))
