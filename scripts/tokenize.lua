#!/usr/bin/env luajit
-- scripts/tokenize.lua is `glm53 tokenize` (lua/glm53/cli/tokenize.lua, docs/cli.md), for the checks and docs that call it.
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
os.exit(require("glm53.cli.main").main({ "tokenize", unpack(arg) }))
