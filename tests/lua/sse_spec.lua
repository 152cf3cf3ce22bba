-- glm53.server.sse: event framing as the WHATWG event-stream parser reads it back.
local sse = require("glm53.server.sse")

-- The events a client sees (WHATWG HTML 9.2.6, reduced to data/event/id), for round-trip checks.
local function client_events(stream)
    local events, data, event, id = {}, nil, nil, nil
    for line in (stream:gsub("\r\n", "\n"):gsub("\r", "\n")):gmatch("([^\n]*)\n") do
        if line == "" then
            if data then events[#events + 1] = { data = table.concat(data, "\n"), event = event, id = id } end
            data, event = nil, nil
        elseif line:sub(1, 1) ~= ":" then
            local field, value = line:match("^([^:]*):? ?(.*)$")
            if field == "data" then data = data or {}; data[#data + 1] = value
            elseif field == "event" then event = value
            elseif field == "id" then id = value end
        end
    end
    return events
end

describe("sse", function()
    it("frames one-line data", function()
        assert.are.equal('data: {"a":1}\n\n', sse.event('{"a":1}'))
        assert.are.equal("data: \n\n", sse.event(""))
    end)

    it("splits data on every kind of line end and keeps empty lines", function()
        assert.are.equal("data: a\ndata: b\ndata: c\ndata: \ndata: d\n\n", sse.event("a\nb\r\nc\r\rd"))
        local events = client_events(sse.event("x\n\ny\n"))
        assert.are.same({ { data = "x\n\ny\n" } }, events)
    end)

    it("writes event, id and retry fields before the data", function()
        assert.are.equal("event: delta\nid: 7\nretry: 1500\ndata: x\n\n",
            sse.event("x", { event = "delta", id = 7, retry = 1500 }))
        local stream = sse.event("one", { event = "e1", id = "1" }) .. sse.comment("ping") ..
            sse.event("two\nlines") .. sse.DONE
        assert.are.same({
            { data = "one", event = "e1", id = "1" },
            { data = "two\nlines", id = "1" },          -- the last id stays with the stream
            { data = "[DONE]", id = "1" },
        }, client_events(stream))
    end)

    it("writes comments a client ignores", function()
        assert.are.equal(": keepalive\n\n", sse.comment("keepalive"))
        assert.are.equal(":\n\n", sse.comment())
        assert.are.equal(": a\n: b\n\n", sse.comment("a\nb"))
        assert.are.same({}, client_events(sse.comment("x\ny")))
    end)

    it("ends OpenAI streams with data: [DONE]", function()
        assert.are.equal("data: [DONE]\n\n", sse.DONE)
    end)

    it("gives fresh stream headers each call", function()
        local h = sse.headers()
        assert.are.equal("text/event-stream", h["Content-Type"])
        assert.are.equal("no-cache", h["Cache-Control"])
        h.extra = 1
        assert.is_nil(sse.headers().extra)
    end)

    it("raises on fields that could forge events", function()
        assert.has_error(function() sse.event(1) end)
        assert.has_error(function() sse.event("x", { event = "a\nevent: b" }) end)
        assert.has_error(function() sse.event("x", { id = "1\r2" }) end)
        assert.has_error(function() sse.event("x", { id = "1\0" }) end)
        assert.has_error(function() sse.event("x", { retry = -1 }) end)
        assert.has_error(function() sse.event("x", { retry = "soon" }) end)
        assert.has_error(function() sse.event("x", "opts") end)
        assert.has_error(function() sse.comment(5) end)
    end)
end)
