#!/usr/bin/env luajit
--[[
logits.lua - the logits of a model at every position of a token sequence, as a .npy file.

    luajit scripts/logits.lua --model DIR --tokens IN.npy --out OUT.npy [--mode prefill|decode|chunked]
                              [--chunk N] [--device cpu|cuda] [--threads N]

IN.npy is int32 [T]; OUT.npy is float32 [T, vocab]. prefill runs the T tokens in one step; decode runs the
first token, then one token per step through the cache; chunked runs steps of N tokens. This contract is
relied on by tests and by the CUDA check; keep it.

Images and videos: --image PATH (repeatable) and --video PATH (repeatable; one animated GIF, or frame files
joined by commas, with --fps for their frame rate) fill the image-token placeholders of IN.npy, which must
already be expanded (as transformers' processor writes input_ids): placeholders outside a video span take the
images in order, those inside take the videos in order (glm53.engine.vision.fill; docs/vision.md).
]]
local script = arg and arg[0] or "scripts/logits.lua"
package.path = (script:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" ..
               (script:match("^(.*)/[^/]*$") or ".") .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse(arg, {
    usage = "luajit scripts/logits.lua --model DIR --tokens IN.npy --out OUT.npy [options]",
    options = {
        model = { required = true, metavar = "DIR", help = "checkpoint directory" },
        tokens = { required = true, metavar = "IN.npy", help = "int32 [T] token ids" },
        out = { required = true, metavar = "OUT.npy", help = "float32 [T, vocab] logits" },
        mode = { default = "prefill", choices = { "prefill", "decode", "chunked" } },
        chunk = { type = "number", default = 16, help = "rows per step in chunked mode" },
        device = { default = "cpu", choices = { "cpu", "cuda" } },
        threads = { type = "number", default = 0, help = "CPU threads (0 = all cores)" },
        activations = { choices = { "f32", "bf16" }, help = "activation dtype (default: the backend's)" },
        image = { list = true, metavar = "PATH", help = "image for the next image placeholders" },
        video = { list = true, metavar = "PATH", help = "video: a GIF, or frame files joined by commas" },
        fps = { type = "number", help = "frame rate of --video frame files" },
    },
})

local ffi = require("ffi")
local npy = require("glm53.util.npy")
local model = require("glm53.engine.model")

local function die(msg)
    io.stderr:write("logits.lua: ", msg, "\n")
    os.exit(1)
end

local tokens = assert(npy.read(args.tokens))
if tokens.dtype ~= "<i4" and tokens.dtype ~= "<i8" then die(args.tokens .. ": expected int32 token ids, got " .. tokens.dtype) end
local T = tokens.n
if T < 1 then die(args.tokens .. ": no tokens") end
local ids = ffi.new("int32_t[?]", T)
for i = 0, T - 1 do ids[i] = tokens.data[i] end

local m, err = model.load(args.model, { device = args.device, threads = args.threads,
                                        activations = args.activations })
if not m then die(err) end
local seq = assert(m:seq({ max_tokens = T }))
local step = args.mode == "prefill" and T or args.mode == "decode" and 1 or args.chunk
if step < 1 then die("--chunk must be >= 1") end

-- Image and video rows (glm53.engine.vision): embeddings for the placeholder positions of ids.
local media
if #args.image > 0 or #args.video > 0 then
    local vision = require("glm53.engine.vision")
    local images, videos = {}, {}
    for i, p in ipairs(args.image) do
        local item, verr = vision.image(p)
        images[i] = item or die(p .. ": " .. tostring(verr))
    end
    for i, v in ipairs(args.video) do
        local frames = {}
        for f in v:gmatch("[^,]+") do frames[#frames + 1] = f end
        local item, verr = vision.video(#frames == 1 and frames[1] or frames, { fps = args.fps })
        videos[i] = item or die(v .. ": " .. tostring(verr))
    end
    local ferr
    media, ferr = vision.fill(m, ids, T, images, videos)
    if not media then die(ferr) end
end

local V = m.vocab_size
local out = ffi.new("float[?]", T * V)
local batch = m:batch({ rows = step, seqs = 1, outputs = step })
local pos = 0
while pos < T do
    local n = math.min(step, T - pos)
    batch:clear()
    if media then
        batch:add_embedded(seq, ids + pos, n, media.embeddings + pos * m.hidden_size, media.use + pos, "all")
    else
        batch:add(seq, ids + pos, "all", n)
    end
    local ok, step_err = m:step(batch)
    if not ok then die(step_err) end
    ffi.copy(out + pos * V, batch:logits(0), n * V * 4)
    pos = pos + n
end
local ok, werr = npy.write(args.out, "<f4", { T, V }, out)
if not ok then die(werr) end
