-- Test helper: the committed golden fixtures (tests/fixtures/<name>/ with config.json, tokens.npy,
-- logits.npy). GLM53_FIXTURES may point at another directory of the same layout.
local M = {}

local function exists(path)
    local f = io.open(path, "rb")
    if f then f:close() return true end
    return false
end

function M.root()
    return os.getenv("GLM53_FIXTURES") or "tests/fixtures"
end

-- Fixtures that have reference logits, sorted by name: { {name =, dir =}, ... }
function M.list()
    local root = M.root()
    local list = {}
    local p = io.popen('ls -1 "' .. root .. '" 2>/dev/null')
    for name in p:lines() do
        local dir = root .. "/" .. name
        if exists(dir .. "/config.json") and exists(dir .. "/logits.npy") and exists(dir .. "/tokens.npy") then
            list[#list + 1] = { name = name, dir = dir }
        end
    end
    p:close()
    table.sort(list, function(a, b) return a.name < b.name end)
    return list
end

return M
