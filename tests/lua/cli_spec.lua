-- The glm53 command line: the one argument parser (glm53.util.cli), the program and its subcommands run as a
-- user runs them (bin/glm53 in a subprocess), their error rules (one line "glm53 <cmd>: message", status 2 for a
-- usage error, 1 for a runtime failure, a traceback only with --debug), and the scripts the issue named. The
-- terminal side (streaming into a pty, the chat REPL under tmux) is tests/lua/cli_pty_spec.lua.
local cjson = require("cjson")
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")
local npy = require("glm53.util.npy")
local output = require("glm53.cli.output")
local tokenizer = require("glm53.engine.tokenizer")
local h = require("spec_helpers")

local GLM53 = "bin/glm53 "
-- The commands on models/tiny, the random-weight 4-layer test model: small and fast, and the expectations below
-- (vocabulary 804, end token 777, image placeholder 802) are its. The default --model is models/glm53-tiny
-- ("the bundled model" below checks that).
local GENERATE = GLM53 .. "generate --model models/tiny "
local CHAT = GLM53 .. "chat --model models/tiny "
local LOGITS = GLM53 .. "logits --model models/tiny "
local TOKENIZE = GLM53 .. "tokenize --model models/tiny "
local BENCH = GLM53 .. "bench --model models/tiny "
local TINY_TOK = "models/tiny/tokenizer.json"
local IMAGE = "tests/fixtures/vision/images/aligned_rgb.png"

-- Output (stdout and stderr together) and exit status of a command line; stdout alone.
local run, stdout_of = h.run, h.stdout_of

-- The output without the "rc=N" line h.run appends.
local function text_of(out) return (out:gsub("rc=%d+%s*$", "")) end

local function lines(s)
    local t = {}
    for l in text_of(s):gmatch("[^\n]+") do t[#t + 1] = l end
    return t
end

-- The JSON object of a --json run.
local function json_of(out)
    local obj = out:match("(%b{})%s*rc=%d+%s*$")
    assert(obj, "no JSON object in: " .. out)
    return cjson.decode(obj)
end

-- Asserts a failure printed as exactly one line "glm53 <cmd>: ..." with the status expected.
local function assert_one_line(out, rc, want_rc, prefix, pattern)
    assert.are.equal(want_rc, rc, out)
    local ls = lines(out)
    assert.are.equal(1, #ls, "not one line: " .. out)
    assert.are.equal(prefix, ls[1]:sub(1, #prefix), out)
    if pattern then assert.matches(pattern, ls[1]) end
    assert.is_nil(out:find("stack traceback", 1, true))
end

-- text as glm53.cli.output writes reasoning off a terminal: "| " before every line, a newline at the end.
local function quoted(text)
    local out = {}
    for line, nl in text:gmatch("([^\n]*)(\n?)") do
        if line ~= "" or nl ~= "" then out[#out + 1] = "| " .. line .. nl end
    end
    local s = table.concat(out)
    return s:sub(-1) == "\n" and s or s .. "\n"
end

local tmp, no_vision
setup(function()
    tmp = h.tmpdir()
    -- models/tiny without its vision tower: the config without vision_config (the tower's tensors are then unused)
    no_vision = tmp .. "/no_vision"
    os.execute("mkdir -p " .. no_vision)
    local config = cjson.decode((assert(file.read_file("models/tiny/config.json"))))
    config.vision_config = nil
    assert(file.write_file(no_vision .. "/config.json", cjson.encode(config)))
    for _, f in ipairs({ "model.safetensors", "tokenizer.json" }) do
        os.execute(string.format("ln -sf '%s/models/tiny/%s' '%s/%s'", os.getenv("PWD"), f, no_vision, f))
    end
end)
teardown(function() os.execute("rm -rf '" .. tmp .. "'") end)

---------------------------------------------------------------------------------------------------------------
describe("glm53.util.cli", function()
    local command = {
        prog = "t",
        usage = "t [options] [NAME]",
        options = {
            "Group:",
            { "temperature", type = "number", min = 0 },
            { "top_p", type = "number", gt = 0, max = 1, default = 1 },
            { "max_tokens", type = "integer", min = 1, default = 16 },
            { "device", default = "cpu", choices = { "cpu", "cuda" } },
            { "json", flag = true },
            { "image", list = true },
            { "tokens", type = "ids" },
            { "model", required = true },
        },
        args = { { "name", optional = true } },
    }

    it("parses typed options, flags, lists, --x=y, -- and positionals, with defaults", function()
        local a = assert(cli.parse({ "--model", "m", "--temperature", "0.5", "--top-p=0.9", "--json", "--image", "a",
                                     "--image", "b", "--tokens", "1,2, 3", "--", "--name-like" }, command))
        assert.are.equal("m", a.model)
        assert.are.equal(0.5, a.temperature)
        assert.are.equal(0.9, a.top_p)
        assert.are.equal(16, a.max_tokens)
        assert.are.equal("cpu", a.device)
        assert.is_true(a.json)
        assert.are.same({ "a", "b" }, a.image)
        assert.are.same({ 1, 2, 3 }, a.tokens)
        assert.are.equal("--name-like", a.name)
        a = assert(cli.parse({ "--model", "m", "-" }, command))
        assert.are.equal("-", a.name)
        assert.is_false(a.json)
        assert.are.same({}, a.image)
        assert.is_true(assert(cli.parse({ "-h" }, command)).help)   -- help wins over missing options
    end)

    it("refuses bad values with one clear message", function()
        local cases = {
            { { "--temperature", "-1" }, "--temperature must be >= 0, got -1" },
            { { "--temperature", "hot" }, "--temperature needs a number, got 'hot'" },
            { { "--max-tokens", "1.5" }, "--max-tokens needs an integer, got 1.5" },
            { { "--max-tokens", "0" }, "--max-tokens must be >= 1, got 0" },
            { { "--top-p", "0" }, "--top-p must be in (0, 1], got 0" },
            { { "--top-p", "1.5" }, "--top-p must be in (0, 1], got 1.5" },
            { { "--device", "tpu" }, "--device must be one of cpu, cuda, got 'tpu'" },
            { { "--tokens", "1,x" }, "--tokens: 'x' is not a token id" },
            { { "--json=1" }, "--json takes no value" },
            { { "--temperature" }, "--temperature needs a value" },
            { { "--bogus" }, "unknown option --bogus" },
            { { "-x" }, "unknown option -x" },
            { { "a", "b" }, "unexpected argument 'b' (quote a value that has spaces)" },
            { {}, "--model is required" },
        }
        for _, c in ipairs(cases) do
            local argv = c[1]
            if c[2] ~= "--model is required" then table.insert(argv, 1, "m") table.insert(argv, 1, "--model") end
            local a, err = cli.parse(argv, command)
            assert.is_nil(a, c[2])
            assert.are.equal(c[2], err)
        end
    end)

    it("writes a help with every option, its type, range and default", function()
        local text = cli.help(command)
        assert.matches("^usage: t %[options%] %[NAME%]", text)
        assert.matches("Group:\n", text)
        assert.matches("%-%-top%-p X%s+in %(0, 1%]; default 1", text)
        assert.matches("%-%-device cpu|cuda%s+default cpu", text)
        assert.matches("%-%-image VALUE%s+repeatable", text)
        assert.matches("%-%-debug", text)
    end)

    it("turns errors raised in a command into one line, and usage errors into status 2", function()
        local function status(fn)
            local err_file = tmp .. "/stderr"
            local saved = io.stderr
            io.stderr = assert(io.open(err_file, "w"))
            local rc = cli.run({ prog = "t", run = fn }, {})
            io.stderr:close()
            io.stderr = saved
            return rc, assert(file.read_file(err_file))
        end
        assert.are.same({ 0, "" }, { status(function() return true end) })
        assert.are.same({ 1, "t: went wrong\n" }, { status(function() return nil, "went wrong" end) })
        assert.are.same({ 1, "t: failed\n" }, { status(function() cli.fail("failed") end) })
        assert.are.same({ 2, "t: bad usage\n" }, { status(function() cli.usage_error("bad usage") end) })
        assert.are.same({ 1, "t: sampler: option 'x' must be a number\n" },
                        { status(function() error("lua/glm53/engine/sampler.lua:42: sampler: option 'x' must be a number", 0) end) })
        assert.are.same({ 1, "t: attempt to index local 'x' (a nil value)\n" }, { status(function() local x; return x.y end) })
        assert.are.same({ 3, "" }, { status(function() return 3 end) })
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 (the program)", function()
    local COMMANDS = { "generate", "chat", "logits", "tokenize", "bench", "mtp-depth", "expert-usage", "tiny-scores", "lua" }

    it("--help lists exactly the commands that exist", function()
        local out, rc = run(GLM53 .. "--help")
        assert.are.equal(0, rc, out)
        local names = {}
        for name in out:match("\ncommands:\n(.-)\n\n"):gmatch("  ([%w%-]+)%s%s+") do names[#names + 1] = name end
        assert.are.same(COMMANDS, names)
        assert.is_nil(out:find("serve", 1, true))
        assert.is_nil(out:find("\n  eval", 1, true))
    end)

    it("gives every command a --help, and refuses unknown commands and options with status 2", function()
        for _, name in ipairs(COMMANDS) do
            local out, rc = run(GLM53 .. name .. " --help")
            assert.are.equal(0, rc, out)
            assert.matches("^usage: glm53 " .. name:gsub("%-", "%%-"), out)
            assert.matches("%-%-help", out)
        end
        assert_one_line(run(GLM53 .. "serve"), select(2, run(GLM53 .. "serve")), 2, "glm53: unknown command 'serve'")
        local out, rc = run(GLM53 .. "--bogus")
        assert_one_line(out, rc, 2, "glm53: unknown option --bogus")
        out, rc = run(GLM53)
        assert.are.equal(2, rc)
        assert.matches("^usage: glm53", out)
        out, rc = run(GLM53 .. "--version")
        assert.are.equal(0, rc)
        assert.matches("^glm53 %d+%.%d+%.%d+", out)
    end)

    it("refuses --temperature -1, --top-k -5, --max-tokens 1.5 with one line and status 2", function()
        for _, bad in ipairs({ "--temperature -1", "--top-k -5", "--max-tokens 1.5", "--top-p 0", "--seed -1",
                               "--device tpu", "--spec-k 1.5" }) do
            for _, cmd in ipairs({ "generate", "chat" }) do
                local out, rc = run(GLM53 .. cmd .. " " .. bad .. " hello")
                assert_one_line(out, rc, 2, "glm53 " .. cmd .. ": " .. bad:match("^%S+"))
            end
        end
    end)

    it("defaults --model to the bundled trained model, models/glm53-tiny (models/tiny only when named)", function()
        local common = require("glm53.cli.common")
        assert.are.equal("glm53-tiny", common.BUNDLED_MODEL)
        assert.matches("models/glm53%-tiny$", assert(common.bundled_model()))
        assert.matches("/models/glm53%-tiny$", require("glm53.server").DEFAULT_MODEL)
        assert.matches("/models/glm53%-tiny$", require("glm53.eval.runner").DEFAULT_MODEL)
        assert.matches("default: the bundled models/glm53%-tiny", (run(GLM53 .. "generate --help")))
        -- what the commands load without --model: glm53-tiny's tokenizer (2292 ids) and checkpoint
        local tok = assert(tokenizer.load("models/glm53-tiny/tokenizer.json"))
        local out, rc = run(GLM53 .. "tokenize 'Hello, world!'")
        assert.are.equal(0, rc, out)
        assert.are.equal(table.concat(assert(tok:encode("Hello, world!")), ",") .. "\n", text_of(out))
        local policy = tmp .. "/bad_policy_default.lua"
        assert(file.write_file(policy, "return function() return function() return -1 end end\n"))
        out, rc = run(GLM53 .. "generate --policy " .. policy .. " --max-tokens 3 hello")
        assert_one_line(out, rc, 1, "glm53 generate: sampler: the policy returned -1, not a token id in [0, 2292)")
    end)

    it("reports runtime failures as one line with status 1, the traceback only with --debug", function()
        local out, rc = run(GLM53 .. "generate --model /nonexistent hello")
        assert_one_line(out, rc, 1, "glm53 generate: /nonexistent: not a checkpoint directory")
        out, rc = run(GLM53 .. "generate --spec-k 2 --tokens 1,2,3 --model tests/fixtures/tiny-f32")
        assert_one_line(out, rc, 1, "glm53 generate: GLM53_ERR_UNSUPPORTED: speculative decoding with k = 2")
        -- A library argument error (it raises): a policy that returns an id outside the vocabulary.
        local policy = tmp .. "/bad_policy.lua"
        assert(file.write_file(policy, "return function() return function() return -1 end end\n"))
        out, rc = run(GENERATE .. "--policy " .. policy .. " --max-tokens 3 hello")
        assert_one_line(out, rc, 1, "glm53 generate: sampler: the policy returned -1, not a token id in [0, 804)")
        out, rc = run(GENERATE .. "--debug --policy " .. policy .. " --max-tokens 3 hello")
        assert.are.equal(1, rc)
        assert.matches("stack traceback", out)
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 generate", function()
    local tok = assert(tokenizer.load(TINY_TOK))
    local n_vocab = tok:n_vocab()

    it("renders the chat template, streams text, and ends with the JSON fields the tests read", function()
        local out, rc = run(GENERATE .. "--max-tokens 12 --json 'Hello there'")
        assert.are.equal(0, rc, out)
        assert.matches('^{"ids": %[', text_of(out))
        local r = json_of(out)
        assert.are.equal(12, #r.ids)
        assert.are.equal("length", r.finish_reason)
        assert.are.equal(tok:decode(r.ids, { skip_special_tokens = true }), r.text)
        assert.are.equal(r.text, r.reasoning)   -- no </think> from a random model: all of it is reasoning
        local prompt = assert(tok:encode("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hello there<|assistant|><think>"))
        assert.are.same({ #prompt, 12, #prompt + 12 }, { r.usage.prompt_tokens, r.usage.completion_tokens,
                                                         r.usage.total_tokens })
        for _, key in ipairs({ "load_s", "prefill_s", "decode_s" }) do assert.is_number(r.timings[key]) end
        for _, key in ipairs({ "prefill_tok_s", "decode_tok_s" }) do assert.is_number(r[key]) end
        assert.are.same({ drafts = 0, draft_tokens = 0, accepted = 0, accepted_per_pos = {} }, r.spec)
        -- the same text streamed (not a terminal: reasoning lines prefixed "| "), the statistics on stderr
        local streamed = stdout_of(GENERATE .. "--max-tokens 12 'Hello there' 2>/dev/null")
        assert.are.equal(quoted(r.text), streamed)
        out = stdout_of(GENERATE .. "--max-tokens 12 'Hello there' 2>&1 >/dev/null")
        assert.matches("^prefill %d+ tokens: [%d.]+ tok/s; decode 11 tokens: [%d.]+ tok/s; finish: length", out)
        -- --reasoning raw: the text as it is
        local raw = stdout_of(GENERATE .. "--max-tokens 12 --reasoning raw 'Hello there' 2>/dev/null")
        assert.are.equal(r.text:sub(-1) == "\n" and r.text or r.text .. "\n", raw)
    end)

    it("--capture adds each generated token's routed experts and attended positions to --json", function()
        local prompt = { 5, 77, 301, 12 }
        local r = json_of(run(GENERATE .. "--tokens 5,77,301,12 --max-tokens 7 --ignore-eos --spec-k 2 --json " ..
                              "--capture experts,selection"))
        local m = assert(require("glm53.engine.model").load("models/tiny", { threads = 1 }))
        local experts, selection = h.capture_reference(m, prompt, r.ids)
        m:free()
        assert.are.equal(7, #r.routed_experts)
        assert.are.same(experts, r.routed_experts)
        assert.are.same(selection, r.indexer_topk)
        local out, rc = run(GENERATE .. "--tokens 1,2 --capture experts")
        assert_one_line(out, rc, 2, "glm53 generate:", "%-%-capture needs %-%-json")
    end)

    it("takes the prompt from the argument, --file, stdin (-), or --tokens, and --raw skips the template", function()
        local a = json_of(run(GENERATE .. "--max-tokens 6 --json 'Tell me'"))
        local f = tmp .. "/prompt.txt"
        assert(file.write_file(f, "Tell me"))
        local b = json_of(run(GENERATE .. "--max-tokens 6 --json --file " .. f))
        local c = json_of(run("printf 'Tell me' | " .. GENERATE .. "--max-tokens 6 --json -"))
        assert.are.same(a.ids, b.ids)
        assert.are.same(a.ids, c.ids)
        local raw = json_of(run(GENERATE .. "--max-tokens 6 --json --raw 'Tell me'"))
        assert.are.equal(#assert(tok:encode("Tell me")), raw.usage.prompt_tokens)
        assert.is_nil(raw.reasoning)   -- not a chat prompt: nothing to parse
        local ids = table.concat(assert(tok:encode("Tell me")), ",")
        local t = json_of(run(GENERATE .. "--max-tokens 6 --json --tokens " .. ids))
        assert.are.same(raw.ids, t.ids)
        local out, rc = run(GENERATE .. "--max-tokens 6")
        assert_one_line(out, rc, 2, "glm53 generate: give a PROMPT")
        out, rc = run(GENERATE .. "--tokens 1 --raw")
        assert_one_line(out, rc, 2, "glm53 generate: --tokens is the prompt as it is")
        out, rc = run(GENERATE .. "--tokens 1,99999")
        assert_one_line(out, rc, 2, "glm53 generate: --tokens: 99999 is not an id of this model")
    end)

    it("prints ids for a checkpoint without a tokenizer", function()
        local out, rc = run(GLM53 .. "generate --model tests/fixtures/tiny-f32 --tokens 1,2,3 --max-tokens 5 --quiet")
        assert.are.equal(0, rc, out)
        assert.matches("^%d+ %d+ %d+ %d+ %d+ \n", text_of(out))
    end)

    it("never emits an id the tokenizer cannot decode, at any temperature", function()
        for _, args in ipairs({ "--temperature 5 --seed 3", "--temperature 5 --seed 3 --spec-k 2", "" }) do
            local r = json_of(run(GENERATE .. "--ignore-eos --max-tokens 150 --json " .. args .. " 'Go on'"))
            assert.are.equal(150, #r.ids)
            for _, id in ipairs(r.ids) do assert.is_true(id < n_vocab, "id " .. id .. " with " .. args) end
            assert.is_string(r.text)
        end
    end)

    it("stops at the model's end tokens: the tokenizer's GLM end tokens here, generation_config.json's first", function()
        -- models/tiny names none in its files; greedy from "bread" ends with <|observation|> after 8 tokens
        local r = json_of(run(GENERATE .. "--max-tokens 50 --json bread"))
        assert.are.equal("stop", r.finish_reason)
        assert.are.equal("<|observation|>", r.stop)
        assert.are.equal(777, r.ids[#r.ids])
        assert.is_true(#r.ids < 50)
        assert.is_nil(r.text:find("observation", 1, true))
        local all = json_of(run(GENERATE .. "--max-tokens 50 --json --ignore-eos bread"))
        assert.are.equal(50, #all.ids)
        assert.are.same(r.ids, { unpack(all.ids, 1, #r.ids) })
        -- a checkpoint whose generation_config.json names an end token: the 4th token of the run above
        local dir = tmp .. "/eos_model"
        os.execute("mkdir -p " .. dir)
        for _, f in ipairs({ "config.json", "model.safetensors", "tokenizer.json" }) do
            os.execute(string.format("ln -sf '%s/models/tiny/%s' '%s/%s'", os.getenv("PWD"), f, dir, f))
        end
        local eos = all.ids[4]
        assert(file.write_file(dir .. "/generation_config.json", cjson.encode({ eos_token_id = { eos } })))
        local e = json_of(run(GLM53 .. "generate --model " .. dir .. " --max-tokens 50 --json bread"))
        assert.are.equal("stop", e.finish_reason)
        local first = 1
        while all.ids[first] ~= eos do first = first + 1 end
        assert.are.same({ unpack(all.ids, 1, first) }, e.ids)
        -- --stop-ids adds ids; --stop ends at a string, which is not printed
        local s = json_of(run(GENERATE .. "--ignore-eos --max-tokens 50 --json --stop-ids " .. all.ids[3] .. " bread"))
        assert.are.same({ unpack(all.ids, 1, 3) }, s.ids)
        local text = all.text
        local cut = text:sub(6, 8)
        local st = json_of(run(GENERATE .. "--ignore-eos --max-tokens 50 --json --stop '" .. cut .. "' bread"))
        assert.are.equal("stop", st.finish_reason)
        assert.are.equal(cut, st.stop)
        assert.are.equal(text:sub(1, text:find(cut, 1, true) - 1), st.text)
    end)

    it("--spec-k gives the same greedy text, and --image feeds a picture to a vision model", function()
        local a = json_of(run(GENERATE .. "--ignore-eos --max-tokens 20 --json 'Say it'"))
        local b = json_of(run(GENERATE .. "--ignore-eos --max-tokens 20 --json --spec-k 3 'Say it'"))
        assert.are.same(a.ids, b.ids)
        assert.is_true(b.spec.drafts > 0)
        local img = json_of(run(GENERATE .. "--ignore-eos --max-tokens 8 --json --image " .. IMAGE .. " 'What is it?'"))
        assert.is_true(img.usage.prompt_tokens > a.usage.prompt_tokens + 4)   -- the image's tokens
        local out, rc = run(GENERATE .. "--image /tmp hello")
        assert_one_line(out, rc, 1, "glm53 generate: --image /tmp: Is a directory")
        out, rc = run(GENERATE .. "--image " .. tmp .. "/missing.png hello")
        assert_one_line(out, rc, 1, "glm53 generate: --image " .. tmp .. "/missing.png: No such file or directory")
        out, rc = run(GLM53 .. "generate --model " .. no_vision .. " --image " .. IMAGE .. " hello")
        assert_one_line(out, rc, 1, "glm53 generate: " .. no_vision .. " has no vision tower")
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 chat (input from a pipe)", function()
    it("keeps the conversation, reuses the cache, /reset forgets it, /exit leaves", function()
        local script = "hello there\nhow are you\n/reset\nhello there\n/exit\nnever read\n"
        local out, rc = run("printf '" .. script .. "' | " .. CHAT .. "--verbose --max-tokens 10 --reasoning raw")
        assert.are.equal(0, rc, out)
        local stats = {}
        for p, c, n in out:gmatch("%[prompt (%d+) tokens, (%d+) from the cache; reply (%d+) tokens") do
            stats[#stats + 1] = { tonumber(p), tonumber(c), tonumber(n) }
        end
        assert.are.equal(3, #stats, out)
        assert.are.equal(0, stats[1][2])
        assert.are.equal(stats[1][1] - 1, stats[2][2])   -- turn 2 computes only the reply and the new message
        assert.is_true(stats[2][1] > stats[1][1] + stats[1][3])
        assert.are.same(stats[1], stats[3])              -- after /reset: the first turn again
        assert.matches("%(conversation cleared%)", out)
        -- the replies (stdout) of turns 1 and 3 are the same text
        local replies = stdout_of("printf '" .. script .. "' | " .. CHAT .. "--max-tokens 10 --reasoning raw 2>/dev/null")
        local r = {}
        for l in replies:gmatch("([^\n]*)\n") do r[#r + 1] = l end
        assert.are.equal(3, #r, replies)
        assert.are.equal(r[1], r[3])
        assert.are_not.equal(r[1], r[2])
    end)

    it("stops a reply at the model's end token, and answers /image and unknown commands with one line", function()
        local out, rc = run("printf 'bread\\n/image /tmp\\n/bogus\\n/help\\n' | " .. CHAT .. "--verbose")
        assert.are.equal(0, rc, out)
        assert.matches("finish: stop %(<|observation|>%)", out)
        assert.matches("\nglm53 chat: /image /tmp: Is a directory\n", out)
        assert.matches("\nunknown command /bogus %(/help lists them%)\n", out)
        assert.matches("/reset%s+forget the conversation", out)
        out, rc = run("printf '/image " .. IMAGE .. "\\nwhat is it\\n' | " .. CHAT .. "--verbose --max-tokens 4")
        assert.are.equal(0, rc, out)
        assert.matches("%(image " .. IMAGE:gsub("%p", "%%%0") .. " attached to the next message: %d+ tokens%)", out)
        assert.matches("%[prompt %d+ tokens", out)
        out = run("printf '/image " .. IMAGE .. "\\n' | " .. GLM53 .. "chat --model " .. no_vision)
        assert.is_truthy(out:find("glm53 chat: " .. no_vision .. " has no vision tower: /image needs a vision model",
                                  1, true), out)
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 logits", function()
    local function ids_file(name, ids)
        local path = tmp .. "/" .. name .. ".npy"
        local buf = require("ffi").new("int32_t[?]", #ids, ids)
        assert(npy.write(path, "<i4", { #ids }, buf))
        return path
    end

    it("writes float32 [T, vocab]; placeholders without --image, and bad --image paths, are one-line errors", function()
        local plain = ids_file("plain", { 770, 772, 5, 6 })
        local out_path = tmp .. "/logits.npy"
        local out, rc = run(LOGITS .. "--tokens " .. plain .. " --out " .. out_path)
        assert.are.equal(0, rc, out)
        assert.are.same({ 4, 832 }, assert(npy.read(out_path)).shape)
        local with_image = ids_file("image", { 770, 772, 778, 802, 802, 779, 5 })
        out, rc = run(LOGITS .. "--tokens " .. with_image .. " --out " .. out_path)
        assert_one_line(out, rc, 1, "glm53 logits: " .. with_image ..
                        " has 2 image placeholder tokens (id 802) but no --image or --video fills them")
        out, rc = run(LOGITS .. "--tokens " .. with_image .. " --out " .. out_path .. " --image /tmp")
        assert_one_line(out, rc, 1, "glm53 logits: --image /tmp: Is a directory")
        out, rc = run(LOGITS .. "--tokens " .. with_image .. " --out " .. out_path .. " --image " .. tmp .. "/no.png")
        assert_one_line(out, rc, 1, "glm53 logits: --image " .. tmp .. "/no.png: No such file or directory")
        out, rc = run(LOGITS .. "--tokens " .. plain .. " --out " .. out_path .. " --chunk 0")
        assert_one_line(out, rc, 2, "glm53 logits: --chunk must be >= 1, got 0")
        out, rc = run("luajit scripts/logits.lua --model models/tiny --tokens " .. with_image .. " --out " .. out_path)
        assert.are.equal(1, rc)
        assert.matches("image placeholder tokens", out)
    end)

    it("GLM53_CPU_ISA=avx2 gives the default build's logits bit for bit; baseline runs; a bad value is an error", function()
        local ids = {}
        for i = 1, 40 do ids[i] = (i * 37) % 700 + 1 end
        local plain = ids_file("isa", ids)
        local bytes = {}
        for _, isa in ipairs({ "", "avx2", "avx512", "baseline" }) do
            local out_path = tmp .. "/isa-" .. (isa == "" and "default" or isa) .. ".npy"
            local out, rc = run("GLM53_CPU_ISA=" .. isa .. " " .. LOGITS .. "--tokens " .. plain .. " --out " .. out_path ..
                                " --mode chunked --chunk 7")
            assert.are.equal(0, rc, out)
            bytes[isa] = assert(file.read_file(out_path))
        end
        assert.are.equal(bytes[""], bytes.avx2)       -- what a machine without AVX-512 computes, bit for bit
        assert.are.equal(bytes[""], bytes.avx512)
        assert.are.equal(#bytes[""], #bytes.baseline)   -- other roundings (no FMA), same shape: the variable is read
        assert.are_not.equal(bytes[""], bytes.baseline)
        local out, rc = run("GLM53_CPU_ISA=sse9 " .. LOGITS .. "--tokens " .. plain .. " --out " .. tmp .. "/isa-bad.npy")
        assert.are.equal(1, rc, out)
        assert.matches("GLM53_CPU_ISA is 'sse9': expected baseline, avx2 or avx512", out, 1, true)
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 tokenize", function()
    it("encodes text to comma-separated ids, decodes them back, and lists pieces", function()
        local tok = assert(tokenizer.load(TINY_TOK))
        local out, rc = run(TOKENIZE .. "'Hello, world!'")
        assert.are.equal(0, rc, out)
        local want = table.concat(assert(tok:encode("Hello, world!")), ",")
        assert.are.equal(want .. "\n", text_of(out))
        out = run(TOKENIZE .. "--decode " .. want)
        assert.are.equal("Hello, world!\n", text_of(out))
        out = run(TOKENIZE .. "--pieces Hi")
        assert.matches("^%d+\t\"", text_of(out))
        out = run("printf 'Hello, world!' | " .. TOKENIZE .. "-")
        assert.are.equal(want .. "\n", text_of(out))
        local o, r = run(TOKENIZE)
        assert_one_line(o, r, 2, "glm53 tokenize: give TEXT")
        o, r = run(TOKENIZE .. "--input x.json")
        assert_one_line(o, r, 2, "glm53 tokenize: --input and --out come together")
        o, r = run(GLM53 .. "tokenize --tokenizer /nonexistent.json hi")
        assert_one_line(o, r, 1, "glm53 tokenize: /nonexistent.json")
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 bench", function()
    it("runs on the CPU by default, with no floor unless the hardware figures are given", function()
        local out, rc = run(BENCH .. "--prompt 8 --decode 2 --repeat 1")
        assert.are.equal(0, rc, out)
        assert.matches("floor: n/a %(no hardware figures for cpu", out)
        assert.matches("decode %(per token%)%s+[%d.]+ ms%s+n/a", out)
        out, rc = run(BENCH .. "--prompt 8 --decode 2 --repeat 1 --bandwidth 2e10 --flops 1e11")
        assert.are.equal(0, rc, out)
        assert.matches("floor: given on the command line", out)
        assert.matches("decode %(per token%)%s+[%d.]+ ms%s+[%d.]+ ms%s+[%d.]+%s+[%d.]+", out)
        out = run(GLM53 .. "bench --help")
        assert.matches("%-%-device cpu|cuda%s+default cpu", out)
        assert.matches("H200", out)
    end)

    it("breaks the floor into parts, and the batched floor counts the union of experts the rows were routed to", function()
        -- models/tiny: top 2 of 8 experts, 3 MoE layers
        local out, rc = run(GLM53 .. "bench --model models/tiny --prompt 8 --decode 3 --repeat 1 --bandwidth 2e10 " ..
                            "--batch 1,3")
        assert.are.equal(0, rc, out)
        local read = tonumber(out:match("([%d.]+) MB read per decode token"))
        local sum, parts = 0, 0
        local table_text = out:match("floor of a decode step, 1 row at context 8.-\n(.-)  total")
        assert.is_truthy(table_text, out)
        for mb in table_text:gmatch("  [^\n]-%s+([%d.]+) MB%s+[%d.]+ ms") do sum, parts = sum + tonumber(mb), parts + 1 end
        assert.are.equal(9, parts, out)
        assert.is_true(math.abs(sum - read) <= 0.01 * parts, out)   -- each part printed to 0.01 MB
        local total = tonumber(out:match("  total%s+([%d.]+) MB"))
        assert.are.equal(read, total, out)
        local one = tonumber(out:match("\n1%s+[%d.]+ ms%s+[%d.]+ ms%s+%d+%s+[%d.]+x%s+([%d.]+)"))
        local three = tonumber(out:match("\n3%s+[%d.]+ ms%s+[%d.]+ ms%s+%d+%s+[%d.]+x%s+([%d.]+)"))
        assert.are.equal(2, one, out)                     -- one row reads its top 2
        assert.is_true(three >= 2 and three <= 6, out)   -- three rows: a union of 2 to 6 of the 8
        assert.matches("\n3 .- ([%d.]+) ms%s+[%d.]+\n", out)   -- its floor and ratio
    end)

    it("--spec-k times speculative decoding at forced acceptance: K + 1 tokens a round, or one", function()
        local out, rc = run(GLM53 .. "bench --model models/glm53-tiny --prompt 8 --decode 7 --repeat 1 --spec-k 0,2 " ..
                            "--accept all,none,real")
        assert.are.equal(0, rc, out)
        assert.matches("speculative decoding, one greedy stream after a 8%-token prompt, 7 tokens", out)
        assert.matches("\n0%s+%-%s+7%s+[%d.]+ ms%s+1%.00%s+[%d.]+%s+1%.00x", out)
        assert.matches("\n2%s+all%s+3%s+[%d.]+ ms%s+2%.33%s", out)    -- 3 + 3 + 1 tokens
        assert.matches("\n2%s+none%s+7%s+[%d.]+ ms%s+1%.00%s", out)
        assert.matches("\n2%s+real%s+%d+%s+[%d.]+ ms", out)
        out, rc = run(GLM53 .. "bench --model models/glm53-tiny --prompt 8 --decode 2 --repeat 1 --spec-k 1 --accept most")
        assert.are_not.equal(0, rc)
        assert.matches("%-%-accept: a comma%-separated list of all, none, real", out)
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53 lua, and the README's Lua example", function()
    it("runs the README's example as written, with bin/glm53 lua and with the LUA_PATH the README gives", function()
        local readme = assert(file.read_file("README.md"))
        local code = readme:match("## Using it from Lua.-```lua\n(.-)```")
        assert.is_string(code, "no Lua example in the README")
        local path = tmp .. "/example.lua"
        assert(file.write_file(path, code))
        local out, rc = run(GLM53 .. "lua " .. path)
        assert.are.equal(0, rc, out)
        local expected = text_of(out)
        assert.is_true(#expected > 0)
        local lua_path = readme:match('LUA_PATH="([^"]+)"')
        assert.is_string(lua_path, "the README names no LUA_PATH")
        out, rc = run("LUA_PATH=\"" .. lua_path:gsub("%$PWD", os.getenv("PWD")) .. "\" luajit " .. path)
        assert.are.equal(0, rc, out)
        assert.are.equal(expected, text_of(out))
        -- FILE's arguments, and its errors with FILE:LINE
        assert(file.write_file(path, "print(select('#', ...), arg[0], arg[2])\nerror('boom')\n"))
        out, rc = run(GLM53 .. "lua " .. path .. " a --b")
        assert.are.equal(1, rc)
        assert.matches("^2\t" .. path:gsub("%p", "%%%0") .. "\t%-%-b\nglm53 lua: " .. path:gsub("%p", "%%%0") ..
                       ":2: boom\n", text_of(out))
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("the scripts", function()
    it("print --help without a traceback, from the checkout and from scripts/", function()
        for _, where in ipairs({ { ".", "scripts/" }, { "scripts", "" } }) do
            for _, s in ipairs({ "tokenize", "bench_tokenizer", "train_tiny_tokenizer", "vision_inputs", "generate",
                                 "logits", "bench", "mtp_depth" }) do
                local out, rc = run("cd " .. where[1] .. " && luajit " .. where[2] .. s .. ".lua --help")
                assert.are.equal(0, rc, s .. ": " .. out)
                assert.matches("^usage: ", out)
                assert.is_nil(out:find("stack traceback", 1, true), s)
            end
        end
        local out, rc = run("cd scripts && luajit tokenize.lua --tokenizer ../" .. TINY_TOK .. " hello")
        assert.are.equal(0, rc, out)
        out, rc = run("cd scripts && luajit bench_tokenizer.lua --repeat x")
        assert.are.equal(2, rc)
        assert.matches("^bench_tokenizer.lua: %-%-repeat needs a number", out)
    end)

    it("scripts/generate.lua keeps the fixed-length ids contract (generate --ignore-eos)", function()
        local r = json_of(run("luajit scripts/generate.lua --model models/tiny --tokens 1,2,3 --max-tokens 40 --json"))
        assert.are.equal(40, #r.ids)
        local r2 = json_of(run("luajit scripts/generate.lua --model models/tiny --raw --max-tokens 50 --json bread"))
        assert.are.equal(50, #r2.ids)
    end)
end)

---------------------------------------------------------------------------------------------------------------
describe("glm53.cli.output", function()
    local function render(deltas, opts)
        local path = tmp .. "/out.txt"
        local f = assert(io.open(path, "w"))
        opts.file = f
        local o = output.new(opts)
        for _, d in ipairs(deltas) do o:write(d) end
        local r = o:finish()
        f:close()
        return assert(file.read_file(path)), r
    end

    it("shows the reasoning apart from the answer, however the text is split", function()
        local deltas = { "Let me ", "think.\nYes.</th", "ink>\n\nThe answer", " is 4." }
        local text, r = render(deltas, { think = true, style = "plain" })
        assert.are.equal("| Let me think.\n| Yes.\n\nThe answer is 4.\n", text)
        assert.are.equal("Let me think.\nYes.", r.reasoning)
        assert.are.equal("\n\nThe answer is 4.", r.content)
        assert.are.equal(table.concat(deltas), r.text)
        text = render(deltas, { think = true, style = "color" })
        assert.are.equal("\27[2mLet me think.\nYes.\27[0m\nThe answer is 4.\n", text)
        text = render(deltas, { think = true, reasoning = "hide" })
        assert.are.equal("The answer is 4.\n", text)
        text = render(deltas, { think = true, reasoning = "raw" })
        assert.are.equal(table.concat(deltas) .. "\n", text)
        text = render(deltas, { think = false })   -- not a chat prompt: raw
        assert.are.equal(table.concat(deltas) .. "\n", text)
    end)

    it("makes control characters safe on a terminal and leaves the text alone otherwise", function()
        assert.are.equal("a\239\191\189b\n\tc\239\191\189", output.printable("a\27b\n\tc\r"))
        assert.are.equal("x\239\191\189y", output.printable("x\194\155y"))   -- C1 CSI
        local text, r = render({ "a\27[2Jb" }, { think = false, safe = true })
        assert.are.equal("a\239\191\189[2Jb\n", text)
        assert.are.equal("a\27[2Jb", r.text)
    end)
end)
