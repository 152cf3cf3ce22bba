--[==[
glm53.cli.tokenize - `glm53 tokenize`: text to token ids and back, one text or a JSON batch.

    glm53 tokenize "Hello, world!"                   # 39,1047,... (comma-separated: what --tokens takes)
    glm53 tokenize --pieces "Hello"                  # one line per token: id, then its text as JSON
    glm53 tokenize --decode 39,1047                  # the text
    echo "Hello" | glm53 tokenize -                  # stdin (the whole input, newline included)
    glm53 tokenize --tokenizer FILE --input IN.json --out OUT.json [--decode [--skip-special-tokens]]

The tokenizer is --tokenizer FILE (a tokenizer.json or a tiktoken rank file), else the tokenizer.json of --model
(default: the bundled model). No special tokens are added; special tokens written in the text are matched (unless
--special-as-text).

The batch form is the contract other checks use (tests/tokenizer compare glm53 with HF tokenizers through it):
without --decode, IN is a JSON array of strings and OUT a JSON array of id arrays, one per string. An element of IN
may also be {"b64": "<base64>"}: raw bytes, for text that is not valid UTF-8 (which JSON cannot carry); invalid
sequences are encoded as U+FFFD, as HF gets them from Python's bytes.decode("utf-8", "replace"). With --decode, IN
is a JSON array of id arrays and OUT a JSON array of the decoded strings (invalid UTF-8 repaired to U+FFFD as HF
does; special tokens kept unless --skip-special-tokens).
]==]
local cli = require("glm53.util.cli")
local common = require("glm53.cli.common")

local M = {
    prog = "glm53 tokenize",
    usage = "glm53 tokenize [options] [TEXT | - | IDS]   or   glm53 tokenize --input IN.json --out OUT.json [--decode]",
    summary = "Encodes text to token ids (or decodes ids with --decode); --input/--out for a JSON batch.",
    options = {
        "Tokenizer:",
        { "tokenizer", metavar = "FILE", help = "tokenizer.json or tiktoken file (default: --model's tokenizer.json)" },
        { "model", metavar = "DIR", help = "checkpoint directory whose tokenizer.json to use (default: the bundled model)" },
        "What to do:",
        { "decode", flag = true, help = "decode ids (IDS, or --input's id arrays) to text" },
        { "skip_special_tokens", flag = true, help = "with --decode: leave special tokens out" },
        { "special_as_text", flag = true, help = "encode special tokens written in the text as plain text" },
        { "pieces", flag = true, help = "one line per token: the id and its text" },
        { "input", metavar = "IN.json", help = "a JSON array of strings (or of id arrays with --decode)" },
        { "out", metavar = "OUT.json", help = "where the JSON array of results goes (with --input)" },
    },
    args = { { "text", metavar = "TEXT", optional = true } },
}

local function load_tokenizer(args)
    local tokenizer = require("glm53.engine.tokenizer")
    local path = args.tokenizer
    if not path then
        local dir, why = args.model, nil
        if not dir then
            dir, why = common.bundled_model()
            if not dir then cli.fail(why) end
        end
        path = dir .. "/tokenizer.json"
    end
    local tok, err = tokenizer.load(path)
    if not tok then cli.fail(common.about(path, err)) end
    return tok
end

-- The batch contract: --input IN.json -> --out OUT.json.
local function batch(args, tok)
    local cjson = require("cjson")
    local base64 = require("glm53.util.base64")
    local file = require("glm53.util.file")
    local text, err = file.read_file(args.input)
    if not text then cli.fail(common.about(args.input, err)) end
    local ok, input = pcall(cjson.decode, text)
    if not ok or type(input) ~= "table" then cli.fail(args.input .. ": not a JSON array") end
    local out = {}
    for k, item in ipairs(input) do
        if args.decode then
            if type(item) ~= "table" then cli.fail(("element %d is not an id array"):format(k)) end
            local s, derr = tok:decode(item, { skip_special_tokens = args.skip_special_tokens })
            if not s then cli.fail(("element %d: %s"):format(k, derr)) end
            out[k] = cjson.encode(s)
        else
            local s = item
            if type(item) == "table" and type(item.b64) == "string" then
                local berr
                s, berr = base64.decode(item.b64)
                if not s then cli.fail(("element %d: bad base64: %s"):format(k, berr)) end
            end
            if type(s) ~= "string" then cli.fail(("element %d is neither a string nor {\"b64\": ...}"):format(k)) end
            local ids, n = tok:encode_buffer(s, { special_as_text = args.special_as_text })
            if not ids then cli.fail(("element %d: %s"):format(k, n)) end
            local t = {}
            for j = 0, n - 1 do t[j + 1] = ids[j] end
            out[k] = "[" .. table.concat(t, ",") .. "]"
        end
    end
    local written, werr = file.write_file(args.out, "[" .. table.concat(out, ",") .. "]\n")
    if not written then cli.fail(common.about(args.out, werr)) end
    return true
end

function M.run(args)
    if (args.input == nil) ~= (args.out == nil) then cli.usage_error("--input and --out come together") end
    if args.input and args.text then cli.usage_error("give TEXT or --input, not both") end
    if not args.input and not args.text then
        cli.usage_error("give TEXT, - (stdin), IDS with --decode, or --input IN.json --out OUT.json")
    end
    local tok = load_tokenizer(args)
    if args.input then return batch(args, tok) end
    local text = args.text == "-" and io.stdin:read("*a") or args.text
    if args.decode then
        local ids = {}
        for item in text:gmatch("[^,%s]+") do
            local id = tonumber(item)
            if not id or id < 0 or id % 1 ~= 0 then cli.usage_error("'" .. item .. "' is not a token id") end
            ids[#ids + 1] = id
        end
        local s, err = tok:decode(ids, { skip_special_tokens = args.skip_special_tokens })
        if not s then cli.fail(err) end
        io.stdout:write(s, "\n")
        return true
    end
    local ids, err = tok:encode(text, { special_as_text = args.special_as_text })
    if not ids then cli.fail(err) end
    if args.pieces then
        local cjson = require("cjson")
        for _, id in ipairs(ids) do
            io.stdout:write(id, "\t", cjson.encode(require("glm53.engine.tokenizer").utf8_lossy(tok:piece(id))), "\n")
        end
    else
        io.stdout:write(table.concat(ids, ","), "\n")
    end
    return true
end

return M
