--[[
glm53.eval.records - the per-item JSONL of an eval run: one JSON object a line with its keys in a fixed order,
appended and flushed item by item so that a killed run loses at most the line being written, and reopened to
resume: complete lines are kept, a partial last line is cut off, records that carry an error are dropped so
that their items run again.

    local records = require("glm53.eval.records")
    local store = assert(records.open("out/records.jsonl"))
    if not store.done["17"] then ... assert(store:append(record)) end
    store:close()
    local list = assert(records.read("out/records.jsonl"))    -- every record, in file order

A record is a table with the fields of records.FIELDS (absent ones are written as null), in that order.
Objects inside it are written with sorted keys, or in the order records.ordered(keys, values) gives, or in the
order glm53.chat.json recorded (a prompt read from a task file keeps its keys' order), so equal records are
equal bytes whatever the process (LuaJIT's table order is not stable across processes). Numbers
are written as cjson writes them (14 significant digits). Argument errors raise; I/O failures and malformed
lines (other than a partial last one) return nil, "path:line: reason".
]]
local cjson = require("cjson")
local json = require("glm53.chat.json")
local file = require("glm53.util.file")

local M = {}

M.FIELDS = { "id", "group", "prompt", "output", "reasoning", "finish_reason", "extracted", "extract_stage", "correct", "gold",
             "tokens_in", "tokens_out", "spec", "error", "latency_s" }

local ORDER = setmetatable({}, { __mode = "k" })   -- table -> its key order

-- A table whose keys encode in the given order: ordered({ "b", "a" }, { a = 1, b = 2 }) -> {"b":2,"a":1}.
function M.ordered(keys, values)
    local t = {}
    for _, k in ipairs(keys) do t[k] = values[k] end
    ORDER[t] = keys
    return t
end

local encode_value

local function encode_object(t, keys)
    local out = {}
    for _, k in ipairs(keys) do
        local v = t[k]
        out[#out + 1] = cjson.encode(tostring(k)) .. ":" .. encode_value(v)
    end
    return "{" .. table.concat(out, ",") .. "}"
end

function encode_value(v)
    local tv = type(v)
    if v == nil or v == cjson.null or json.is_null(v) then return "null" end
    if tv == "string" or tv == "number" or tv == "boolean" then return cjson.encode(v) end
    if tv ~= "table" then error("records: cannot write a " .. tv, 0) end
    if json.is_number_box(v) then return tostring(v) end   -- a number as the task file wrote it (1.0)
    local keys = ORDER[v]
    if keys then return encode_object(v, keys) end
    local declared = json.declared_kind(v)
    if declared == "object" then return encode_object(v, json.keys(v)) end
    local n = #v
    local count = 0
    for _ in pairs(v) do count = count + 1 end
    if count == n or declared == "array" then   -- an array (an empty table is written [])
        local out = {}
        for i = 1, n do out[i] = encode_value(v[i]) end
        return "[" .. table.concat(out, ",") .. "]"
    end
    keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    return encode_object(v, keys)
end

-- Any value as JSON text, with the key order rules above.
M.json = function(v) return encode_value(v) end

-- The JSON line of a record (no newline).
function M.encode(record)
    if type(record) ~= "table" or record.id == nil then error("records.encode: a record needs an id", 2) end
    return encode_object(record, M.FIELDS)
end

-- The records of a JSONL text: { {rec =, line =, n = line number}, ... } for its complete non-blank lines, and
-- whether a partial last line followed them; nil, "path:n: reason" for a line that is not a record.
local function parse(path, text)
    local entries, pos, n = {}, 1, 0
    while true do
        local nl = text:find("\n", pos, true)
        if not nl then break end
        local line = text:sub(pos, nl - 1)
        pos, n = nl + 1, n + 1
        if line:find("%S") then
            local ok, rec = pcall(cjson.decode, line)
            if not ok or type(rec) ~= "table" or rec.id == nil then
                return nil, string.format("%s:%d: not a record (%s)", path, n, ok and "no id" or tostring(rec))
            end
            entries[#entries + 1] = { rec = rec, line = line, n = n }
        end
    end
    return entries, pos <= #text
end

-- Every record of a JSONL file, in file order (a partial last line is left out). nil, err for an unreadable
-- file or a line that is not a JSON object with an id.
function M.read(path)
    if type(path) ~= "string" then error("records.read: path must be a string", 2) end
    local text, err = file.read_file(path)
    if not text then return nil, err end
    local entries, perr = parse(path, text)
    if not entries then return nil, perr end
    local list = {}
    for i, e in ipairs(entries) do list[i] = e.rec end
    return list
end

local Store = {}
Store.__index = Store

-- Opens (creating) a records file for appending. store.done maps the id of every kept record to it,
-- store.order lists the kept ids in file order, store.dropped counts the records dropped because they carry
-- an error, store.cut is true when a partial last line was cut off.
function M.open(path)
    if type(path) ~= "string" then error("records.open: path must be a string", 2) end
    local self = setmetatable({ path = path, done = {}, order = {}, dropped = 0, cut = false }, Store)
    local text = file.read_file(path)
    if text then
        local entries, partial = parse(path, text)
        if not entries then return nil, partial end
        local kept = {}
        for _, e in ipairs(entries) do
            local rec, id = e.rec, tostring(e.rec.id)
            if rec.error ~= nil and rec.error ~= cjson.null then
                self.dropped = self.dropped + 1
            elseif self.done[id] then
                return nil, string.format("%s:%d: a second record of id %s", path, e.n, id)
            else
                self.done[id] = rec
                self.order[#self.order + 1] = id
                kept[#kept + 1] = e.line .. "\n"
            end
        end
        self.cut = partial
        if partial or self.dropped > 0 then
            local ok, werr = file.write_file(path, table.concat(kept), { atomic = true })
            if not ok then return nil, werr end
        end
    end
    local f, err = io.open(path, "ab")
    if not f then return nil, err end
    self.f = f
    return self
end

-- Appends a record and flushes it to the file. Returns true, or nil, err.
function Store:append(record)
    if not self.f then error("store:append: the store is closed", 2) end
    local ok, err = self.f:write(M.encode(record), "\n")
    if ok then ok, err = self.f:flush() end
    if not ok then return nil, self.path .. ": " .. tostring(err) end
    if record.error == nil or record.error == cjson.null then
        local id = tostring(record.id)
        self.done[id] = record
        self.order[#self.order + 1] = id
    end
    return true
end

function Store:close()
    if self.f then self.f:close() self.f = nil end
end

return M
