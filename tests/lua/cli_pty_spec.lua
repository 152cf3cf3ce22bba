-- `glm53 generate` and `glm53 chat` in a real terminal: each runs in a tmux pane (a pty), keys are typed into it
-- with send-keys and the screen is read back with capture-pane. Checked: the streamed text is what --json reports,
-- the reasoning is dimmed, generation stops at the model's end token, a hot sampler never hits an id the
-- tokenizer cannot decode, and the chat REPL keeps the conversation, /reset forgets it, /exit leaves with status 0.
-- tmux comes from scripts/bootstrap.sh's package list.
local cjson = require("cjson")
local clock = require("glm53.util.clock")
local output = require("glm53.cli.output")
local h = require("spec_helpers")

local ROOT = os.getenv("PWD")
-- On models/tiny, the random-weight test model (fast; "bread" ends with its <|observation|>), named explicitly:
-- the default --model is models/glm53-tiny.
local GENERATE = "bin/glm53 generate --model models/tiny "
local CHAT = "bin/glm53 chat --model models/tiny"
local stdout_of = h.stdout_of
local tmp, sock
local session_id = 0

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function tmux(args)
    local out, rc = h.run("tmux -S " .. sock .. " " .. args)
    return out:gsub("rc=%d+%s*$", ""), rc
end

-- Starts cmd (run from the checkout, NO_COLOR unset) in a new pane; the pane shows "[exit N]" when cmd ends.
local function start(cmd)
    session_id = session_id + 1
    local name = "s" .. session_id
    local line = string.format("cd %s && env -u NO_COLOR %s; echo \"[exit $?]\"; sleep 60", sh_quote(ROOT), cmd)
    local out, rc = tmux("new-session -d -s " .. name .. " -x 220 -y 60 " .. sh_quote(line))
    assert.are.equal(0, rc, out)
    return name
end

local function screen(name, escapes)
    return (tmux("capture-pane -p -J " .. (escapes and "-e " or "") .. "-S -2000 -t " .. name))
end

-- Waits (up to 30 s) until the pane shows `text` `count` times (default once); returns the screen.
local function wait_for(name, text, count)
    count = count or 1
    local deadline = clock.now() + 30
    while true do
        local s = screen(name)
        local n, at = 0, 1
        while true do
            local i = s:find(text, at, true)
            if not i then break end
            n, at = n + 1, i + #text
        end
        if n >= count then return s end
        if clock.now() > deadline then error("timed out waiting for " .. text .. " (x" .. count .. ") in:\n" .. s, 2) end
        os.execute("sleep 0.05")
    end
end

local function type_line(name, text)
    tmux("send-keys -t " .. name .. " -l " .. sh_quote(text))
    tmux("send-keys -t " .. name .. " Enter")
end

local function squeeze(s) return (s:gsub("%s+", "")) end

-- The reply of `glm53 generate ARGS --json`.
local function json_of(args)
    local out = stdout_of(GENERATE .. "--json " .. args .. " 2>/dev/null")
    return cjson.decode(out)
end

setup(function()
    assert(os.execute("command -v tmux >/dev/null") == 0, "tmux is missing (scripts/bootstrap.sh installs it)")
    tmp = h.tmpdir()
    sock = tmp .. "/tmux.sock"
end)
teardown(function()
    h.run("tmux -S " .. sock .. " kill-server")
    os.execute("rm -rf '" .. tmp .. "'")
end)

describe("glm53 generate in a terminal", function()
    it("streams the text --json reports, the reasoning dimmed, then the statistics", function()
        local args = "--max-tokens 40 --ignore-eos 'Write a haiku about linear attention.'"
        local want = json_of(args)
        local name = start(GENERATE .. args)
        local s = wait_for(name, "[exit 0]")
        assert.is_truthy(squeeze(s):find(squeeze(output.printable(want.text)), 1, true), s)
        assert.matches("decode 39 tokens: [%d.]+ tok/s; finish: length", s)
        assert.is_truthy(screen(name, true):find("\27[2m", 1, true), "the reasoning is not dimmed")
    end)

    it("stops at the model's end token", function()
        local want = json_of("--max-tokens 50 bread")
        assert.are.equal("stop", want.finish_reason)
        local name = start(GENERATE .. "--max-tokens 50 bread")
        local s = wait_for(name, "[exit 0]")
        assert.matches('finish: stop %("<|observation|>"%)', s)
        assert.is_truthy(squeeze(s):find(squeeze(output.printable(want.text)), 1, true), s)
    end)

    it("samples only decodable ids at a high temperature", function()
        local name = start(GENERATE .. "--max-tokens 300 --ignore-eos --temperature 5 --seed 11 'Go on'")
        local s = wait_for(name, "[exit ")
        assert.is_truthy(s:find("[exit 0]", 1, true), s)
        assert.matches("decode 299 tokens", s)
        assert.is_nil(s:find("GLM53_ERR", 1, true))
    end)
end)

describe("glm53 chat in a terminal", function()
    it("streams replies, keeps the conversation, /reset forgets it, /exit leaves", function()
        local first = json_of("--max-tokens 30 bread")   -- the first turn's prompt is generate's
        local name = start(CHAT .. " --verbose --max-tokens 30")
        wait_for(name, "/help lists the commands")
        wait_for(name, "> ")
        type_line(name, "bread")
        local s = wait_for(name, "finish: stop (<|observation|>)]")
        assert.is_truthy(squeeze(s):find(squeeze(output.printable(first.text)), 1, true), s)
        local turn1 = s:match("%[prompt (%d+ tokens, %d+) from the cache")
        assert.are.equal(first.usage.prompt_tokens .. " tokens, 0", turn1)

        type_line(name, "/help")
        wait_for(name, "/reset         forget the conversation")
        type_line(name, "tell me more")
        s = wait_for(name, "[prompt ", 2)
        local p2, c2 = s:match("%[prompt %d+ tokens, %d+ from the cache.-%[prompt (%d+) tokens, (%d+) from the cache")
        assert.is_true(tonumber(p2) > first.usage.prompt_tokens)
        assert.are.equal(first.usage.prompt_tokens - 1, tonumber(c2))   -- the first prompt's cache, reused

        type_line(name, "/reset")
        wait_for(name, "(conversation cleared)")
        type_line(name, "bread")
        s = wait_for(name, "[prompt ", 3)
        local last = s:sub(s:find("(conversation cleared)", 1, true), -1)
        assert.matches("%[prompt " .. first.usage.prompt_tokens .. " tokens, 0 from the cache", last)
        assert.is_truthy(squeeze(last):find(squeeze(output.printable(first.text)), 1, true), last)

        type_line(name, "/exit")
        s = wait_for(name, "[exit ")
        assert.is_truthy(s:find("[exit 0]", 1, true), s)
        assert.is_nil(s:find("glm53 chat:", s:find("/help lists the commands", 1, true) + 30, true), s)
    end)

    it("leaves at the end of input (Ctrl-D)", function()
        local name = start(CHAT)
        wait_for(name, "> ")
        tmux("send-keys -t " .. name .. " C-d")
        local s = wait_for(name, "[exit ")
        assert.is_truthy(s:find("[exit 0]", 1, true), s)
    end)
end)
