"""The torch side of the tiny model (GPU machine only): transformers' Glm5Next plus our MTP layer, the KPool
indexer's KL loss, self-checks of the hooks against transformers, and saving/loading in the checkpoint layout.

Imported by train.py, export.py and check_hf.py. Everything here that touches transformers internals
(module classes, argument names, return shapes) is checked with an assert whose message names what was
expected, so a changed transformers fails loudly at the first step rather than training something else.
"""

import copy
import json
import math
import os
import re
import shutil
import sys
import time
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fast_ops  # noqa: E402
import model_config as mc  # noqa: E402

mf = mc.mf
PREFIX = mf.PREFIX
M = None  # transformers.models.glm5_next.modeling_glm5_next, after setup()


class CheckError(RuntimeError):
    pass


def setup(device="auto"):
    """Imports transformers through make_fixtures (so its helpers work) and re-enables autograd, which
    make_fixtures.lazy_imports turns off for its reference computations."""
    global M
    mf.lazy_imports(device)
    torch.set_grad_enabled(True)
    M = mf.X.M
    for name in ("Glm5NextForConditionalGeneration", "Glm5NextTextAttention", "Glm5NextTextIndexer",
                 "Glm5NextTextMoE", "Glm5NextTextRMSNorm", "Glm5NextTextTopkRouter", "Glm5NextTextLinearAttention"):
        if not hasattr(M, name):
            raise CheckError(f"transformers' glm5_next has no {name} (version {mf.X.env['transformers']}); "
                             f"train.py was written against transformers 5.17")
    return mf.X


# ----------------------------------------------------------------------------------------------------------
# Configs and the model
# ----------------------------------------------------------------------------------------------------------

def mtp_config(spec):
    """The config of a model whose layer L = num_hidden_layers is a DSA (full indexer) + MoE layer: the MTP layer's
    modules are built from its text_config (make_fixtures.mtp_template_text, validated by transformers)."""
    return mf.build_config(mf.mtp_template_text(spec["text"], spec["mtp_layers"]), spec["vision"], spec["top"])


class MTPLayer(nn.Module):
    """The DeepSeek NextN layer stored as checkpoint layer L = num_hidden_layers (architecture reference 4.10,
    core/model.c run_mtp_step):

        z = eh_proj([enorm(embed(x_{p+1})) | hnorm(h_p)]);  r = z + DSA(input_layernorm(z))
        out = r + MoE(post_attention_layernorm(r));  h' = shared_head.norm(out);  logits = lm_head(h')

    h_p is the main model's final hidden (after the stream mean and the final norm); row p predicts x_{p+2}.
    Plain residuals (no mHC); its own DSA attention with its own KPool indexer; embedding and lm_head shared."""

    def __init__(self, attn, mlp, input_layernorm, post_attention_layernorm, hidden, eps, init_std):
        super().__init__()
        self.enorm = M.Glm5NextTextRMSNorm(hidden, eps)
        self.hnorm = M.Glm5NextTextRMSNorm(hidden, eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        nn.init.normal_(self.eh_proj.weight, mean=0.0, std=init_std)
        self.input_layernorm = input_layernorm
        self.self_attn = attn
        self.post_attention_layernorm = post_attention_layernorm
        self.mlp = mlp
        self.shared_head = nn.Module()
        self.shared_head.norm = M.Glm5NextTextRMSNorm(hidden, eps)

    def forward(self, h, next_embeds):
        B, S, _ = h.shape
        z = self.eh_proj(torch.cat([self.enorm(next_embeds), self.hnorm(h)], dim=-1))
        mask = torch.ones(B, S, dtype=torch.bool, device=h.device)
        out = self.self_attn(hidden_states=self.input_layernorm(z), attention_mask=mask)
        if not (isinstance(out, tuple) and len(out) == 3):
            raise CheckError(f"Glm5NextTextAttention returned {type(out).__name__} of length "
                             f"{len(out) if isinstance(out, tuple) else '-'}; expected (output, weights, topk)")
        r = z + out[0]
        r = r + self.mlp(self.post_attention_layernorm(r))
        return self.shared_head.norm(r)


def build(spec, seed, notes):
    """-> (model, mtp): transformers' own initialisation for both (the MTP layer's DSA + MoE modules are taken
    from a transformers model with one more layer, built with seed + 1)."""
    t = spec["text"]
    cfg = mf.build_config(t, spec["vision"], spec["top"])
    torch.manual_seed(seed)
    model = M.Glm5NextForConditionalGeneration(cfg)
    mf.force_eager(model, notes)
    torch.manual_seed(seed + 1)
    tmpl = M.Glm5NextForConditionalGeneration(mtp_config(spec))
    mf.force_eager(tmpl, notes)
    L = t["num_hidden_layers"]
    blk = tmpl.model.language_model.layers[L]
    if not isinstance(blk.self_attn, M.Glm5NextTextAttention) or not isinstance(blk.mlp, M.Glm5NextTextMoE):
        raise CheckError(f"template layer {L} is {type(blk.self_attn).__name__} + {type(blk.mlp).__name__}, "
                         "expected Glm5NextTextAttention + Glm5NextTextMoE")
    torch.manual_seed(seed + 2)
    mtp = MTPLayer(blk.self_attn, blk.mlp, blk.input_layernorm, blk.post_attention_layernorm, t["hidden_size"],
                   t["rms_norm_eps"], cfg.text_config.initializer_range)
    del tmpl
    return model, mtp


def dsa_attentions(model, mtp=None):
    """[(name, Glm5NextTextAttention)] of the main model's DSA layers (and the MTP layer's)."""
    out = [(n, m) for n, m in model.named_modules() if isinstance(m, M.Glm5NextTextAttention)]
    if mtp is not None:
        out.append(("mtp.self_attn", mtp.self_attn))
    for n, m in out:
        if m.indexer is None:
            raise CheckError(f"{n} has no indexer (a 'shared' indexer layer): the KL loss needs its own indexer")
    return out


KDA_CHUNK = fast_ops.KDA_CHUNK


def wrap_kda(counter):
    """Run KDA's chunked form as fast_ops.kda_chunk_parallel (a log-depth scan over chunks instead of transformers'
    Python loop over them; the same mathematics, checked against transformers' function by check_fast_ops) with
    autocast off, so its float32 math stays float32 inside a bf16-autocast step."""
    orig = M.chunk_kimi_delta_attention
    if getattr(orig, "_glm53_wrapped", False):
        return

    def chunk_kda_training(*a, **k):
        counter[0] += 1
        k["chunk_size"] = KDA_CHUNK
        with torch.autocast("cuda", enabled=False):
            return fast_ops.kda_chunk_parallel(*a, **k)

    chunk_kda_training._glm53_wrapped = True
    chunk_kda_training._glm53_orig = orig
    M.chunk_kimi_delta_attention = chunk_kda_training


def dense_experts(model, mtp):
    """Every Glm5NextTextExperts module runs fast_ops.moe_experts_dense (two GEMMs over all experts) instead of
    transformers' per-expert loop with a host synchronisation per expert. -> the number of modules changed."""
    n = 0
    for mod in list(model.modules()) + list(mtp.modules()):
        if isinstance(mod, M.Glm5NextTextExperts):
            mod._glm53_loop_forward = mod.forward
            mod.forward = types.MethodType(fast_ops.moe_experts_dense, mod)
            n += 1
    return n


def _timed(fn, reps=5):
    """Median wall time of fn() on the GPU in ms (after one warm-up call)."""
    fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def check_fast_ops(model, device, log):
    """fast_ops against transformers' own functions in float32 (TF32 off), forward and backward, then their speed
    on a training-sized input. (1) kda_chunk_parallel vs chunk_kimi_delta_attention with KDA_CHUNK-token chunks
    (transformers' default 64-token chunks give NaN gradients at the decay bound, so the comparison of gradients
    is with 16); also the forward against the default chunking. (2) moe_experts_dense vs the experts' own loop.
    Raises CheckError naming what differs."""
    f = getattr(M.chunk_kimi_delta_attention, "_glm53_orig", M.chunk_kimi_delta_attention)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        g0 = torch.Generator(device="cpu").manual_seed(0)
        B, S, H, K = 2, 300, 4, 64
        q, k, v = (torch.randn(B, S, H, K, generator=g0).to(device) for _ in range(3))
        beta = torch.rand(B, S, H, generator=g0).to(device)
        g = -5.0 * torch.rand(B, S, H, K, generator=g0).to(device)
        g[..., : K // 2] = -4.95
        wout = torch.randn(B, S, H, K, generator=g0).to(device)
        res = {}
        for name, fn, chunk in (("transformers", f, KDA_CHUNK), ("fast", fast_ops.kda_chunk_parallel, KDA_CHUNK)):
            ins = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
            o, _ = fn(*ins[:3], g=ins[3], beta=ins[4], chunk_size=chunk, initial_state=None, output_final_state=False,
                      use_qk_l2norm_in_kernel=True)
            (o.float() * wout).sum().backward()
            res[name] = [o.detach().float()] + [x.grad.detach() for x in ins]
        with torch.no_grad():
            o64, _ = f(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=False,
                       use_qk_l2norm_in_kernel=True)
        worst = {}
        for i, name in enumerate(("out", "grad q", "grad k", "grad v", "grad g", "grad beta")):
            a, b = res["fast"][i], res["transformers"][i]
            if not torch.isfinite(a).all():
                raise CheckError(f"kda_chunk_parallel: {name} not finite")
            worst[name] = float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))
        worst["out vs 64-token chunks"] = float((res["fast"][0] - o64.float()).abs().max() / o64.abs().max())
        if max(worst.values()) > 1e-3:
            raise CheckError(f"kda_chunk_parallel differs from transformers' chunk_kimi_delta_attention: {worst}")
        log("check: kda_chunk_parallel equals transformers' chunk_kimi_delta_attention (max rel. diff "
            + ", ".join(f"{n} {d:.1e}" for n, d in worst.items()) + ")")

        ex = next(m for m in model.modules() if isinstance(m, M.Glm5NextTextExperts))
        E = ex.gate_up_proj.shape[0]
        T = 3000
        x = torch.randn(T, ex.gate_up_proj.shape[2], generator=g0).to(device).requires_grad_(True)
        idx = torch.stack([torch.randperm(E, generator=g0)[:2] for _ in range(T)]).to(device)
        w = torch.rand(T, 2, generator=g0).to(device).requires_grad_(True)
        wo = torch.randn(T, ex.gate_up_proj.shape[2], generator=g0).to(device)
        loop = getattr(ex, "_glm53_loop_forward", ex.forward)
        outs = []
        for fn in (loop, lambda *a: fast_ops.moe_experts_dense(ex, *a)):
            ex.zero_grad(set_to_none=True)
            o = fn(x, idx, w)
            gx, gw, gup, gdn = torch.autograd.grad((o * wo).sum(), [x, w, ex.gate_up_proj, ex.down_proj])
            outs.append([o.detach(), gx, gw, gup, gdn])
        d = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-6)) for a, b in zip(outs[1], outs[0])]
        if max(d) > 1e-4:
            raise CheckError(f"moe_experts_dense differs from the experts' loop: out/x/w/gate_up/down {d}")
        log(f"check: moe_experts_dense equals the experts' loop (max rel. diff {max(d):.1e} over output and gradients)")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32

    # speed on one training-sized input, as training runs it (TF32 as set by train.py)
    Bt, St = 16, 4096
    ins = [torch.randn(Bt, St, H, K, device=device).requires_grad_(True) for _ in range(3)]
    gt = (-5.0 * torch.rand(Bt, St, H, K, device=device)).requires_grad_(True)
    bt = torch.rand(Bt, St, H, device=device).requires_grad_(True)
    times = {}
    for name, fn in (("transformers", f), ("fast", fast_ops.kda_chunk_parallel)):
        def step(fn=fn):
            o, _ = fn(*ins, g=gt, beta=bt, chunk_size=KDA_CHUNK, initial_state=None, output_final_state=False,
                      use_qk_l2norm_in_kernel=True)
            o.float().sum().backward()
        times[name] = _timed(step, reps=3)
    log(f"speed: KDA forward + backward on [{Bt}, {St}, {H}, {K}]: transformers' chunk loop {times['transformers']:.0f} "
        f"ms, kda_chunk_parallel {times['fast']:.1f} ms ({times['transformers'] / times['fast']:.1f}x)")


# ----------------------------------------------------------------------------------------------------------
# The KPool indexer's KL loss (DeepSeek-V3.2 style)
# ----------------------------------------------------------------------------------------------------------

class AttentionInputs:
    """Forward pre-hooks on the DSA attention modules: keep each call's input (the normalised layer input x)."""

    def __init__(self, attns):
        self.attns = attns
        self.inputs = {}
        self.hooks = [m.register_forward_pre_hook(self._hook(n), with_kwargs=True) for n, m in attns]

    def _hook(self, name):
        def hook(mod, args, kwargs):
            x = kwargs.get("hidden_states", args[0] if args else None)
            if x is None or x.dim() != 3:
                raise CheckError(f"{name}: forward pre-hook found no [B, S, D] hidden_states "
                                 f"(args {len(args)}, kwargs {sorted(kwargs)})")
            self.inputs[name] = x
        return hook

    def clear(self):
        self.inputs = {}

    def remove(self):
        for h in self.hooks:
            h.remove()


def attention_qk(attn, x):
    """The MLA queries [B, H, S, qk] and keys [B, H, S, qk] of Glm5NextTextAttention.forward, recomputed from its
    input x with its own modules (NoPE: qk_rope_head_dim is 0)."""
    B, S, _ = x.shape
    q_resid = attn.q_a_layernorm(attn.q_a_proj(x))
    q = attn.q_b_proj(q_resid).view(B, S, -1, attn.qk_head_dim).transpose(1, 2)
    ckv = attn.kv_a_proj_with_mqa(x)
    kv_pass, k_rot = torch.split(ckv, [attn.kv_lora_rank, attn.qk_rope_head_dim], dim=-1)
    k_pass = attn.kv_a_layernorm(kv_pass).view(B, 1, S, attn.kv_lora_rank)
    k, _ = attn.expand_kv(k_pass, k_rot.view(B, 1, S, attn.qk_rope_head_dim))
    return q_resid, q, k


def dense_attention_probs(attn, q, k, rows):
    """softmax(q k^T * scaling) over causal keys for query positions `rows`: [B, H, R, S], float32."""
    S = k.shape[2]
    s = torch.matmul(q[:, :, rows].float(), k.float().transpose(-1, -2)) * attn.scaling
    causal = torch.arange(S, device=k.device)[None, :] <= rows[:, None]
    s = s.masked_fill(~causal, float("-inf"))
    return torch.softmax(s, dim=-1)


def index_scores(ind, x, q_resid, rows):
    """The indexer's pool scores for query positions `rows`, as Glm5NextTextIndexer.forward computes them
    (pools of index_kpool tokens from position 0, gated softmax compression with the learned ape, relu of the
    scaled head dot products weighted by weights_proj), with gradients: [B, R, G] float32 and the candidate mask
    [R, G] (pool g is a candidate for query t iff its last token g*P + P - 1 <= t)."""
    B, S, _ = x.shape
    P, Hi, di = ind.index_kpool, ind.n_heads, ind.head_dim
    G = S // P
    q = ind.wq_b(q_resid[:, rows]).view(B, len(rows), Hi, di)
    k = ind.k_norm(ind.wk(x[:, :G * P]))
    gate = F.linear(x[:, :G * P], ind.index_kpool_compress_gate)
    prob = torch.softmax(gate.float().view(B, G, P, di) + ind.index_kpool_compress_ape.float()[None, None], dim=2)
    pool_keys = (prob * k.float().view(B, G, P, di)).sum(dim=2)  # [B, G, di]
    sc = F.relu(torch.einsum("brhd,bgd->brhg", q.float(), pool_keys) * ind.softmax_scale)
    w = ind.weights_proj(x[:, rows]).float() * (Hi ** -0.5)
    scores = torch.einsum("brh,brhg->brg", w, sc)
    pool_end = torch.arange(G, device=x.device) * P + (P - 1)
    cand = pool_end[None, :] <= rows[:, None]
    return scores, cand


def indexer_kl(attn, x, lengths, rows):
    """KL(attention mass per pool || softmax of the indexer's pool scores) averaged over query rows with >= 2
    candidate pools inside the sequence. The attention side is dense causal attention (all heads summed,
    L1-normalised, restricted to the candidate pools and renormalised), computed without gradients; the inputs are
    detached, so only the indexer's parameters learn from it."""
    x = x.detach()
    ind = attn.indexer
    P = ind.index_kpool
    B, S, _ = x.shape
    G = S // P
    if G < 2:
        return None, 0
    with torch.no_grad():
        q_resid, q, k = attention_qk(attn, x)
        p = dense_attention_probs(attn, q, k, rows).mean(dim=1)  # [B, R, S]
        mass = p[..., :G * P].reshape(B, len(rows), G, P).sum(-1)  # [B, R, G]
    scores, cand = index_scores(ind, x, q_resid.detach(), rows)
    target = mass * cand[None]
    target = target / target.sum(-1, keepdim=True).clamp_min(1e-12)
    # a finite fill, not -inf: rows without candidates would give NaN through log_softmax's backward
    logq = torch.log_softmax(scores.masked_fill(~cand[None], -1e9), dim=-1)
    kl = torch.where(target > 0, target * (torch.log(target.clamp_min(1e-30)) - logq), torch.zeros_like(target)).sum(-1)
    ok = (cand.sum(-1) >= 2)[None, :] & (rows[None, :] < lengths[:, None])
    n = int(ok.sum())
    if n == 0:
        return None, 0
    return kl[ok].mean(), n


# ----------------------------------------------------------------------------------------------------------
# Self-checks against transformers (run before training; fp32, no autocast)
# ----------------------------------------------------------------------------------------------------------

def check_hooks(model, mtp, attns, ids, log):
    """Our recomputation of (1) the indexer's pool selection and (2) the dense attention must match transformers'
    own forward. (1) runs on a batch longer than index_topk (the selection bites), (2) needs every row dense.
    Raises CheckError naming the layer and the mismatch."""
    captured_idx, captured_attn = {}, {}
    hooks = []
    for n, m in attns:
        hooks.append(m.indexer.register_forward_hook(
            lambda mod, a, out, n=n: captured_idx.__setitem__(n, out.detach())))
        hooks.append(m.register_forward_hook(
            lambda mod, a, out, n=n: captured_attn.__setitem__(n, out[1].detach() if out[1] is not None else None)))
    inputs = AttentionInputs(attns)
    # full float32 matmuls: TF32's ~1e-3 rounding would flip near-ties between two differently shaped products
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad(), torch.autocast("cuda", enabled=False):
            out = model.model(input_ids=ids, use_cache=False)
            h = out.last_hidden_state
            emb = model.model.language_model.embed_tokens(ids[:, 1:])
            mtp(h[:, :-1], emb)
        report = {}
        for n, attn in attns:
            if n not in inputs.inputs or n not in captured_idx:
                raise CheckError(f"{n}: hooks did not fire (inputs {n in inputs.inputs}, indexer {n in captured_idx})")
            x = inputs.inputs[n]
            B, S, _ = x.shape
            ind = attn.indexer
            P = ind.index_kpool
            rows = torch.arange(S, device=x.device)
            q_resid, q, k = attention_qk(attn, x)
            scores, cand = index_scores(ind, x, q_resid, rows)
            G = scores.shape[-1]
            kk = min(ind.index_topk // P, G)
            masked = scores.masked_fill(~cand[None], torch.finfo(torch.float32).min).cpu()
            top = masked.topk(min(kk + 1, G), dim=-1).values
            ncand = cand.sum(-1).cpu().tolist()
            hf = captured_idx[n].long().cpu()  # [B, S, W] token ids, -1 unused
            agree = total = skipped = 0
            for b in range(B):
                for t in range(S):
                    if ncand[t] <= kk:
                        continue  # every candidate pool is kept: nothing to compare
                    gap = float(top[b, t, kk - 1] - top[b, t, kk])
                    if gap <= 1e-5 * max(float(top[b, t, 0].abs()), 1e-30):
                        skipped += 1
                        continue
                    mine = set(masked[b, t].topk(kk).indices.tolist())
                    toks = [x_ for x_ in hf[b, t].tolist() if x_ >= 0]
                    theirs = {x_ // P for x_ in toks if (x_ // P) * P + P - 1 <= t}
                    total += 1
                    agree += mine == theirs
            if total == 0:
                raise CheckError(f"{n}: the check batch (S={S}) never makes the indexer choose (index_topk "
                                 f"{ind.index_topk}); use a longer sequence")
            if agree < 0.98 * total:
                raise CheckError(f"{n}: our indexer scores select other pools than transformers' indexer in "
                                 f"{total - agree} of {total} rows (near-ties skipped: {skipped})")
            report[n] = dict(rows_compared=total, agree=agree, near_ties_skipped=skipped)
        log(f"check: indexer pool selection equals transformers' on {report}")
        # dense attention on a prefix short enough to be dense everywhere
        inputs.clear()
        captured_attn.clear()
        Sd = min(ids.shape[1], min(a.indexer.index_topk for _, a in attns))
        with torch.no_grad(), torch.autocast("cuda", enabled=False):
            out = model.model(input_ids=ids[:, :Sd], use_cache=False)
            h = out.last_hidden_state
            mtp(h[:, :-1], model.model.language_model.embed_tokens(ids[:, 1:Sd]))
        worst = 0.0
        for n, attn in attns:
            w = captured_attn.get(n)
            if w is None:
                raise CheckError(f"{n}: transformers returned no attention weights (eager attention expected)")
            x = inputs.inputs[n]
            rows = torch.arange(x.shape[1], device=x.device)
            _, q, k = attention_qk(attn, x)
            p = dense_attention_probs(attn, q, k, rows)
            if tuple(p.shape) != tuple(w.shape):
                raise CheckError(f"{n}: our attention probabilities {tuple(p.shape)} vs transformers' {tuple(w.shape)}")
            d = float((p - w.float()).abs().max())
            worst = max(worst, d)
            if d > 1e-4:
                raise CheckError(f"{n}: our dense attention differs from transformers' by {d:.3g} (max abs)")
        log(f"check: dense attention probabilities equal transformers' (max abs diff {worst:.2e}) on "
            f"{len(attns)} DSA layers, S={Sd}")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        for hk in hooks:
            hk.remove()
        inputs.remove()


# ----------------------------------------------------------------------------------------------------------
# The MTP layer in the checkpoint layout
# ----------------------------------------------------------------------------------------------------------

def _t_dims(text_config):
    tc = text_config
    return dict(linear_num_heads=tc.linear_num_heads, linear_head_dim=tc.linear_head_dim,
                moe_intermediate_size=tc.moe_intermediate_size)


def mtp_names(spec):
    """Checkpoint names of the MTP layer: make_fixtures.expected_tensors restricted to layer L."""
    L = spec["text"]["num_hidden_layers"]
    pre = f"{PREFIX}layers.{L}."
    return {n: v for n, v in mf.expected_tensors(spec).items() if n.startswith(pre)}


def mtp_to_checkpoint(mtp, spec, text_config):
    """name -> tensor (CPU, the module's dtype) under the checkpoint names; every element of every MTP parameter
    and persistent buffer is written exactly once (checked)."""
    L = spec["text"]["num_hidden_layers"]
    pre = f"{PREFIX}layers.{L}."
    t = _t_dims(text_config)
    sd = mtp.state_dict()
    covered = {k: 0 for k in sd}
    out = {}
    for name, (shape, _) in sorted(mtp_names(spec).items()):
        hf, idx, desc = mf.ckpt_to_hf(name, t)
        key = hf[len(pre):]
        if key not in sd:
            raise CheckError(f"MTP tensor {name}: maps to {key!r}, which the MTP module does not have")
        val = sd[key][idx].detach().cpu().clone().contiguous()
        if list(val.shape) != list(shape):
            raise CheckError(f"MTP tensor {name}: {desc} has shape {tuple(val.shape)}, the layout expects {shape}")
        out[name] = val
        covered[key] += val.numel()
    missing = [k for k, c in covered.items() if c != sd[k].numel()]
    if missing:
        raise CheckError(f"MTP state not fully written to the checkpoint: {missing[:5]}")
    return out


def mtp_from_checkpoint(mtp, files, spec, text_config):
    """Load checkpoint tensors (name -> tensor, FP8 already dequantised) into the MTP module; every element
    covered (checked)."""
    L = spec["text"]["num_hidden_layers"]
    pre = f"{PREFIX}layers.{L}."
    t = _t_dims(text_config)
    sd = mtp.state_dict()
    covered = {k: 0 for k in sd}
    with torch.no_grad():
        for name in sorted(mtp_names(spec)):
            if name not in files:
                raise CheckError(f"checkpoint has no MTP tensor {name}")
            hf, idx, desc = mf.ckpt_to_hf(name, t)
            key = hf[len(pre):]
            dst = sd[key][idx]
            src = files[name]
            if tuple(dst.shape) != tuple(src.shape):
                raise CheckError(f"MTP tensor {name}: file {tuple(src.shape)} vs module {desc} {tuple(dst.shape)}")
            dst.copy_(src.to(dst.dtype))
            covered[key] += src.numel()
    missing = [k for k, c in covered.items() if c != sd[k].numel()]
    if missing:
        raise CheckError(f"MTP state not fully covered by the checkpoint: {missing[:5]}")


def build_mtp_for(model, spec):
    """An MTP module (uninitialised values) for a loaded model, to be filled by mtp_from_checkpoint."""
    tc = mtp_config(spec).text_config
    L = spec["text"]["num_hidden_layers"]
    notes = []
    for attr in ("_attn_implementation", "_experts_implementation"):
        mf._force_cfg(tc, attr, notes)
    mtp = MTPLayer(M.Glm5NextTextAttention(tc, L), M.Glm5NextTextMoE(tc),
                   M.Glm5NextTextRMSNorm(tc.hidden_size, tc.rms_norm_eps),
                   M.Glm5NextTextRMSNorm(tc.hidden_size, tc.rms_norm_eps), tc.hidden_size, tc.rms_norm_eps, 0.02)
    # the fp32-kept buffer, as transformers keeps it
    mtp.mlp.gate.e_score_correction_bias.data = mtp.mlp.gate.e_score_correction_bias.data.float()
    return mtp


def load_exported(model_dir, spec, dtype=torch.float32, device=None):
    """-> (model, mtp, loading_info): transformers' from_pretrained (eager attention and experts) and our MTP
    layer from the same files (FP8 tensors dequantised)."""
    model, info, notes = mf.from_pretrained(model_dir)
    model = model.to(dtype)
    mtp = build_mtp_for(model, spec).to(dtype)
    files = mf.read_checkpoint(model_dir)
    deq = {n: mf.file_value(files, n) for n in files if not n.endswith("weight_scale_inv")}
    mtp_from_checkpoint(mtp, deq, spec, model.config.text_config)
    if device is not None:
        model, mtp = model.to(device), mtp.to(device)
    model.eval()
    mtp.eval()
    return model, mtp, info


# ----------------------------------------------------------------------------------------------------------
# Export: models/glm53-tiny in the real checkpoint layout
# ----------------------------------------------------------------------------------------------------------

def export(model, mtp, spec, outdir, extra_meta, log):
    """Writes outdir/: config.json, model.safetensors (BF16 with HF's fp32-kept tensors in F32, the MTP layer as
    layer L), generation_config.json (eos ids), tokenizer.json, tokenizer_config.json (with the chat template),
    meta.json. Then verifies the files against the in-memory model, the expected tensor listing and a
    transformers reload. -> (meta, errors)."""
    errors, meta = [], dict(extra_meta)
    t = spec["text"]
    if os.path.exists(outdir):
        shutil.rmtree(outdir)
    os.makedirs(outdir)
    m = copy.deepcopy(model).cpu().float().eval()
    mf.apply_storage_dtype(m, "bf16")
    mt = copy.deepcopy(mtp).cpu().float().eval()
    mf.apply_storage_dtype(mt, "bf16")
    m.save_pretrained(outdir)
    mtp_t = mtp_to_checkpoint(mt, spec, m.config.text_config)
    mf.merge_mtp(outdir, mtp_t, errors)
    mf.fix_config_json(outdir, spec, meta, errors, extra_text={"num_nextn_predict_layers": spec["mtp_layers"]})
    gen = dict(eos_token_id=mc.eos_ids(), pad_token_id=t["pad_token_id"], bos_token_id=None,
               transformers_version=mf.X.env["transformers"])
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(mc.TOKENIZER_DIR, fn), os.path.join(outdir, fn))
    mf.verify_file_vs_memory(outdir, m, t, mtp_t, meta, errors)
    mf.compare_expected_listing(outdir, spec, meta)
    diff = meta["checkpoint"]["expected_listing_diff"]
    if any(diff.values()):
        errors.append(f"checkpoint tensors differ from the expected layout: {diff}")
    size = os.path.getsize(os.path.join(outdir, "model.safetensors"))
    meta["model_safetensors_bytes"] = size
    if spec["name"].endswith("full") and size > mc.MAX_CHECKPOINT_BYTES:
        errors.append(f"model.safetensors is {size} bytes, over the {mc.MAX_CHECKPOINT_BYTES} limit")
    # reload with transformers and with our MTP loader: the same values
    try:
        lm, lmtp, info = load_exported(outdir, spec)
        probs, only_a, only_b = mf.compare_state(m, lm)
        if probs or only_a or only_b:
            errors.append(f"from_pretrained differs from the exported model: {(probs + only_a + only_b)[:5]}")
        a, b = mt.state_dict(), lmtp.state_dict()
        bad = [k for k in a if not torch.equal(a[k].double(), b[k].double())]
        if bad:
            errors.append(f"the MTP layer read back differs in {bad[:5]}")
        meta["reload"] = dict(ok=not (probs or only_a or only_b or bad),
                              unexpected_keys=info.get("unexpected_keys", [])[:8] if isinstance(info, dict) else None)
    except Exception as e:  # noqa: BLE001
        errors.append(f"reloading the export failed: {e!r}")
    meta["errors"] = errors
    with open(os.path.join(outdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2, default=mf._json_default)
        f.write("\n")
    log(f"export: {outdir}: {meta['checkpoint']['tensors']} tensors, {size / 1e6:.2f} MB, "
        f"{'OK' if not errors else 'ERRORS: ' + '; '.join(errors)}")
    return meta, errors
