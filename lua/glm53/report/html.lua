--[[
glm53.report.html - the HTML of a report page: text escaping, a table of strings, and the page around the parts
(headings, paragraphs, tables, inline SVG plots from glm53.report.svg).

    local html = require("glm53.report.html")
    local svg = require("glm53.report.svg")
    local page = html.page("MTP depth sweep", {
        "<h1>MTP depth sweep</h1>",
        "<p>model <code>" .. html.escape(path) .. "</code></p>",
        html.table({ "K", "speed-up" }, { { "0", "1.00" }, { "2", "1.61" } }),
        svg.plot({ title = "speed-up", xlabel = "K", ylabel = "speed-up", series = series }),
    })
    assert(require("glm53.util.file").write_file("report.html", page .. "\n"))

Parts are HTML text, put in as they are: escape what comes from data. Argument errors raise.
]]
local M = {}

-- The page style: sans-serif text, tables with thin borders and right-aligned cells.
M.STYLE = "body{font-family:sans-serif;margin:2em;max-width:1100px} table{border-collapse:collapse}" ..
          " td,th{border:1px solid #ccc;padding:3px 7px;text-align:right} th{background:#f4f4f4}"

-- s (any value, through tostring) with &, < and > escaped, for element content (not attribute values).
function M.escape(s)
    return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

-- A table with a header row (an array of strings) and rows (arrays of strings), cells escaped; one <tr> a line.
function M.table(header, rows)
    if type(header) ~= "table" or type(rows) ~= "table" then error("html.table: header and rows must be arrays", 2) end
    local out = { "<table><tr>" }
    for _, h in ipairs(header) do out[#out + 1] = "<th>" .. M.escape(h) .. "</th>" end
    out[#out + 1] = "</tr>"
    for _, row in ipairs(rows) do
        local cells = {}
        for i, cell in ipairs(row) do cells[i] = "<td>" .. M.escape(cell) .. "</td>" end
        out[#out + 1] = "<tr>" .. table.concat(cells) .. "</tr>"
    end
    out[#out + 1] = "</table>"
    return table.concat(out, "\n")
end

-- A whole HTML document: title (escaped) and M.STYLE in the head, the parts (an array of HTML strings) in the
-- body, one line each.
function M.page(title, parts)
    if type(parts) ~= "table" then error("html.page: parts must be an array of HTML strings", 2) end
    local out = { "<!DOCTYPE html>", '<html><head><meta charset="utf-8"><title>' .. M.escape(title) .. "</title>",
                  "<style>" .. M.STYLE .. "</style>", "</head><body>" }
    for _, part in ipairs(parts) do out[#out + 1] = part end
    out[#out + 1] = "</body></html>"
    return table.concat(out, "\n")
end

return M
