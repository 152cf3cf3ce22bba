--[[
glm53.cli.common - what the glm53 commands share: the bundled model, the option groups (model, sampling,
generation), loading a checkpoint with its tokenizer, and one generation streamed as text.

    local common = require("glm53.cli.common")
    local options = common.options(common.model_options(), common.sampling_options(), common.generation_options(256))
    -- in a command's run(args):
    local ctx = common.load(args)                       -- ctx.m, ctx.tok (or nil), ctx.dir, ctx.eos, ctx.n_valid
    local d = common.driver(ctx, args)                  -- a glm53.generation.driver for the sampling flags
    local s = assert(d:add(ids, { max_new = args.max_tokens, stop_ids = common.stop_ids(ctx, args) }))
    local r = assert(common.stream(d, s, ctx, { stop = args.stop, write = function(text) io.write(text) end }))
    -- r.ids, r.text, r.finish_reason, r.t_first

Failures end the command through glm53.util.cli (one line, status 1); options are checked by the parser.
]]
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")

local M = {}

---------------------------------------------------------------------------------------------------------------
-- The bundled model
---------------------------------------------------------------------------------------------------------------
-- The model `--model` defaults to: models/<this> in a checkout, glm53/models/<this> beside the installed modules.
-- It is the trained tiny model (docs/tiny-model.md); models/tiny, the random-weight 4-layer checkpoint the tests
-- use, stays beside it but is only loaded when named.
M.BUNDLED_MODEL = "glm53-tiny"

local function module_dir()
    local src = debug.getinfo(1, "S").source
    if src:sub(1, 1) ~= "@" then return "." end
    return src:sub(2):match("^(.*)/[^/]*$") or "."
end

-- The checkout this module runs from (the directory holding lua/ and scripts/), or nil when it is installed.
function M.checkout_root()
    local dir = module_dir()
    local root = dir:match("^(.*)/lua/glm53/cli$") or (dir:match("^lua/glm53/cli$") and ".")
    if root and file.exists(root .. "/scripts/policies/typical.lua") then return root end
    return nil
end

-- The directory of the bundled model, or nil and why there is none.
function M.bundled_model()
    local root = M.checkout_root()
    local places = {}
    if root then places[#places + 1] = root .. "/models/" .. M.BUNDLED_MODEL end
    places[#places + 1] = module_dir() .. "/../models/" .. M.BUNDLED_MODEL
    for _, dir in ipairs(places) do
        if file.exists(dir .. "/config.json") then return dir end
    end
    return nil, "the bundled model is not installed (looked in " .. table.concat(places, ", ") .. "); give --model DIR"
end

---------------------------------------------------------------------------------------------------------------
-- Option groups
---------------------------------------------------------------------------------------------------------------
-- One option list from several groups.
function M.options(...)
    local out = {}
    for _, group in ipairs({ ... }) do
        for _, o in ipairs(group) do out[#out + 1] = o end
    end
    return out
end

function M.model_options()
    return {
        "Model:",
        { "model", metavar = "DIR", help = "checkpoint directory (default: the bundled models/" .. M.BUNDLED_MODEL .. ")" },
        { "device", default = "cpu", choices = { "cpu", "cuda" } },
        { "threads", type = "integer", min = 0, default = 0, help = "CPU threads (0 = all cores; per rank with --tp/--ep)" },
        { "tp", type = "integer", min = 1, default = 1,
          help = "tensor-parallel ranks: attention heads and MLP widths split across them (docs/multi-gpu.md)" },
        { "ep", type = "integer", min = 1, default = 1, help = "expert-parallel ranks: the routed experts split across them" },
        { "communicator", default = "auto", choices = { "auto", "threads", "nccl" },
          help = "how ranks sum their parts: threads (CPU), NCCL (CUDA); auto picks" },
    }
end

function M.sampling_options()
    return {
        "Sampling (unset: generation_config.json's values where it has them, else greedy):",
        { "temperature", type = "number", min = 0, help = "0 = greedy (1 with --policy)" },
        { "top_k", type = "integer", min = 0, help = "0 = off" },
        { "top_p", type = "number", gt = 0, max = 1, help = "1 = off" },
        { "min_p", type = "number", min = 0, max = 1, help = "0 = off" },
        { "repetition_penalty", type = "number", gt = 0, help = "1 = off" },
        { "presence_penalty", type = "number", min = -2, max = 2, default = 0 },
        { "frequency_penalty", type = "number", min = -2, max = 2, default = 0 },
        { "seed", type = "integer", min = 0, default = 0 },
        { "policy", metavar = "NAME", help = "a Lua sampling policy picks each token: scripts/policies/NAME.lua, " ..
                                             "or the path of a .lua file" },
        { "policy_opt", list = true, metavar = "KEY=VALUE", help = "an option for the policy" },
        { "candidates", type = "integer", min = 1, default = 64, help = "most candidates a policy sees" },
    }
end

function M.generation_options(max_tokens)
    return {
        "Generation:",
        { "max_tokens", type = "integer", min = 1, default = max_tokens, help = "most tokens to generate" },
        { "min_tokens", type = "integer", min = 0, default = 0,
          help = "tokens before an end id or a stop string may end the output (vLLM's min_tokens)" },
        { "spec_k", type = "integer", min = 0, default = 0,
          help = "MTP speculative decoding: drafts per step (0 = off; exact: same output as without)" },
        { "draft_threshold", type = "number", min = 0, max = 1, help = "stop drafting below this draft probability" },
        { "draft_policy", metavar = "SPEC",
          help = "a draft policy: NAME[:key=value,...] of scripts/policies/draft_NAME.lua (adaptive, budget) or a path" },
        { "stop", list = true, metavar = "TEXT", help = "a stop string (not printed)" },
        { "stop_ids", type = "ids", help = "comma-separated ids that also end generation" },
        { "ignore_eos", flag = true, help = "do not stop at the model's end tokens" },
        { "tokenizer", metavar = "FILE", help = "tokenizer.json (default: the checkpoint's)" },
        { "reasoning", default = "show", choices = { "show", "hide", "raw" },
          help = "the model's <think> reasoning: shown apart (dimmed, or '| ' lines), hidden, or raw text" },
    }
end

---------------------------------------------------------------------------------------------------------------
-- Loading
---------------------------------------------------------------------------------------------------------------
-- The model of args (--model, --device, --threads, --tp, --ep, --communicator) with its tokenizer and defaults:
-- { m, tok (nil when the checkpoint has none and no --tokenizer is given), dir, eos (ids), eos_source,
--   n_valid (ids below it can be sampled: the tokenizer's vocabulary), sampling (generation_config defaults),
--   t_load (seconds) }. opts.need_tokenizer fails without one; opts.load: extra model.load options.
function M.load(args, opts)
    opts = opts or {}
    local clock = require("glm53.util.clock")
    local model = require("glm53.engine.model")
    local tokenizer = require("glm53.engine.tokenizer")
    local defaults = require("glm53.generation.defaults")
    local dir, why = args.model, nil
    if not dir then
        dir, why = M.bundled_model()
        if not dir then cli.fail(why) end
    end
    if not file.exists(dir .. "/config.json") then
        cli.fail(dir .. ": not a checkpoint directory (no config.json)")
    end
    local t0 = clock.now()
    local load_opts = { device = args.device, threads = args.threads, tp = args.tp, ep = args.ep,
                        communicator = args.communicator }
    for k, v in pairs(opts.load or {}) do load_opts[k] = v end
    local m, err = model.load(dir, load_opts)
    if not m then cli.fail(err) end
    local tok
    local tok_path = args.tokenizer or dir .. "/tokenizer.json"
    if args.tokenizer or file.exists(tok_path) then
        tok, err = tokenizer.load(tok_path)
        if not tok then cli.fail(tok_path .. ": " .. err) end
    elseif opts.need_tokenizer then
        cli.fail(dir .. " has no tokenizer.json; give --tokenizer FILE")
    end
    local eos, source = defaults.eos_ids(dir, tok)
    if not eos then cli.fail(source) end
    local sampling, serr = defaults.sampling(dir)
    if not sampling then cli.fail(serr) end
    return {
        m = m, tok = tok, dir = dir, eos = eos, eos_source = source, sampling = sampling,
        n_valid = tok and math.min(tok:n_vocab(), m.vocab_size) or m.vocab_size,
        t_load = clock.now() - t0,
    }
end

-- The policy of --policy / --policy-opt (nil without --policy). The policy gets its options as strings, plus
-- tokenizer and vocab_size.
-- A policy file's constructor called with opts: `name` is a name from scripts/policies (with `prefix` before
-- it: "draft_" for draft policies) or a path to a .lua file; `flag` names the option in errors.
local function make_policy(name, prefix, opts, flag)
    local path = name
    if not (path:find("/", 1, true) or path:match("%.lua$")) then
        if not path:match("^[%w_]+$") then cli.usage_error(flag .. ": a name from scripts/policies or a path, got '" .. path .. "'") end
        local root = M.checkout_root()
        if not root then cli.fail(flag .. " " .. path .. ": scripts/policies is not installed; give the policy's path") end
        path = root .. "/scripts/policies/" .. prefix .. path .. ".lua"
    end
    local chunk, err = loadfile(path)
    if not chunk then cli.fail(flag .. ": " .. err) end
    local ok, made = pcall(function() return chunk()(opts) end)
    if not ok then cli.fail(flag .. " " .. name .. ": " .. cli.one_line(made)) end
    return made
end

-- KEY=VALUE strings into opts.
local function key_values(list, opts, flag)
    for _, kv in ipairs(list or {}) do
        local k, v = kv:match("^([%w_]+)=(.*)$")
        if not k then cli.usage_error(flag .. ": expected KEY=VALUE, got '" .. kv .. "'") end
        opts[k] = v
    end
    return opts
end

-- The sampling policy of --policy NAME and its --policy-opt values, or nil.
function M.load_policy(args, ctx)
    if not args.policy then return nil end
    local opts = key_values(args.policy_opt, { vocab_size = ctx.n_valid, tokenizer = ctx.tok }, "--policy-opt")
    return make_policy(args.policy, "", opts, "--policy")
end

-- A draft policy from its spec: "threshold:P" (stop a round's drafting under probability P), or "NAME" /
-- "NAME:key=value,key=value" for scripts/policies/draft_NAME.lua (or a path) with those options; nil for "fixed".
function M.draft_policy(spec, flag)
    flag = flag or "--draft"
    if spec == nil or spec == "fixed" then return nil end
    local generation = require("glm53.generation.driver")
    local t = spec:match("^threshold:(.+)$")
    if t then
        if not tonumber(t) then cli.usage_error(flag .. ": threshold:P needs a number, got '" .. t .. "'") end
        return generation.draft_threshold(tonumber(t))
    end
    local name, rest = spec:match("^([^:]+):?(.*)$")
    local list = {}
    for kv in rest:gmatch("[^,]+") do list[#list + 1] = kv end
    return make_policy(name, "draft_", key_values(list, {}, flag), flag)
end

-- Sampler options: the flags given, else the checkpoint's generation_config, else greedy (temperature 1 with a
-- policy, which then sees the whole filtered distribution).
function M.sampling(args, ctx, policy)
    local s = {}
    for k, v in pairs(ctx.sampling) do s[k] = v end
    for _, k in ipairs({ "temperature", "top_k", "top_p", "min_p", "repetition_penalty" }) do
        if args[k] ~= nil then s[k] = args[k] end
    end
    if s.temperature == nil then s.temperature = policy and 1 or 0 end
    s.presence_penalty, s.frequency_penalty = args.presence_penalty, args.frequency_penalty
    s.seed, s.candidates = args.seed, args.candidates
    return s
end

-- A generation driver for args (sampling flags, --policy, --spec-k, --draft-threshold), sampling only ids the
-- tokenizer can decode.
function M.driver(ctx, args, policy)
    local generation = require("glm53.generation.driver")
    local ok, d, err = pcall(generation.new, ctx.m, {
        k = args.spec_k, sampling = M.sampling(args, ctx, policy), policy = policy, tokenizer = ctx.tok,
        draft = args.draft_threshold and generation.draft_threshold(args.draft_threshold) or
                M.draft_policy(args.draft_policy, "--draft-policy"),
    })
    if not ok then cli.usage_error(cli.one_line(d)) end   -- a bad option (argument errors raise)
    if not d then cli.fail(err) end                     -- e.g. --spec-k on a checkpoint without an MTP layer
    return d
end

-- The ids that end generation: the model's end tokens (unless --ignore-eos) and --stop-ids.
function M.stop_ids(ctx, args)
    local ids = {}
    if not args.ignore_eos then
        for _, id in ipairs(ctx.eos) do ids[#ids + 1] = id end
    end
    for _, id in ipairs(args.stop_ids or {}) do ids[#ids + 1] = id end
    return ids
end

-- Calls fn(item, line_no) for each item of a JSONL task file (`--task FILE`: chat items with messages, tools,
-- family), read with glm53.chat.json: objects keep their key order, which the chat template writes tool schemas
-- in (lua-cjson's tables would render them with sorted keys: another prompt than the model's). An unreadable file
-- or a line that is not a JSON object fails the command, naming `flag`.
function M.each_task_item(path, fn, flag)
    local json = require("glm53.chat.json")
    flag = flag or "--task"
    local f, err = io.open(path)
    if not f then cli.fail(flag .. ": " .. err) end
    local line_no = 0
    for line in f:lines() do
        line_no = line_no + 1
        if line:match("%S") then
            local item = json.decode(line, { exact = true })
            if json.kind(item) ~= "object" then
                f:close()
                cli.fail(("%s %s:%d: not a JSON object"):format(flag, path, line_no))
            end
            fn(item, line_no)
        end
    end
    f:close()
end

-- err about the file at path, starting with the path (once: file errors often name it already).
function M.about(path, err)
    err = tostring(err)
    if err:sub(1, #path + 1) == path .. ":" then return err end
    return path .. ": " .. err
end

-- Whether a prompt (a Lua array of ids) ends inside an open <think>: the chat template's generation prompt.
function M.ends_in_think(ctx, ids)
    local think = ctx.tok and ctx.tok:token_id("<think>")
    return think ~= nil and ids[#ids] == think
end

---------------------------------------------------------------------------------------------------------------
-- One generation, streamed
---------------------------------------------------------------------------------------------------------------
-- Runs stream s (of driver d, its only active stream) to its end. Its text goes through the incremental
-- detokeniser (special tokens skipped unless opts.special; opts.stop: stop strings) to opts.write(text) as it
-- comes; without a tokenizer, opts.write gets the ids ("12 34 "). The end token that stopped a stream is not
-- text. Returns { ids, text (nil without a tokenizer), finish_reason, stop (the stop string), t_first (clock
-- time of the first round's end), first_round (the tokens it gave) }, or nil, err. With a stop string, ids end
-- at the token that completed it.
function M.stream(d, s, ctx, opts)
    local clock = require("glm53.util.clock")
    local write = opts.write or function() end
    local detok = ctx.tok and ctx.tok:stream({ skip_special_tokens = not opts.special, stop = opts.stop,
                                               stop_after = s.min_new })
    local pieces, shown, t_first, first_round, stop_string, stop_at = {}, 0, nil, 0, nil, nil
    local function emit(text)
        if text ~= "" then
            pieces[#pieces + 1] = text
            write(text)
        end
    end
    while not s.done do
        local n, err = d:round()
        if not n then return nil, err end
        if not t_first then t_first, first_round = clock.now(), #s.generated end
        local last = #s.generated
        if s.done and s.finish_reason == "stop" and s.stop[s.generated[last]] then last = last - 1 end
        for i = shown + 1, last do
            local id = s.generated[i]
            if detok then
                local text, stopped, which = detok:push(id)
                if text == nil then return nil, stopped end
                emit(text)
                if stopped then
                    stop_string, stop_at = which, i
                    if not s.done then d:finish(s, "stop") end
                    s.finish_reason = "stop"
                    break
                end
            else
                write(id .. " ")
            end
        end
        shown = last
    end
    if detok then emit((detok:finish())) end
    local ids = s.generated
    if stop_at then ids = { unpack(ids, 1, stop_at) } end   -- the tokens up to the one that completed the stop string
    return { ids = ids, text = detok and table.concat(pieces) or nil, finish_reason = s.finish_reason,
             stop = stop_string, t_first = t_first or clock.now(), first_round = math.min(first_round, #ids) }
end

return M
