--[[
glm53.util.base64 - base64 decoding (standard and URL-safe alphabets; whitespace ignored; padding optional) and
encoding (standard alphabet, padded).

    local base64 = require("glm53.util.base64")
    local bytes, err = base64.decode("aGVsbG8=")     -- "hello"
    local text = base64.encode("hello")              -- "aGVsbG8="

Used for image data URLs (read here, and sent by the eval client) and for the tokenizer CLI's raw-byte inputs. Argument errors raise; malformed input
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

-- bytes -> standard base64 with "=" padding.
function M.encode(s)
    if type(s) ~= "string" then error("base64.encode: expected a string", 2) end
    local n = #s
    local out = ffi.new("uint8_t[?]", math.floor((n + 2) / 3) * 4 + 1)
    local src = ffi.cast("const uint8_t *", s)
    local digits = ffi.cast("const uint8_t *", ALPHABET)
    local k = 0
    for i = 0, n - 1, 3 do
        local b1, b2, b3 = src[i], i + 1 < n and src[i + 1] or 0, i + 2 < n and src[i + 2] or 0
        local v = (b1 * 256 + b2) * 256 + b3
        out[k] = digits[math.floor(v / 262144)]
        out[k + 1] = digits[math.floor(v / 4096) % 64]
        out[k + 2] = i + 1 < n and digits[math.floor(v / 64) % 64] or 61
        out[k + 3] = i + 2 < n and digits[v % 64] or 61
        k = k + 4
    end
    return ffi.string(out, k)
end

return M
