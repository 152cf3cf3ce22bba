-- glm53.chat.pycompat: the few Python behaviours that the chat template (rendered
-- by jinja2) and vLLM's output parsers rely on, over glm53.chat.json values.
--
--   local py = require("glm53.chat.pycompat")
--   py.str(json.decode("[true, null, 1.5]"))     -- "[True, None, 1.5]"
--   py.literal_eval("{'a': (1, 2), 'b': None}")  -- an object {a = [1, 2], b = json.null}
--
--   truthy(v)        Python truthiness (nil stands for jinja's Undefined)
--   str(v), repr(v)  str() and repr() of JSON-shaped values
--   isspace(cp)      str.isspace for one code point
--   strip(s)         str.strip() with no arguments (Unicode whitespace)
--   literal_eval(s)  ast.literal_eval for the literals a model writes as a
--                    tool argument, converted to JSON-shaped values
--
-- Strings are UTF-8 byte strings; where Python works on code points the
-- functions here decode UTF-8 as they go.

-- Branchy, short-running helpers: traced, they (with the renderer) fill LuaJIT's
-- trace cache and run slower than interpreted, so this module stays interpreted.
if jit then jit.off(true, true) end

local json = require("glm53.chat.json")

local byte, char, find, format, sub = string.byte, string.char, string.find, string.format, string.sub
local concat = table.concat
local floor, huge = math.floor, math.huge
local utf8_decode, utf8_encode = json.utf8_decode, json.utf8_encode

local py = {}

local is_null, is_box = json.is_null, json.is_number_box

--- Python truthiness; nil (Undefined) is false.
function py.truthy(v)
    if v == nil or v == false or is_null(v) then return false end
    local t = type(v)
    if t == "number" then return v ~= 0 end
    if t == "string" then return v ~= "" end
    if is_box(v) then return v.value ~= 0 end
    local k = json.kind(v)
    if k == "array" then return type(v) == "table" and #v > 0 end
    if k == "object" then return next(v) ~= nil end
    return true
end

------------------------------------------------------------------------------
-- Whitespace and strip
------------------------------------------------------------------------------

local SPACE = {
    [0x09] = true, [0x0A] = true, [0x0B] = true, [0x0C] = true, [0x0D] = true,
    [0x1C] = true, [0x1D] = true, [0x1E] = true, [0x1F] = true, [0x20] = true,
    [0x85] = true, [0xA0] = true, [0x1680] = true, [0x2028] = true, [0x2029] = true,
    [0x202F] = true, [0x205F] = true, [0x3000] = true,
}
for cp = 0x2000, 0x200A do SPACE[cp] = true end

--- str.isspace() of one code point.
function py.isspace(cp) return SPACE[cp] == true end

-- Byte length of a whitespace character starting at i, or nil.
local function space_at(s, i)
    local c = byte(s, i)
    if c == nil then return nil end
    if c < 0x80 then return SPACE[c] and 1 or nil end
    local cp, n = utf8_decode(s, i)
    if cp and SPACE[cp] then return n end
    return nil
end

-- Byte length of a whitespace character ending at j, or nil.
local function space_before(s, j)
    local c = byte(s, j)
    if c == nil then return nil end
    if c < 0x80 then return SPACE[c] and 1 or nil end
    for n = 2, 3 do -- every non-ASCII whitespace is 2 or 3 bytes long
        local i = j - n + 1
        if i >= 1 then
            local cp, len = utf8_decode(s, i)
            if cp and len == n then return SPACE[cp] and n or nil end
        end
    end
    return nil
end

--- Python str.strip() with no arguments.
function py.strip(s)
    local i, j = 1, #s
    while i <= j do
        local n = space_at(s, i)
        if not n then break end
        i = i + n
    end
    while j >= i do
        local n = space_before(s, j)
        if not n then break end
        j = j - n
    end
    return sub(s, i, j)
end

--- True when s is empty or all whitespace (Python: not s.strip()).
function py.is_blank(s) return py.strip(s) == "" end

------------------------------------------------------------------------------
-- str() and repr()
------------------------------------------------------------------------------

-- Code points Python's str.isprintable() rejects, as ranges (assigned code
-- points only; Unicode 14 as in Python 3.11).  Unassigned code points are
-- treated as printable here, where Python would escape them.
local NONPRINT = {
    { 0x0, 0x1F }, { 0x7F, 0xA0 }, { 0xAD, 0xAD }, { 0x600, 0x605 }, { 0x61C, 0x61C }, { 0x6DD, 0x6DD },
    { 0x70F, 0x70F }, { 0x890, 0x891 }, { 0x8E2, 0x8E2 }, { 0x1680, 0x1680 }, { 0x180E, 0x180E },
    { 0x2000, 0x200F }, { 0x2028, 0x202F }, { 0x205F, 0x2064 }, { 0x2066, 0x206F }, { 0x3000, 0x3000 },
    { 0xE000, 0xF8FF }, { 0xFEFF, 0xFEFF }, { 0xFFF9, 0xFFFB }, { 0x110BD, 0x110BD }, { 0x110CD, 0x110CD },
    { 0x13430, 0x13438 }, { 0x1BCA0, 0x1BCA3 }, { 0x1D173, 0x1D17A }, { 0xE0001, 0xE0001 },
    { 0xE0020, 0xE007F }, { 0xF0000, 0xFFFFD }, { 0x100000, 0x10FFFD },
}

local function printable(cp)
    for i = 1, #NONPRINT do
        local r = NONPRINT[i]
        if cp < r[1] then return true end
        if cp <= r[2] then return false end
    end
    return true
end

local function repr_string(s)
    local q = "'"
    if find(s, "'", 1, true) and not find(s, '"', 1, true) then q = '"' end
    local out, n, i, len = {}, 0, 1, #s
    while i <= len do
        local c = byte(s, i)
        local piece, step
        if c < 0x80 then
            step = 1
            if c == 92 then piece = "\\\\"
            elseif c == byte(q) then piece = "\\" .. q
            elseif c == 9 then piece = "\\t"
            elseif c == 10 then piece = "\\n"
            elseif c == 13 then piece = "\\r"
            elseif c < 32 or c == 127 then piece = format("\\x%02x", c)
            else piece = char(c) end
        else
            local cp, l = utf8_decode(s, i)
            if not cp then
                -- not reachable from Python; keep the byte as it is
                piece, step = char(c), 1
            else
                step = l
                if printable(cp) then piece = sub(s, i, i + l - 1)
                elseif cp < 0x100 then piece = format("\\x%02x", cp)
                elseif cp < 0x10000 then piece = format("\\u%04x", cp)
                else piece = format("\\U%08x", cp) end
            end
        end
        n = n + 1
        out[n] = piece
        i = i + step
    end
    return q .. concat(out) .. q
end

local function num_str(x)
    if x ~= x then return "nan" end
    if x == huge then return "inf" end
    if x == -huge then return "-inf" end
    return json.number_repr(x)
end

local repr

local function container_repr(v)
    local k = json.kind(v)
    if k == "array" then
        if type(v) ~= "table" then return "[]" end
        local parts = {}
        for i = 1, #v do parts[i] = repr(v[i]) end
        return "[" .. concat(parts, ", ") .. "]"
    end
    local parts = {}
    local keys = json.keys(v)
    for i = 1, #keys do
        parts[i] = repr(keys[i]) .. ": " .. repr(v[keys[i]])
    end
    return "{" .. concat(parts, ", ") .. "}"
end

--- Python repr() of a JSON-shaped value.
repr = function(v)
    local t = type(v)
    if t == "string" then return repr_string(v) end
    if v == nil then return "" end
    if t == "boolean" then return v and "True" or "False" end
    if t == "number" then return num_str(v) end
    if is_null(v) then return "None" end
    if is_box(v) then
        local x = v.value
        if x ~= x or x == huge or x == -huge then return num_str(x) end
        return v.repr
    end
    return container_repr(v)
end
py.repr = repr

--- Python str() of a JSON-shaped value; nil (Undefined) gives "".
function py.str(v)
    if type(v) == "string" then return v end
    return repr(v)
end

------------------------------------------------------------------------------
-- Equality
------------------------------------------------------------------------------

local function numeric(v)
    if type(v) == "number" then return v end
    if type(v) == "boolean" then return v and 1 or 0 end
    if is_box(v) then return v.value end
    return nil
end

--- Python ==, with nil as jinja's Undefined (equal only to Undefined).
function py.eq(a, b)
    if a == nil or b == nil then return a == nil and b == nil end
    local ta, tb = type(a), type(b)
    if ta == "string" or tb == "string" then return a == b end
    if is_null(a) or is_null(b) then return is_null(a) and is_null(b) end
    local na, nb = numeric(a), numeric(b)
    if na ~= nil or nb ~= nil then return na == nb end
    local ka, kb = json.kind(a), json.kind(b)
    if ka ~= kb then return false end
    if ka == "array" then
        local la = type(a) == "table" and #a or 0
        local lb = type(b) == "table" and #b or 0
        if la ~= lb then return false end
        for i = 1, la do
            if not py.eq(a[i], b[i]) then return false end
        end
        return true
    end
    if ka == "object" then
        for k, v in pairs(a) do
            if not py.eq(v, b[k]) then return false end
        end
        for k in pairs(b) do
            if a[k] == nil then return false end
        end
        return true
    end
    return a == b
end

------------------------------------------------------------------------------
-- literal_eval
------------------------------------------------------------------------------
-- Python literals: numbers (with _, 0x/0o/0b, leading-dot and trailing-dot
-- floats, signs), strings (all quote styles, prefixes r/u, escapes, adjacent
-- literals joined), True/False/None, lists, tuples (as arrays) and dicts (keys
-- converted as json.dumps converts them).  Anything Python would evaluate to a
-- value json.dumps cannot write (sets, bytes, complex numbers, Ellipsis) is
-- reported as a failure, like a syntax error.  \N{...} escapes are not
-- supported (no Unicode name table) and fail too.

local LE = {}
LE.__index = LE

local function le_fail(msg) error({ le = msg }, 0) end

function LE:skip()
    local s = self.s
    while true do
        local c = byte(s, self.i)
        if c == 32 or c == 9 or c == 12 then
            self.i = self.i + 1
        elseif (c == 10 or c == 13) and self.depth > 0 then
            self.i = self.i + 1
        elseif c == 92 and (byte(s, self.i + 1) == 10) then -- explicit line joining
            self.i = self.i + 2
        elseif c == 35 then -- comment to end of line
            local nl = find(s, "\n", self.i, true)
            if not nl or self.depth == 0 then
                if not nl then self.i = #s + 1 else self.i = nl end
            else
                self.i = nl + 1
            end
        else
            return c
        end
    end
end

local SIMPLE_ESC = {
    ["\\"] = "\\", ["'"] = "'", ['"'] = '"', a = "\a", b = "\b", f = "\f", n = "\n", r = "\r",
    t = "\t", v = "\v", ["\n"] = "",
}

function LE:string_literal()
    local s, i = self.s, self.i
    local prefix = s:match("^[rRuUbBfF]*", i)
    local lp = prefix:lower()
    if find(lp, "b", 1, true) or find(lp, "f", 1, true) then le_fail("bytes and f-strings are not literals") end
    if #prefix > 1 or (lp ~= "" and lp ~= "r" and lp ~= "u") then le_fail("bad string prefix") end
    local raw = lp == "r"
    i = i + #prefix
    local q = sub(s, i, i)
    local triple = sub(s, i, i + 2) == q .. q .. q
    local close = triple and (q .. q .. q) or q
    i = i + #close
    local out, n = {}, 0
    while true do
        local c = sub(s, i, i)
        if c == "" then le_fail("unterminated string") end
        if sub(s, i, i + #close - 1) == close then
            i = i + #close
            break
        end
        if c == "\n" and not triple then le_fail("newline in string") end
        if c == "\\" then
            local e = sub(s, i + 1, i + 1)
            if e == "" then le_fail("unterminated string") end
            if raw then
                n = n + 1
                out[n] = "\\" .. e
                i = i + 2
            elseif SIMPLE_ESC[e] then
                n = n + 1
                out[n] = SIMPLE_ESC[e]
                i = i + 2
            elseif find(e, "^[0-7]") then
                local oct = s:match("^[0-7][0-7]?[0-7]?", i + 1)
                n = n + 1
                out[n] = utf8_encode(tonumber(oct, 8))
                i = i + 1 + #oct
            elseif e == "x" or e == "u" or e == "U" then
                local len = e == "x" and 2 or (e == "u" and 4 or 8)
                local hex = sub(s, i + 2, i + 1 + len)
                if #hex ~= len or not find(hex, "^%x+$") then le_fail("truncated \\" .. e .. " escape") end
                local cp = tonumber(hex, 16)
                if cp > 0x10FFFF then le_fail("escape out of range") end
                if cp >= 0xD800 and cp <= 0xDFFF then cp = 0xFFFD end
                n = n + 1
                out[n] = utf8_encode(cp)
                i = i + 2 + len
            elseif e == "N" then
                le_fail("\\N{...} escapes are not supported")
            else
                n = n + 1 -- unknown escapes keep the backslash
                out[n] = "\\" .. e
                i = i + 2
            end
        else
            local j = find(s, "[\\\n" .. (q == "'" and "'" or '"') .. "]", i)
            j = j or (#s + 1)
            if j == i then j = i + 1 end -- a lone quote or newline inside a triple-quoted string
            n = n + 1
            out[n] = sub(s, i, j - 1)
            i = j
        end
    end
    self.i = i
    return concat(out)
end

function LE:number()
    local s, i = self.s, self.i
    local value, is_float
    local base, digits = s:match("^0([xXoObB])([%w_]*)", i)
    if base then
        local b = ({ x = 16, o = 8, b = 2 })[base:lower()]
        local body = digits:gsub("^_", "")
        local valid = b == 16 and "^%x+$" or (b == 8 and "^[0-7]+$" or "^[01]+$")
        local clean = body:gsub("_", "")
        if body == "" or find(body, "__") or find(body, "_$") or not find(clean, valid) then
            le_fail("invalid number")
        end
        value = tonumber(clean, b)
        self.i = i + 2 + #digits
    else
        local m = s:match("^%d[%d_]*%.?[%d_]*", i) or s:match("^%.%d[%d_]*", i)
        if not m then le_fail("invalid number") end
        local j = i + #m
        local e = s:match("^[eE][-+]?%d[%d_]*", j)
        if e then j = j + #e end
        local text = sub(s, i, j - 1)
        if find(text, "__") or find(text, "_$") or find(text, "_[.eE]") or find(text, "[.eE]_")
            or find(text, "[eE][-+]_") then
            le_fail("invalid number")
        end
        is_float = find(text, "[.eE]") ~= nil
        local clean = text:gsub("_", "")
        if not is_float and find(clean, "^0%d") and find(clean, "[1-9]") then
            le_fail("leading zeros in decimal integer")
        end
        value = tonumber(clean)
        if not value then le_fail("invalid number") end
        self.i = j
        if is_float then
            if value == floor(value) then return json.float(value) end
            return value
        end
        if value >= 2 ^ 53 then return json.number(value, clean) end
    end
    if find(s, "^[jJ]", self.i) then le_fail("complex numbers cannot be written as JSON") end
    if find(s, "^[%w_]", self.i) then le_fail("invalid number") end
    return value
end

local function negate(v)
    if type(v) == "number" then return -v end
    if is_box(v) then
        local x = -v.value
        if find(v.repr, "[.eEn]") then return json.float(x) end
        local r = v.repr
        return json.number(x, (sub(r, 1, 1) == "-") and sub(r, 2) or ("-" .. r))
    end
    le_fail("bad operand for unary -")
end

-- json.dumps converts dict keys: str stays, int/float as repr, True/False/None
-- as true/false/null; other key types are an error there.
local function key_string(k)
    if type(k) == "string" then return k end
    if type(k) == "boolean" then return k and "true" or "false" end
    if is_null(k) then return "null" end
    if type(k) == "number" then
        if k ~= k then return "NaN" end
        return json.number_repr(k)
    end
    if is_box(k) then return k.repr end
    le_fail("unsupported dict key type")
end

function LE:value()
    local s = self.s
    local c = self:skip()
    if c == nil then le_fail("unexpected end of input") end
    local ch = char(c)
    if ch == "+" or ch == "-" then
        self.i = self.i + 1
        local c2 = self:skip()
        if c2 == nil or not (find(char(c2), "%d") or (char(c2) == "." and find(s, "^%.%d", self.i))) then
            le_fail("unary operator on a non-number")
        end
        local v = self:number()
        return ch == "-" and negate(v) or v
    end
    if find(ch, "%d") or (ch == "." and find(s, "^%.%d", self.i)) then return self:number() end
    if find(ch, "['\"]") or find(s, "^[rRuUbBfF]+['\"]", self.i) then
        local parts = {}
        repeat
            parts[#parts + 1] = self:string_literal()
            local nc = self:skip()
        until not (nc and (find(char(nc), "['\"]") or find(s, "^[rRuUbBfF]+['\"]", self.i)))
        return concat(parts)
    end
    if ch == "[" or ch == "(" then
        local closer = ch == "[" and "]" or ")"
        self.i = self.i + 1
        self.depth = self.depth + 1
        local arr, n, saw_comma = json.array({}), 0, false
        while true do
            local nc = self:skip()
            if nc == nil then le_fail("unclosed bracket") end
            if char(nc) == closer then self.i = self.i + 1 break end
            n = n + 1
            arr[n] = self:value()
            nc = self:skip()
            if nc and char(nc) == "," then
                self.i = self.i + 1
                saw_comma = true
            elseif nc and char(nc) == closer then
                self.i = self.i + 1
                break
            else
                le_fail("expected ',' or '" .. closer .. "'")
            end
        end
        self.depth = self.depth - 1
        if closer == ")" and n == 1 and not saw_comma then return arr[1] end -- parenthesised value
        return arr
    end
    if ch == "{" then
        self.i = self.i + 1
        self.depth = self.depth + 1
        local obj = json.object({}, {})
        while true do
            local nc = self:skip()
            if nc == nil then le_fail("unclosed brace") end
            if char(nc) == "}" then
                self.i = self.i + 1
                break
            end
            local k = self:value()
            nc = self:skip()
            if not nc or char(nc) ~= ":" then le_fail("sets cannot be written as JSON") end
            self.i = self.i + 1
            local v = self:value()
            json.set(obj, key_string(k), v)
            nc = self:skip()
            if nc and char(nc) == "," then
                self.i = self.i + 1
            elseif nc and char(nc) == "}" then
                self.i = self.i + 1
                break
            else
                le_fail("expected ',' or '}'")
            end
        end
        self.depth = self.depth - 1
        return obj
    end
    local name = s:match("^[%a_][%w_]*", self.i)
    if name then
        self.i = self.i + #name
        if name == "True" then return true end
        if name == "False" then return false end
        if name == "None" then return json.null end
        le_fail("name '" .. name .. "' is not a literal")
    end
    le_fail("unexpected character '" .. ch .. "'")
end

--- ast.literal_eval(s) as a JSON-shaped value, or nil and a reason.
function py.literal_eval(s)
    if type(s) ~= "string" then error("literal_eval: string expected", 2) end
    local st = setmetatable({ s = s, i = 1, depth = 0 }, LE)
    -- literal_eval drops leading spaces and tabs
    local _, e = find(s, "^[ \t]*")
    st.i = e + 1
    local ok, v = pcall(function()
        local val = st:value()
        -- a top-level tuple without brackets: "1, 2"
        local c = st:skip()
        if c == 44 then
            local arr = json.array({ val })
            repeat
                st.i = st.i + 1 -- the comma
                if st:skip() == nil then break end
                arr[#arr + 1] = st:value()
            until st:skip() ~= 44
            val = arr
        end
        c = st:skip()
        while c == 10 or c == 13 do
            st.i = st.i + 1
            c = st:skip()
        end
        if c ~= nil then le_fail("unexpected trailing text") end
        return val
    end)
    if ok then return v end
    if type(v) == "table" and v.le then return nil, v.le end
    error(v, 0)
end

return py
