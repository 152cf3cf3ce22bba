--[[
glm53.cli.main - the `glm53` command: one program, a subcommand per tool, in the manner of `vllm serve` and
llama-cli.

    $ bin/glm53 generate "Write a haiku about linear attention."
    $ bin/glm53 chat
    $ bin/glm53 --help

    local glm53_cli = require("glm53.cli.main")
    os.exit(glm53_cli.main({ "tokenize", "hello world" }))    -- what bin/glm53 does with its arguments

Each command is a module beside this one (glm53.cli.generate, glm53.cli.chat, ...) that glm53.util.cli runs: options checked
before anything loads, --help on every command, errors as one line "glm53 <command>: message" with status 2 for a
usage error and 1 for a runtime failure, a Lua traceback only with --debug. A command's module is loaded only
when it runs, so `glm53 --help` needs no C library. docs/cli.md documents every command.
]]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")   -- light: no C library until a command loads a model

local M = {}

M.program = {
    prog = "glm53",
    usage = "glm53 [--debug] COMMAND [options]",
    summary = "glm53: inference for GLM-5.3-Flash (C core, CPU and CUDA backends) driven from LuaJIT.",
    commands = {
        { name = "generate", module = "glm53.cli.generate",
          summary = "generate text from a prompt (chat template, or --raw, or --tokens), streamed" },
        { name = "chat", module = "glm53.cli.chat",
          summary = "an interactive chat: the conversation, streamed replies, /image, /reset" },
        { name = "logits", module = "glm53.cli.logits",
          summary = "the logits at every position of a token sequence, as .npy" },
        { name = "tokenize", module = "glm53.cli.tokenize", summary = "text to token ids and back" },
        { name = "bench", module = "glm53.cli.bench",
          summary = "prefill and decode speed against the hardware floor" },
        { name = "mtp-depth", module = "glm53.cli.mtp_depth",
          summary = "sweep the MTP draft depth K: acceptance, speed-up, an HTML report" },
        { name = "expert-usage", module = "glm53.cli.expert_usage",
          summary = "routed experts per MoE layer and selection distances per sparse layer, per task family" },
        { name = "tiny-scores", module = "glm53.cli.tiny_scores",
          summary = "the tiny model's held-out scores: five task families on the CPU, accuracy with intervals" },
        { name = "lua", module = "glm53.cli.lua", summary = "run a Lua file with the glm53 package on the path" },
    },
    epilog = "--model defaults to the bundled models/" .. common.BUNDLED_MODEL .. " (README.md says what it is).",
    version = function() return require("glm53").version() end,
}

-- Runs the glm53 command with the arguments argv (a Lua array); returns the exit status.
function M.main(argv)
    return cli.dispatch(argv or {}, M.program)
end

return M
