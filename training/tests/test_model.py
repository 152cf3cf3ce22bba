"""The model configuration, its sizes, the dry run, and glm53 loading a checkpoint of exactly this configuration."""

import json
import os
import py_compile
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import helpers
import check_hf
import model_config as mc
import png
import st_io
import svgplot
import data as D

mf = mc.mf


def write_npy_i32(path, values):
    import array

    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (-(len(header) + 11) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        a = array.array("i", values)
        if sys.byteorder != "little":
            a.byteswap()
        f.write(a.tobytes())


class TestConfig(unittest.TestCase):
    def test_glm53_flash_features(self):
        s = mc.spec("full")
        t = s["text"]
        self.assertEqual(mf.validate_spec(s), [])
        self.assertEqual(t["hc_mult"], 4)
        self.assertEqual(t["layer_types"], [mc.KDA, mc.KDA, mc.KDA, mc.DSA] * 2)
        self.assertEqual(t["mlp_layer_types"][0], "dense")
        self.assertTrue(all(x == "sparse" for x in t["mlp_layer_types"][1:]))
        self.assertGreaterEqual(t["n_routed_experts"], 16)
        self.assertGreaterEqual(t["num_experts_per_tok"], 2)
        self.assertEqual(t["n_shared_experts"], 1)
        self.assertEqual((t["index_topk"], t["index_kpool"]), (256, 4))
        self.assertEqual(t["linear_lower_bound"], -5.0)
        self.assertEqual(s["mtp_layers"], 1)
        self.assertEqual(s["vision"]["out_hidden_size"], t["hidden_size"])
        self.assertEqual(t["qk_rope_head_dim"], 0)

    def test_parameter_formula_equals_the_tensor_listing(self):
        for size in ("full", "smoke"):
            s = mc.spec(size)
            self.assertEqual(mc.count_params(s)["total"], mf.estimate(s)["params"], size)

    def test_fp8_set(self):
        import make_fp8

        s = mc.spec("full")
        cfg = dict(text_config=dict(s["text"], num_nextn_predict_layers=1))
        names = make_fp8.fp8_names(cfg)
        L = s["text"]["num_hidden_layers"]
        self.assertEqual(len(names), 7 * (16 + 1) * 3 + 3 + 3 * 4 + (16 + 1) * 3)
        self.assertIn(f"{mf.PREFIX}layers.{L}.self_attn.q_a_proj.weight", names)
        self.assertIn(f"{mf.PREFIX}layers.0.mlp.gate_proj.weight", names)
        self.assertFalse([n for n in names if "indexer" in n or "kv_b_proj" in n or "gate.weight" in n])

    def test_checkpoint_size(self):
        s = mc.spec("full")
        self.assertLessEqual(mc.checkpoint_bytes(s), mc.MAX_CHECKPOINT_BYTES)
        # the MTP layer is in the listing as layer num_hidden_layers, without hc_* tensors
        L = s["text"]["num_hidden_layers"]
        names = mf.expected_tensors(s)
        mtp = [n for n in names if n.startswith(f"{mf.PREFIX}layers.{L}.")]
        for want in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
                     "self_attn.indexer.wq_b.weight", "mlp.experts.15.down_proj.weight"):
            self.assertIn(f"{mf.PREFIX}layers.{L}.{want}", mtp)
        self.assertFalse([n for n in mtp if ".hc_" in n])


class TestScripts(unittest.TestCase):
    def test_py_compile(self):
        for d in (helpers.TRAINING, helpers.TESTS):
            for fn in sorted(os.listdir(d)):
                if fn.endswith(".py"):
                    py_compile.compile(os.path.join(d, fn), doraise=True)

    def test_shell_scripts_parse(self):
        for fn in ("h200.sh", "make_tokenizer.sh"):
            r = subprocess.run(["bash", "-n", os.path.join(helpers.TRAINING, fn)], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_dry_run_imports_nothing_heavy(self):
        with tempfile.TemporaryDirectory() as td:
            for mod in ("torch", "transformers", "numpy", "safetensors", "tokenizers"):
                os.makedirs(os.path.join(td, mod))
                with open(os.path.join(td, mod, "__init__.py"), "w") as f:
                    f.write(f"raise ImportError('the dry run imported {mod}')\n")
            env = dict(os.environ, PYTHONPATH=td)
            for extra in ([], ["--smoke"]):
                r = subprocess.run([sys.executable, os.path.join(helpers.TRAINING, "train.py"), "--dry-run", *extra],
                                   capture_output=True, text=True, env=env, timeout=300)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("BF16 checkpoint", r.stdout)
                self.assertIn("parameters", r.stdout)
                self.assertIn("within the 24 MB limit", r.stdout)

    def test_svg_is_well_formed(self):
        s = svgplot.loss_svg([("a", [(i, 3.0 / (i + 1)) for i in range(30)], False), ("v", [(5, 0.5), (9, None)], True)],
                             "t & <x>")
        root = ET.fromstring(s)
        self.assertTrue(root.tag.endswith("svg"))

    def test_check_hf_scoring(self):
        rec = dict(family="arith", answer="12")
        self.assertTrue(check_hf.score(rec, "</think>3 * 4 = 12\n#### 12"))
        self.assertFalse(check_hf.score(rec, "</think>#### 13"))
        self.assertTrue(check_hf.score(dict(family="mc", answer="C"), "</think>Answer: C"))
        self.assertTrue(check_hf.score(dict(family="retrieval", answer="4821"), "</think>4821"))
        self.assertTrue(check_hf.score(dict(family="vision", answer="top left"), "</think>top left"))
        call = dict(family="tools", answer_type="tool_call", answer=dict(name="set_timer", arguments={"minutes": 5}))
        self.assertTrue(check_hf.score(call, "r</think><tool_call>set_timer<arg_key>minutes</arg_key><arg_value>5"
                                             "</arg_value></tool_call>"))
        self.assertFalse(check_hf.score(call, "r</think><tool_call>get_time</tool_call>"))
        lo, hi = check_hf.wilson(8, 10)
        self.assertTrue(0.4 < lo < 0.8 < hi < 1.0)
        self.assertEqual(check_hf.positions_of(100), list(range(100)))
        p = check_hf.positions_of(1000)
        self.assertLessEqual(len(p), 100)
        self.assertEqual(p[-32:], list(range(968, 1000)))
        self.assertEqual(len(check_hf.pick_prompts()), 8)


@unittest.skipUnless(helpers.LUAJIT and helpers.lib_path(), "needs luajit and a libglm53 build")
class TestEngineLoadsThisConfiguration(unittest.TestCase):
    """A random-weight checkpoint with the exact tensor list and config: glm53 loads it and runs a text and an image
    prompt (the trained export has the same layout; the export itself is checked on the GPU machine)."""

    @classmethod
    def setUpClass(cls):
        import random_checkpoint

        cls.td = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.td.name, "rnd")
        random_checkpoint.write(cls.dir, "full", seed=1)

    @classmethod
    def tearDownClass(cls):
        cls.td.cleanup()

    def logits(self, tokens, *extra):
        tok = os.path.join(self.td.name, "t.npy")
        out = os.path.join(self.td.name, "o.npy")
        write_npy_i32(tok, tokens)
        r = helpers.run_lua("scripts/logits.lua", "--model", self.dir, "--tokens", tok, "--out", out, "--threads", "2",
                            *extra)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        shape, vals = helpers.read_npy_f32(out)
        return shape, vals

    def test_text_prompt_beyond_index_topk(self):
        it = D.make_item("retrieval", "heldout", 0, tokens=512)
        text = D.chat.render_python(D.prompt_messages(it), None, True)
        ids = helpers.tokenize(os.path.join(self.dir, "tokenizer.json"), [text])[0]
        shape, vals = self.logits(ids)
        self.assertEqual(shape, (len(ids), mc.vocab_size()))
        self.assertTrue(all(v == v and abs(v) < 1e30 for v in vals[-mc.vocab_size():]))

    def test_image_prompt(self):
        it = D.make_item("vision", "heldout", 0)
        text = D.chat.render_python(D.prompt_messages(it), None, True)
        ids = helpers.tokenize(os.path.join(self.dir, "tokenizer.json"), [text])[0]
        img = mc.top_config()["image_token_id"]
        j = ids.index(img)
        ids = ids[:j] + [img] * 16 + ids[j + 1:]
        p = os.path.join(self.td.name, "x.png")
        png.write_rgb(p, D.IMAGE_SIZE, D.IMAGE_SIZE, D.draw_scene(it["meta"]["scene"]))
        shape, vals = self.logits(ids, "--image", p)
        self.assertEqual(shape, (len(ids), mc.vocab_size()))

    def test_fp8_copy_loads(self):
        """training/make_fp8.py (numpy: run with an interpreter that has it) -> glm53 loads and runs the FP8 copy."""
        py = next((p for p in (sys.executable, "/usr/bin/python3") if os.path.exists(p) and subprocess.run(
            [p, "-c", "import numpy"], capture_output=True).returncode == 0), None)
        if py is None:
            self.skipTest("no python with numpy")
        fp8 = os.path.join(self.td.name, "fp8")
        r = subprocess.run([py, os.path.join(helpers.TRAINING, "make_fp8.py"), "--src", self.dir, "--out", fp8],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        tensors, _ = st_io.read(os.path.join(fp8, "model.safetensors"))
        kinds = {}
        for name, dt, _, _ in tensors:
            kinds[dt] = kinds.get(dt, 0) + 1
        self.assertEqual(kinds["F8_E4M3"], 423)
        with open(os.path.join(fp8, "config.json")) as f:
            self.assertEqual(json.load(f)["quantization_config"]["weight_block_size"], [128, 128])
        ids = list(range(100, 160))
        _, a = self.logits(ids)
        keep, self.dir = self.dir, fp8
        try:
            _, b = self.logits(ids)
        finally:
            self.dir = keep
        # random weights amplify the FP8 rounding: only that it runs and differs from BF16 is checked here (the
        # FP8 arithmetic itself is tests/fixtures/tiny-fp8's)
        self.assertEqual(len(a), len(b))
        self.assertTrue(all(v == v and abs(v) < 1e30 for v in b))
        self.assertNotEqual(list(a), list(b))

    def test_config_and_generation_config(self):
        with open(os.path.join(self.dir, "config.json")) as f:
            cj = json.load(f)
        self.assertEqual(cj["text_config"]["num_nextn_predict_layers"], 1)
        with open(os.path.join(self.dir, "generation_config.json")) as f:
            self.assertEqual(json.load(f)["eos_token_id"], mc.eos_ids())


if __name__ == "__main__":
    unittest.main()
