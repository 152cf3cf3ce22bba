"""The tiny model's tokenizer: deterministic training, GLM-5.3's layout, glm53's C tokenizer loads it and round-trips
the corpus, and (where the Node binding of HF tokenizers is installed) gives HF's ids."""

import filecmp
import json
import os
import subprocess
import tempfile
import unittest

import helpers
import chat
import data as D
import model_config as mc

TOK = os.path.join(helpers.TRAINING, "tokenizer", "tokenizer.json")
GLM_ADDED = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
             "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
             "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>",
             "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>", "<think>", "</think>",
             "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>",
             "<arg_value>", "</arg_value>", "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>"]


def corpus_sample(n=40):
    texts = []
    for fam in D.FAMILIES:
        for split in ("train", "heldout"):
            for i in range(n):
                opts = {"tokens": 400} if fam == "retrieval" else {}
                it = D.make_item(fam, split, i, **opts)
                texts.append(D.training_text(it, chat.render_python)[0])
                texts.append(chat.render_python(D.prompt_messages(it), it["tools"], True))
    return texts


needs_lua = unittest.skipUnless(helpers.LUAJIT and helpers.has_cjson(), "needs luajit with lua-cjson")
needs_lib = unittest.skipUnless(helpers.LUAJIT and helpers.lib_path(), "needs luajit and a libglm53 build")


class TestTraining(unittest.TestCase):
    @needs_lua
    def test_make_tokenizer_reproduces_the_committed_files(self):
        with tempfile.TemporaryDirectory() as td:
            r = subprocess.run([os.path.join(helpers.TRAINING, "make_tokenizer.sh"), td], capture_output=True,
                               text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            for fn in ("tokenizer.json", "tokenizer_config.json"):
                self.assertTrue(filecmp.cmp(os.path.join(td, fn), os.path.join(helpers.TRAINING, "tokenizer", fn),
                                            shallow=False), f"training/tokenizer/{fn} differs from a fresh run")

    @needs_lua
    def test_default_run_still_makes_the_demo_tokenizer(self):
        with tempfile.TemporaryDirectory() as td:
            out = os.path.join(td, "t.json")
            r = helpers.run_lua("scripts/train_tiny_tokenizer.lua", os.path.join("scripts", "data", "tiny_tokenizer_train.txt"),
                                out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(filecmp.cmp(out, os.path.join(helpers.ROOT, "models", "tiny", "tokenizer.json"), shallow=False))


class TestLayout(unittest.TestCase):
    def test_glm_layout(self):
        with open(TOK) as f:
            tj = json.load(f)
        vocab, merges = tj["model"]["vocab"], tj["model"]["merges"]
        n_base = 256 + len(merges)
        self.assertEqual(len(vocab), n_base)
        self.assertEqual(sorted(vocab.values()), list(range(n_base)))
        self.assertEqual([a["content"] for a in tj["added_tokens"]], GLM_ADDED)
        self.assertEqual([a["id"] for a in tj["added_tokens"]], list(range(n_base, n_base + len(GLM_ADDED))))
        self.assertEqual([a["special"] for a in tj["added_tokens"]], [True] * 18 + [False] * 18)
        self.assertTrue(tj["model"]["ignore_merges"])
        self.assertEqual(tj["pre_tokenizer"]["pretokenizers"][0]["behavior"], "Isolated")
        # digits stay single tokens: no merge joins two digit strings
        self.assertFalse([m for m in merges if m[0].isdigit() and m[1].isdigit()])
        ids = mc.tokenizer_ids()
        self.assertEqual(ids["n_vocab"], n_base + 36)
        self.assertLessEqual(ids["n_vocab"], mc.vocab_size())
        top = mc.top_config()
        self.assertEqual(top["image_token_id"], n_base + GLM_ADDED.index("<|image|>"))
        self.assertEqual(mc.eos_ids(), [n_base, n_base + 7, n_base + 9])
        with open(os.path.join(helpers.TRAINING, "tokenizer", "tokenizer_config.json")) as f:
            cfg = json.load(f)
        self.assertEqual(cfg["eos_token"], "<|endoftext|>")
        self.assertEqual({int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()},
                         {a["id"]: a["content"] for a in tj["added_tokens"]})


class TestEngineTokenizer(unittest.TestCase):
    @needs_lib
    def test_loads_and_round_trips_the_corpus(self):
        texts = corpus_sample()
        ids = helpers.tokenize(TOK, texts)
        self.assertEqual(len(ids), len(texts))
        n_vocab = mc.tokenizer_ids()["n_vocab"]
        for t, x in zip(texts, ids):
            self.assertTrue(all(0 <= i < n_vocab for i in x))
        back = helpers.tokenize(TOK, ids, decode=True)
        for t, b in zip(texts, back):
            self.assertEqual(t, b)
        added = mc.tokenizer_ids()["added"]
        for t, x in zip(texts, ids):  # the chat's special strings are single added tokens
            self.assertEqual(x[:3], [added["[gMASK]"], added["<sop>"], added["<|system|>"]])
            self.assertEqual(x.count(added["<|assistant|>"]), t.count("<|assistant|>"))

    @needs_lib
    @unittest.skipUnless(helpers.node_tokenizers(), "needs the Node binding of HF tokenizers in .cache/node "
                         "(npm install --prefix .cache/node tokenizers@0.23.2)")
    def test_ids_equal_hf_tokenizers(self):
        texts = corpus_sample(20)
        ours = helpers.tokenize(TOK, texts)
        script = ("const tk = require('tokenizers'); const fs = require('fs');"
                  "(async () => { const t = tk.Tokenizer.fromFile(process.argv[1]);"
                  "const xs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')); const out = [];"
                  "for (const s of xs) out.push((await t.encode(s, null, {addSpecialTokens: false})).getIds());"
                  "fs.writeFileSync(process.argv[3], JSON.stringify(out)); })();")
        with tempfile.TemporaryDirectory() as td:
            inp, out = os.path.join(td, "in.json"), os.path.join(td, "out.json")
            with open(inp, "w") as f:
                json.dump(texts, f)
            r = subprocess.run(["node", "-e", script, TOK, inp, out], capture_output=True, text=True,
                               env=dict(os.environ, NODE_PATH=helpers.node_tokenizers()), timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                hf = json.load(f)
        for i, (a, b) in enumerate(zip(ours, hf)):
            self.assertEqual(a, b, f"text {i}")


if __name__ == "__main__":
    unittest.main()
