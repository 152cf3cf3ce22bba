-- glm53.chat.parsers: split GLM-5.3 output into reasoning, content and tool calls.
--
--   local parsers = require("glm53.chat.parsers")
--   local r = parsers.parse("let me think</think>The answer is 4.", tools)
--   -- r.reasoning = "let me think", r.content = "The answer is 4.", r.tool_calls = {...} when there are calls
--   local p = parsers.stream(tools)
--   for _, ev in ipairs(p:push(delta)) do ... end   -- {type = "reasoning" | "content", text = ...} or a call
--   for _, ev in ipairs(p:finish()) do ... end
--
-- Reasoning follows vLLM's `glm45` reasoning parser (DeepSeekV3ReasoningWith-
-- ThinkingParser, which delegates to the DeepSeek-R1 rules): the prompt ends
-- inside an open <think>, so the output is reasoning up to the first </think>
-- and content after it; with no </think> at all, everything is reasoning.
--
-- Tool calls follow vLLM's `glm47` tool parser (Glm47MoeModelToolParser):
--   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
-- searched in the content only.  NAME is the text before the first <arg_key>,
-- stripped.  A key and its value may be separated by whitespace or literal
-- "\n" sequences.  A value whose parameter the tool's JSON schema types as
-- "string" is kept verbatim; other values are stripped and read as JSON, then
-- as a Python literal, and otherwise kept as a string.  Content is the text
-- before the first <tool_call> (none when blank) once a call is found; text
-- between and after calls is dropped, as vLLM drops it.  Unterminated calls
-- are not calls: with no complete call the content is the text unchanged.
--
-- Where vLLM's non-streaming code would lose text that had already been
-- streamed, these rules choose the streamable reading (docs/chat.md,
-- "Parsing"): <think> tags before the first </think> are dropped without the
-- text before them; text after </think> is content even if it holds <think>;
-- an argument value that Python would evaluate to something json.dumps cannot
-- write stays a string instead of failing the whole parse.
--
-- parse(text, tools, opts) gives the whole result; stream(tools, opts) gives
-- a parser whose push(delta) returns events and whose finish() flushes;
-- concatenating the events always yields parse()'s result, however the text
-- is split.

local json = require("glm53.chat.json")
local py = require("glm53.chat.pycompat")

local find, sub, byte = string.find, string.sub, string.byte
local concat = table.concat

local parsers = {}

local THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
local CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
local KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
local VAL_OPEN, VAL_CLOSE = "<arg_value>", "</arg_value>"

------------------------------------------------------------------------------
-- Tool call ids
------------------------------------------------------------------------------

local urandom = io.open("/dev/urandom", "rb")
local seeded = false

--- vLLM's id shape: "chatcmpl-tool-" followed by 32 random hex digits.
function parsers.random_id()
    local bytes = urandom and urandom:read(16)
    if not bytes or #bytes ~= 16 then
        if not seeded then
            math.randomseed(os.time() + math.floor(os.clock() * 1e6))
            seeded = true
        end
        local t = {}
        for i = 1, 16 do t[i] = string.char(math.random(0, 255)) end
        bytes = concat(t)
    end
    return "chatcmpl-tool-" .. bytes:gsub(".", function(c) return string.format("%02x", byte(c)) end)
end

------------------------------------------------------------------------------
-- Tool schemas
------------------------------------------------------------------------------

local function field(t, k)
    if type(t) == "table" and json.kind(t) == "object" then return t[k] end
    return nil
end

-- vLLM's _is_string_type: the first tool with this name decides; the argument
-- is a string when parameters.properties[arg].type == "string".
local function is_string_arg(tools, name, arg)
    if type(tools) ~= "table" then return false end
    for i = 1, #tools do
        local tool = tools[i]
        local fn = field(tool, "function")
        if fn ~= nil then tool = fn end
        if field(tool, "name") == name then
            local params = field(tool, "parameters")
            local prop = field(field(params, "properties"), arg)
            return field(prop, "type") == "string"
        end
    end
    return false
end

-- vLLM's _deserialize: json.loads, then ast.literal_eval, then the raw text.
local function deserialize(text)
    local v = json.decode(text, { exact = true, allow_nan = true })
    if v ~= nil then return v end
    v = py.literal_eval(text)
    if v ~= nil then return v end
    return text
end

------------------------------------------------------------------------------
-- One tool-call region
------------------------------------------------------------------------------

local function is_gap_char(s, i)
    -- whitespace (as str.isspace) or the two characters backslash, n
    local c = byte(s, i)
    if c == 92 and byte(s, i + 1) == 110 then return 2 end
    if c == nil then return nil end
    if c < 0x80 then return py.isspace(c) and 1 or nil end
    local cp, n = json.utf8_decode(s, i)
    if cp and py.isspace(cp) then return n end
    return nil
end

-- All key/value pairs of the argument text, with the regex
--   <arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>
-- applied as findall does: leftmost matches, lazy key widened past a
-- </arg_key> that is not followed by a value.
local function find_pairs(s)
    local pairs_ = {}
    local pos = 1
    while true do
        local ks = find(s, KEY_OPEN, pos, true)
        if not ks then break end
        local key_from = ks + #KEY_OPEN
        local matched = false
        local ke = find(s, KEY_CLOSE, key_from, true)
        while ke do
            local j = ke + #KEY_CLOSE
            while true do
                local n = is_gap_char(s, j)
                if not n then break end
                j = j + n
            end
            if sub(s, j, j + #VAL_OPEN - 1) == VAL_OPEN then
                local val_from = j + #VAL_OPEN
                local ve = find(s, VAL_CLOSE, val_from, true)
                if not ve then break end -- no value can close after any later key end either
                pairs_[#pairs_ + 1] = { sub(s, key_from, ke - 1), sub(s, val_from, ve - 1) }
                pos = ve + #VAL_CLOSE
                matched = true
                break
            end
            ke = find(s, KEY_CLOSE, ke + 1, true)
        end
        if not matched then pos = ks + 1 end
    end
    return pairs_
end

-- Parse the text between <tool_call> and </tool_call>.
local function parse_call(inner, tools, new_id)
    local ak = find(inner, KEY_OPEN, 1, true)
    local name = py.strip(ak and sub(inner, 1, ak - 1) or inner)
    local args = json.object({}, {})
    if ak then
        local found = find_pairs(sub(inner, ak))
        for i = 1, #found do
            local key = py.strip(found[i][1])
            local value = found[i][2]
            if is_string_arg(tools, name, key) then
                json.set(args, key, value)
            else
                json.set(args, key, deserialize(py.strip(value)))
            end
        end
    end
    return json.ordered {
        "id", new_id(),
        "type", "function",
        "function", json.ordered { "name", name, "arguments", json.encode(args) },
    }
end

local function tool_parsing_enabled(tools, opts)
    if opts and opts.tool_calls ~= nil then return opts.tool_calls and true or false end
    return type(tools) == "table" and #tools > 0
end

local function check_args(fname, tools, opts)
    if tools ~= nil and type(tools) ~= "table" then
        error(fname .. ": tools must be a list or nil", 3)
    end
    if opts ~= nil and type(opts) ~= "table" then error(fname .. ": opts must be a table", 3) end
    if opts and opts.id ~= nil and type(opts.id) ~= "function" then
        error(fname .. ": opts.id must be a function", 3)
    end
end

------------------------------------------------------------------------------
-- Non-streaming
------------------------------------------------------------------------------

--- Parse a complete output.
--- tools: the request's tool list (OpenAI wrappers or bare functions), used for
---   argument types; tool calls are parsed when it is non-empty, or when
---   opts.tool_calls is true (opts.tool_calls = false turns them off).
--- opts.id: function returning the id for each tool call (default random_id).
--- Returns { reasoning = string, content = string or nil, tool_calls = list },
--- each call { id, type = "function", ["function"] = { name, arguments } } with
--- arguments as JSON text.
function parsers.parse(text, tools, opts)
    if type(text) ~= "string" then error("parsers.parse: text must be a string", 2) end
    check_args("parsers.parse", tools, opts)
    local new_id = opts and opts.id or parsers.random_id

    local reasoning, content
    local e = find(text, THINK_CLOSE, 1, true)
    if e then
        reasoning = sub(text, 1, e - 1)
        content = sub(text, e + #THINK_CLOSE)
    else
        reasoning = text
        content = ""
    end
    reasoning = reasoning:gsub("<think>", "")

    local calls = json.array({})
    if tool_parsing_enabled(tools, opts) then
        local pos = 1
        while true do
            local s = find(content, CALL_OPEN, pos, true)
            if not s then break end
            local c = find(content, CALL_CLOSE, s + #CALL_OPEN, true)
            if not c then break end
            calls[#calls + 1] = parse_call(sub(content, s + #CALL_OPEN, c - 1), tools, new_id)
            pos = c + #CALL_CLOSE
        end
        if #calls > 0 then
            content = sub(content, 1, find(content, CALL_OPEN, 1, true) - 1)
            if py.is_blank(content) then content = "" end
        end
    end
    if content == "" then content = nil end
    return { reasoning = reasoning, content = content, tool_calls = calls }
end

------------------------------------------------------------------------------
-- Streaming
------------------------------------------------------------------------------

-- Length of the longest suffix of s that is a proper prefix of one of tags.
local function partial_suffix(s, tags)
    local best = 0
    for t = 1, #tags do
        local tag = tags[t]
        for n = math.min(#tag - 1, #s), 1, -1 do
            if n <= best then break end
            if sub(s, -n) == sub(tag, 1, n) then
                best = n
                break
            end
        end
    end
    return best
end

-- Whether s holds a character that is not whitespace.  A truncated UTF-8
-- sequence at the end counts as undecided (false) until its bytes arrive.
local function has_nonblank(s)
    local i, len = 1, #s
    while i <= len do
        local c = byte(s, i)
        if c < 0x80 then
            if not py.isspace(c) then return true end
            i = i + 1
        else
            local cp, n = json.utf8_decode(s, i)
            if cp then
                if not py.isspace(cp) then return true end
                i = i + n
            else
                -- a lead byte whose sequence is cut off at the end is undecided
                local need = (c >= 0xF0 and 4) or (c >= 0xE0 and 3) or (c >= 0xC0 and 2) or 1
                if need > 1 and i + need - 1 > len then
                    local ok = true
                    for k = i + 1, len do
                        local cc = byte(s, k)
                        if cc < 0x80 or cc > 0xBF then ok = false end
                    end
                    if ok then return false end
                end
                return true -- invalid UTF-8 is not whitespace
            end
        end
    end
    return false
end

local Stream = {}
Stream.__index = Stream

local THINK_TAGS = { THINK_OPEN, THINK_CLOSE }
local CALL_TAGS = { CALL_OPEN }

--- A streaming parser.  parser:push(delta) returns a list of events:
---   { type = "reasoning", text = ... }   { type = "content", text = ... }
---   { type = "tool_call", index = n (0-based), tool_call = {...} }
--- parser:finish() returns the last events; parser:result() the accumulated
--- result in parse()'s shape.
function parsers.stream(tools, opts)
    check_args("parsers.stream", tools, opts)
    return setmetatable({
        tools = tools,
        new_id = opts and opts.id or parsers.random_id,
        parse_calls = tool_parsing_enabled(tools, opts),
        phase = "reasoning",   -- "reasoning" | "content" | "call" | "after"
        pending = "",          -- text not yet decided in the current phase
        blank_prefix = "",     -- leading blank content held until something shows
        content_shown = false, -- content with a non-blank character has been emitted
        call_text = nil,       -- text from the first <tool_call> on, while no call completed
        ncalls = 0,
        finished = false,
        acc_reasoning = {}, acc_content = {}, acc_calls = json.array({}),
    }, Stream)
end

local function emit(self, events, kind, text)
    if text == "" then return end
    events[#events + 1] = { type = kind, text = text }
    if kind == "reasoning" then
        self.acc_reasoning[#self.acc_reasoning + 1] = text
    else
        self.acc_content[#self.acc_content + 1] = text
    end
end

-- Content before the first <tool_call>: blank text is held, since vLLM reports
-- no content when the text before a call is blank.
local function emit_content(self, events, text)
    if text == "" then return end
    if not self.parse_calls or self.content_shown then
        emit(self, events, "content", text)
        return
    end
    local held = self.blank_prefix .. text
    if has_nonblank(held) then
        self.blank_prefix = ""
        self.content_shown = true
        emit(self, events, "content", held)
    else
        self.blank_prefix = held
    end
end

local function feed_content(self, events, text)
    if not self.parse_calls then
        emit(self, events, "content", text)
        return
    end
    local buf = self.pending .. text
    self.pending = ""
    while buf ~= "" do
        if self.phase == "content" or self.phase == "after" then
            local s = find(buf, CALL_OPEN, 1, true)
            if s then
                if self.phase == "content" then
                    emit_content(self, events, sub(buf, 1, s - 1))
                    self.call_text = CALL_OPEN
                end
                self.phase = "call"
                self.region = ""
                buf = sub(buf, s + #CALL_OPEN)
            else
                local keep = partial_suffix(buf, CALL_TAGS)
                if self.phase == "content" then emit_content(self, events, sub(buf, 1, #buf - keep)) end
                self.pending = sub(buf, #buf - keep + 1)
                buf = ""
            end
        else -- inside a call: wait for </tool_call>
            local region = self.region .. buf
            local from = math.max(1, #self.region - #CALL_CLOSE + 2)
            local c = find(region, CALL_CLOSE, from, true)
            if c then
                local call = parse_call(sub(region, 1, c - 1), self.tools, self.new_id)
                self.acc_calls[#self.acc_calls + 1] = call
                events[#events + 1] = { type = "tool_call", index = self.ncalls, tool_call = call }
                self.ncalls = self.ncalls + 1
                self.call_text = nil
                self.blank_prefix = ""
                self.region = nil
                self.phase = "after"
                buf = sub(region, c + #CALL_CLOSE)
            else
                if self.call_text then self.call_text = self.call_text .. buf end
                self.region = region
                buf = ""
            end
        end
    end
end

--- Feed the next piece of output text; returns the events it completes.
function Stream:push(delta)
    if type(delta) ~= "string" then error("parser:push: string expected", 2) end
    if self.finished then error("parser:push: parser already finished", 2) end
    local events = {}
    if self.phase ~= "reasoning" then
        feed_content(self, events, delta)
        return events
    end
    local buf = self.pending .. delta
    self.pending = ""
    while true do
        local o = find(buf, THINK_OPEN, 1, true)
        local c = find(buf, THINK_CLOSE, 1, true)
        if c and (not o or c < o) then
            emit(self, events, "reasoning", sub(buf, 1, c - 1))
            self.phase = "content"
            feed_content(self, events, sub(buf, c + #THINK_CLOSE))
            return events
        elseif o then
            emit(self, events, "reasoning", sub(buf, 1, o - 1))
            buf = sub(buf, o + #THINK_OPEN)
        else
            local keep = partial_suffix(buf, THINK_TAGS)
            emit(self, events, "reasoning", sub(buf, 1, #buf - keep))
            self.pending = sub(buf, #buf - keep + 1)
            return events
        end
    end
end

--- End of output: flush held text.  Returns the last events.
function Stream:finish()
    if self.finished then return {} end
    self.finished = true
    local events = {}
    if self.phase == "reasoning" then
        emit(self, events, "reasoning", self.pending)
    elseif self.phase == "content" then
        emit(self, events, "content", self.blank_prefix .. self.pending)
    elseif self.phase == "call" and self.call_text then
        -- no call ever completed: the whole content is text after all
        emit(self, events, "content", self.blank_prefix .. self.call_text .. self.pending)
    end
    self.pending, self.blank_prefix, self.call_text = "", "", nil
    return events
end

--- Everything so far in parse()'s shape.
function Stream:result()
    local content = concat(self.acc_content)
    return {
        reasoning = concat(self.acc_reasoning),
        content = content ~= "" and content or nil,
        tool_calls = self.acc_calls,
    }
end

return parsers
