#!/usr/bin/env python3
"""Derives the FP8 copy of the tiny model, as the released GLM-5.3-Flash checkpoint is stored (numpy only).

    python3 training/make_fp8.py [--src models/glm53-tiny] [--out models/glm53-tiny-fp8]

The tensors the real checkpoint keeps in FP8 (routed and shared experts, the dense MLP, and on every DSA layer,
the MTP layer's included, q_a_proj, q_b_proj, kv_a_proj_with_mqa and o_proj; architecture reference 3.1) become
F8_E4M3 codes with an F32 `weight_scale_inv` of shape [ceil(out/128), ceil(in/128)]: scale = block amax / 448,
round to nearest even, saturating; dequantised value = e4m3(code) * scale. That is make_fixtures.py's rewrite
(its numpy quantiser np_quant_blocks, cross-checked there against torch's float8_e4m3fn). Every other tensor
is copied unchanged (BF16, or F32 where transformers keeps F32); config.json gains
quantization_config {quant_method fp8, fmt e4m3, activation_scheme dynamic, weight_block_size [128, 128]}.
Deterministic: the same source gives the same bytes (the sha256 is printed).
"""

import argparse
import hashlib
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import model_config as mc  # noqa: E402
import st_io  # noqa: E402

mf = mc.mf
QUANT_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [mf.FP8_BLOCK, mf.FP8_BLOCK]}


def to_f32(np, dt, shape, raw):
    if dt == "BF16":
        u = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dt == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape).astype(np.float32)
    raise ValueError(f"cannot quantise a {dt} tensor")


def fp8_names(config):
    tc = config["text_config"]
    t = dict(num_hidden_layers=tc["num_hidden_layers"], layer_types=tc["layer_types"],
             mlp_layer_types=tc["mlp_layer_types"], indexer_types=tc.get("indexer_types") or ["full"] * tc["num_hidden_layers"],
             n_routed_experts=tc["n_routed_experts"])
    n_mtp = tc.get("num_nextn_predict_layers", 0) or 0
    return set(mf.fp8_checkpoint_names(mf.mtp_template_text(t, n_mtp) if n_mtp else t))


def convert(src, out):
    import numpy as np

    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    if "quantization_config" in config:
        raise SystemExit(f"{src} is already quantised")
    names = fp8_names(config)
    tensors, meta = st_io.read(os.path.join(src, "model.safetensors"))
    have = {t[0] for t in tensors}
    missing = sorted(names - have)
    if missing:
        raise SystemExit(f"{src}/model.safetensors lacks FP8-set tensors, e.g. {missing[:3]}")
    new, worst, saturated, total = [], 0.0, 0, 0
    for name, dt, shape, raw in tensors:
        if name not in names:
            new.append((name, dt, shape, raw))
            continue
        W = to_f32(np, dt, shape, raw)
        codes, scale = mf.np_quant_blocks(W)
        deq = mf.np_dequant(codes, scale)
        rel = float(np.abs(deq - W).max() / max(float(np.abs(W).max()), 1e-30))
        worst = max(worst, rel)
        saturated += int(((codes & 0x7F) == 0x7E).sum())
        total += codes.size
        new.append((name, "F8_E4M3", shape, codes.astype(np.uint8).tobytes()))
        new.append((name[: -len(".weight")] + ".weight_scale_inv", "F32", list(scale.shape),
                    scale.astype("<f4").tobytes()))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    new.sort(key=lambda t: t[0])
    st_io.write(os.path.join(out, "model.safetensors"), new, meta)
    config["quantization_config"] = QUANT_CONFIG
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    for fn in sorted(os.listdir(src)):
        if fn not in ("config.json", "model.safetensors", "meta.json") and os.path.isfile(os.path.join(src, fn)):
            shutil.copy(os.path.join(src, fn), os.path.join(out, fn))
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    info = dict(source=os.path.abspath(src), fp8_tensors=len(names), tensors=len(new),
                max_rel_error_per_tensor=worst, saturated_code_fraction=saturated / max(total, 1),
                model_safetensors_sha256=sha, bytes=os.path.getsize(os.path.join(out, "model.safetensors")))
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(dict(fp8=info, quantization_config=QUANT_CONFIG,
                       about="training/make_fp8.py: 128x128 block-scaled E4M3 of the real checkpoint's FP8 set"), f,
                  indent=2)
        f.write("\n")
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(ROOT, "models", "glm53-tiny"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "glm53-tiny-fp8"))
    a = ap.parse_args(argv)
    info = convert(a.src, a.out)
    print(f"make_fp8: {a.out}: {info['fp8_tensors']} FP8 tensors (+ scales) of {info['tensors']}, "
          f"{info['bytes'] / 1e6:.2f} MB, max relative error per tensor {info['max_rel_error_per_tensor']:.3g}, "
          f"sha256 {info['model_safetensors_sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
