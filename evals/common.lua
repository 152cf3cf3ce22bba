-- evals/common.lua: what the task modules share, ported from the reference harnesses (Python) so that
-- extraction and scoring give what those harnesses give on the same text.
--
--   text(s)                      the string Python would hold: invalid UTF-8 replaced as
--                                bytes.decode("utf-8", "replace") does
--   lower, strip, split_count,   str.lower(), str.strip(), len(str.split()), str.replace()
--   replace
--   findall, search, sub         re.findall, re.search, re.sub (literal replacement) over PCRE2
--   regex_filter                 lm-eval's "regex" filter + "take_first"
--   multi_choice_filter          lm-eval's "multi_choice_regex" filter + "take_first"
--   exact_match                  lm-eval's exact_match metric for one prediction
--   tiger_extract                MMLU-Pro's (TIGER-AI-Lab) three-stage letter extraction
--   lm_eval_prompt               lm-eval's fewshot_context: text, one chat turn, or multi-turn
--   permutation, shuffle, below, key
--                                seeded shuffles and draws (FNV-1a 64 + SplitMix64)
--   load                         JSONL items with file:line errors, repeats with id suffixes
--   prompt_args, matcher         the argument handling of every prompt() and match()
--
-- Python's re and PCRE2 agree on these patterns once PCRE2 runs in UTF + UCP mode with LF newlines,
-- except where this file closes the gap (docs/evals.md, "Regex semantics", lists every case):
--   \s      Python: every str.isspace() code point; PCRE2 UCP leaves out U+001C..U+001F and adds
--           U+180E. Patterns are rewritten to an explicit class of Python's whitespace.
--   bytes   Python matches code points of decoded text; subjects go through text() first.
--   empty matches in findall/sub follow Python 3.7+ (an empty match may follow a non-empty one;
--           after an empty match the next one must not be empty at the same place).
-- Equal by construction (Unicode 14.0 on both sides, Python 3.11 / PCRE2 10.42): \d = Nd,
-- \w = L, N and "_", \b from \w, \p{P}; `.` stops only at "\n"; `$` matches at the end and before a
-- final "\n".
--
-- Argument errors raise; runtime failures (unreadable file, bad JSON line) return nil, err.

local bit = require("bit")
local cjson = require("cjson.safe").new()
local rex = require("rex_pcre2")
local U = require("evals.python_unicode")

local byte, char, concat, format, sub = string.byte, string.char, table.concat, string.format, string.sub
local bor, band, bxor, rshift, lshift = bit.bor, bit.band, bit.bxor, bit.rshift, bit.lshift
local floor = math.floor

local M = {}

local function argcheck(ok, n, fname, msg)
    if not ok then error(format("bad argument #%d to '%s' (%s)", n, fname, msg), 3) end
end
M.argcheck = argcheck

------------------------------------------------------------------------------
-- UTF-8 and Python's view of Unicode
------------------------------------------------------------------------------

local REPLACEMENT = "\239\191\189" -- U+FFFD

local function utf8_char(cp)
    if cp < 0x80 then return char(cp) end
    if cp < 0x800 then return char(0xC0 + rshift(cp, 6), 0x80 + band(cp, 0x3F)) end
    if cp < 0x10000 then
        return char(0xE0 + rshift(cp, 12), 0x80 + band(rshift(cp, 6), 0x3F), 0x80 + band(cp, 0x3F))
    end
    return char(0xF0 + rshift(cp, 18), 0x80 + band(rshift(cp, 12), 0x3F),
        0x80 + band(rshift(cp, 6), 0x3F), 0x80 + band(cp, 0x3F))
end

-- Allowed range of the second byte after each lead byte (Unicode table 3-7); later bytes are 80..BF.
local function second_range(lead)
    if lead == 0xE0 then return 0xA0, 0xBF end
    if lead == 0xED then return 0x80, 0x9F end
    if lead == 0xF0 then return 0x90, 0xBF end
    if lead == 0xF4 then return 0x80, 0x8F end
    return 0x80, 0xBF
end

local function sequence_length(lead)
    if lead >= 0xC2 and lead <= 0xDF then return 2 end
    if lead >= 0xE0 and lead <= 0xEF then return 3 end
    if lead >= 0xF0 and lead <= 0xF4 then return 4 end
    return 0 -- 80..C1 and F5..FF never start a character
end

--- The text Python works on. Valid UTF-8 comes back unchanged; each maximal ill-formed subsequence becomes
-- one U+FFFD, which is what CPython's decoder does with errors="replace".
function M.text(s)
    argcheck(type(s) == "string", 1, "text", "string expected, got " .. type(s))
    if not s:find("[\128-\255]") then return s end
    local out, n, i, len, start = {}, 0, 1, #s, 1
    while i <= len do
        local b = byte(s, i)
        if b < 0x80 then
            i = i + 1
        else
            local need, j = sequence_length(b), i + 1
            if need > 0 then
                local lo, hi = second_range(b)
                while j < i + need do
                    local c = byte(s, j)
                    if not c or c < lo or c > hi then break end
                    lo, hi, j = 0x80, 0xBF, j + 1
                end
            end
            if need > 0 and j == i + need then
                i = j
            else -- bytes i..j-1 are one maximal subpart
                n = n + 1; out[n] = sub(s, start, i - 1)
                n = n + 1; out[n] = REPLACEMENT
                i, start = j, j
            end
        end
    end
    if start == 1 then return s end
    n = n + 1; out[n] = sub(s, start)
    return concat(out, "", 1, n)
end

-- Decodes valid UTF-8 into code points.
local function code_points(s)
    local cps, n, i, len = {}, 0, 1, #s
    while i <= len do
        local b = byte(s, i)
        local cp, k
        if b < 0x80 then cp, k = b, 1
        elseif b < 0xE0 then cp, k = band(b, 0x1F), 2
        elseif b < 0xF0 then cp, k = band(b, 0x0F), 3
        else cp, k = band(b, 0x07), 4 end
        for j = i + 1, i + k - 1 do cp = bor(lshift(cp, 6), band(byte(s, j), 0x3F)) end
        n = n + 1; cps[n] = cp
        i = i + k
    end
    return cps, n
end

local function parse_ranges(spec) -- "a-b c ..." (hex) -> flat sorted list {a1, b1, a2, b2, ...}
    local r = {}
    for a, b in spec:gmatch("(%x+)%-?(%x*)") do
        r[#r + 1] = tonumber(a, 16)
        r[#r + 1] = b ~= "" and tonumber(b, 16) or r[#r]
    end
    return r
end

local function in_ranges(r, cp)
    local lo, hi = 1, #r / 2
    while lo <= hi do
        local mid = floor((lo + hi) / 2)
        if cp < r[2 * mid - 1] then hi = mid - 1
        elseif cp > r[2 * mid] then lo = mid + 1
        else return true end
    end
    return false
end

local LOWER = {} -- code point -> lowered UTF-8
for first, count, stride, delta in U.lower:gmatch("(%x+):(%x+):(%x+):(%-?%x+)") do
    first, count, stride = tonumber(first, 16), tonumber(count, 16), tonumber(stride, 16)
    local d = delta:sub(1, 1) == "-" and -tonumber(delta:sub(2), 16) or tonumber(delta, 16)
    for k = 0, count - 1 do
        local cp = first + k * stride
        LOWER[cp] = utf8_char(cp + d)
    end
end
for cp, seq in pairs(U.lower_special) do
    local parts = {}
    for k = 1, #seq do parts[k] = utf8_char(seq[k]) end
    LOWER[cp] = concat(parts)
end
local CASE_IGNORABLE, CASED = parse_ranges(U.case_ignorable), parse_ranges(U.cased)
local WHITESPACE = parse_ranges(U.whitespace)

-- A capital sigma lowers to the final form when a cased letter comes before it and none after it,
-- case-ignorable code points skipped on both sides (CPython's handle_capital_sigma).
local function final_sigma(cps, n, i)
    local j = i - 1
    while j >= 1 and in_ranges(CASE_IGNORABLE, cps[j]) do j = j - 1 end
    if j < 1 or not in_ranges(CASED, cps[j]) then return false end
    j = i + 1
    while j <= n and in_ranges(CASE_IGNORABLE, cps[j]) do j = j + 1 end
    return j > n or not in_ranges(CASED, cps[j])
end

--- Python's str.lower() (full case mapping, final sigma included) of valid UTF-8.
function M.lower(s)
    if not s:find("[A-Z\128-\255]") then return s end
    if not s:find("[\128-\255]") then return s:lower() end
    local cps, n = code_points(s)
    local out = {}
    for i = 1, n do
        local cp = cps[i]
        if cp == 0x3A3 then
            out[i] = final_sigma(cps, n, i) and "\207\130" or "\207\131"
        else
            out[i] = LOWER[cp] or utf8_char(cp)
        end
    end
    return concat(out, "", 1, n)
end

-- Python's whitespace as the body of a PCRE2 character class.
local WS_CLASS
do
    local parts = {}
    for k = 1, #WHITESPACE, 2 do
        local a, b = WHITESPACE[k], WHITESPACE[k + 1]
        parts[#parts + 1] = a == b and format("\\x{%x}", a) or format("\\x{%x}-\\x{%x}", a, b)
    end
    WS_CLASS = concat(parts)
end

------------------------------------------------------------------------------
-- Python re over PCRE2
------------------------------------------------------------------------------

local F = rex.flags()
local COMPILE_FLAGS = bor(F.UTF, F.UCP)
local NOTEMPTY_ATSTART = F.NOTEMPTY_ATSTART

-- Rewrites the parts of a Python pattern whose PCRE2 meaning differs (see the top of the file). Only
-- what the task patterns need is accepted; anything else that would differ is refused, not guessed.
local function translate(pattern)
    local out, i, len, in_class, class_start = {}, 1, #pattern, false, 0
    while i <= len do
        local c = sub(pattern, i, i)
        if c == "\\" then
            local e = sub(pattern, i + 1, i + 1)
            if e == "s" then
                out[#out + 1] = in_class and WS_CLASS or "[" .. WS_CLASS .. "]"
            elseif e == "S" or e == "Z" or e == "" then
                error("python pattern not supported here: \\" .. e .. " in " .. pattern, 3)
            else
                out[#out + 1] = "\\" .. e
            end
            i = i + 2
        else
            if in_class then
                if c == "]" and i > class_start then in_class = false
                elseif c == "[" and sub(pattern, i + 1, i + 1) == ":" then
                    error("python pattern not supported here: [: inside a class in " .. pattern, 3)
                end
            elseif c == "[" then
                in_class = true
                class_start = i + 1 -- a "]" right after "[" or "[^" is a literal in both dialects
                if sub(pattern, i + 1, i + 1) == "^" then class_start = i + 2 end
            end
            out[#out + 1] = c
            i = i + 1
        end
    end
    return "(*LF)" .. concat(out)
end

local compiled = {}

local function compile(pattern)
    local r = compiled[pattern]
    if not r then
        local ok, re = pcall(rex.new, translate(pattern), COMPILE_FLAGS)
        if not ok then error("bad pattern " .. pattern .. ": " .. tostring(re), 3) end
        r = { re = re, groups = re:fullinfo().CAPTURECOUNT }
        compiled[pattern] = r
    end
    return r
end

-- Calls fn(s, e, caps) for each match in Python's findall/sub order. s..e are byte offsets (e = s - 1
-- for an empty match), caps the PCRE2 capture offsets {s1, e1, s2, e2, ...} with false for unset groups.
local function each_match(r, text, fn)
    local pos, flags, len = 1, 0, #text
    while pos <= len + 1 do
        local ok, s, e, caps = pcall(r.re.exec, r.re, text, pos, flags)
        if not ok then error("regex match failed: " .. tostring(s), 3) end
        if not s then return end
        fn(s, e, caps)
        flags = e < s and NOTEMPTY_ATSTART or 0
        pos = e + 1
    end
end

local function group(text, caps, k)
    local s = caps[2 * k - 1]
    if not s then return nil end
    return sub(text, s, caps[2 * k])
end

--- re.findall(pattern, text): whole matches without groups, group 1's text with one group (""
-- where it did not take part), a list of every group's text with more.
function M.findall(pattern, text)
    argcheck(type(pattern) == "string", 1, "findall", "string expected")
    argcheck(type(text) == "string", 2, "findall", "string expected")
    local r, out = compile(pattern), {}
    text = M.text(text)
    each_match(r, text, function(s, e, caps)
        if r.groups == 0 then
            out[#out + 1] = sub(text, s, e)
        elseif r.groups == 1 then
            out[#out + 1] = group(text, caps, 1) or ""
        else
            local t = {}
            for k = 1, r.groups do t[k] = group(text, caps, k) or "" end
            out[#out + 1] = t
        end
    end)
    return out
end

--- re.search(pattern, text): nil, or the match's text and a list of its groups (false where unset).
function M.search(pattern, text)
    local r = compile(pattern)
    text = M.text(text)
    local ok, s, e, caps = pcall(r.re.exec, r.re, text, 1, 0)
    if not ok then error("regex match failed: " .. tostring(s), 2) end
    if not s then return nil end
    local groups = {}
    for k = 1, r.groups do groups[k] = group(text, caps, k) or false end
    return sub(text, s, e), groups
end

--- re.sub(pattern, repl, text) with a literal replacement.
function M.sub(pattern, repl, text)
    argcheck(not repl:find("\\", 1, true), 2, "sub", "backslashes in replacements are not supported")
    local r, out, last = compile(pattern), {}, 1
    text = M.text(text)
    each_match(r, text, function(s, e)
        out[#out + 1] = sub(text, last, s - 1)
        out[#out + 1] = repl
        last = e + 1
    end)
    out[#out + 1] = sub(text, last)
    return concat(out)
end

--- str.strip() with no argument.
function M.strip(s)
    s = M.text(s)
    local _, e = compile("^\\s+").re:find(s)
    local b = compile("\\s+\\z").re:find(s)
    return sub(s, (e or 0) + 1, (b or #s + 1) - 1)
end

--- str.replace(old, new): every occurrence, left to right, not overlapping.
function M.replace(s, old, new)
    local out, from = {}, 1
    while true do
        local a, b = s:find(old, from, true)
        if not a then break end
        out[#out + 1] = sub(s, from, a - 1)
        out[#out + 1] = new
        from = b + 1
    end
    out[#out + 1] = sub(s, from)
    return concat(out)
end

--- len(str.split()).
function M.split_count(s)
    return #M.findall("[^\\s]+", s)
end

-- Python's escape for a literal inside a pattern: every ASCII character but letters, digits and "_"
-- gets a backslash, which makes it literal in both dialects.
local function escape(s)
    return (s:gsub("[^%w_\128-\255]", "\\%0"))
end

------------------------------------------------------------------------------
-- lm-evaluation-harness: filters and exact_match
------------------------------------------------------------------------------

-- match[group_select] of a Python list.
local function pick(list, group_select)
    local k = group_select >= 0 and group_select + 1 or #list + group_select + 1
    if k < 1 or k > #list then error("group_select " .. group_select .. " is out of range", 3) end
    return list[k]
end

local function first_nonempty(t)
    for k = 1, #t do if t[k] ~= "" then return t[k] end end
    return nil
end

--- lm-eval RegexFilter (lm_eval/filters/extraction.py) then take_first: the stripped text of the
-- selected match (the first non-empty group of it when the pattern has several), or nil where the
-- harness writes its fallback "[invalid]".
function M.regex_filter(text, pattern, group_select)
    local matches = M.findall(pattern, text)
    if #matches == 0 then return nil end
    local m = pick(matches, group_select or 0)
    if type(m) == "table" then
        m = first_nonempty(m)
        if not m then return nil end
    end
    return M.strip(m)
end

-- filter_ignores of MultiChoiceRegexFilter: regexes removed, then str.lower(), then every code point of
-- a Unicode punctuation category (P*) removed.
local function multi_choice_ignores(st, o)
    for _, re in ipairs(o.regexes_to_ignore or {}) do st = M.sub(re, "", st) end
    if o.ignore_case then st = M.lower(st) end
    if o.ignore_punctuation then st = M.sub("\\p{P}", "", st) end
    return st
end

-- find_match of MultiChoiceRegexFilter: nil where Python gets an empty list.
local function find_match(pattern, text, group_select, convert)
    local matches = M.findall(pattern, text)
    if #matches == 0 then return nil end
    local m = pick(matches, group_select)
    if type(m) == "table" then
        m = first_nonempty(m)
        if not m then return "" end
    end
    m = M.strip(m)
    if m ~= "" and convert and convert[m] then m = convert[m] end
    return m
end

--- lm-eval MultiChoiceRegexFilter then take_first: o.pattern on the text; failing that, the choice
-- texts (after the ignore rules, on the text after the same rules) mapped to "(A)".."(Z)"; failing that,
-- ":" then optional whitespace then a bare letter, mapped to "(X)". nil where the harness writes
-- "[invalid]". o: pattern, group_select, ignore_case, ignore_punctuation, regexes_to_ignore.
function M.multi_choice_filter(text, choices, o)
    local gs = o.group_select or 0
    local alternatives, letters, choice_to_alpha, letter_to_target = {}, {}, {}, {}
    for i, c in ipairs(choices) do
        local m = multi_choice_ignores(M.strip(c), o)
        local letter = char(64 + i)
        alternatives[i] = escape(m)
        choice_to_alpha[m] = "(" .. letter .. ")"
        letters[i] = letter
        letter_to_target[letter] = "(" .. letter .. ")"
    end
    local m = find_match(o.pattern, text, gs)
    if m == nil or m == "" then
        m = find_match(concat(alternatives, "|"), multi_choice_ignores(M.text(text), o), gs, choice_to_alpha)
        if m == nil or m == "" then
            m = find_match(":[\\s]*(" .. concat(letters, "|") .. ")", text, gs, letter_to_target)
        end
    end
    if m == nil or m == "" then return nil end
    return m
end

local ASCII_PUNCTUATION = "[!\"#$%%&'()*+,%-./:;<=>?@%[\\%]^_`{|}~]" -- Python's string.punctuation

--- lm-eval's exact_match (exact_match_hf_evaluate in lm_eval/api/metrics.py) for one pair: each of
-- o.regexes_to_ignore removed from both (in order), then o.ignore_case (str.lower), then
-- o.ignore_punctuation (string.punctuation: ASCII only), then equality. A nil prediction (the filter's
-- "[invalid]") never matches.
function M.exact_match(pred, ref, o)
    if pred == nil then return false end
    pred, ref = M.text(pred), M.text(ref)
    for _, re in ipairs(o.regexes_to_ignore or {}) do
        pred, ref = M.sub(re, "", pred), M.sub(re, "", ref)
    end
    if o.ignore_case then pred, ref = M.lower(pred), M.lower(ref) end
    if o.ignore_punctuation then
        pred, ref = pred:gsub(ASCII_PUNCTUATION, ""), ref:gsub(ASCII_PUNCTUATION, "")
    end
    -- The metric compares numpy string arrays, whose fixed-width elements lose trailing NULs.
    return (pred:gsub("%z+$", "")) == (ref:gsub("%z+$", ""))
end

--- lm-eval's Task.fewshot_context (lm_eval/api/task.py) with build_qa_turn and, for one chat turn,
-- multiturn_to_singleturn (lm_eval/api/utils.py). p: description (the system prompt, optional),
-- shots = { {q, a}, ... }, query, format = "text" | "chat" | "multiturn".
-- text: description .. q1 .. " " .. a1 .. "\n\n" .. ... .. query
-- chat: { system = description }, { user = the text without the description }
-- multiturn: { system }, { user = q1 }, { assistant = a1 }, ..., { user = query }
function M.lm_eval_prompt(p)
    local msgs = {}
    if p.description and p.description ~= "" then
        msgs[#msgs + 1] = { role = "system", content = p.description, delimiter = "" }
    end
    for _, shot in ipairs(p.shots or {}) do
        msgs[#msgs + 1] = { role = "user", content = shot[1], delimiter = " " }
        msgs[#msgs + 1] = { role = "assistant", content = shot[2], delimiter = "\n\n" }
    end
    msgs[#msgs + 1] = { role = "user", content = p.query, delimiter = "" }
    local function joined(from)
        local parts = {}
        for k = from, #msgs do parts[#parts + 1] = msgs[k].content .. msgs[k].delimiter end
        return concat(parts)
    end
    if p.format == "text" then return joined(1) end
    local out, first = {}, 1
    if msgs[1].role == "system" then
        out[1] = { role = "system", content = msgs[1].content }
        first = 2
    end
    if p.format == "multiturn" then
        for k = first, #msgs do out[#out + 1] = { role = msgs[k].role, content = msgs[k].content } end
    else
        out[#out + 1] = { role = "user", content = joined(first) }
    end
    return out
end

--- The arguments every prompt(item, opts) takes: returns opts (never nil), the shots to draw from
-- (`shots`, else opts.shots, else none), how many of them opts.fewshot asks for, and the format:
-- opts.format if given, else "text" with shots and "chat" without.
function M.prompt_args(item, opts, shots)
    argcheck(type(item) == "table", 1, "prompt", "item table expected")
    opts = opts or {}
    shots = shots or opts.shots or {}
    local n = opts.fewshot or 0
    argcheck(type(n) == "number" and n >= 0 and n == floor(n), 2, "prompt", "fewshot must be a whole number >= 0")
    argcheck(n <= #shots, 2, "prompt", format("fewshot %d asks for more shots than the %d given", n, #shots))
    local fmt = opts.format or (n > 0 and "text" or "chat")
    argcheck(fmt == "text" or fmt == "chat" or fmt == "multiturn", 2, "prompt",
        "format must be \"text\", \"chat\" or \"multiturn\"")
    return opts, shots, n, fmt
end

--- A task's match(answer, gold, mode): checks its arguments, then returns score(answer, gold, mode).
function M.matcher(score)
    return function(answer, gold, mode)
        argcheck(answer == nil or type(answer) == "string", 1, "match", "answer string or nil expected")
        argcheck(type(gold) == "string", 2, "match", "gold string expected")
        return score(answer, gold, mode)
    end
end

------------------------------------------------------------------------------
-- Seeded choices: FNV-1a 64 of a key string seeds a SplitMix64 stream
------------------------------------------------------------------------------

--- The key of a draw: its parts joined with NUL bytes.
function M.key(...)
    local parts = { ... }
    for k = 1, select("#", ...) do parts[k] = tostring(parts[k]) end
    return concat(parts, "\0")
end

--- FNV-1a 64 of a string (uint64 cdata).
function M.hash64(key)
    local h = 0xcbf29ce484222325ULL
    for k = 1, #key do h = bxor(h, byte(key, k)) * 0x100000001b3ULL end
    return h
end

--- The SplitMix64 generator from a uint64 state: a function giving the next uint64 at each call.
function M.splitmix64(state)
    return function()
        state = state + 0x9e3779b97f4a7c15ULL
        local z = state
        z = bxor(z, rshift(z, 30)) * 0xbf58476d1ce4e5b9ULL
        z = bxor(z, rshift(z, 27)) * 0x94d049bb133111ebULL
        return bxor(z, rshift(z, 31))
    end
end

local function stream(key) return M.splitmix64(M.hash64(key)) end

--- A number in 0..n-1 drawn from the key's stream (first value mod n).
function M.below(n, key)
    argcheck(type(n) == "number" and n >= 1, 1, "below", "n must be >= 1")
    return tonumber(stream(key)() % n)
end

--- A permutation of 1..n from the key (Fisher-Yates from the back, j = 1 + next() % i): perm[k] is the
-- original position shown at position k.
function M.permutation(n, key)
    local perm, next_value = {}, stream(key)
    for k = 1, n do perm[k] = k end
    for i = n, 2, -1 do
        local j = 1 + tonumber(next_value() % i)
        perm[i], perm[j] = perm[j], perm[i]
    end
    return perm
end

--- list reordered by permutation(#list, key), where the element at position `index` went, and the
-- permutation.
function M.shuffle(list, key, index)
    local perm, out, at = M.permutation(#list, key), {}, nil
    for k = 1, #perm do
        out[k] = list[perm[k]]
        if perm[k] == index then at = k end
    end
    return out, at, perm
end

------------------------------------------------------------------------------
-- MMLU-Pro (TIGER-AI-Lab/MMLU-Pro): letter extraction
------------------------------------------------------------------------------

--- The answer chain of evaluate_from_api.py (extract_answer, extract_again, extract_final) after its
-- response.replace('**', ''). Returns the letter and the stage that gave it: "answer is", "Answer:",
-- "last letter", or "random" (a draw over the n_options letters, seeded by guess_key, where the
-- reference draws random.randint(0, len(options) - 1) from Python's random seeded 12345).
function M.tiger_extract(text, n_options, guess_key)
    text = M.text(text):gsub("%*%*", "")
    local _, g = M.search("answer is \\(?([A-J])\\)?", text)
    if g then return g[1], "answer is" end
    _, g = M.search(".*[aA]nswer:\\s*([A-J])", text)
    if g then return g[1], "Answer:" end
    -- extract_final searches (?s)\b[A-J]\b(?!.*\b[A-J]\b): the standalone letter with no standalone
    -- letter after it, i.e. the last of them. Taking the last findall match gives the same letter in
    -- linear time (the lookahead form is quadratic and can reach PCRE2's match limit).
    local letters = M.findall("\\b[A-J]\\b", text)
    if #letters > 0 then return letters[#letters], "last letter" end
    return char(65 + M.below(n_options, guess_key)), "random"
end

------------------------------------------------------------------------------
-- Data
------------------------------------------------------------------------------

--- Reads a JSONL file: make(row, index) turns each decoded object (blank lines skipped; index counts
-- items from 1) into an item or returns nil, reason. decode(line) -> value or nil, err reads a line (default
-- lua-cjson's). Returns the items, or nil, "path:line: reason".
local function read_jsonl(path, make, decode)
    decode = decode or cjson.decode
    local f, err = io.open(path, "rb")
    if not f then return nil, err end
    local items, line_no = {}, 0
    for line in f:lines() do
        line_no = line_no + 1
        if line:find("%S") then
            local row, derr = decode(line)
            local item, reason
            if row == nil then
                reason = "bad JSON: " .. tostring(derr)
            elseif type(row) ~= "table" or row[1] ~= nil then
                reason = "a JSON object expected"
            else
                item, reason = make(row, #items + 1)
            end
            if not item then
                f:close()
                return nil, format("%s:%d: %s", path, line_no, reason)
            end
            items[#items + 1] = item
        end
    end
    f:close()
    return items
end

--- Items repeated opts.repeats times (default 1). With more than one repeat the copies get ids
-- "<id>#1".."<id>#n"; every copy has its repeat number in item.repeat_index. vary(copy, r, original)
-- may then change each copy (a shuffle).
local function expand(items, opts, vary)
    local n = opts.repeats or 1
    argcheck(type(n) == "number" and n >= 1 and n == floor(n), 2, "load", "repeats must be a whole number >= 1")
    local out = {}
    for _, item in ipairs(items) do
        for r = 1, n do
            local copy = {}
            for k, v in pairs(item) do copy[k] = v end
            copy.repeat_index = r
            if n > 1 then copy.id = item.id .. "#" .. r end
            if vary then vary(copy, r, item) end
            out[#out + 1] = copy
        end
    end
    return out
end

--- A task's load(path, opts): the items make(row, index) builds from the JSONL file's rows (see
-- read_jsonl; decode, when given, reads each line instead of lua-cjson), repeated and varied as expand does;
-- nil, "path:line: reason" where a row fails.
function M.load(path, opts, make, vary, decode)
    argcheck(type(path) == "string", 1, "load", "path string expected, got " .. type(path))
    argcheck(opts == nil or type(opts) == "table", 2, "load", "options table expected")
    local items, err = read_jsonl(path, make, decode)
    if not items then return nil, err end
    return expand(items, opts or {}, vary)
end

--- The string field k of a row, or nil and a reason.
function M.field(row, k)
    local v = row[k]
    if type(v) ~= "string" then return nil, format("field %q: string expected, got %s", k, type(v)) end
    return v
end

--- The field k of a row as a list of 1 to max strings, or nil and a reason.
function M.string_list(row, k, max)
    local v = row[k]
    if type(v) ~= "table" or #v < 1 or #v > max then
        return nil, format("field %q: a list of 1 to %d strings expected", k, max)
    end
    for i = 1, #v do
        if type(v[i]) ~= "string" then return nil, format("%s[%d]: string expected", k, i) end
    end
    return v
end

--- The directory part of a path, with its trailing "/" ("" for a bare file name).
function M.dirname(path)
    return path:match("^(.*/)") or ""
end

M.letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

return M
