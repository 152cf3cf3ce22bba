-- Tensor and expert parallelism from Lua (docs/multi-gpu.md): the tp / ep / communicator options (of model.load and
-- model.load_async), what each rank holds, and greedy generation, plain and with MTP drafts, token for token the
-- one-rank model's. The logits
-- themselves are compared to one rank in every mode by tests/c/test_parallel.c.
local model = require("glm53.engine.model")
local spec = require("glm53.generation.driver")
local h = require("spec_helpers")

local MODEL = "models/tiny"
local N_NEW = 120
local LAYOUTS = { { tp = 2, ep = 1 }, { tp = 1, ep = 2 }, { tp = 2, ep = 2 }, { tp = 4, ep = 1 } }


describe("tensor and expert parallel models", function()
    local one, prompts, refs
    setup(function()
        one = assert(model.load(MODEL, { threads = 1 }))
        prompts = h.make_prompts(one.vocab_size, { 3, 9, 33 }, 11)
        refs = {}
        for i, p in ipairs(prompts) do refs[i] = h.greedy(one, p, N_NEW) end
    end)
    teardown(function() one:free() end)

    it("refuse bad options with a clear error", function()
        assert.has_error(function() model.load(MODEL, { tp = 0 }) end, "model.load: tp must be an integer >= 1")
        assert.has_error(function() model.load(MODEL, { ep = 1.5 }) end, "model.load: ep must be an integer >= 1")
        assert.has_error(function() model.load(MODEL, { communicator = "mpi" }) end,
                         "model.load: communicator must be 'auto', 'threads' or 'nccl'")
        local m, err = model.load(MODEL, { tp = 3 })
        assert.is_nil(m)
        assert.matches("does not split across tp = 3", err)
        m, err = model.load(MODEL, { communicator = "nccl" })
        assert.is_nil(m)
        assert.matches("NCCL needs the CUDA backend", err)
    end)

    it("load on a thread (model.load_async, the server's) with the same options", function()
        local uv = require("luv")
        local loaded, refused
        model.load_async(uv, MODEL, { threads = 1, tp = 2, ep = 2, communicator = "threads" },
                         function(m) loaded = m end)
        model.load_async(uv, MODEL, { tp = 3 }, function(m, err) refused = { m, err } end)
        uv.run()
        assert.equals(4, #loaded:ranks())
        assert.equals(1, loaded:ranks()[4].ep_rank)
        assert.is_nil(refused[1])
        assert.matches("does not split across tp = 3", refused[2])
        assert.are.same({ unpack(refs[1], 1, 8) }, h.greedy(loaded, prompts[1], 8))
        loaded:free()
    end)

    for _, layout in ipairs(LAYOUTS) do
        local name = ("tp %d x ep %d"):format(layout.tp, layout.ep)
        it(name .. ": ranks report their slices; greedy and MTP-drafted greedy equal one rank's", function()
            local m = assert(model.load(MODEL, { threads = 1, tp = layout.tp, ep = layout.ep }))
            local ranks = m:ranks()
            assert.equals(layout.tp * layout.ep, #ranks)
            local experts = 0
            for r, info in ipairs(ranks) do
                assert.equals((r - 1) % layout.tp, info.tp_rank)
                assert.equals(math.floor((r - 1) / layout.tp), info.ep_rank)
                assert.equals("cpu", info.device)
                assert.is_true(info.weight_bytes < one:weight_bytes(), "rank " .. r .. " holds the whole model")
                if info.tp_rank == 0 then experts = experts + info.n_experts end
            end
            assert.equals(one.config.text.n_routed_experts, experts)
            for i, p in ipairs(prompts) do
                local got = h.greedy(m, p, N_NEW)
                local at = h.first_diff(got, refs[i])
                assert.is_nil(at, ("%s, prompt of %d tokens: first difference at token %s"):format(name, #p,
                                                                                                    tostring(at)))
            end
            local d = assert(spec.new(m, { k = 2, max_seqs = #prompts }))
            local streams = {}
            for i, p in ipairs(prompts) do streams[i] = assert(d:add(p, { max_new = N_NEW })) end
            assert(d:run())
            for i, s in ipairs(streams) do
                local at = h.first_diff(s.generated, refs[i])
                assert.is_nil(at, ("%s with MTP drafts (K=2), prompt %d: first difference at token %s"):format(
                    name, i, tostring(at)))
            end
            -- the caches of a sequence are on every rank: its bytes are the ranks' shares
            local seq = assert(m:seq({ max_tokens = 64 }))
            local shares = 0
            for _, info in ipairs(m:ranks()) do shares = shares + info.cache_bytes end
            assert.equals(m:cache_bytes(), shares)
            assert.is_true(shares > 0)
            seq:free()
            m:free()
        end)
    end
end)
