--[[
glm53.util.base64 - base64 decoding (standard and URL-safe alphabets; whitespace ignored; padding optional) and
encoding (standard alphabet, padded).

    local base64 = require("glm53.util.base64")
    local bytes, err = base64.decode("aGVsbG8=")     -- "hello"
    local text = base64.encode("hello")              -- "aGVsbG8="

Used for image data URLs and for the tokenizer CLI's raw-byte inputs. Argument errors raise; malformed input
returns nil, err with the byte position.
]]
local ffi = require("ffi")

local M = {}

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local value = {}
do
    for i = 1, 64 do value[ALPHABET:byte(i)] = i - 1 end
    value[("-"):byte()] = 62   -- URL-safe alphabet
    value[("_"):byte()] = 63
end

function M.decode(s)
    if type(s) ~= "string" then error("base64.decode: expected a string", 2) end
    local n = #s
    local out = ffi.new("uint8_t[?]", math.floor(n * 3 / 4) + 3)
    local src = ffi.cast("const uint8_t *", s)
    local acc, bits, k, pad = 0, 0, 0, false
    for i = 0, n - 1 do
        local c = src[i]
        if c == 61 then         -- '='
            pad = true
        elseif c == 32 or c == 10 or c == 13 or c == 9 then   -- whitespace
        else
            local v = value[c]
            if v == nil or pad then return nil, "invalid base64 at byte " .. (i + 1) end
            acc = acc * 64 + v
            bits = bits + 6
            if bits >= 8 then
                bits = bits - 8
                local b = math.floor(acc / 2 ^ bits)
                out[k] = b
                k = k + 1
                acc = acc - b * 2 ^ bits
            end
        end
    end
    return ffi.string(out, k)
end

function M.encode(s)
    if type(s) ~= "string" then error("base64.encode: expected a string", 2) end
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local n = a * 65536 + (b or 0) * 256 + (c or 0)
        for q = 3, 0, -1 do
            local v = math.floor(n / 64 ^ q) % 64
            out[#out + 1] = (q == 1 and not b or q == 0 and not c) and "=" or ALPHABET:sub(v + 1, v + 1)
        end
    end
    return table.concat(out)
end

return M
