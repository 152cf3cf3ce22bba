-- Test helpers for the sampling and speculative-decoding specs: plain greedy references, a smaller checkpoint
-- derived from a fixture, and the chi-square distribution.
local cjson = require("cjson")
local file = require("glm53.util.file")

local M = {}

-- Deterministic prompts (an LCG, independent of math.random): one array of ids below vocab per length.
function M.make_prompts(vocab, lengths, seed)
    local state, prompts = seed, {}
    for i, len in ipairs(lengths) do
        local ids = {}
        for j = 1, len do
            state = (state * 69069 + 1) % 4294967296
            ids[j] = math.floor(state / 65536) % vocab
        end
        prompts[i] = ids
    end
    return prompts
end

-- Plain decoding from whole logits rows: one prefill of the whole prompt, then one single-token step per token,
-- pick(row) choosing each token.
local function plain_decode(m, prompt, n, pick)
    local seq = assert(m:seq({ max_tokens = #prompt + n + 1 }))
    local batch = m:batch({ rows = #prompt, seqs = 1 })
    batch:add(seq, prompt)
    assert(m:step(batch))
    local out = {}
    for i = 1, n do
        out[i] = pick(batch:logits(0))
        batch:clear()
        batch:add(seq, { out[i] })
        assert(m:step(batch))
    end
    seq:free()
    return out
end

-- Plain greedy decoding, the reference speculative output must equal.
function M.greedy(m, prompt, n)
    return plain_decode(m, prompt, n, function(row) return m:argmax(row) end)
end

-- Plain sampled decoding: sampler:sample of each whole row (sampling: glm53.engine.sampler options, seed included).
function M.sampled(m, prompt, n, sampling)
    local smp = require("glm53.engine.sampler").new(m.vocab_size, sampling)
    return plain_decode(m, prompt, n, function(row)
        local id = assert(smp:sample(row))
        assert(smp:accept(id))
        return id
    end)
end

-- What research capture records for generated tokens, by an independent route: one prefill of prompt and
-- output on a capturing sequence, read at the row that chose each token (the row of the token before it, #prompt
-- - 2 + i for token i). Returns experts[i] (expert ids per MoE layer, layer order) and selection[i] (attended
-- positions per sparse layer with its own indexer, -1 padding dropped): the shapes of the driver's
-- s.routed_experts and s.indexer_topk and of the server's routed_experts and indexer_topk.
function M.capture_reference(m, prompt, generated)
    local cfg = m.config.text
    local all = {}
    for _, id in ipairs(prompt) do all[#all + 1] = id end
    for _, id in ipairs(generated) do all[#all + 1] = id end
    local seq = assert(m:seq({ max_tokens = #all, capture = { experts = true, selection = true } }))
    local b = m:batch({ rows = #all, seqs = 1 })
    b:add(seq, all, "last")
    assert(m:step(b))
    local experts, selection = {}, {}
    for i = 1, #generated do
        local row = #prompt - 2 + i
        experts[i], selection[i] = {}, {}
        for layer = 0, cfg.num_hidden_layers - 1 do
            if cfg.mlp_types[layer] == 1 then   -- MoE
                local cap = assert(seq:captured_experts(layer))
                local ids = {}
                for e = 0, cap.k - 1 do ids[e + 1] = cap.ids[row * cap.k + e] end
                experts[i][#experts[i] + 1] = ids
            end
            if cfg.layer_types[layer] == 1 and cfg.indexer_types[layer] == 0 then   -- sparse MLA, full indexer
                local sel = assert(seq:captured_selection(layer))
                local at = {}
                for e = 0, sel.width - 1 do
                    local q = sel.positions[row * sel.width + e]
                    if q >= 0 then at[#at + 1] = q end
                end
                selection[i][#selection[i] + 1] = at
            end
        end
    end
    seq:free()
    return experts, selection
end

-- Index of the first difference of two arrays, or nil when equal (lengths included).
function M.first_diff(a, b)
    for i = 1, math.max(#a, #b) do
        if a[i] ~= b[i] then return i end
    end
    return nil
end

local function u64le(n)
    local b = {}
    for i = 1, 8 do b[i] = string.char(n % 256) n = math.floor(n / 256) end
    return table.concat(b)
end

-- Writes to out_dir a checkpoint derived from the single-file checkpoint src_dir: main layers `keep` (0-based,
-- renumbered 0..), every MTP layer after them, and the vocabulary cut to its first `vocab` ids (embedding and
-- lm_head rows). The weights are the fixture's own; the config is rewritten to match. Same on-disk format,
-- same conventions, fewer and smaller tensors: a faster model for statistical tests.
function M.derive_checkpoint(src_dir, out_dir, keep, vocab)
    local config = cjson.decode((assert(file.read_file(src_dir .. "/config.json"))))
    local text = config.text_config
    local raw = assert(file.read_file(src_dir .. "/model.safetensors"))
    local n = 0
    for i = 8, 1, -1 do n = n * 256 + raw:byte(i) end
    local header = cjson.decode(raw:sub(9, 8 + n))
    local data0 = 8 + n
    local n_main, n_mtp = text.num_hidden_layers, text.num_nextn_predict_layers or 0

    local renumber = {}
    for new, old in ipairs(keep) do renumber[old] = new - 1 end
    for i = 0, n_mtp - 1 do renumber[n_main + i] = #keep + i end

    local names = {}
    for name in pairs(header) do if name ~= "__metadata__" then names[#names + 1] = name end end
    table.sort(names)
    local out_header, chunks, offset = {}, {}, 0
    for _, name in ipairs(names) do
        local t = header[name]
        local layer, rest = name:match("^model%.language_model%.layers%.(%d+)%.(.*)$")
        local new_name = name
        if layer then
            local l = renumber[tonumber(layer)]
            new_name = l and ("model.language_model.layers." .. l .. "." .. rest) or nil
        end
        if new_name then
            local b0, b1 = t.data_offsets[1], t.data_offsets[2]
            local shape = { unpack(t.shape) }
            if name == "model.language_model.embed_tokens.weight" or name == "lm_head.weight" then
                b1 = b0 + (b1 - b0) / shape[1] * vocab
                shape[1] = vocab
            end
            chunks[#chunks + 1] = raw:sub(data0 + b0 + 1, data0 + b1)
            out_header[new_name] = { dtype = t.dtype, shape = shape, data_offsets = { offset, offset + (b1 - b0) } }
            offset = offset + (b1 - b0)
        end
    end
    local json = cjson.encode(out_header)
    json = json .. string.rep(" ", (8 - #json % 8) % 8)
    os.execute("mkdir -p '" .. out_dir .. "'")
    assert(file.write_file(out_dir .. "/model.safetensors", u64le(#json) .. json .. table.concat(chunks)))

    local function pick(list)
        local out = {}
        for i, old in ipairs(keep) do out[i] = list[old + 1] end
        return out
    end
    text.num_hidden_layers = #keep
    text.layer_types = pick(text.layer_types)
    text.mlp_layer_types = pick(text.mlp_layer_types)
    if text.indexer_types then text.indexer_types = pick(text.indexer_types) end
    text.vocab_size = vocab
    text.pad_token_id = cjson.null
    assert(file.write_file(out_dir .. "/config.json", cjson.encode(config)))
    return out_dir
end

-- The output (stdout and stderr together) and the exit status of a shell command.
function M.run(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
    local out = p:read("*a")
    p:close()
    return out, tonumber(out:match("rc=(%d+)%s*$"))
end

-- The standard output of a command line (stderr as the command redirects it), the pipe closed.
function M.stdout_of(cmd)
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    return out
end

-- A fresh temporary directory.
function M.tmpdir()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p '" .. dir .. "'") == 0)
    return dir
end

-- log Gamma (Lanczos, g = 7), enough for the incomplete gamma below.
local LANCZOS = { 0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
                  -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
                  1.5056327351493116e-7 }
local function log_gamma(x)
    if x < 0.5 then return math.log(math.pi / math.sin(math.pi * x)) - log_gamma(1 - x) end
    x = x - 1
    local a, t = LANCZOS[1], x + 7.5
    for i = 1, 8 do a = a + LANCZOS[i + 1] / (x + i) end
    return 0.5 * math.log(2 * math.pi) + (x + 0.5) * math.log(t) - t + math.log(a)
end

-- Regularised upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above; Numerical Recipes).
local function gamma_q(a, x)
    if x <= 0 then return 1 end
    local gln = log_gamma(a)
    if x < a + 1 then
        local sum, del, ap = 1 / a, 1 / a, a
        for _ = 1, 10000 do
            ap = ap + 1
            del = del * x / ap
            sum = sum + del
            if math.abs(del) < math.abs(sum) * 1e-15 then break end
        end
        return 1 - sum * math.exp(-x + a * math.log(x) - gln)
    end
    local b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    local h = d
    for i = 1, 10000 do
        local an = -i * (i - a)
        b = b + 2
        d = an * d + b
        if math.abs(d) < 1e-300 then d = 1e-300 end
        c = b + an / c
        if math.abs(c) < 1e-300 then c = 1e-300 end
        d = 1 / d
        local del = d * c
        h = h * del
        if math.abs(del - 1) < 1e-15 then break end
    end
    return math.exp(-x + a * math.log(x) - gln) * h
end

-- Pearson's chi-square of observed counts against expected probabilities (tables keyed alike), n draws. Cells
-- expected under 5 counts are pooled into one cell; a pool still under 5 joins the smallest other cell. Counts
-- in cells of probability 0 make the statistic infinite. Returns the statistic, the degrees of freedom, the
-- p-value and the total-variation distance between the empirical and the expected distribution.
function M.chi_square(observed, expected, n)
    local cells, pool, tv = {}, { o = 0, e = 0 }, 0
    for key, p in pairs(expected) do
        local o = observed[key] or 0
        tv = tv + math.abs(o / n - p)
        if p * n >= 5 then cells[#cells + 1] = { o = o, e = p * n } else pool.o, pool.e = pool.o + o, pool.e + p * n end
    end
    local impossible = false
    for key, o in pairs(observed) do
        if expected[key] == nil or expected[key] == 0 then
            tv = tv + o / n
            impossible = true
        end
    end
    if impossible then return math.huge, math.max(#cells - 1, 1), 0, tv / 2 end
    table.sort(cells, function(a, b) return a.e < b.e end)
    if pool.e >= 5 or #cells == 0 then
        cells[#cells + 1] = pool
    elseif pool.e > 0 then
        cells[1].o, cells[1].e = cells[1].o + pool.o, cells[1].e + pool.e
    end
    local stat = 0
    for _, c in ipairs(cells) do stat = stat + (c.o - c.e) ^ 2 / c.e end
    local df = math.max(#cells - 1, 1)
    return stat, df, gamma_q(df / 2, stat / 2), tv / 2
end

return M
