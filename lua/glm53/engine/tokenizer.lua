--[[
glm53.engine.tokenizer - the C tokenizer (core/tokenizer.c) from LuaJIT, and an incremental detokeniser.

    local tokenizer = require("glm53.engine.tokenizer")
    local tok = assert(tokenizer.load("models/glm53-tiny/tokenizer.json"))   -- or a tiktoken file
    local ids = tok:encode("[gMASK]<sop><|user|>hi")                         -- { 2258, 2260, 2263, 466 }
    print(tok:decode(ids, { skip_special_tokens = true }))              -- "hi"
    local s = tok:stream({ skip_special_tokens = true, stop = { "\n\n" } })
    for _, id in ipairs(ids) do
        local text, stopped = s:push(id)
        io.write(text)
        if stopped then break end
    end
    io.write((s:finish()))
    tok:free()                                                          -- or leave it to the GC

Conventions (as the rest of the package): argument errors raise; runtime failures return nil, err.
Buffers are per tokenizer object and reused, so one tokenizer object should not be used from two coroutines
that interleave calls to encode/decode. The C tokenizer itself is immutable and thread-safe.

Streaming (tok:stream) gives exactly what decode gives for the same ids, in pieces:
  - bytes are held back while they are the unfinished start of a UTF-8 character; bytes that can never become
    one are replaced by U+FFFD with the rule decode uses (Rust's from_utf8_lossy), so
    concat(push deltas) .. finish() == decode(ids, same options);
  - skip_special_tokens drops special added tokens as HF does (their bytes never enter the text, so characters
    split around them still join, as in HF's decode);
  - stop strings may span tokens: text that could be the start of a stop string is held until it is not;
    when one appears, push returns the text before it and stopped = true (and the stop string as a third value).
]]
local core = require("glm53.ffi.core")
local ffi, C = core.ffi, core.C
local byte, sub, find = string.byte, string.sub, string.find

local M = {}

local ERR_OUT_OF_RANGE = C.GLM53_ERR_OUT_OF_RANGE
local ENCODE_SPECIAL_AS_TEXT = C.GLM53_ENCODE_SPECIAL_AS_TEXT
local DECODE_SKIP_SPECIAL = C.GLM53_DECODE_SKIP_SPECIAL

local int32_arr = ffi.typeof("int32_t[?]")
local char_arr = ffi.typeof("char[?]")

---------------------------------------------------------------------------------------------------------------
-- UTF-8 repair, the same rule as the C decoder (maximal ill-formed subsequences become U+FFFD)
---------------------------------------------------------------------------------------------------------------
local REPLACEMENT = "\239\191\189"

-- Bytes of the sequence starting at s[i] that are well-formed so far, and whether they make a character.
local function subpart(s, i, n)
    local b = byte(s, i)
    local need = b < 0x80 and 1 or b < 0xC2 and 0 or b < 0xE0 and 2 or b < 0xF0 and 3 or b < 0xF5 and 4 or 0
    if need <= 1 then return 1, need == 1 end
    local k = 1
    while k < need and i + k <= n do
        local c = byte(s, i + k)
        local lo, hi = 0x80, 0xBF
        if k == 1 then
            if b == 0xE0 then lo = 0xA0 elseif b == 0xED then hi = 0x9F
            elseif b == 0xF0 then lo = 0x90 elseif b == 0xF4 then hi = 0x8F end
        end
        if c < lo or c > hi then return k, false end
        k = k + 1
    end
    return k, k == need
end

-- s with every maximal ill-formed subsequence replaced by U+FFFD.
local function utf8_lossy(s)
    if not s:find("[\128-\255]") then return s end
    local out, i, n, start = {}, 1, #s, 1
    while i <= n do
        if byte(s, i) < 0x80 then
            i = i + 1
        else
            local k, complete = subpart(s, i, n)
            if not complete then
                out[#out + 1] = sub(s, start, i - 1)
                out[#out + 1] = REPLACEMENT
                start = i + k
            end
            i = i + k
        end
    end
    out[#out + 1] = sub(s, start, n)
    return table.concat(out)
end

-- Bytes at the end of s (0-3) that start a character but stop before its end.
local function incomplete_tail(s)
    local n = #s
    for back = 1, 3 do
        if back > n then return 0 end
        local b = byte(s, n - back + 1)
        if b < 0x80 or b > 0xBF then
            local k, complete = subpart(s, n - back + 1, n)
            local need = b < 0xC2 and 0 or b < 0xE0 and 2 or b < 0xF0 and 3 or b < 0xF5 and 4 or 0
            return (not complete and k == back and need > back) and back or 0
        end
    end
    return 0
end

-- Exposed for tools that handle raw bytes the way the tokenizer does (tests, benchmarks).
M.utf8_lossy = utf8_lossy

---------------------------------------------------------------------------------------------------------------
-- Tokenizer objects
---------------------------------------------------------------------------------------------------------------
local Tokenizer = {}
Tokenizer.__index = Tokenizer

local function wrap(handle)
    local self = setmetatable({}, Tokenizer)
    self._h = ffi.gc(handle, C.glm53_tokenizer_free)
    self._cap = 1024
    self._ids = int32_arr(self._cap)         -- encode output / decode input, grown as needed
    self._text_cap = 4096
    self._text = char_arr(self._text_cap)    -- decode output
    self._n = ffi.new("int64_t[1]")
    self._piece = ffi.new("const char *[1]")
    self._pieces = {}                        -- id -> piece, filled as ids are seen (a streamed token's bytes)
    self._specials = {}                      -- id -> whether it is a special added token
    return self
end

local function handle_of(self)
    local h = self._h
    if h == nil then error("tokenizer: used after free()", 3) end
    return h
end

-- Loads a tokenizer.json, or a tiktoken rank file (recognised as not JSON; GLM-5.3's split regex, no special
-- tokens: use load_tiktoken for those). Returns the tokenizer, or nil, err.
function M.load(path)
    if type(path) ~= "string" then error("tokenizer.load: path must be a string", 2) end
    local out = ffi.new("glm53_tokenizer *[1]")
    local ok, err = core.check(C.glm53_tokenizer_load(path, out))
    if not ok then return nil, err end
    return wrap(out[0])
end

-- A tiktoken rank file with special tokens. opts.special: a list of strings, numbered from opts.first_special_id
-- (default: one past the largest rank), or a map {["<|user|>"] = 154827, ...}. opts.pattern: the split regex
-- (default GLM-5.3's).
function M.load_tiktoken(path, opts)
    if type(path) ~= "string" then error("tokenizer.load_tiktoken: path must be a string", 2) end
    opts = opts or {}
    local names, ids = {}, {}
    local special = opts.special or {}
    if type(special) ~= "table" then error("tokenizer.load_tiktoken: opts.special must be a table", 2) end
    if #special > 0 then
        local first = opts.first_special_id
        if first == nil then
            -- one past the largest rank: read the file's ranks
            local f, err = io.open(path, "rb")
            if not f then return nil, err end
            local max = -1
            for line in f:lines() do
                local r = tonumber(line:match("^%S+%s+(%d+)"))
                if r and r > max then max = r end
            end
            f:close()
            first = max + 1
        end
        for i, s in ipairs(special) do names[i], ids[i] = s, first + i - 1 end
    else
        for s, id in pairs(special) do names[#names + 1], ids[#ids + 1] = s, id end
    end
    for i = 1, #names do
        if type(names[i]) ~= "string" or type(ids[i]) ~= "number" then
            error("tokenizer.load_tiktoken: special tokens must be strings with integer ids", 2)
        end
    end
    local n = #names
    local c_names = ffi.new("const char *[?]", math.max(n, 1))
    local c_ids = int32_arr(math.max(n, 1))
    for i = 1, n do c_names[i - 1], c_ids[i - 1] = names[i], ids[i] end
    local out = ffi.new("glm53_tokenizer *[1]")
    local ok, err = core.check(C.glm53_tokenizer_load_tiktoken(path, opts.pattern, c_names, c_ids, n, out))
    if not ok then return nil, err end
    return wrap(out[0])
end

function Tokenizer:free()
    local h = self._h
    if h ~= nil then
        ffi.gc(h, nil)
        C.glm53_tokenizer_free(h)
        self._h = nil
    end
end

function Tokenizer:n_vocab() return C.glm53_tokenizer_n_vocab(handle_of(self)) end

-- The glm53_tokenizer * handle, for calling the C API directly (valid until free()).
function Tokenizer:cdata() return handle_of(self) end

local function grow_ids(self, n)
    if n > self._cap then
        local cap = self._cap
        while cap < n do cap = cap * 2 end
        self._ids, self._cap = int32_arr(cap), cap
    end
end

local function encode_flags(opts)
    return (opts and opts.special_as_text) and ENCODE_SPECIAL_AS_TEXT or 0
end

-- Encodes into the tokenizer's own buffer; returns the cdata ids and their count (valid until the next call),
-- or nil, err.
function Tokenizer:encode_buffer(text, opts)
    if type(text) ~= "string" then error("tokenizer:encode: text must be a string", 2) end
    local h, flags = handle_of(self), encode_flags(opts)
    local st = C.glm53_tokenizer_encode(h, text, #text, flags, self._ids, self._cap, self._n)
    if st == ERR_OUT_OF_RANGE then
        grow_ids(self, tonumber(self._n[0]))
        st = C.glm53_tokenizer_encode(h, text, #text, flags, self._ids, self._cap, self._n)
    end
    local ok, err = core.check(st)
    if not ok then return nil, err end
    return self._ids, tonumber(self._n[0])
end

-- text -> { id, ... } (1-based Lua table). opts.special_as_text: special tokens in the text are plain text.
function Tokenizer:encode(text, opts)
    local ids, n = self:encode_buffer(text, opts)
    if not ids then return nil, n end
    local t = {}
    for i = 0, n - 1 do t[i + 1] = ids[i] end
    return t
end

-- { text, ... } -> { {ids}, ... }, encoded on opts.threads threads (default 1); opts.special_as_text as in encode.
function Tokenizer:encode_batch(texts, opts)
    if type(texts) ~= "table" then error("tokenizer:encode_batch: texts must be a list of strings", 2) end
    local n = #texts
    local c_texts, c_lens = ffi.new("const char *[?]", math.max(n, 1)), ffi.new("size_t[?]", math.max(n, 1))
    for i = 1, n do
        if type(texts[i]) ~= "string" then error("tokenizer:encode_batch: texts must be strings", 2) end
        c_texts[i - 1], c_lens[i - 1] = texts[i], #texts[i]
    end
    local offsets = ffi.new("int64_t[?]", n + 1)
    local threads, flags = opts and opts.threads or 1, encode_flags(opts)
    local st = C.glm53_tokenizer_encode_batch(handle_of(self), c_texts, c_lens, n, flags, threads, self._ids,
                                              self._cap, offsets)
    if st == ERR_OUT_OF_RANGE then
        grow_ids(self, tonumber(offsets[n]))
        st = C.glm53_tokenizer_encode_batch(handle_of(self), c_texts, c_lens, n, flags, threads, self._ids,
                                            self._cap, offsets)
    end
    local ok, err = core.check(st)
    if not ok then return nil, err end
    local out, ids = {}, self._ids
    for i = 1, n do
        local t = {}
        for k = tonumber(offsets[i - 1]), tonumber(offsets[i]) - 1 do t[#t + 1] = ids[k] end
        out[i] = t
    end
    return out
end

-- Encodes into a caller's int32_t buffer of `cap` entries. Returns the count, or nil, err, needed (the count
-- that did not fit: grow the buffer to it and call again).
function Tokenizer:encode_into(text, buf, cap, opts)
    if type(text) ~= "string" then error("tokenizer:encode_into: text must be a string", 2) end
    if type(cap) ~= "number" or cap < 0 then error("tokenizer:encode_into: cap must be a count", 2) end
    local st = C.glm53_tokenizer_encode(handle_of(self), text, #text, encode_flags(opts), buf, cap, self._n)
    local ok, err = core.check(st)
    if not ok then return nil, err, tonumber(self._n[0]) end
    return tonumber(self._n[0])
end

-- ids (a Lua table, or int32_t cdata with opts.n) -> text. opts.skip_special_tokens drops special tokens.
-- Invalid UTF-8 comes out as U+FFFD, as HF's decode does. Returns the text, or nil, err (an id without a token).
function Tokenizer:decode(ids, opts)
    local h = handle_of(self)
    local buf, n
    if type(ids) == "table" then
        n = #ids
        grow_ids(self, n)
        buf = self._ids
        for i = 1, n do buf[i - 1] = ids[i] end
    elseif type(ids) == "cdata" then
        n = opts and opts.n
        if type(n) ~= "number" then error("tokenizer:decode: cdata ids need opts.n", 2) end
        buf = ids
    else
        error("tokenizer:decode: ids must be a table or cdata", 2)
    end
    local flags = (opts and opts.skip_special_tokens) and DECODE_SKIP_SPECIAL or 0
    local st = C.glm53_tokenizer_decode(h, buf, n, flags, self._text, self._text_cap, self._n)
    if st == ERR_OUT_OF_RANGE and self._n[0] >= self._text_cap then
        local cap = self._text_cap
        while cap <= self._n[0] do cap = cap * 2 end
        self._text, self._text_cap = char_arr(cap), cap
        st = C.glm53_tokenizer_decode(h, buf, n, flags, self._text, self._text_cap, self._n)
    end
    local ok, err = core.check(st)
    if not ok then return nil, err end
    return ffi.string(self._text, self._n[0])
end

-- The raw bytes of one token (not necessarily UTF-8), or nil, err.
function Tokenizer:piece(id)
    if type(id) ~= "number" then error("tokenizer:piece: id must be a number", 2) end
    local h = handle_of(self)
    local cached = self._pieces[id]
    if cached then return cached end
    local ok, err = core.check(C.glm53_tokenizer_token_to_piece(h, id, self._piece, self._n))
    if not ok then return nil, err end
    local piece = ffi.string(self._piece[0], self._n[0])
    self._pieces[id] = piece
    return piece
end

-- The id of a token spelling ("<|user|>", "Ġhello"), or nil.
function Tokenizer:token_id(str)
    if type(str) ~= "string" then error("tokenizer:token_id: expected a string", 2) end
    local id = C.glm53_tokenizer_token_id(handle_of(self), str)
    if id < 0 then return nil end
    return id
end

-- The spelling of a token as the file writes it, or nil.
function Tokenizer:token_string(id)
    if type(id) ~= "number" then error("tokenizer:token_string: id must be a number", 2) end
    local s = C.glm53_tokenizer_token_string(handle_of(self), id)
    if s == nil then return nil end
    return ffi.string(s)
end

function Tokenizer:is_special(id)
    local h = handle_of(self)
    local special = self._specials[id]
    if special == nil then
        special = C.glm53_tokenizer_is_special(h, id) == 1
        self._specials[id] = special
    end
    return special
end
function Tokenizer:is_added(id) return C.glm53_tokenizer_is_added(handle_of(self), id) == 1 end

---------------------------------------------------------------------------------------------------------------
-- Incremental detokeniser
---------------------------------------------------------------------------------------------------------------
local Stream = {}
Stream.__index = Stream

-- opts.skip_special_tokens (default false, as decode), opts.stop: a list of stop strings, opts.stop_after: tokens
-- pushed before the stop strings apply (default 0; vLLM's min_tokens: they are looked for in the text of the
-- tokens after those, so one that begins in that text is not found), opts.include_stop: the text ends with the
-- stop string found rather than before it (vLLM's include_stop_str_in_output).
function Tokenizer:stream(opts)
    opts = opts or {}
    local stops = opts.stop or {}
    if type(stops) ~= "table" then error("tokenizer:stream: opts.stop must be a list of strings", 2) end
    local max_stop = 0
    for _, s in ipairs(stops) do
        if type(s) ~= "string" or s == "" then error("tokenizer:stream: stop strings must be non-empty strings", 2) end
        if #s > max_stop then max_stop = #s end
    end
    handle_of(self)
    local stop_after = opts.stop_after or 0
    if type(stop_after) ~= "number" or stop_after < 0 or stop_after % 1 ~= 0 then
        error("tokenizer:stream: opts.stop_after must be an integer >= 0", 2)
    end
    return setmetatable({
        tok = self, skip_special = opts.skip_special_tokens and true or false, stops = stops, max_stop = max_stop,
        stop_after = stop_after,   -- pushes left before the stop strings apply
        include_stop = opts.include_stop and true or false,
        pending = "",    -- bytes of an unfinished character
        held = "",       -- text that may be the start of a stop string
        stopped = false,
    }, Stream)
end

-- Applies the stop strings to new text: returns what can be emitted, and the stop string if one was found.
function Stream:_emit(text)
    if self.max_stop == 0 or self.in_gate then return text end
    local all = self.held .. text
    local at, which
    for _, s in ipairs(self.stops) do
        local p = all:find(s, 1, true)
        if p and (not at or p < at) then at, which = p, s end
    end
    if at then
        self.stopped, self.held = true, ""
        return sub(all, 1, at - 1 + (self.include_stop and #which or 0)), which
    end
    -- hold the longest tail that is a proper prefix of a stop string
    for k = math.min(#all, self.max_stop - 1), 1, -1 do
        local tail = sub(all, -k)
        for _, s in ipairs(self.stops) do
            if #s > k and sub(s, 1, k) == tail then
                self.held = tail
                return sub(all, 1, #all - k)
            end
        end
    end
    self.held = ""
    return all
end

-- Feeds one token id. Returns the new text (possibly ""), whether a stop string was reached, and which one.
-- After a stop every push returns "", true. Raises on a non-number id; returns nil, err for an id without a
-- token.
function Stream:push(id)
    if type(id) ~= "number" then error("stream:push: id must be a number", 2) end
    if self.stopped then return "", true end
    self.in_gate = self.stop_after > 0   -- this token is one of the first stop_after: no stop strings in its text
    if self.in_gate then self.stop_after = self.stop_after - 1 end
    local tok = self.tok
    if self.skip_special and tok:is_special(id) then return "", false end
    local piece, err = tok:piece(id)
    if not piece then return nil, err end
    if self.pending == "" and not find(piece, "[\128-\255]") then   -- ASCII: nothing held, nothing to repair
        local text, stop = self:_emit(piece)
        return text, stop ~= nil, stop
    end
    local bytes = self.pending .. piece
    local keep = incomplete_tail(bytes)
    self.pending = sub(bytes, #bytes - keep + 1)
    local text, stop = self:_emit(utf8_lossy(sub(bytes, 1, #bytes - keep)))
    return text, stop ~= nil, stop
end

-- Ends the stream: whatever was held back (an unfinished character becomes U+FFFD, as decode does at the end).
-- Returns the text, and whether a stop string was reached by it.
function Stream:finish()
    if self.stopped then return "", true end
    local text, stop = self:_emit(utf8_lossy(self.pending))
    self.pending = ""
    if stop then return text, true, stop end
    text = text .. self.held
    self.held = ""
    return text, false
end

return M
