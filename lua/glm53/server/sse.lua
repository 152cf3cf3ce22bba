-- glm53.server.sse: Server-Sent Events framing (the WHATWG HTML "event stream" format), as
-- OpenAI-compatible streaming responses use it.
--
--   local sse = require("glm53.server.sse")
--   res:write_head(200, sse.headers())
--   res:write(sse.event('{"choices":[]}'))               -- data: {"choices":[]}\n\n
--   res:write(sse.event("a\nb", { event = "delta", id = 7 }))
--   res:write(sse.comment("keepalive"))                   -- : keepalive\n\n (clients ignore it)
--   res:finish(sse.DONE)                                  -- data: [DONE]\n\n
--
-- sse.event(data [, {event=, id=, retry=}]) splits data on CRLF, CR and LF into one `data:` line
-- each, so the client's reassembled data equals the input with line ends turned into LF.
-- event and id must be single lines (id without NUL), retry an integer of milliseconds: anything
-- else raises, since it would let one event's text forge another event.

local concat, find, format, gsub, type, tostring, error = table.concat, string.find, string.format,
    string.gsub, type, tostring, error

local sse = {}

sse.DONE = "data: [DONE]\n\n"

-- The response headers of an event stream; a fresh table each call, so callers may add to it.
-- X-Accel-Buffering stops nginx-style proxies from holding events back.
function sse.headers()
    return {
        ["Content-Type"] = "text/event-stream",
        ["Cache-Control"] = "no-cache",
        ["X-Accel-Buffering"] = "no",
    }
end

local function single_line(value, what)
    local s = tostring(value)
    if find(s, "[\r\n]") then error("sse.event: " .. what .. " must not contain a line break", 3) end
    return s
end

function sse.event(data, opts)
    if type(data) ~= "string" then error("sse.event: data must be a string", 2) end
    if opts ~= nil and type(opts) ~= "table" then error("sse.event: options must be a table", 2) end
    local out = {}
    if opts then
        if opts.event ~= nil then out[#out + 1] = "event: " .. single_line(opts.event, "event") .. "\n" end
        if opts.id ~= nil then
            local id = single_line(opts.id, "id")
            if find(id, "%z") then error("sse.event: id must not contain NUL", 2) end
            out[#out + 1] = "id: " .. id .. "\n"
        end
        if opts.retry ~= nil then
            local r = opts.retry
            if type(r) ~= "number" or r < 0 or r ~= math.floor(r) then
                error("sse.event: retry must be a non-negative integer (milliseconds)", 2)
            end
            out[#out + 1] = format("retry: %d\n", r)
        end
    end
    local lines = gsub(gsub(data, "\r\n", "\n"), "\r", "\n")
    out[#out + 1] = "data: " .. gsub(lines, "\n", "\ndata: ") .. "\n\n"
    return concat(out)
end

-- A comment line: ignored by clients, it keeps proxies and idle timers from dropping the stream.
function sse.comment(text)
    if text == nil or text == "" then return ":\n\n" end
    if type(text) ~= "string" then error("sse.comment: text must be a string", 2) end
    local lines = gsub(gsub(text, "\r\n", "\n"), "\r", "\n")
    return ": " .. gsub(lines, "\n", "\n: ") .. "\n\n"
end

return sse
