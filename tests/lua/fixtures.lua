-- Test helper: the committed golden fixtures (tests/fixtures/<name>/ with config.json, tokens.npy,
-- logits.npy), and the comparisons every logits check uses. GLM53_FIXTURES may point at another directory of
-- the same layout.
local json = require("glm53.chat.json")
local file = require("glm53.util.file")

local M = {}

local exists = file.exists

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

-- A JSON file decoded, or nil when the file does not exist (malformed JSON raises).
function M.read_json(path)
    local text = file.read_file(path)
    if not text then return nil end
    return assert(json.decode(text))
end

-- max|got - ref| / max|ref| over n values (0-based arrays); a NaN in got counts as an infinite difference.
function M.rel_err(got, ref, n)
    local maxd, maxr = 0, 0
    for i = 0, n - 1 do
        local d = math.abs(got[i] - ref[i])
        if d ~= d then d = math.huge end
        if d > maxd then maxd = d end
        if math.abs(ref[i]) > maxr then maxr = math.abs(ref[i]) end
    end
    return maxr > 0 and maxd / maxr or maxd
end

-- Logits [T, V] against reference logits [T, V]: rel_err over all of them, and the number of rows whose
-- argmax differs.
function M.compare(got, ref, T, V)
    local flips = 0
    for t = 0, T - 1 do
        local best_got, best_ref = 0, 0
        for v = 1, V - 1 do
            if got[t * V + v] > got[t * V + best_got] then best_got = v end
            if ref[t * V + v] > ref[t * V + best_ref] then best_ref = v end
        end
        if best_got ~= best_ref then flips = flips + 1 end
    end
    return M.rel_err(got, ref, T * V), flips
end

return M
