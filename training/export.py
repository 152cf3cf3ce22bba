#!/usr/bin/env python3
"""Writes models/glm53-tiny from a training checkpoint (GPU machine, or any machine with torch + transformers 5.17).

    python3 training/export.py --ckpt training/runs/full/ckpt.pt [--out models/glm53-tiny]

train.py exports by itself at the end of a run (glm53_torch.export); this re-exports a saved checkpoint. The
directory holds what glm53 and transformers load:

  config.json               transformers' own (save_pretrained), text_config.num_nextn_predict_layers = 1,
                            linear_lower_bound written out
  model.safetensors         BF16 (HF's fp32-kept e_score_correction_bias, conv1d, dt_bias, A_log in F32), the
                            real checkpoint names (per-expert tensors, q/k/v_conv1d, hc_attn_fn, ...), the MTP
                            layer as layer num_hidden_layers (enorm, hnorm, eh_proj, shared_head.norm, its DSA
                            attention with the indexer, its MoE; no hc_* tensors)
  generation_config.json    eos_token_id [<|endoftext|>, <|user|>, <|observation|>], pad_token_id
  tokenizer.json, tokenizer_config.json (with the chat template)
  meta.json                 training summary and the export checks

Every tensor is checked against the in-memory model, the tensor list against make_fixtures.expected_tensors,
and the directory is read back with transformers (and our MTP loader). The FP8 copy is training/make_fp8.py.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="RUN/ckpt.pt written by train.py")
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "glm53-tiny"))
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = ap.parse_args(argv)
    import glm53_torch as G

    X = G.setup(a.device)
    torch = X.torch
    st = torch.load(a.ckpt, map_location="cpu", weights_only=False)
    spec = st["spec"]
    model, mtp = G.build(spec, 0, [])
    model.load_state_dict(st["model"])
    mtp.load_state_dict(st["mtp"])
    meta = dict(model=spec["name"], trained=dict(steps=st["step"], padded_tokens=st["tokens_seen"],
                                                 train_seconds=st["train_seconds"],
                                                 val=st["val_history"][-1] if st["val_history"] else None),
                exported_from=os.path.abspath(a.ckpt))
    _, errors = G.export(model, mtp, spec, a.out, meta, print)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
