--[==[
glm53.cli.chat - `glm53 chat`: an interactive conversation with the model, replies streamed.

    $ glm53 chat --temperature 1 --top-p 0.95
    > What is linear attention?
    (the reasoning, dimmed) ... the answer
    > /image cat.png
    > What is in the picture?
    > /reset
    > /exit

Each line you type is a user message. The whole conversation is rendered with the chat template every turn
(glm53.chat.template; the replies go back in as assistant messages with their reasoning), and the cache of the
previous turn's prompt is reused as far as the new prompt's tokens agree with it (glm53.generation.driver's
d:prefix(prompt, {from = ...})): a turn computes only the last reply, re-tokenized, and the new message. A reply
is generated on a fork of that prefix, so the cache holds the conversation twice while a reply runs. Replies stop at
the model's end tokens (<|user|> when it hands the turn back), --stop strings or --max-tokens; the reasoning before
</think> is shown apart from the answer.

Commands: /help, /reset (forget the conversation and its cache), /image PATH (attach an image to the next
message; models with a vision tower), /exit (or end of input, Ctrl-D). Ctrl-C during a reply stops it; LuaJIT
restores the default SIGINT action after the first one, so a second Ctrl-C ends the program. A line that starts
with "//" is sent with one "/" less. Messages and replies go to stdout, the rest (banner, --verbose statistics,
errors) to stderr.
]==]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 chat",
    usage = "glm53 chat [options]",
    summary = "An interactive chat with the model: type a message, read the streamed reply.",
    description = [[
Commands in the chat: /help, /reset (forget the conversation), /image PATH (attach an image to the next
message), /exit (or Ctrl-D). The conversation is re-rendered with the chat template each turn; the cache is reused
as far as the new prompt agrees with the previous one.]],
    options = common.options({
        "Conversation:",
        { "system", metavar = "TEXT", help = "a system message at the start of the conversation" },
        { "reasoning_effort", choices = { "low", "high", "max" }, help = "the template's Reasoning Effort line (default max)" },
        { "ctx_size", type = "integer", min = 16, default = 4096, help = "positions of the conversation's cache" },
        { "verbose", flag = true, help = "a statistics line after each reply (prompt, cache reuse, speed)" },
    }, common.model_options(), common.sampling_options(), common.generation_options(1024)),
}

local HELP = [[
/help          this list
/reset         forget the conversation (and its cache)
/image PATH    attach an image to the next message
/exit          leave (so does Ctrl-D)]]

local function info(msg)
    io.stdout:flush()
    io.stderr:write(msg, "\n")
end

function M.run(args)
    local chat = require("glm53.chat.template")
    local clock = require("glm53.util.clock")
    local output = require("glm53.cli.output")
    local vision = require("glm53.engine.vision")

    local ctx = common.load(args, { need_tokenizer = true })
    local policy = common.load_policy(args, ctx)
    local d = common.driver(ctx, args, policy)
    local stop_ids = common.stop_ids(ctx, args)
    local interactive = output.isatty(io.stdin)

    local st = {
        messages = {},   -- the conversation so far (OpenAI-shaped)
        items = {},      -- its images, preprocessed, in the order of their placeholders
        pending = {},    -- images for the next message
        prefix = nil,    -- the driver prefix holding the cache of the last prompt
        turn = 0,
    }
    local function reset()
        if st.prefix then st.prefix:free() end
        st.messages, st.items, st.pending, st.prefix = {}, {}, {}, nil
        if args.system then st.messages[1] = { role = "system", content = args.system } end
    end
    reset()

    -- One user message: render, reuse the cache, stream the reply. Failures raise (cli.fail).
    local function turn(text)
        local messages = {}
        for i, msg in ipairs(st.messages) do messages[i] = msg end
        local content, items = text, st.items
        if #st.pending > 0 then
            content, items = {}, {}
            for i, it in ipairs(st.items) do items[i] = it end
            for _, it in ipairs(st.pending) do
                content[#content + 1] = { type = "image" }
                items[#items + 1] = it
            end
            content[#content + 1] = { type = "text", text = text }
        end
        messages[#messages + 1] = { role = "user", content = content }
        local prompt, err = chat.render(messages, { reasoning_effort = args.reasoning_effort })
        if not prompt then cli.fail("chat template: " .. err) end
        local ids, media = nil, nil
        if #items > 0 then
            media, err = vision.prompt(ctx.m, ctx.tok, prompt, items)
            if not media then cli.fail(err) end
            ids = {}
            for i = 0, media.n - 1 do ids[i + 1] = media.ids[i] end
        else
            ids, err = ctx.tok:encode(prompt)
            if not ids then cli.fail(err) end
        end
        local room = args.ctx_size - #ids - args.spec_k - 1
        if room < 1 then
            cli.fail(string.format("the conversation is %d tokens, the cache holds %d (--ctx-size): /reset starts over",
                                   #ids, args.ctx_size))
        end
        local t0 = clock.now()
        local pre
        pre, err = d:prefix(ids, { capacity = args.ctx_size, from = st.prefix,
                                   embeddings = media and media.embeddings, use = media and media.use })
        if not pre then cli.fail(err) end
        if st.prefix then st.prefix:free() end   -- its cache is pre's now, or it could not be reused
        st.prefix = pre
        st.turn = st.turn + 1
        local s
        local max_new = math.min(args.max_tokens, room)
        s, err = d:add(pre, { max_new = max_new, min_new = math.min(args.min_tokens, max_new), stop_ids = stop_ids,
                              seed = args.seed + st.turn - 1 })
        if not s then cli.fail(err) end
        local out = output.new({ file = io.stdout, think = common.ends_in_think(ctx, ids), reasoning = args.reasoning })
        local r
        r, err = common.stream(d, s, ctx, { stop = args.stop,
                                            write = function(t) out:write(t) io.stdout:flush() end })
        if not r then cli.fail(err) end
        local shown = out:finish()
        local t_end = clock.now()
        -- The reply joins the conversation; the next render writes it back with its reasoning.
        messages[#messages + 1] = { role = "assistant", content = shown.content or (shown.reasoning and "" or shown.text),
                                    reasoning_content = shown.reasoning }
        st.messages, st.items, st.pending = messages, items, {}
        if args.verbose then
            local what = r.stop or (r.finish_reason == "stop" and ctx.tok:token_string(r.ids[#r.ids])) or nil
            info(string.format("[prompt %d tokens, %d from the cache; reply %d tokens in %.3f s (%.1f tok/s); " ..
                               "finish: %s%s]", #ids, pre.reused, #r.ids, t_end - t0,
                               #r.ids / math.max(t_end - r.t_first, 1e-9), r.finish_reason or "length",
                               what and " (" .. what .. ")" or ""))
        end
    end

    local function attach(path)
        if path == "" then info("usage: /image PATH") return end
        if ctx.m.config.has_vision == 0 then
            info("glm53 chat: " .. ctx.dir .. " has no vision tower: /image needs a vision model")
            return
        end
        local item, err = vision.image(path)
        if not item then info("glm53 chat: /image " .. common.about(path, err)) return end
        st.pending[#st.pending + 1] = item
        info(string.format("(image %s attached to the next message: %d tokens)", path, item.n_tokens))
    end

    if interactive then
        info(string.format("glm53 chat: %s (%d layers, vocabulary %d). /help lists the commands; /exit or Ctrl-D " ..
                           "leaves.", ctx.dir, ctx.m.config.text.num_hidden_layers, ctx.n_valid))
    end
    while true do
        if interactive then io.stdout:write("> ") io.stdout:flush() end
        local line = io.stdin:read("*l")
        if line == nil then
            if interactive then io.stdout:write("\n") end
            break
        end
        line = line:gsub("%s+$", "")
        local command, rest = line:match("^/(%a+)%s*(.*)$")
        if command == "exit" or command == "quit" then
            break
        elseif command == "reset" then
            reset()
            info("(conversation cleared)")
        elseif command == "help" then
            info(HELP)
        elseif command == "image" then
            attach(rest)
        elseif command then
            info("unknown command /" .. command .. " (/help lists them)")
        elseif line:match("%S") then
            if line:sub(1, 2) == "//" then line = line:sub(2) end
            local trace
            local ok, e = xpcall(turn, function(x)
                if type(x) ~= "table" then trace = debug.traceback(tostring(x), 2) end
                return x
            end, line)
            if not ok then
                local msg = type(e) == "table" and e.msg or cli.one_line(e)
                if tostring(e):find("interrupted!", 1, true) then msg = "(reply interrupted)" else msg = "glm53 chat: " .. msg end
                info("\n" .. msg)
                if args.debug and trace then io.stderr:write(trace, "\n") end
                -- A failed round leaves the driver's streams unusable: start from a fresh driver and cache (the
                -- conversation stays as it was before this message).
                if st.prefix then st.prefix:free() end
                st.prefix = nil
                d:free()
                d = common.driver(ctx, args, policy)
            end
        end
    end
    if st.prefix then st.prefix:free() end
    d:free()
    return true
end

return M
