#!/usr/bin/env luajit
-- scripts/tiny_scores.lua is `glm53 tiny-scores` (lua/glm53/cli/tiny_scores.lua, docs/cli.md), for the checks and docs that call it.
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
os.exit(require("glm53.cli.main").main({ "tiny-scores", unpack(arg) }))
