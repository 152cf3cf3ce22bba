-- The report helpers the eval runner and the load generator use: glm53.report.stats' percentiles (numpy's
-- linear rule), PCG32 stream, bootstrap and exact McNemar test; glm53.report.svg's x ticks, category labels
-- and CDF series; glm53.report.text tables; glm53.report.markdown (cmark through the FFI, pipe tables, documents).
local stats = require("glm53.report.stats")
local svg = require("glm53.report.svg")
local text = require("glm53.report.text")
local markdown = require("glm53.report.markdown")

local function near(expected, got, tol, what)
    assert.is_true(math.abs(expected - got) <= (tol or 1e-12),
                   string.format("%s: expected %.12g, got %.12g", what or "value", expected, got))
end

describe("stats: order statistics", function()
    it("percentile follows numpy.percentile's default (linear) method", function()
        -- h = (n - 1) p / 100: [1,2,3,4] at 99: h = 2.97, 3 + 0.97 (4 - 3) = 3.97
        near(3.97, stats.percentile({ 4, 1, 3, 2 }, 99))
        -- [15,20,35,40,50] at 40: h = 1.6, 20 + 0.6 (35 - 20) = 29
        near(29, stats.percentile({ 15, 20, 35, 40, 50 }, 40))
        near(15, stats.percentile({ 15, 20, 35, 40, 50 }, 0))
        near(50, stats.percentile({ 15, 20, 35, 40, 50 }, 100))
        near(7, stats.percentile({ 7 }, 90))
        near(2.5, stats.median({ 4, 1, 3, 2 }))
        assert.has_error(function() stats.percentile({}, 50) end)
        assert.has_error(function() stats.percentile({ 1 }, 101) end)
    end)

    it("std is the population standard deviation, describe gathers them (zeros when empty)", function()
        -- mean 5, squared deviations 9 1 1 1 0 0 4 16 = 32, / 8 = 4
        near(2, stats.std({ 2, 4, 4, 4, 5, 5, 7, 9 }))
        local d = stats.describe({ 2, 4, 4, 4, 5, 5, 7, 9 })
        near(5, d.mean) near(2, d.std) near(4.5, d.median)
        near(4.5, d.p50) near(7.6, d.p90) near(8.86, d.p99)   -- h = 6.3: 7 + 0.3 * 2; h = 6.93: 7 + 0.93 * 2
        local e = stats.describe({})
        assert.are.same({ 0, 0, 0, 0, 0, 0, 0 }, { e.n, e.mean, e.std, e.median, e.p50, e.p90, e.p99 })
    end)
end)

describe("stats.rng (PCG32)", function()
    it("reproduces the reference pcg32 stream for seed 42, stream 54", function()
        -- pcg32-demo of the PCG reference implementation (pcg32_srandom_r(&rng, 42u, 54u)) prints these first.
        local r = stats.rng(42, 54)
        local want = { 0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e }
        for i, w in ipairs(want) do assert.are.equal(w, r:u32(), "draw " .. i) end
    end)

    it("draws uniforms, integers, normals and gammas with the right moments, the same for the same seed", function()
        local a, b = stats.rng(7), stats.rng(7)
        for _ = 1, 100 do assert.are.equal(a:uniform(), b:uniform()) end
        local r = stats.rng(1)
        local n, sum, sq, counts = 200000, 0, 0, { [0] = 0, 0, 0 }
        for _ = 1, n do
            local u = r:uniform()
            assert.is_true(u >= 0 and u < 1)
            local k = r:below(3)
            counts[k] = counts[k] + 1
        end
        for k = 0, 2 do near(1 / 3, counts[k] / n, 0.01, "below(3) = " .. k) end
        for _ = 1, n do local x = r:normal() sum, sq = sum + x, sq + x * x end
        near(0, sum / n, 0.01, "normal mean") near(1, sq / n, 0.02, "normal variance")
        -- Gamma(k, theta): mean k theta, variance k theta^2; vLLM draws inter-arrival gaps this way.
        for _, case in ipairs({ { 0.5, 2 }, { 1, 0.25 }, { 4, 0.5 } }) do
            local k, theta = case[1], case[2]
            sum, sq = 0, 0
            for _ = 1, n do local x = r:gamma(k, theta) sum, sq = sum + x, sq + x * x end
            local mean = sum / n
            near(k * theta, mean, 0.02 * k * theta + 0.005, "gamma mean k = " .. k)
            near(k * theta * theta, sq / n - mean * mean, 0.05 * k * theta * theta + 0.005, "gamma variance k = " .. k)
        end
    end)
end)

describe("stats.bootstrap and stats.mcnemar_exact", function()
    it("gives a seeded percentile interval", function()
        local d = { 1, 0, 1, 1, 0, 1, 0, 1, 1, 1 }
        local function mean_of(idx, n)
            local s = 0
            for i = 1, n do s = s + d[idx[i]] end
            return s / n
        end
        local lo, hi, values = stats.bootstrap(#d, mean_of, { seed = 3, resamples = 2000 })
        local lo2, hi2 = stats.bootstrap(#d, mean_of, { seed = 3, resamples = 2000 })
        assert.are.equal(lo, lo2) assert.are.equal(hi, hi2)
        assert.are.equal(2000, #values)
        assert.is_true(lo < 0.7 and 0.7 < hi and lo >= 0 and hi <= 1)
        -- A constant statistic has a zero-width interval.
        local clo, chi = stats.bootstrap(5, function() return 0.25 end, { resamples = 100 })
        assert.are.equal(0.25, clo) assert.are.equal(0.25, chi)
    end)

    it("mcnemar_exact is the two-sided binomial test on the discordant pairs", function()
        -- b = 7, c = 2: P(X <= 2 | n = 9, 1/2) = (1 + 9 + 36) / 512, doubled = 0.1796875 (R: binom.test(2, 9))
        near(0.1796875, stats.mcnemar_exact(7, 2))
        near(0.1796875, stats.mcnemar_exact(2, 7))
        -- b = 10, c = 0: 2 / 1024
        near(2 / 1024, stats.mcnemar_exact(10, 0))
        assert.are.equal(1, stats.mcnemar_exact(0, 0))
        assert.are.equal(1, stats.mcnemar_exact(5, 5))            -- capped at 1
        assert.has_error(function() stats.mcnemar_exact(-1, 2) end)
    end)
end)

describe("svg: x ticks, category labels, CDF", function()
    it("labels a continuous x axis with round ticks and categories by name", function()
        local s = svg.plot({ title = "t", series = { { name = "a", points = { { x = 0.013, y = 0 }, { x = 0.42, y = 1 } } } },
                             x_ticks = true, markers = false })
        assert.truthy(s:find(">0.4<", 1, true))   -- ticks 0.0 .. 0.5, step 0.1
        assert.falsy(s:find("<circle", 1, true))
        local c = svg.plot({ series = { { name = "m", points = { { x = 1, y = 0.5, lo = 0.4, hi = 0.6 } } } },
                             x_labels = { "strict-match" } })
        assert.truthy(c:find(">strict%-match<"))
    end)

    it("cdf is a staircase from 0 to 1 over the sorted values", function()
        local s = svg.cdf("x", { 3, 1, 2 })
        local ys, xs = {}, {}
        for i, p in ipairs(s.points) do xs[i], ys[i] = p.x, p.y end
        assert.are.same({ 1, 1, 2, 2, 3, 3 }, xs)
        assert.are.same({ 0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 1 }, ys)
        assert.are.same({}, svg.cdf("empty", {}).points)
        assert.is_true(#svg.cdf("long", (function() local t = {} for i = 1, 10000 do t[i] = i end return t end)()).points <= 802)
    end)
end)

describe("text and markdown tables, cmark", function()
    it("right-aligns terminal columns", function()
        assert.are.equal("  a  bb\nccc   d", text.table({ "a", "bb" }, { { "ccc", "d" } }))
    end)

    it("writes pipe tables with escaped cells", function()
        assert.are.equal("| mode | p |\n| :--- | ---: |\n| a\\|b | 1 |", markdown.table({ "mode", "p" }, { { "a|b", "1" } }))
    end)

    it("renders CommonMark with libcmark and keeps tables apart in documents", function()
        local h = assert(markdown.to_html("# Title\n\nSome *text* & <b>raw</b>."))
        assert.truthy(h:find("<h1>Title</h1>", 1, true))
        assert.truthy(h:find("<em>text</em> &amp;", 1, true))
        assert.falsy(h:find("<b>raw</b>", 1, true))          -- cmark's safe default drops raw HTML
        local doc = assert(markdown.document({
            { md = "# R" }, { table = { header = { "a" }, rows = { { "<1>" } } } }, { svg = "<svg/>", md = "(plot)" },
        }))
        assert.are.equal("# R\n\n| a |\n| :--- |\n| <1> |\n\n(plot)\n", doc.markdown)
        assert.are.equal(3, #doc.html_parts)
        assert.truthy(doc.html_parts[2]:find("<td>&lt;1&gt;</td>", 1, true))
        assert.are.equal("<svg/>", doc.html_parts[3])
    end)
end)
