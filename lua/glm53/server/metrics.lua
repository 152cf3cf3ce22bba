--[[
glm53.server.metrics - counters, gauges and histograms in the Prometheus text exposition format (version 0.0.4).

    local metrics = require("glm53.server.metrics")
    local reg = metrics.registry({ model_name = "glm53-tiny" })      -- labels every series carries
    local tokens = reg:counter("vllm:prompt_tokens_total", "Prompt tokens processed.")
    local running = reg:gauge("vllm:num_requests_running", "Requests in the running batch.", function() return 3 end)
    local ttft = reg:histogram("vllm:time_to_first_token_seconds", "Time to first token.", metrics.LATENCY_BUCKETS)
    tokens:inc(12)
    reg:counter("vllm:request_success_total", "Finished requests."):inc(1, { finished_reason = "stop" })
    ttft:observe(0.042)
    io.write(reg:render())   -- what GET /metrics answers (Content-Type: metrics.CONTENT_TYPE)

Names follow the Prometheus conventions (counters end in _total, durations in _seconds); a counter or histogram
may carry extra labels per observation (a table of label = value). A gauge takes a function that is read at render
time. Registering a name twice returns the first metric (so scripts can fetch a metric by name).
]]
local concat, format, sort = table.concat, string.format, table.sort

local M = {}

M.CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

-- Seconds; the buckets vLLM uses for time to first token and per-token times, merged.
M.LATENCY_BUCKETS = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                      20.0, 40.0, 80.0, 160.0, 640.0, 2560.0 }

local function escape(v)
    return (tostring(v):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"'))
end

-- The label set {a="x",b="y"} of the registry's labels plus extra ones, in a stable order.
local function label_text(base, extra, more_name, more_value)
    local names = {}
    for k in pairs(base) do names[#names + 1] = k end
    if extra then for k in pairs(extra) do if base[k] == nil then names[#names + 1] = k end end end
    sort(names)
    local parts = {}
    for _, k in ipairs(names) do
        local v = extra and extra[k]
        if v == nil then v = base[k] end
        parts[#parts + 1] = k .. '="' .. escape(v) .. '"'
    end
    if more_name then parts[#parts + 1] = more_name .. '="' .. more_value .. '"' end
    if #parts == 0 then return "" end
    return "{" .. concat(parts, ",") .. "}"
end

local function number(v)
    if v == math.huge then return "+Inf" end
    if v ~= v then return "NaN" end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return format("%d", v) end
    return format("%.17g", v)
end

local Registry = {}
Registry.__index = Registry

function M.registry(labels)
    return setmetatable({ labels = labels or {}, list = {}, by_name = {} }, Registry)
end

local function register(self, kind, name, help, fields)
    if type(name) ~= "string" or not name:match("^[%a_:][%w_:]*$") then
        error("metrics: invalid metric name " .. tostring(name), 3)
    end
    local old = self.by_name[name]
    if old then
        if old.kind ~= kind then error("metrics: " .. name .. " is already a " .. old.kind, 3) end
        return old
    end
    fields.kind, fields.name, fields.help, fields.registry = kind, name, help or name, self
    self.by_name[name] = fields
    self.list[#self.list + 1] = fields
    return fields
end

-- Series of a metric keyed by their label text.
local function series(m, extra)
    local key = label_text(m.registry.labels, extra)
    local s = m.series[key]
    if not s then
        s = { labels = extra }
        m.series[key] = s
        m.order[#m.order + 1] = key
    end
    return s
end

local Counter = {}
Counter.__index = Counter

function Registry:counter(name, help)
    return setmetatable(register(self, "counter", name, help, { series = {}, order = {} }), Counter)
end

function Counter:inc(n, labels)
    n = n or 1
    if n < 0 then error("counter:inc: counters only go up", 2) end
    local s = series(self, labels)
    s.value = (s.value or 0) + n
end

function Counter:get(labels)
    local s = self.series[label_text(self.registry.labels, labels)]
    return s and s.value or 0
end

local Gauge = {}
Gauge.__index = Gauge

function Registry:gauge(name, help, read)
    if type(read) ~= "function" then error("registry:gauge: read must be a function", 2) end
    return setmetatable(register(self, "gauge", name, help, { read = read }), Gauge)
end

local Histogram = {}
Histogram.__index = Histogram

function Registry:histogram(name, help, buckets)
    buckets = buckets or M.LATENCY_BUCKETS
    for i = 2, #buckets do
        if buckets[i] <= buckets[i - 1] then error("registry:histogram: buckets must increase", 2) end
    end
    return setmetatable(register(self, "histogram", name, help, { buckets = buckets, series = {}, order = {} }),
                        Histogram)
end

function Histogram:observe(v, labels)
    local s = series(self, labels)
    if not s.counts then
        s.counts, s.sum, s.count = {}, 0, 0
        for i = 1, #self.buckets do s.counts[i] = 0 end
    end
    for i, le in ipairs(self.buckets) do
        if v <= le then s.counts[i] = s.counts[i] + 1 end
    end
    s.sum, s.count = s.sum + v, s.count + 1
end

function Histogram:count(labels)
    local s = self.series[label_text(self.registry.labels, labels)]
    return s and s.count or 0
end

-- The exposition text of every metric, in registration order.
function Registry:render()
    local out = {}
    local base = self.labels
    for _, m in ipairs(self.list) do
        -- HELP and TYPE name the metric family: a counter's family drops the _total suffix.
        local family = m.kind == "counter" and m.name:gsub("_total$", "") or m.name
        out[#out + 1] = "# HELP " .. family .. " " .. m.help:gsub("\n", " ")
        out[#out + 1] = "# TYPE " .. family .. " " .. m.kind
        if m.kind == "gauge" then
            out[#out + 1] = m.name .. label_text(base) .. " " .. number(m.read())
        elseif m.kind == "counter" then
            if #m.order == 0 then out[#out + 1] = m.name .. label_text(base) .. " 0" end
            for _, key in ipairs(m.order) do out[#out + 1] = m.name .. key .. " " .. number(m.series[key].value) end
        else
            local keys = m.order
            if #keys == 0 then
                series(m, nil)
                keys = m.order
            end
            for _, key in ipairs(keys) do
                local s = m.series[key]
                local counts = s.counts or {}
                for i, le in ipairs(m.buckets) do
                    out[#out + 1] = m.name .. "_bucket" .. label_text(base, s.labels, "le", number(le)) .. " " ..
                                    number(counts[i] or 0)
                end
                out[#out + 1] = m.name .. "_bucket" .. label_text(base, s.labels, "le", "+Inf") .. " " ..
                                number(s.count or 0)
                out[#out + 1] = m.name .. "_sum" .. key .. " " .. number(s.sum or 0)
                out[#out + 1] = m.name .. "_count" .. key .. " " .. number(s.count or 0)
            end
        end
    end
    out[#out + 1] = ""
    return concat(out, "\n")
end

return M
