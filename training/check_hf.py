#!/usr/bin/env python3
"""transformers' view of the trained tiny model, for comparison with glm53 (GPU machine).

    python3 training/check_hf.py [--model models/glm53-tiny] [--fp8 models/glm53-tiny-fp8] --out DIR [--eval-n 50]

1. Loads the model with transformers (Glm5NextForConditionalGeneration.from_pretrained, eager attention and
   experts) and our MTP layer from the same files; loads the tokenizer with AutoTokenizer and checks that its
   apply_chat_template equals training/chat.py on the prompts below.
2. For 8 held-out prompts (evals/data/tiny: arithmetic, multiple choice, two tool-calling turns, a 512-token
   retrieval prompt where the KPool selection bites, two pictures) writes, in the fixtures' format:
     bf16/NN.tokens.npy        int32 [T]: the prompt ids (images expanded as Glm5NextProcessor expands them)
     bf16/NN.positions.npy     int32 [R]: the positions whose logits are stored (all when T <= 160)
     bf16/NN.logits.npy        float64 [R, vocab]: full-sequence forward of the model cast to float64
     bf16/NN.mtp_positions.npy int32 [R']: MTP rows p (p pairs h_p with token p+1 and predicts token p+2)
     bf16/NN.mtp_logits.npy    float64 [R', vocab]
     images/NN.png             the prompt's picture (for scripts/logits.lua --image)
   and the same for the FP8 copy under fp8/ (reference = the dequantised values, e4m3(code) * scale, as the
   fixtures do; transformers' own FP8 loading is tried and reported separately).
3. With --eval-n N: greedy decoding (batched, left padding, no cache) of the first N items of each held-out set,
   scored per family; eval.json and eval_items.jsonl.
index.json describes everything (texts, shapes, greedy continuations, checks, errors). Exit status 1 if any
check failed.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import chat  # noqa: E402
import data as D  # noqa: E402
import model_config as mc  # noqa: E402

EVALS = os.path.join(ROOT, "evals", "data", "tiny")
MAX_NEW = dict(arith=72, mc=64, retrieval=10, tools=110, vision=96)  # mc and vision reason first


def load_evals(family):
    with open(os.path.join(EVALS, f"{family}.jsonl")) as f:
        return [json.loads(line) for line in f]


def pick_prompts():
    """8 held-out prompts: name, record."""
    ar, mcq, tools, ret, vis = (load_evals(f) for f in ("arith", "mc", "tools", "retrieval", "vision"))
    call = next(r for r in tools if r["answer_type"] == "tool_call")
    answer = next(r for r in tools if r["answer_type"] == "text" and len(r["messages"]) > 1)
    r512 = next(r for r in ret if r["meta"]["context_tokens_approx"] == 512)
    return [("arith_0", ar[0]), ("arith_1", ar[1]), ("mc_0", mcq[0]), ("tools_call", call), ("tools_answer", answer),
            ("retrieval_512", r512), ("vision_0", vis[0]), ("vision_1", vis[1])]


def positions_of(T, full=160, keep=96, tail=32):
    if T <= full:
        return list(range(T))
    step = max(1, (T - tail) // (keep - tail))
    return sorted(set(range(0, T - tail, step)) | set(range(T - tail, T)))


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def parse_output(text):
    """-> (reasoning, content, tool_calls[(name, {k: v})]) of a completion after the prompt's '<think>'."""
    reasoning, _, content = text.partition("</think>") if "</think>" in text else (text, "", "")
    calls = []
    for body in TOOL_CALL.findall(content):
        name = body.split("<arg_key>")[0].strip()
        calls.append((name, {k.strip(): v for k, v in ARG.findall(body)}))
    return reasoning, content, calls


def score(rec, completion):
    fam, ans = rec["family"], rec["answer"]
    _, content, calls = parse_output(completion)
    content = content.split("<tool_call>")[0].strip() if calls else content.strip()
    if fam == "arith":
        m = re.search(r"####\s*(-?\d+)", content)
        return bool(m and m.group(1) == ans)
    if fam == "mc":
        m = re.search(r"Answer:\s*([A-J])", content)
        return bool(m and m.group(1) == ans)
    if fam == "retrieval":
        m = re.search(r"\d+", content)
        return bool(m and m.group(0) == ans)
    if fam == "tools":
        if rec["answer_type"] == "tool_call":
            return bool(calls) and calls[0][0] == ans["name"] and calls[0][1] == {k: str(v) for k, v in ans["arguments"].items()}
        return content == ans
    if fam == "vision":
        return content.lower().rstrip(".") == ans
    raise KeyError(fam)


class Checker:
    def __init__(self, a):
        self.a = a
        self.errors, self.index = [], dict(prompts=[], checks={})
        import glm53_torch as G

        self.G = G
        X = G.setup(a.device)
        self.torch, self.np, self.X = X.torch, X.np, X
        self.index["env"] = X.env
        self.spec = mc.spec("full")
        with open(os.path.join(a.model, "config.json")) as f:
            cj = json.load(f)
        if cj["text_config"]["hidden_size"] != self.spec["text"]["hidden_size"]:
            self.spec = mc.spec("smoke")
        self.eos = mc.eos_ids()

    def err(self, msg):
        print("ERROR: " + msg, flush=True)
        self.errors.append(msg)

    # -- inputs ---------------------------------------------------------------------------------------------
    def tokenizer(self):
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer

        self.raw_tok = Tokenizer.from_file(os.path.join(self.a.model, "tokenizer.json"))
        try:
            self.hf_tok = AutoTokenizer.from_pretrained(self.a.model)
        except Exception as e:  # noqa: BLE001
            self.hf_tok = None
            self.err(f"AutoTokenizer.from_pretrained({self.a.model}) failed: {e!r}")

    def prompt_inputs(self, rec, n):
        """-> (text, ids int64 [T], pixel_values or None, grid or None, image path or None)."""
        np = self.np
        msgs = json.loads(json.dumps(rec["messages"]))
        image = None
        if rec["family"] == "vision":
            image = os.path.join(EVALS, rec["images"][0])
        text = chat.render(msgs, rec.get("tools"), add_generation_prompt=True)
        checks = {}
        if self.hf_tok is not None:
            try:
                hf_text = self.hf_tok.apply_chat_template(msgs, tools=rec.get("tools"), add_generation_prompt=True,
                                                          tokenize=False)
                checks["apply_chat_template_equal"] = hf_text == text
                if hf_text != text:
                    self.err(f"{n}: tokenizer.apply_chat_template differs from training/chat.py")
            except Exception as e:  # noqa: BLE001
                checks["apply_chat_template_error"] = repr(e)
                self.err(f"{n}: apply_chat_template raised {e!r}")
        ids = self.raw_tok.encode(text, add_special_tokens=False).ids
        if self.hf_tok is not None:
            hf_ids = self.hf_tok(text, add_special_tokens=False)["input_ids"]
            checks["hf_tokenizer_ids_equal"] = list(hf_ids) == list(ids)
            if list(hf_ids) != list(ids):
                self.err(f"{n}: AutoTokenizer ids differ from tokenizers.Tokenizer ids")
        pv = grid = None
        if image:
            from PIL import Image
            from transformers.models.glm5_next.image_processing_glm5_next import Glm5NextImageProcessor

            ip = Glm5NextImageProcessor()
            res = ip(images=[Image.open(image)], return_tensors="pt")
            pv, grid = res["pixel_values"], res["image_grid_thw"]
            n_img = int(grid.prod()) // 4
            img_id = self.spec["top"]["image_token_id"]
            j = ids.index(img_id)
            ids = ids[:j] + [img_id] * n_img + ids[j + 1:]
            try:
                from transformers.models.glm5_next.processing_glm5_next import Glm5NextProcessor

                proc = Glm5NextProcessor(image_processor=ip, tokenizer=self.hf_tok)
                pr = proc(text=[text], images=[Image.open(image)], return_tensors="pt")
                same = pr["input_ids"][0].tolist() == ids
                checks["processor_ids_equal"] = same
                if not same:
                    self.err(f"{n}: Glm5NextProcessor input_ids differ from our expansion")
            except Exception as e:  # noqa: BLE001
                checks["processor_error"] = repr(e)
        return text, np.asarray(ids, np.int64), pv, grid, image, checks

    # -- logits -----------------------------------------------------------------------------------------------
    def logits(self, model, mtp, ids, pv, grid):
        torch = self.torch
        dev = next(model.parameters()).device
        dt = next(model.parameters()).dtype
        x = torch.as_tensor(ids, device=dev)[None]
        kw = dict(input_ids=x, use_cache=False)
        if pv is not None:
            kw.update(pixel_values=pv.to(dev, dt), image_grid_thw=grid.to(dev))
        with torch.no_grad():
            h = model.model(**kw).last_hidden_state
            lg = model.lm_head(h)[0]
            hm = mtp(h[:, :-1], model.model.language_model.embed_tokens(x[:, 1:]))
            ml = model.lm_head(hm)[0]
        return lg.double().cpu().numpy(), ml.double().cpu().numpy()

    def write_logits(self, sub, model, mtp, prompts, rows_cap=None):
        np = self.np
        d = os.path.join(self.a.out, sub)
        os.makedirs(d, exist_ok=True)
        out = []
        for k, (name, rec, text, ids, pv, grid, image) in enumerate(prompts):
            lg, ml = self.logits(model, mtp, ids, pv, grid)
            T = len(ids)
            pos = positions_of(T) if rows_cap is None else positions_of(T, full=rows_cap, keep=rows_cap, tail=16)
            mpos = list(range(max(0, T - 1 - 16), T - 1))
            base = f"{k:02d}"
            np.save(os.path.join(d, f"{base}.tokens.npy"), ids.astype(np.int32))
            np.save(os.path.join(d, f"{base}.positions.npy"), np.asarray(pos, np.int32))
            np.save(os.path.join(d, f"{base}.logits.npy"), lg[pos].astype(np.float64))
            np.save(os.path.join(d, f"{base}.mtp_positions.npy"), np.asarray(mpos, np.int32))
            np.save(os.path.join(d, f"{base}.mtp_logits.npy"), ml[mpos].astype(np.float64))
            if not (np.isfinite(lg).all() and np.isfinite(ml).all()):
                self.err(f"{sub}/{name}: non-finite logits")
            out.append(dict(name=name, T=T, rows=len(pos), logits=f"{sub}/{base}.logits.npy",
                            tokens=f"{sub}/{base}.tokens.npy", positions=f"{sub}/{base}.positions.npy",
                            mtp_logits=f"{sub}/{base}.mtp_logits.npy", mtp_positions=f"{sub}/{base}.mtp_positions.npy",
                            argmax_last=int(lg[-1].argmax()), full_logits=lg))
        return out

    # -- greedy decoding -----------------------------------------------------------------------------------------
    def greedy(self, model, items, max_new, token_budget=65536):
        """items: [(ids int64 [T], pixel_values or None, grid or None)] -> list of generated id lists. Batched with
        left padding (transformers masks it: KDA zeroes padded inputs, the indexer starts the pools at the first
        real token), full recompute each step (no cache)."""
        torch, np = self.torch, self.np
        dev = next(model.parameters()).device
        dt = next(model.parameters()).dtype
        pad = self.spec["text"]["pad_token_id"]
        outs = [None] * len(items)
        order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
        groups, cur = [], []
        for j in order:
            if cur and (len(cur) + 1) * (len(items[j][0]) + max_new) > token_budget:
                groups.append(cur)
                cur = []
            cur.append(j)
        if cur:
            groups.append(cur)
        for grp in groups:
            seqs = [list(items[j][0]) for j in grp]
            gen = [[] for _ in grp]
            done = [False] * len(grp)
            pvs = [items[j][1] for j in grp if items[j][1] is not None]
            grids = [items[j][2] for j in grp if items[j][2] is not None]
            for _ in range(max_new):
                Lm = max(len(s) for s in seqs)
                x = np.full((len(seqs), Lm), pad, np.int64)
                am = np.zeros((len(seqs), Lm), np.int64)
                for r, s in enumerate(seqs):
                    x[r, Lm - len(s):] = s
                    am[r, Lm - len(s):] = 1
                kw = dict(input_ids=torch.as_tensor(x, device=dev), attention_mask=torch.as_tensor(am, device=dev),
                          use_cache=False)
                if pvs:
                    kw.update(pixel_values=torch.cat(pvs).to(dev, dt), image_grid_thw=torch.cat(grids).to(dev))
                with torch.no_grad():
                    h = model.model(**kw).last_hidden_state[:, -1]
                    nxt = model.lm_head(h).argmax(-1).tolist()
                for r, t in enumerate(nxt):
                    if done[r]:
                        continue
                    gen[r].append(t)
                    seqs[r].append(t)
                    if t in self.eos:
                        done[r] = True
                if all(done):
                    break
            for r, j in enumerate(grp):
                outs[j] = gen[r]
        return outs

    def run_eval(self, model, n):
        results, items_out = {}, []
        for fam in D.FAMILIES:
            recs = load_evals(fam)[:n]
            inputs = []
            for rec in recs:
                _, ids, pv, grid, _, _ = self.prompt_inputs(rec, rec["id"])
                inputs.append((ids, pv, grid))
            t0 = time.time()
            gens = self.greedy(model, inputs, MAX_NEW[fam])
            ok = 0
            for rec, g in zip(recs, gens):
                text = self.raw_tok.decode([t for t in g if t not in self.eos], skip_special_tokens=False)
                good = score(rec, text)
                ok += good
                items_out.append(dict(id=rec["id"], family=fam, answer=rec["answer"], output=text, correct=good))
            lo, hi = wilson(ok, len(recs))
            results[fam] = dict(n=len(recs), correct=ok, accuracy=ok / max(1, len(recs)), wilson95=[lo, hi],
                                seconds=round(time.time() - t0, 1), max_new_tokens=MAX_NEW[fam])
            print(f"eval {fam}: {ok}/{len(recs)} = {ok / max(1, len(recs)):.3f} [{lo:.3f}, {hi:.3f}] "
                  f"({results[fam]['seconds']} s)", flush=True)
        return results, items_out

    # -- the whole check -------------------------------------------------------------------------------------------
    def run(self):
        torch, np, a = self.torch, self.np, self.a
        os.makedirs(a.out, exist_ok=True)
        self.tokenizer()
        model, mtp, info = self.G.load_exported(a.model, self.spec, torch.float32, a.device_t)
        self.index["loading_info"] = {k: (v if isinstance(v, (list, str)) else str(v)) for k, v in info.items()}
        prompts = []
        os.makedirs(os.path.join(a.out, "images"), exist_ok=True)
        for k, (name, rec) in enumerate(pick_prompts()):
            text, ids, pv, grid, image, checks = self.prompt_inputs(rec, name)
            img_rel = None
            if image:
                img_rel = f"images/{k:02d}.png"
                shutil.copy(image, os.path.join(a.out, img_rel))
            prompts.append((name, rec, text, ids, pv, grid, image))
            self.index["prompts"].append(dict(name=name, id=rec["id"], family=rec["family"], text=text, T=len(ids),
                                              image=img_rel, answer=rec["answer"], checks=checks))
        # greedy continuations (float32) for a quick look and for comparing generate
        gens = self.greedy(model, [(p[3], p[4], p[5]) for p in prompts], 48)
        for entry, g in zip(self.index["prompts"], gens):
            entry["greedy_ids"] = g
            entry["greedy_text"] = self.raw_tok.decode(g, skip_special_tokens=False)
            print(f"{entry['name']}: {entry['greedy_text']!r}", flush=True)
        # float64 references
        ref, rmtp = model.to(torch.float64), mtp.to(torch.float64)
        bf = self.write_logits("bf16", ref, rmtp, prompts)
        for entry, r in zip(self.index["prompts"], bf):
            entry["bf16"] = {k: v for k, v in r.items() if k != "full_logits"}
        model = ref.to(torch.float32)
        mtp = rmtp.to(torch.float32)
        # FP8 copy
        if a.fp8:
            self.fp8(prompts, bf)
        if a.eval_n:
            res, items = self.run_eval(model, a.eval_n)
            with open(os.path.join(a.out, "eval.json"), "w") as f:
                json.dump(dict(results=res, how="transformers float32, greedy, batched with left padding, no cache; "
                               "first N items of evals/data/tiny/<family>.jsonl", n_per_family=a.eval_n), f, indent=2)
            with open(os.path.join(a.out, "eval_items.jsonl"), "w") as f:
                for it in items:
                    f.write(json.dumps(it) + "\n")
            self.index["eval"] = res

    def fp8(self, prompts, bf):
        torch, np, a = self.torch, self.np, self.a
        G, mf = self.G, self.G.mf
        if not os.path.exists(os.path.join(a.fp8, "model.safetensors")):
            import make_fp8

            info = make_fp8.convert(a.model, a.fp8)
            print(f"make_fp8: wrote {a.fp8} (sha256 {info['model_safetensors_sha256'][:16]})", flush=True)
        import hashlib

        with open(os.path.join(a.fp8, "model.safetensors"), "rb") as f:
            rep = dict(model_safetensors_sha256=hashlib.sha256(f.read()).hexdigest())
        # transformers' own FP8 loading: reported, not used for the reference
        try:
            Cls = G.M.Glm5NextForConditionalGeneration
            hfm = Cls.from_pretrained(a.fp8, dtype=torch.bfloat16, attn_implementation="eager").to(a.device_t).eval()
            rep["transformers_fp8_load"] = "ok"
            del hfm
        except Exception as e:  # noqa: BLE001
            rep["transformers_fp8_load"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
        print(f"fp8: transformers' own loading: {rep['transformers_fp8_load']}", flush=True)
        # reference: the BF16 architecture holding e4m3(code) * scale
        model, info, _ = mf.from_pretrained(a.model)
        files = mf.read_checkpoint(a.fp8)
        t = dict(linear_num_heads=model.config.text_config.linear_num_heads,
                 linear_head_dim=model.config.text_config.linear_head_dim,
                 moe_intermediate_size=model.config.text_config.moe_intermediate_size)
        sd = model.state_dict()
        n = 0
        with torch.no_grad():
            for name, v in files.items():
                if v.dtype != torch.float8_e4m3fn or name.startswith(mf.PREFIX + f"layers.{self.spec['text']['num_hidden_layers']}."):
                    continue
                hf, idx, _ = mf.ckpt_to_hf(name, t)
                sd[hf][idx] = mf.file_value(files, name).to(sd[hf].dtype)
                n += 1
        mtp = G.build_mtp_for(model, self.spec)
        G.mtp_from_checkpoint(mtp, {k: mf.file_value(files, k) for k in files if not k.endswith("_scale_inv")},
                              self.spec, model.config.text_config)
        model, mtp = model.to(a.device_t).to(torch.float64).eval(), mtp.to(a.device_t).to(torch.float64).eval()
        rep["dequantised_main_tensors"] = n
        capped = self.write_logits("fp8", model, mtp, prompts, rows_cap=48)
        diffs = []
        for r8, rb in zip(capped, bf):
            d = float(np.abs(r8["full_logits"] - rb["full_logits"]).max() / np.abs(rb["full_logits"]).max())
            diffs.append(d)
        rep["fp8_vs_bf16_max_rel"] = diffs
        print(f"fp8: logits vs BF16, max |diff| / max |bf16| per prompt: {['%.3g' % d for d in diffs]}", flush=True)
        for entry, r in zip(self.index["prompts"], capped):
            entry["fp8"] = {k: v for k, v in r.items() if k != "full_logits"}
        self.index["fp8"] = rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "glm53-tiny"))
    ap.add_argument("--fp8", default=None, help="the FP8 copy (made from --model when absent); omit to skip FP8")
    ap.add_argument("--out", required=True)
    ap.add_argument("--eval-n", type=int, default=0, help="greedy-decode and score the first N items per family")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a = ap.parse_args(argv)
    t0 = time.time()
    ck = Checker(a)
    a.device_t = ck.X.dev
    try:
        ck.run()
    except Exception as e:  # noqa: BLE001
        ck.err(f"check_hf failed: {type(e).__name__}: {e}")
        traceback.print_exc()
    ck.index["errors"] = ck.errors
    ck.index["seconds"] = round(time.time() - t0, 1)
    ck.index["about"] = ("training/check_hf.py: float64 logits of transformers' Glm5NextForConditionalGeneration (and "
                         "our MTP layer) on held-out prompts; logits rows are the positions in NN.positions.npy")
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(ck.index, f, indent=1, default=str)
    print(f"check_hf: {'OK' if not ck.errors else f'{len(ck.errors)} errors'} in {ck.index['seconds']} s -> "
          f"{os.path.join(a.out, 'index.json')}", flush=True)
    return 1 if ck.errors else 0


if __name__ == "__main__":
    sys.exit(main())
