#!/usr/bin/env luajit
--[[
check_layers.lua - the C/CUDA layering rule, checked from the include lines (a test runs it; CI with it).

    luajit scripts/check_layers.lua [root]      prints every violation and exits 1, or "layers: N files, ok"

The layers, lowest first (docs/model.md has the picture):
    core/glm53.h   the public header
    core/base      errors, tensors, number formats, shared formatting
    core/io        safetensors, checkpoints, config.json          (on base)
    core/text      tokenizer, sampling                            (on base)
    core/media     image and video preprocessing                  (on base)
    kernels        the op table and workspace; kernels/cpu and kernels/cuda implement it (on base)
    core/engine    weights, model, caches, graph per block, step plan, step, worker (on everything above)
A file may include its own layer and the layers it stands on, nothing else: io, text, media and kernels do not
see each other, kernels/cpu and kernels/cuda do not see each other, nothing below the engine sees the engine.
Includes are written from the repository root ("core/engine/model.h"); a relative one ("../x.h") is refused.
]]
local M = {}

-- The layer of a path (a file, or an include target).
local function layer_of(path)
    if path == "core/glm53.h" then return "public" end
    local dir = path:match("^core/(%a+)/")
    if dir then return dir end
    if path:match("^kernels/cpu/") then return "kernels/cpu" end
    if path:match("^kernels/cuda/") then return "kernels/cuda" end
    if path:match("^kernels/[^/]+$") then return "kernels" end
    return nil
end

local ALLOWED = {
    public = { public = true },
    base = { public = true, base = true },
    io = { public = true, base = true, io = true },
    text = { public = true, base = true, text = true },
    media = { public = true, base = true, media = true },
    kernels = { public = true, base = true, kernels = true },
    ["kernels/cpu"] = { public = true, base = true, kernels = true, ["kernels/cpu"] = true },
    ["kernels/cuda"] = { public = true, base = true, kernels = true, ["kernels/cuda"] = true },
    engine = { public = true, base = true, io = true, text = true, media = true, kernels = true, engine = true },
}

-- Violations of one file's include lines: a list of "file:line: message".
function M.check_file(path, text)
    local problems, from = {}, layer_of(path)
    if not from then return problems end
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        local target = line:match('^%s*#%s*include%s+"([^"]+)"')
        if target then
            local to = layer_of(target)
            if target:find("%.%./") or target:sub(1, 2) == "./" then
                problems[#problems + 1] = string.format("%s:%d: relative include \"%s\"", path, n, target)
            elseif not to then
                problems[#problems + 1] = string.format("%s:%d: \"%s\" is not under a layer (write it from the " ..
                                                        "repository root)", path, n, target)
            elseif not (ALLOWED[from] or {})[to] then
                problems[#problems + 1] = string.format("%s:%d: %s includes %s (\"%s\")", path, n, from, to, target)
            end
        end
    end
    return problems
end

-- Every C/CUDA source and header under core/ and kernels/ of root: problems, files checked.
function M.check_tree(root)
    root = root or "."
    local problems, count = {}, 0
    local p = assert(io.popen("cd '" .. root .. "' && find core kernels -type f \\( -name '*.c' -o -name '*.h' " ..
                              "-o -name '*.cu' -o -name '*.cuh' \\) | sort"))
    for path in p:lines() do
        local f = assert(io.open(root .. "/" .. path, "rb"))
        local text = f:read("*a")
        f:close()
        count = count + 1
        for _, problem in ipairs(M.check_file(path, text)) do problems[#problems + 1] = problem end
    end
    p:close()
    return problems, count
end

if arg and arg[0] and arg[0]:match("check_layers%.lua$") then
    if arg[1] == "--help" or arg[1] == "-h" then
        print("usage: luajit scripts/check_layers.lua [root]")
        os.exit(0)
    end
    local problems, count = M.check_tree(arg[1])
    for _, problem in ipairs(problems) do io.stderr:write(problem, "\n") end
    if #problems > 0 then
        io.stderr:write(string.format("layers: %d violations in %d files\n", #problems, count))
        os.exit(1)
    end
    print(string.format("layers: %d files, ok", count))
end

return M
