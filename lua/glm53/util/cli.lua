--[[
glm53.util.cli - the small argument parser the scripts share.

    local cli = require("glm53.util.cli")
    local args = cli.parse(arg, {
        usage = "luajit scripts/logits.lua --model DIR --tokens IN.npy --out OUT.npy [options]",
        options = {
            model  = { required = true, help = "checkpoint directory" },
            mode   = { default = "prefill", choices = { "prefill", "decode", "chunked" } },
            chunk  = { type = "number", default = 16 },
            json   = { flag = true },
            image  = { list = true },                 -- repeatable
        },
    })

Unknown options, missing values and bad choices print the usage and exit with status 2 (scripts only; modules
never exit).
]]
local M = {}

local function usage_text(spec)
    local lines = { "usage: " .. spec.usage }
    local names = {}
    for name in pairs(spec.options) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
        local o = spec.options[name]
        local line = "  --" .. name:gsub("_", "-")
        if not o.flag then line = line .. " " .. (o.metavar or (o.type == "number" and "N" or "VALUE")) end
        local extra = {}
        if o.help then extra[#extra + 1] = o.help end
        if o.choices then extra[#extra + 1] = "one of " .. table.concat(o.choices, ", ") end
        if o.default ~= nil then extra[#extra + 1] = "default " .. tostring(o.default) end
        if o.required then extra[#extra + 1] = "required" end
        if o.list then extra[#extra + 1] = "repeatable" end
        if #extra > 0 then line = line .. string.rep(" ", math.max(1, 28 - #line)) .. table.concat(extra, "; ") end
        lines[#lines + 1] = line
    end
    return table.concat(lines, "\n")
end

local function fail(spec, msg)
    io.stderr:write("error: ", msg, "\n", usage_text(spec), "\n")
    os.exit(2)
end

function M.parse(argv, spec)
    local args = {}
    local i = 1
    while i <= #argv do
        local a = argv[i]
        if a == "-h" or a == "--help" then
            io.stdout:write(usage_text(spec), "\n")
            os.exit(0)
        end
        local name, inline = a:match("^%-%-([%w%-_]+)=(.*)$")
        name = name or a:match("^%-%-([%w%-_]+)$")
        if not name then fail(spec, "unexpected argument '" .. a .. "'") end
        name = name:gsub("%-", "_")
        local o = spec.options[name]
        if not o then fail(spec, "unknown option --" .. name:gsub("_", "-")) end
        local value
        if o.flag then
            value = true
        else
            value = inline
            if value == nil then
                i = i + 1
                value = argv[i]
                if value == nil then fail(spec, "--" .. name:gsub("_", "-") .. " needs a value") end
            end
            if o.type == "number" then
                value = tonumber(value) or fail(spec, "--" .. name:gsub("_", "-") .. " needs a number, got " .. value)
            end
            if o.choices then
                local ok = false
                for _, c in ipairs(o.choices) do ok = ok or c == value end
                if not ok then fail(spec, "--" .. name:gsub("_", "-") .. " must be one of " .. table.concat(o.choices, ", ")) end
            end
        end
        if o.list then
            args[name] = args[name] or {}
            table.insert(args[name], value)
        else
            args[name] = value
        end
        i = i + 1
    end
    for name, o in pairs(spec.options) do
        if args[name] == nil then
            if o.required then fail(spec, "--" .. name:gsub("_", "-") .. " is required") end
            if o.list then args[name] = {} else args[name] = o.default end
        end
    end
    return args
end

-- Makes `require "glm53..."` work for a script run from anywhere: adds <script dir>/../lua to package.path.
function M.add_package_path(script_path)
    local dir = (script_path or ""):match("^(.*)/[^/]*$") or "."
    package.path = dir .. "/../lua/?.lua;" .. dir .. "/../lua/?/init.lua;" .. package.path
end

return M
