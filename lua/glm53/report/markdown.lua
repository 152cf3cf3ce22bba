--[[
glm53.report.markdown - Markdown for reports: CommonMark to HTML with cmark (libcmark, through the LuaJIT FFI),
GitHub-style pipe tables, and report documents that are written both as Markdown and as an HTML page.

    local markdown = require("glm53.report.markdown")
    local html_text = assert(markdown.to_html("# Title\n\nSome *text*."))
    local doc = markdown.document({
        { md = "# gsm8k on models/glm53-tiny\n\nGreedy, 20 items." },
        { table = { header = { "mode", "accuracy" }, rows = { { "strict-match", "0.050" } } } },
        { svg = svg_text, md = "(plot in report.html)" },      -- HTML gets the SVG, Markdown the md text
    })
    file.write_file("summary.md", doc.markdown)
    file.write_file("report.html", html.page("gsm8k", doc.html_parts))

cmark (the CommonMark reference implementation) has no tables, so a document keeps its tables apart: in the
Markdown they are pipe tables, in the HTML glm53.report.html tables; prose blocks go through cmark, which
drops raw HTML (its safe default). libcmark is loaded on the first to_html call: ffi.load("cmark"), then the
Debian runtime name libcmark.so.0.30.2; when neither loads, to_html returns nil and an error that says which
package to install. Argument errors raise.
]]
local ffi = require("ffi")
local html = require("glm53.report.html")

local M = {}

ffi.cdef [[
char *cmark_markdown_to_html(const char *text, size_t len, int options);
void free(void *ptr);
]]

local LIBRARY_NAMES = { "cmark", "libcmark.so.0.30.2", "libcmark.so" }
local lib, lib_err

local function library()
    if lib then return lib end
    if lib_err then return nil, lib_err end
    local tried = {}
    for _, name in ipairs(LIBRARY_NAMES) do
        local ok, l = pcall(ffi.load, name)
        if ok then
            lib = l
            return lib
        end
        tried[#tried + 1] = name
    end
    lib_err = "libcmark not found (tried " .. table.concat(tried, ", ") .. "); install it: apt-get install -y " ..
              "libcmark0.30.2 libcmark-dev (scripts/bootstrap.sh does)"
    return nil, lib_err
end

-- CommonMark text -> HTML text (cmark's default options: smart punctuation off, raw HTML dropped), or nil, err
-- when libcmark is missing.
function M.to_html(text)
    if type(text) ~= "string" then error("markdown.to_html: text must be a string", 2) end
    local l, err = library()
    if not l then return nil, err end
    local out = l.cmark_markdown_to_html(text, #text, 0)
    if out == nil then return nil, "cmark_markdown_to_html failed (out of memory)" end
    local s = ffi.string(out)
    ffi.C.free(out)
    return s
end

-- A cell's text for a pipe table: one line, pipes and backslashes escaped.
local function cell(s)
    return (tostring(s):gsub("\\", "\\\\"):gsub("|", "\\|"):gsub("[\r\n]+", " "))
end

-- A GitHub-style pipe table: header (strings) and rows (arrays of strings). align: "l" or "r" per column
-- (default: the first column left, the others right).
function M.table(header, rows, align)
    if type(header) ~= "table" or type(rows) ~= "table" then error("markdown.table: header and rows must be arrays", 2) end
    local out, seps, cells = {}, {}, {}
    for i, h in ipairs(header) do
        cells[i] = cell(h)
        local a = align and align[i] or (i == 1 and "l" or "r")
        seps[i] = a == "r" and "---:" or ":---"
    end
    out[1] = "| " .. table.concat(cells, " | ") .. " |"
    out[2] = "| " .. table.concat(seps, " | ") .. " |"
    for _, row in ipairs(rows) do
        local r = {}
        for i = 1, #header do r[i] = cell(row[i] == nil and "" or row[i]) end
        out[#out + 1] = "| " .. table.concat(r, " | ") .. " |"
    end
    return table.concat(out, "\n")
end

-- A report from blocks, each one of { md = text }, { table = { header =, rows = [, align =] } } and
-- { svg = text [, md = text] } (HTML only, unless md says what the Markdown shows instead). Returns
-- { markdown = text, html_parts = { ... } } for glm53.report.html.page, or nil, err when libcmark is missing.
function M.document(blocks)
    if type(blocks) ~= "table" then error("markdown.document: blocks must be an array", 2) end
    local md, parts = {}, {}
    for i, b in ipairs(blocks) do
        if b.table then
            md[#md + 1] = M.table(b.table.header, b.table.rows, b.table.align)
            parts[#parts + 1] = html.table(b.table.header, b.table.rows)
        elseif b.svg then
            if b.md then md[#md + 1] = b.md end
            parts[#parts + 1] = b.svg
        elseif b.md then
            md[#md + 1] = b.md
            local h, err = M.to_html(b.md)
            if not h then return nil, err end
            parts[#parts + 1] = h
        else
            error("markdown.document: block " .. i .. " has no md, table or svg", 2)
        end
    end
    return { markdown = table.concat(md, "\n\n") .. "\n", html_parts = parts }
end

return M
