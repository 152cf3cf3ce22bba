--[==[
glm53.cli.generate - `glm53 generate`: text (or token ids) in, text out, streamed token by token.

    glm53 generate "Write a haiku about linear attention."          # the chat template, greedy, streamed
    echo "Why is the sky blue?" | glm53 generate - --temperature 1 --top-p 0.95 --seed 7
    glm53 generate --raw --file prompt.txt --max-tokens 64 --stop "\n\n"
    glm53 generate --tokens 1,2,3 --max-tokens 32 --spec-k 3 --json # ids in; one JSON object out

The prompt is the PROMPT argument, --file FILE, stdin (PROMPT "-") or --tokens IDS (ids as they are: no template).
Text is rendered with the model's chat template (glm53.chat.template: [gMASK]<sop><|system|>Reasoning Effort: Max
<|user|>PROMPT<|assistant|><think>) unless --raw; --system adds a system message, --image PATH an image (models with
a vision tower). Generation stops at the model's end tokens (glm53.generation.defaults: generation_config.json,
config.json, else <|endoftext|> <|user|> <|observation|>), at --stop-ids, at a --stop string, or after --max-tokens;
only ids the tokenizer can decode are sampled. The reasoning of a chat prompt (the text before </think>) is shown
apart from the answer (--reasoning). A statistics line goes to stderr (--quiet: none).

--json prints nothing while generating, then one JSON object (tests and benchmarks read it; fields are added,
never removed):
    {"ids": [generated ids], "text": s, "reasoning": s, "content": s, "finish_reason": "stop" | "length" | a policy's
     reason, "stop": the end token or stop string, "usage": {"prompt_tokens", "completion_tokens", "total_tokens"},
     "timings": {"load_s", "prefill_s", "decode_s"}, "prefill_tok_s": x, "decode_tok_s": y,
     "spec": {"drafts", "draft_tokens", "accepted", "accepted_per_pos": [...]}}
text is absent without a tokenizer, reasoning and content without a chat prompt. prefill_tok_s is prompt tokens
per second up to the first generated token; decode_tok_s the other generated tokens per second after it.
]==]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 generate",
    usage = "glm53 generate [options] [PROMPT | -]",
    summary = "Generates text from a prompt with the chat template (or --raw, or --tokens IDS), streamed.",
    description = [[
The prompt is PROMPT, --file FILE, stdin (-) or --tokens IDS. Generation stops at the model's end tokens, --stop
strings, --stop-ids or --max-tokens. The reasoning before </think> is shown apart from the answer. --json: one JSON
object at the end instead of streamed text (docs/cli.md lists its fields).]],
    options = common.options({
        "Prompt:",
        { "file", metavar = "FILE", help = "read the prompt from FILE" },
        { "tokens", type = "ids", help = "the prompt as comma-separated token ids (no template)" },
        { "raw", flag = true, help = "a plain completion prompt: the text as it is, no chat template" },
        { "system", metavar = "TEXT", help = "a system message before the prompt" },
        { "reasoning_effort", choices = { "low", "high", "max" }, help = "the template's Reasoning Effort line (default max)" },
        { "image", list = true, metavar = "PATH", help = "an image shown with the prompt (vision models)" },
    }, common.model_options(), common.sampling_options(), common.generation_options(256), {
        "Output:",
        { "json", flag = true, help = "one JSON object at the end instead of streamed text" },
        { "capture", metavar = "LIST", help = "experts,selection: with --json, the routed experts (routed_experts) " ..
                                             "and attended positions (indexer_topk) behind each generated token" },
        { "special", flag = true, help = "keep special tokens in the text" },
        { "quiet", flag = true, help = "no statistics line on stderr" },
    }),
    args = { { "prompt", metavar = "PROMPT", optional = true } },
}

-- The prompt text of args: PROMPT, - (stdin) or --file.
local function prompt_text(args)
    if args.file then
        local file = require("glm53.util.file")
        local text, err = file.read_file(args.file)
        if not text then cli.fail("--file: " .. err) end
        return text
    end
    if args.prompt == "-" then return io.stdin:read("*a") end
    return args.prompt
end

-- The media items of --image (preprocessed), or nil.
local function images(args, ctx)
    if #args.image == 0 then return nil end
    if ctx.m.config.has_vision == 0 then cli.fail(ctx.dir .. " has no vision tower: --image needs a vision model") end
    local vision = require("glm53.engine.vision")
    local items = {}
    for i, path in ipairs(args.image) do
        local item, err = vision.image(path)
        if not item then cli.fail("--image " .. common.about(path, err)) end
        items[i] = item
    end
    return items
end

-- The prompt of args as ids, with its embedding rows (images) if any: ids, media, rendered text.
local function prompt_ids(args, ctx)
    if args.tokens then
        for _, id in ipairs(args.tokens) do
            if id >= ctx.m.vocab_size then
                cli.usage_error("--tokens: " .. id .. " is not an id of this model (vocabulary " .. ctx.m.vocab_size .. ")")
            end
        end
        return args.tokens
    end
    local text = prompt_text(args)
    local items = images(args, ctx)
    if not args.raw then
        local chat = require("glm53.chat.template")
        local messages = {}
        if args.system then messages[1] = { role = "system", content = args.system } end
        local content = text
        if items then
            content = {}
            for i = 1, #items do content[i] = { type = "image" } end
            content[#content + 1] = { type = "text", text = text }
        end
        messages[#messages + 1] = { role = "user", content = content }
        local err
        text, err = chat.render(messages, { reasoning_effort = args.reasoning_effort })
        if not text then cli.fail("chat template: " .. err) end
    end
    if items then
        local vision = require("glm53.engine.vision")
        local p, err = vision.prompt(ctx.m, ctx.tok, text, items)
        if not p then cli.fail("--image: " .. err) end
        local ids = {}
        for i = 0, p.n - 1 do ids[i + 1] = p.ids[i] end
        return ids, p, text
    end
    local ids, err = ctx.tok:encode(text)
    if not ids then cli.fail(err) end
    return ids, nil, text
end

-- What ended the generation, in words: the end token, the stop string, or nothing.
local function stop_what(ctx, r)
    if r.stop then return r.stop end
    local last = r.ids[#r.ids]
    if r.finish_reason == "stop" and last and ctx.tok then return ctx.tok:token_string(last) end
    return nil
end

function M.run(args)
    local n_sources = (args.prompt and 1 or 0) + (args.file and 1 or 0) + (args.tokens and 1 or 0)
    if n_sources ~= 1 then
        cli.usage_error(n_sources == 0 and "give a PROMPT, - (stdin), --file FILE or --tokens IDS"
                                       or "give one of PROMPT, --file and --tokens")
    end
    if args.tokens and (args.raw or args.system or #args.image > 0) then
        cli.usage_error("--tokens is the prompt as it is: no --raw, --system or --image with it")
    end
    local cjson = require("cjson")
    local clock = require("glm53.util.clock")
    local generation = require("glm53.generation.driver")
    local output = require("glm53.cli.output")

    local ctx = common.load(args, { need_tokenizer = args.tokens == nil })
    local ids, media = prompt_ids(args, ctx)
    if #ids == 0 then cli.fail("the prompt has no tokens") end
    local policy = common.load_policy(args, ctx)
    local d = common.driver(ctx, args, policy)

    local capture
    if args.capture then
        capture = {}
        for what in args.capture:gmatch("[^,]+") do
            if what ~= "experts" and what ~= "selection" then
                cli.usage_error("--capture: 'experts' and/or 'selection', got '" .. what .. "'")
            end
            capture[what] = true
        end
        if not args.json then cli.usage_error("--capture needs --json (the records go into its object)") end
    end
    local t0 = clock.now()
    if args.min_tokens > args.max_tokens then cli.usage_error("--min-tokens must not exceed --max-tokens") end
    local s, err = d:add(ids, { max_new = args.max_tokens, min_new = args.min_tokens,
                                stop_ids = common.stop_ids(ctx, args), embeddings = media and media.embeddings,
                                use = media and media.use, capture = capture })
    if not s then cli.fail(err) end
    local think = common.ends_in_think(ctx, ids)
    local out
    local write
    if not args.json then
        if ctx.tok then
            out = output.new({ file = io.stdout, think = think, reasoning = args.reasoning })
            write = function(text) out:write(text) io.stdout:flush() end
        else
            write = function(text) io.stdout:write(text) io.stdout:flush() end
        end
    end
    local r
    r, err = common.stream(d, s, ctx, { stop = args.stop, special = args.special, write = write })
    if not r then cli.fail(err) end
    local t_end = clock.now()
    if out then out:finish() elseif not args.json then io.stdout:write("\n") end

    local decode_tokens = #r.ids - r.first_round
    local prefill_s, decode_s = r.t_first - t0, t_end - r.t_first
    local prefill_tok_s = #ids / math.max(prefill_s, 1e-9)
    local decode_tok_s = decode_tokens > 0 and decode_tokens / math.max(decode_s, 1e-9) or 0
    local st = s.stats
    local finish = r.finish_reason or "length"
    local what = stop_what(ctx, r)
    if args.json then
        local fields = {
            '{"ids": [' .. table.concat(r.ids, ",") .. "]",
        }
        -- cjson writes "/" as "\/" (every backslash of the text is escaped, so the pair only ever stands for "/").
        -- Braces inside strings are written \u007b and \u007d: the only braces are the object's own, which readers
        -- that find the object with a balanced-brace match (the tests) rely on.
        local function field(name, value)
            local json = cjson.encode(value):gsub("\\/", "/"):gsub("{", "\\u007b"):gsub("}", "\\u007d")
            fields[#fields + 1] = cjson.encode(name) .. ": " .. json
        end
        if r.text then field("text", r.text) end
        if r.text and think then
            local parsed = require("glm53.chat.parsers").parse(r.text)
            field("reasoning", parsed.reasoning)
            field("content", parsed.content or "")
        end
        field("finish_reason", finish)
        if what then field("stop", what) end
        fields[#fields + 1] = string.format('"usage": {"prompt_tokens": %d, "completion_tokens": %d, "total_tokens": %d}',
                                            #ids, #r.ids, #ids + #r.ids)
        fields[#fields + 1] = string.format('"timings": {"load_s": %s, "prefill_s": %s, "decode_s": %s}',
                                            cjson.encode(ctx.t_load), cjson.encode(prefill_s), cjson.encode(decode_s))
        field("prefill_tok_s", prefill_tok_s)
        field("decode_tok_s", decode_tok_s)
        fields[#fields + 1] = string.format('"spec": {"drafts": %d, "draft_tokens": %d, "accepted": %d, ' ..
                                            '"accepted_per_pos": [%s]}', st.spec_decode_num_drafts,
                                            st.spec_decode_num_draft_tokens, st.spec_decode_num_accepted_tokens,
                                            table.concat(st.spec_decode_num_accepted_tokens_per_pos, ","))
        -- per generated token, one array per MoE (sparse) layer: [[[ids of layer a], [ids of layer b]], ...]
        local function nested(list)
            local tokens = {}
            for i = 1, #r.ids do
                local layers = {}
                for j, ids_of_layer in ipairs(list[i] or {}) do layers[j] = "[" .. table.concat(ids_of_layer, ",") .. "]" end
                tokens[i] = "[" .. table.concat(layers, ",") .. "]"
            end
            return "[" .. table.concat(tokens, ",") .. "]"
        end
        if capture and capture.experts then fields[#fields + 1] = '"routed_experts": ' .. nested(s.routed_experts) end
        if capture and capture.selection then fields[#fields + 1] = '"indexer_topk": ' .. nested(s.indexer_topk) end
        io.stdout:write(table.concat(fields, ", "), "}\n")
    elseif not args.quiet then
        local line = string.format("prefill %d tokens: %.1f tok/s; decode %d tokens: %.1f tok/s; finish: %s",
                                   #ids, prefill_tok_s, decode_tokens, decode_tok_s, finish)
        if what then line = line .. " (" .. cjson.encode(what) .. ")" end
        if args.spec_k > 0 then
            local sm = generation.summary(st)
            line = line .. string.format("; spec k=%d: %d drafts, acceptance %.3f, %.2f tokens/step", args.spec_k,
                                         st.spec_decode_num_drafts, sm.acceptance_rate, sm.tokens_per_target_step)
        end
        io.stderr:write(line, "\n")
    end
    d:free()
    return true
end

return M
