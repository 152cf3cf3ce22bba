-- glm53 expert-usage (scripts/expert_usage.lua): per family, each MoE layer's expert shares are the routed slots
-- recounted here from the capture, and each sparse layer's distance buckets hold every selected position; the
-- report has a load heatmap and a distance heatmap per family.
local cjson = require("cjson")
local file = require("glm53.util.file")
local model = require("glm53.engine.model")
local tokenizer = require("glm53.engine.tokenizer")
local generator = require("glm53.eval.generator")
local h = require("spec_helpers")

describe("glm53 expert-usage", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it("counts routed experts and selection distances per family, and draws them", function()
        local items, prompts = {}, { alpha = {}, beta = {} }
        for i, family in ipairs({ "alpha", "beta", "alpha", "beta" }) do
            local messages = { { role = "user", content = ("question %d: %s"):format(i, string.rep("word ", 10 * i)) } }
            items[i] = cjson.encode({ family = family, messages = messages })
            prompts[family][#prompts[family] + 1] = messages
        end
        local task = dir .. "/task.jsonl"
        assert(file.write_file(task, table.concat(items, "\n") .. "\n"))
        local out, rc = h.run("luajit scripts/expert_usage.lua --model models/tiny --task " .. task .. " --out " .. dir)
        assert.are.equal(0, rc, out)
        local report = cjson.decode((assert(file.read_file(dir .. "/report.json"))))
        assert.are.equal(2, #report.families)

        local m = assert(model.load("models/tiny", { threads = 1 }))
        local tok = assert(tokenizer.load("models/tiny/tokenizer.json"))
        local k = m.config.text.num_experts_per_tok
        for _, fam in ipairs(report.families) do
            -- the recount: every routed slot of every prompt of the family, per layer and expert
            local want, tokens = {}, 0
            for _, messages in ipairs(prompts[fam.family]) do
                local ids = assert(generator.encode(tok, messages))
                tokens = tokens + #ids
                local seq = assert(m:seq({ max_tokens = #ids, capture = { experts = true } }))
                local batch = m:batch({ rows = #ids })
                batch:add(seq, ids)
                assert(m:step(batch))
                for layer = 0, m.config.text.num_hidden_layers - 1 do
                    local cap = seq:captured_experts(layer)
                    if cap then
                        want[layer] = want[layer] or {}
                        for i = 0, cap.n * cap.k - 1 do want[layer][cap.ids[i]] = (want[layer][cap.ids[i]] or 0) + 1 end
                    end
                end
                seq:free()
            end
            assert.are.equal(tokens, fam.tokens)
            for _, row in ipairs(fam.expert_load) do
                assert.are.equal(tokens * k, row.slots)
                for e, share in ipairs(row.shares) do
                    assert.is_true(math.abs(share - (want[row.layer][e - 1] or 0) / (tokens * k)) < 1e-12,
                                   ("%s layer %d expert %d"):format(fam.family, row.layer, e - 1))
                end
            end
            assert.is_true(#fam.distance > 0)
            for _, row in ipairs(fam.distance) do
                local sum = 0
                for _, share in ipairs(row.shares) do sum = sum + share end
                assert.is_true(row.selections >= tokens and math.abs(sum - 1) < 1e-9)   -- each position selects itself
            end
        end
        m:free()
        local html = assert(file.read_file(dir .. "/report.html"))
        local svgs = 0
        for _ in html:gmatch("<svg") do svgs = svgs + 1 end
        assert.are.equal(4, svgs)
        assert.matches("share of routed slots per expert", html)
        assert.matches("share of selections by distance", html)
    end)
end)
