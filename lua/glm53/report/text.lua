--[[
glm53.report.text - tables for the terminal: columns right-aligned to their widest cell, two spaces apart.

    local text = require("glm53.report.text")
    print(text.table({ "mode", "accuracy" }, { { "strict-match", "0.050" }, { "flexible-extract", "0.100" } }))
    --             mode  accuracy
    --     strict-match     0.050
    -- flexible-extract     0.100

Cells are strings (tostring is applied); widths count bytes. Argument errors raise.
]]
local M = {}

-- The header and rows as lines of text joined with "\n" (no trailing newline).
function M.table(header, rows)
    if type(header) ~= "table" or type(rows) ~= "table" then error("text.table: header and rows must be arrays", 2) end
    local widths = {}
    for i, h in ipairs(header) do
        widths[i] = #tostring(h)
        for _, row in ipairs(rows) do widths[i] = math.max(widths[i], #tostring(row[i] or "")) end
    end
    local function line(cells)
        local out = {}
        for i = 1, #header do
            local cell = tostring(cells[i] or "")
            out[i] = string.rep(" ", widths[i] - #cell) .. cell
        end
        return table.concat(out, "  ")
    end
    local lines = { line(header) }
    for _, row in ipairs(rows) do lines[#lines + 1] = line(row) end
    return table.concat(lines, "\n")
end

return M
