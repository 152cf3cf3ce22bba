#!/usr/bin/env luajit
-- scripts/mtp_depth.lua is `glm53 mtp-depth` (lua/glm53/cli/mtp_depth.lua, docs/cli.md), for the checks and docs that call it.
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
os.exit(require("glm53.cli.main").main({ "mtp-depth", unpack(arg) }))
