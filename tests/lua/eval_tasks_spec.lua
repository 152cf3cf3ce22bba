-- evals/*.lua: answer extraction and scoring against the reference harnesses' rules, loaders, prompts,
-- seeded shuffles and repeats.
--
-- Every expected answer below is read off the reference's rules by hand (the comment beside it says
-- how), never produced by running this code: lm-evaluation-harness (lm_eval/tasks/gsm8k/*.yaml,
-- lm_eval/tasks/gpqa/cot_*/, lm_eval/tasks/mmlu_pro/, lm_eval/filters/extraction.py,
-- lm_eval/api/metrics.py), TIGER-AI-Lab/MMLU-Pro evaluate_from_api.py, MMMU-Benchmark/MMMU
-- mmmu-pro/evaluate.py, and Python's re / str semantics.

local common = require("evals.common")
local gsm8k = require("evals.gsm8k")
local gsm8k_cot = require("evals.gsm8k_cot")
local mmlu_pro = require("evals.mmlu_pro")
local gpqa = require("evals.gpqa")
local mmmu_pro = require("evals.mmmu_pro")

local FFFD = "\239\191\189"

local function tmpfile(content)
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(content)
    f:close()
    return path
end

local function is_permutation(perm, n)
    if #perm ~= n then return false end
    local seen = {}
    for _, v in ipairs(perm) do
        if type(v) ~= "number" or v < 1 or v > n or seen[v] then return false end
        seen[v] = true
    end
    return true
end

------------------------------------------------------------------------------
-- Python's str and re over PCRE2
------------------------------------------------------------------------------

describe("common: Python text semantics", function()
    it("decodes invalid UTF-8 as bytes.decode('utf-8', 'replace'): one U+FFFD per maximal subpart", function()
        assert.are.equal("héllo", common.text("héllo"))
        -- FF and FE can never start a character: one replacement each.
        assert.are.equal("a" .. FFFD .. FFFD .. "b", common.text("a\255\254b"))
        -- E2 82 is the start of a three-byte character cut short: a single maximal subpart.
        assert.are.equal(FFFD .. "!", common.text("\226\130!"))
        -- ED A0 80 would be a surrogate: A0 is outside ED's second-byte range 80..9F, so ED, A0 and 80
        -- are each a subpart of their own.
        assert.are.equal(FFFD .. FFFD .. FFFD, common.text("\237\160\128"))
        -- C0 AF is an overlong "/": C0 never starts a character, AF is a stray continuation byte.
        assert.are.equal(FFFD .. FFFD, common.text("\192\175"))
    end)

    it("lowers as str.lower(): full mapping and the final sigma", function()
        assert.are.equal("àé abc", common.lower("ÀÉ ABC"))
        -- U+0130 lowers to i + U+0307 COMBINING DOT ABOVE (SpecialCasing).
        assert.are.equal("i\204\135", common.lower("İ"))
        -- Capital sigma after a cased letter and before none: final form U+03C2.
        assert.are.equal("ας", common.lower("ΑΣ"))
        -- Nothing cased before it, or a cased letter after it: U+03C3.
        assert.are.equal("σα", common.lower("ΣΑ"))
        assert.are.equal("σ", common.lower("Σ"))
        -- "." is case-ignorable (Word_Break MidNumLet), so the A after it still counts as following.
        assert.are.equal("ασ.α", common.lower("ΑΣ.Α"))
        assert.are.equal("ας b", common.lower("ΑΣ B"))
    end)

    it("strips and splits on str.isspace() code points", function()
        -- U+3000 IDEOGRAPHIC SPACE and U+0085 NEXT LINE are whitespace to Python.
        assert.are.equal("x y", common.strip("\u{3000} x y \u{85}\n"))
        -- U+200B ZERO WIDTH SPACE is not.
        assert.are.equal("\u{200b}x", common.strip("\u{200b}x "))
        -- U+001C (a separator control) is whitespace to str.split().
        assert.are.equal(2, common.split_count(" a\u{1c}b "))
        assert.are.equal(0, common.split_count("  "))
    end)

    it("replaces like str.replace: left to right, not overlapping", function()
        -- "   " holds one "  " from the left, leaving one space after it.
        assert.are.equal("a  b", common.replace("a   b", "  ", " "))
        assert.are.equal("x", common.replace("x", "y", "z"))
    end)
end)

describe("common: re over PCRE2", function()
    it("findall gives Python's shapes: whole match, group 1, or every group", function()
        assert.are.same({ "ab", "ab" }, common.findall("ab", "abxab"))
        assert.are.same({ "1", "2" }, common.findall("a(\\d)", "a1a2"))
        -- Groups that did not take part are "" in Python's tuples.
        assert.are.same({ { "a", "" }, { "", "b" } }, common.findall("(a)|(b)", "ab"))
    end)

    it("handles empty matches as Python 3.7+ does", function()
        -- re.findall('x*', 'axb') == ['', 'x', '', '']: empty at 0, "x", empty at 2, empty at the end.
        assert.are.same({ "", "x", "", "" }, common.findall("x*", "axb"))
        -- The re.sub documentation's own example.
        assert.are.equal("-a-b--d-", common.sub("x*", "-", "abxd"))
    end)

    it("treats newlines as Python: `.` stops at \\n, `$` also matches before a final \\n", function()
        assert.are.same({}, common.findall("a.b", "a\nb"))
        assert.are.equal("42\n", common.sub("\\.$", "", "42.\n"))
        assert.are.equal("4.2", common.sub("\\.$", "", "4.2"))
        -- (?s) lets `.` cross lines; .* then runs to the last "#### ".
        assert.are.equal("7", common.sub("(?s).*#### ", "", "a\n#### 5\nb #### 7"))
    end)

    it("matches \\s as every Python whitespace code point, inside and outside classes", function()
        assert.are.equal(1, #common.findall("a\\sb", "a\u{1c}b"))
        assert.are.equal(1, #common.findall("a\\sb", "a\u{85}b"))
        assert.are.equal(1, #common.findall("[\\s]", "\u{3000}"))
        assert.are.equal(0, #common.findall("\\s", "\u{200b}"))
        -- PCRE2's own \s would take U+180E MONGOLIAN VOWEL SEPARATOR (a format character since Unicode
        -- 6.3); Python's does not.
        assert.are.equal(0, #common.findall("\\s", "\u{180e}"))
        assert.are.equal("\u{180e}x", common.strip("\u{180e}x"))
    end)

    it("matches \\d and \\b on Unicode as Python does, and [0-9] only on ASCII digits", function()
        -- U+0663 ARABIC-INDIC DIGIT THREE is a decimal digit (Nd): \d takes it, [0-9] does not.
        assert.are.same({ "٣" }, common.findall("\\d", "x٣"))
        assert.are.same({}, common.findall("[0-9]", "x٣"))
        -- é is a word character, so there is no word boundary between é and B.
        assert.are.same({}, common.findall("\\b[A-J]\\b", "éB"))
        assert.are.same({ "B" }, common.findall("\\b[A-J]\\b", "-B"))
    end)

    it("matches code points, not bytes", function()
        -- (.*)(?=.) gives back one character for the lookahead: all of "é", not its last byte. Then an
        -- empty match right after the first one (allowed after a non-empty match) sees "é" ahead too.
        assert.are.same({ "B", "" }, common.findall("(.*)(?=.)", "Bé"))
        assert.are.same({ "é" }, common.findall(".", "é"))
    end)

    it("refuses the Python escapes it does not translate", function()
        assert.has_error(function() common.findall("\\S", "x") end)
        assert.has_error(function() common.findall("a\\Z", "a") end)
    end)
end)

describe("common: seeded draws", function()
    it("uses FNV-1a 64 and SplitMix64 (published test vectors)", function()
        assert.are.equal(0xcbf29ce484222325ULL, common.hash64(""))
        assert.are.equal(0xaf63dc4c8601ec8cULL, common.hash64("a"))
        assert.are.equal(0x85944171f73967e8ULL, common.hash64("foobar"))
        local next_value = common.splitmix64(0ULL)
        assert.are.equal(0xe220a8397b1dcdafULL, next_value())
        assert.are.equal(0x6e789e6aa1b965f4ULL, next_value())
        assert.are.equal(0x06c45d188009454fULL, next_value())
    end)

    it("gives permutations that depend only on their key", function()
        local a = common.permutation(10, common.key("t", 0, "id1", 1))
        assert.is_true(is_permutation(a, 10))
        assert.are.same(a, common.permutation(10, common.key("t", 0, "id1", 1)))
        assert.are_not.same(a, common.permutation(10, common.key("t", 1, "id1", 1)))
        assert.are_not.same(a, common.permutation(10, common.key("t", 0, "id1", 2)))
        assert.are.same({ 1 }, common.permutation(1, "k"))
        local v = common.below(7, "k")
        assert.is_true(v >= 0 and v < 7 and v == math.floor(v))
        assert.are.equal(v, common.below(7, "k"))
    end)

    it("keys join their parts with NUL so that parts cannot run together", function()
        assert.are_not.equal(common.key("a:b", "c"), common.key("a", "b:c"))
        assert.are.equal("x\0" .. "1\0" .. "2", common.key("x", 1, 2))
    end)
end)

describe("common: exact_match", function()
    it("applies the ignore rules in order to both sides", function()
        local o = { regexes_to_ignore = { ",", "\\$" }, ignore_case = true }
        assert.is_true(common.exact_match("$1,234", "1234", o))
        assert.is_true(common.exact_match("ABC", "abc", o))
        assert.is_false(common.exact_match(nil, "abc", o))
        -- ignore_punctuation removes string.punctuation only (ASCII): U+2019 stays.
        local p = { ignore_punctuation = true }
        assert.is_true(common.exact_match("(B).", "B", p))
        assert.is_false(common.exact_match("B\u{2019}", "B", p))
    end)

    it("drops trailing NULs as numpy's fixed-width strings do", function()
        assert.is_true(common.exact_match("42\0", "42", {}))
        assert.is_false(common.exact_match("4\0" .. "2", "42", {}))
    end)
end)

------------------------------------------------------------------------------
-- GSM8K
------------------------------------------------------------------------------

describe("gsm8k strict-match", function()
    -- "#### (\-?[0-9\.\,]+)", group_select 0 (first match), take_first.
    local function strict(s) return gsm8k.extract(s, "strict-match") end

    it("reads the number after '#### '", function()
        assert.are.equal("42", strict("so 40 + 2 = 42\n#### 42"))
        -- Several: the first match.
        assert.are.equal("5", strict("#### 5\n#### 7"))
        assert.are.equal("-3", strict("#### -3"))
        assert.are.equal("1,234", strict("#### 1,234"))
        -- The class takes "." too, so a sentence-ending dot is part of the match.
        assert.are.equal("18.", strict("#### 18.\nDone"))
        assert.are.equal("3.50", strict("#### 3.50"))
    end)

    it("finds nothing where the pattern does not fit", function()
        assert.is_nil(strict("The answer is 42."))
        assert.is_nil(strict("\\boxed{42}"))
        -- "$" is not in the class, and the space after #### is required.
        assert.is_nil(strict("#### $18"))
        assert.is_nil(strict("####42"))
        assert.is_nil(strict(""))
    end)

    it("scores with exact_match after removing ',', '$', everything up to '#### ', a final '.', and case", function()
        local gold = gsm8k.gold({ answer = "She makes 9 * 2 = $<<9*2=18>>18.\n#### 18" })
        assert.is_true(gsm8k.match("18", gold, "strict-match"))
        -- "18." loses its final dot.
        assert.is_true(gsm8k.match("18.", gold, "strict-match"))
        assert.is_true(gsm8k.match("1,234", "#### 1234", "strict-match"))
        assert.is_true(gsm8k.match("1234", "#### 1,234", "strict-match"))
        -- No numeric normalisation: 3.50 is not 3.5, nor 18.00 18.
        assert.is_false(gsm8k.match("3.50", "#### 3.5", "strict-match"))
        assert.is_false(gsm8k.match("18.00", gold, "strict-match"))
        assert.is_false(gsm8k.match(nil, gold, "strict-match"))
    end)
end)

describe("gsm8k flexible-extract", function()
    -- "(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select -1 (LAST match), first non-empty group, strip.
    local function flex(s) return gsm8k.extract(s, "flexible-extract") end
    local gold18 = "#### 18"

    it("takes the last number-like run, '$', '.' and ',' included", function()
        -- "$18.00." is one run of the first alternative (all of $ 1 8 . 0 0 . are in the class).
        assert.are.equal("$18.00.", flex("The answer is $18.00."))
        -- After the ignore rules "$18.00." is "18.00", which is not "18".
        assert.is_false(gsm8k.match(flex("The answer is $18.00."), gold18, "flexible-extract"))
        -- "18" has two class characters, so the first alternative takes it; " dollars" is not in it.
        assert.are.equal("18", flex("18 dollars"))
        assert.is_true(gsm8k.match(flex("18 dollars"), gold18, "flexible-extract"))
        -- Matches: "3" (second alternative), "5," and "8." (first); the last is "8.", scored as "8".
        assert.are.equal("8.", flex("I have 3 apples and 5 pears, so 8."))
        assert.is_true(gsm8k.match("8.", "#### 8", "flexible-extract"))
        assert.are.equal("1,234", flex("It costs 1,234"))
        assert.is_true(gsm8k.match("1,234", "#### 1,234", "flexible-extract"))
    end)

    it("keeps signs and decimals", function()
        -- "-3": the first alternative needs two class characters after "-", so the second one matches.
        assert.are.equal("-3", flex("-3"))
        assert.are.equal("0.5", flex("half is 0.5"))
        assert.are.equal("3.50", flex("it is 3.50"))
        -- "-" then "$5.50" (five class characters).
        assert.are.equal("-$5.50", flex("a change of -$5.50"))
        assert.is_true(gsm8k.match("-$5.50", "#### -5.50", "flexible-extract"))
    end)

    it("reads numbers out of any wrapping", function()
        assert.are.equal("42", flex("\\boxed{42}"))
        assert.are.equal("42", flex("#### 42"))
        assert.are.equal("7", flex("Answer: 7"))
        -- "42." comes first, then "2": the last wins, which is wrong here, as in the harness.
        assert.are.equal("2", flex("The answer is 42. That's 2 more."))
        -- "..." is a run of the first alternative, but "5" comes after it.
        assert.are.equal("5", flex("Hmm... so 5"))
        -- A lone "..." is extracted; after the final-dot rule ".." matches nothing.
        assert.are.equal("...", flex("Hmm..."))
        assert.is_false(gsm8k.match("...", "#### 5", "flexible-extract"))
        -- Arabic-Indic digits are not [0-9].
        assert.is_nil(flex("٤٢"))
        assert.is_nil(flex("I don't know"))
    end)

    it("reads past invalid UTF-8 as Python's decoded text would", function()
        assert.are.equal("42", flex("\255 42 \254"))
        assert.are.equal("42", gsm8k.extract("#### 42\255", "strict-match"))
    end)
end)

describe("gsm8k_cot strict-match", function()
    -- "The answer is (\-?[0-9\.\,]+)." where the final "." is ANY character and must be present.
    local function strict(s) return gsm8k_cot.extract(s, "strict-match") end

    it("needs one character after the number", function()
        -- The greedy group takes "42.", the final "." then has nothing to match: back off to "42".
        assert.are.equal("42", strict("The answer is 42."))
        -- At the end of the text the final "." takes the "2".
        assert.are.equal("4", strict("The answer is 42"))
        -- "." does not match "\n" either: again the "2" is taken by it.
        assert.are.equal("4", strict("The answer is 42\nNext"))
        assert.are.equal("1,234", strict("The answer is 1,234."))
        assert.are.equal("3.50", strict("The answer is 3.50."))
        -- Not at the end, the greedy group keeps its "." and the final "." takes the space after it.
        assert.are.equal("5.", strict("The answer is 5. The answer is 7."))
        assert.is_true(gsm8k_cot.match("5.", "5", "strict-match"))
        -- A single digit at the very end leaves nothing for the final ".".
        assert.is_nil(strict("The answer is 4"))
    end)

    it("is case-sensitive and has no '$'", function()
        assert.is_nil(strict("the answer is 42."))
        assert.is_nil(strict("The answer is $42."))
        assert.is_nil(strict("#### 42"))
    end)

    it("shares flexible-extract and the metric with gsm8k; its gold is the text after the last ####", function()
        assert.are.equal("$18.00.", gsm8k_cot.extract("The answer is $18.00.", "flexible-extract"))
        local item = { answer = "a\n#### 1,234 " }
        assert.are.equal("1,234", gsm8k_cot.gold(item))
        assert.is_true(gsm8k_cot.match("1234", gsm8k_cot.gold(item), "strict-match"))
    end)
end)

describe("gsm8k load and prompt", function()
    local path = "evals/data/gsm8k/test.jsonl"

    it("loads the bundled test split with doc_id ids", function()
        local items = assert(gsm8k.load(path))
        assert.are.equal(1319, #items)
        assert.are.equal("0", items[1].id)
        assert.are.equal("1318", items[1319].id)
        assert.are.equal("Janet\u{2019}s ducks", items[1].question:sub(1, #"Janet\u{2019}s ducks"))
        assert.is_true(gsm8k.match("18", gsm8k.gold(items[1]), "strict-match"))
        assert.is_true(gsm8k.match(gsm8k.extract("so $18.", "flexible-extract"), gsm8k.gold(items[1]), "flexible-extract"))
    end)

    it("repeats items with suffixed ids", function()
        local items = assert(gsm8k.load(path, { repeats = 2 }))
        assert.are.equal(2638, #items)
        assert.are.equal("0#1", items[1].id)
        assert.are.equal("0#2", items[2].id)
        assert.are.equal(items[1].question, items[2].question)
        assert.are.equal(2, items[2].repeat_index)
    end)

    it("reports unreadable files and bad lines with file and line", function()
        local items, err = gsm8k.load("evals/data/gsm8k/missing.jsonl")
        assert.is_nil(items)
        assert.truthy(err:find("missing.jsonl", 1, true))
        local bad = tmpfile('{"question": "q", "answer": "#### 1"}\n\n{"question": "q2", "answer": \n')
        items, err = gsm8k.load(bad)
        assert.is_nil(items)
        assert.truthy(err:find(bad .. ":3: bad JSON", 1, true))
        local missing = tmpfile('{"question": "q"}\n')
        items, err = gsm8k.load(missing)
        assert.is_nil(items)
        assert.truthy(err:find(missing .. ":1: field \"answer\"", 1, true))
        local arr = tmpfile('[1, 2]\n')
        items, err = gsm8k.load(arr)
        assert.truthy(err:find(arr .. ":1: a JSON object expected", 1, true))
        os.remove(bad); os.remove(missing); os.remove(arr)
    end)

    it("skips blank lines without counting them as items", function()
        local p = tmpfile('\n{"question": "a", "answer": "#### 1"}\n\n{"question": "b", "answer": "#### 2"}\n')
        local items = assert(gsm8k.load(p))
        assert.are.equal(2, #items)
        assert.are.equal("1", items[2].id)
        os.remove(p)
    end)

    it("raises on argument errors", function()
        assert.has_error(function() gsm8k.load(42) end)
        assert.has_error(function() gsm8k.load(path, { repeats = 0 }) end)
        assert.has_error(function() gsm8k.extract("x", "no-such-mode") end)
        assert.has_error(function() gsm8k.prompt({ question = "q" }, { fewshot = 1 }) end)
    end)

    it("builds lm-eval's prompts: one user turn zero-shot, 'Question: ...\\nAnswer:' text with shots", function()
        local item = { question = "Q?", answer = "#### 1" }
        assert.are.same({ { role = "user", content = "Question: Q?\nAnswer:" } }, gsm8k.prompt(item))
        local shots = { { question = "q1", answer = "a1\n#### 1" }, { question = "q2", answer = "a2\n#### 2" } }
        -- Each shot: doc_to_text, target_delimiter " ", its whole answer, fewshot_delimiter "\n\n".
        local want = "Question: q1\nAnswer: a1\n#### 1\n\nQuestion: q2\nAnswer: a2\n#### 2\n\nQuestion: Q?\nAnswer:"
        assert.are.equal(want, gsm8k.prompt(item, { fewshot = 2, shots = shots }))
        assert.are.same({ { role = "user", content = want } },
            gsm8k.prompt(item, { fewshot = 2, shots = shots, format = "chat" }))
        assert.are.same({
            { role = "user", content = "Question: q1\nAnswer:" },
            { role = "assistant", content = "a1\n#### 1" },
            { role = "user", content = "Question: Q?\nAnswer:" },
        }, gsm8k.prompt(item, { fewshot = 1, shots = shots, format = "multiturn" }))
    end)

    it("gsm8k_cot: zero-shot 'Let's think step by step.', up to eight fixed exemplars", function()
        local item = { question = "Q?", answer = "#### 1" }
        assert.are.same({ { role = "user", content = "Q: Q?\nA: Let's think step by step." } }, gsm8k_cot.prompt(item))
        local text = gsm8k_cot.prompt(item, { fewshot = 8 })
        local first = gsm8k_cot.exemplars[1]
        assert.are.equal("Q: " .. first.question .. "\nA: " .. first.target .. "\n\n", text:sub(1, #first.question + #first.target + 9))
        assert.are.equal("\n\nQ: Q?\nA:", text:sub(-#"\n\nQ: Q?\nA:"))
        local _, blocks = text:gsub("\n\nQ: ", "")
        assert.are.equal(8, blocks)
        assert.has_error(function() gsm8k_cot.prompt(item, { fewshot = 9 }) end)
        assert.are.equal(8, #gsm8k_cot.exemplars)
        assert.are.equal("Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
            gsm8k_cot.exemplars[8].question)
    end)
end)

------------------------------------------------------------------------------
-- MMLU-Pro
------------------------------------------------------------------------------

describe("mmlu_pro custom-extract", function()
    -- lm-eval: "answer is \(?([ABCDEFGHIJ])\)?", first match; exact_match ignoring case and punctuation.
    local function ce(s) return mmlu_pro.extract(s, "custom-extract") end

    it("reads the first 'answer is (X)'", function()
        assert.are.equal("C", ce("I think B is wrong, the answer is (C)"))
        assert.are.equal("C", ce("The answer is C."))
        assert.are.equal("J", ce("answer is (J)"))
        assert.are.equal("C", ce("The answer is (C). Wait, the answer is (D)."))
        assert.is_true(mmlu_pro.match("C", "C", "custom-extract"))
        -- The metric ignores case even though the pattern never yields lower case.
        assert.is_true(mmlu_pro.match("c", "C", "custom-extract"))
    end)

    it("is case-sensitive and needs 'answer is'", function()
        assert.is_nil(ce("the answer is (c)"))
        assert.is_nil(ce("(B)"))
        assert.is_nil(ce("Answer: b"))
        assert.is_nil(ce("The answer is K"))
        -- "**" stands between "answer is " and the letter.
        assert.is_nil(ce("The answer is **(B)**"))
        assert.is_nil(ce(""))
        assert.is_false(mmlu_pro.match(nil, "B", "custom-extract"))
    end)
end)

describe("mmlu_pro tiger-lab", function()
    local item = { id = "q1", seed = 0, options = { "0", "1", "2", "3", "4", "5", "6", "7", "8", "9" } }
    local function tl(s) return mmlu_pro.extract(s, "tiger-lab", item) end

    it("stage 1: the first 'answer is (X)', after removing '**'", function()
        assert.are.same({ "C", "answer is" }, { tl("I think B is wrong, the answer is (C)") })
        assert.are.same({ "B", "answer is" }, { tl("The answer is **(B)**") })
    end)

    it("stage 2: '.*[aA]nswer:\\s*([A-J])' from the first line where it fits", function()
        assert.are.same({ "C", "Answer:" }, { tl("Answer: C") })
        assert.are.same({ "E", "Answer:" }, { tl("answer: E") })
        -- \s* crosses newlines.
        assert.are.same({ "D", "Answer:" }, { tl("Answer:\n\nD") })
        -- U+001C is whitespace to Python's \s.
        assert.are.same({ "F", "Answer:" }, { tl("Answer:\u{1c}F") })
        -- re.search finds the earliest start; `.*` does not cross lines, so line one answers.
        assert.are.same({ "A", "Answer:" }, { tl("Answer: A\nAnswer: B") })
        -- Within one line the greedy .* backs off to the last "Answer:".
        assert.are.same({ "B", "Answer:" }, { tl("Answer: A then Answer: B") })
    end)

    it("stage 3: the last standalone capital A-J", function()
        assert.are.same({ "B", "last letter" }, { tl("(B)") })
        assert.are.same({ "C", "last letter" }, { tl("I think B is wrong, C too") })
        -- The pronoun I is a standalone letter in A-J.
        assert.are.same({ "I", "last letter" }, { tl("I am not sure") })
        -- "Answer: b": stage 2 wants a capital; the "A" of "Answer" has a word character after it.
        assert.are.equal("random", select(2, tl("Answer: b")))
        -- é is a word character: "éB" holds no standalone B.
        assert.are.equal("random", select(2, tl("The option éB")))
        assert.are.same({ "B", "last letter" }, { tl("The option -B") })
    end)

    it("falls back to a letter drawn from (seed, id), within the item's options", function()
        local letter, stage = tl("")
        assert.are.equal("random", stage)
        assert.truthy(("ABCDEFGHIJ"):find(letter, 1, true))
        assert.are.equal(letter, (tl("no letters here")))
        local four = { id = "q2", seed = 0, options = { "w", "x", "y", "z" } }
        for seed = 0, 20 do
            four.seed = seed
            local l = mmlu_pro.extract("", "tiger-lab", four)
            assert.truthy(("ABCD"):find(l, 1, true))
        end
    end)

    it("compares letters as they are", function()
        assert.is_true(mmlu_pro.match("C", "C", "tiger-lab"))
        assert.is_false(mmlu_pro.match("c", "C", "tiger-lab"))
    end)
end)

describe("mmlu_pro load and prompt", function()
    local path = "evals/data/mmlu_pro/sample.jsonl"

    it("loads the sample", function()
        local items = assert(mmlu_pro.load(path))
        assert.are.equal(4, #items)
        assert.are.equal("900001", items[1].id)
        assert.are.equal("B", mmlu_pro.gold(items[1]))
        assert.are.equal("56", items[1].options[2])
        assert.are.equal(4, #items[3].options)
        assert.is_nil(items[1].permutation)
    end)

    it("shuffles deterministically from (seed, id, repeat), the gold letter following its option", function()
        local a = assert(mmlu_pro.load(path, { shuffle = true, seed = 7 }))
        local b = assert(mmlu_pro.load(path, { shuffle = true, seed = 7 }))
        local c = assert(mmlu_pro.load(path, { shuffle = true, seed = 8 }))
        local correct = { "56", "Nitrogen", "8", "Mitochondrion" }
        for k, item in ipairs(a) do
            assert.is_true(is_permutation(item.permutation, #item.options))
            assert.are.same(item.options, b[k].options)
            assert.are.equal(correct[k], item.options[item.answer_index + 1])
            assert.are.equal(("ABCDEFGHIJ"):sub(item.answer_index + 1, item.answer_index + 1), mmlu_pro.gold(item))
        end
        assert.are_not.same(a[1].options, c[1].options)
    end)

    it("repeats an item with different shuffles and suffixed ids", function()
        local items = assert(mmlu_pro.load(path, { shuffle = true, repeats = 3 }))
        assert.are.equal(12, #items)
        assert.are.same({ "900001#1", "900001#2", "900001#3" }, { items[1].id, items[2].id, items[3].id })
        assert.are_not.same(items[1].options, items[2].options)
        for k = 1, 3 do assert.are.equal("56", items[k].options[items[k].answer_index + 1]) end
    end)

    it("rejects rows whose answer does not name an option", function()
        local p = tmpfile('{"question": "q", "options": ["a", "b"], "answer": "C"}\n')
        local items, err = mmlu_pro.load(p)
        assert.is_nil(items)
        assert.truthy(err:find(p .. ":1: no answer", 1, true))
        os.remove(p)
    end)

    it("builds lm-eval's prompt: the category's description, then the question", function()
        local item = assert(mmlu_pro.load(path))[3]
        local want_desc = "The following are multiple choice questions (with answers) about computer science."
            .. " Think step by step and then finish your answer with \"the answer is (X)\" where X is the correct"
            .. " letter choice.\n"
        local want_q = "Question:\nSAMPLE (hand-written, not from MMLU-Pro): In computing, how many bits are in one"
            .. " byte?\nOptions:\nA. 4\nB. 16\nC. 8\nD. 2\nAnswer: Let's think step by step."
        assert.are.same({ { role = "system", content = want_desc }, { role = "user", content = want_q } },
            mmlu_pro.prompt(item))
        -- A shot: its question text, " ", its cot_content without "A: Let's think step by step. ", "\n\n".
        local shot = { question = "s?", options = { " x ", "y" }, cot_content = "A: Let's think step by step. Because. The answer is (A)." }
        local want_shot = "Question:\ns?\nOptions:\nA. x\nB. y\nAnswer: Let's think step by step. Because. The answer is (A).\n\n"
        assert.are.equal(want_desc .. want_shot .. want_q, mmlu_pro.prompt(item, { fewshot = 1, shots = { shot } }))
    end)

    it("builds evaluate_from_api.py's prompt with style tiger-lab", function()
        local item = { question = "q?", options = { "x", "y" }, category = "law" }
        local shot = { question = "s?", options = { "a" }, cot_content = "A: Let's think step by step. So (A)." }
        local want = "The following are multiple choice questions (with answers) about law. Think step by step and then"
            .. " output the answer in the format of \"The answer is (X)\" at the end.\n\n"
            .. "Question: s?\nOptions: A. a\nAnswer: Let's think step by step. So (A).\n\n"
            .. "Question: q?\nOptions: A. x\nB. y\nAnswer: Let's think step by step.\n\n"
        assert.are.same({ { role = "user", content = want } },
            mmlu_pro.prompt(item, { style = "tiger-lab", fewshot = 1, shots = { shot }, format = "chat" }))
        assert.are.equal(want, mmlu_pro.prompt(item, { style = "tiger-lab", fewshot = 1, shots = { shot } }))
    end)
end)

------------------------------------------------------------------------------
-- GPQA
------------------------------------------------------------------------------

describe("gpqa strict-match", function()
    -- "(?<=The answer is )(.*)(?=.)", first match, strip; exact_match ignoring case and punctuation.
    local function strict(s) return gpqa.extract(s, "strict-match") end

    it("takes the rest of the line less its last character", function()
        assert.are.equal("(C)", strict("The answer is (C)."))
        assert.is_true(gpqa.match("(C)", "(C)", "strict-match"))
        -- At the end of the text the lookahead needs the ")": "(C" is left, "c" after the rules.
        assert.are.equal("(C", strict("The answer is (C)"))
        assert.is_true(gpqa.match("(C", "(C)", "strict-match"))
        -- The line ends at "\n", which `.` does not match: again one character less.
        assert.are.equal("(B", strict("The answer is (B)\nThat's all"))
        -- A bare letter at the very end: the group backs off to "" so that the lookahead sees "C".
        assert.are.equal("", strict("The answer is C"))
        assert.is_false(gpqa.match("", "(C)", "strict-match"))
        assert.are.equal("(B) because it is large", strict("The answer is (B) because it is larger"))
        assert.is_false(gpqa.match("(B) because it is large", "(B)", "strict-match"))
        -- "B." and "b" also score: punctuation and case are ignored.
        assert.is_true(gpqa.match("B.", "(B)", "strict-match"))
    end)

    it("strips Unicode whitespace and counts characters, not bytes", function()
        assert.are.equal("(B)", strict("The answer is \u{3000}(B)."))
        assert.are.equal("B", strict("The answer is Bé"))
    end)

    it("sees invalid UTF-8 as U+FFFD, one per maximal subpart", function()
        -- "B" FF FE: two replacement characters, the last of which the lookahead keeps.
        assert.are.equal("B" .. FFFD, strict("The answer is B\255\254"))
        -- E2 82 is one truncated character, then "!" for the lookahead.
        assert.are.equal("B" .. FFFD, strict("The answer is B\226\130!"))
    end)

    it("is case-sensitive", function()
        assert.is_nil(strict("the answer is (B)."))
        assert.is_nil(strict("(B)"))
    end)
end)

describe("gpqa flexible-extract", function()
    -- multi_choice_regex: "(\([A-Z]\))" last match; else the choice texts (lower-cased, Unicode
    -- punctuation removed) in the equally treated response, last match, mapped to "(X)"; else
    -- ":[\s]*(A|B|C|D)" last match on the raw response, mapped to "(X)".
    local item = { choices = { "19.6 m", "9.8 m", "4.9 m", "39.2 m" }, answer = "(A)" }
    local function flex(s, it) return gpqa.extract(s, "flexible-extract", it or item) end

    it("takes the last '(X)'", function()
        assert.are.equal("(C)", flex("I think (B) is wrong, the answer is (C)"))
        assert.are.equal("(B)", flex("(B)"))
        -- Any capital: (E) is taken though there are four choices.
        assert.are.equal("(E)", flex("maybe (E)"))
        assert.is_false(gpqa.match("(E)", "(A)", "flexible-extract"))
    end)

    it("finds the last choice text quoted back", function()
        -- Filtered choices: "196 m", "98 m", "49 m", "392 m"; the response becomes "the distance is 196 m".
        assert.are.equal("(A)", flex("The distance is 19.6 m."))
        assert.is_true(gpqa.match("(A)", "(A)", "flexible-extract"))
        -- "392 m" matches first (leftmost), then "98 m": the last is (B).
        assert.are.equal("(B)", flex("It falls 39.2 m, not 9.8 m"))
        -- Substrings count: "198 m" contains "98 m".
        assert.are.equal("(B)", flex("It is 19.8 m"))
    end)

    it("lower-cases and removes punctuation the Unicode way", function()
        local greek = { choices = { "ΔH < 0", "ΔH > 0", "ΔS = 0", "None" } }
        -- str.lower() maps Δ to δ on both sides; "<" is a math symbol (Sm), not punctuation.
        assert.are.equal("(A)", flex("so we find δh < 0 here", greek))
        local quote = { choices = { "Hund\u{2019}s rule", "Pauli exclusion", "Aufbau", "None" } }
        -- U+2019 (Pf) and ASCII "'" (Po) are both removed: "hunds rule" on both sides.
        assert.are.equal("(A)", flex("By Hund's rule the spins align", quote))
    end)

    it("falls back to ': X'", function()
        assert.are.equal("(B)", flex("Answer: B"))
        assert.are.equal("(C)", flex("final choice:C"))
        -- Lower case is not one of the letters, and nothing else fits: lm-eval's "[invalid]".
        assert.is_nil(flex("Answer: b"))
        assert.is_nil(flex("I don't know"))
    end)

    it("needs the item", function()
        assert.has_error(function() gpqa.extract("x", "flexible-extract") end)
    end)
end)

describe("gpqa load and prompt", function()
    local path = "evals/data/gpqa/sample.jsonl"

    it("preprocesses and shuffles the answers from (seed, id)", function()
        local items = assert(gpqa.load(path))
        assert.are.equal(3, #items)
        assert.are.equal("sample-1", items[1].id)
        local answers = { "9.8 m", "39.2 m", "4.9 m", "19.6 m" } -- Incorrect 1..3, Correct
        for k = 1, 4 do assert.are.equal(answers[items[1].permutation[k]], items[1].choices[k]) end
        local at = items[1].answer:match("^%((%u)%)$"):byte() - 64
        assert.are.equal("19.6 m", items[1].choices[at])
        -- strip, " [title]" -> ". ", then "  " -> " ": "Kinetic  energy.  and momentum" -> single spaces.
        local found = false
        for _, c in ipairs(items[3].choices) do found = found or c == "Kinetic energy. and momentum" end
        assert.is_true(found)
        local again = assert(gpqa.load(path))
        assert.are.same(items[1].choices, again[1].choices)
        local other = assert(gpqa.load(path, { seed = 1 }))
        local differs = false
        for k = 1, 3 do differs = differs or table.concat(other[k].choices, "|") ~= table.concat(items[k].choices, "|") end
        assert.is_true(differs)
    end)

    it("repeats items with their own orders", function()
        local items = assert(gpqa.load(path, { repeats = 2 }))
        assert.are.equal(6, #items)
        assert.are.equal("sample-1#2", items[2].id)
        assert.is_true(is_permutation(items[2].permutation, 4))
    end)

    it("builds the cot_zeroshot prompt and the cot_n_shot text", function()
        local item = { question = "Q?", choices = { "a", "b", "c", "d" }, answer = "(B)" }
        assert.are.same({ { role = "user",
            content = "What is the correct answer to this question:Q?\nChoices:\n(A) a\n(B) b\n(C) c\n(D) d\nLet's think step by step: " } },
            gpqa.prompt(item))
        local shot = { question = "S?", choices = { "w", "x", "y", "z" }, answer = "(D)" }
        local want = "Here are some example questions from experts. Answer the final question yourself, following the"
            .. " format of the previous questions exactly.\n"
            .. "Question: S?\nChoices:\n(A) w\n(B) x\n(C) y\n(D) z\nLet's think step by step:  (D)\n\n"
            .. "Question: Q?\nChoices:\n(A) a\n(B) b\n(C) c\n(D) d\nLet's think step by step: "
        assert.are.equal(want, gpqa.prompt(item, { fewshot = 1, shots = { shot } }))
    end)
end)

------------------------------------------------------------------------------
-- MMMU-Pro
------------------------------------------------------------------------------

describe("mmmu_pro mmmu-pro parser", function()
    -- evaluate.py parse_multi_choice_response, options A..E.
    local item = { id = "m1", seed = 0, options = { "Blue", "Green", "Red", "Black", "Yellow" } }
    local function parse(s) return mmmu_pro.extract(s, "mmmu-pro", item) end

    it("takes a unique option letter after the last 'Answer:'", function()
        assert.are.same({ "C", "Answer:" }, { parse("The square is red.\nAnswer: C") })
        -- "B. Green" holds B and no other of A..E.
        assert.are.same({ "B", "Answer:" }, { parse("Answer: B. Green") })
        assert.are.same({ "C", "Answer:" }, { parse("Answer: A\nAnswer: C") })
    end)

    it("falls back to '(X)', then 'X ', then 'X.', the last one found winning", function()
        -- "C or D" holds two letters; then " Answer: C or D " has "C " and "D "; " D " is found later.
        assert.are.same({ "D", "X " }, { parse("Answer: C or D") })
        -- Both bracketed; "(C)" is found later.
        assert.are.same({ "C", "(X)" }, { parse("(B) is wrong; (C) is right") })
        -- The final "." is stripped before the search, then "(C)".
        assert.are.same({ "C", "(X)" }, { parse("The answer is (C).") })
        -- The article "A" followed by a space counts as the letter A.
        assert.are.same({ "A", "X " }, { parse("A red square") })
        -- No letter is followed by a space; "E." is there.
        assert.are.same({ "E", "X." }, { parse("Option E.x") })
    end)

    it("matches option text in responses of more than five words", function()
        -- No letter forms; eight words; "red" is the only option text in the lower-cased response.
        assert.are.same({ "C", "option text" }, { parse("I believe the colour shown is clearly red here") })
        -- Two words only: no text matching, so a random letter.
        assert.are.equal("random", select(2, parse("Answer: Red")))
    end)

    it("draws a seeded random letter when nothing matches", function()
        local letter, stage = parse("")
        assert.are.equal("random", stage)
        assert.truthy(("ABCDE"):find(letter, 1, true))
        assert.are.equal(letter, (parse("")))
    end)

    it("tiger-lab mode reads the 'Answer: X' line", function()
        assert.are.same({ "C", "Answer:" }, { mmmu_pro.extract("so red\nAnswer: C", "tiger-lab", item) })
        assert.is_true(mmmu_pro.match("C", "C", "tiger-lab"))
        assert.is_false(mmmu_pro.match("c", "C", "mmmu-pro"))
    end)
end)

describe("mmmu_pro load and prompt", function()
    local path = "evals/data/mmmu_pro/sample.jsonl"

    it("loads image paths relative to the data file", function()
        local items = assert(mmmu_pro.load(path))
        assert.are.equal(4, #items)
        assert.are.equal("standard", items[1].setting)
        assert.are.equal("evals/data/mmmu_pro/images/square.png", items[1].images[1])
        assert.are.equal("vision", items[4].setting)
        assert.are.equal("evals/data/mmmu_pro/images/bars.png", items[4].image)
        for _, item in ipairs(items) do
            local paths = { item.image }
            for _, p in pairs(item.images) do paths[#paths + 1] = p end
            for _, p in ipairs(paths) do
                local f = io.open(p, "rb")
                assert.truthy(f, p)
                f:close()
            end
        end
    end)

    it("writes the standard prompt with [image] tokens, images after the text in token order", function()
        local items = assert(mmmu_pro.load(path))
        local msgs = mmmu_pro.prompt(items[3])
        assert.are.equal(1, #msgs)
        assert.are.equal("user", msgs[1].role)
        local content = msgs[1].content
        assert.are.same({ type = "text",
            text = "SAMPLE (hand-written, not from MMMU-Pro): Which picture shows a square?\nA. [image]\nB. [image]\nC. Neither\n"
                .. mmmu_pro.prompts.cot.standard }, content[1])
        -- Options "<image 2>", "<image 1>": image_2 first.
        assert.are.same({ type = "image", path = "evals/data/mmmu_pro/images/bars.png" }, content[2])
        assert.are.same({ type = "image", path = "evals/data/mmmu_pro/images/square.png" }, content[3])
        assert.are.equal(3, #content)
        assert.are.equal(mmmu_pro.prompts.direct.standard, mmmu_pro.prompt(items[1], { method = "direct" })[1].content[1].text:match("[^\n]+$"))
    end)

    it("writes the vision prompt: the instruction and the screenshot", function()
        local items = assert(mmmu_pro.load(path))
        assert.are.same({ { role = "user", content = {
            { type = "text", text = mmmu_pro.prompts.cot.vision },
            { type = "image", path = "evals/data/mmmu_pro/images/bars.png" },
        } } }, mmmu_pro.prompt(items[4]))
    end)

    it("rejects image tokens that name no image, and few-shot requests", function()
        local p = tmpfile('{"id": "x", "question": "<image 3>?", "options": ["a", "b"], "answer": "A", "image_1": "i.png"}\n')
        local items, err = mmmu_pro.load(p)
        assert.is_nil(items)
        assert.truthy(err:find(p .. ":1: \"<image 3>\" names no image_3", 1, true))
        os.remove(p)
        local item = assert(mmmu_pro.load(path))[1]
        assert.has_error(function() mmmu_pro.prompt(item, { fewshot = 1 }) end)
    end)
end)

describe("task modules", function()
    it("all expose the same interface, the default mode first", function()
        for name, task in pairs({ gsm8k = gsm8k, gsm8k_cot = gsm8k_cot, mmlu_pro = mmlu_pro, gpqa = gpqa, mmmu_pro = mmmu_pro }) do
            assert.are.equal(name, task.name)
            for _, f in ipairs({ "load", "prompt", "extract", "match", "gold" }) do
                assert.are.equal("function", type(task[f]), name .. "." .. f)
            end
            assert.is_true(#task.modes >= 2)
        end
        assert.are.equal("strict-match", gsm8k.modes[1])
        assert.are.equal("custom-extract", mmlu_pro.modes[1])
        assert.are.equal("mmmu-pro", mmmu_pro.modes[1])
    end)
end)
