--[[
glm53.eval.runner - an eval run: a task module of evals/ over its data, generation in-process with the engine
or against an OpenAI-compatible server, answers extracted and scored in every mode, one JSONL record per item,
a summary with Wilson intervals and an HTML report. scripts/eval.lua is its command line.

    local runner = require("glm53.eval.runner")
    local result = assert(runner.run({ task = "gsm8k", model = "models/glm53-tiny", limit = 20,
                                       out = "reports/gsm8k" }))
    -- or server = "http://127.0.0.1:8000" instead of model
    print(result.summary.modes[1].p, result.dir)

opts:
  task          a module name of evals/ (gsm8k, gsm8k_cot, mmlu_pro, gpqa, mmmu_pro, tiny_arith, tiny_mc,
                tiny_retrieval, tiny_tools, tiny_vision)
  data          its JSONL (default runner.DEFAULT_DATA[task]); shots: a JSONL of shots for fewshot (task-dependent:
                gsm8k_cot has its eight built in)
  groups        only the items whose `group` is in this list (e.g. { "2048" } of tiny_retrieval), before limit
  limit         the first N items; modes: the modes to score (default all the task's); fewshot (default 0)
  task_opts     { key = value } given to the task's load and prompt (format, style, method, shuffle, repeats)
  max_tokens    default the task's max_gen_toks, else runner.DEFAULT_MAX_TOKENS
  temperature   default 0 (greedy, as every bundled task asks); seed (default 0): each item's sampling seed is a
                hash of (seed, id), so records do not depend on batching or order
  reasoning     "split" (default): for chat prompts the output the answer is read from is the content after the
                model's reasoning (</think>; vLLM's glm45 reasoning parser, glm53.chat.parsers), the reasoning
                goes into the record apart; "keep": the whole generated text
  concurrency   items generated at once (in-process: streams of one driver; server: requests in flight)
  out           the run directory: records.jsonl, run.json, summary.json, summary.md, report.html
  in-process:   model (checkpoint directory), tokenizer (default model/tokenizer.json), device, threads, spec_k
  server:       server (base URL; "/v1" is appended unless the URL has a path), model_name (default the
                server's first model), timeout (seconds per request, default 600), api_key (default
                $OPENAI_API_KEY)
  progress      { every = N } for the progress bar, or false; log: function(line) (default stderr)
  on_record     function(record, done): called after each record is written (tests)

Besides load, prompt, modes, extract, match and gold (docs/evals.md), a task module may have:
  chat_opts(item)      options of the chat template for the item's prompt ({ tools = ... }); in-process only
  scored(item, mode)   false where a mode does not score the item (its record has null for that mode, and the
                       mode's n leaves it out), e.g. the validity of tool calls on items whose gold is no call
and its items may carry `group` (a string): records keep it, and the summary gives the accuracy per group.
Chat prompts with image parts are run in-process through the model's vision tower (glm53.eval.generator.prompt).

A run directory is resumable: records already there are kept and their items skipped, records with an error
are dropped and tried again, a partial last line is cut off; records are written in item order (results that
finish early wait for the ones before them), so an interrupted and resumed run writes the same file as an
uninterrupted one. run.json holds the settings that decide the outputs; a run with other settings in the same
directory is refused. Returns { summary =, dir =, records = (this run's items), skipped = } or nil, err.
]]
local bit = require("bit")
local ffi = require("ffi")
local cjson = require("cjson")
local clock = require("glm53.util.clock")
local file = require("glm53.util.file")
local records = require("glm53.eval.records")
local progress = require("glm53.eval.progress")
local summary = require("glm53.eval.summary")

local M = {}

-- The root of this checkout (where evals/ and models/ are), from this file's path.
local function repo_root()
    local src = debug.getinfo(1, "S").source
    return src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/lua/glm53/eval/runner%.lua$") or "."
end

ffi.cdef("char *realpath(const char *path, char *resolved_path); void free(void *ptr);")

-- The canonical absolute path of an existing file or directory (so a run resumed from another working
-- directory has the same settings), or the path as given when it does not exist.
local function canonical(path)
    local p = ffi.C.realpath(path, nil)
    if p == nil then return path end
    local s = ffi.string(p)
    ffi.C.free(p)
    return s
end
M.canonical = canonical
M.ROOT = canonical(repo_root())

-- The checkpoint used when a command names none: the bundled trained tiny model (docs/tiny-model.md), the same
-- one the glm53 commands and the server default to (glm53.cli.common.BUNDLED_MODEL).
M.DEFAULT_MODEL = M.ROOT .. "/models/" .. require("glm53.cli.common").BUNDLED_MODEL

M.DEFAULT_DATA = {
    gsm8k = "evals/data/gsm8k/test.jsonl",
    gsm8k_cot = "evals/data/gsm8k/test.jsonl",
    mmlu_pro = "evals/data/mmlu_pro/sample.jsonl",
    gpqa = "evals/data/gpqa/sample.jsonl",
    mmmu_pro = "evals/data/mmmu_pro/sample.jsonl",
    tiny_arith = "evals/data/tiny/arith.jsonl",
    tiny_mc = "evals/data/tiny/mc.jsonl",
    tiny_retrieval = "evals/data/tiny/retrieval.jsonl",
    tiny_tools = "evals/data/tiny/tools.jsonl",
    tiny_vision = "evals/data/tiny/vision.jsonl",
}
M.DEFAULT_MAX_TOKENS = 256

-- A task module by name (evals/<name>.lua), or nil, err.
function M.task(name)
    if type(name) ~= "string" or not name:match("^[%w_]+$") then
        return nil, "task: a module name of evals/, got " .. tostring(name)
    end
    local path = M.ROOT .. "/?.lua"
    if not package.path:find(path, 1, true) then package.path = path .. ";" .. package.path end
    local ok, mod = pcall(require, "evals." .. name)
    if not ok then
        local known = {}
        for task in pairs(M.DEFAULT_DATA) do known[#known + 1] = task end
        table.sort(known)
        return nil, "task " .. name .. ": " .. tostring(mod):match("^[^\n]*") .. " (the tasks with bundled data: " ..
                    table.concat(known, ", ") .. ")"
    end
    if type(mod) ~= "table" or not (mod.load and mod.prompt and mod.extract and mod.match and mod.gold and mod.modes) then
        return nil, "task " .. name .. ": evals/" .. name .. ".lua is not a task module"
    end
    return mod
end

-- FNV-1a (32 bits) of the text: the per-item sampling seed from the run seed and the id.
local function item_seed(seed, id)
    local h = 2166136261
    for i = 1, #id do
        h = bit.bxor(h, id:byte(i)) % 4294967296
        local lo, hi = h % 65536, math.floor(h / 65536)   -- h * 16777619 mod 2^32 without losing bits
        h = (lo * 16777619 + hi * 16777619 % 65536 * 65536) % 4294967296
    end
    return (h + seed) % 2147483648
end
M.item_seed = item_seed


local function shallow_copy(t)
    local out = {}
    for k, v in pairs(t or {}) do out[k] = v end
    return out
end

---------------------------------------------------------------------------------------------------------------
-- Scoring
---------------------------------------------------------------------------------------------------------------
local parsers = require("glm53.chat.parsers")

-- The text answers are read from, and the reasoning kept apart (see opts.reasoning). A server's reply was split
-- by its reasoning parser already when it sent reasoning, or when its content holds no </think> (our server sends
-- reasoning_content null for an empty think block, and everything as reasoning when the block never closes);
-- in-process output is the raw text after the prompt's open <think>.
local function split_output(raw, server_reasoning, chat_prompt, reasoning_mode, from_server)
    if not chat_prompt then return raw, nil end
    if reasoning_mode == "keep" then
        if server_reasoning then return server_reasoning .. "</think>" .. raw, nil end
        return raw, nil
    end
    if server_reasoning then return raw, server_reasoning end
    if from_server and not raw:find("</think>", 1, true) then return raw, nil end
    local r = parsers.parse(raw)
    return r.content or "", r.reasoning ~= "" and r.reasoning or nil   -- an empty think block: null, as a server sends it
end

-- The record of one item from a generation result g = { raw, reasoning, finish_reason, tokens_in, tokens_out,
-- latency, spec, error, server (true for a server's reply) }.
local function make_record(run, item, prompt, g)
    local null = cjson.null
    local rec = { id = item.id, group = item.group or null, prompt = prompt, gold = run.task_mod.gold(item),
                  tokens_in = g.tokens_in or null, tokens_out = g.tokens_out or null, latency_s = g.latency or null,
                  spec = g.spec or null }
    if g.error then
        rec.error, rec.finish_reason = g.error, "error"
        return rec
    end
    local output, reasoning = split_output(g.raw, g.reasoning, type(prompt) == "table", run.reasoning, g.server)
    rec.output, rec.reasoning, rec.finish_reason = output, reasoning or null, g.finish_reason or null
    local extracted, stages, correct = {}, {}, {}
    local has_stage = false
    local scored = run.task_mod.scored
    for _, mode in ipairs(run.modes) do
        if scored and not scored(item, mode) then
            extracted[mode], stages[mode], correct[mode] = null, null, null
        else
            local answer, stage = run.task_mod.extract(output, mode, item)
            extracted[mode] = answer == nil and null or answer
            stages[mode] = stage == nil and null or stage
            has_stage = has_stage or stage ~= nil
            correct[mode] = run.task_mod.match(answer, rec.gold, mode) and true or false
        end
    end
    rec.extracted = records.ordered(run.modes, extracted)
    rec.extract_stage = has_stage and records.ordered(run.modes, stages) or null
    rec.correct = records.ordered(run.modes, correct)
    return rec
end

---------------------------------------------------------------------------------------------------------------
-- Backends: each runs jobs (at most `concurrency` at once) and calls on_result(job, g) for each.
---------------------------------------------------------------------------------------------------------------
local function spec_of(stats)
    if not stats or stats.spec_decode_num_drafts == 0 then return nil end
    local per_pos = {}
    for i, a in ipairs(stats.spec_decode_num_accepted_tokens_per_pos) do per_pos[i] = a end
    return records.ordered({ "drafts", "draft_tokens", "accepted", "accepted_per_pos" }, {
        drafts = stats.spec_decode_num_drafts, draft_tokens = stats.spec_decode_num_draft_tokens,
        accepted = stats.spec_decode_num_accepted_tokens, accepted_per_pos = per_pos })
end

local function run_engine(run, jobs, on_result)
    local model = require("glm53.engine.model")
    local tokenizer = require("glm53.engine.tokenizer")
    local generator = require("glm53.eval.generator")
    local o = run.opts
    local m, err = model.load(o.model, { device = o.device or "cpu", threads = o.threads or 0 })
    if not m then return nil, err end
    local tok
    tok, err = tokenizer.load(o.tokenizer or (o.model .. "/tokenizer.json"))
    if not tok then return nil, err end
    local g
    g, err = generator.new(m, tok, { max_seqs = run.concurrency, k = o.spec_k or 0,
                                     sampling = { temperature = run.temperature } })
    if not g then return nil, err end
    local next_job = 1
    local function submit_next()
        local job = jobs[next_job]
        if not job then return end
        next_job = next_job + 1
        local p, eerr = generator.prompt(m, tok, job.prompt, job.chat_opts)
        if not p then return on_result(job, { error = eerr }) or submit_next() end
        g:submit({ ids = p.ids, embeddings = p.embeddings, use = p.use, max_tokens = run.max_tokens, stop = run.stop,
                   seed = job.seed }, {
            on_done = function(r)
                on_result(job, { raw = r.text, finish_reason = r.finish_reason, tokens_in = r.tokens_in,
                                 tokens_out = r.tokens_out, latency = r.t_end - r.t_start, spec = spec_of(r.stats),
                                 error = r.error })
                submit_next()
            end,
        })
    end
    for _ = 1, run.concurrency do submit_next() end
    g:run()   -- a failed round fails its requests (their records carry the error), the others go on
    g:free()
    m:free()
    return true
end

local function run_server(run, jobs, on_result)
    local uv = require("luv")
    local http_client = require("glm53.eval.http_client")
    local openai = require("glm53.eval.openai")
    local o = run.opts
    local url, err = http_client.parse_url(o.server)
    if not url then return nil, err end
    local base = url.path ~= "" and url.path or "/v1"
    local pool = http_client.pool(uv, url, { connections = run.concurrency, timeouts = { read = o.timeout or 600 } })
    local failure
    local next_job, running = 1, 0
    local function start_next(model_name)
        local job = jobs[next_job]
        if not job then
            if running == 0 then pool:close() end
            return
        end
        next_job, running = next_job + 1, running + 1
        local req = { base = base, model = model_name, max_tokens = run.max_tokens, temperature = run.temperature,
                      seed = job.seed, stop = run.stop, timeout = o.timeout or 600, api_key = o.api_key }
        if type(job.prompt) == "table" then req.messages = job.prompt else req.prompt = job.prompt end
        openai.complete(pool, req, function(r)
            running = running - 1
            local ok, cerr = pcall(on_result, job, {
                raw = r.text, reasoning = r.reasoning, server = true, finish_reason = r.finish_reason,
                tokens_in = r.prompt_tokens, tokens_out = r.completion_tokens,
                latency = r.ok and r.latency or (r.t_end - r.t_start), error = not r.ok and (r.error or "request failed") or nil })
            if not ok then
                failure = failure or cerr
                pool:close()
                return
            end
            start_next(model_name)
        end)
    end
    local function start(model_name)
        for _ = 1, run.concurrency do start_next(model_name) end
    end
    if o.model_name then
        start(o.model_name)
    else
        openai.first_model(pool, base, function(id, merr)
            if not id then
                failure = "--server " .. o.server .. ": cannot list its models (" .. tostring(merr) ..
                          "); name one with --model-name"
                pool:close()
                return
            end
            run.model_name = id
            start(id)
        end)
    end
    uv.run()
    if failure then return nil, failure end
    return true
end

---------------------------------------------------------------------------------------------------------------
-- The run
---------------------------------------------------------------------------------------------------------------
-- Checks (or writes) dir/run.json: the settings that decide the outputs must match a run already there.
local function check_identity(dir, identity)
    local path = dir .. "/run.json"
    local want = records.json(identity)
    local have = file.read_file(path)
    if have then
        have = have:gsub("%s+$", "")
        if have ~= want then
            return nil, dir .. " holds a run with other settings:\n  there: " .. have .. "\n  now:   " .. want ..
                        "\nresume with the same settings, or use another --out"
        end
        return true
    end
    return file.write_file(path, want .. "\n", { atomic = true })
end

function M.run(opts)
    if type(opts) ~= "table" then error("runner.run: opts must be a table", 2) end
    if (opts.model == nil) == (opts.server == nil) then error("runner.run: give one of opts.model and opts.server", 2) end
    local task_mod, err = M.task(opts.task)
    if not task_mod then return nil, err end
    local log = opts.log or function(line) io.stderr:write(line, "\n") end
    local run = {
        opts = opts, task_mod = task_mod, concurrency = opts.concurrency or 1, temperature = opts.temperature or 0,
        reasoning = opts.reasoning or "split", seed = opts.seed or 0,
    }
    if run.concurrency < 1 then error("runner.run: concurrency must be >= 1", 2) end
    if run.reasoning ~= "split" and run.reasoning ~= "keep" then error("runner.run: reasoning must be split or keep", 2) end
    local gen = task_mod.generation or {}
    run.stop = gen["until"] or {}
    run.max_tokens = opts.max_tokens or gen.max_gen_toks or M.DEFAULT_MAX_TOKENS
    run.modes = opts.modes or task_mod.modes
    if opts.server and task_mod.chat_opts then
        return nil, "task " .. opts.task .. " gives its prompts chat-template options (tools) that the OpenAI " ..
                    "request this runner sends does not carry: run it in-process (--model)"
    end
    for _, mode in ipairs(run.modes) do
        local known = false
        for _, m in ipairs(task_mod.modes) do known = known or m == mode end
        if not known then
            return nil, "task " .. opts.task .. " has no mode " .. mode .. " (" .. table.concat(task_mod.modes, ", ") .. ")"
        end
    end

    -- Items and prompts.
    local data = opts.data or (M.DEFAULT_DATA[opts.task] and M.ROOT .. "/" .. M.DEFAULT_DATA[opts.task])
    if not data then return nil, "task " .. opts.task .. " has no bundled data: give --data" end
    local load_opts = shallow_copy(opts.task_opts)
    load_opts.seed = run.seed
    local items
    items, err = task_mod.load(data, load_opts)
    if not items then return nil, err end
    if opts.groups then
        local wanted, kept = {}, {}
        for _, g in ipairs(opts.groups) do wanted[tostring(g)] = true end
        for _, item in ipairs(items) do
            if item.group ~= nil and wanted[item.group] then kept[#kept + 1] = item end
        end
        if #kept == 0 then return nil, "task " .. opts.task .. ": no item is in the groups " .. table.concat(opts.groups, ", ") end
        items = kept
    end
    if opts.limit and opts.limit < #items then
        for i = #items, opts.limit + 1, -1 do items[i] = nil end
    end
    local prompt_opts = shallow_copy(opts.task_opts)
    prompt_opts.fewshot = opts.fewshot or 0
    if opts.shots then
        local shots
        shots, err = task_mod.load(opts.shots, { seed = run.seed })
        if not shots then return nil, "shots: " .. err end
        prompt_opts.shots = shots
    end

    local dir = opts.out
    local made, merr = file.mkdir_p(dir)
    if not made then return nil, merr end
    local ok
    ok, err = check_identity(dir, records.ordered(
        { "task", "data", "target", "model_name", "seed", "fewshot", "shots", "max_tokens", "temperature",
          "reasoning", "modes", "task_opts" },
        { task = opts.task, data = canonical(data), target = opts.model and canonical(opts.model) or opts.server,
          model_name = opts.model_name, seed = run.seed, fewshot = prompt_opts.fewshot,
          shots = opts.shots and canonical(opts.shots), max_tokens = run.max_tokens,
          temperature = run.temperature, reasoning = run.reasoning, modes = run.modes,
          task_opts = opts.task_opts or {} }))
    if not ok then return nil, err end
    local store
    store, err = records.open(dir .. "/records.jsonl")
    if not store then return nil, err end
    if store.cut then log("eval: cut off a partial last line of " .. store.path) end
    if store.dropped > 0 then log(string.format("eval: %d records with errors dropped: their items run again", store.dropped)) end

    local jobs, skipped = {}, 0
    for _, item in ipairs(items) do
        if store.done[item.id] then
            skipped = skipped + 1
        else
            local made, prompt = pcall(task_mod.prompt, item, prompt_opts)
            if not made then
                store:close()
                local hint = tostring(prompt):find("shots than", 1, true) and
                             " (give --shots FILE, a JSONL of shots the task loads)" or ""
                return nil, "task " .. opts.task .. ": " .. tostring(prompt) .. hint
            end
            jobs[#jobs + 1] = { item = item, prompt = prompt, seed = item_seed(run.seed, item.id), pos = #jobs + 1,
                                chat_opts = task_mod.chat_opts and task_mod.chat_opts(item) or nil }
        end
    end
    log(string.format("eval: %s, %d items (%d done before, %d to run), %s, concurrency %d, out %s", opts.task,
                      #items, skipped, #jobs, opts.model and ("model " .. opts.model) or ("server " .. opts.server),
                      run.concurrency, dir))

    -- Results come in any order; records are written in job order.
    local ready, next_pos, written, correct1 = {}, 1, 0, 0
    local bar = opts.progress ~= false and progress.new({ total = #items, start = skipped, label = opts.task,
                                                          every = opts.progress and opts.progress.every }) or nil
    local write_err
    local function on_result(job, g)
        ready[job.pos] = make_record(run, job.item, job.prompt, g)
        while ready[next_pos] do
            local rec = ready[next_pos]
            ready[next_pos] = nil
            next_pos = next_pos + 1
            local wok, werr = store:append(rec)
            if not wok then write_err = write_err or werr end
            written = written + 1
            if rec.correct and rec.correct ~= cjson.null and rec.correct[run.modes[1]] then correct1 = correct1 + 1 end
            if bar then bar:update(skipped + written, string.format("%s %.3f", run.modes[1], correct1 / written)) end
            if opts.on_record then opts.on_record(rec, skipped + written) end
        end
    end
    local t0 = clock.now()
    if #jobs > 0 then
        if opts.model then ok, err = run_engine(run, jobs, on_result) else ok, err = run_server(run, jobs, on_result) end
        if not ok then store:close() return nil, err end
    end
    if bar then bar:finish() end
    store:close()
    if write_err then return nil, write_err end

    -- The summary of this run's items.
    local all
    all, err = records.read(store.path)
    if not all then return nil, err end
    local by_id = {}
    for _, r in ipairs(all) do by_id[tostring(r.id)] = r end
    local mine = {}
    for _, item in ipairs(items) do mine[#mine + 1] = by_id[item.id] end
    local s = summary.compute(mine, run.modes)
    local settings = {
        { "task", opts.task }, { "data", data },
        { "groups", opts.groups and table.concat(opts.groups, ", ") or "all" }, { "items", #items },
        { opts.model and "model" or "server", opts.model or opts.server },
        { "served model", opts.server and (run.model_name or opts.model_name) or "-" },
        { "seed", run.seed }, { "fewshot", prompt_opts.fewshot }, { "max tokens", run.max_tokens },
        { "temperature", run.temperature },
        { "stop strings", #run.stop > 0 and '"' .. table.concat(run.stop, '", "') .. '"' or "none" },
        { "reasoning", run.reasoning }, { "concurrency", run.concurrency },
        { "device", opts.model and (opts.device or "cpu") or "-" }, { "spec k", opts.spec_k or 0 },
        { "wall time of this invocation (s)", string.format("%.2f", clock.now() - t0) },
    }
    ok, err = summary.write(dir, s, {
        title = opts.task .. " on " .. (opts.model or opts.server),
        intro = opts.intro or "",
        settings = settings,
        notes = opts.command and ("command: `" .. opts.command .. "`") or nil,
    })
    if not ok then return nil, err end
    return { summary = s, dir = dir, records = mine, skipped = skipped, model_name = run.model_name }
end

return M
