--[[
glm53.cli.logits - `glm53 logits`: the logits of a model at every position of a token sequence, as a .npy file.

    glm53 logits --model DIR --tokens IN.npy --out OUT.npy [--mode prefill|decode|chunked] [--chunk N]
                 [--device cpu|cuda] [--threads N] [--activations f32|bf16] [--image PATH ...] [--video PATH ...]

IN.npy is int32 (or int64) [T]; OUT.npy is float32 [T, vocab]. prefill runs the T tokens in one step; decode runs
the first token, then one token per step through the cache; chunked runs steps of N tokens. This contract is
relied on by tests and by the CUDA check (scripts/logits.lua runs this command); keep it.

Images and videos: --image PATH (repeatable) and --video PATH (repeatable; one animated GIF, or frame files
joined by commas, with --fps for their frame rate) fill the image-token placeholders of IN.npy, which must
already be expanded (as transformers' processor writes input_ids): placeholders outside a video span take the
images in order, those inside take the videos in order (glm53.engine.vision.fill; docs/vision.md). Placeholder
tokens without any --image or --video are an error: the model would read the placeholder's own embedding there.
]]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 logits",
    usage = "glm53 logits --tokens IN.npy --out OUT.npy [options]",
    summary = "Writes the logits at every position of a token sequence (int32 [T] in, float32 [T, vocab] out).",
    options = common.options({
        "Input and output:",
        { "tokens", required = true, metavar = "IN.npy", help = "int32 [T] token ids" },
        { "out", required = true, metavar = "OUT.npy", help = "float32 [T, vocab] logits" },
        { "mode", default = "prefill", choices = { "prefill", "decode", "chunked" } },
        { "chunk", type = "integer", min = 1, default = 16, help = "rows per step in chunked mode" },
        { "activations", choices = { "f32", "bf16" }, help = "activation dtype (default: the backend's)" },
        "Images and videos (placeholders already expanded in IN.npy):",
        { "image", list = true, metavar = "PATH", help = "image for the next image placeholders" },
        { "video", list = true, metavar = "PATH", help = "video: a GIF, or frame files joined by commas" },
        { "fps", type = "number", gt = 0, help = "frame rate of --video frame files" },
    }, common.model_options()),
}

-- The media rows for the placeholders of ids[T] from --image and --video, or nil without either.
local function media_rows(args, m, ids, T)
    local cfg = m.config
    if #args.image == 0 and #args.video == 0 then
        if cfg.has_vision ~= 0 then
            local n = 0
            for i = 0, T - 1 do if ids[i] == cfg.image_token_id then n = n + 1 end end
            if n > 0 then
                cli.fail(string.format("%s has %d image placeholder tokens (id %d) but no --image or --video fills " ..
                                       "them", args.tokens, n, cfg.image_token_id))
            end
        end
        return nil
    end
    if cfg.has_vision == 0 then cli.fail(m.path .. " has no vision tower: --image and --video need a vision model") end
    local vision = require("glm53.engine.vision")
    local images, videos = {}, {}
    for i, p in ipairs(args.image) do
        local item, err = vision.image(p)
        images[i] = item or cli.fail("--image " .. common.about(p, err))
    end
    for i, v in ipairs(args.video) do
        local frames = {}
        for f in v:gmatch("[^,]+") do frames[#frames + 1] = f end
        local item, err = vision.video(#frames == 1 and frames[1] or frames, { fps = args.fps })
        videos[i] = item or cli.fail("--video " .. common.about(v, err))
    end
    local media, err = vision.fill(m, ids, T, images, videos)
    if not media then cli.fail(err) end
    return media
end

function M.run(args)
    local ffi = require("ffi")
    local npy = require("glm53.util.npy")
    local tokens, terr = npy.read(args.tokens)
    if not tokens then cli.fail(common.about(args.tokens, terr)) end
    if tokens.dtype ~= "<i4" and tokens.dtype ~= "<i8" then
        cli.fail(args.tokens .. ": expected int32 token ids, got " .. tokens.dtype)
    end
    local T = tokens.n
    if T < 1 then cli.fail(args.tokens .. ": no tokens") end
    local ids = ffi.new("int32_t[?]", T)
    for i = 0, T - 1 do ids[i] = tokens.data[i] end

    local ctx = common.load(args, { load = { activations = args.activations } })
    local m = ctx.m
    local media = media_rows(args, m, ids, T)
    local seq, err = m:seq({ max_tokens = T })
    if not seq then cli.fail(err) end
    local step = args.mode == "prefill" and T or args.mode == "decode" and 1 or args.chunk

    local V = m.vocab_size
    local out = ffi.new("float[?]", T * V)
    local batch = m:batch({ rows = math.min(step, T), seqs = 1, outputs = math.min(step, T) })
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
        if not ok then cli.fail(step_err) end
        ffi.copy(out + pos * V, batch:logits(0), n * V * 4)
        pos = pos + n
    end
    local ok, werr = npy.write(args.out, "<f4", { T, V }, out)
    if not ok then cli.fail(common.about(args.out, werr)) end
    return true
end

return M
