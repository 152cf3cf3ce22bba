-- Images and video equal to transformers (issue 7). The references come from
-- tests/fixtures/make_vision_fixtures.py (run on the GPU machine) in tests/fixtures/vision/ (or $GLM53_VISION_FIXTURES):
--   1. pixel values: bitwise equal to Glm5NextImageProcessor / Glm5NextVideoProcessor for every case the index marks
--      exact (no resize; PNG, BMP, GIF); within one uint8 level after normalisation (max abs 0.0151) and 0.002 mean
--      abs when resized; within 3 levels (0.046) for the JPEG case (its decoder differs, see the index); grid_thw
--      equal everywhere; video timestamps equal;
--   2. the vision tower on the reference pixel values against the float64 tower: max|got - ref| / max|ref| within
--      the device's tolerance (tests/lua/device.lua: CPU 1e-3; GLM53_DEVICE=cuda 2e-2, BF16 activations);
--   3. logits of prompts with one image, two images and a video (our preprocessing of the image files, our tower,
--      our placement) against float64 transformers: CPU <= 1e-3 relative with the argmax equal at every position
--      (CUDA: 2e-2, 99%), in prefill and in chunks of 7 rows; the placeholder expansion reproduces the
--      processor's input_ids;
--   4. the CLI contracts: scripts/vision_inputs.lua writes the reference layout, scripts/logits.lua --image fills
--      the placeholders of --tokens.
-- Without the fixture folder every test here fails with a message saying how to make it.
local ffi = require("ffi")
local npy = require("glm53.util.npy")
local model = require("glm53.engine.model")
local vision = require("glm53.engine.vision")
local tokenizer = require("glm53.engine.tokenizer")
local device = require("device")
local fixtures = require("fixtures")

local ROOT = os.getenv("GLM53_VISION_FIXTURES") or "tests/fixtures/vision"
local LEVEL = 1 / (255 * 0.26130258)   -- one uint8 step after normalisation, for the smallest CLIP std
local HOW = "missing " .. ROOT .. "/index.json: run `python3 tests/fixtures/make_vision_fixtures.py --out DIR` on " ..
            "the GPU machine and copy DIR to " .. ROOT

local index = fixtures.read_json(ROOT .. "/index.json")

local function opts_of(kwargs)
    return { min_tokens = kwargs.min_image_tokens, max_tokens = kwargs.max_image_tokens }
end

local function path(rel) return ROOT .. "/" .. rel end

local function preprocess(case)
    if case.kind == "image" then return vision.image(path(case.file), opts_of(case.kwargs)) end
    local frames = {}
    for i, f in ipairs(case.files) do frames[i] = path(f) end
    local o = opts_of(case.kwargs)
    o.fps = #frames > 1 and case.source_fps or nil   -- a GIF: its own frame rate, from its delays
    return vision.video(#frames == 1 and frames[1] or frames, o)
end

-- max abs, mean abs and the number of values whose bits differ.
local function compare_pixels(got, ref, n)
    local maxd, sum, bits = 0, 0, 0
    local gu, ru = ffi.cast("uint32_t *", got), ffi.cast("uint32_t *", ref)
    for i = 0, n - 1 do
        local d = math.abs(got[i] - ref[i])
        if d ~= d then d = math.huge end
        if d > maxd then maxd = d end
        sum = sum + d
        if gu[i] ~= ru[i] then bits = bits + 1 end
    end
    return maxd, sum / n, bits
end

describe("vision fixtures", function()
    it("are present", function()
        assert(index, HOW)
        assert(index.prompts and next(index.prompts), "the index has no prompts (the reference run failed?)")
    end)
end)

if not index then return end

local cases = {}
for name, c in pairs(index.images) do cases[#cases + 1] = { name = name, c = c } end
for name, c in pairs(index.videos) do cases[#cases + 1] = { name = name, c = c } end
table.sort(cases, function(a, b) return a.name < b.name end)

describe("preprocessing equals the reference processor", function()
    for _, e in ipairs(cases) do
        local name, c = e.name, e.c
        it(name .. " (" .. c.why .. ")", function()
            assert(c.pixel_values, name .. ": the reference run has no pixel values for this case")
            local item = assert(preprocess(c))
            local ref = assert(npy.read(path(c.pixel_values)))
            assert.are.same(c.grid_thw, item.grid)
            assert.are.same({ item.n_patches, item.row }, ref.shape)
            local maxd, mean, bits = compare_pixels(item.pixels, ref.data, ref.n)
            print(string.format("  %-13s grid %-10s max abs %.3g (%.2f levels), mean abs %.3g, %d of %d values differ",
                  name, table.concat(item.grid, "x"), maxd, maxd / LEVEL, mean, bits, ref.n))
            if c.exact then
                assert.are.equal(0, bits, name .. ": expected bitwise equality")
            elseif name == "jpeg" then
                assert.is_true(maxd <= 3 * LEVEL + 1e-6 and mean <= 0.005, name .. ": JPEG decoder difference too large")
            else
                assert.is_true(maxd <= LEVEL + 1e-6 and mean <= 0.002, name .. ": resize differs by more than one level")
            end
            if c.kind == "video" then
                assert.are.equal(#c.timestamps, #item.timestamps)
                for i, t in ipairs(c.timestamps) do assert.are.equal(t, item.timestamps[i]) end
            end
        end)
    end
end)

describe("vision tower and logits against float64 transformers", function()
    local m, tok
    setup(function()
        m = assert(model.load(path(index.model), device.load_opts()))
        tok = assert(tokenizer.load("models/tiny/tokenizer.json"))
    end)
    teardown(function()
        if m then m:free() end
    end)

    for _, e in ipairs(cases) do
        local name, c = e.name, e.c
        it("tower " .. name, function()
            assert(c.tower_embeds, name .. ": the reference run has no tower embeddings for this case")
            local px = assert(npy.read(path(c.pixel_values)))
            local item = { kind = c.kind, pixels = px.data, n_patches = px.shape[1], row = px.shape[2], grid = c.grid_thw }
            local got, n = assert(vision.encode(m, { item }))
            local ref = assert(npy.read(path(c.tower_embeds)))
            assert.are.same({ n, m.hidden_size }, ref.shape)
            local err = fixtures.rel_err(got, ref.data, ref.n)
            print(string.format("  tower %-13s %d tokens, rel err %.2e", name, n, err))
            assert.is_true(err <= device.reference, string.format("relative error %.3e", err))
        end)
    end

    local names = {}
    for name in pairs(index.prompts) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
        local p = index.prompts[name]
        describe("prompt " .. name, function()
            local ids, T, ref, images, videos
            setup(function()
                assert(p.logits, name .. ": the reference run has no logits for this prompt")
                local t = assert(npy.read(path(p.input_ids)))
                T = t.n
                ids = ffi.new("int32_t[?]", T)
                for i = 0, T - 1 do ids[i] = t.data[i] end
                ref = assert(npy.read(path(p.logits)))
                images, videos = {}, {}
                for _, media in ipairs(p.media) do
                    local c = index.images[media] or index.videos[media]
                    local item = assert(preprocess(c))
                    if item.kind == "image" then images[#images + 1] = item else videos[#videos + 1] = item end
                end
            end)

            it("placeholder expansion gives the processor's input_ids", function()
                local items = {}
                for _, media in ipairs(p.media) do
                    items[#items + 1] = assert(preprocess(index.images[media] or index.videos[media]))
                end
                local text = assert(vision.expand(p.text, items))
                local got = assert(tok:encode(text))
                assert.are.equal(T, #got)
                for i = 1, T do assert.are.equal(ids[i - 1], got[i], "token " .. i) end
            end)

            for _, step in ipairs({ 0, 7 }) do
                it((step == 0 and "prefill" or "chunks of 7") .. " matches the float64 logits", function()
                    local f = assert(vision.fill(m, ids, T, images, videos))
                    local V = m.vocab_size
                    local seq = assert(m:seq({ max_tokens = T }))
                    local rows = step == 0 and T or step
                    local batch = m:batch({ rows = rows, seqs = 1, outputs = rows })
                    local out = ffi.new("float[?]", T * V)
                    local pos = 0
                    while pos < T do
                        local n = math.min(rows, T - pos)
                        batch:clear()
                        batch:add_embedded(seq, ids + pos, n, f.embeddings + pos * m.hidden_size, f.use + pos, "all")
                        assert(m:step(batch))
                        ffi.copy(out + pos * V, batch:logits(0), n * V * 4)
                        pos = pos + n
                    end
                    seq:free()
                    local err, flips = fixtures.compare(out, ref.data, T, V)
                    print(string.format("  %-11s %-12s T %d, %d media rows, rel err %.2e, argmax flips %d", name,
                          step == 0 and "prefill" or "chunked", T, f.n_media, err, flips))
                    assert.is_true(err <= device.reference, string.format("relative error %.3e", err))
                    assert.is_true(T - flips >= device.argmax_agreement * T, flips .. " argmax flips")
                end)
            end
        end)
    end
end)

describe("CLI contracts", function()
    local lib, build = os.getenv("GLM53_LIB"), os.getenv("GLM53_BUILD")
    local env = (lib and ("GLM53_LIB=" .. lib .. " ") or "") .. (build and ("GLM53_BUILD=" .. build .. " ") or "")
    local tmp = os.tmpname()

    it("vision_inputs.lua writes the reference layout", function()
        local c = assert(index.images.aligned_rgb, "no aligned_rgb case")
        local cmd = string.format("%sluajit scripts/vision_inputs.lua --image %s --out %s.px.npy --grid %s.grid.npy",
                                  env, path(c.file), tmp, tmp)
        local ok = os.execute(cmd)
        assert.is_true(ok == 0 or ok == true, cmd)
        local got, ref = assert(npy.read(tmp .. ".px.npy")), assert(npy.read(path(c.pixel_values)))
        local grid = assert(npy.read(tmp .. ".grid.npy"))
        assert.are.same(ref.shape, got.shape)
        assert.are.same({ 1, 3 }, grid.shape)
        assert.are.equal("<i4", grid.dtype)
        local _, _, bits = compare_pixels(got.data, ref.data, ref.n)
        assert.are.equal(0, bits)
        os.remove(tmp .. ".px.npy")
        os.remove(tmp .. ".grid.npy")
    end)

    it("logits.lua --image fills the placeholders of --tokens", function()
        local p = assert(index.prompts.one_image, "no one_image prompt")
        local c = index.images[p.media[1]]
        local cmd = string.format("%sluajit scripts/logits.lua --model %s --tokens %s --image %s --out %s.logits.npy " ..
                                  "--threads 2 --device %s --activations %s", env, path(index.model), path(p.input_ids),
                                  path(c.file), tmp, device.name, device.activations)
        local ok = os.execute(cmd)
        assert.is_true(ok == 0 or ok == true, cmd)
        local got, ref = assert(npy.read(tmp .. ".logits.npy")), assert(npy.read(path(p.logits)))
        assert.are.same(ref.shape, got.shape)
        local err = fixtures.rel_err(got.data, ref.data, ref.n)
        assert.is_true(err <= device.reference, string.format("relative error %.3e", err))
        os.remove(tmp .. ".logits.npy")
    end)
end)
