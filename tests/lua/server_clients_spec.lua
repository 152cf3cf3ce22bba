-- Real clients against the server on its default model, the bundled models/glm53-tiny (no --model): the official
-- openai and @anthropic-ai/sdk npm packages, streaming and not (tests/server/sdk_test.mjs), their greedy and seeded
-- token ids equal to scripts/generate.lua's on the same default model, and the chat page in headless Chromium
-- through playwright-core (tests/server/page_test.mjs), which leaves a screenshot of the streamed answer in
-- reports/server-page.png.
-- The npm packages are installed from tests/server/package-lock.json with `npm ci` (pinned versions, from the
-- npm cache when offline); when that cannot run, the tests fail and say why.
local cjson = require("cjson")
local H = require("server_helpers")

local function run(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
    local out = p:read("*a")
    p:close()
    return out, tonumber(out:match("rc=(%d+)%s*$"))
end

local npm_ready, npm_error
local function ensure_npm()
    if npm_ready ~= nil then return npm_ready end
    local out, rc = run("cd tests/server && npm ci --prefer-offline --no-audit --no-fund --loglevel=error")
    npm_ready = rc == 0
    if not npm_ready then
        npm_error = "`npm ci` in tests/server failed (is the npm registry or cache reachable? node >= 20?):\n" .. out
    end
    return npm_ready
end

describe("server with real clients", function()
    local srv
    setup(function() srv = H.start({ "--script", "tests/server/test_app.lua" }) end)
    teardown(function() srv.stop() end)

    it("the official OpenAI and Anthropic npm clients: every call passes, streaming and not", function()
        assert(ensure_npm(), npm_error)
        local ids_path = os.tmpname()
        local out, rc = run("node tests/server/sdk_test.mjs " .. H.quote("http://127.0.0.1:" .. srv.port) .. " " ..
                            H.quote(ids_path))
        io.write("\n", (out:gsub("rc=%d+%s*$", "")))
        assert.are.equal(0, rc, out)
        assert.matches("all passed", out, 1, true)
        -- What the client received equals scripts/generate.lua's ids for the same prompt ids, both without --model
        -- (the bundled default on both sides), stopping at that model's end tokens: greedy, and choice i of the
        -- seeded n = 2 request against --seed 11 + i - 1.
        local got = cjson.decode(H.read_all(ids_path))
        os.remove(ids_path)
        local dir = require("glm53.server").DEFAULT_MODEL
        local gen = cjson.decode(H.read_all(dir .. "/generation_config.json"))
        local stops = table.concat(gen.eos_token_id, ",")
        local prompt = table.concat(got.prompt, ",")
        local ref = H.generate("--tokens " .. prompt .. " --max-tokens 24 --stop-ids " .. stops)
        assert.are.same(ref.ids, got.greedy)
        for i = 1, 2 do
            ref = H.generate("--tokens " .. prompt .. " --max-tokens 16 --stop-ids " .. stops ..
                             " --temperature 0.8 --top-p 0.9 --seed " .. (11 + i - 1))
            assert.are.same(ref.ids, got.seeded[i], "seeded choice " .. i)
        end
    end)

    it("headless Chromium loads GET /, sends a message and shows the streamed answer (screenshot); CORS", function()
        assert(ensure_npm(), npm_error)
        local chromium = os.getenv("CHROMIUM") or "/usr/bin/chromium"
        assert(io.open(chromium, "rb"), "no " .. chromium .. ": install it (apt-get install -y chromium; scripts/bootstrap.sh)")
        os.execute("mkdir -p reports")
        local png = "reports/server-page.png"
        os.remove(png)
        local out, rc = run("node tests/server/page_test.mjs " .. H.quote("http://127.0.0.1:" .. srv.port) .. " " .. png)
        assert.are.equal(0, rc, out)
        local line = assert(out:match("RESULT ([^\n]*)"), out)
        local result = require("cjson").decode(line)
        assert.is_true(#result.content + #result.reasoning > 0)
        assert.matches("%d+ tokens", result.meta)
        assert.is_true(result.chunks > 2, "the answer arrived in several SSE chunks")
        -- a page of another origin (localhost against 127.0.0.1) posted to the API through the CORS preflight
        assert.are.equal(200, result.cross_origin.status, line)
        assert.are.equal(1, result.cross_origin.choices, line)
        local f = assert(io.open(png, "rb"))
        local bytes = f:read("*a")
        f:close()
        assert.are.equal("\137PNG", bytes:sub(1, 4))
        assert.is_true(#bytes > 10000)
        print(string.format("  page: %d SSE chunks, %s; screenshot %s (%d bytes); from %s: %d", result.chunks,
                            result.meta, png, #bytes, result.cross_origin.origin, result.cross_origin.status))
    end)
end)
