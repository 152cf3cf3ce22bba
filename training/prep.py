"""Training-set preparation for train.py: generate, render, tokenize, draw (numpy + HF tokenizers; no torch).

Runs in a pool of worker processes (spawned, so they never inherit CUDA state). Each worker produces, for a range
of items of one family and split, the token ids, the loss mask (1 on the tokens the model is trained to
produce), the family and, for vision items, the picture as uint8 RGB. The result is cached in RUN/data and reused
when the inputs are unchanged (the cache key hashes the generator and template sources, the tokenizer, the
counts and the seed).

Vision pixel values are made from the RGB pictures by a per-channel lookup table and a fixed patch permutation,
both read off transformers' Glm5NextImageProcessor itself (vision_pixels below), and checked bit for bit against
the processor on real pictures before training; if they differ, every batch is preprocessed by the processor.
"""

import hashlib
import json
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import data as D  # noqa: E402

FAMILY_ID = {f: i for i, f in enumerate(D.FAMILIES)}

# Items per family for the full run (~43M tokens in all; docs/tiny-model.md) and for --smoke.
FULL_COUNTS = dict(arith=120000, mc=80000, retrieval=16000, tools=30000, vision=45000)
SMOKE_COUNTS = dict(arith=300, mc=200, retrieval=60, tools=100, vision=120)
VAL_COUNTS = dict(arith=64, mc=64, retrieval=40, tools=64, vision=64)
CHUNK = 2000


class PrepError(RuntimeError):
    pass


# ----------------------------------------------------------------------------------------------------------
# Worker side
# ----------------------------------------------------------------------------------------------------------

_tok = None


def _tokenizer(path):
    global _tok
    if _tok is None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        from tokenizers import Tokenizer

        _tok = Tokenizer.from_file(path)
    return _tok


def _renderer(name):
    import chat

    return chat.render_jinja if name == "jinja2" else chat.render_python


def build_chunk(job):
    """job: dict(family, split, start, count, seed, tokenizer, renderer, image_token, image_tokens, max_len).
    -> dict(tokens int16 [N], mask uint8 [N], lengths int32 [n], rgb uint8 [n_img, H, W, 3] or None, dropped)."""
    import numpy as np

    fam, split = job["family"], job["split"]
    tok = _tokenizer(job["tokenizer"])
    render = _renderer(job["renderer"])
    items, texts = [], []
    for i in range(job["start"], job["start"] + job["count"]):
        opts = dict(job.get("train_opts") or {}) if split == "train" else {}
        if fam == "retrieval" and split == "heldout":
            opts["tokens"] = D.RETRIEVAL_HELDOUT_LENGTHS[i % len(D.RETRIEVAL_HELDOUT_LENGTHS)]
        it = D.make_item(fam, split, i, job["seed"], **opts)
        D.check_markers(it)
        text, spans = D.training_text(it, render)
        pieces, flags, pos = [], [], 0
        for s, e in spans:
            pieces += [text[pos:s], text[s:e]]
            flags += [0, 1]
            pos = e
        if pos < len(text):
            pieces.append(text[pos:])
            flags.append(0)
        items.append((it, text, pieces, flags))
        texts.extend(pieces)
    encs = tok.encode_batch(texts, add_special_tokens=False)
    out_tok, out_mask, lengths, rgbs, dropped = [], [], [], [], 0
    k = 0
    for n, (it, text, pieces, flags) in enumerate(items):
        ids, mask = [], []
        for flag in flags:
            e = encs[k].ids
            k += 1
            ids += e
            mask += [flag] * len(e)
        if n < 8:  # the pieces tokenize like the whole text (every cut is next to an added token)
            whole = tok.encode(text, add_special_tokens=False).ids
            if whole != ids:
                raise PrepError(f"{it['id']}: tokenizing the loss spans separately gives other ids than the whole "
                                f"text ({len(ids)} vs {len(whole)} tokens)")
        if fam == "vision":
            j = ids.index(job["image_token"])
            if ids.count(job["image_token"]) != 1:
                raise PrepError(f"{it['id']}: expected one <|image|> placeholder, found {ids.count(job['image_token'])}")
            n_img = job["image_tokens"]
            ids = ids[:j] + [job["image_token"]] * n_img + ids[j + 1:]
            mask = mask[:j] + [0] * n_img + mask[j + 1:]
        if len(ids) > job["max_len"]:
            dropped += 1
            continue
        if fam == "vision":
            m = it["meta"]
            rgbs.append(np.frombuffer(D.draw_scene(m["scene"]), np.uint8).reshape(m["height"], m["width"], 3))
        out_tok.append(np.asarray(ids, np.int16))
        out_mask.append(np.asarray(mask, np.uint8))
        lengths.append(len(ids))
    if not out_tok:
        raise PrepError(f"{fam}/{split} items {job['start']}..: every item is longer than {job['max_len']} tokens")
    return dict(family=fam, split=split, start=job["start"], tokens=np.concatenate(out_tok), mask=np.concatenate(out_mask),
                lengths=np.asarray(lengths, np.int32), rgb=np.stack(rgbs) if rgbs else None, dropped=dropped)


# ----------------------------------------------------------------------------------------------------------
# Parent side
# ----------------------------------------------------------------------------------------------------------

def _sources_hash(paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def cache_key(counts, val_counts, seed, tokenizer, renderer, image_tokens, max_len, train_opts=None):
    src = [os.path.join(HERE, f) for f in ("data.py", "chat.py", "prep.py", "chat_template.jinja")] + [tokenizer]
    fields = dict(counts=counts, val=val_counts, seed=seed, renderer=renderer, image_tokens=image_tokens,
                  max_len=max_len, src=_sources_hash(src))
    if train_opts:  # only when given, so the keys of earlier runs' caches stay what they were
        fields["train_opts"] = train_opts
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def _assemble(results, np):
    results = sorted(results, key=lambda r: (FAMILY_ID[r["family"]], r["start"]))
    lengths = np.concatenate([r["lengths"] for r in results])
    family = np.concatenate([np.full(len(r["lengths"]), FAMILY_ID[r["family"]], np.int8) for r in results])
    tokens = np.concatenate([r["tokens"] for r in results])
    mask = np.concatenate([r["mask"] for r in results])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    image = np.full(len(lengths), -1, np.int32)
    rgb = [r["rgb"] for r in results if r["rgb"] is not None]
    vis = np.flatnonzero(family == FAMILY_ID["vision"])
    image[vis] = np.arange(len(vis), dtype=np.int32)
    rgb = np.concatenate(rgb) if rgb else np.zeros((0, D.IMAGE_SIZE, D.IMAGE_SIZE, 3), np.uint8)
    if len(rgb) != len(vis):
        raise PrepError(f"{len(rgb)} pictures for {len(vis)} vision items")
    return dict(tokens=tokens, mask=mask, offsets=offsets, lengths=lengths, family=family, image=image, rgb=rgb,
                dropped=int(sum(r["dropped"] for r in results)))


def prepare(run_dir, counts, val_counts, seed, tokenizer, renderer, image_token, image_tokens, max_len, workers,
            log=print, train_opts=None):
    """-> dict(train=..., val=...) of the arrays described in _assemble, from the cache when it matches.
    train_opts: {family: {generator option: value}} for the training split (held-out items never change)."""
    import numpy as np

    key = cache_key(counts, val_counts, seed, tokenizer, renderer, image_tokens, max_len, train_opts)
    ddir = os.path.join(run_dir, "data")
    stamp = os.path.join(ddir, "key.txt")
    if os.path.exists(stamp) and open(stamp).read().strip() == key:
        t0 = time.time()
        out = {s: dict(np.load(os.path.join(ddir, f"{s}.npz"))) for s in ("train", "val")}
        for s in out:
            out[s]["dropped"] = int(out[s]["dropped"])
        log(f"data: cached set {key} loaded from {ddir} in {time.time() - t0:.1f} s")
        return out
    jobs = []
    for split, cnt in (("train", counts), ("heldout", val_counts)):
        for fam in D.FAMILIES:
            for start in range(0, cnt[fam], CHUNK):
                jobs.append(dict(family=fam, split=split, start=start, count=min(CHUNK, cnt[fam] - start), seed=seed,
                                 tokenizer=tokenizer, renderer=renderer, image_token=image_token,
                                 image_tokens=image_tokens, max_len=max_len,
                                 train_opts=(train_opts or {}).get(fam)))
    jobs.sort(key=lambda j: -j["count"] * (30 if j["family"] == "retrieval" else 1))  # long jobs first
    t0 = time.time()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(max(1, workers)) as pool:
        results = []
        for r in pool.imap_unordered(build_chunk, jobs):
            results.append(r)
    log(f"data: {len(jobs)} chunks generated, rendered ({renderer}) and tokenized in {time.time() - t0:.1f} s "
        f"with {workers} workers")
    out = {}
    for split, name in (("train", "train"), ("heldout", "val")):
        out[name] = _assemble([r for r in results if r["split"] == split], np)
    os.makedirs(ddir, exist_ok=True)
    for name in ("train", "val"):
        np.savez(os.path.join(ddir, f"{name}.npz"), **out[name])
    with open(stamp, "w") as f:
        f.write(key + "\n")
    return out


def describe(ds):
    """Per family: items, tokens, trained tokens, mean length."""
    import numpy as np

    rows = {}
    for fam, fid in FAMILY_ID.items():
        sel = ds["family"] == fid
        n = int(sel.sum())
        if not n:
            continue
        tok = int(ds["lengths"][sel].sum())
        idx = np.flatnonzero(sel)
        trained = int(sum(int(ds["mask"][ds["offsets"][i]:ds["offsets"][i + 1]].sum()) for i in idx[:2000]))
        trained = int(trained * n / min(n, 2000))
        rows[fam] = dict(items=n, tokens=tok, trained_tokens_est=trained, mean_len=tok / n,
                         max_len=int(ds["lengths"][sel].max()))
    return rows


# ----------------------------------------------------------------------------------------------------------
# Vision pixel values
# ----------------------------------------------------------------------------------------------------------

def patch_permutation(np, h, w, patch=14, temporal=2, merge=2):
    """For an image [3, h, w] (h, w multiples of patch*merge, no resize): the flat source index (c*h*w + y*w + x) of
    every element of pixel_values [gh*gw, 3*temporal*patch*patch], in the processor's order (rows by 2x2 merge
    block, values by channel, frame, y, x; a still image repeats its frame)."""
    gh, gw = h // patch, w // patch
    src = np.arange(3 * h * w, dtype=np.int64).reshape(1, 3, h, w)
    src = np.repeat(src, temporal, axis=0)  # [temporal, 3, h, w]
    p = src.reshape(1, temporal, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    p = p.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return p.reshape(gh * gw, 3 * temporal * patch * patch)


class VisionPixels:
    """pixel_values for uint8 RGB pictures, read off the HF processor (lookup table + permutation) and checked."""

    def __init__(self, processor, np, torch, h=D.IMAGE_SIZE, w=D.IMAGE_SIZE):
        from PIL import Image

        self.np, self.torch, self.Image, self.proc = np, torch, Image, processor
        self.h, self.w = h, w
        self.perm = patch_permutation(np, h, w)
        probe = (np.arange(h * w) % 256).astype(np.uint8).reshape(h, w)
        probe = np.stack([probe, np.roll(probe, 85), np.roll(probe, 170)], axis=-1)  # all 256 values per channel
        pv, grid = self.run_processor([probe])
        self.grid = [1, h // 14, w // 14]
        self.exact, self.lut, self.reason = False, None, ""
        if list(grid[0]) != self.grid or tuple(pv.shape) != self.perm.shape:
            self.reason = (f"processor output {tuple(pv.shape)} grid {list(grid[0])} for a {h}x{w} picture; expected "
                           f"{self.perm.shape} grid {self.grid}")
            return
        chw = probe.transpose(2, 0, 1).reshape(-1)  # source value of every (c, y, x)
        vals = pv.reshape(-1)
        srcv = chw[self.perm.reshape(-1)]
        chan = self.perm.reshape(-1) // (h * w)
        lut = np.full((3, 256), np.nan, np.float32)
        for c in range(3):
            sel = chan == c
            lut[c, srcv[sel]] = vals[sel]
            # every occurrence of a value must map to the same float: a per-pixel map in this patch order
            if not np.array_equal(lut[c, srcv[sel]], vals[sel]):
                self.reason = "the processor output is not a per-pixel map in the expected patch order"
                return
        if np.isnan(lut).any():
            self.reason = "lookup table incomplete"
            return
        self.lut = lut

    def run_processor(self, rgbs):
        imgs = [self.Image.fromarray(np_img, "RGB") for np_img in rgbs]
        res = self.proc(images=imgs, return_tensors="pt")
        return res["pixel_values"].float().numpy(), res["image_grid_thw"].numpy()

    def lut_pixels(self, rgbs):
        np = self.np
        chw = np.asarray(rgbs).transpose(0, 3, 1, 2)  # [n, 3, h, w] uint8
        vals = np.stack([self.lut[c][chw[:, c]] for c in range(3)], axis=1).reshape(len(chw), -1)
        return vals[:, self.perm].reshape(-1, self.perm.shape[1])

    def verify(self, rgbs):
        """Bit-for-bit check of the lookup path against the processor on real pictures. -> (exact, max abs diff)."""
        if self.lut is None:
            return False, None
        pv, _ = self.run_processor(list(rgbs))
        mine = self.lut_pixels(rgbs)
        same_shape = pv.shape == mine.shape
        self.exact = bool(same_shape and self.np.array_equal(pv.view(self.np.uint32), mine.view(self.np.uint32)))
        if not self.exact:
            self.reason = "lookup-table pixels differ from the processor's"
        return self.exact, (float(self.np.abs(pv - mine).max()) if same_shape else None)

    def __call__(self, rgbs):
        """-> (pixel_values float32 [n*patches, 1176], image_grid_thw int64 [n, 3])."""
        np = self.np
        if self.exact:
            pv = self.lut_pixels(rgbs)
        else:
            pv, _ = self.run_processor(list(rgbs))
        grid = np.tile(np.asarray(self.grid, np.int64), (len(rgbs), 1))
        return pv, grid
