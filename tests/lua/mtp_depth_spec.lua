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
        assert.matches("%[20/20%] sample", out)                       -- progress: 10 configurations x 2 reps
        local report = cjson.decode((assert(file.read_file(dir .. "/report.json"))))
        assert.are.equal(10, #report.rows)                 -- per mode: K=0, and K=1,3 x 2 draft policies
        local html = assert(file.read_file(dir .. "/report.html"))
        local svgs = 0
        for svg in html:gmatch("<svg.-</svg>") do
            svgs = svgs + 1
            assert.matches("<polyline", svg)
        end
        assert.are.equal(2, svgs)
        assert.matches("acceptance rate per position", html)
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

    it("refuses K > 0 on a checkpoint without MTP layers", function()
        local out, rc = run("luajit scripts/mtp_depth.lua --model tests/fixtures/tiny-f32 --k 0,2 --reps 2 --out " .. dir)
        assert.are_not.equal(0, rc)
        assert.matches("no MTP layer", out)
    end)
end)
