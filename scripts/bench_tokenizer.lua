#!/usr/bin/env luajit
--[[
bench_tokenizer.lua - encode throughput of glm53's tokenizer on one thread, and its load time.

    luajit scripts/bench_tokenizer.lua [--tokenizer FILE] [--corpus PATH] [--repeat N] [--threads N]

FILE defaults to .cache/tokenizers/qwen3.json (151k vocabulary; tests/tokenizer/fetch.sh fetches it). The
corpus is about 10 MB of mixed text made deterministically from the repository's own material (English prose,
code, many scripts, numbers, emoji, whitespace, special tokens), written to PATH
(default .cache/bench/tokenizer_corpus.txt) as documents separated by the byte 0x1E, which no document contains.
tests/tokenizer/bench_hf.py encodes the same file with HF tokenizers for the comparison, so run both on one
machine. Each document is one encode call (no special tokens added). Prints a table: load seconds, MB, tokens,
seconds and MB/s for the best of N passes; --threads N adds a line for glm53_tokenizer_encode_batch on N threads.
]]
local root = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local opts = cli.parse_or_exit(arg, {
    prog = "bench_tokenizer.lua",
    usage = "luajit scripts/bench_tokenizer.lua [--tokenizer FILE] [--corpus PATH] [--repeat N] [--threads N]",
    summary = "Encode throughput of glm53's tokenizer on one thread (and on N threads), and its load time.",
    options = {
        { "tokenizer", metavar = "FILE", default = root .. "/.cache/tokenizers/qwen3.json",
          help = "tokenizer.json (tests/tokenizer/fetch.sh fetches qwen3.json)" },
        { "corpus", metavar = "PATH", default = root .. "/.cache/bench/tokenizer_corpus.txt",
          help = "the corpus file, written first if missing" },
        { "repeat", type = "integer", min = 1, default = 3, help = "passes (the best is reported)" },
        { "threads", type = "integer", min = 0, default = 0, help = "> 1: also glm53_tokenizer_encode_batch" },
    },
})

local cjson = require("cjson")
local ffi = require("ffi")
local tokenizer = require("glm53.engine.tokenizer")
local core = require("glm53.ffi.core")
local clock = require("glm53.util.clock")
local file = require("glm53.util.file")

local function read(path) return assert(file.read_file(path)) end

---------------------------------------------------------------------------------------------------------------
-- The corpus: documents of 1-8 KB stitched from blocks (60% English prose, 40% strings of the test corpus),
-- by a fixed Park-Miller sequence
---------------------------------------------------------------------------------------------------------------
local function make_corpus(path)
    local seed = 4242
    local function rand(n)
        seed = (seed * 16807) % 2147483647
        return 1 + seed % n
    end
    local prose, other = {}, {}
    for para in read(root .. "/scripts/data/tiny_tokenizer_train.txt"):gmatch("(.-)\n\n") do
        prose[#prose + 1] = para .. "\n\n"
    end
    for _, item in ipairs(cjson.decode(read(root .. "/tests/tokenizer/corpus.json"))) do
        -- valid UTF-8 only (Python must read the file as text), and no 10k-character words
        if type(item) == "string" and #item <= 2000 and not item:find("\30", 1, true) then
            other[#other + 1] = item
        end
    end
    local docs, total = {}, 0
    while total < 10e6 do
        local want, parts, size = 1000 + rand(7000), {}, 0
        while size < want do
            local block = rand(10) <= 6 and prose[rand(#prose)] or other[rand(#other)]
            parts[#parts + 1] = block
            parts[#parts + 1] = rand(4) == 1 and "\n" or " "
            size = size + #block + 1
        end
        docs[#docs + 1] = table.concat(parts)
        total = total + size
    end
    os.execute("mkdir -p '" .. path:match("^(.*)/[^/]*$") .. "'")
    assert(file.write_file(path, table.concat(docs, "\30")))
end

if not file.exists(opts.corpus) then make_corpus(opts.corpus) end
local docs = {}
for d in (read(opts.corpus) .. "\30"):gmatch("(.-)\30") do docs[#docs + 1] = d end
local bytes = 0
for _, d in ipairs(docs) do bytes = bytes + #d end

---------------------------------------------------------------------------------------------------------------
-- The benchmark
---------------------------------------------------------------------------------------------------------------
local t0 = clock.now()
local tok = assert(tokenizer.load(opts.tokenizer))
local load_s = clock.now() - t0

local best, n_tokens = math.huge, 0
for _ = 1, opts["repeat"] do
    local count = 0
    t0 = clock.now()
    for k = 1, #docs do
        local _, n = tok:encode_buffer(docs[k])
        count = count + n
    end
    local dt = clock.now() - t0
    if dt < best then best = dt end
    n_tokens = count
end

print(("tokenizer  %s"):format(opts.tokenizer))
print(("corpus     %s: %d documents, %.2f MB"):format(opts.corpus, #docs, bytes / 1e6))
print(("%-22s %8s %10s %8s %8s"):format("", "load s", "tokens", "s", "MB/s"))
print(("%-22s %8.3f %10d %8.3f %8.2f"):format("glm53, 1 thread", load_s, n_tokens, best, bytes / 1e6 / best))

if opts.threads > 1 then
    local C = core.C
    local texts = ffi.new("const char *[?]", #docs)
    local lens = ffi.new("size_t[?]", #docs)
    for k = 1, #docs do texts[k - 1], lens[k - 1] = docs[k], #docs[k] end
    local cap = n_tokens + 16
    local ids, offsets = ffi.new("int32_t[?]", cap), ffi.new("int64_t[?]", #docs + 1)
    best = math.huge
    for _ = 1, opts["repeat"] do
        t0 = clock.now()
        assert(core.check(C.glm53_tokenizer_encode_batch(tok:cdata(), texts, lens, #docs, 0, opts.threads, ids, cap,
                                                         offsets)))
        local dt = clock.now() - t0
        if dt < best then best = dt end
    end
    print(("%-22s %8s %10d %8.3f %8.2f"):format(("glm53 batch, %d threads"):format(opts.threads), "",
                                                tonumber(offsets[#docs]), best, bytes / 1e6 / best))
end
tok:free()
