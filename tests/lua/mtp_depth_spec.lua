-- scripts/mtp_depth.lua (issue 6, acceptance 4): runs on models/tiny with small settings and writes the report:
-- the HTML holds the table (the same numbers the script printed and wrote to report.json) and two inline SVG
-- plots; a checkpoint without MTP layers is refused.
local cjson = require("cjson")
local file = require("glm53.util.file")
local h = require("spec_helpers")

local run = h.run

describe("scripts/mtp_depth.lua", function()
    local dir
    setup(function() dir = h.tmpdir() end)
    teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

    it("sweeps K and modes on models/tiny and writes report.html with the table and the plots", function()
        local out, rc = run("luajit scripts/mtp_depth.lua --model models/tiny --k 0,1,3 --modes greedy,sample " ..
                            "--draft fixed,threshold:0.05 --reps 2 --n-prompts 2 --prompt-len 6 --max-new 12 " ..
                            "--out " .. dir)
        assert.are.equal(0, rc, out)
        assert.matches("%[20/20%] random%s+sample", out)               -- progress: 10 configurations x 2 reps
        local report = cjson.decode((assert(file.read_file(dir .. "/report.json"))))
        assert.are.equal(10, #report.rows)                 -- per mode: K=0, and K=1,3 x 2 draft policies
        local html = assert(file.read_file(dir .. "/report.html"))
        local svgs = 0
        for svg in html:gmatch("<svg.-</svg>") do
            svgs = svgs + 1
            assert.matches("<polyline", svg)
        end
        assert.are.equal(2, svgs)
        assert.matches("acceptance per draft position", html)
        assert.matches("speed%-up over K = 0", html)
        for _, row in ipairs(report.rows) do
            local cells = {}
            for _, cell in ipairs(row) do cells[#cells + 1] = "<td>" .. cell:gsub("&", "&amp;") .. "</td>" end
            local tr = "<tr>" .. table.concat(cells) .. "</tr>"
            assert.is_truthy(html:find(tr, 1, true), "row missing from the HTML: " .. tr)
            -- ... and the printed table has the same numbers (right-aligned columns).
            local pattern = {}
            for _, cell in ipairs(row) do
                if cell ~= "" then pattern[#pattern + 1] = cell:gsub("%p", "%%%0") end
            end
            assert.is_truthy(out:find(table.concat(pattern, "%s+")), "row missing from the printed table")
        end
        -- The numbers behind the table: acceptance per position within [0, 1], K = 0 speed-up exactly 1.
        for _, c in ipairs(report.configs) do
            if c.k == 0 then assert.are.equal(1, c.speedup) end
            for i = 1, c.k do
                local a = c.summary.acceptance_rate_per_pos[i]
                assert.is_true(a >= 0 and a <= 1)
            end
            assert.are.equal(2 * 2 * 12, c.stats.tokens)              -- reps x prompts x max_new
        end
    end)

    it("groups chat prompts of task files by family, and names the best fixed K and draft policy of each", function()
        local task = dir .. "/task.jsonl"
        local items = {}
        for i, family in ipairs({ "alpha", "alpha", "beta", "beta", "alpha" }) do
            items[i] = cjson.encode({ family = family, messages = { { role = "user", content = "question " .. i } } })
        end
        assert(file.write_file(task, table.concat(items, "\n") .. "\n"))
        local out, rc = run("luajit scripts/mtp_depth.lua --model models/tiny --task " .. task .. " --per-family 2 " ..
                            "--k 0,2 --draft fixed,adaptive:cost=0.3,budget:budget=4 --reps 2 --max-new 10 --out " ..
                            dir .. "/task")
        assert.are.equal(0, rc, out)
        local report = cjson.decode((assert(file.read_file(dir .. "/task/report.json"))))
        assert.are.equal(2, report.families)
        assert.are.equal(4, report.prompts)                            -- two per family, the fifth item left out
        assert.are.equal(2 * 4, #report.configs)                       -- per family: K=0, K=2 x 3 draft policies
        assert.are.equal(2, #report.best)
        for _, b in ipairs(report.best) do
            assert.is_truthy(b.family == "alpha" or b.family == "beta")
            assert.is_truthy(b.policy == "adaptive:cost=0.3" or b.policy == "budget:budget=4", tostring(b.policy))
            assert.is_true(b.policy_over_fixed > 0)
        end
        for _, c in ipairs(report.configs) do
            assert.are.equal(2 * 2 * 10, c.stats.tokens)               -- reps x prompts of the family x max_new
            -- the budget: at most 4 draft tokens per stream, so 2 reps x 2 prompts x 4 in all
            if c.draft == "budget:budget=4" then assert.is_true(c.stats.spec_decode_num_draft_tokens <= 16) end
            for i, a in ipairs(c.acceptance) do
                assert.is_true(a.lo <= a.p and a.p <= a.hi, "position " .. i)
            end
        end
        local html = assert(file.read_file(dir .. "/task/report.html"))
        local svgs = 0
        for _ in html:gmatch("<svg") do svgs = svgs + 1 end
        assert.are.equal(4, svgs)                                       -- two plots per family
        assert.matches("Best fixed K and best draft policy", html)
    end)

    it("refuses K > 0 on a checkpoint without MTP layers", function()
        local out, rc = run("luajit scripts/mtp_depth.lua --model tests/fixtures/tiny-f32 --k 0,2 --reps 2 --out " .. dir)
        assert.are_not.equal(0, rc)
        assert.matches("no MTP layer", out)
    end)
end)
