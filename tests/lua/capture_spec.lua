-- Research capture (issue "research instruments"): a sequence made with capture flags records, per position, the
-- routed experts of every MoE layer and the selected positions of every sparse MLA layer. Checked against an
-- independent computation of routing and selection in this file (Lua, float64), from the router logits and the
-- indexer scores the engine's trace dump writes (GLM53_TRACE_DIR); and capture on or off gives the same logits.
local ffi = require("ffi")
local model = require("glm53.engine.model")
local checkpoint = require("glm53.engine.checkpoint")
local npy = require("glm53.util.npy")

local FIXTURE = "tests/fixtures/tiny-mtp"
local T = 40   -- 10 closed pools of 4 with a budget of 2: the scores decide

pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);")

local function prompt(n)
    local ids = ffi.new("int32_t[?]", n)
    for i = 0, n - 1 do ids[i] = (i * 37 + 11) % 800 end
    return ids
end

-- Logits of the last row after a prefill of the prompt, on a sequence made with `capture`.
local function prefill(m, capture)
    local s = assert(m:seq({ max_tokens = 64, capture = capture }))
    local b = m:batch({ rows = T, seqs = 1 })
    b:add(s, prompt(T), "last", T)
    assert(m:step(b))
    local out = ffi.new("float[?]", m.vocab_size)
    ffi.copy(out, b:logits(0), m.vocab_size * 4)
    return s, out
end

-- Reference routing of one row (float64): sigmoid scores, choice = score + bias, top-k of the choice (ties to
-- the lower id), weights = score / (sum + 1e-20) * scaling.
local function route(logits, off, bias, E, K, scaling)
    local s, order = {}, {}
    for e = 0, E - 1 do
        s[e] = 1 / (1 + math.exp(-logits[off + e]))
        order[#order + 1] = e
    end
    table.sort(order, function(a, b)
        local ca, cb = s[a] + bias[a], s[b] + bias[b]
        if ca ~= cb then return ca > cb end
        return a < b
    end)
    local ids, sum = {}, 0
    for k = 1, K do ids[k] = order[k]; sum = sum + s[order[k]] end
    local w = {}
    for k = 1, K do w[k] = s[ids[k]] / (sum + 1e-20) * scaling end
    return ids, w
end

-- Reference selection of the row at position p: every closed pool while they fit, else the n_select best by
-- score (ties to the lower pool) in ascending order; each expanded; then the open pool; -1 padded to W.
local function ref_select(scores, off, p, P, n_select, W)
    local L = p + 1
    local G = math.floor(L / P)
    local pools = {}
    if G <= n_select then
        for g = 0, G - 1 do pools[#pools + 1] = g end
    else
        local order = {}
        for g = 0, G - 1 do order[#order + 1] = g end
        table.sort(order, function(a, b)
            if scores[off + a] ~= scores[off + b] then return scores[off + a] > scores[off + b] end
            return a < b
        end)
        for i = 1, n_select do pools[i] = order[i] end
        table.sort(pools)
    end
    local out = {}
    for _, g in ipairs(pools) do for i = 0, P - 1 do out[#out + 1] = g * P + i end end
    for q = G * P, L - 1 do out[#out + 1] = q end
    while #out < W do out[#out + 1] = -1 end
    return out
end

describe("research capture", function()
    it("is off by default, and on or off gives the same logits", function()
        local m = assert(model.load(FIXTURE, { threads = 1 }))
        local plain, a = prefill(m, nil)
        local captured, b = prefill(m, { experts = true, selection = true })
        for i = 0, m.vocab_size - 1 do assert.are.equal(a[i], b[i]) end
        assert.is_nil(plain:captured_experts(1))
        assert.matches("GLM53_ERR_UNSUPPORTED", select(2, plain:captured_experts(1)))
        assert.is_truthy(captured:captured_experts(1))
        assert.matches("not an MoE layer", select(2, captured:captured_experts(0)))   -- layer 0 is dense
        assert.has_error(function() m:seq({ capture = { pools = true } }) end, "seq: unknown capture option 'pools'")
        plain:free(); captured:free(); m:free()
    end)

    it("records what the routing and the selection compute, for every layer", function()
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir) == 0)
        ffi.C.setenv("GLM53_TRACE_DIR", dir, 1)
        local m = assert(model.load(FIXTURE, { threads = 1 }))
        ffi.C.unsetenv("GLM53_TRACE_DIR")
        local s = prefill(m, { experts = true, selection = true })
        local cfg = m.config.text
        local ck = assert(checkpoint.open(FIXTURE))
        local E, K, P = cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.index_kpool
        local n_select, checked_moe, checked_sel = cfg.index_topk / P, 0, 0
        for layer = 0, cfg.num_hidden_layers - 1 do
            if cfg.mlp_types[layer] == 1 then   -- MoE
                local cap = assert(s:captured_experts(layer))
                assert.are.same({ K, T }, { cap.k, cap.n })
                local logits = assert(npy.read(string.format("%s/000_%02d_moe_logits.npy", dir, layer)))
                local bias = assert(ck:read(string.format("model.language_model.layers.%d.mlp.gate.e_score_correction_bias", layer)))
                local bias0 = {}
                for e = 0, E - 1 do bias0[e] = bias[e + 1] end
                for p = 0, T - 1 do
                    local ids, w = route(logits.data, p * E, bias0, E, K, cfg.routed_scaling_factor)
                    for k = 1, K do
                        assert.are.equal(ids[k], cap.ids[p * K + k - 1], string.format("layer %d pos %d slot %d", layer, p, k))
                        assert.is_true(math.abs(cap.weights[p * K + k - 1] - w[k]) <= 1e-6 * math.abs(w[k]) + 1e-7)
                    end
                end
                checked_moe = checked_moe + 1
            end
            if cfg.layer_types[layer] == 1 then   -- sparse MLA with a full indexer
                local sel = assert(s:captured_selection(layer))
                assert.are.same({ cfg.index_topk + P - 1, T }, { sel.width, sel.n })
                local scores = assert(npy.read(string.format("%s/000_%02d_kpool_scores.npy", dir, layer)))
                local G = scores.shape[2]
                for p = 0, T - 1 do
                    local want = ref_select(scores.data, p * G, p, P, n_select, sel.width)
                    for j = 1, sel.width do
                        assert.are.equal(want[j], sel.positions[p * sel.width + j - 1],
                                         string.format("layer %d pos %d entry %d", layer, p, j))
                    end
                end
                checked_sel = checked_sel + 1
            end
        end
        assert.is_true(checked_moe >= 1 and checked_sel >= 1, "the fixture has MoE and sparse layers")
        -- the MTP layer records its own routing when it runs (positions of its own cache)
        local mtp_layer = cfg.num_hidden_layers
        assert.are.equal(0, assert(s:captured_experts(mtp_layer)).n)
        ck:free(); s:free(); m:free()
        os.execute("rm -rf " .. dir)
    end)
end)
