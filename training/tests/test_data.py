"""Generators: determinism, disjoint splits, correct answers (recomputed independently), the eval files."""

import filecmp
import hashlib
import json
import os
import random
import re
import tempfile
import unittest

import helpers  # noqa: F401  (sets sys.path)
import chat
import data as D
import png

N = 300  # items per family and split in these tests


def items(family, split, n=N, **opts):
    return [D.make_item(family, split, i, **opts) for i in range(n)]


def prompt_id(messages, tools, scene=None):
    """A prompt's identity: its rendering, and for a picture the picture itself."""
    text = chat.render_python(messages, tools)
    if scene is None:
        return text
    return text + "|" + hashlib.sha1(D.draw_scene(scene)).hexdigest()


def prompt_ids(xs):
    return {prompt_id(D.prompt_messages(it), it["tools"], it["meta"].get("scene")) for it in xs}


class TestDeterminism(unittest.TestCase):
    def test_same_seed_same_items(self):
        for fam in D.FAMILIES:
            a = [json.dumps(D.make_item(fam, "train", i), sort_keys=True) for i in range(20)]
            b = [json.dumps(D.make_item(fam, "train", i), sort_keys=True) for i in range(20)]
            self.assertEqual(a, b, fam)

    def test_other_seed_other_items(self):
        for fam in D.FAMILIES:
            a = [D.make_item(fam, "train", i, seed=1)["key"] for i in range(20)]
            b = [D.make_item(fam, "train", i, seed=2)["key"] for i in range(20)]
            self.assertNotEqual(a, b, fam)

    def test_text_is_ascii_and_marker_free(self):
        for fam in D.FAMILIES:
            for it in items(fam, "train", 60) + items(fam, "heldout", 20):
                D.check_markers(it)
                text, _ = D.training_text(it, chat.render_python)
                self.assertTrue(text.isascii(), it["id"])


class TestSplits(unittest.TestCase):
    def test_disjoint_by_construction(self):
        for fam in D.FAMILIES:
            tr, ho = items(fam, "train"), items(fam, "heldout", 100)
            self.assertTrue(all(not D.in_heldout(fam, it["key"]) for it in tr), fam)
            self.assertTrue(all(D.in_heldout(fam, it["key"]) for it in ho), fam)
            self.assertFalse({it["key"] for it in tr} & {it["key"] for it in ho}, fam)
            common = prompt_ids(tr) & prompt_ids(ho)
            self.assertFalse(common, f"{fam}: {len(common)} held-out prompts also in train, e.g. {sorted(common)[:1]}")

    def test_committed_eval_files_are_the_generators_and_not_in_train(self):
        d = os.path.join(helpers.ROOT, "evals", "data", "tiny")
        with tempfile.TemporaryDirectory() as td:
            counts = D.write_evals(td, 300, retrieval_n=200)
            for fam in D.FAMILIES:
                self.assertTrue(filecmp.cmp(os.path.join(td, f"{fam}.jsonl"), os.path.join(d, f"{fam}.jsonl"),
                                            shallow=False), f"evals/data/tiny/{fam}.jsonl is stale: rerun "
                                "python3 training/data.py evals")
            for fn in sorted(os.listdir(os.path.join(td, "images"))):
                self.assertTrue(filecmp.cmp(os.path.join(td, "images", fn), os.path.join(d, "images", fn), shallow=False), fn)
        self.assertEqual(counts["retrieval"], 200)
        for fam in D.FAMILIES:
            with open(os.path.join(d, f"{fam}.jsonl")) as f:
                recs = [json.loads(line) for line in f]
            self.assertGreaterEqual(len(recs), 200)
            for r in recs:
                self.assertTrue({"id", "family", "messages", "answer"} <= set(r), r["id"])
            train_prompts = prompt_ids(items(fam, "train", 1000))
            held = D.heldout_items(fam, len(recs))
            for r, it in zip(recs, held):
                self.assertEqual(r["messages"][0]["content"] if fam != "vision" else r["messages"][0]["content"][1],
                                 it["messages"][0]["content"] if fam != "vision" else it["messages"][0]["content"][1])
                pid = prompt_id(D.prompt_messages(it), it["tools"], it["meta"].get("scene"))
                self.assertNotIn(pid, train_prompts, r["id"])


class TestArith(unittest.TestCase):
    LINE = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$")

    def check(self, it):
        sol = it["messages"][-1]["content"]
        lines = sol.split("\n")
        self.assertTrue(lines[-1].startswith("#### "), sol)
        self.assertEqual(lines[-1][5:], it["answer"])
        prev = None
        for ln in lines[:-1]:
            m = self.LINE.match(ln)
            self.assertIsNotNone(m, ln)
            a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
            want = {"+": a + b, "-": a - b, "*": a * b}.get(op)
            if op == "/":
                self.assertEqual(a % b, 0, ln)
                want = a // b
            self.assertEqual(c, want, ln)
            for v in (a, b, c):
                self.assertTrue(0 <= v <= 999, ln)
            if prev is not None:
                self.assertEqual(a, prev, f"step does not continue from the previous result: {sol}")
            prev = c
        self.assertEqual(str(prev), it["answer"])
        self.assertTrue(1 <= len(lines) - 1 <= 3)
        # every operand of the solution is a number written in the problem (in order of appearance)
        nums = [int(x) for x in re.findall(r"\d+", it["messages"][0]["content"])]
        operands = [int(self.LINE.match(lines[0])[1])] + [int(self.LINE.match(ln)[3]) for ln in lines[:-1]]
        pos = 0
        for v in operands:
            if v in nums[pos:]:
                pos = nums.index(v, pos) + 1
            else:  # divisions written as words ("one third", "3 friends" with 4 equal shares)
                self.assertTrue(re.search(r"half|third|quarter|fifth|sixth|seventh|eighth|ninth|tenth|friends share",
                                          it["messages"][0]["content"]), (v, it["messages"][0]["content"]))

    def test_answers(self):
        for it in items("arith", "train", 800) + items("arith", "heldout", 200):
            self.check(it)

    def test_step_counts_vary(self):
        counts = {len(it["meta"]["steps"]) for it in items("arith", "train", 200)}
        self.assertEqual(counts, {1, 2, 3})


class TestMC(unittest.TestCase):
    def test_answers(self):
        caps = {c[0]: c for c in D.COUNTRIES}
        beasts = {c[0]: c for c in D.CREATURES}
        drills = 0
        for it in items("mc", "train", 600) + items("mc", "heldout", 200):
            user = it["messages"][0]["content"]
            opts = re.findall(r"^([A-J])\. (.*)$", user, re.M)
            self.assertTrue(4 <= len(opts) <= 10, user)
            self.assertEqual([o[0] for o in opts], list(D.LETTERS[:len(opts)]))
            self.assertEqual(len({o[1] for o in opts}), len(opts), user)
            if it["meta"]["kind"] == "letter-drill":  # each asked value with the letter that holds it in the prompt
                self.assertEqual(it["split"], "train")
                asked = it["meta"]["asked"]
                self.assertTrue(user.endswith("Which options hold " + ", ".join(asked[:-1]) + f" and {asked[-1]}?"))
                where = {v: k for k, v in opts}
                self.assertEqual(it["answer"], "\n".join(f"{v} is option {where[v]}." for v in asked))
                drills += 1
                continue
            self.assertEqual(it["messages"][-1]["content"], f"Answer: {it['answer']}")
            chosen = dict(opts)[it["answer"]]
            q = next(ln for ln in user.split("\n") if ln.endswith("?"))
            q = q[len("Question: "):] if q.startswith("Question: ") else q
            vals = [o[1] for o in opts]
            if "largest" in q:
                self.assertEqual(int(chosen), max(map(int, vals)))
            elif "smallest" in q:
                self.assertEqual(int(chosen), min(map(int, vals)))
            elif "is even" in q:
                self.assertEqual([v for v in vals if int(v) % 2 == 0], [chosen])
            elif "is odd" in q:
                self.assertEqual([v for v in vals if int(v) % 2 == 1], [chosen])
            elif "multiple of" in q:
                m = int(re.search(r"multiple of (\d+)", q)[1])
                self.assertEqual([v for v in vals if int(v) % m == 0], [chosen])
            elif re.search(r"How many (\w+) are in (\d+) (\w+)\?|(\d+) (\w+) is how many (\w+)\?", q):
                m = re.search(r"How many (\w+) are in (\d+) (\w+)\?", q)
                small, x, big = (m[1], int(m[2]), m[3]) if m else \
                    (lambda r: (r[3], int(r[1]), r[2]))(re.search(r"(\d+) (\w+) is how many (\w+)\?", q))
                f = next(f for b, s, f in D.CONVERSIONS if b == big and s == small)
                self.assertEqual(int(chosen), x * f)
            elif q.startswith("What is the capital of"):
                self.assertEqual(chosen, caps[q[len("What is the capital of "):-1]][1])
            elif q.startswith("Which language is spoken in"):
                self.assertEqual(chosen, caps[q[len("Which language is spoken in "):-1]][2])
            elif q.startswith("What is the currency of"):
                self.assertEqual(chosen, caps[q[len("What is the currency of "):-1]][3])
            elif q.startswith("Which country has the capital"):
                self.assertEqual(caps[chosen][1], q[len("Which country has the capital "):-1])
            elif q.startswith("What colour is the"):
                self.assertEqual(chosen, beasts[q[len("What colour is the "):-1]][1])
            elif q.startswith("What does the"):
                self.assertEqual(chosen, beasts[q[len("What does the "):-len(" eat?")]][2])
            elif q.startswith("Where does the"):
                self.assertEqual(chosen, beasts[q[len("Where does the "):-len(" live?")]][3])
            else:
                self.fail(f"question not covered by the test: {q}")
        self.assertGreater(drills, 60)  # about a quarter of the 600 training items


class TestRetrieval(unittest.TestCase):
    def test_answers(self):
        its = items("retrieval", "train", 100) + [D.make_item("retrieval", "heldout", i, tokens=t)
                                                for i, t in enumerate([256, 512, 1024, 2048, 4096] * 4)]
        for it in its:
            user = it["messages"][0]["content"]
            pairs = re.findall(r"(?:The code of|The code for|Code of) ([A-Z]{3}-\d\d)(?: is|:) (\d{4})\.", user)
            self.assertEqual(len(pairs), it["meta"]["lines"])
            keys = [k for k, _ in pairs]
            self.assertEqual(len(set(keys)), len(keys))
            q = user.rsplit("\n", 1)[1]
            asked = re.findall(r"[A-Z]{3}-\d\d", q)
            self.assertEqual(len(asked), len(it["meta"]["positions"]))
            if it["meta"]["form"] == "drill":
                self.assertEqual("\n".join(f"{k}: {dict(pairs)[k]}" for k in asked), it["answer"])
            else:
                self.assertEqual(", ".join(dict(pairs)[k] for k in asked), it["answer"])
            self.assertEqual(it["messages"][-1]["content"], it["answer"])
            if it["split"] == "heldout":
                self.assertEqual(len(asked), 1)
        forms = [it["meta"]["form"] for it in its if it["split"] == "train"]
        self.assertTrue({"one", "some", "drill"} <= set(forms), forms)

    def test_one_question_training_items(self):
        """train.py --retrieval-one-question: every training item asks one code, as held-out items do."""
        rng = random.Random(7)
        its = [D.gen_retrieval(rng, "train", max_tokens=256, one_question=True) for _ in range(200)]
        self.assertEqual({it["meta"]["form"] for it in its}, {"one"})
        for it in its:
            user = it["messages"][0]["content"]
            pairs = dict(re.findall(r"(?:The code of|The code for|Code of) ([A-Z]{3}-\d\d)(?: is|:) (\d{4})\.", user))
            self.assertEqual(it["answer"], pairs[it["meta"]["query"]])
            self.assertLessEqual(it["meta"]["target_tokens"], 256)

    def test_heldout_lengths(self):
        recs = D.heldout_items("retrieval", 10)
        self.assertEqual([r["meta"]["target_tokens"] for r in recs], list(D.RETRIEVAL_HELDOUT_LENGTHS) * 2)


def parse_tool_calls(text):
    """Our own reading of the template's tool-call format."""
    out = []
    for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S):
        name = body.split("<arg_key>")[0]
        out.append((name, dict(re.findall(r"<arg_key>(.*?)</arg_key><arg_value>(.*?)</arg_value>", body, re.S))))
    return out


class TestTools(unittest.TestCase):
    def test_calls_parse_back(self):
        for it in items("tools", "train", 400) + items("tools", "heldout", 100):
            text, spans = D.training_text(it, chat.render_python)
            first = text[spans[0][0]:spans[0][1]]
            names = [t["function"]["name"] for t in it["tools"]]
            if it["meta"]["mode"] == "none":
                self.assertEqual(parse_tool_calls(first), [])
                self.assertIn("</think>", first)
                continue
            call = it["messages"][1]["tool_calls"][0]["function"]
            self.assertIn(call["name"], names)
            self.assertTrue(first.endswith("</tool_call><|observation|>"), first)
            got = parse_tool_calls(first)
            want = [(call["name"], {k: v if isinstance(v, str) else json.dumps(v) for k, v in call["arguments"].items()})]
            self.assertEqual(got, want)
            schema = next(t["function"]["parameters"] for t in it["tools"] if t["function"]["name"] == call["name"])
            self.assertEqual(sorted(call["arguments"]), sorted(schema["required"]))
            for k, v in call["arguments"].items():
                self.assertEqual(schema["properties"][k]["type"], "integer" if isinstance(v, int) else "string")
            if it["meta"]["mode"] == "answer":
                self.assertEqual(len(spans), 2)
                self.assertIn(it["meta"]["tool_result"], text)

    @unittest.skipUnless(helpers.LUAJIT and helpers.has_cjson(), "needs luajit with lua-cjson")
    def test_lua_parser_reads_the_calls(self):
        cases = []
        for it in items("tools", "train", 80):
            if it["meta"]["mode"] == "none":
                continue
            text, spans = D.training_text(it, chat.render_python)
            out = text[spans[0][0]:spans[0][1]].replace("<|observation|>", "")
            cases.append(dict(text=out, tools=it["tools"], want=it["messages"][1]["tool_calls"][0]["function"]))
        got = helpers.lua_json("training/render_chat.lua", [dict(parse=c["text"], tools=c["tools"]) for c in cases])
        for c, g in zip(cases, got):
            self.assertEqual(len(g["tool_calls"]), 1, c["text"])
            fn = g["tool_calls"][0]["function"]
            self.assertEqual(fn["name"], c["want"]["name"])
            self.assertEqual(json.loads(fn["arguments"]), c["want"]["arguments"])


class TestVision(unittest.TestCase):
    def test_png_round_trip_and_answers(self):
        for it in items("vision", "train", 200) + items("vision", "heldout", 60):
            scene = it["meta"]["scene"]
            rgb = D.draw_scene(scene)
            w, h, back = png.decode(png.encode_rgb(D.IMAGE_SIZE, D.IMAGE_SIZE, rgb))
            self.assertEqual((w, h, back), (D.IMAGE_SIZE, D.IMAGE_SIZE, rgb))
            objs = scene["objects"]
            kind = it["meta"]["kind"]

            def pixel(ob):
                r, c = divmod(ob["cell"], 4)
                x, y = c * D.CELL + D.CELL // 2 + ob["dx"], r * D.CELL + D.CELL // 2 + ob["dy"] + 2
                i = (y * D.IMAGE_SIZE + x) * 3
                return tuple(rgb[i:i + 3])

            for ob in objs:  # every object is visible in its colour, inside its own cell
                self.assertEqual(pixel(ob), D.COLOURS[ob["colour"]], it["id"])
            self.assertEqual(len({ob["cell"] for ob in objs}), len(objs))
            if kind == "count":
                self.assertEqual(it["answer"], str(len(objs)))
                self.assertTrue(1 <= len(objs) <= 5)
            elif kind == "colour":
                self.assertEqual(it["answer"], objs[0]["colour"])
            elif kind == "shape":
                self.assertEqual(it["answer"], objs[0]["shape"])
            else:
                r, c = divmod(objs[0]["cell"], 4)
                self.assertEqual(it["answer"], ("top" if r < 2 else "bottom") + " " + ("left" if c < 2 else "right"))

    def test_eval_pictures_decode(self):
        d = os.path.join(helpers.ROOT, "evals", "data", "tiny")
        with open(os.path.join(d, "vision.jsonl")) as f:
            recs = [json.loads(line) for line in f][:50]
        for r in recs:
            w, h, rgb = png.read(os.path.join(d, r["images"][0]))
            self.assertEqual((w, h), (D.IMAGE_SIZE, D.IMAGE_SIZE))
            self.assertEqual(r["messages"][0]["content"][0]["image_url"]["url"], r["images"][0])

    @unittest.skipUnless(helpers.LUAJIT and helpers.lib_path(), "needs luajit and a libglm53 build")
    def test_engine_decodes_and_patchifies_the_pictures(self):
        """glm53's C decoder + preprocessing gives the processor's layout: grid (1, 8, 8), 64 rows of 1176 values,
        each (x - 255 mean) / (255 std) of the PNG's pixel in (channel, frame, y, x) order, rows by 2x2 block."""
        import struct

        mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
        f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]  # noqa: E731
        it = D.make_item("vision", "train", 3)
        rgb = D.draw_scene(it["meta"]["scene"])
        with tempfile.TemporaryDirectory() as td:
            p = os.path.join(td, "a.png")
            png.write_rgb(p, D.IMAGE_SIZE, D.IMAGE_SIZE, rgb)
            r = helpers.run_lua("scripts/vision_inputs.lua", "--image", p, "--out", os.path.join(td, "px.npy"),
                                "--grid", os.path.join(td, "g.npy"))
            self.assertEqual(r.returncode, 0, r.stderr)
            gshape, grid = helpers.read_npy_f32(os.path.join(td, "g.npy"))
            self.assertEqual(list(grid), [1, 8, 8])
            shape, px = helpers.read_npy_f32(os.path.join(td, "px.npy"))
        self.assertEqual(shape, (64, 1176))
        W = D.IMAGE_SIZE
        for row in (0, 1, 2, 3, 4, 17, 63):
            blk, sub = divmod(row, 4)
            by, bx = divmod(blk, 4)
            py, pxx = (by * 2 + sub // 2) * 14, (bx * 2 + sub % 2) * 14
            for j in (0, 13, 196, 200, 391, 392, 700, 1175):
                c, rest = divmod(j, 392)
                _, rest = divmod(rest, 196)  # the frame: a still image repeats it
                y, x = divmod(rest, 14)
                v = rgb[((py + y) * W + pxx + x) * 3 + c]
                want = f32(f32(v - f32(255 * mean[c])) / f32(255 * std[c]))
                self.assertAlmostEqual(px[row * 1176 + j], want, delta=1e-5, msg=(row, j))


if __name__ == "__main__":
    unittest.main()
