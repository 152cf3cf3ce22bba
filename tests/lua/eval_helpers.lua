-- Test helpers for the eval runner and load-generator specs: child processes started outside the luv loop
-- (so a spec's uv.run() is not held open by them), our server on a free port, record files compared without
-- their wall-clock field, and a PNG reader for the headless-Chromium screenshot checks.
local ffi = require("ffi")
local file = require("glm53.util.file")

local M = {}

ffi.cdef [[
int usleep(unsigned int usec);
unsigned long compressBound(unsigned long sourceLen);
int uncompress(uint8_t *dest, unsigned long *destLen, const uint8_t *source, unsigned long sourceLen);
]]

M.LUAJIT = "luajit"

function M.sleep(seconds) ffi.C.usleep(math.floor(seconds * 1e6)) end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.quote = quote

-- Starts `command` (a shell command line) in the background; returns { pid =, pipe = } where pipe reads its
-- stdout. :stop(signal) sends the signal (default TERM) and waits for the exit.
function M.start(command)
    local pipe = assert(io.popen("echo $$; exec " .. command, "r"))
    local pid = tonumber(pipe:read("*l"))
    assert(pid, "no pid from the child")
    return {
        pid = pid, pipe = pipe,
        stop = function(self, signal)
            os.execute("kill -" .. (signal or "TERM") .. " " .. self.pid .. " 2>/dev/null")
            self.pipe:close()
        end,
    }
end

-- Our server (scripts/serve.lua; the bundled models/glm53-tiny unless args name --model) on a free loopback port,
-- serving: { url, port, stop }. args: its extra command-line arguments (a list).
function M.start_server(args)
    local srv = require("server_helpers").start(args)
    return { url = "http://127.0.0.1:" .. srv.port, port = srv.port, stop = function() srv.stop() end }
end

-- Lines of a records file with the wall-clock field (latency_s, always last) cut off.
function M.records_without_latency(path)
    local text = assert(file.read_file(path))
    return (text:gsub(',"latency_s":[^}\n]*}\n', "}\n"))
end

function M.count_lines(path)
    local text = file.read_file(path) or ""
    local n = 0
    for _ in text:gmatch("\n") do n = n + 1 end
    return n
end

---------------------------------------------------------------------------------------------------------------
-- PNG (8-bit RGB or RGBA, non-interlaced: what Chromium writes) to pixels
---------------------------------------------------------------------------------------------------------------
local zlib = ffi.load("z")

local function u32(s, i)
    local a, b, c, d = s:byte(i, i + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
end

-- { width, height, channels, pixel(x, y) -> r, g, b } or nil, err.
function M.read_png(path)
    local data = file.read_file(path)
    if not data then return nil, "cannot read " .. path end
    if data:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil, "not a PNG" end
    local pos, idat, w, h, depth, ctype, interlace = 9, {}
    while pos <= #data do
        local len, kind = u32(data, pos), data:sub(pos + 4, pos + 7)
        local body = data:sub(pos + 8, pos + 7 + len)
        if kind == "IHDR" then
            w, h, depth, ctype, interlace = u32(body, 1), u32(body, 5), body:byte(9), body:byte(10), body:byte(13)
        elseif kind == "IDAT" then
            idat[#idat + 1] = body
        end
        pos = pos + 12 + len
    end
    if depth ~= 8 or (ctype ~= 2 and ctype ~= 6) or interlace ~= 0 then
        return nil, string.format("unsupported PNG: depth %s, colour type %s, interlace %s", depth, ctype, interlace)
    end
    local ch = ctype == 6 and 4 or 3
    local stride = w * ch
    local raw_len = (stride + 1) * h
    local raw = ffi.new("uint8_t[?]", raw_len)
    local out_len = ffi.new("unsigned long[1]", raw_len)
    local z = table.concat(idat)
    if zlib.uncompress(raw, out_len, ffi.cast("const uint8_t *", z), #z) ~= 0 then return nil, "bad zlib data" end
    local px = ffi.new("uint8_t[?]", stride * h)
    -- Undo the per-row filters (PNG spec section 9).
    for y = 0, h - 1 do
        local f, row, out, prev = raw[y * (stride + 1)], raw + y * (stride + 1) + 1, px + y * stride,
                                  y > 0 and px + (y - 1) * stride or nil
        for i = 0, stride - 1 do
            local a = i >= ch and out[i - ch] or 0
            local b = prev and prev[i] or 0
            local c = (prev and i >= ch) and prev[i - ch] or 0
            local v = row[i]
            if f == 1 then v = v + a
            elseif f == 2 then v = v + b
            elseif f == 3 then v = v + math.floor((a + b) / 2)
            elseif f == 4 then
                local p = a + b - c
                local pa, pb, pc = math.abs(p - a), math.abs(p - b), math.abs(p - c)
                v = v + ((pa <= pb and pa <= pc) and a or (pb <= pc and b or c))
            end
            out[i] = v % 256
        end
    end
    return {
        width = w, height = h, channels = ch,
        pixel = function(x, y)
            local o = y * stride + x * ch
            return px[o], px[o + 1], px[o + 2]
        end,
    }
end

-- Pixels of an image within `tol` (per channel) of the colour {r, g, b}, and the pixels that are not white.
function M.count_colours(img, colours, tol)
    local counts, not_white = {}, 0
    for k in pairs(colours) do counts[k] = 0 end
    for y = 0, img.height - 1 do
        for x = 0, img.width - 1 do
            local r, g, b = img.pixel(x, y)
            if r < 250 or g < 250 or b < 250 then not_white = not_white + 1 end
            for k, c in pairs(colours) do
                if math.abs(r - c[1]) <= tol and math.abs(g - c[2]) <= tol and math.abs(b - c[3]) <= tol then
                    counts[k] = counts[k] + 1
                end
            end
        end
    end
    return counts, not_white
end

-- Screenshots an HTML file with headless Chromium (docs/testing.md: Debian's chromium); returns the PNG path,
-- or nil and the command's output.
function M.screenshot(html_path, png_path, width, height)
    local profile = os.tmpname()
    os.remove(profile)
    local cmd = string.format("timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-background-networking " ..
        "--disable-component-update --disable-sync --no-first-run --user-data-dir=%s --screenshot=%s " ..
        "--window-size=%d,%d file://%s 2>&1", quote(profile), quote(png_path), width or 1200, height or 1600, html_path)
    local p = io.popen(cmd)
    local out = p:read("*a")
    p:close()
    os.execute("rm -rf " .. quote(profile))
    if not file.exists(png_path) then return nil, out end
    return png_path
end

return M
