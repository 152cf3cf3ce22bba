#!/usr/bin/env luajit
--[[
train_tiny_tokenizer.lua - trains the small byte-level BPE tokenizers of the bundled models.

    luajit scripts/train_tiny_tokenizer.lua [text] [out] [--merges N] [--split-digits]
                                            [--config FILE --template FILE]
    (defaults: scripts/data/tiny_tokenizer_train.txt models/tiny/tokenizer.json, 512 merges)

models/tiny/tokenizer.json is the default run; the trained model's tokenizer (training/tokenizer/, 2000 merges
with --split-digits on a sample of the training corpus) is made by training/make_tokenizer.sh.

The result has GLM-5.3's layout at a small scale: byte-level BPE with the same split regex, normaliser,
pre-tokenizer, decoder and ignore_merges as GLM-5.3's tokenizer.json; a base vocabulary of 256 + N ids (the 256
bytes, id = byte value, then the N merges learned here); then GLM-5.3's 36 added tokens in GLM-5.3's order at ids
256 + N .. 256 + N + 35 (GLM-5.3: 154820..154855), the first 18 special as in GLM's file. So id(t) - (256 + N) =
GLM id(t) - 154820 for every added token t.

Training is plain BPE: cut the text at the added tokens (as HF's tokenizer does before pre-tokenizing), split
each part with the GLM-5.3 regex (the text is ASCII, where this script's ASCII-only splitter is exact), count
adjacent pairs over the pieces weighted by frequency, merge the most frequent (ties: the smaller left id, then
the smaller right id; a pair whose concatenation is already a token is skipped), repeat N times. Pair counts are
updated incrementally, word by word. Deterministic: the committed files are reproduced byte for byte.

--split-digits never merges two digit strings, so numbers stay one token per digit (GLM's regex still cuts
them into runs of at most three): small models learn arithmetic on digits far better than on 1000 number
tokens.

--config FILE also writes a transformers tokenizer_config.json (added tokens, eos/pad "<|endoftext|>") with the
chat template read from --template FILE.
]]
local root = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path

local cjson = require("cjson")
local cli = require("glm53.util.cli")
local file = require("glm53.util.file")

local args = cli.parse_or_exit(arg, {
    prog = "train_tiny_tokenizer.lua",
    usage = "luajit scripts/train_tiny_tokenizer.lua [TEXT [OUT]] [options]",
    summary = "Trains a small byte-level BPE tokenizer in GLM-5.3's layout from TEXT into OUT (defaults: " ..
              "scripts/data/tiny_tokenizer_train.txt, models/tiny/tokenizer.json).",
    options = {
        { "merges", type = "integer", min = 1, default = 512, help = "BPE merges to learn" },
        { "split_digits", flag = true, help = "never merge two digit strings (one token per digit)" },
        { "config", metavar = "FILE", help = "also write a transformers tokenizer_config.json (needs --template)" },
        { "template", metavar = "FILE", help = "the chat template file --config embeds" },
    },
    args = { { "text", metavar = "TEXT", optional = true }, { "out", metavar = "OUT", optional = true } },
})
local text_path = args.text or root .. "/scripts/data/tiny_tokenizer_train.txt"
local out_path = args.out or root .. "/models/tiny/tokenizer.json"
local N_MERGES = args.merges
local SPLIT_DIGITS = args.split_digits == true
if args.config and not args.template then
    io.stderr:write("train_tiny_tokenizer.lua: --config needs --template (the chat template file)\n")
    os.exit(2)
end

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

local function split(s, pieces)
    local i, n = 1, #s
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

-- The parts of the text between added tokens (matched leftmost-longest, as HF matches them).
local function parts_between_added(s)
    local parts, pos, n = {}, 1, #s
    local from = 1
    while true do
        local k = s:find("[<%[/]", pos)
        if not k then break end
        local best = nil
        for _, t in ipairs(ADDED) do
            if (not best or #t > #best) and s:sub(k, k + #t - 1) == t then best = t end
        end
        if best then
            if k > from then parts[#parts + 1] = s:sub(from, k - 1) end
            from = k + #best
            pos = from
        else
            pos = k + 1
        end
        if pos > n then break end
    end
    if from <= n then parts[#parts + 1] = s:sub(from) end
    return parts
end

---------------------------------------------------------------------------------------------------------------
-- BPE training
---------------------------------------------------------------------------------------------------------------
local counts = {}
for _, part in ipairs(parts_between_added(text)) do
    for _, p in ipairs(split(part, {})) do counts[p] = (counts[p] or 0) + 1 end
end
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

-- pair key (left * 65536 + right) -> weighted count; -> set of word indices that hold the pair
local pair_count, where = {}, {}
local function add_pairs(wi, sign)
    local w = words[wi]
    local s, n = w.syms, w.n * sign
    for k = 1, #s - 1 do
        local key = s[k] * 65536 + s[k + 1]
        local c = (pair_count[key] or 0) + n
        if c == 0 then
            pair_count[key], where[key] = nil, nil
        else
            pair_count[key] = c
            if sign > 0 then
                local ws = where[key]
                if not ws then ws = {}; where[key] = ws end
                ws[wi] = true
            end
        end
    end
end
for wi = 1, #words do add_pairs(wi, 1) end

local blocked = {}   -- pairs whose concatenation is already a token (never merged; the set only grows)
for m = 1, N_MERGES do
    local best, best_n
    repeat
        best, best_n = nil, 0
        for key, n in pairs(pair_count) do
            if not blocked[key] and (n > best_n or (n == best_n and key < best)) then best, best_n = key, n end
        end
        assert(best, "the training text has too few distinct pairs for " .. N_MERGES .. " merges")
        local a, b = math.floor(best / 65536), best % 65536
        local taken = id_of[bytes_of[a] .. bytes_of[b]] ~= nil
            or (SPLIT_DIGITS and bytes_of[a]:match("^%d+$") ~= nil and bytes_of[b]:match("^%d+$") ~= nil)
        if taken then blocked[best] = true end
    until not taken
    local a, b = math.floor(best / 65536), best % 65536
    local id = 255 + m
    bytes_of[id] = bytes_of[a] .. bytes_of[b]
    id_of[bytes_of[id]] = id
    merges[m] = { a, b, best_n }
    local holders = {}
    for wi in pairs(where[best]) do holders[#holders + 1] = wi end
    for _, wi in ipairs(holders) do
        local w = words[wi]
        add_pairs(wi, -1)
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
        -- the word leaves the holder sets of the pairs it no longer has
        for j = 1, #s - 1 do
            local key = s[j] * 65536 + s[j + 1]
            if where[key] then where[key][wi] = nil end
        end
        w.syms = out
        add_pairs(wi, 1)
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

local first_added = 256 + N_MERGES
local function enc(v) return (cjson.encode(v):gsub("\\/", "/")) end
-- One line per added token: fmt gets the id, the JSON-encoded content, "true"/"false" for special, and "," or "".
local function added_lines(emit, fmt)
    for k, content in ipairs(ADDED) do
        emit(fmt:format(first_added + k - 1, enc(content), k <= N_SPECIAL and "true" or "false",
                        k < #ADDED and "," or ""))
    end
end
local out = {}
local function w(s) out[#out + 1] = s end
w('{\n  "version": "1.0",\n  "truncation": null,\n  "padding": null,\n  "added_tokens": [\n')
added_lines(w, '    {"id": %d, "content": %s, "single_word": false, "lstrip": false, "rstrip": false, ' ..
               '"normalized": false, "special": %s}%s\n')
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
io.stderr:write(("train_tiny_tokenizer.lua: %d base tokens + %d added -> %s (%d pieces; merge counts %d .. %d)\n")
                :format(256 + N_MERGES, #ADDED, out_path, #words, merges[1][3], merges[#merges][3]))

---------------------------------------------------------------------------------------------------------------
-- tokenizer_config.json (transformers), with the chat template
---------------------------------------------------------------------------------------------------------------
if args.config then
    local template = assert(file.read_file(args.template))
    local c = {}
    local function cw(s) c[#c + 1] = s end
    cw('{\n  "added_tokens_decoder": {\n')
    added_lines(cw, '    "%d": {"content": %s, "lstrip": false, "normalized": false, "rstrip": false, ' ..
                    '"single_word": false, "special": %s}%s\n')
    cw('  },\n')
    cw('  "chat_template": ' .. enc(template) .. ',\n')
    cw('  "clean_up_tokenization_spaces": false,\n')
    cw('  "do_lower_case": false,\n')
    cw('  "eos_token": "<|endoftext|>",\n')
    cw('  "extra_special_tokens": {},\n')
    cw('  "model_max_length": 131072,\n')
    cw('  "pad_token": "<|endoftext|>",\n')
    cw('  "padding_side": "left",\n')
    cw('  "remove_space": false,\n')
    cw('  "tokenizer_class": "PreTrainedTokenizerFast"\n}\n')
    assert(file.write_file(args.config, table.concat(c)))
    io.stderr:write("train_tiny_tokenizer.lua: tokenizer config with the chat template -> " .. args.config .. "\n")
end
