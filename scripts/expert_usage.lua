#!/usr/bin/env luajit
-- scripts/expert_usage.lua is `glm53 expert-usage` (lua/glm53/cli/expert_usage.lua, docs/research.md).
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
os.exit(require("glm53.cli.main").main({ "expert-usage", unpack(arg) }))
