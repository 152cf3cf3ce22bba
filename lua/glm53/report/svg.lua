--[[
glm53.report.svg - line plots as standalone SVG text, for inline use in the HTML reports (glm53.report.html).

    local svg = require("glm53.report.svg")
    local text = svg.plot({
        title = "speed-up over K = 0 (95% CI)", xlabel = "K", ylabel = "speed-up",
        series = {
            { name = "greedy", points = { { x = 0, y = 1 }, { x = 2, y = 1.6, lo = 1.5, hi = 1.7 } } },
        },
        y_floor = 0,                  -- optional: the y axis reaches down to at least this value
    })

Each series is a polyline with a dot per point and, where a point has lo and hi, an error bar; a legend names
the series. The y axis gets about five round ticks; the x axis is labelled at the integers (draft positions,
depths, shot counts). Options for other data: x_ticks = true labels the x axis with about five round ticks
instead (latencies, throughputs); x_labels = { [1] = "strict-match", ... } names integer x positions
(categories); markers = false draws the lines without dots (curves of many points, such as a CDF). Text is
escaped; the result is well-formed XML. svg.cdf(name, values) is the series of an empirical CDF. svg.heatmap(spec)
draws a matrix of values (expert load per layer, attention distances per layer) as shaded cells.
]]
local html = require("glm53.report.html")

local M = {}

M.COLORS = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
             "#17becf" }

local esc = html.escape

-- About five round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten), and the step.
function M.ticks(lo, hi)
    if type(lo) ~= "number" or type(hi) ~= "number" then error("svg.ticks: lo and hi must be numbers", 2) end
    local span = hi - lo
    if span <= 0 then span = math.abs(hi) > 0 and math.abs(hi) or 1 end
    local step = 10 ^ math.floor(math.log10(span / 5))
    for _, f in ipairs({ 1, 2, 5, 10 }) do if span / (step * f) <= 6 then step = step * f break end end
    local out = {}
    for i = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9) do out[#out + 1] = i * step end
    return out, step
end

-- The plot of spec.series ({ {name =, points = { {x =, y =[, lo =, hi =]}, ... }}, ... }) as SVG text, with
-- spec.title, spec.xlabel, spec.ylabel and the optional spec.y_floor.
function M.plot(spec)
    if type(spec) ~= "table" or type(spec.series) ~= "table" then error("svg.plot: spec.series must be a table", 2) end
    local title, xlabel, ylabel, series, y_floor = spec.title or "", spec.xlabel or "", spec.ylabel or "",
                                                    spec.series, spec.y_floor
    local markers = spec.markers ~= false
    local W, L, R, T, B = 760, 60, 230, 36, 48
    local H = math.max(380, T + 16 * #series + 24)   -- tall enough for the legend
    local xmin, xmax, ymin, ymax = math.huge, -math.huge, y_floor or math.huge, -math.huge
    for _, s in ipairs(series) do
        for _, p in ipairs(s.points) do
            xmin, xmax = math.min(xmin, p.x), math.max(xmax, p.x)
            ymin, ymax = math.min(ymin, p.lo or p.y), math.max(ymax, p.hi or p.y)
        end
    end
    if xmin == math.huge then xmin, xmax, ymin, ymax = 0, 1, 0, 1 end
    if xmax == xmin then xmax = xmin + 1 end
    local xt, xstep
    if spec.x_ticks then
        xt, xstep = M.ticks(xmin, xmax)
        xmin, xmax = math.min(xmin, xt[1]), math.max(xmax, xt[#xt])
    elseif spec.x_labels then
        xmin, xmax = xmin - 0.5, xmax + 0.5   -- room for the category names at the ends
    end
    local yt, ystep = M.ticks(ymin, ymax)
    ymin, ymax = math.min(ymin, yt[1]), math.max(ymax, yt[#yt])
    if ymax == ymin then ymax = ymin + ystep end
    local decimals = math.max(0, math.ceil(-math.log10(ystep) - 1e-9))
    local function px(x) return L + (x - xmin) / (xmax - xmin) * (W - L - R) end
    local function py(y) return H - B - (y - ymin) / (ymax - ymin) * (H - T - B) end
    local out = { string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
                                'font-family="sans-serif" font-size="12">', W, H, W, H),
                  string.format('<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>', L, esc(title)) }
    for _, v in ipairs(yt) do
        out[#out + 1] = string.format('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>', L, py(v),
                                      W - R, py(v))
        out[#out + 1] = string.format('<text x="%.1f" y="%.1f" text-anchor="end">%s</text>', L - 6, py(v) + 4,
                                      string.format("%." .. string.format("%d", decimals) .. "f", v))
    end
    if xt then
        local xdecimals = math.max(0, math.ceil(-math.log10(xstep) - 1e-9))
        for _, v in ipairs(xt) do
            out[#out + 1] = string.format('<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>', px(v), H - B + 16,
                                          string.format("%." .. string.format("%d", xdecimals) .. "f", v))
        end
    else
        for x = math.ceil(xmin), math.floor(xmax) do
            local label = spec.x_labels and spec.x_labels[x] or (not spec.x_labels and string.format("%d", x)) or ""
            out[#out + 1] = string.format('<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>', px(x), H - B + 16,
                                          esc(label))
        end
    end
    out[#out + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>', L, H - B, W - R, H - B)
    out[#out + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>', L, T, L, H - B)
    out[#out + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', (L + W - R) / 2, H - 10,
                                  esc(xlabel))
    out[#out + 1] = string.format('<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>',
                                  (T + H - B) / 2, (T + H - B) / 2, esc(ylabel))
    for i, s in ipairs(series) do
        local color = M.COLORS[(i - 1) % #M.COLORS + 1]
        local pts = {}
        for _, p in ipairs(s.points) do
            pts[#pts + 1] = string.format("%.1f,%.1f", px(p.x), py(p.y))
            if p.lo then
                out[#out + 1] = string.format('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>', px(p.x),
                                              py(p.lo), px(p.x), py(p.hi), color)
                for _, v in ipairs({ p.lo, p.hi }) do
                    out[#out + 1] = string.format('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>',
                                                  px(p.x) - 4, py(v), px(p.x) + 4, py(v), color)
                end
            end
            if markers then
                out[#out + 1] = string.format('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>', px(p.x), py(p.y), color)
            end
        end
        out[#out + 1] = string.format('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>',
                                      table.concat(pts, " "), color)
        local ly = T + 8 + (i - 1) * 16
        out[#out + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>',
                                      W - R + 12, ly, W - R + 30, ly, color)
        out[#out + 1] = string.format('<text x="%d" y="%d">%s</text>', W - R + 36, ly + 4, esc(s.name))
    end
    out[#out + 1] = "</svg>"
    return table.concat(out, "\n")
end

-- A heatmap as SVG text: spec.values[r][c] (numbers >= 0, rows top to bottom) as cells shaded from white (0) to
-- the darkest blue (spec.max, default the largest value), with spec.row_labels and spec.col_labels (shown every
-- spec.col_every columns, default about 16 labels), spec.title, spec.xlabel, spec.ylabel, and a scale bar labelled
-- with spec.max formatted by spec.format (default "%.3g"). Each cell carries its value in a <title> (a tooltip).
function M.heatmap(spec)
    if type(spec) ~= "table" or type(spec.values) ~= "table" then error("svg.heatmap: spec.values must be a table", 2) end
    local values, nr = spec.values, #spec.values
    local nc = nr > 0 and #values[1] or 0
    local vmax = spec.max
    if not vmax then
        vmax = 0
        for _, row in ipairs(values) do for _, v in ipairs(row) do if v > vmax then vmax = v end end end
    end
    if vmax <= 0 then vmax = 1 end
    local fmtv = spec.format or "%.3g"
    local L, T, R, B = 90, 36, 90, 48
    local cw = math.max(2, math.min(48, math.floor(900 / math.max(nc, 1))))
    local ch = math.max(8, math.min(24, math.floor(420 / math.max(nr, 1))))
    local W, H = L + nc * cw + R, T + nr * ch + B
    local out = { string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" ' ..
                                'font-size="11">', W, H),
                  string.format('<text x="%d" y="18" font-size="13">%s</text>', L, esc(spec.title or "")) }
    local function shade(v)
        local t = math.max(0, math.min(1, v / vmax))
        return string.format("#%02x%02x%02x", math.floor(255 - 224 * t), math.floor(255 - 136 * t), math.floor(255 - 75 * t))
    end
    for r = 1, nr do
        local y = T + (r - 1) * ch
        for c = 1, nc do
            local v = values[r][c]
            out[#out + 1] = string.format('<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>',
                                          L + (c - 1) * cw, y, cw, ch, shade(v), esc(string.format(fmtv, v)))
        end
        local label = spec.row_labels and spec.row_labels[r]
        if label then
            out[#out + 1] = string.format('<text x="%d" y="%d" text-anchor="end">%s</text>', L - 4, y + ch / 2 + 4, esc(label))
        end
    end
    local every = spec.col_every or math.max(1, math.ceil(nc / 16))
    for c = 1, nc, every do
        local label = spec.col_labels and spec.col_labels[c]
        if label then
            out[#out + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', L + (c - 0.5) * cw,
                                          T + nr * ch + 14, esc(label))
        end
    end
    out[#out + 1] = string.format('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', L + nc * cw / 2, H - 8,
                                  esc(spec.xlabel or ""))
    out[#out + 1] = string.format('<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">%s</text>',
                                  T + nr * ch / 2, T + nr * ch / 2, esc(spec.ylabel or ""))
    -- the scale: 0 .. max
    local sx, steps = L + nc * cw + 24, 10
    for i = 0, steps - 1 do
        local v = vmax * (steps - 1 - i) / (steps - 1)
        out[#out + 1] = string.format('<rect x="%d" y="%.1f" width="14" height="%.1f" fill="%s"/>', sx,
                                      T + i * (nr * ch / steps), nr * ch / steps, shade(v))
    end
    out[#out + 1] = string.format('<text x="%d" y="%d">%s</text>', sx + 18, T + 8, esc(string.format(fmtv, vmax)))
    out[#out + 1] = string.format('<text x="%d" y="%d">0</text>', sx + 18, T + nr * ch)
    out[#out + 1] = "</svg>"
    return table.concat(out, "\n")
end

-- The series of the empirical CDF of values (numbers): the fraction of values <= x, as a staircase, thinned
-- to at most max_points (default 400) steps for long inputs. An empty input gives an empty series.
function M.cdf(name, values, max_points)
    local s = {}
    for i, v in ipairs(values) do s[i] = v end
    table.sort(s)
    local n, points = #s, {}
    local stride = math.max(1, math.ceil(n / (max_points or 400)))
    for i = stride, n + stride - 1, stride do
        local k = math.min(i, n)
        if #points > 0 then points[#points + 1] = { x = s[k], y = points[#points].y } end
        points[#points + 1] = { x = s[k], y = k / n }
    end
    if n > 0 then table.insert(points, 1, { x = s[1], y = 0 }) end
    return { name = name, points = points }
end

return M
