-- The CI score check of the bundled trained model: glm53 tiny-scores on a fixed subset (the first 40 items of each
-- family, retrieval at 2048 tokens of context, where the sparse layers attend only to the positions their indexer
-- selects) must reach the accuracy each family has in THRESHOLDS. About 70-85 s on 2 cores.
--
-- Each threshold is a margin below what round 2's model (docs/tiny-model.md, "Round 2") scores on this subset on
-- this machine: arith 0/40, mc 6/40, retrieval at 2048 0/40, tools 18/40, tool-call JSON valid 18/18, vision 9/40.
-- Greedy decoding on the CPU build is deterministic, so a drop below a threshold is a change in the engine, the
-- evals or the model, not noise. Raise them with the model (they are not the issue's acceptance levels, which the
-- model does not reach yet).
local THRESHOLDS = {
    arith = 0,
    mc = 0.10,
    retrieval_2048 = 0,        -- the retrieval items at 2048 tokens
    tools = 0.35,              -- calls with the right name and arguments, and exact replies
    tools_json_valid = 0.95,   -- calls valid against the item's tools, of the items whose gold is a call
    vision = 0.15,
}
local LIMIT = 40

local cjson = require("cjson")
local file = require("glm53.util.file")
local h = require("spec_helpers")

describe("the tiny model's scores (CI check)", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it(string.format("reach the thresholds on the first %d items of each family", LIMIT), function()
        local json_path = dir .. "/scores.json"
        local out, rc = h.run("luajit scripts/tiny_scores.lua --limit " .. LIMIT .. " --retrieval-lengths 2048 " ..
                              "--progress-every 1000 --json " .. json_path)
        assert.are.equal(0, rc, out)
        local r = cjson.decode((assert(file.read_file(json_path))))
        local scores = {}
        for _, f in ipairs(r.families) do
            assert.are.equal(0, f.errors, f.family .. ": items failed to generate")
            assert.are.equal(LIMIT, f.n, f.family)
            scores[f.family] = f.p
            if f.family == "retrieval" then
                assert.are.equal(1, #f.groups)
                assert.are.equal("2048", f.groups[1].group)
                scores.retrieval_2048 = f.groups[1].p
            elseif f.family == "tools" then
                scores.tools_json_valid = f.json_valid.p
            end
        end
        local failed = {}
        for name, threshold in pairs(THRESHOLDS) do
            assert.is_number(scores[name], name)
            if scores[name] < threshold then
                failed[#failed + 1] = string.format("%s %.3f < %.3f", name, scores[name], threshold)
            end
        end
        table.sort(failed)
        assert.are.same({}, failed, "below the threshold:\n" .. out)
    end)
end)
