--[[
glm53.util.cli - the one argument parser of the glm53 command, its subcommands and the scripts.

    local cli = require("glm53.util.cli")
    local command = {
        prog = "glm53 logits",
        usage = "glm53 logits --tokens IN.npy --out OUT.npy [options]",
        summary = "the logits at every position of a token sequence, as a .npy file",
        options = {
            "Input:",                                                    -- a heading in --help
            { "tokens", required = true, metavar = "IN.npy", help = "int32 [T] token ids" },
            { "mode", default = "prefill", choices = { "prefill", "decode", "chunked" } },
            { "chunk", type = "integer", min = 1, default = 16, help = "rows per step in chunked mode" },
            { "top_p", type = "number", gt = 0, max = 1, default = 1 },   -- (0, 1]
            { "json", flag = true },
            { "image", list = true, metavar = "PATH" },                 -- repeatable
        },
        args = { { "prompt", metavar = "PROMPT", optional = true } },    -- positionals; { "rest", rest = true }
        run = function(args) ... return true end,                        -- or nil, err
    }
    os.exit(cli.run(command, arg))                                       -- the exit status

cli.parse(argv, command) returns the arguments as a table (option names with "-" written as "_"), or nil and a
one-line usage message; it never prints or exits. Options: `--name VALUE`, `--name=VALUE`, flags without a value;
`--` ends the options; a lone `-` is a positional (stdin, by convention). Every command also takes --help (-h)
and --debug. Types: "string" (default), "number", "integer", "ids" (a comma-separated list of token ids, given
as a Lua array); min / max are inclusive bounds, gt an exclusive lower bound; choices a list of strings.

cli.run(command, argv) is the whole life of a command: parse (a usage error: one line on stderr, status 2),
--help (the help on stdout, status 0), then command.run(args). A runtime failure - run returning nil, err, or
calling cli.fail(msg) - prints one line "<prog>: <message>" and gives status 1; so does an error raised inside
(a library's argument error, a bug), without its Lua file:line prefix, and with the traceback under --debug.
cli.usage_error(msg) from inside run is a usage error (status 2). run may return a number: the exit status.

cli.parse_or_exit(argv, command) is for a script that goes on at its top level: the arguments, or the help or a
usage error printed and the process ended (status 0 or 2).

cli.dispatch(argv, program) runs a program of subcommands (glm53.cli.main is one): program.commands is a
list of { name, module, summary }; the module is required only when its command runs, so `glm53 --help` works
without the C library. A command module may also have `subcommands = { NAME = function(argv) -> status }`: when
the first argument after the command is NAME, that function gets the rest (`glm53 bench serve --server URL`).
]]
local M = {}

---------------------------------------------------------------------------------------------------------------
-- Failures raised inside a command
---------------------------------------------------------------------------------------------------------------
local Failure = {}
Failure.__index = Failure
Failure.__tostring = function(f) return f.msg end

-- Ends the running command with a one-line message (status 1: a runtime failure).
function M.fail(msg)
    error(setmetatable({ msg = tostring(msg), status = 1 }, Failure), 0)
end

-- Ends the running command with a one-line usage message (status 2).
function M.usage_error(msg)
    error(setmetatable({ msg = tostring(msg), status = 2 }, Failure), 0)
end

-- An error message on one line, without the "file.lua:123: " its raiser put in front. A module that failed to
-- load keeps its reason ("error loading module ...: file:line: ..."); the search list of a module not found goes.
function M.one_line(msg)
    msg = tostring(msg)
    if msg:find("^module '[^']*' not found:") then msg = msg:match("^[^\n]*"):gsub(":$", "") end
    msg = msg:gsub("%s*\n%s*", " ")
    local n
    repeat msg, n = msg:gsub("^[^%s:]+%.lua:%d+: ", "") until n == 0
    return msg
end

---------------------------------------------------------------------------------------------------------------
-- Option tables
---------------------------------------------------------------------------------------------------------------
local BUILTIN = {
    { "help", short = "h", flag = true, help = "show this help and exit" },
    { "debug", flag = true, help = "on an error, print the Lua traceback too" },
}

local function flag_name(name) return "--" .. name:gsub("_", "-") end

-- name -> option, short letter -> option, and the ordered list (headings as strings) for the help.
local function index_options(command)
    local by_name, by_short = {}, {}
    local function add(o)
        if type(o) ~= "table" or type(o[1]) ~= "string" then
            error("cli: an option is a table whose first item is its name", 4)
        end
        by_name[o[1]] = o
        if o.short then by_short[o.short] = o end
    end
    for _, o in ipairs(command.options or {}) do
        if type(o) ~= "string" then add(o) end
    end
    for _, o in ipairs(BUILTIN) do
        if not by_name[o[1]] then add(o) end
    end
    return by_name, by_short
end

local function range_text(o)
    local lo = o.gt ~= nil and ("> " .. o.gt) or (o.min ~= nil and (">= " .. o.min)) or nil
    local hi = o.max ~= nil and ("<= " .. o.max) or nil
    if lo and hi then
        return "in " .. (o.gt ~= nil and "(" .. o.gt or "[" .. o.min) .. ", " .. o.max .. "]"
    end
    return lo or hi
end

local function metavar(o)
    if o.metavar then return o.metavar end
    if o.choices then return table.concat(o.choices, "|") end
    if o.type == "number" then return "X" end
    if o.type == "integer" then return "N" end
    if o.type == "ids" then return "IDS" end
    return "VALUE"
end

-- A value given on the command line, converted and checked: the value, or nil and a message.
local function convert(o, text)
    local name = flag_name(o[1])
    local t = o.type or "string"
    local v = text
    if t == "number" or t == "integer" then
        v = tonumber(text)
        if v == nil or v ~= v then return nil, name .. " needs a number, got '" .. text .. "'" end
        if t == "integer" and v % 1 ~= 0 then return nil, name .. " needs an integer, got " .. text end
        local bad = (o.min ~= nil and v < o.min) or (o.gt ~= nil and v <= o.gt) or (o.max ~= nil and v > o.max)
        if bad then return nil, name .. " must be " .. range_text(o) .. ", got " .. text end
    elseif t == "ids" then
        v = {}
        for item in text:gmatch("[^,%s]+") do
            local id = tonumber(item)
            if not id or id < 0 or id % 1 ~= 0 then
                return nil, name .. ": '" .. item .. "' is not a token id"
            end
            v[#v + 1] = id
        end
        if #v == 0 then return nil, name .. " needs at least one id" end
    elseif t ~= "string" then
        error("cli: option " .. name .. " has an unknown type '" .. tostring(t) .. "'", 3)
    end
    if o.choices then
        local ok = false
        for _, c in ipairs(o.choices) do ok = ok or c == v end
        if not ok then return nil, name .. " must be one of " .. table.concat(o.choices, ", ") .. ", got '" .. text .. "'" end
    end
    return v
end

---------------------------------------------------------------------------------------------------------------
-- Parsing
---------------------------------------------------------------------------------------------------------------
-- The arguments of argv (a Lua array) for command, or nil and a one-line usage message.
function M.parse(argv, command)
    if type(argv) ~= "table" then error("cli.parse: argv must be an array of strings", 2) end
    if type(command) ~= "table" then error("cli.parse: command must be a table", 2) end
    local by_name, by_short = index_options(command)
    local positional_spec = command.args or {}
    local args, positionals = {}, {}
    local i, options_done = 1, false
    -- With a `rest` positional, the words from the one before it on are taken verbatim (glm53 lua FILE ARGS...).
    local rest_at = nil
    for j, p in ipairs(positional_spec) do if p.rest then rest_at = math.max(j - 1, 1) end end
    while i <= #argv do
        local a = argv[i]
        if type(a) ~= "string" then error("cli.parse: argv must be an array of strings", 2) end
        if options_done or a == "-" or a:sub(1, 1) ~= "-" then
            positionals[#positionals + 1] = a
            if rest_at and #positionals >= rest_at then options_done = true end
        elseif a == "--" then
            options_done = true
        else
            local name, inline = a:match("^%-%-([%w][%w%-_]*)=(.*)$")
            name = name or a:match("^%-%-([%w][%w%-_]*)$")
            local o
            if name then
                o = by_name[(name:gsub("%-", "_"))]
                if not o then return nil, "unknown option --" .. name end
            else
                local short = a:match("^%-(%w)$")
                o = short and by_short[short]
                if not o then return nil, "unknown option " .. a end
            end
            local key = o[1]
            local value
            if o.flag then
                if inline ~= nil then return nil, flag_name(key) .. " takes no value" end
                value = true
            else
                value = inline
                if value == nil then
                    i = i + 1
                    value = argv[i]
                    if value == nil then return nil, flag_name(key) .. " needs a value" end
                end
                local err
                value, err = convert(o, value)
                if value == nil then return nil, err end
            end
            if o.list then
                args[key] = args[key] or {}
                table.insert(args[key], value)
            else
                args[key] = value
            end
        end
        i = i + 1
    end
    if args.help then return args end
    -- positionals
    local k = 1
    for _, p in ipairs(positional_spec) do
        if p.rest then
            local rest = {}
            for j = k, #positionals do rest[#rest + 1] = positionals[j] end
            if #rest == 0 and not p.optional then return nil, "missing " .. (p.metavar or p[1]:upper()) end
            args[p[1]] = rest
            k = #positionals + 1
        else
            local v = positionals[k]
            if v == nil and not p.optional then return nil, "missing " .. (p.metavar or p[1]:upper()) end
            args[p[1]] = v
            k = k + 1
        end
    end
    if positionals[k] ~= nil then
        return nil, "unexpected argument '" .. positionals[k] .. "'" ..
                    (#positional_spec > 0 and " (quote a value that has spaces)" or "")
    end
    for key, o in pairs(by_name) do
        if args[key] == nil then
            if o.required then return nil, flag_name(key) .. " is required" end
            if o.list then args[key] = {} elseif o.flag then args[key] = false else args[key] = o.default end
        end
    end
    return args
end

---------------------------------------------------------------------------------------------------------------
-- Help
---------------------------------------------------------------------------------------------------------------
local function wrap(text, width, indent)
    local lines, line = {}, ""
    for word in text:gmatch("%S+") do
        if #line > 0 and #line + 1 + #word > width then
            lines[#lines + 1] = line
            line = word
        else
            line = #line > 0 and line .. " " .. word or word
        end
    end
    if #line > 0 then lines[#lines + 1] = line end
    return table.concat(lines, "\n" .. string.rep(" ", indent))
end

local function option_line(o)
    local left = "  " .. (o.short and ("-" .. o.short .. ", ") or "") .. flag_name(o[1])
    if not o.flag then left = left .. " " .. metavar(o) end
    local extra = {}
    if o.help then extra[#extra + 1] = o.help end
    local range = range_text(o)
    if range then extra[#extra + 1] = range end
    if o.default ~= nil then extra[#extra + 1] = "default " .. tostring(o.default) end
    if o.required then extra[#extra + 1] = "required" end
    if o.list then extra[#extra + 1] = "repeatable" end
    if #extra == 0 then return left end
    local col = 30
    local pad = #left < col and string.rep(" ", col - #left) or "\n" .. string.rep(" ", col)
    return left .. pad .. wrap(table.concat(extra, "; "), 110 - col, col)
end

-- The --help text of a command.
function M.help(command)
    local out = { "usage: " .. (command.usage or command.prog or "") }
    if command.summary then out[#out + 1] = "\n" .. wrap(command.summary, 110, 0) end
    if command.description then out[#out + 1] = "\n" .. command.description:gsub("^%s+", ""):gsub("%s+$", "") end
    out[#out + 1] = ""
    local heading_done = false
    for _, o in ipairs(command.options or {}) do
        if type(o) == "string" then
            out[#out + 1] = (heading_done and "\n" or "") .. o
            heading_done = true
        else
            if not heading_done then out[#out + 1] = "options:"; heading_done = true end
            out[#out + 1] = option_line(o)
        end
    end
    out[#out + 1] = (heading_done and "\n" or "") .. "common options:"
    for _, o in ipairs(BUILTIN) do out[#out + 1] = option_line(o) end
    return table.concat(out, "\n")
end

---------------------------------------------------------------------------------------------------------------
-- Running a command
---------------------------------------------------------------------------------------------------------------
local function report(prog, msg)
    io.stdout:flush()
    io.stderr:write(prog, ": ", msg, "\n")
end

-- Runs command.run(args) with the error rules above. Returns the exit status.
function M.run(command, argv, opts)
    opts = opts or {}
    local prog = command.prog or "glm53"
    local args, err = M.parse(argv or {}, command)
    if not args then
        report(prog, err .. " (" .. prog .. " --help lists the options)")
        return 2
    end
    if args.help then
        io.stdout:write(M.help(command), "\n")
        return 0
    end
    if opts.debug then args.debug = true end
    args.command_line = prog .. (#(argv or {}) > 0 and " " .. table.concat(argv, " ") or "")
    local trace
    local ok, res, res_err = xpcall(command.run, function(e)
        if getmetatable(e) ~= Failure then trace = debug.traceback(tostring(e), 2) end
        return e
    end, args)
    if ok then
        if type(res) == "number" then return res end
        if res == nil and res_err ~= nil then
            report(prog, M.one_line(res_err))
            return 1
        end
        return 0
    end
    if getmetatable(res) == Failure then
        report(prog, res.msg)
        return res.status
    end
    local msg = tostring(res)
    if msg:find("interrupted!", 1, true) then
        report(prog, "interrupted")
        return 130
    end
    report(prog, command.keep_location and msg:match("^[^\n]*") or M.one_line(msg))
    if args.debug and trace then io.stderr:write(trace, "\n") end
    return 1
end

-- For a script that goes on at its top level: the arguments, or the help printed (exit 0) or a usage error
-- printed as one line (exit 2). Modules never call this: it exits.
function M.parse_or_exit(argv, command)
    local args, err = M.parse(argv, command)
    local prog = command.prog or "glm53"
    if not args then
        report(prog, err .. " (" .. prog .. " --help lists the options)")
        os.exit(2)
    end
    if args.help then
        io.stdout:write(M.help(command), "\n")
        os.exit(0)
    end
    return args
end

-- The help of a program of subcommands.
local function program_help(program)
    local out = { "usage: " .. program.usage, "" }
    if program.summary then out[#out + 1] = program.summary .. "\n" end
    out[#out + 1] = "commands:"
    local width = 0
    for _, c in ipairs(program.commands) do width = math.max(width, #c.name) end
    for _, c in ipairs(program.commands) do
        out[#out + 1] = "  " .. c.name .. string.rep(" ", width + 3 - #c.name) .. c.summary
    end
    out[#out + 1] = "\noptions:"
    out[#out + 1] = "  -h, --help     show this help and exit (" .. program.prog .. " COMMAND --help: a command's options)"
    out[#out + 1] = "  --version      print the library version and exit"
    out[#out + 1] = "  --debug        on an error, print the Lua traceback too"
    if program.epilog then out[#out + 1] = "\n" .. program.epilog end
    return table.concat(out, "\n")
end

-- Runs the subcommand named by argv's first word (after the program's own options). Returns the exit status.
function M.dispatch(argv, program)
    local prog = program.prog
    local i, debug = 1, false
    while argv[i] and argv[i]:sub(1, 1) == "-" do
        local a = argv[i]
        if a == "-h" or a == "--help" then
            io.stdout:write(program_help(program), "\n")
            return 0
        elseif a == "--version" then
            local ok, v = pcall(program.version)
            if not ok then report(prog, M.one_line(v)) return 1 end
            io.stdout:write(prog, " ", v, "\n")
            return 0
        elseif a == "--debug" then
            debug = true
        else
            report(prog, "unknown option " .. a .. " (" .. prog .. " --help lists the commands)")
            return 2
        end
        i = i + 1
    end
    local name = argv[i]
    if not name then
        io.stderr:write(program_help(program), "\n")
        return 2
    end
    local entry
    for _, c in ipairs(program.commands) do if c.name == name then entry = c end end
    if not entry then
        report(prog, "unknown command '" .. name .. "' (" .. prog .. " --help lists the commands)")
        return 2
    end
    local ok, command = pcall(require, entry.module)
    if not ok then
        report(prog .. " " .. name, M.one_line(command))
        if debug then io.stderr:write(tostring(command), "\n") end
        return 1
    end
    local rest = {}
    for j = i + 1, #argv do rest[#rest + 1] = argv[j] end
    local sub = command.subcommands and rest[1] and command.subcommands[rest[1]]
    if sub then return sub({ unpack(rest, 2) }) end   -- `glm53 bench serve ...`: a tool of its own
    return M.run(command, rest, { debug = debug })
end

return M
