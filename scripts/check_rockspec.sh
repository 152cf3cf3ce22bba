#!/usr/bin/env bash
# Builds and installs glm53 with `luarocks make` into a scratch tree (offline: the rockspec has no remote
# dependencies), then, from outside the source tree, loads every module of lua/glm53/ from the installed tree
# (the sub-packages ffi/, engine/, generation/, chat/, util/, report/ included) and prints a checkpoint's tensor
# table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cd "$root"
modules=$(cd lua && find glm53 -name '*.lua' | sed -e 's/\.lua$//' -e 's#/init$##' -e 's#/#.#g' | sort | tr '\n' ' ')
luarocks --lua-version=5.1 make --tree="$tree" glm53-scm-1.rockspec >/dev/null
eval "$(luarocks --lua-version=5.1 path --tree="$tree")"
cd "$tree"
luajit -e 'local tree, modules = "'"$tree"'", "'"$modules"'"
for name in modules:gmatch("%S+") do
    local path = package.searchpath(name, package.path)
    assert(path and path:sub(1, #tree) == tree, name .. " is not installed in " .. tree)
    require(name)
end
local glm53 = require "glm53"
local ckpt = assert(glm53.checkpoint.open(arg and arg[1] or "'"$root"'/models/tiny"))
ckpt:print_tensors()
print("installed package: " .. glm53.version() .. ", " .. #ckpt:list() .. " tensors")'
