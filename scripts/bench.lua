#!/usr/bin/env luajit
-- scripts/bench.lua is `glm53 bench` (lua/glm53/cli/bench.lua, docs/cli.md), for the checks and docs that call it.
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
os.exit(require("glm53.cli.main").main({ "bench", unpack(arg) }))
