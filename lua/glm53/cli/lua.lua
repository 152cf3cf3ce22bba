--[[
glm53.cli.lua - `glm53 lua FILE [ARGS...]`: runs a Lua file under LuaJIT with the glm53 package on the path.

    $ cat example.lua
    local glm53 = require "glm53"
    print(glm53.version())
    $ bin/glm53 lua example.lua           # from a checkout: lua/ on package.path, build/libglm53.so found

What bin/glm53 sets up for itself (package.path, and package.cpath in a luarocks tree) holds for FILE too, and FILE
sees its arguments in `arg` (arg[0] = FILE) and `...`, as under `luajit FILE ARGS`. An error in FILE prints one
line "glm53 lua: FILE:LINE: message" (the traceback with --debug) and gives status 1; os.exit in FILE exits as
usual. Options go before FILE; everything after it is FILE's.
]]
local cli = require("glm53.util.cli")

local M = {
    prog = "glm53 lua",
    usage = "glm53 lua [--debug] FILE [ARGS...]",
    summary = "Runs a Lua file with the glm53 package on the path (require \"glm53\" works as in the README).",
    args = { { "file", metavar = "FILE" }, { "script_args", rest = true, optional = true } },
    keep_location = true,   -- the file:line of an error is the user's own code
}

function M.run(args)
    local chunk, err = loadfile(args.file)
    if not chunk then cli.fail(err) end
    local script_arg = { [0] = args.file }
    for i, a in ipairs(args.script_args) do script_arg[i] = a end
    _G.arg = script_arg
    chunk(unpack(args.script_args))
    return true
end

return M
