-- scripts/eval.lua and glm53.eval.{runner,records,summary,compare} on models/tiny (random weights: accuracy is
-- about 0, which is not what these tests are about; named with --model, in-process and for the server, since the
-- default is models/glm53-tiny):
--   records: fixed key order, a partial last line cut off, error records retried, duplicates refused;
--   acceptance 2: a run killed with SIGKILL half-way and restarted ends with the same JSONL as an
--     uninterrupted run (identical bytes but for the wall-clock latency_s field);
--   acceptance 3: in-process and against our server (scripts/serve.lua on the same model) the records and scores
--     are equal;
--   the summary's counts and Wilson intervals, the paired comparison, and the report in headless Chromium
--     (acceptance 5: the screenshot shows the table and the plots).
local cjson = require("cjson")
local file = require("glm53.util.file")
local records = require("glm53.eval.records")
local runner = require("glm53.eval.runner")
local summary = require("glm53.eval.summary")
local compare = require("glm53.eval.compare")
local stats = require("glm53.report.stats")
local h = require("eval_helpers")

local TMP = os.tmpname()
os.remove(TMP)
assert(os.execute("mkdir -p " .. TMP) == 0)
local ROOT = runner.ROOT

local function eval_cmd(args)
    return h.LUAJIT .. " scripts/eval.lua " .. args
end

-- Output and success of a shell command (io.popen's close does not give the status under LuaJIT).
local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"exit status $?\"")
    local out = p:read("*a")
    p:close()
    local status = tonumber(out:match("exit status (%d+)\n$"))
    return out:gsub("exit status %d+\n$", ""), status == 0
end

describe("glm53.eval.records", function()
    it("writes fields in a fixed order and objects with sorted or given keys", function()
        local line = records.encode({ latency_s = 0.5, id = "7", prompt = { { role = "user", content = "q" } },
                                      correct = records.ordered({ "b", "a" }, { a = true, b = false }) })
        assert.are.equal('{"id":"7","group":null,"prompt":[{"content":"q","role":"user"}],"output":null,"reasoning":null,' ..
                         '"finish_reason":null,"extracted":null,"extract_stage":null,"correct":{"b":false,"a":true},' ..
                         '"gold":null,"tokens_in":null,"tokens_out":null,"spec":null,"error":null,"latency_s":0.5}', line)
    end)

    it("reopens a file: keeps complete records, cuts a partial line, drops error records, refuses duplicates", function()
        local path = TMP .. "/r.jsonl"
        assert(file.write_file(path, records.encode({ id = "a" }) .. "\n" .. records.encode({ id = "b", error = "x" }) ..
                                     "\n" .. records.encode({ id = "c" }) .. "\n" .. '{"id":"d","out'))
        local store = assert(records.open(path))
        assert.is_true(store.cut)
        assert.are.equal(1, store.dropped)
        assert.are.same({ "a", "c" }, store.order)
        assert(store:append({ id = "b" }))
        store:close()
        local list = assert(records.read(path))
        assert.are.same({ "a", "c", "b" }, { list[1].id, list[2].id, list[3].id })
        assert(file.write_file(path, records.encode({ id = "a" }) .. "\n" .. records.encode({ id = "a" }) .. "\n"))
        local none, err = records.open(path)
        assert.is_nil(none)
        assert.truthy(err:find(":2: a second record of id a", 1, true))
        assert(file.write_file(path, "not json\n" .. records.encode({ id = "a" }) .. "\n"))
        none, err = records.open(path)
        assert.is_nil(none)
        assert.truthy(err:find(":1: not a record", 1, true))
    end)
end)

describe("glm53.eval.summary", function()
    it("counts errors and length stops apart from wrong answers, with Wilson intervals", function()
        local recs = {}
        -- 10 scored: 3 right; of the 7 wrong, 2 stopped at max tokens; 2 more with errors (not scored).
        for i = 1, 10 do
            recs[i] = { id = tostring(i), correct = { m = i <= 3 }, finish_reason = (i == 9 or i == 10) and "length" or "stop",
                        tokens_in = 10, tokens_out = 5, latency_s = i / 10 }
        end
        recs[11] = { id = "11", error = "HTTP 500" }
        recs[12] = { id = "12", error = "timeout" }
        local s = summary.compute(recs, { "m" })
        assert.are.equal(12, s.items) assert.are.equal(2, s.errors) assert.are.equal(2, s.length_stops)
        local m = s.modes[1]
        assert.are.same({ 10, 3, 5, 2 }, { m.n, m.correct, m.wrong, m.wrong_length })
        local lo, hi = stats.wilson(3, 10)
        assert.are.same({ 0.3, lo, hi }, { m.p, m.lo, m.hi })
        assert.are.equal(100, s.tokens_in)
        assert.are.equal(0.55, s.latency.median)
    end)
end)

describe("glm53.eval.compare", function()
    it("joins by id and gives the accuracy difference, a paired bootstrap interval and McNemar's exact p", function()
        local a, b = {}, {}
        -- 20 items: both right on 1-6, A only on 7-8, B only on 9-15, neither on 16-20; an error and an unpaired one.
        for i = 1, 20 do
            a[#a + 1] = { id = tostring(i), correct = { m = i <= 8 } }
            b[#b + 1] = { id = tostring(i), correct = { m = i <= 6 or (i >= 9 and i <= 15) } }
        end
        a[#a + 1] = { id = "21", error = "boom" }
        b[#b + 1] = { id = "21", correct = { m = true } }
        b[#b + 1] = { id = "22", correct = { m = true } }
        local c = compare.paired(a, b, "m", { seed = 1 })
        assert.are.equal(20, c.n) assert.are.equal(1, c.errors) assert.are.equal(1, c.only_b)
        assert.are.same({ 6, 2, 7, 5 }, { c.both, c.a_only, c.b_only, c.neither })
        assert.are.equal(0.4, c.acc_a) assert.are.equal(0.65, c.acc_b)
        assert.is_true(math.abs(c.diff - 0.25) < 1e-12)
        -- McNemar: 2 vs 7 discordant -> 2 P(X <= 2 | 9, 1/2) = 0.1796875
        assert.is_true(math.abs(c.p - 0.1796875) < 1e-12)
        assert.is_true(c.lo < 0.25 and 0.25 < c.hi)
        local again = compare.paired(a, b, "m", { seed = 1 })
        assert.are.same({ c.lo, c.hi }, { again.lo, again.hi })   -- seeded: the same interval
        -- The interval of d_i = b_i - a_i (values -1, 0, 1) must sit within [-1, 1] and be about +-2 se wide.
        local se = math.sqrt((9 / 20 - 0.25 ^ 2) / 20)
        assert.is_true(math.abs((c.hi - c.lo) - 2 * 1.96 * se) < 0.06)
    end)
end)

describe("scripts/eval.lua", function()
    local uninterrupted = TMP .. "/full"
    local common = "gsm8k --limit 24 --max-tokens 40 --concurrency 3 --seed 5 --progress-every 100"
    local in_process = common .. " --model models/tiny"

    it("runs in-process and writes records, the summary and the report", function()
        local out, ok = sh(eval_cmd(in_process .. " --out " .. uninterrupted))
        assert.is_true(ok, out)
        assert.truthy(out:find("strict-match", 1, true))
        assert.are.equal(24, h.count_lines(uninterrupted .. "/records.jsonl"))
        local s = cjson.decode((assert(file.read_file(uninterrupted .. "/summary.json"))))
        assert.are.equal(24, s.items)
        assert.are.equal("strict-match", s.modes[1].mode)
        for _, name in ipairs({ "run.json", "summary.md", "report.html" }) do
            assert.is_true(file.exists(uninterrupted .. "/" .. name), name)
        end
        -- Records are in item order (ids 0 .. 23) whatever order the three streams finished in.
        local list = assert(records.read(uninterrupted .. "/records.jsonl"))
        for i, r in ipairs(list) do assert.are.equal(tostring(i - 1), r.id) end
    end)

    it("resumes a run killed with SIGKILL half-way and ends with the same records", function()
        local dir = TMP .. "/killed"
        local child = h.start(eval_cmd(in_process .. " --max-tokens 40 --out " .. dir .. " >/dev/null 2>&1"))
        local path = dir .. "/records.jsonl"
        local waited = 0
        while h.count_lines(path) < 6 and waited < 60 do h.sleep(0.005) waited = waited + 0.005 end
        child:stop("KILL")
        local at_kill = h.count_lines(path)
        assert.is_true(at_kill >= 6 and at_kill < 24, "killed after " .. at_kill .. " records")
        -- A write torn by the kill: half a line at the end.
        local f = assert(io.open(path, "ab"))
        f:write('{"id":"' .. at_kill .. '","prompt":[{"content":"Question')
        f:close()
        local out, ok = sh(eval_cmd(in_process .. " --out " .. dir))
        assert.is_true(ok, out)
        assert.truthy(out:find("cut off a partial last line", 1, true))
        assert.truthy(out:find(string.format("(%d done before, %d to run)", at_kill, 24 - at_kill), 1, true), out)
        assert.are.equal(h.records_without_latency(uninterrupted .. "/records.jsonl"), h.records_without_latency(path))
        -- A third run has nothing left to do.
        out, ok = sh(eval_cmd(in_process .. " --out " .. dir))
        assert.is_true(ok, out)
        assert.truthy(out:find("(24 done before, 0 to run)", 1, true))
    end)

    it("refuses to resume with settings that change the outputs", function()
        local out, ok = sh(eval_cmd("gsm8k --limit 24 --max-tokens 41 --concurrency 3 --seed 5 --model models/tiny " ..
                                    "--out " .. uninterrupted))
        assert.is_falsy(ok)
        assert.truthy(out:find("holds a run with other settings", 1, true))
    end)

    it("gives the same records and scores against a server as in-process (chat and text prompts)", function()
        local server = h.start_server({ "--model", "models/tiny", "--max-num-seqs", "4" })
        local ok_all, err = pcall(function()
            local dir = TMP .. "/server"
            local out, ok = sh(eval_cmd(common .. " --server " .. server.url .. " --out " .. dir))
            assert.is_true(ok, out)
            assert.are.equal(h.records_without_latency(uninterrupted .. "/records.jsonl"),
                             h.records_without_latency(dir .. "/records.jsonl"))
            local a = cjson.decode((assert(file.read_file(uninterrupted .. "/summary.json"))))
            local b = cjson.decode((assert(file.read_file(dir .. "/summary.json"))))
            assert.are.same(a.modes, b.modes)
            -- Few-shot gsm8k_cot prompts are text: /v1/completions.
            local text_args = "gsm8k_cot --fewshot 3 --limit 8 --max-tokens 24 --concurrency 2 --progress-every 100"
            out, ok = sh(eval_cmd(text_args .. " --model models/tiny --out " .. TMP .. "/text_local"))
            assert.is_true(ok, out)
            out, ok = sh(eval_cmd(text_args .. " --server " .. server.url .. " --out " .. TMP .. "/text_server"))
            assert.is_true(ok, out)
            assert.are.equal(h.records_without_latency(TMP .. "/text_local/records.jsonl"),
                             h.records_without_latency(TMP .. "/text_server/records.jsonl"))
            local first = assert(records.read(TMP .. "/text_server/records.jsonl"))[1]
            assert.are.equal("string", type(first.prompt))
            assert.are.equal(cjson.null, first.reasoning)
        end)
        server.stop()
        assert(ok_all, err)
    end)

    it("records errors apart and retries them on the next run", function()
        -- A server that is not there: every request fails to connect.
        local dir = TMP .. "/down"
        local out, ok = sh(eval_cmd("gsm8k --limit 3 --server http://127.0.0.1:1 --model-name x --progress-every 100 " ..
                                    "--out " .. dir))
        assert.is_true(ok, out)
        assert.truthy(out:find("3 items, 3 errors", 1, true), out)
        local list = assert(records.read(dir .. "/records.jsonl"))
        assert.truthy(list[1].error:find("connect", 1, true))
        out = sh(eval_cmd("gsm8k --limit 3 --server http://127.0.0.1:1 --model-name x --progress-every 100 --out " .. dir))
        assert.truthy(out:find("3 records with errors dropped", 1, true), out)
    end)

    it("compares two runs with scripts/compare.lua", function()
        local out, ok = sh(h.LUAJIT .. " scripts/compare.lua " .. uninterrupted .. " " .. TMP .. "/killed/records.jsonl --seed 2")
        assert.is_true(ok, out)
        assert.truthy(out:find("McNemar exact p", 1, true))
        assert.truthy(out:find("24 items joined by id", 1, true))
        out, ok = sh(h.LUAJIT .. " scripts/compare.lua " .. uninterrupted .. " " .. uninterrupted .. " --json --mode strict-match")
        assert.is_true(ok, out)
        local j = cjson.decode(out)
        assert.are.equal(0, j.results[1].diff)
        assert.are.equal(1, j.results[1].p)
    end)

    it("writes a report that headless Chromium shows with its table and plots", function()
        local png = TMP .. "/report.png"
        local path, err = h.screenshot(uninterrupted .. "/report.html", png, 1200, 1600)
        assert(path, "chromium: " .. tostring(err))
        local img = assert(h.read_png(png))
        assert.are.same({ 1200, 1600 }, { img.width, img.height })
        local counts, not_white = h.count_colours(img, {
            blue = { 0x1f, 0x77, 0xb4 },          -- the first series (svg.COLORS[1]): the plots
            red = { 0xd6, 0x27, 0x28 },           -- the second series
            header = { 0xf4, 0xf4, 0xf4 },        -- table header cells (html.STYLE)
            border = { 0xcc, 0xcc, 0xcc },        -- table borders
        }, 6)
        assert.is_true(not_white > 0.02 * 1200 * 1600, "the page is blank: " .. not_white .. " non-white pixels")
        assert.is_true(counts.blue > 200, "plot lines: " .. counts.blue .. " blue pixels")
        assert.is_true(counts.red > 50, "second series: " .. counts.red .. " red pixels")
        assert.is_true(counts.header > 2000, "table header: " .. counts.header .. " pixels")
        assert.is_true(counts.border > 500, "table borders: " .. counts.border .. " pixels")
    end)
end)
