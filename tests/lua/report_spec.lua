-- glm53.report.stats, .svg and .html. The statistics are checked against published results: R's t.test on
-- Student's sleep data, and the Wilson intervals of Newcombe (1998), Table I. The SVG is checked to be
-- well-formed XML (a small checker here, and xmllint where it is installed).
local stats = require("glm53.report.stats")
local svg = require("glm53.report.svg")
local html = require("glm53.report.html")
local file = require("glm53.util.file")
local h = require("spec_helpers")

local function near(expected, got, tol, what)
    assert.is_true(math.abs(expected - got) <= tol,
                   string.format("%s: expected %.7f, got %.7f", what or "value", expected, got))
end

-- nil when text is one well-formed XML element (optionally after an XML declaration): tags nest and match,
-- attribute values are quoted and names unique per element, '<' only starts markup and '&' only a predefined
-- entity or a character reference; otherwise a message.
local NAME = "[%a_:][%w_:%.%-]*"
local function check_refs(s)
    for ref in s:gmatch("&[^;%s]*;?") do
        if not (ref:match("^&[lg]t;$") or ref:match("^&amp;$") or ref:match("^&quot;$") or ref:match("^&apos;$") or
                ref:match("^&#%d+;$") or ref:match("^&#x%x+;$")) then
            return "bad reference " .. ref
        end
    end
end
local function xml_error(text)
    local stack, roots, pos = {}, 0, 1
    local decl = text:match("^<%?xml.-%?>()")
    if decl then pos = decl end
    while true do
        local lt = text:find("<", pos, true)
        local chars = text:sub(pos, (lt or #text + 1) - 1)
        if #stack == 0 and chars:find("%S") then return "text outside the root element: " .. chars:sub(1, 40) end
        local bad = check_refs(chars)
        if bad then return bad end
        if not lt then break end
        if text:sub(lt, lt + 3) == "<!--" then
            local e = text:find("-->", lt + 4, true)
            if not e then return "unterminated comment" end
            pos = e + 3
        elseif text:sub(lt, lt + 1) == "</" then
            local name, after = text:match("^</(" .. NAME .. ")%s*>()", lt)
            if not name then return "malformed end tag at byte " .. lt end
            if stack[#stack] ~= name then return "</" .. name .. "> closes <" .. tostring(stack[#stack]) .. ">" end
            stack[#stack] = nil
            pos = after
        else
            local name, at = text:match("^<(" .. NAME .. ")()", lt)
            if not name then return "malformed start tag at byte " .. lt end
            if #stack == 0 then
                roots = roots + 1
                if roots > 1 then return "a second root element <" .. name .. ">" end
            end
            local seen = {}
            while true do
                local close, after = text:match("^%s*(/?>)()", at)
                if close then
                    if close == ">" then stack[#stack + 1] = name end
                    pos = after
                    break
                end
                local attr, q, value, next_at = text:match("^%s+(" .. NAME .. ")%s*=%s*(['\"])(.-)%2()", at)
                if not attr then return "malformed attribute in <" .. name .. "> at byte " .. at end
                if value:find("<", 1, true) then return "'<' in attribute " .. attr end
                bad = check_refs(value)
                if bad then return bad end
                if seen[attr] then return "attribute " .. attr .. " twice in <" .. name .. ">" end
                seen[attr] = q
                at = next_at
            end
        end
    end
    if #stack > 0 then return "unclosed <" .. stack[#stack] .. ">" end
    if roots == 0 then return "no root element" end
    return nil
end

local function count(s, pattern)
    local n = 0
    for _ in s:gmatch(pattern) do n = n + 1 end
    return n
end

describe("glm53.report.stats", function()
    it("mean_ci matches R's t.test on Student's sleep data (paired differences, n = 10)", function()
        -- sleep$extra[11:20] - sleep$extra[1:10]; t.test(..., paired = TRUE): mean of the differences 1.58,
        -- 95 percent confidence interval 0.7001142 2.4598858. The t table's 2.262 (exact: 2.2621573) moves the
        -- bounds by 6e-5.
        local d = { 1.2, 2.4, 1.3, 1.3, 0.0, 1.0, 1.8, 0.8, 4.6, 1.4 }
        local mean, lo, hi = stats.mean_ci(d)
        near(1.58, mean, 1e-12, "mean")
        near(0.7001142, lo, 1e-4, "lo")
        near(2.4598858, hi, 1e-4, "hi")
    end)

    it("mean_ci uses the t quantile of n - 1 degrees of freedom, and 1.96 beyond 30", function()
        -- {1, 3}: mean 2, s = sqrt(2), s / sqrt(2) = 1; t(0.975, 1) = 12.706 in every t table.
        local mean, lo, hi = stats.mean_ci({ 1, 3 })
        near(2, mean, 1e-12)
        near(2 - 12.706, lo, 1e-9)
        near(2 + 12.706, hi, 1e-9)
        -- 32 values alternating 0 and 1: mean 0.5, s^2 = 8 / 31, half-width 1.96 * sqrt(8 / 31 / 32).
        local xs = {}
        for i = 1, 32 do xs[i] = i % 2 end
        mean, lo, hi = stats.mean_ci(xs)
        near(0.5, mean, 1e-12)
        near(0.5 + 1.96 * math.sqrt(8 / 31 / 32), hi, 1e-12)
        near(0.5 - 1.96 * math.sqrt(8 / 31 / 32), lo, 1e-12)
    end)

    it("wilson reproduces Newcombe (1998), Table I (score interval without continuity correction)", function()
        for _, case in ipairs({
            { 81, 263, 0.2553, 0.3662 }, { 15, 148, 0.0624, 0.1605 }, { 0, 20, 0.0000, 0.1611 },
            { 1, 29, 0.0061, 0.1718 },
        }) do
            local lo, hi = stats.wilson(case[1], case[2])
            near(case[3], lo, 5e-5, case[1] .. "/" .. case[2] .. " lo")
            near(case[4], hi, 5e-5, case[1] .. "/" .. case[2] .. " hi")
        end
        local lo, hi = stats.wilson(20, 20)            -- mirror of 0/20
        near(1 - 0.1611, lo, 5e-5)
        assert.are.equal(1, hi)
        lo = stats.wilson(0, 20)
        assert.are.equal(0, lo)
        lo, hi = stats.wilson(0, 0)
        assert.are.same({ 0, 1 }, { lo, hi })
    end)

    it("proportion gives k, n, p and the Wilson interval", function()
        local p = stats.proportion(15, 148)
        assert.are.equal(15, p.k)
        assert.are.equal(148, p.n)
        near(15 / 148, p.p, 1e-15)
        near(0.0624, p.lo, 5e-5)
        near(0.1605, p.hi, 5e-5)
        assert.are.same({ k = 0, n = 0, p = 0, lo = 0, hi = 1 }, stats.proportion(0, 0))
    end)

    it("sum and mean; argument errors raise", function()
        assert.are.equal(0, stats.sum({}))
        assert.are.equal(6, stats.sum({ 1, 2, 3 }))
        assert.are.equal(2, stats.mean({ 1, 2, 3 }))
        assert.has_error(function() stats.mean({}) end)
        assert.has_error(function() stats.mean_ci({ 1 }) end)
        assert.has_error(function() stats.mean_ci({ 1, "2" }) end)
        assert.has_error(function() stats.wilson(3, 2) end)
        assert.has_error(function() stats.wilson(-1, 2) end)
        assert.has_error(function() stats.wilson(1.5, 2) end)
        assert.has_error(function() stats.wilson(1, 2, 0) end)
        assert.has_error(function() stats.proportion(nil, 2) end)
    end)
end)

describe("glm53.report.svg", function()
    local series = {
        { name = "greedy <fixed> & co", points = { { x = 0, y = 1, lo = 1, hi = 1 }, { x = 1, y = 1.4, lo = 1.2, hi = 1.6 },
                                                  { x = 3, y = 1.9, lo = 1.5, hi = 2.3 } } },
        { name = "sample", points = { { x = 0, y = 1 }, { x = 1, y = 0.8 }, { x = 3, y = 0.6 } } },
    }

    it("ticks are round steps covering the range", function()
        -- [0, 1]: span / 5 = 0.2 -> steps of 0.2. [0.95, 3.2]: 2.25 / 5 = 0.45 -> 0.5 (1 and 2 x 0.1 give more
        -- than 6 intervals), from floor(0.95 / 0.5) = 1 to ceil(3.2 / 0.5) = 7 steps.
        local t, step = svg.ticks(0, 1)
        assert.are.equal(0.2, step)
        assert.are.equal(6, #t)
        for i, v in ipairs({ 0, 0.2, 0.4, 0.6, 0.8, 1.0 }) do near(v, t[i], 1e-12) end
        t, step = svg.ticks(0.95, 3.2)
        assert.are.equal(0.5, step)
        assert.are.same({ 0.5, 1, 1.5, 2, 2.5, 3, 3.5 }, t)
    end)

    it("plots are well-formed XML with one polyline a series, a dot a point and an error bar a lo/hi", function()
        local cases = {
            svg.plot({ title = "speed-up <vs> K & more", xlabel = "K", ylabel = "x", series = series }),
            svg.plot({ title = "acceptance", xlabel = "position", ylabel = "rate", series = { series[2] }, y_floor = 0 }),
            svg.plot({ series = {} }),                                            -- nothing to draw
            svg.plot({ series = { { name = "one", points = { { x = 2, y = 5 } } } } }),
        }
        for i, text in ipairs(cases) do
            assert.is_nil(xml_error(text), "plot " .. i .. ": " .. tostring(xml_error(text)))
            assert.matches('^<svg xmlns="http://www.w3.org/2000/svg"', text)
        end
        local text = cases[1]
        assert.are.equal(2, count(text, "<polyline "))
        assert.are.equal(6, count(text, "<circle "))
        assert.are.equal(3 * 3, count(text, 'stroke="#1f77b4"/>'))              -- 3 bars of 3 lines, series 1
        assert.are.equal(0, count(text, 'stroke="#d62728"/>'))                  -- series 2 has no intervals
        assert.is_truthy(text:find(">speed-up &lt;vs&gt; K &amp; more</text>", 1, true))
        assert.is_truthy(text:find(">greedy &lt;fixed&gt; &amp; co</text>", 1, true))
        -- Every coordinate lies inside the view box.
        local w, hgt = text:match('viewBox="0 0 (%d+) (%d+)"')
        for name, v in text:gmatch(' ([xy][12]?)="(%-?[%d%.]+)"') do
            local limit = name:sub(1, 1) == "x" and tonumber(w) or tonumber(hgt)
            assert.is_true(tonumber(v) >= 0 and tonumber(v) <= limit, name .. " = " .. v)
        end
    end)

    it("xmllint agrees that the plot is well-formed (where xmllint is installed)", function()
        if os.execute("command -v xmllint >/dev/null 2>&1") ~= 0 then
            pending("xmllint is not installed")
            return
        end
        local dir = h.tmpdir()
        assert(file.write_file(dir .. "/plot.svg", svg.plot({ title = "a & b", series = series })))
        local rc = os.execute("xmllint --noout '" .. dir .. "/plot.svg'")
        os.execute("rm -rf '" .. dir .. "'")
        assert.are.equal(0, rc)
    end)

    it("the XML checker itself rejects what is not well-formed", function()
        assert.is_nil(xml_error('<a x="1"><b/>t &amp; &#38; &#x26;</a>'))
        for _, bad in ipairs({ "<a>", "<a></b>", "<a x=1/>", '<a x="1" x="2"/>', "<a>&</a>", "<a>1 < 2</a>",
                               "<a/><b/>", "text<a/>", '<a x="<"/>', "<a>&nbsp;</a>", "" }) do
            assert.is_string(xml_error(bad), bad)
        end
    end)

    it("raises on argument errors", function()
        assert.has_error(function() svg.plot() end)
        assert.has_error(function() svg.plot({ title = "no series" }) end)
        assert.has_error(function() svg.ticks("0", 1) end)
    end)
end)

describe("glm53.report.html", function()
    it("escapes element content", function()
        assert.are.equal("a &lt;b&gt; &amp;amp; 3", html.escape("a <b> &amp; 3"))
        assert.are.equal("42", html.escape(42))
    end)

    it("writes a table one row a line, cells escaped", function()
        assert.are.equal("<table><tr>\n<th>K</th>\n<th>a&amp;b</th>\n</tr>\n<tr><td>0</td><td>&lt;1</td></tr>\n" ..
                         "<tr><td>2</td><td></td></tr>\n</table>",
                         html.table({ "K", "a&b" }, { { "0", "<1" }, { "2", "" } }))
    end)

    it("wraps the parts in a page, in order, with the title escaped", function()
        local page = html.page("sweep <1>", { "<h1>one</h1>", "<p>two</p>" })
        assert.matches("^<!DOCTYPE html>\n<html><head><meta charset=\"utf%-8\"><title>sweep &lt;1&gt;</title>\n", page)
        assert.is_truthy(page:find("</head><body>\n<h1>one</h1>\n<p>two</p>\n</body></html>$"))
        assert.is_truthy(page:find("<style>" .. html.STYLE .. "</style>", 1, true))
        assert.has_error(function() html.page("t", "not a list") end)
        assert.has_error(function() html.table({ "K" }) end)
    end)
end)
