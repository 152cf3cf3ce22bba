#!/usr/bin/env python3
"""Writes a random-weight checkpoint with the tiny model's exact config and tensor list (Python stdlib only).

    python3 training/random_checkpoint.py --out DIR [--size full|smoke] [--seed 0]

No torch: the tensor names, shapes and dtypes come from make_fixtures.expected_tensors (the layout
save_pretrained writes, plus the MTP layer), the values are small random BF16/F32 numbers, config.json holds the
spec's keys. It lets this machine check, before any GPU run, that glm53 loads a checkpoint of this configuration
and how fast it decodes it (docs/tiny-model.md, "Sizes and speed").
"""

import argparse
import array
import json
import math
import os
import random
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model_config as mc  # noqa: E402
import st_io  # noqa: E402

mf = mc.mf


def bf16_bits(x):
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even


def tensor_bytes(rng, name, shape, dtype, pools):
    n = math.prod(shape)
    if name.endswith("norm.weight") or name.endswith("layernorm.weight") or name.endswith("enorm.weight") \
            or name.endswith("hnorm.weight") or name.endswith(("norm1.weight", "norm2.weight")):
        kind = "one"
    elif name.endswith(("A_log", "dt_bias", "e_score_correction_bias", "hc_attn_base", "hc_ffn_base")) \
            or name.endswith(".bias"):
        kind = "zero"
    elif name.endswith(("hc_attn_scale", "hc_ffn_scale")):
        kind = "one"
    else:
        kind = "rand"
    if dtype == "BF16":
        if kind == "rand":
            vals = array.array("H", rng.choices(pools["bf16"], k=n))
        else:
            vals = array.array("H", [bf16_bits(1.0 if kind == "one" else 0.0)]) * n
    elif dtype == "F32":
        if kind == "rand":
            vals = array.array("f", rng.choices(pools["f32"], k=n))
        else:
            vals = array.array("f", [1.0 if kind == "one" else 0.0]) * n
    else:
        raise ValueError(f"{name}: dtype {dtype} not written by this script")
    if sys.byteorder != "little":
        vals.byteswap()
    return vals.tobytes()


def config_json(s):
    t = dict(s["text"], model_type="glm5_next_text", num_nextn_predict_layers=s["mtp_layers"])
    v = dict(s["vision"], model_type="glm5_next_vision")
    return dict(architectures=["Glm5NextForConditionalGeneration"], model_type="glm5_next", dtype="bfloat16",
                text_config=t, vision_config=v, **s["top"])


def write(out, size="full", seed=0):
    s = mc.spec(size)
    rng = random.Random(seed)
    pools = dict(bf16=[bf16_bits(rng.gauss(0.0, 0.05)) for _ in range(4096)],
                 f32=[rng.gauss(0.0, 0.05) for _ in range(4096)])
    ex = mf.expected_tensors(s)
    tensors = [(name, dt, shape, tensor_bytes(rng, name, shape, dt, pools)) for name, (shape, dt) in sorted(ex.items())]
    os.makedirs(out, exist_ok=True)
    st_io.write(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json(s), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(dict(eos_token_id=mc.eos_ids(), pad_token_id=s["text"]["pad_token_id"]), f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(mc.TOKENIZER_DIR, fn), os.path.join(out, fn))
    return s, sum(len(x[3]) for x in tensors)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="full", choices=["full", "smoke"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    s, nbytes = write(a.out, a.size, a.seed)
    print(f"wrote {a.out}: {len(mf.expected_tensors(s))} tensors, {nbytes / 1e6:.2f} MB of tensor data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
