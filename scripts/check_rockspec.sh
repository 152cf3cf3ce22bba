#!/usr/bin/env bash
# Builds and installs glm53 with `luarocks make` into a scratch tree, offline: the dependencies lua-cjson and luv
# come from Debian packages (scripts/bootstrap.sh), which luarocks is told about as provided rocks when they load.
# Then, from outside the source tree, loads every module of lua/glm53/ from the installed tree (the sub-packages
# ffi/, engine/, generation/, chat/, cli/, util/, report/ included), prints a checkpoint's tensor table, and runs
# the installed `glm53` command: --help, and a short generation with the bundled model it installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
cd "$root"
modules=$(cd lua && find glm53 -name '*.lua' | sed -e 's/\.lua$//' -e 's#/init$##' -e 's#/#.#g' | sort | tr '\n' ' ')

# rocks_provided: the version of each dependency that is already there, as the system's Lua modules.
provided=$(luajit -e '
local out = {}
local ok, cjson = pcall(require, "cjson")
if ok then out[#out + 1] = string.format("[\"lua-cjson\"] = %q", (cjson._VERSION or "2.1.0") .. "-1") end
local ok2, uv = pcall(require, "luv")
if ok2 then out[#out + 1] = string.format("luv = %q", uv.version_string() .. "-1") end
print(table.concat(out, ", "))')
printf 'rocks_provided = { %s }\n' "$provided" >"$tree/provided.lua"
LUAROCKS_CONFIG="$tree/provided.lua" luarocks --lua-version=5.1 make --tree="$tree" glm53-scm-1.rockspec >/dev/null
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

# The installed command finds its own package and library (no LUA_PATH needed) and the bundled model.
test -x "$tree/bin/glm53"
env -u LUA_PATH -u LUA_CPATH "$tree/bin/glm53" --help | grep -q '^  generate '
env -u LUA_PATH -u LUA_CPATH "$tree/bin/glm53" generate --help | grep -q -- '--max-tokens'
out=$(env -u LUA_PATH -u LUA_CPATH "$tree/bin/glm53" generate --max-tokens 4 --json "Hello")
case "$out" in '{"ids": ['*) ;; *) echo "installed glm53 generate: unexpected output: $out" >&2; exit 1 ;; esac
echo "installed command: $tree/bin/glm53 --help and generate ok"
