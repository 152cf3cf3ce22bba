#!/usr/bin/env python3
"""Trains the tiny GLM-5.3-Flash (models/glm53-tiny) on the H200 and exports it.

    python3 training/train.py --dry-run [--smoke]            # anywhere, no torch: config, parameters, sizes, plan
    python3 training/train.py --smoke [--run DIR]            # H200: tiny config, 30 steps, export, reload (< 2 min)
    python3 training/train.py --minutes 8.5 [--run DIR]      # H200: the real run, data + training + export
    python3 training/train.py --resume --minutes M           # continue RUN/ckpt.pt (same machine)
    python3 training/train.py --init-from models/glm53-tiny --minutes M   # continue from an export (new optimiser)

The model is transformers' Glm5NextForConditionalGeneration (text model + vision tower) built from
training/model_config.py, plus our MTP (NextN) layer (glm53_torch.MTPLayer), trained together:

  loss = CE(next token) + mtp_weight * CE(MTP: token after next) + kl_weight * KL(indexer || attention)

each CE averaged per task family over the tokens of the assistant turns (each family present in a batch weighs
the same), the KL over the query rows of every DSA layer (the MTP layer's too). Router balance by the
noaux_tc bias update (e_score_correction_bias += gamma * sign(mean load - load)). AdamW, linear warm-up and
cosine decay, bf16 autocast (the KDA core stays float32). The first --dense-frac of the steps run the
indexers with an index_topk above every sequence length (dense attention, the indexers learn from the KL), the
rest with the config's index_topk (256 tokens: the selection decides what long-context retrieval sees).

Batches hold sequences of one length bucket (padded to a multiple of 64, right padding). The step count is
planned from the measured step time so that training ends before the --minutes deadline with time left for the
export; a deadline reached early still ends the run gracefully and exports. Every failure names its stage.

Outputs in RUN (default training/runs/full or training/runs/smoke): train.log, history.json, loss.svg,
summary.json, ckpt.pt, data/ (the tokenized set, reused when unchanged), export/ (= models/glm53-tiny).
"""

import argparse
import json
import math
import os
import random
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import data as D  # noqa: E402
import model_config as mc  # noqa: E402
import svgplot  # noqa: E402

FAMILIES = D.FAMILIES
BUCKETS = [64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584,
           4096, 4160]
MAX_LEN = BUCKETS[-1]
H200_BF16_FLOPS = 7.9e14


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny config, ~30 steps, export and reload")
    ap.add_argument("--dry-run", action="store_true", help="print config, parameter counts, sizes and plan; no torch")
    ap.add_argument("--run", help="run directory (default training/runs/full or training/runs/smoke)")
    ap.add_argument("--export-dir", help="where the model goes (default RUN/export)")
    ap.add_argument("--minutes", type=float, help="wall-clock budget of this process, export included "
                    "(default 8.5; smoke 2.5)")
    ap.add_argument("--steps", type=int, help="fixed number of steps (default: planned from the measured speed; "
                    "smoke 30)")
    ap.add_argument("--resume", action="store_true", help="continue RUN/ckpt.pt (model, optimiser, schedule, data)")
    ap.add_argument("--init-from", help="start from an exported model directory (weights only)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data-seed", type=int, default=D.DEFAULT_SEED)
    ap.add_argument("--data-scale", type=float, default=2.0, help="times prep.FULL_COUNTS per family (default 2: the faster "
                    "steps of fast_ops see each item about 2-3 times in a 15-minute budget)")
    ap.add_argument("--family-scale", type=parse_family_scale, default={},
                    help="per-family factors on top of --data-scale, e.g. retrieval=3,arith=0.1 (the data mix)")
    ap.add_argument("--workers", type=int, default=max(1, min(15, (os.cpu_count() or 2) - 1)))
    ap.add_argument("--retrieval-max-tokens", type=int, help="training retrieval contexts at most this long "
                    "(an experiment's curriculum; held-out items unchanged)")
    ap.add_argument("--retrieval-one-question", action="store_true", help="training retrieval items ask one code "
                    "each, as the held-out items do (no multi-code questions, no drills: an experiment's curriculum)")
    ap.add_argument("--step-tokens", type=int, help="padded tokens per step (default 65536; smoke 8192)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-frac", type=float, default=0.03)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--kl-weight", type=float, default=1.0)
    ap.add_argument("--kl-rows", type=int, default=512, help="query rows per sequence in the KL (a random subset)")
    ap.add_argument("--dense-frac", type=float, default=0.15, help="fraction of steps with dense attention")
    ap.add_argument("--bias-gamma", type=float, default=1e-3, help="router bias update speed")
    ap.add_argument("--profile-step", type=int, default=30, help="profile the Nth step of this process with "
                    "torch.profiler (RUN/profile.txt; 0: never)")
    ap.add_argument("--log-seconds", type=float, default=10.0)
    ap.add_argument("--ckpt-minutes", type=float, default=3.0)
    ap.add_argument("--export-reserve", type=float, help="seconds kept for the final checkpoint and export "
                    "(default 45; smoke 25)")
    a = ap.parse_args(argv)
    a.size = "smoke" if a.smoke else "full"
    a.minutes = a.minutes if a.minutes is not None else (2.5 if a.smoke else 8.5)
    a.step_tokens = a.step_tokens or (8192 if a.smoke else 65536)
    a.export_reserve = a.export_reserve if a.export_reserve is not None else (25.0 if a.smoke else 45.0)
    if a.smoke and a.steps is None:
        a.steps = 30
    a.run = a.run or os.path.join(HERE, "runs", a.size)
    a.export_dir = a.export_dir or os.path.join(a.run, "export")
    if a.resume and a.init_from:
        ap.error("--resume and --init-from exclude each other")
    return a


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.f.write(line + "\n")


class StageFailed(Exception):
    pass


def item_counts(size, scale, family_scale=None):
    """Training items per family: prep's counts times scale, times family_scale[family] where given."""
    import prep

    base = prep.SMOKE_COUNTS if size == "smoke" else prep.FULL_COUNTS
    fs = family_scale or {}
    return {k: max(1, int(v * scale * fs.get(k, 1.0))) for k, v in base.items()}


def parse_family_scale(text):
    """"retrieval=3,arith=0.1" -> {"retrieval": 3.0, "arith": 0.1}; unknown families are an error."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        fam, _, val = part.partition("=")
        if fam not in FAMILIES or not val:
            raise SystemExit(f"--family-scale: '{part}' is not FAMILY=NUMBER with FAMILY one of {', '.join(FAMILIES)}")
        out[fam] = float(val)
    return out


def flops_per_token(spec):
    """Training FLOPs per token: 6 x active weights (+ the MTP layer) + attention scores over the selected tokens."""
    p = mc.count_params(spec)
    t = spec["text"]
    E, k, I, Dm = t["n_routed_experts"], t["num_experts_per_tok"], t["moe_intermediate_size"], t["hidden_size"]
    mtp_active = p["mtp"] - (E - k) * 3 * Dm * I
    n_dsa = sum(1 for x in t["layer_types"] if x == mc.DSA) + 1
    attn = n_dsa * 2 * 2 * t["num_attention_heads"] * (t["qk_nope_head_dim"] + t["v_head_dim"]) * t["index_topk"]
    return 6 * (p["active_per_token"] + mtp_active) + 3 * attn


def dry_run(a):
    spec = mc.spec(a.size)
    text, info = mc.format_summary(spec)
    print(text)
    print(json.dumps(dict(text_config=spec["text"], vision_config=spec["vision"], top=spec["top"],
                          eos_token_id=mc.eos_ids()), indent=1))
    counts = item_counts(a.size, a.data_scale, a.family_scale)
    fpt = flops_per_token(spec)
    print(f"data: items per family {counts} (+ held-out validation sets)")
    print(f"training: {a.step_tokens} padded tokens per step, lr {a.lr} (warm-up {a.warmup_frac:.0%}, cosine to "
          f"{a.min_lr_frac:.0%}), dense-attention phase {a.dense_frac:.0%} of the steps, budget {a.minutes} min")
    print(f"compute: ~{fpt / 1e6:.1f} MFLOP per training token; the H200's bf16 floor would be "
          f"~{H200_BF16_FLOPS / fpt / 1e6:.0f}M tokens/s. The eager model (mHC's Sinkhorn loop, the KPool indexer, "
          "eager attention) is far below that: train.py times the first steps and plans the step count from them.")
    bad = info["problems"] or (a.size == "full" and info["checkpoint_bytes"] > mc.MAX_CHECKPOINT_BYTES)
    return 1 if bad else 0


# ----------------------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------------------

def retrieval_train_opts(a):
    """gen_retrieval's options for the training split from the command line (None: the defaults)."""
    opts = {}
    if a.retrieval_max_tokens:
        opts["max_tokens"] = a.retrieval_max_tokens
    if a.retrieval_one_question:
        opts["one_question"] = True
    return {"retrieval": opts} if opts else None


class Batches:
    """Epochs of batches: items grouped by length bucket, step_tokens // bucket items per batch, shuffled."""

    def __init__(self, np, ds, step_tokens, seed):
        self.np, self.ds, self.step_tokens, self.seed = np, ds, step_tokens, seed
        self.bucket = np.searchsorted(np.asarray(BUCKETS), ds["lengths"])
        self.epoch, self.pos, self.order = 0, 0, None

    def plan(self, epoch):
        np = self.np
        rng = np.random.default_rng(self.seed * 1000 + epoch)
        out = []
        for b, cap in enumerate(BUCKETS):
            idx = np.flatnonzero(self.bucket == b)
            if not len(idx):
                continue
            rng.shuffle(idx)
            per = max(1, self.step_tokens // cap)
            out += [idx[i:i + per] for i in range(0, len(idx), per)]
        order = rng.permutation(len(out))
        return [out[i] for i in order]

    def next(self):
        if self.order is None or self.pos >= len(self.order):
            if self.order is not None:
                self.epoch += 1
                self.pos = 0
            self.order = self.plan(self.epoch)
        b = self.order[self.pos]
        self.pos += 1
        return b

    def state(self):
        return dict(epoch=self.epoch, pos=self.pos)

    def restore(self, st):
        self.epoch, self.pos = st["epoch"], st["pos"]
        self.order = self.plan(self.epoch)


def length_groups(np, lengths, budget):
    """Index groups in increasing length whose padded size (count x longest, in multiples of 64) stays in budget."""
    order = np.argsort(lengths, kind="stable")
    groups, cur = [], []
    for i in order:
        L = -(-int(lengths[i]) // 64) * 64
        if cur and (len(cur) + 1) * L > budget:
            groups.append(np.asarray(cur))
            cur = []
        cur.append(i)
    if cur:
        groups.append(np.asarray(cur))
    return groups


def make_batch(np, ds, idx, pad_id, pixels):
    lens = ds["lengths"][idx]
    Lp = -(-int(lens.max()) // 64) * 64
    B = len(idx)
    tok = np.full((B, Lp), pad_id, np.int64)
    msk = np.zeros((B, Lp), np.bool_)
    for r, i in enumerate(idx):
        s, e = ds["offsets"][i], ds["offsets"][i + 1]
        tok[r, :e - s] = ds["tokens"][s:e]
        msk[r, :e - s] = ds["mask"][s:e] != 0
    img = [int(ds["image"][i]) for i in idx if ds["image"][i] >= 0]
    pv = grid = None
    if img:
        pv, grid = pixels(ds["rgb"][img])
    return dict(tokens=tok, mask=msk, family=ds["family"][idx].astype(np.int64), lengths=lens.astype(np.int64),
                pixel_values=pv, grid=grid, n=B, padded=B * Lp)


# ----------------------------------------------------------------------------------------------------------
# The training process
# ----------------------------------------------------------------------------------------------------------

class Trainer:
    def __init__(self, a, log):
        self.a, self.log = a, log
        self.t0 = time.time()
        self.deadline = self.t0 + a.minutes * 60.0
        self.history, self.val_history, self.notes, self.errors = [], [], [], []
        self.step, self.total_steps, self.tokens_seen, self.train_seconds = 0, None, 0, 0.0
        self.stage = "start"

    # -- stages -------------------------------------------------------------------------------------------
    def run_stage(self, name, fn, *args):
        self.stage = name
        t = time.time()
        self.log(f"== {name}")
        try:
            out = fn(*args)
        except Exception as e:  # noqa: BLE001
            self.log(f"FAILED in stage '{name}': {type(e).__name__}: {e}")
            self.log(traceback.format_exc())
            raise StageFailed(name) from e
        self.log(f"== {name}: done in {time.time() - t:.1f} s")
        return out

    def imports(self):
        import numpy as np

        self.np = np
        import glm53_torch as G

        self.G = G
        X = G.setup("cuda")
        torch = X.torch
        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available: train.py needs the GPU machine (use --dry-run elsewhere)")
        self.log(f"env: {json.dumps(X.env)}")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        import chat

        self.renderer = chat.renderer_name()
        if self.renderer != "jinja2":
            self.notes.append("jinja2 missing: conversations rendered by training/chat.py's Python port")
            self.log("WARNING: jinja2 is not importable; rendering with training/chat.py's Python port (tested "
                     "byte-equal to the template on this data)")
        if X.env.get("fla_importable"):
            self.log("NOTE: flash-linear-attention is importable; transformers may use its KDA kernels")

    def prepare_data(self):
        import prep

        a = self.a
        self.spec = mc.spec(a.size)
        ids = mc.tokenizer_ids()
        self.pad_id = self.spec["text"]["pad_token_id"]
        img_tok = self.spec["top"]["image_token_id"]
        n_img = (D.IMAGE_SIZE // 28) ** 2
        counts = item_counts(a.size, a.data_scale, a.family_scale)
        out = prep.prepare(a.run, counts, prep.VAL_COUNTS if a.size == "full" else
                           {k: max(4, v // 8) for k, v in prep.VAL_COUNTS.items()},
                           a.data_seed, mc.TOKENIZER_JSON, self.renderer, img_tok, n_img, MAX_LEN, a.workers, self.log,
                           train_opts=retrieval_train_opts(a))
        self.train_ds, self.val_ds = out["train"], out["val"]
        for name, ds in (("train", self.train_ds), ("val", self.val_ds)):
            desc = prep.describe(ds)
            tot = sum(r["tokens"] for r in desc.values())
            self.log(f"data {name}: {len(ds['lengths'])} items, {tot / 1e6:.2f}M tokens, dropped (too long) "
                     f"{ds['dropped']}")
            for fam, r in desc.items():
                self.log(f"  {fam:9s} {r['items']:>7} items {r['tokens'] / 1e6:7.2f}M tokens (trained ~"
                         f"{r['trained_tokens_est'] / 1e6:.2f}M), mean length {r['mean_len']:.0f}, max {r['max_len']}")
        if ids["n_vocab"] > self.spec["text"]["vocab_size"]:
            raise RuntimeError("tokenizer has more ids than the model's vocab_size")

    def vision_pixels(self):
        import prep
        from transformers.models.glm5_next.image_processing_glm5_next import Glm5NextImageProcessor

        vp = prep.VisionPixels(Glm5NextImageProcessor(), self.np, self.torch)
        rgb = self.train_ds["rgb"]
        if len(rgb):
            _, grid = vp.run_processor([rgb[0]])
            if [int(x) for x in grid[0]] != vp.grid:
                raise RuntimeError(f"Glm5NextImageProcessor makes a {D.IMAGE_SIZE}x{D.IMAGE_SIZE} picture a grid "
                                   f"{[int(x) for x in grid[0]]}, but the data has {(D.IMAGE_SIZE // 28) ** 2} image "
                                   f"tokens per picture (grid {vp.grid}): the processor resized it")
        if vp.lut is not None and len(rgb):
            exact, diff = vp.verify(rgb[:64])
            self.log(f"vision: lookup-table pixels vs Glm5NextImageProcessor on {min(64, len(rgb))} training "
                     f"pictures: {'bit-exact' if exact else f'DIFFER (max abs {diff})'}")
        if not vp.exact:
            self.notes.append(f"vision pixels by the processor for every batch ({vp.reason})")
            self.log(f"vision: using Glm5NextImageProcessor for every batch ({vp.reason})")
        self.pixels = vp

    def build_model(self):
        torch, G, a = self.torch, self.G, self.a
        notes = []
        self.model, self.mtp = G.build(self.spec, a.seed, notes)
        if a.init_from:
            lm, lmtp, info = G.load_exported(a.init_from, self.spec)
            self.model.load_state_dict(lm.state_dict())
            self.mtp.load_state_dict(lmtp.state_dict())
            self.log(f"model: weights from {a.init_from}")
            del lm, lmtp
        self.model.cuda().train()
        self.mtp.cuda().train()
        self.attns = G.dsa_attentions(self.model, self.mtp)
        self.kda_calls = [0]
        G.wrap_kda(self.kda_calls)
        n_experts = G.dense_experts(self.model, self.mtp)
        self.log(f"model: KDA through fast_ops.kda_chunk_parallel, {n_experts} expert sets through "
                 "fast_ops.moe_experts_dense (checked against transformers' functions next)")
        self.routers = [m for m in list(self.model.modules()) + list(self.mtp.modules())
                        if isinstance(m, G.M.Glm5NextTextTopkRouter)]
        self.router_counts = [torch.zeros(r.num_experts, device="cuda") for r in self.routers]
        self.router_hooks = [r.register_forward_hook(self._router_hook(i)) for i, r in enumerate(self.routers)]
        decay, no_decay = [], []
        for n, p in list(self.model.named_parameters()) + [("mtp." + n, p) for n, p in self.mtp.named_parameters()]:
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 and "embed_tokens" not in n else no_decay).append(p)
        self.params = decay + no_decay
        self.opt = torch.optim.AdamW([dict(params=decay, weight_decay=a.weight_decay),
                                      dict(params=no_decay, weight_decay=0.0)], lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                                     fused=True)
        n_params = sum(p.numel() for p in self.params)
        self.log(f"model: {n_params:,} trainable parameters (HF model + MTP layer), {len(self.attns)} DSA layers "
                 f"with indexers, {len(self.routers)} routers; notes {notes}")
        self.batches = Batches(self.np, self.train_ds, a.step_tokens, a.seed)
        if a.resume:
            self.load_checkpoint()
        self.inputs = G.AttentionInputs(self.attns)

    def _router_hook(self, i):
        def hook(mod, args, out):
            idx = out[2]
            self.router_counts[i] += self.torch.bincount(idx.reshape(-1), minlength=mod.num_experts).float()
        return hook

    def self_check(self):
        """Hook checks against transformers on a real long batch, fp32."""
        np = self.np
        ds = self.val_ds
        topk = min(a.indexer.index_topk for _, a in self.attns)
        long = [i for i in np.argsort(-ds["lengths"]) if ds["lengths"][i] >= min(2 * topk + 64, 1024)][:2]
        if len(long) < 2:
            long = list(np.argsort(-ds["lengths"])[:2])
        S = int(min(ds["lengths"][long])) // 64 * 64
        S = min(S, 1024)
        ids = np.stack([ds["tokens"][ds["offsets"][i]:ds["offsets"][i] + S] for i in long]).astype(np.int64)
        self.G.check_fast_ops(self.model, "cuda", self.log)
        self.G.check_hooks(self.model, self.mtp, self.attns, self.torch.from_numpy(ids).cuda(), self.log)
        if self.kda_calls[0] == 0:
            raise self.G.CheckError("transformers did not call chunk_kimi_delta_attention through the module global, "
                                    "so the float32 kda_chunk_parallel wrapper is not in effect")
        else:
            self.log(f"check: the model's KDA runs kda_chunk_parallel in float32 with {self.G.KDA_CHUNK}-token chunks "
                     f"({self.kda_calls[0]} calls in the check)")
        for c in self.router_counts:
            c.zero_()

    # -- one step -----------------------------------------------------------------------------------------
    def family_mean(self, ce, fam):
        torch = self.torch
        nf = len(FAMILIES)
        sums = torch.zeros(nf, device=ce.device).scatter_add(0, fam, ce)
        cnt = torch.zeros(nf, device=ce.device).scatter_add(0, fam, torch.ones_like(ce))
        present = cnt > 0
        per = sums / cnt.clamp_min(1.0)
        return per[present].mean(), sums.detach(), cnt.detach()

    def forward(self, batch, train=True):
        torch, a = self.torch, self.a
        ids = torch.from_numpy(batch["tokens"]).cuda(non_blocking=True)
        msk = torch.from_numpy(batch["mask"]).cuda(non_blocking=True)
        fam = torch.from_numpy(batch["family"]).cuda(non_blocking=True)
        lens = torch.from_numpy(batch["lengths"]).cuda(non_blocking=True)
        B, L = ids.shape
        kw = dict(input_ids=ids, use_cache=False)
        if batch["pixel_values"] is not None:
            kw["pixel_values"] = torch.from_numpy(batch["pixel_values"]).cuda(non_blocking=True)
            kw["image_grid_thw"] = torch.from_numpy(batch["grid"]).cuda(non_blocking=True)
        self.inputs.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = self.model.model(**kw).last_hidden_state  # [B, L, D], after the stream mean and the final norm
            tm = msk[:, 1:]
            logits = self.model.lm_head(h[:, :-1][tm]).float()
            ce = torch.nn.functional.cross_entropy(logits, ids[:, 1:][tm], reduction="none")
            fam1 = fam[:, None].expand(B, L - 1)[tm]
            main, msum, mcnt = self.family_mean(ce, fam1)
            emb = self.model.model.language_model.embed_tokens(ids[:, 1:])
            hm = self.mtp(h[:, :-1], emb)  # row p: (h_p, x_{p+1}) -> x_{p+2}
            tm2 = msk[:, 2:]
            logits2 = self.model.lm_head(hm[:, :-1][tm2]).float()
            ce2 = torch.nn.functional.cross_entropy(logits2, ids[:, 2:][tm2], reduction="none")
            mtp_loss, tsum, tcnt = self.family_mean(ce2, fam[:, None].expand(B, L - 2)[tm2])
            kls = []
            if train and a.kl_weight > 0:
                for name, attn in self.attns:
                    x = self.inputs.inputs.get(name)
                    if x is None:
                        raise self.G.CheckError(f"no captured input for {name} in this step")
                    S = x.shape[1]
                    rows = torch.arange(S, device=x.device)
                    if S > a.kl_rows:
                        rows = torch.randperm(S, device=x.device)[:a.kl_rows].sort().values
                    kl, n = self.G.indexer_kl(attn, x, lens - (1 if name.startswith("mtp") else 0), rows)
                    if kl is not None:
                        kls.append(kl)
            kl = torch.stack(kls).mean() if kls else torch.zeros((), device=ids.device)
        loss = main + a.mtp_weight * mtp_loss + a.kl_weight * kl
        return loss, dict(main=main.detach(), mtp=mtp_loss.detach(), kl=kl.detach(), msum=msum, mcnt=mcnt,
                          tsum=tsum, tcnt=tcnt)

    def train_step(self, idx):
        """One optimiser step over the batch idx, split into micro-batches after an out-of-memory error."""
        torch, np = self.torch, self.np
        split = self.__dict__.setdefault("_split", {})
        key = (len(idx), int(self.train_ds["lengths"][idx].max()) // 64)
        parts = split.get(key, 1)
        while True:
            oom = False
            try:
                self.opt.zero_grad(set_to_none=True)
                stats, padded = None, 0
                for sub in np.array_split(idx, parts):
                    batch = make_batch(np, self.train_ds, sub, self.pad_id, self.pixels)
                    padded += batch["padded"]
                    loss, st = self.forward(batch)
                    if not torch.isfinite(loss):
                        for c in self.router_counts:
                            c.zero_()
                        return None, padded
                    (loss / parts).backward()
                    stats = st if stats is None else {k: stats[k] + st[k] for k in st}
                break
            except torch.OutOfMemoryError:
                oom = True  # handled outside the except block, so the failed graph can be freed
            if oom:
                self.opt.zero_grad(set_to_none=True)
                self.inputs.clear()
                import gc

                gc.collect()
                torch.cuda.empty_cache()
                if parts >= len(idx):
                    raise RuntimeError(f"out of memory on a single sequence of "
                                       f"{int(self.train_ds['lengths'][idx].max())} tokens (lower --step-tokens or "
                                       "--kl-rows)")
                parts *= 2
                split[key] = parts
                self.log(f"out of memory on a batch of {len(idx)} x {int(self.train_ds['lengths'][idx].max())} "
                         f"tokens: retrying as {parts} micro-batches")
        if parts > 1:
            for k in ("main", "mtp", "kl"):
                stats[k] = stats[k] / parts
        gn = torch.nn.utils.clip_grad_norm_(self.params, self.a.grad_clip)
        if not torch.isfinite(gn):
            self.opt.zero_grad(set_to_none=True)
            for c in self.router_counts:
                c.zero_()
            return None, padded
        self.opt.step()
        with torch.no_grad():
            for r, c in zip(self.routers, self.router_counts):
                if c.sum() > 0:
                    r.e_score_correction_bias.add_(self.a.bias_gamma * torch.sign(c.mean() - c))
                c.zero_()
        stats["grad_norm"] = gn.detach()
        return stats, padded

    def lr_at(self, step):
        a = self.a
        floor = 5 if a.smoke else 20
        total = self.total_steps or 10 ** 9
        warm = max(floor, int(a.warmup_frac * self.total_steps)) if self.total_steps else floor
        if step < warm:
            return a.lr * (step + 1) / warm
        p = min(1.0, (step - warm) / max(1, total - warm))
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))

    def set_dense(self, dense):
        for _, attn in self.attns:
            ind = attn.indexer
            if not hasattr(ind, "_glm53_topk"):
                ind._glm53_topk = ind.index_topk
            ind.index_topk = MAX_LEN if dense else ind._glm53_topk

    # -- the loop -----------------------------------------------------------------------------------------
    def train(self):
        torch, a = self.torch, self.a
        train_deadline = self.deadline - a.export_reserve
        fpt = flops_per_token(self.spec)
        self.log(f"plan: ~{fpt / 1e6:.1f} MFLOP per training token -> {H200_BF16_FLOPS / fpt / 1e6:.0f}M tokens/s at "
                 "the H200's bf16 peak; the eager model is far from it, so the first steps are timed and the step "
                 f"count planned from them; {max(0.0, train_deadline - time.time()):.0f} s left for training")
        if a.steps:
            self.total_steps = a.steps
        win = dict(t=time.time(), tokens=0, steps=0, msum=0, mcnt=0, tsum=0, tcnt=0, main=0.0, mtp=0.0, kl=0.0, gn=0.0)
        step_times = []
        last_ckpt = time.time()
        bad = 0
        start_step = self.step
        while True:
            if self.total_steps is not None and self.step >= self.total_steps:
                self.log(f"train: planned {self.total_steps} steps done")
                break
            if time.time() >= train_deadline:
                self.log(f"train: deadline reached at step {self.step} (planned {self.total_steps}); ending gracefully")
                break
            dense = self.total_steps is None or self.step < a.dense_frac * self.total_steps
            self.set_dense(dense)
            for g in self.opt.param_groups:
                g["lr"] = self.lr_at(self.step)
            ts = time.time()
            epoch = self.batches.epoch
            idx = self.batches.next()
            if self.batches.epoch != epoch:   # every item seen once: from here on the model can memorise answers
                self.log(f"data: epoch {self.batches.epoch + 1} begins at step {self.step}; the training items repeat "
                         "from here (a falling training loss with a flat validation loss is memorisation: a larger "
                         "--data-scale gives every step new items)")
            if a.profile_step and self.step - start_step == a.profile_step:
                stats, padded = self.profiled_step(idx)
            else:
                stats, padded = self.train_step(idx)
            torch.cuda.synchronize()
            dt = time.time() - ts
            self.train_seconds += dt
            if stats is None:
                bad += 1
                self.log(f"step {self.step}: non-finite loss or gradient, step skipped ({bad} in a row)")
                if bad >= 20:
                    raise RuntimeError("20 non-finite losses in a row: training diverged")
                self.step += 1
                continue
            bad = 0
            self.step += 1
            self.tokens_seen += padded
            step_times.append(dt)
            for k in ("msum", "mcnt", "tsum", "tcnt"):
                win[k] = win[k] + stats[k]
            win["main"] += float(stats["main"])
            win["mtp"] += float(stats["mtp"])
            win["kl"] += float(stats["kl"])
            win["gn"] += float(stats["grad_norm"])
            win["tokens"] += padded
            win["steps"] += 1
            done = self.step - start_step
            if not a.steps and done in (12, 60):
                sample = step_times[2:] if done == 12 else step_times[12:]
                per = sum(sample) / len(sample)
                left = train_deadline - time.time()
                self.total_steps = self.step + max(1, int(left / per))
                self.log(f"plan: {per * 1e3:.0f} ms per step measured over {len(sample)} steps "
                         f"({a.step_tokens / per / 1e3:.1f}k padded tokens/s): {self.total_steps} steps in all, "
                         f"~{self.total_steps * a.step_tokens / 1e6:.0f}M padded tokens, dense phase until step "
                         f"{int(a.dense_frac * self.total_steps)}")
            if time.time() - win["t"] >= a.log_seconds or (self.total_steps and self.step >= self.total_steps):
                self.log_window(win, dense)
                win = dict(t=time.time(), tokens=0, steps=0, msum=0, mcnt=0, tsum=0, tcnt=0, main=0.0, mtp=0.0,
                           kl=0.0, gn=0.0)
            if time.time() - last_ckpt >= a.ckpt_minutes * 60:
                self.save_checkpoint()
                self.validate()
                last_ckpt = time.time()
        if win["steps"]:
            self.log_window(win, False)
        self.set_dense(False)

    def profiled_step(self, idx):
        """train_step under torch.profiler: where a step's time goes (the next lever for more steps per minute).
        Writes RUN/profile.txt (operators by total device time) and logs the head of it with the kernel count."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        t0 = time.time()
        with profile(activities=acts) as prof:
            out = self.train_step(idx)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        wall = time.time() - t0
        events = prof.key_averages()
        cuda = torch.cuda.is_available()
        sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        table = events.table(sort_by=sort, row_limit=40)
        kernels = sum(e.count for e in prof.events() if getattr(e, "device_type", None) is not None
                      and "CUDA" in str(e.device_type))
        device_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in events)
        lens = self.train_ds["lengths"][idx]
        head = (f"profile: step of {len(idx)} x {int(lens.max())} tokens, wall {wall * 1e3:.0f} ms (profiler on), "
                f"device time {device_us / 1e3:.0f} ms in {kernels} device events")
        with open(os.path.join(self.a.run, "profile.txt"), "w") as fh:
            fh.write(head + "\n" + table + "\n")
        self.log(head + f"; table in {os.path.join(self.a.run, 'profile.txt')}")
        for line in table.splitlines()[:18]:
            self.log("profile| " + line)
        return out

    def log_window(self, win, dense):
        n = max(1, win["steps"])
        el = time.time() - win["t"]
        fam = {f: float(win["msum"][i] / win["mcnt"][i]) for i, f in enumerate(FAMILIES) if float(win["mcnt"][i]) > 0}
        mfam = {f: float(win["tsum"][i] / win["tcnt"][i]) for i, f in enumerate(FAMILIES) if float(win["tcnt"][i]) > 0}
        tok_s = win["tokens"] / max(el, 1e-9)
        rec = dict(step=self.step, t=round(time.time() - self.t0, 1), lr=self.lr_at(self.step - 1),
                   loss=win["main"] / n, mtp=win["mtp"] / n, kl=win["kl"] / n, grad_norm=win["gn"] / n, family=fam,
                   mtp_family=mfam, tokens_per_s=tok_s, dense=dense, mem_gb=self.torch.cuda.max_memory_allocated() / 1e9)
        self.history.append(rec)
        eta = ""
        if self.total_steps:
            per = self.train_seconds / max(1, self.step)
            eta = f" | ETA {max(0, self.total_steps - self.step) * per / 60:.1f} min"
        fams = " ".join(f"{k[:5]} {v:.3f}" for k, v in fam.items())
        self.log(f"step {self.step}/{self.total_steps or '?'} | {(time.time() - self.t0) / 60:.1f} min | lr "
                 f"{rec['lr']:.2e} | loss {rec['loss']:.4f} ({fams}) | mtp {rec['mtp']:.4f} | kl {rec['kl']:.4f} | "
                 f"gnorm {rec['grad_norm']:.2f} | {tok_s / 1e3:.1f}k tok/s{eta} | mem {rec['mem_gb']:.1f} GB"
                 f"{' | dense' if dense else ''}")

    def validate(self):
        """Teacher-forced loss per family on the held-out validation items."""
        torch, np = self.torch, self.np
        ds = self.val_ds
        self.model.eval()
        self.mtp.eval()
        nf = len(FAMILIES)
        ms, mc_, ts, tc = (np.zeros(nf) for _ in range(4))
        with torch.no_grad():
            for idx in length_groups(np, ds["lengths"], self.a.step_tokens):
                _, st = self.forward(make_batch(np, ds, idx, self.pad_id, self.pixels), train=False)
                ms += st["msum"].cpu().numpy()
                mc_ += st["mcnt"].cpu().numpy()
                ts += st["tsum"].cpu().numpy()
                tc += st["tcnt"].cpu().numpy()
        self.model.train()
        self.mtp.train()
        rec = dict(step=self.step, main={f: ms[k] / mc_[k] for k, f in enumerate(FAMILIES) if mc_[k]},
                   mtp={f: ts[k] / tc[k] for k, f in enumerate(FAMILIES) if tc[k]})
        self.val_history.append(rec)
        self.log("val: " + " ".join(f"{f} {v:.4f}" for f, v in rec["main"].items()) + " | mtp " +
                 " ".join(f"{f} {v:.4f}" for f, v in rec["mtp"].items()))
        return rec

    # -- checkpoints --------------------------------------------------------------------------------------
    def save_checkpoint(self):
        torch = self.torch
        path = os.path.join(self.a.run, "ckpt.pt")
        t = time.time()
        state = dict(model=self.model.state_dict(), mtp=self.mtp.state_dict(), opt=self.opt.state_dict(),
                     step=self.step, total_steps=self.total_steps, tokens_seen=self.tokens_seen,
                     train_seconds=self.train_seconds, batches=self.batches.state(), history=self.history,
                     val_history=self.val_history, spec=self.spec, args=vars(self.a),
                     rng=dict(python=random.getstate(), torch=torch.get_rng_state(), cuda=torch.cuda.get_rng_state()))
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        self.log(f"checkpoint: {path} at step {self.step} ({time.time() - t:.1f} s)")

    def load_checkpoint(self):
        torch = self.torch
        path = os.path.join(self.a.run, "ckpt.pt")
        if not os.path.exists(path):
            raise RuntimeError(f"--resume: no checkpoint at {path} (a fresh device machine has none: rerun without "
                               "--resume, or continue from an export with --init-from)")
        st = torch.load(path, map_location="cuda", weights_only=False)
        if st["spec"]["text"] != self.spec["text"]:
            raise RuntimeError(f"--resume: {path} holds another model configuration")
        self.model.load_state_dict(st["model"])
        self.mtp.load_state_dict(st["mtp"])
        self.opt.load_state_dict(st["opt"])
        self.step, self.total_steps = st["step"], st["total_steps"]
        self.tokens_seen, self.train_seconds = st["tokens_seen"], st["train_seconds"]
        self.history, self.val_history = st["history"], st["val_history"]
        self.batches.restore(st["batches"])
        random.setstate(st["rng"]["python"])
        torch.set_rng_state(st["rng"]["torch"].cpu())
        torch.cuda.set_rng_state(st["rng"]["cuda"].cpu())
        self.log(f"resume: step {self.step} of {self.total_steps}, {self.tokens_seen / 1e6:.1f}M tokens seen")

    # -- outputs ------------------------------------------------------------------------------------------
    def write_plots(self):
        h = self.history
        series = [("train loss", [(r["step"], r["loss"]) for r in h], False),
                  ("MTP loss", [(r["step"], r["mtp"]) for r in h], False),
                  ("indexer KL", [(r["step"], r["kl"]) for r in h], False)]
        for f in FAMILIES:
            series.append((f"train {f}", [(r["step"], r["family"].get(f)) for r in h], False))
        for f in FAMILIES:
            series.append((f"val {f}", [(v["step"], v["main"].get(f)) for v in self.val_history], True))
        with open(os.path.join(self.a.run, "loss.svg"), "w") as fh:
            fh.write(svgplot.loss_svg(series, f"glm53-tiny ({self.a.size}) training"))
        with open(os.path.join(self.a.run, "history.json"), "w") as fh:
            json.dump(dict(history=h, val=self.val_history), fh, indent=1, default=float)

    def export(self):
        self.inputs.remove()
        for hk in self.router_hooks:
            hk.remove()
        last = self.history[-1] if self.history else {}
        meta = dict(model="glm53-tiny" if self.a.size == "full" else "glm53-tiny-smoke",
                    trained=dict(steps=self.step, padded_tokens=self.tokens_seen, train_seconds=round(self.train_seconds, 1),
                                 final_loss=last.get("loss"), final_family_loss=last.get("family"),
                                 final_mtp_loss=last.get("mtp"), final_kl=last.get("kl"),
                                 val=self.val_history[-1] if self.val_history else None),
                    config_source="training/model_config.py", data="training/data.py (seed %d)" % self.a.data_seed,
                    notes=self.notes)
        meta_out, errors = self.G.export(self.model, self.mtp, self.spec, self.a.export_dir, meta, self.log)
        if errors:
            raise RuntimeError("export checks failed: " + "; ".join(errors))
        return meta_out


def main(argv=None):
    a = parse_args(argv)
    if a.dry_run:
        return dry_run(a)
    os.makedirs(a.run, exist_ok=True)
    log = Log(os.path.join(a.run, "train.log"))
    log(f"train.py {' '.join(sys.argv[1:])}: run {a.run}, budget {a.minutes} min")
    tr = Trainer(a, log)
    summary = dict(ok=False, run=a.run, export_dir=a.export_dir, failed_stage=None)
    try:
        tr.run_stage("imports (torch, transformers)", tr.imports)
        tr.run_stage("data (generate, render, tokenize)", tr.prepare_data)
        tr.run_stage("vision pixel path", tr.vision_pixels)
        tr.run_stage("model", tr.build_model)
        tr.run_stage("self-check of the hooks against transformers", tr.self_check)
        train_error = None
        try:
            tr.run_stage("training", tr.train)
        except StageFailed as e:
            train_error = e
        if tr.step == 0:
            raise train_error or StageFailed("training (no step was made)")
        tr.run_stage("checkpoint", tr.save_checkpoint)
        try:
            tr.run_stage("validation", tr.validate)
        except StageFailed:
            tr.notes.append("final validation failed (see train.log)")
        tr.write_plots()
        meta = tr.run_stage("export", tr.export)
        summary.update(steps=tr.step, total_steps=tr.total_steps, padded_tokens=tr.tokens_seen,
                       train_seconds=round(tr.train_seconds, 1), final=tr.history[-1] if tr.history else None,
                       val=tr.val_history[-1] if tr.val_history else None, notes=tr.notes,
                       model_bytes=meta.get("model_safetensors_bytes"))
        if train_error:
            summary["exported_after_failure"] = True
            raise train_error
        summary["ok"] = True
    except StageFailed as e:
        summary["failed_stage"] = str(e)
    finally:
        summary["wall_seconds"] = round(time.time() - tr.t0, 1)
        with open(os.path.join(a.run, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2, default=float)
        log(f"summary: {'OK' if summary['ok'] else 'FAILED at ' + str(summary['failed_stage'])} "
            f"({summary['wall_seconds']} s) -> {os.path.join(a.run, 'summary.json')}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
