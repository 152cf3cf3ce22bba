#!/usr/bin/env luajit
-- scripts/generate.lua is `glm53 generate --ignore-eos` (lua/glm53/cli/generate.lua, docs/cli.md): the ids contract
-- that tests and benchmarks rely on, a fixed number of tokens (finish_reason "length", or "stop" for --stop-ids).
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
os.exit(require("glm53.cli.main").main({ "generate", "--ignore-eos", unpack(arg) }))
