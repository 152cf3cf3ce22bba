#!/usr/bin/env python3
"""hf_decode_bench.py - transformers' prefill and decode step on a bench model's shapes: the peer the decode
issue compares glm53 with (same run, same shapes), on the GPU machine.

    python3 scripts/hf_decode_bench.py --model DIR [--prompt 2048] [--decode 16] [--out FILE.json]

DIR is a model made by scripts/make_bench_model.py (its config.json: real GLM-5.3-Flash dimensions, some number
of layers). transformers' Glm5Next is built from that config with its own random initialisation in BF16 on the
GPU (the quantization_config is dropped: transformers has no FP8 block-scaled decode path to time, so its
weights are BF16, twice the bytes of glm53's FP8 projections; the step's time does not depend on the values).
It runs a warm-up prefill of 64 tokens (the first call's one-time costs stay out of the figure), a prefill of
--prompt random token ids with the cache on, then --decode single-token steps fed with the greedy token (0: prefill
only, for the prefill issue's comparison), each timed alone (torch.cuda.synchronize around it); it prints the
prefill time, the median step and the tokens per second, and writes them as JSON with the versions and the
attention / experts implementations transformers used (its defaults, the fastest it offers here). Running out of
GPU memory is a result, not a crash: it prints "out of memory" and writes {"oom": true, ...}.
"""
import argparse
import json
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a scripts/make_bench_model.py folder (its config.json)")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the figures here as JSON")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers.models.glm5_next import modeling_glm5_next as M
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextConfig

    with open(os.path.join(a.model, "config.json")) as f:
        text = json.load(f)
    text.pop("quantization_config", None)
    text.pop("model_type", None)
    text["num_nextn_predict_layers"] = 0   # transformers' model has no MTP layer; plain decode does not run it
    cfg = Glm5NextConfig(text_config=text)
    Cls = getattr(M, "Glm5NextForCausalLM", None) or M.Glm5NextForConditionalGeneration
    torch.manual_seed(a.seed)
    t0 = time.time()
    with torch.device("cuda"):
        model = Cls(cfg.text_config if Cls.__name__.endswith("CausalLM") else cfg).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"{Cls.__name__}: {params / 1e9:.2f} G parameters (BF16), built in {time.time() - t0:.1f} s", flush=True)
    impl = dict(attn=getattr(model.config, "_attn_implementation", "?"),
                experts=getattr(model.config, "_experts_implementation", "?"))
    vocab = text["vocab_size"]
    g = torch.Generator(device="cuda").manual_seed(a.seed)
    ids = torch.randint(0, vocab, (1, a.prompt), device="cuda", generator=g)
    base = dict(model=a.model, layers=text["num_hidden_layers"], prompt=a.prompt, decode=a.decode, implementation=impl,
                cls=Cls.__name__, params=params, transformers=transformers.__version__, torch=torch.__version__,
                device=torch.cuda.get_device_name())
    with torch.no_grad():
        model(input_ids=ids[:, :64], use_cache=True)   # warm-up
        torch.cuda.synchronize()
        t0 = time.time()
        try:
            out = model(input_ids=ids, use_cache=True)
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError as e:
            print(f"prefill {a.prompt} tokens: out of memory ({str(e).splitlines()[0]})", flush=True)
            if a.out:
                with open(a.out, "w") as f:
                    json.dump(dict(base, oom=True), f, indent=1)
            return 0
        prefill_ms = (time.time() - t0) * 1e3
        print(f"prefill {a.prompt} tokens: {prefill_ms:.1f} ms", flush=True)
        cache, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        steps = []
        for i in range(a.decode):
            torch.cuda.synchronize()
            t0 = time.time()
            out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            steps.append((time.time() - t0) * 1e3)
            cache = out.past_key_values
            print(f"  step {i + 1}/{a.decode}: {steps[-1]:.2f} ms", flush=True)
    if not steps:
        res = dict(base, oom=False, prefill_ms=prefill_ms)
        print(f"transformers prefill {a.prompt} tokens: {prefill_ms:.1f} ms ({impl['attn']} attention, "
              f"{impl['experts']} experts)")
    else:
        step_ms = statistics.median(steps[1:] if len(steps) > 2 else steps)   # the first step warms up
        res = dict(base, oom=False, prefill_ms=prefill_ms, step_ms_median=step_ms, steps_ms=steps,
                   tokens_per_s=1e3 / step_ms)
        print(f"transformers decode step (median of {len(steps) - 1 if len(steps) > 2 else len(steps)}): "
              f"{step_ms:.2f} ms, {1e3 / step_ms:.1f} tokens/s; prefill {prefill_ms:.1f} ms "
              f"({impl['attn']} attention, {impl['experts']} experts)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
