#!/usr/bin/env luajit
--[[
train_tiny_tokenizer.lua - trains the bundled tokenizer of the tiny demo model, models/tiny/tokenizer.json.

    luajit scripts/train_tiny_tokenizer.lua [text] [out]
    (defaults: scripts/data/tiny_tokenizer_train.txt models/tiny/tokenizer.json)

The result has GLM-5.3's layout at a small scale: byte-level BPE with the same split regex, normaliser,
pre-tokenizer, decoder and ignore_merges as GLM-5.3's tokenizer.json; a base vocabulary of exactly 768 ids
(the 256 bytes, id = byte value, then 512 merges learned here); then GLM-5.3's 36 added tokens in GLM-5.3's
order at ids 768..803 (GLM-5.3: 154820..154855), the first 18 special as in GLM's file. So id(t) - 768 =
GLM id(t) - 154820 for every added token t.

Training is plain BPE: split the text with the GLM-5.3 regex (the text is ASCII, where this script's
ASCII-only splitter is exact), count adjacent pairs over the pieces weighted by frequency, merge the most
frequent (ties: the smaller left id, then the smaller right id; a pair whose concatenation is already a token
is skipped), repeat 512 times. Deterministic: the committed file is reproduced byte for byte.
]]
local root = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path

local cjson = require("cjson")
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")

local args = cli.parse_or_exit(arg, {
    prog = "train_tiny_tokenizer.lua",
    usage = "luajit scripts/train_tiny_tokenizer.lua [TEXT [OUT]]",
    summary = "Trains the bundled tokenizer (byte-level BPE in GLM-5.3's layout) from TEXT into OUT (defaults: " ..
              "scripts/data/tiny_tokenizer_train.txt, models/tiny/tokenizer.json).",
    args = { { "text", metavar = "TEXT", optional = true }, { "out", metavar = "OUT", optional = true } },
})
local text_path = args.text or root .. "/scripts/data/tiny_tokenizer_train.txt"
local out_path = args.out or root .. "/models/tiny/tokenizer.json"
local N_MERGES = 512

local ADDED = {   -- GLM-5.3 ids 154820.. in order; the first 18 are special
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
    "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
    "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
}
local N_SPECIAL = 18
local SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" ..
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

local text = assert(file.read_file(text_path))
assert(not text:find("[\128-\255]"), "the training text must be ASCII (the splitter below is exact for ASCII only)")

---------------------------------------------------------------------------------------------------------------
-- The GLM-5.3 split regex on ASCII text (same alternatives, same order as core/tokenizer_split.c)
---------------------------------------------------------------------------------------------------------------
local function is_letter(c) return c and c:match("%a") ~= nil end
local function is_digit(c) return c and c:match("%d") ~= nil end
local function is_space(c) return c and c:match("[ \t\n\v\f\r]") ~= nil end
local function is_other(c) return c and not (is_letter(c) or is_digit(c) or is_space(c)) end

local function split(s)
    local pieces, i, n = {}, 1, #s
    local function at(k) return k <= n and s:sub(k, k) or nil end
    while i <= n do
        local c, c1, e = at(i), at(i + 1), nil
        local l1, l2 = c1 and c1:lower(), at(i + 2) and at(i + 2):lower()
        if c == "'" and (l1 == "s" or l1 == "t" or l1 == "m" or l1 == "d") then
            e = i + 1
        elseif c == "'" and ((l1 == "r" or l1 == "v") and l2 == "e" or l1 == "l" and l2 == "l") then
            e = i + 2
        elseif is_letter(c) or (c ~= "\r" and c ~= "\n" and not is_digit(c) and is_letter(c1)) then
            e = is_letter(c) and i or i + 1
            while is_letter(at(e + 1)) do e = e + 1 end
        elseif is_digit(c) then
            e = i
            while e < i + 2 and is_digit(at(e + 1)) do e = e + 1 end
        elseif is_other(c) or (c == " " and is_other(c1)) then
            e = is_other(c) and i or i + 1
            while is_other(at(e + 1)) do e = e + 1 end
            while at(e + 1) == "\r" or at(e + 1) == "\n" do e = e + 1 end
        else   -- whitespace
            local j, last_nl, count = i, nil, 0
            while is_space(at(j)) do
                if at(j) == "\r" or at(j) == "\n" then last_nl = j end
                j, count = j + 1, count + 1
            end
            if last_nl then e = last_nl
            elseif j > n then e = n
            elseif count >= 2 then e = j - 2
            else e = j - 1 end
        end
        pieces[#pieces + 1] = s:sub(i, e)
        i = e + 1
    end
    return pieces
end

---------------------------------------------------------------------------------------------------------------
-- BPE training
---------------------------------------------------------------------------------------------------------------
local counts = {}
for _, p in ipairs(split(text)) do counts[p] = (counts[p] or 0) + 1 end
local words = {}   -- { syms = {ids}, n = count }, in a fixed order
local keys = {}
for p in pairs(counts) do keys[#keys + 1] = p end
table.sort(keys)
for _, p in ipairs(keys) do
    local syms = {}
    for k = 1, #p do syms[k] = p:byte(k) end
    words[#words + 1] = { syms = syms, n = counts[p] }
end

local bytes_of, id_of = {}, {}   -- token id -> raw bytes, raw bytes -> id
for b = 0, 255 do bytes_of[b] = string.char(b); id_of[string.char(b)] = b end
local merges = {}

for m = 1, N_MERGES do
    local pair_count = {}
    for _, w in ipairs(words) do
        local s = w.syms
        for k = 1, #s - 1 do
            local key = s[k] * 65536 + s[k + 1]
            pair_count[key] = (pair_count[key] or 0) + w.n
        end
    end
    local best, best_n = nil, 0
    for key, n in pairs(pair_count) do
        local a, b = math.floor(key / 65536), key % 65536
        if not id_of[bytes_of[a] .. bytes_of[b]] and (n > best_n or (n == best_n and key < best)) then
            best, best_n = key, n
        end
    end
    assert(best, "the training text has too few distinct pairs for " .. N_MERGES .. " merges")
    local a, b = math.floor(best / 65536), best % 65536
    local id = 255 + m
    bytes_of[id] = bytes_of[a] .. bytes_of[b]
    id_of[bytes_of[id]] = id
    merges[m] = { a, b }
    for _, w in ipairs(words) do
        local s, out, k = w.syms, {}, 1
        while k <= #s do
            if k < #s and s[k] == a and s[k + 1] == b then
                out[#out + 1] = id
                k = k + 2
            else
                out[#out + 1] = s[k]
                k = k + 1
            end
        end
        w.syms = out
    end
end

---------------------------------------------------------------------------------------------------------------
-- tokenizer.json, in the layout of GLM's own file
---------------------------------------------------------------------------------------------------------------
-- GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the rest for U+0100...
local byte_char, extra = {}, 256
local function utf8(cp)
    if cp < 0x80 then return string.char(cp) end
    return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
end
for b = 0, 255 do
    local printable = (b >= 33 and b <= 126) or (b >= 0xA1 and b <= 0xAC) or (b >= 0xAE and b <= 0xFF)
    if printable then byte_char[b] = utf8(b) else byte_char[b] = utf8(extra); extra = extra + 1 end
end
local function spell(id) return (bytes_of[id]:gsub(".", function(c) return byte_char[c:byte()] end)) end

local function enc(v) return (cjson.encode(v):gsub("\\/", "/")) end
local out = {}
local function w(s) out[#out + 1] = s end
w('{\n  "version": "1.0",\n  "truncation": null,\n  "padding": null,\n  "added_tokens": [\n')
for k, content in ipairs(ADDED) do
    w(('    {"id": %d, "content": %s, "single_word": false, "lstrip": false, "rstrip": false, ' ..
       '"normalized": false, "special": %s}%s\n'):format(767 + k, enc(content), k <= N_SPECIAL and "true" or "false",
                                                         k < #ADDED and "," or ""))
end
w('  ],\n  "normalizer": null,\n')
w('  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [\n')
w('    {"type": "Split", "pattern": {"Regex": ' .. enc(SPLIT) .. '}, "behavior": "Isolated", "invert": false},\n')
w('    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},\n')
w('  "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},\n')
w('  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},\n')
w('  "model": {\n    "type": "BPE",\n    "dropout": null,\n    "unk_token": null,\n')
w('    "continuing_subword_prefix": null,\n    "end_of_word_suffix": null,\n    "fuse_unk": false,\n')
w('    "byte_fallback": false,\n    "ignore_merges": true,\n    "vocab": {\n')
for id = 0, 255 + N_MERGES do
    w(('      %s: %d%s\n'):format(enc(spell(id)), id, id < 255 + N_MERGES and "," or ""))
end
w('    },\n    "merges": [\n')
for m, p in ipairs(merges) do
    w(('      [%s, %s]%s\n'):format(enc(spell(p[1])), enc(spell(p[2])), m < #merges and "," or ""))
end
w('    ]\n  }\n}\n')

assert(file.write_file(out_path, table.concat(out)))
io.stderr:write(("train_tiny_tokenizer.lua: %d base tokens + %d added -> %s\n"):format(256 + N_MERGES, #ADDED,
                                                                                      out_path))
