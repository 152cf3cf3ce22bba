-- glm53.chat.json: JSON decode/encode that keeps object key order and writes what
-- Python's json.dumps writes.
--
--   local json = require("glm53.chat.json")
--   local v = assert(json.decode('{"b": 1.0, "a": [1, 2]}', { exact = true }))
--   json.encode(v)                                          -- '{"b": 1.0, "a": [1, 2]}'
--   json.encode(json.ordered{ "z", 1, "a", json.array{} })  -- '{"z": 1, "a": []}'
--
-- Why not lua-cjson alone: chat templates serialise tool schemas and tool-call
-- arguments with Python's json.dumps, in the order the caller gave the keys, and
-- with Python's number formatting (1.0 stays "1.0", 1e16 becomes "1e+16").  A
-- byte-exact prompt needs all three, and cjson keeps none of them.
--
-- Data model
--   object  a Lua table whose key order is recorded by this module (json.keys);
--           decoded objects carry it, json.object() makes one by hand.  Keys that
--           were added later without json.set are written after the recorded
--           ones, sorted.  Unmarked tables with keys other than 1..n are objects
--           written with sorted keys.
--   array   a Lua sequence; decoded arrays are marked so that [] stays [].
--           Unmarked empty tables encode as {} (as cjson does); use json.array().
--   null    json.null (cjson.null and cjson.empty_array are understood too).
--   number  a Lua number.  Integral values below 2^63 are written as integers,
--           others as Python's repr(float).  With decode option exact=true, numbers that a
--           Lua double cannot carry faithfully are boxed (json.is_number_box):
--           integral floats such as 1.0 or 1e5 (Python keeps them floats) and
--           integers of magnitude >= 2^53.  A box encodes exactly as Python
--           would; json.tonumber() unboxes.
--
-- Errors: malformed input makes decode return nil, msg with line, column and
-- byte offset.  Values that cannot be encoded (functions, cycles, NaN with
-- allow_nan=false) raise, as they are caller bugs.

local bit = require("bit")

local byte, char, find, format, sub = string.byte, string.char, string.find, string.format, string.sub
local concat, sort = table.concat, table.sort
local floor, huge = math.floor, math.huge
local tostring, tonumber, type, pairs, next = tostring, tonumber, type, pairs, next
local band, bor, rshift, lshift = bit.band, bit.bor, bit.rshift, bit.lshift

local json = {}

-- This module runs in the interpreter. Under LuaJIT 2.1.0-beta3 (Debian 12's) the JIT-compiled encoder failed
-- about once in 3,000 server responses with "object key of type table" on tables that encode fine when tried
-- again (measured: with the JIT off for the whole server, or for this module alone, 0 failures in 39,000 streamed
-- responses each, at the same throughput); the server lost those responses. The objects it encodes are small, so the interpreter costs nothing measurable.
if jit then jit.off(true, true) end

local KIND = setmetatable({}, { __mode = "k" })   -- table -> "object" | "array"
local ORDER = setmetatable({}, { __mode = "k" })  -- object -> { key, ... }

json.null = setmetatable({}, {
    __tostring = function() return "null" end,
    __newindex = function() error("json.null is read-only", 2) end,
})

local ok_cjson, cjson = pcall(require, "cjson")
local CJSON_NULL = ok_cjson and cjson.null or nil
local CJSON_EMPTY_ARRAY = ok_cjson and cjson.empty_array or nil
local CJSON_ARRAY_MT = ok_cjson and cjson.array_mt or nil

local function is_null(v)
    return v == json.null or (CJSON_NULL ~= nil and v == CJSON_NULL)
end
json.is_null = is_null

------------------------------------------------------------------------------
-- Number boxes and Python number formatting
------------------------------------------------------------------------------

local number_mt = {}
number_mt.__index = number_mt
number_mt.__tostring = function(b) return b.repr end
number_mt.__eq = function(a, b) return a.value == b.value end

local function is_box(v) return type(v) == "table" and getmetatable(v) == number_mt end
json.is_number_box = is_box

-- Python's repr(float): the shortest digit string that reads back to x,
-- in fixed notation when the decimal exponent is in [-4, 16), else d.ddde+XX.
local function float_repr(x)
    if x ~= x then return "NaN" end
    if x == huge then return "Infinity" end
    if x == -huge then return "-Infinity" end
    if x == 0 then return (1 / x < 0) and "-0.0" or "0.0" end
    local s, prec
    for p = 0, 16 do
        s, prec = format("%." .. p .. "e", x), p
        if tonumber(s) == x then break end
    end
    -- string.format rounds exact ties away from zero; Python rounds them to even.
    local long = format("%." .. (prec + 30) .. "e", x)
    local tail = long:match("^-?%d%.?(%d*)e")
    if sub(tail, prec + 1) == "5" .. string.rep("0", 29) then
        local last = prec == 0 and long:match("^-?(%d)") or sub(tail, prec, prec)
        local down = prec == 0 and long:gsub("^(-?%d)%.%d*", "%1")
            or long:gsub("^(-?%d%." .. string.rep("%d", prec) .. ")%d*", "%1")
        local rounded = s:match("^-?%d%.?(%d*)e")
        local rlast = prec == 0 and s:match("^-?(%d)") or sub(rounded, prec, prec)
        if tonumber(rlast) % 2 == 1 and tonumber(last) % 2 == 0 and tonumber(down) == x then
            s = down
        end
    end
    local sign, d1, rest, exp = s:match("^(-?)(%d)%.?(%d*)e([-+]%d+)$")
    rest = rest:gsub("0+$", "")
    exp = tonumber(exp)
    local digits = d1 .. rest
    if exp >= -4 and exp < 16 then
        if exp < 0 then
            return sign .. "0." .. string.rep("0", -exp - 1) .. digits
        end
        local int = sub(digits, 1, exp + 1)
        if #int < exp + 1 then int = int .. string.rep("0", exp + 1 - #int) end
        local frac = sub(digits, exp + 2)
        if frac == "" then frac = "0" end
        return sign .. int .. "." .. frac
    end
    local mant = d1
    if rest ~= "" then mant = mant .. "." .. rest end
    local esign = exp < 0 and "-" or "+"
    local eabs = exp < 0 and -exp or exp
    return format("%s%se%s%02d", sign, mant, esign, eabs)
end
json.float_repr = float_repr

-- A plain Lua number as Python would print it if it were an int (integral,
-- below 2^63) or a float (everything else).
local TWO63 = 2 ^ 63

local function number_repr(x)
    if x ~= x or x == huge or x == -huge then return float_repr(x) end
    if x == floor(x) and x >= -TWO63 and x < TWO63 then
        if x == 0 then return "0" end
        return format("%.0f", x)
    end
    return float_repr(x)
end
json.number_repr = number_repr

--- Box a number so that it encodes as a Python float (json.float(1) -> "1.0").
function json.float(x)
    if type(x) ~= "number" then error("json.float: number expected", 2) end
    return setmetatable({ value = x, repr = float_repr(x) }, number_mt)
end

--- Box a number that must be written as the given text, such as an integer
--- beyond 2^53 with all its digits.
function json.number(value, repr)
    if type(value) ~= "number" or type(repr) ~= "string" then
        error("json.number: number and string expected", 2)
    end
    return setmetatable({ value = value, repr = repr }, number_mt)
end

--- Unbox a number box; other values pass through.
function json.tonumber(v)
    if is_box(v) then return v.value end
    return v
end

------------------------------------------------------------------------------
-- Objects and arrays
------------------------------------------------------------------------------

--- Mark t (default {}) as an object.  keys, when given, is the key order;
--- otherwise the current keys are recorded in sorted order.
function json.object(t, keys)
    t = t or {}
    if type(t) ~= "table" then error("json.object: table expected", 2) end
    KIND[t] = "object"
    if keys then
        local copy = {}
        for i = 1, #keys do copy[i] = keys[i] end
        ORDER[t] = copy
    else
        local ks = {}
        for k in pairs(t) do ks[#ks + 1] = k end
        sort(ks, function(a, b) return tostring(a) < tostring(b) end)
        ORDER[t] = ks
    end
    return t
end

--- Build an object from a flat list of alternating keys and values, in order:
--- json.ordered{"name", "x", "parameters", {...}}.
function json.ordered(list)
    if type(list) ~= "table" then error("json.ordered: table expected", 2) end
    local t, keys = {}, {}
    for i = 1, #list, 2 do
        local k, v = list[i], list[i + 1]
        if type(k) ~= "string" then error("json.ordered: keys must be strings", 2) end
        if v == nil then v = json.null end
        if t[k] == nil then keys[#keys + 1] = k end
        t[k] = v
    end
    KIND[t] = "object"
    ORDER[t] = keys
    return t
end

--- Mark t (default {}) as an array.
function json.array(t)
    t = t or {}
    if type(t) ~= "table" then error("json.array: table expected", 2) end
    KIND[t] = "array"
    return t
end

--- Set t[k] = v, appending k to the recorded order if it is new.
function json.set(t, k, v)
    if type(t) ~= "table" then error("json.set: table expected", 2) end
    if v == nil then v = json.null end
    if t[k] == nil then
        local order = ORDER[t]
        if order then order[#order + 1] = k end
    end
    if KIND[t] == nil then KIND[t] = "object" end
    t[k] = v
end

local function is_sequence(t)
    local n = #t
    if n == 0 then return next(t) == nil end
    local count = 0
    for _ in pairs(t) do count = count + 1 end
    return count == n
end

--- "object", "array" or nil (not a table) for a value, as the encoder sees it.
local function kind_of(t)
    if type(t) ~= "table" then
        if CJSON_EMPTY_ARRAY ~= nil and t == CJSON_EMPTY_ARRAY then return "array" end
        return nil
    end
    if t == json.null or is_box(t) then return nil end
    local k = KIND[t]
    if k then return k end
    if CJSON_ARRAY_MT ~= nil and getmetatable(t) == CJSON_ARRAY_MT then return "array" end
    if next(t) == nil then return "object" end
    return is_sequence(t) and "array" or "object"
end
json.kind = kind_of

--- The kind recorded by decode, json.object or json.array; nil for tables
--- whose kind is only inferred.
function json.declared_kind(t) return KIND[t] end

function json.is_object(t) return kind_of(t) == "object" end
function json.is_array(t) return kind_of(t) == "array" end

local function key_less(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    return a < b
end

--- Keys of an object in order: the recorded order (keys still present), then
--- any other keys sorted.
local function keys_of(t)
    local order = ORDER[t]
    local out, seen = {}, {}
    if order then
        for i = 1, #order do
            local k = order[i]
            if t[k] ~= nil and not seen[k] then
                out[#out + 1] = k
                seen[k] = true
            end
        end
        if #out == #order then
            -- fast path: nothing removed; check whether anything was added
            local count = 0
            for _ in pairs(t) do count = count + 1 end
            if count == #out then return out end
        end
    end
    local extra = {}
    for k in pairs(t) do
        if not seen[k] then extra[#extra + 1] = k end
    end
    sort(extra, key_less)
    for i = 1, #extra do out[#out + 1] = extra[i] end
    return out
end
json.keys = keys_of

------------------------------------------------------------------------------
-- UTF-8 helpers
------------------------------------------------------------------------------

local function utf8_encode(cp)
    if cp < 0x80 then return char(cp) end
    if cp < 0x800 then
        return char(bor(0xC0, rshift(cp, 6)), bor(0x80, band(cp, 0x3F)))
    end
    if cp < 0x10000 then
        return char(bor(0xE0, rshift(cp, 12)), bor(0x80, band(rshift(cp, 6), 0x3F)),
            bor(0x80, band(cp, 0x3F)))
    end
    return char(bor(0xF0, rshift(cp, 18)), bor(0x80, band(rshift(cp, 12), 0x3F)),
        bor(0x80, band(rshift(cp, 6), 0x3F)), bor(0x80, band(cp, 0x3F)))
end
json.utf8_encode = utf8_encode

-- Decode the UTF-8 sequence at byte i of s.  Returns code point and length, or
-- nil when the bytes there are not well-formed UTF-8 (overlongs, surrogates and
-- values above U+10FFFF included).
local function utf8_decode(s, i)
    local c = byte(s, i)
    if c == nil then return nil end
    if c < 0x80 then return c, 1 end
    local n, cp, min
    if c >= 0xC2 and c <= 0xDF then n, cp, min = 2, band(c, 0x1F), 0x80
    elseif c >= 0xE0 and c <= 0xEF then n, cp, min = 3, band(c, 0x0F), 0x800
    elseif c >= 0xF0 and c <= 0xF4 then n, cp, min = 4, band(c, 0x07), 0x10000
    else return nil end
    for k = 1, n - 1 do
        local cc = byte(s, i + k)
        if cc == nil or cc < 0x80 or cc > 0xBF then return nil end
        cp = bor(lshift(cp, 6), band(cc, 0x3F))
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return nil end
    return cp, n
end
json.utf8_decode = utf8_decode

------------------------------------------------------------------------------
-- Decoder
------------------------------------------------------------------------------

local MAX_DEPTH = 1000

-- Parser state for the decode in progress (decode does not re-enter itself).
local S, EXACT, ALLOW_NAN

local decode_error_mt = {}

local function fail(pos, msg)
    local line, i = 1, 1
    while true do
        local nl = find(S, "\n", i, true)
        if not nl or nl >= pos then break end
        line = line + 1
        i = nl + 1
    end
    local col = pos - i + 1
    error(setmetatable({ msg = format("%s at line %d column %d (byte %d)", msg, line, col, pos) },
        decode_error_mt), 0)
end

local function describe(pos)
    local c = sub(S, pos, pos)
    if c == "" then return "end of input" end
    if byte(c) < 32 or byte(c) > 126 then return format("byte 0x%02X", byte(c)) end
    return "'" .. c .. "'"
end

local function skip_ws(pos)
    local _, e = find(S, "^[ \t\r\n]*", pos)
    return e + 1
end

local ESCAPES = {
    [byte('"')] = '"', [byte("\\")] = "\\", [byte("/")] = "/",
    [byte("b")] = "\b", [byte("f")] = "\f", [byte("n")] = "\n", [byte("r")] = "\r", [byte("t")] = "\t",
}

-- Raise unless the segment (bytes a..b of the input, already cut out as seg)
-- is well-formed UTF-8.
local function check_utf8(seg, a)
    local i = find(seg, "[\128-\255]")
    while i do
        local cp, n = utf8_decode(seg, i)
        if not cp then fail(a + i - 1, "invalid UTF-8 in string") end
        i = find(seg, "[\128-\255]", i + n)
    end
end

local function read_hex4(pos)
    local h = sub(S, pos, pos + 3)
    if not find(h, "^%x%x%x%x$") then fail(pos, "invalid \\u escape") end
    return tonumber(h, 16)
end

local function parse_string(pos)
    -- pos is at the opening quote
    local buf, nbuf = nil, 0
    local i = pos + 1
    while true do
        local j = find(S, '["\\%z\1-\31]', i)
        if not j then fail(pos, "unterminated string") end
        local c = byte(S, j)
        if c == 34 then -- closing quote
            local seg = sub(S, i, j - 1)
            check_utf8(seg, i)
            if not buf then return seg, j + 1 end
            nbuf = nbuf + 1
            buf[nbuf] = seg
            return concat(buf, "", 1, nbuf), j + 1
        end
        if c ~= 92 then fail(j, "unescaped control character in string") end
        buf = buf or {}
        if j > i then
            local seg = sub(S, i, j - 1)
            check_utf8(seg, i)
            nbuf = nbuf + 1
            buf[nbuf] = seg
        end
        local e = byte(S, j + 1)
        if e == nil then fail(pos, "unterminated string") end
        local simple = ESCAPES[e]
        if simple then
            nbuf = nbuf + 1
            buf[nbuf] = simple
            i = j + 2
        elseif e == 117 then -- \u
            local cp = read_hex4(j + 2)
            i = j + 6
            if cp >= 0xD800 and cp <= 0xDBFF then
                if sub(S, i, i + 1) == "\\u" then
                    local lo = read_hex4(i + 2)
                    if lo >= 0xDC00 and lo <= 0xDFFF then
                        cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
                        i = i + 6
                    else
                        cp = 0xFFFD -- unpaired high surrogate; the next escape stands alone
                    end
                else
                    cp = 0xFFFD
                end
            elseif cp >= 0xDC00 and cp <= 0xDFFF then
                cp = 0xFFFD -- unpaired low surrogate
            end
            nbuf = nbuf + 1
            buf[nbuf] = utf8_encode(cp)
        else
            fail(j, "invalid escape '\\" .. char(e) .. "'")
        end
    end
end

local TWO53 = 2 ^ 53

local function parse_number(pos)
    local s, e = find(S, "^-?%d+", pos)
    if not s then
        if ALLOW_NAN and sub(S, pos, pos + 8) == "-Infinity" then return -huge, pos + 9 end
        fail(pos, "invalid number")
    end
    local digits_start = byte(S, pos) == 45 and pos + 1 or pos
    if byte(S, digits_start) == 48 and e > digits_start then
        fail(pos, "leading zeros are not allowed")
    end
    local is_float = false
    local fs, fe = find(S, "^%.%d+", e + 1)
    if fs then
        e, is_float = fe, true
    elseif byte(S, e + 1) == 46 then
        fail(e + 1, "digits expected after decimal point")
    end
    local es, ee = find(S, "^[eE][-+]?%d+", e + 1)
    if es then
        e, is_float = ee, true
    elseif find(S, "^[eE]", e + 1) then
        fail(e + 1, "digits expected in exponent")
    end
    local text = sub(S, pos, e)
    local x = tonumber(text)
    if EXACT then
        if is_float then
            if x == floor(x) then return setmetatable({ value = x, repr = float_repr(x) }, number_mt), e + 1 end
        elseif x >= TWO53 or x <= -TWO53 then
            return setmetatable({ value = x, repr = text }, number_mt), e + 1
        end
    end
    if x == 0 and not is_float then x = 0 end -- "-0" is the integer 0
    return x, e + 1
end

local parse_value

local function parse_array(pos, depth)
    if depth > MAX_DEPTH then fail(pos, "too deeply nested") end
    local t, n = {}, 0
    KIND[t] = "array"
    pos = skip_ws(pos + 1)
    if byte(S, pos) == 93 then return t, pos + 1 end
    while true do
        local v
        v, pos = parse_value(pos, depth)
        n = n + 1
        t[n] = v
        pos = skip_ws(pos)
        local c = byte(S, pos)
        if c == 93 then return t, pos + 1 end
        if c ~= 44 then fail(pos, "expected ',' or ']' but found " .. describe(pos)) end
        pos = skip_ws(pos + 1)
    end
end

local function parse_object(pos, depth)
    if depth > MAX_DEPTH then fail(pos, "too deeply nested") end
    local t, keys, n = {}, {}, 0
    KIND[t] = "object"
    ORDER[t] = keys
    pos = skip_ws(pos + 1)
    if byte(S, pos) == 125 then return t, pos + 1 end
    while true do
        if byte(S, pos) ~= 34 then fail(pos, "expected string key but found " .. describe(pos)) end
        local k
        k, pos = parse_string(pos)
        pos = skip_ws(pos)
        if byte(S, pos) ~= 58 then fail(pos, "expected ':' but found " .. describe(pos)) end
        local v
        v, pos = parse_value(skip_ws(pos + 1), depth)
        if t[k] == nil then
            n = n + 1
            keys[n] = k
        end
        t[k] = v
        pos = skip_ws(pos)
        local c = byte(S, pos)
        if c == 125 then return t, pos + 1 end
        if c ~= 44 then fail(pos, "expected ',' or '}' but found " .. describe(pos)) end
        pos = skip_ws(pos + 1)
    end
end

parse_value = function(pos, depth)
    local c = byte(S, pos)
    if c == 34 then return parse_string(pos) end
    if c == 123 then return parse_object(pos, depth + 1) end
    if c == 91 then return parse_array(pos, depth + 1) end
    if c == 45 or (c and c >= 48 and c <= 57) then return parse_number(pos) end
    if c == 116 and sub(S, pos, pos + 3) == "true" then return true, pos + 4 end
    if c == 102 and sub(S, pos, pos + 4) == "false" then return false, pos + 5 end
    if c == 110 and sub(S, pos, pos + 3) == "null" then return json.null, pos + 4 end
    if ALLOW_NAN then
        if c == 78 and sub(S, pos, pos + 2) == "NaN" then return 0 / 0, pos + 3 end
        if c == 73 and sub(S, pos, pos + 7) == "Infinity" then return huge, pos + 8 end
    end
    if c == nil then fail(pos, "unexpected end of input, expected a value") end
    fail(pos, "expected a value but found " .. describe(pos))
end

local function decode_text()
    if sub(S, 1, 3) == "\239\187\191" then fail(1, "unexpected UTF-8 byte order mark") end
    local val, p = parse_value(skip_ws(1), 0)
    p = skip_ws(p)
    if p <= #S then fail(p, "extra data after the value: " .. describe(p)) end
    return val
end

--- Decode JSON text.  opts.exact: box numbers a double would misrepresent (see
--- the header).  opts.allow_nan: accept NaN, Infinity, -Infinity as Python's
--- json.loads does.  Returns value, or nil and an error message.
function json.decode(text, opts)
    if type(text) ~= "string" then error("json.decode: string expected, got " .. type(text), 2) end
    S = text
    EXACT = opts and opts.exact or false
    ALLOW_NAN = opts and opts.allow_nan or false
    local ok, v = pcall(decode_text)
    S = nil
    if ok then return v end
    if getmetatable(v) == decode_error_mt then return nil, "json.decode: " .. v.msg end
    error(v, 0)
end

------------------------------------------------------------------------------
-- Encoder
------------------------------------------------------------------------------

local ESCAPE_OUT = {
    ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
    ["\b"] = "\\b", ["\f"] = "\\f",
}
for i = 0, 31 do
    local c = char(i)
    if not ESCAPE_OUT[c] then ESCAPE_OUT[c] = format("\\u%04x", i) end
end

local function escape_ascii(s)
    -- \uXXXX for every non-ASCII code point, surrogate pairs above the BMP
    local out, n, i = {}, 0, 1
    local len = #s
    while i <= len do
        local j = find(s, "[\128-\255]", i)
        if not j then
            n = n + 1
            out[n] = sub(s, i)
            break
        end
        if j > i then
            n = n + 1
            out[n] = sub(s, i, j - 1)
        end
        local cp, l = utf8_decode(s, j)
        if not cp then error(format("json.encode: invalid UTF-8 in string at byte %d", j), 0) end
        n = n + 1
        if cp >= 0x10000 then
            local v = cp - 0x10000
            out[n] = format("\\u%04x\\u%04x", 0xD800 + rshift(v, 10), 0xDC00 + band(v, 0x3FF))
        else
            out[n] = format("\\u%04x", cp)
        end
        i = j + l
    end
    return concat(out)
end

local function quote(s, ensure_ascii)
    s = s:gsub('[%z\1-\31"\\]', ESCAPE_OUT)
    if ensure_ascii and find(s, "[\128-\255]") then s = escape_ascii(s) end
    return '"' .. s .. '"'
end
json.quote = quote

local function encode_key(k, ensure_ascii)
    local tk = type(k)
    if tk == "string" then return quote(k, ensure_ascii) end
    if tk == "number" then return '"' .. number_repr(k) .. '"' end
    if tk == "boolean" then return k and '"true"' or '"false"' end
    error("json.encode: object key of type " .. tk .. " cannot be encoded", 0)
end

local encode_value

local function encode_number(x, o)
    if (x ~= x or x == huge or x == -huge) and not o.allow_nan then
        error("json.encode: out of range float value " .. tostring(x), 0)
    end
    return number_repr(x)
end

encode_value = function(v, o, buf, depth, seen)
    local tv = type(v)
    if tv == "string" then
        buf[#buf + 1] = quote(v, o.ensure_ascii)
    elseif tv == "number" then
        buf[#buf + 1] = encode_number(v, o)
    elseif tv == "boolean" then
        buf[#buf + 1] = v and "true" or "false"
    elseif v == nil or is_null(v) then
        buf[#buf + 1] = "null"
    elseif is_box(v) then
        if (v.value ~= v.value or v.value == huge or v.value == -huge) and not o.allow_nan then
            error("json.encode: out of range float value " .. v.repr, 0)
        end
        buf[#buf + 1] = v.repr
    elseif CJSON_EMPTY_ARRAY ~= nil and v == CJSON_EMPTY_ARRAY then
        buf[#buf + 1] = "[]"
    elseif tv == "table" then
        if seen[v] then error("json.encode: circular reference", 0) end
        seen[v] = true
        local indent = o.indent
        local nl_in, nl_out
        if indent then
            nl_in = "\n" .. string.rep(indent, depth + 1)
            nl_out = "\n" .. string.rep(indent, depth)
        end
        if kind_of(v) == "array" then
            local n = #v
            if n == 0 then
                buf[#buf + 1] = "[]"
            else
                buf[#buf + 1] = indent and ("[" .. nl_in) or "["
                for i = 1, n do
                    if i > 1 then buf[#buf + 1] = indent and (o.item_sep .. nl_in) or o.item_sep end
                    encode_value(v[i], o, buf, depth + 1, seen)
                end
                buf[#buf + 1] = indent and (nl_out .. "]") or "]"
            end
        else
            local keys = keys_of(v)
            if o.sort_keys then sort(keys, function(a, b) return tostring(a) < tostring(b) end) end
            if #keys == 0 then
                buf[#buf + 1] = "{}"
            else
                buf[#buf + 1] = indent and ("{" .. nl_in) or "{"
                for i = 1, #keys do
                    local k = keys[i]
                    if i > 1 then buf[#buf + 1] = indent and (o.item_sep .. nl_in) or o.item_sep end
                    buf[#buf + 1] = encode_key(k, o.ensure_ascii)
                    buf[#buf + 1] = o.key_sep
                    encode_value(v[k], o, buf, depth + 1, seen)
                end
                buf[#buf + 1] = indent and (nl_out .. "}") or "}"
            end
        end
        seen[v] = nil
    else
        error("json.encode: value of type " .. tv .. " cannot be encoded", 0)
    end
end

local DEFAULTS = { item_sep = ", ", key_sep = ": ", ensure_ascii = false, allow_nan = true }

--- Encode a value as Python's json.dumps would, by default with ensure_ascii=False.
--- opts: ensure_ascii, sort_keys, allow_nan (default true, writes NaN/Infinity),
--- indent (number of spaces or a string; separators become "," and ": "),
--- separators = {item, key}, compact = true (same as separators {",", ":"}).
function json.encode(value, opts)
    local o = DEFAULTS
    if opts then
        if type(opts) ~= "table" then error("json.encode: options must be a table", 2) end
        o = { item_sep = ", ", key_sep = ": ", ensure_ascii = opts.ensure_ascii or false,
                    sort_keys = opts.sort_keys, allow_nan = opts.allow_nan ~= false }
        if opts.indent ~= nil then
            o.indent = type(opts.indent) == "number" and string.rep(" ", opts.indent) or tostring(opts.indent)
            o.item_sep = ","
        end
        if opts.compact then o.item_sep, o.key_sep = ",", ":" end
        if opts.separators then o.item_sep, o.key_sep = opts.separators[1], opts.separators[2] end
    end
    local buf = {}
    local ok, err = pcall(encode_value, value, o, buf, 0, {})
    if not ok then error(err, 2) end
    return concat(buf)
end

return json
