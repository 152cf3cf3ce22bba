--[[
glm53.engine.vision - images and videos for GLM-5.3-Flash: preprocessing (core/image.c), the vision tower
(glm53_model_encode_vision) and placing its embedding rows at the prompt's placeholder tokens.

    local vision = require("glm53.engine.vision")
    local img = assert(vision.image("cat.png"))              -- a path, a data: URL, or {base64 = ...} / {bytes = ...}
    -- img = { kind = "image", pixels = float[n_patches * 1176], n_patches, grid = {t, h, w}, n_tokens }
    local vid = assert(vision.video({ "f0.png", "f1.png", "f2.png" }, { fps = 4 }))   -- or vision.video("a.gif")
    -- vid also has timestamps = { seconds of each frame pair }
    local emb = assert(vision.encode(m, { img, vid }))        -- float[n_tokens * hidden], rows in order

    -- A rendered chat prompt with <|image|> / <|video|> placeholders, expanded as transformers' processor does,
    -- tokenized, with the embedding rows at the image-token positions:
    local p = assert(vision.prompt(m, tok, prompt_text, { img, vid }))
    batch:add_embedded(seq, p.ids, p.n, p.embeddings, p.use, "last")

    -- OpenAI messages with image_url / video_url parts, through glm53.chat.template:
    local p = assert(vision.chat(m, tok, messages, { reasoning_effort = "low" }))

Sources: a file path ("file://" allowed), a data URL ("data:image/png;base64,..."), or a table {base64 = s} or
{bytes = s}. Remote http(s) URLs are not fetched. A video is a list of frame sources or one animated GIF source.
Options: min_tokens, max_tokens (token budget; images 16..8000, videos 16..240000 in total), max_pixels;
videos also fps (source frame rate: required for frame lists, a GIF's own by default), sample_fps (2),
max_frames (2048). Argument errors raise; runtime failures (unreadable file, corrupt image, model without a
vision tower) return nil, err.
]]
local base64 = require("glm53.util.base64")
local core = require("glm53.ffi.core")
local file = require("glm53.util.file")
local ffi, C = core.ffi, core.C

local M = {}

local ROW = 3 * 2 * 14 * 14   -- floats per pixel row with the default patch sizes (checked against the result)
M.IMAGE_TOKEN, M.VIDEO_TOKEN = "<|image|>", "<|video|>"

---------------------------------------------------------------------------------------------------------------
-- Sources
---------------------------------------------------------------------------------------------------------------
-- Standard or URL-safe base64 -> bytes, or nil, err (glm53.util.base64).
M.base64_decode = base64.decode

-- The encoded bytes of a source, or nil, err.
function M.load_bytes(src)
    if type(src) == "table" then
        if type(src.bytes) == "string" then return src.bytes end
        if type(src.base64) == "string" then return M.base64_decode(src.base64) end
        if type(src.path) == "string" then return file.read_file(src.path) end
        error("vision: a source table needs bytes, base64 or path", 3)
    end
    if type(src) ~= "string" then error("vision: a source is a path, a data URL or a table, got " .. type(src), 3) end
    if src:sub(1, 5) == "data:" then
        local comma = src:find(",", 1, true)
        if not comma then return nil, "data URL without a comma" end
        if not src:sub(1, comma - 1):find(";base64", 1, true) then
            return nil, "data URL is not base64 (" .. src:sub(1, math.min(comma, 40)) .. ")"
        end
        return M.base64_decode(src:sub(comma + 1))
    end
    if src:match("^https?://") then
        return nil, "remote URLs are not fetched (" .. src:sub(1, 60) .. "); pass a file path, a data URL or base64"
    end
    if src:sub(1, 7) == "file://" then src = src:sub(8) end
    return file.read_file(src)
end

---------------------------------------------------------------------------------------------------------------
-- Preprocessing
---------------------------------------------------------------------------------------------------------------
local function image_params(p, opts)
    if opts.min_tokens ~= nil then p.min_tokens = opts.min_tokens end
    if opts.max_tokens ~= nil then p.max_tokens = opts.max_tokens end
    if opts.max_pixels ~= nil then p.max_pixels = opts.max_pixels end
end

local function row_width(p)
    return 3 * p.temporal_patch_size * p.patch_size * p.patch_size
end

-- One image -> { kind = "image", pixels, n_patches, grid, n_tokens, row }, or nil, err.
function M.image(src, opts)
    opts = opts or {}
    if type(opts) ~= "table" then error("vision.image: opts must be a table", 2) end
    local data, err = M.load_bytes(src)
    if not data then return nil, err end
    local p = C.glm53_image_default_params()
    image_params(p, opts)
    local grid, n = ffi.new("int32_t[3]"), ffi.new("int64_t[1]")
    local ok, e = core.check(C.glm53_image_preprocess(data, #data, p, nil, 0, grid, n))
    if not ok then return nil, e end
    local row = row_width(p)
    local pixels = ffi.new("float[?]", tonumber(n[0]) * row)
    ok, e = core.check(C.glm53_image_preprocess(data, #data, p, pixels, n[0], grid, n))
    if not ok then return nil, e end
    local merge2 = p.merge_size * p.merge_size
    return { kind = "image", pixels = pixels, n_patches = tonumber(n[0]), row = row,
             grid = { grid[0], grid[1], grid[2] }, n_tokens = tonumber(n[0]) / merge2 }
end

-- A video: a list of frame sources, or one (animated GIF) source -> the image fields plus timestamps.
function M.video(srcs, opts)
    opts = opts or {}
    if type(opts) ~= "table" then error("vision.video: opts must be a table", 2) end
    if type(srcs) ~= "table" or srcs.bytes or srcs.base64 or srcs.path then srcs = { srcs } end
    if #srcs < 1 then error("vision.video: no frames", 2) end
    local keep, ptrs, lens = {}, ffi.new("const void *[?]", #srcs), ffi.new("size_t[?]", #srcs)
    for i, s in ipairs(srcs) do
        local data, err = M.load_bytes(s)
        if not data then return nil, "frame " .. i .. ": " .. tostring(err) end
        keep[i] = data
        ptrs[i - 1], lens[i - 1] = data, #data
    end
    local p = C.glm53_video_default_params()
    image_params(p.image, opts)
    if opts.fps ~= nil then p.source_fps = opts.fps end
    if opts.sample_fps ~= nil then p.sample_fps = opts.sample_fps end
    if opts.max_frames ~= nil then p.max_frames = opts.max_frames end
    local grid, n = ffi.new("int32_t[3]"), ffi.new("int64_t[1]")
    local ok, e = core.check(C.glm53_video_preprocess(ptrs, lens, #srcs, p, nil, 0, grid, nil, 0, n))
    if not ok then return nil, e end
    local row = row_width(p.image)
    local pixels = ffi.new("float[?]", tonumber(n[0]) * row)
    local ts = ffi.new("double[?]", grid[0])
    ok, e = core.check(C.glm53_video_preprocess(ptrs, lens, #srcs, p, pixels, n[0], grid, ts, grid[0], n))
    if not ok then return nil, e end
    local timestamps = {}
    for i = 0, grid[0] - 1 do timestamps[i + 1] = ts[i] end
    local merge2 = p.image.merge_size * p.image.merge_size
    return { kind = "video", pixels = pixels, n_patches = tonumber(n[0]), row = row,
             grid = { grid[0], grid[1], grid[2] }, n_tokens = tonumber(n[0]) / merge2, timestamps = timestamps }
end

---------------------------------------------------------------------------------------------------------------
-- The tower
---------------------------------------------------------------------------------------------------------------
local function model_handle(m)
    if type(m) ~= "table" or m._h == nil then error("vision: expected a loaded glm53.engine.model", 3) end
    return m._h
end

-- Embedding rows of items (images / videos, in order): float[n_tokens * hidden], n_tokens; or nil, err.
function M.encode(m, items)
    local h = model_handle(m)
    if type(items) ~= "table" or #items < 1 then error("vision.encode: items must be a non-empty list", 2) end
    local rows, row = 0, items[1].row
    for _, it in ipairs(items) do
        if it.row ~= row then error("vision.encode: items preprocessed with different patch sizes", 2) end
        rows = rows + it.n_patches
    end
    local pixels = items[1].pixels
    if #items > 1 then
        pixels = ffi.new("float[?]", rows * row)
        local at = 0
        for _, it in ipairs(items) do
            ffi.copy(pixels + at * row, it.pixels, it.n_patches * row * 4)
            at = at + it.n_patches
        end
    end
    local grids = ffi.new("int32_t[?]", 3 * #items)
    for i, it in ipairs(items) do
        for j = 1, 3 do grids[3 * (i - 1) + j - 1] = it.grid[j] end
    end
    local n = ffi.new("int64_t[1]")
    local ok, e = core.check(C.glm53_model_encode_vision(h, pixels, rows, grids, #items, nil, 0, n))
    if not ok then return nil, e end
    local D = m.hidden_size
    local out = ffi.new("float[?]", tonumber(n[0]) * D)
    ok, e = core.check(C.glm53_model_encode_vision(h, pixels, rows, grids, #items, out, n[0], n))
    if not ok then return nil, e end
    return out, tonumber(n[0])
end

---------------------------------------------------------------------------------------------------------------
-- Placement
---------------------------------------------------------------------------------------------------------------
-- The text transformers' Glm5NextProcessor makes of a prompt: the i-th <|image|> or <|video|> placeholder becomes
-- the i-th item's tokens (an image: t*h*w/4 image tokens; a video: per frame pair "<|begin_of_image|>" image
-- tokens "<|end_of_image|>%.1f seconds"). One pass, left to right, so expanded text is never rescanned.
function M.expand(text, items)
    if type(text) ~= "string" then error("vision.expand: text must be a string", 2) end
    items = items or {}
    local out, i, k = {}, 1, 0
    while true do
        local a = text:find("<|", i, true)
        local is_img = a and text:sub(a, a + #M.IMAGE_TOKEN - 1) == M.IMAGE_TOKEN
        local is_vid = a and text:sub(a, a + #M.VIDEO_TOKEN - 1) == M.VIDEO_TOKEN
        if not a then
            out[#out + 1] = text:sub(i)
            break
        end
        if is_img or is_vid then
            out[#out + 1] = text:sub(i, a - 1)
            k = k + 1
            local it = items[k]
            if not it then return nil, "the prompt has more media placeholders than the " .. #items .. " items given" end
            local t, h, w = it.grid[1], it.grid[2], it.grid[3]
            if is_img then
                if it.kind ~= "image" then return nil, "placeholder " .. k .. " is an image, item " .. k .. " a " .. it.kind end
                out[#out + 1] = string.rep(M.IMAGE_TOKEN, t * h * w / 4)
                i = a + #M.IMAGE_TOKEN
            else
                if it.kind ~= "video" then return nil, "placeholder " .. k .. " is a video, item " .. k .. " an " .. it.kind end
                local frame = "<|begin_of_image|>" .. string.rep(M.IMAGE_TOKEN, h * w / 4) .. "<|end_of_image|>"
                for g = 1, t do out[#out + 1] = frame .. string.format("%.1f seconds", it.timestamps[g]) end
                i = a + #M.VIDEO_TOKEN
            end
        else
            out[#out + 1] = text:sub(i, a + 1)
            i = a + 2
        end
    end
    if k ~= #items then return nil, #items .. " media items for " .. k .. " placeholders" end
    return table.concat(out)
end

-- Embedding rows for token ids[n] (cdata int32_t* or Lua list) from image and video items, as transformers
-- scatters them: image-token positions outside <|begin_of_video|> .. <|end_of_video|> take the images in order,
-- those inside take the videos in order. Returns { embeddings = float[n * hidden], use = uint8_t[n],
-- n_media = rows filled }, or nil, err when the counts do not match.
function M.fill(m, ids, n, images, videos)
    local cfg = m.config
    local img_id, vs, ve = cfg.image_token_id, cfg.video_start_token_id, cfg.video_end_token_id
    if type(ids) == "table" then
        local c = ffi.new("int32_t[?]", math.max(#ids, 1))
        for i = 1, #ids do c[i - 1] = ids[i] end
        ids, n = c, #ids
    end
    images, videos = images or {}, videos or {}
    local D = m.hidden_size
    local function embed(items)
        if #items == 0 then return nil, 0 end
        return M.encode(m, items)
    end
    local ie, ni = embed(images)
    if images[1] and not ie then return nil, ni end
    local ve_rows, nv = embed(videos)
    if videos[1] and not ve_rows then return nil, nv end
    local emb = ffi.new("float[?]", math.max(n, 1) * D)
    local use = ffi.new("uint8_t[?]", math.max(n, 1))
    local starts, ends, ki, kv = 0, 0, 0, 0
    for r = 0, n - 1 do
        local id = ids[r]
        if id == vs then starts = starts + 1 elseif id == ve then ends = ends + 1 end
        if id == img_id then
            if starts > ends then
                if kv >= nv then return nil, "more video placeholder tokens than the " .. nv .. " video embedding rows" end
                ffi.copy(emb + r * D, ve_rows + kv * D, D * 4)
                kv = kv + 1
            else
                if ki >= ni then return nil, "more image placeholder tokens than the " .. ni .. " image embedding rows" end
                ffi.copy(emb + r * D, ie + ki * D, D * 4)
                ki = ki + 1
            end
            use[r] = 1
        end
    end
    if ki ~= ni or kv ~= nv then
        return nil, string.format("placeholder tokens: %d image and %d video, embedding rows: %d and %d", ki, kv, ni, nv)
    end
    return { embeddings = emb, use = use, n_media = ki + kv }
end

-- A prompt with placeholders -> { ids = int32_t[n], n, embeddings, use, text } ready for batch:add_embedded.
function M.prompt(m, tok, text, items)
    model_handle(m)
    if type(text) ~= "string" then error("vision.prompt: text must be a string", 2) end
    items = items or {}
    local expanded, err = M.expand(text, items)
    if not expanded then return nil, err end
    local buf, n = tok:encode_buffer(expanded)
    if not buf then return nil, n end
    local ids = ffi.new("int32_t[?]", math.max(n, 1))
    ffi.copy(ids, buf, n * 4)
    local images, videos = {}, {}
    for _, it in ipairs(items) do
        if it.kind == "image" then images[#images + 1] = it else videos[#videos + 1] = it end
    end
    local f, ferr = M.fill(m, ids, n, images, videos)
    if not f then return nil, ferr end
    return { ids = ids, n = n, embeddings = f.embeddings, use = f.use, n_media = f.n_media, text = expanded }
end

---------------------------------------------------------------------------------------------------------------
-- Chat messages
---------------------------------------------------------------------------------------------------------------
local IMAGE_PARTS = { image = true, image_url = true }
local VIDEO_PARTS = { video = true, video_url = true }

-- The source of a media part: OpenAI {type="image_url", image_url={url=...}} (or a bare string), or the HF forms
-- {type="image", image=... | url=... | path=...}; videos alike (a list of frames is allowed there).
local function part_source(part)
    local v = part[part.type]
    if type(v) == "table" and not v[1] and (v.url or v.path) then return v.url or v.path, v end
    if v ~= nil then return v, {} end
    return part.url or part.path, {}
end

-- The media items of OpenAI-shaped messages, in the order the chat template writes their placeholders.
function M.message_media(messages, opts)
    opts = opts or {}
    local items = {}
    for mi, msg in ipairs(messages) do
        local content = type(msg) == "table" and msg.content or nil
        if type(content) == "table" then
            for pi, part in ipairs(content) do
                local ty = type(part) == "table" and part.type or nil
                if IMAGE_PARTS[ty] or VIDEO_PARTS[ty] then
                    if msg.role == "tool" then
                        return nil, "message " .. mi .. ": media in tool messages is not supported"
                    end
                    local src, extra = part_source(part)
                    if src == nil then return nil, "message " .. mi .. " part " .. pi .. ": no image or video source" end
                    local it, err
                    if IMAGE_PARTS[ty] then
                        it, err = M.image(src, opts)
                    else
                        local vopts = setmetatable({ fps = part.fps or extra.fps or opts.fps }, { __index = opts })
                        it, err = M.video(src, vopts)
                    end
                    if not it then return nil, "message " .. mi .. " part " .. pi .. ": " .. tostring(err) end
                    items[#items + 1] = it
                end
            end
        end
    end
    return items
end

-- messages (OpenAI shape, with image_url / video_url parts) -> M.prompt's result for the rendered chat prompt.
-- opts go to chat.render (tools, reasoning_effort, ...) and to the preprocessing (max_tokens, fps, ...).
function M.chat(m, tok, messages, opts)
    opts = opts or {}
    local chat = require("glm53.chat.template")
    if type(messages) == "string" then
        local json = require("glm53.chat.json")
        local v, err = json.decode(messages, { exact = true })
        if v == nil then return nil, "messages: " .. err end
        messages = v
    end
    local items, err = M.message_media(messages, opts)
    if not items then return nil, err end
    local text, rerr = chat.render(messages, opts)
    if not text then return nil, rerr end
    return M.prompt(m, tok, text, items)
end

return M
