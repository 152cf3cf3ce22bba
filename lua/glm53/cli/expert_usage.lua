--[[
glm53.cli.expert_usage - `glm53 expert-usage`: which experts each MoE layer routes to, and how far back each
sparse layer's selected positions reach, per task family; an HTML report with SVG heatmaps.

    glm53 expert-usage --model models/glm53-tiny --task evals/data/tiny/arith.jsonl \
                       --task evals/data/tiny/retrieval.jsonl --per-family 8 --out /tmp/experts

Each prompt (a --task JSONL item's `messages` and `tools`, rendered with the chat template; items with images are
left out: the in-process run prefills text) is prefilled once by a sequence made with the research capture
(docs/research.md), which records per position the routed experts of every MoE layer and the selected positions
of every sparse layer with an indexer. Per family it counts:
  - expert load: the share of a layer's routed slots (positions x top-k) that went to each expert, with the
    layer's max / mean load (1 = perfectly balanced) and the normalised entropy of its load (1 = uniform);
  - selection distance: for a position p and a selected position q, d = p - q, in buckets 0, 1, 2-3, 4-7, ...
    (powers of two), as a share of the layer's selections.
Writes DIR/report.html (per family: a layers x experts heatmap and a layers x distance heatmap, and the tables)
and DIR/report.json (every count). Prints the per-layer table. Progress goes to stderr.
]]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 expert-usage",
    usage = "glm53 expert-usage --task FILE [--task FILE ...] [--per-family N] [--out DIR] [options]",
    summary = "Counts routed experts per MoE layer and selection distances per sparse layer, per task family, " ..
              "through the research capture; an HTML report with heatmaps.",
    options = common.options(common.model_options(), {
        "Prompts and output:",
        { "task", list = true, required = true, metavar = "FILE", help = "JSONL of chat items (messages, tools, family)" },
        { "per_family", type = "integer", min = 1, default = 8, help = "prompts per family" },
        { "out", default = "expert_usage", metavar = "DIR", help = "report directory" },
    }),
}

-- The distance bucket of d >= 0: 0 for 0, 1 for 1, b for [2^(b-1), 2^b).
local function bucket(d)
    local b = 0
    while d > 0 do d, b = math.floor(d / 2), b + 1 end
    return b
end

-- A bucket's label: its lowest distance.
local function bucket_label(b)
    return b == 0 and "0" or string.format("%d", 2 ^ (b - 1))
end

function M.run(args)
    local cjson = require("cjson")
    local generator = require("glm53.eval.generator")
    local file = require("glm53.util.file")
    local svg = require("glm53.report.svg")
    local html = require("glm53.report.html")
    local text = require("glm53.report.text")

    local ctx = common.load(args, { need_tokenizer = true })
    local m = ctx.m
    local cfg = m.config.text
    local L, E, n_layers = cfg.num_hidden_layers, cfg.n_routed_experts, cfg.num_hidden_layers

    -- The prompts by family, in order of first appearance.
    local families, by_name, skipped = {}, {}, 0
    for _, path in ipairs(args.task) do
        common.each_task_item(path, function(item)
            local name = type(item.family) == "string" and item.family or "all"
            local fam = by_name[name]
            if not fam then
                fam = { name = name, prompts = {} }
                by_name[name] = fam
                families[#families + 1] = fam
            end
            if #fam.prompts < args.per_family then
                local ids = generator.encode(ctx.tok, item.messages or item.prompt, { tools = item.tools })
                if ids then fam.prompts[#fam.prompts + 1] = ids else skipped = skipped + 1 end
            end
        end)
    end

    -- Counting.
    local total = 0
    for _, fam in ipairs(families) do total = total + #fam.prompts end
    local done = 0
    for _, fam in ipairs(families) do
        fam.load, fam.dist, fam.tokens, fam.max_bucket = {}, {}, 0, 0
        for _, ids in ipairs(fam.prompts) do
            local seq = assert(m:seq({ max_tokens = #ids, capture = { experts = true, selection = true } }))
            local batch = m:batch({ rows = #ids, seqs = 1, outputs = 1 })
            batch:add(seq, ids)
            local ok, err = m:step(batch)
            if not ok then cli.fail(err) end
            fam.tokens = fam.tokens + #ids
            for layer = 0, n_layers - 1 do
                local cap = seq:captured_experts(layer)
                if cap then
                    local counts = fam.load[layer] or {}
                    fam.load[layer] = counts
                    for i = 0, cap.n * cap.k - 1 do
                        local e = cap.ids[i]
                        if e >= 0 then counts[e] = (counts[e] or 0) + 1 end
                    end
                end
                local sel = seq:captured_selection(layer)
                if sel then
                    local hist = fam.dist[layer] or {}
                    fam.dist[layer] = hist
                    for p = 0, sel.n - 1 do
                        for j = 0, sel.width - 1 do
                            local q = sel.positions[p * sel.width + j]
                            if q >= 0 then
                                local b = bucket(p - q)
                                hist[b] = (hist[b] or 0) + 1
                                if b > fam.max_bucket then fam.max_bucket = b end
                            end
                        end
                    end
                end
            end
            seq:free()
            done = done + 1
            io.stderr:write(string.format("[%d/%d] %s: %d tokens\n", done, total, fam.name, #ids))
        end
    end

    -- Tables and heatmaps.
    local header = { "family", "layer", "tokens", "max / mean load", "load entropy", "top experts (share)" }
    local rows, parts = {}, {}
    local json = { model = ctx.dir, skipped_items = skipped, families = {} }
    -- One family's rows, plots and JSON (a family of image items only has nothing to count in-process).
    local function report_family(fam)
        local load_rows, load_labels, dist_rows, dist_labels = {}, {}, {}, {}
        local jf = { family = fam.name, prompts = #fam.prompts, tokens = fam.tokens, expert_load = {}, distance = {} }
        for layer = 0, L - 1 do
            local counts = fam.load[layer]
            if counts then
                local slots = 0
                for e = 0, E - 1 do slots = slots + (counts[e] or 0) end
                local shares, entropy, max_share, order = {}, 0, 0, {}
                for e = 0, E - 1 do
                    local p = slots > 0 and (counts[e] or 0) / slots or 0
                    shares[e + 1] = p
                    if p > 0 then entropy = entropy - p * math.log(p) end
                    if p > max_share then max_share = p end
                    order[#order + 1] = e
                end
                table.sort(order, function(a, b) return (counts[a] or 0) > (counts[b] or 0) or
                                                        ((counts[a] or 0) == (counts[b] or 0) and a < b) end)
                local top = {}
                for i = 1, math.min(3, #order) do top[i] = string.format("%d (%.2f)", order[i], shares[order[i] + 1]) end
                rows[#rows + 1] = { fam.name, tostring(layer), tostring(fam.tokens), string.format("%.2f", max_share * E),
                                    string.format("%.3f", entropy / math.log(E)), table.concat(top, " ") }
                load_rows[#load_rows + 1] = shares
                load_labels[#load_labels + 1] = "layer " .. layer
                jf.expert_load[#jf.expert_load + 1] = { layer = layer, slots = slots, shares = shares }
            end
            local hist = fam.dist[layer]
            if hist then
                local n, row = 0, {}
                for b = 0, fam.max_bucket do n = n + (hist[b] or 0) end
                for b = 0, fam.max_bucket do row[b + 1] = n > 0 and (hist[b] or 0) / n or 0 end
                dist_rows[#dist_rows + 1] = row
                dist_labels[#dist_labels + 1] = "layer " .. layer
                jf.distance[#jf.distance + 1] = { layer = layer, selections = n, shares = row }
            end
        end
        local expert_labels, bucket_labels = {}, {}
        for e = 1, E do expert_labels[e] = tostring(e - 1) end
        for b = 0, fam.max_bucket do bucket_labels[b + 1] = bucket_label(b) end
        parts[#parts + 1] = "<h2>" .. html.escape(fam.name) .. string.format("</h2><p>%d prompts, %d tokens.</p>",
                                                                             #fam.prompts, fam.tokens)
        if #load_rows > 0 then
            parts[#parts + 1] = svg.heatmap({ title = fam.name .. ": share of routed slots per expert",
                                              values = load_rows, row_labels = load_labels, col_labels = expert_labels,
                                              xlabel = "expert", ylabel = "MoE layer", format = "%.3f" })
        end
        if #dist_rows > 0 then
            parts[#parts + 1] = svg.heatmap({ title = fam.name .. ": share of selections by distance p - q",
                                              values = dist_rows, row_labels = dist_labels, col_labels = bucket_labels,
                                              col_every = 1, xlabel = "distance p - q (buckets 0, 1, 2-3, 4-7, ...: their lowest)",
                                              ylabel = "sparse layer",
                                              format = "%.3f" })
        end
        json.families[#json.families + 1] = jf
    end
    for _, fam in ipairs(families) do
        if #fam.prompts > 0 then report_family(fam) end
    end

    print(string.format("model %s, %d families, %d prompts (%d items with images left out)", ctx.dir, #families,
                        total, skipped))
    print(text.table(header, rows))

    local file_ok = file.mkdir_p(args.out)
    if not file_ok then cli.fail("cannot make " .. args.out) end
    local page = html.page("Expert usage and selection distances", {
        "<h1>Expert usage and selection distances</h1>",
        string.format("<p>model <code>%s</code>; %d families, %d prompts (prefill only; %d items with images left " ..
                      "out). Load: the share of a layer's routed slots (positions x top-%d) per expert; max / mean " ..
                      "1 is perfectly balanced. Distance: p - q for each position p and each position q its sparse " ..
                      "layer selected.</p>", html.escape(ctx.dir), #families, total, skipped, cfg.num_experts_per_tok),
        "<p>command: <code>" .. html.escape(args.command_line or "") .. "</code></p>",
        html.table(header, rows),
        table.concat(parts, "\n"),
    })
    assert(file.write_file(args.out .. "/report.html", page .. "\n"))
    assert(file.write_file(args.out .. "/report.json", cjson.encode(json) .. "\n"))
    io.stderr:write("wrote " .. args.out .. "/report.html and report.json\n")
    return true
end

return M
