-- The CI score check of the bundled trained model: glm53 tiny-scores on a fixed subset (the first 40 items of each
-- family, retrieval at 2048 tokens of context, where the sparse layers attend only to the positions their indexer
-- selects) must reach the accuracy each family has in THRESHOLDS. About 70 s on 2 cores (68 s measured on the CI
-- machine's 2 cores with models/glm53-tiny of round 1).
--
-- Set a margin below the measured scores once the trained model lands (docs/tiny-model.md, "Evaluating", has the
-- command; take the lower Wilson bound of the full run, or a little under it). Until then every threshold is 0 and
-- the check only proves that the subset runs and scores.
local THRESHOLDS = {
    arith = 0,
    mc = 0,
    retrieval_2048 = 0,        -- the retrieval items at 2048 tokens
    tools = 0,                 -- calls with the right name and arguments, and exact replies
    tools_json_valid = 0,      -- calls valid against the item's tools, of the items whose gold is a call
    vision = 0,
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
