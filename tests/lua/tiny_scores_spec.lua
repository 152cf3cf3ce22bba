-- glm53 tiny-scores end to end on models/glm53-tiny (the scores themselves are tiny_scores_check_spec.lua's):
-- the printed table and the --json file have one row per family with its groups, they agree, the intervals hold
-- their accuracy, --families / --retrieval-lengths select, the temporary run directories are removed, --out keeps
-- them, and bad options are usage errors.
local cjson = require("cjson")
local file = require("glm53.util.file")
local h = require("spec_helpers")

local run = h.run

local FAMILIES = { "arith", "mc", "retrieval", "tools", "vision" }

-- The printed row whose label (left-aligned, first column) is `label`: { "3/40", "0.075", "[0.026, 0.199]" }.
local function row(out, label)
    for line in out:gmatch("[^\n]+") do
        if line:sub(1, #label + 1) == label .. " " then
            local count, acc, lo, hi = line:sub(#label + 1):match("^%s+(%d+/%d+)%s+(%d%.%d%d%d)%s+(%[%d%.%d%d%d), (%d%.%d%d%d%])")
            if count then return { count, acc, lo .. ", " .. hi } end
        end
    end
    return nil
end

local function check_counts(c)
    assert.is_true(c.n >= 0 and c.correct >= 0 and c.correct <= c.n)
    assert.is_true(c.lo <= c.p + 1e-12 and c.p <= c.hi + 1e-12 and c.lo >= 0 and c.hi <= 1)
end

describe("glm53 tiny-scores", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it("runs every family (--limit 2) and prints the table that --json writes", function()
        local json_path = dir .. "/scores.json"
        local tmp = dir .. "/tmp"
        assert(file.mkdir_p(tmp))
        local out, rc = run("TMPDIR=" .. tmp .. " luajit scripts/tiny_scores.lua --limit 2 --threads 2 --json " .. json_path)
        assert.are.equal(0, rc, out)
        assert.matches("family%s+correct/n%s+accuracy%s+95%% CI %(Wilson%)%s+seconds", out)
        assert.matches("tiny%-scores: arith %d+/2 = ", out)       -- a progress line per family (stderr)
        local r = cjson.decode((assert(file.read_file(json_path))))
        assert.are.equal(2, r.limit)
        assert.are.equal("cpu", r.device)
        assert.are.equal("2048", r.acceptance_length)
        assert.are.equal(#FAMILIES, #r.families)
        for i, f in ipairs(r.families) do
            assert.are.equal(FAMILIES[i], f.family)
            assert.are.equal("tiny_" .. f.family, f.task)
            assert.are.same({ 2, 2, 0 }, { f.items, f.n, f.errors })
            check_counts(f)
            assert.are.same({ tostring(f.correct) .. "/2", string.format("%.3f", f.p),
                              string.format("[%.3f, %.3f]", f.lo, f.hi) }, row(out, f.family))
            assert.is_true(f.seconds > 0 and f.tokens_in > 0)
        end
        local by = {}
        for _, f in ipairs(r.families) do by[f.family] = f end
        -- The first two retrieval items are at 256 and 512 tokens; each group is a row of the table.
        assert.are.same({ "256", "512" }, { by.retrieval.groups[1].group, by.retrieval.groups[2].group })
        for _, g in ipairs(by.retrieval.groups) do
            check_counts(g)
            assert.are.equal(1, g.n)
            assert.truthy(row(out, "  " .. g.group .. " tokens"))
        end
        -- tools: json-valid counts the items whose gold is a call (none of the first two: both are replies).
        local n_calls = 0
        for _, g in ipairs(by.tools.groups) do
            if g.group == "tool_call" then n_calls = g.n end
        end
        assert.are.equal(n_calls, by.tools.json_valid.n)
        check_counts(by.tools.json_valid)
        assert.truthy(row(out, "  tool-call JSON valid"))
        assert.are.equal(cjson.null, by.arith.groups)
        assert.are.equal(cjson.null, by.arith.json_valid)
        -- The run directories went to $TMPDIR and were removed.
        local p = io.popen("ls -A '" .. tmp .. "'")
        assert.are.equal("", p:read("*a"))
        p:close()
    end)

    it("runs the families and retrieval lengths asked for, and keeps the run directories with --out", function()
        local keep = dir .. "/runs"
        local out, rc = run("bin/glm53 tiny-scores --families vision,retrieval --retrieval-lengths 2048 --limit 1 " ..
                            "--out " .. keep)
        assert.are.equal(0, rc, out)
        assert.truthy(row(out, "retrieval"))
        assert.truthy(row(out, "vision"))
        assert.is_nil(row(out, "arith"))
        assert.truthy(row(out, "  2048 tokens *"))
        assert.is_nil(row(out, "  256 tokens"))
        local recs = assert(file.read_file(keep .. "/retrieval/records.jsonl"))
        assert.matches('^{"id":"retrieval%-000003","group":"2048",', recs)
        assert.truthy(file.exists(keep .. "/vision/report.html"))
    end)

    it("refuses an unknown family or length with status 2, and a missing model with status 1", function()
        local out, rc = run("bin/glm53 tiny-scores --families arith,poetry")
        assert.are.equal(2, rc, out)
        assert.matches("unknown family poetry", out)
        out, rc = run("bin/glm53 tiny-scores --retrieval-lengths long")
        assert.are.equal(2, rc, out)
        out, rc = run("bin/glm53 tiny-scores --model " .. dir .. "/none")
        assert.are.equal(1, rc, out)
        assert.matches("not a checkpoint directory", out)
    end)
end)
