"""Shared paths and tool lookups for training/tests (stdlib only)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

TESTS = os.path.dirname(os.path.abspath(__file__))
TRAINING = os.path.dirname(TESTS)
ROOT = os.path.dirname(TRAINING)
sys.path.insert(0, TRAINING)

LUAJIT = shutil.which("luajit")


def lib_path():
    """libglm53.so of a build (GLM53_BUILD, or build/), or None."""
    for d in (os.environ.get("GLM53_BUILD"), os.path.join(ROOT, "build")):
        if d and os.path.exists(os.path.join(d, "libglm53.so")):
            return os.path.join(d, "libglm53.so")
    return None


def has_cjson():
    if not LUAJIT:
        return False
    return subprocess.run([LUAJIT, "-e", "require('cjson')"], capture_output=True).returncode == 0


def run_lua(script, *args, env=None, timeout=600):
    e = dict(os.environ)
    lib = lib_path()
    if lib:
        e.setdefault("GLM53_LIB", lib)
    e.update(env or {})
    return subprocess.run([LUAJIT, os.path.join(ROOT, script), *args], capture_output=True, text=True, env=e,
                          cwd=ROOT, timeout=timeout)


def lua_json(script, payload, *extra):
    """Writes payload as JSON, runs `luajit script IN OUT extra...`, returns the decoded OUT."""
    with tempfile.TemporaryDirectory() as td:
        inp, out = os.path.join(td, "in.json"), os.path.join(td, "out.json")
        with open(inp, "w", encoding="utf-8") as f:
            json.dump(payload, f, ensure_ascii=False)
        r = run_lua(script, inp, out, *extra)
        if r.returncode != 0:
            raise AssertionError(f"{script} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def tokenize(tokenizer, texts, decode=False):
    """scripts/tokenize.lua: texts -> id lists (or, with decode, id lists -> texts)."""
    with tempfile.TemporaryDirectory() as td:
        inp, out = os.path.join(td, "in.json"), os.path.join(td, "out.json")
        with open(inp, "w", encoding="utf-8") as f:
            json.dump(texts, f, ensure_ascii=False)
        args = ["--tokenizer", tokenizer, "--input", inp, "--out", out] + (["--decode"] if decode else [])
        r = run_lua("scripts/tokenize.lua", *args)
        if r.returncode != 0:
            raise AssertionError(f"tokenize.lua failed: {r.stderr}")
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def node_tokenizers():
    """The Node binding of HF tokenizers under .cache/node (docs/tokenizer.md), or None."""
    mod = os.path.join(ROOT, ".cache", "node", "node_modules")
    if shutil.which("node") and os.path.isdir(os.path.join(mod, "tokenizers")):
        return mod
    return None


def read_npy_f32(path):
    """A float32 / int32 .npy file (little endian, C order) -> (shape, list of numbers), without numpy."""
    import array
    import ast

    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not an .npy file")
    hlen = int.from_bytes(data[8:10], "little") if data[6] == 1 else int.from_bytes(data[8:12], "little")
    start = 10 if data[6] == 1 else 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    code = {"<f4": "f", "<i4": "i", "<f8": "d"}[header["descr"]]
    arr = array.array(code)
    arr.frombytes(data[start + hlen:])
    if sys.byteorder != "little":
        arr.byteswap()
    return tuple(header["shape"]), arr
