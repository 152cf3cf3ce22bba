#!/usr/bin/env luajit
--[[
vision_inputs.lua - the preprocessed pixel values of an image or a video, laid out as transformers'
Glm5NextImageProcessor / Glm5NextVideoProcessor lay them out, as .npy files.

    luajit scripts/vision_inputs.lua --image PATH --out PIXELS.npy --grid GRID.npy
    luajit scripts/vision_inputs.lua --video F0.png --video F1.png ... --fps 4 --out PIXELS.npy --grid GRID.npy
    luajit scripts/vision_inputs.lua --video ANIM.gif --out PIXELS.npy --grid GRID.npy [--timestamps TS.npy]

PIXELS.npy is float32 [patches, 1176] (rows in merge-block order, each (channel, frame, y, x)); GRID.npy is int32
[1, 3] = (t, h, w) in patches. An image is one source; a video is one animated GIF or several --video frames in
order. --timestamps writes float64 [t]: the seconds of each frame pair (videos). Sources may also be data URLs.
This contract is relied on by tests and by other checks; keep it.
]]
local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path

local cli = require("glm53.util.cli")
local args = cli.parse_or_exit(arg, {
    prog = "vision_inputs.lua",
    usage = "luajit scripts/vision_inputs.lua (--image PATH | --video PATH ...) --out PIXELS.npy --grid GRID.npy",
    summary = "Writes the preprocessed pixels of an image or a video as transformers lays them out.",
    options = {
        { "image", metavar = "PATH", help = "an image (PNG, JPEG, BMP, GIF)" },
        { "video", list = true, metavar = "PATH", help = "video frames in order, or one animated GIF" },
        { "fps", type = "number", gt = 0, help = "frame rate of the --video frames (a GIF's own by default)" },
        { "out", required = true, metavar = "PIXELS.npy", help = "float32 [patches, 1176]" },
        { "grid", required = true, metavar = "GRID.npy", help = "int32 [1, 3]" },
        { "timestamps", metavar = "TS.npy", help = "float64 [t] frame-pair times (videos)" },
        { "min_tokens", type = "integer", min = 1, help = "token budget minimum (default 16)" },
        { "max_tokens", type = "integer", min = 1, help = "token budget maximum (default 8000 image, 240000 video)" },
    },
})

local npy = require("glm53.util.npy")
local vision = require("glm53.engine.vision")

local function die(msg)
    io.stderr:write("vision_inputs.lua: ", msg, "\n")
    os.exit(1)
end

if (args.image ~= nil) == (#args.video > 0) then die("give exactly one of --image or --video") end
local opts = { min_tokens = args.min_tokens, max_tokens = args.max_tokens, fps = args.fps }
local item, err
if args.image then
    item, err = vision.image(args.image, opts)
else
    item, err = vision.video(#args.video == 1 and args.video[1] or args.video, opts)
end
if not item then die(err) end
local ok, werr = npy.write(args.out, "<f4", { item.n_patches, item.row }, item.pixels)
if not ok then die(werr) end
ok, werr = npy.write(args.grid, "<i4", { 1, 3 }, item.grid)
if not ok then die(werr) end
if args.timestamps then
    if item.kind ~= "video" then die("--timestamps is for videos") end
    ok, werr = npy.write(args.timestamps, "<f8", { #item.timestamps }, item.timestamps)
    if not ok then die(werr) end
end
