--[[
glm53.cli.output - how the commands write generated text: the reasoning apart from the answer, streamed.

    local output = require("glm53.cli.output")
    local out = output.new({ file = io.stdout, think = true })    -- think: the prompt ended inside <think>
    out:write("Let me see.</thi")                                 -- text deltas, as the detokeniser gives them
    out:write("nk>The answer is 4.")
    local r = out:finish()   -- r.text (everything, raw), r.reasoning = "Let me see.", r.content = "The answer is 4."

GLM-5.3's chat template ends the prompt with "<|assistant|><think>": the output is reasoning up to </think> and the
answer after it (glm53.chat.parsers, vLLM's glm45 reasoning parser). opts.reasoning says what to do with it:
  "show" (default)  the reasoning, then the answer: on a colour terminal the reasoning is dimmed; otherwise each
                    reasoning line is prefixed with "| " and a blank line separates it from the answer
  "hide"            the answer only
  "raw"             the text exactly as the model wrote it (also what a prompt without <think> gets: think = false)
opts.style: "color" or "plain" (default: "color" when file is a terminal and $NO_COLOR is unset). On a terminal the
text is also made safe to show: control characters other than newline and tab (a random model writes ESC and
CR as readily as letters) come out as U+FFFD. r.text, r.reasoning and r.content are never altered.
]]
local parsers = require("glm53.chat.parsers")
local ffi = require("ffi")

ffi.cdef("int isatty(int fd);")

local M = {}

local DIM, RESET = "\27[2m", "\27[0m"
local REPLACEMENT = "\239\191\189"

-- Whether a file (io.stdout, io.stderr, io.stdin) is a terminal.
function M.isatty(f)
    local fd = f == io.stdin and 0 or f == io.stdout and 1 or f == io.stderr and 2 or nil
    return fd ~= nil and ffi.C.isatty(fd) == 1
end

-- text with C0 controls (but \n and \t), DEL and C1 controls (U+0080-U+009F) replaced by U+FFFD.
function M.printable(text)
    return (text:gsub("[%z\1-\8\11-\31\127]", REPLACEMENT):gsub("\194[\128-\159]", REPLACEMENT))
end

local Out = {}
Out.__index = Out

function M.new(opts)
    opts = opts or {}
    if type(opts) ~= "table" then error("output.new: opts must be a table", 2) end
    local file = opts.file or io.stdout
    local mode = opts.reasoning or "show"
    if mode ~= "show" and mode ~= "hide" and mode ~= "raw" then
        error("output.new: reasoning must be 'show', 'hide' or 'raw'", 2)
    end
    local tty = M.isatty(file)
    local style = opts.style or ((tty and not os.getenv("NO_COLOR")) and "color" or "plain")
    if style ~= "color" and style ~= "plain" then error("output.new: style must be 'color' or 'plain'", 2) end
    if not opts.think then mode = "raw" end
    return setmetatable({
        file = file, mode = mode, style = style, safe = opts.safe == nil and tty or opts.safe,
        parser = mode ~= "raw" and parsers.stream(nil) or nil,
        raw = {},
        phase = nil,          -- what was written last: nil, "reasoning" or "content"
        at_line_start = true, -- the last character written was a newline (or nothing was written)
    }, Out)
end

function Out:_put(text)
    if text == "" then return end
    if self.safe then text = M.printable(text) end
    self.file:write(text)
    self.at_line_start = text:sub(-1) == "\n"
end

function Out:_reasoning(text)
    if self.mode == "hide" then return end
    if self.style == "color" then
        if self.phase ~= "reasoning" then self.file:write(DIM) end
        self:_put(text)
    else
        -- "| " at the start of every reasoning line
        local pieces = {}
        for line, nl in text:gmatch("([^\n]*)(\n?)") do
            if line ~= "" or nl ~= "" then
                if self.at_line_start then pieces[#pieces + 1] = "| " end
                pieces[#pieces + 1] = line .. nl
                self.at_line_start = nl ~= ""
            end
        end
        self:_put(table.concat(pieces))
    end
    self.phase = "reasoning"
end

-- Closes the reasoning block: the colour reset, and the answer starts on a line of its own.
function Out:_end_reasoning()
    if self.phase ~= "reasoning" then return end
    if self.style == "color" then self.file:write(RESET) end
    if not self.at_line_start then self.file:write("\n") end
    if self.style == "plain" then self.file:write("\n") end
    self.at_line_start = true
end

function Out:_content(text)
    if self.phase ~= "content" then
        text = text:gsub("^%s+", "")   -- the answer's leading blank lines (after </think>)
        if text == "" then return end
        self:_end_reasoning()
        self.phase = "content"
    end
    self:_put(text)
end

-- Writes a text delta.
function Out:write(delta)
    if type(delta) ~= "string" then error("output:write: delta must be a string", 2) end
    self.raw[#self.raw + 1] = delta
    if not self.parser then
        self:_put(delta)
        return
    end
    for _, ev in ipairs(self.parser:push(delta)) do
        if ev.type == "reasoning" then self:_reasoning(ev.text) elseif ev.type == "content" then self:_content(ev.text) end
    end
end

-- Flushes what is held, ends the last line, and returns { text, reasoning, content } (reasoning and content
-- only when the output was parsed).
function Out:finish()
    local r = { text = table.concat(self.raw) }
    if self.parser then
        for _, ev in ipairs(self.parser:finish()) do
            if ev.type == "reasoning" then self:_reasoning(ev.text) elseif ev.type == "content" then self:_content(ev.text) end
        end
        local res = self.parser:result()
        r.reasoning, r.content = res.reasoning, res.content
        if self.phase == "reasoning" and self.style == "color" then self.file:write(RESET) end
    end
    if not self.at_line_start then self.file:write("\n") end
    self.at_line_start = true
    self.file:flush()
    return r
end

return M
