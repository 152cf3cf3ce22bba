/*
 * vision.c - the GLM-5.3-Flash vision tower (checkpoint model.visual.*): loading its weights and encoding pixel
 * rows into text-space embedding rows, exactly as transformers' Glm5NextVisionModel computes them
 * (docs/architecture.md section 8). Written once against the backend op table, like the text model, and loaded
 * by the same loader (weights.c):
 *
 *   x[N,1176]  pixel rows (core/image.c), N patches in merge-block order
 *   h[N,Dv]    = x * W_patch^T + b                 (Conv3d with kernel = stride = (2,14,14): a matmul)
 *   per block: h += proj(attn(rope2d(qnorm(q)), rope2d(knorm(k)), v))   with q,k,v = rmsnorm1(h) * W^T + b,
 *                   attention bidirectional within each image / video temporal group (segments)
 *              h += down(swiglu_clamped(gate(rmsnorm2(h)), up(rmsnorm2(h))))   (all with biases)
 *   h = rmsnorm(h, post_layernorm)
 *   z[N/4,Do]  = h viewed [N/4, 4*Dv] * W_down'^T + b   (the 2x2 stride-2 Conv2d: the four patches of a merge
 *                block are consecutive rows, so it is a matmul; W_down' is the checkpoint's [Do, Dv, 2, 2]
 *                reordered once at load to [Do, (2x2 position, Dv)])
 *   e[N/4,Do]  = down(swiglu_clamped(gate(g), up(g))),  g = gelu(layernorm(z * W_proj^T))   (no biases)
 *
 * Heads: Dv = H * hd; q/k RMSNorm per head over hd with the config's rms_norm_eps (HF's choice; lmdeploy uses
 * 1e-6, see the architecture notes). 2-D RoPE: theta 10000, (row, col) of the patch in its frame.
 *
 * Memory: work goes in chunks of whole segments (at most CHUNK_ROWS patch rows, or one larger segment), so a long
 * video does not need all its activations at once; every chunk's temporaries are the step plan's scratch.
 * With several ranks (docs/multi-gpu.md) the tower is whole on rank 0: it runs once per image and its embeddings
 * come back to the host, from where a step gives them to every rank.
 */
#include "core/engine/vision.h"

#include "core/engine/graph.h"
#include "core/engine/weights.h"

#include <stdio.h>
#include <stdlib.h>

enum { CHUNK_ROWS = 16384 };
static const float ROPE_THETA = 10000.0f;
static const float MERGER_LN_EPS = 1e-5f;   /* torch.nn.LayerNorm's default, what HF's merger uses */

typedef struct {
    glm53_tensor norm1, norm2;                      /* [Dv] */
    glm53_tensor wq, wk, wv;                        /* [Dv, Dv] each: row blocks of attn.qkv.weight [3Dv, Dv] */
    glm53_tensor bq, bk, bv;                        /* [Dv] F32 each: of attn.qkv.bias */
    glm53_tensor q_norm, k_norm;                    /* [hd] */
    glm53_tensor proj_w, proj_b;                    /* [Dv, Dv], [Dv] F32 */
    glm53_tensor gate_w, gate_b, up_w, up_b;        /* [I, Dv], [I] F32 */
    glm53_tensor down_w, down_b;                    /* [Dv, I], [Dv] F32 */
} vision_block;

struct glm53_vision {
    glm53_tensor  patch_w, patch_b;                 /* [Dv, C*T*P*P] (the Conv3d weight flattened), [Dv] F32 */
    vision_block *blocks;                           /* [depth] */
    glm53_tensor  post_norm;                        /* [Dv] */
    glm53_tensor  down_w, down_b;                   /* [Do, m*m*Dv] reordered, [Do] F32 */
    glm53_tensor  merger_proj;                      /* [Do, Do] */
    glm53_tensor  ln_w, ln_b;                       /* [Do] */
    glm53_tensor  m_gate, m_up, m_down;             /* [Pi, Do], [Pi, Do], [Do, Pi] */
};

/* ------------------------------------------------------------------------------------------------------------
 * Loading (weights.c places and owns everything)
 */
/* The checkpoint tensor model.visual.<name> with shape dims[0..ndim) (-1: any). */
static glm53_status find(glm53_model *m, const char *name, int ndim, const int64_t *dims, const glm53_tensor **out) {
    char full[256];
    snprintf(full, sizeof full, "model.visual.%s", name);
    return glm53_weight_find(m, full, ndim, dims, "the vision config", out);
}

/* A weight used as is: on the CPU the mmapped tensor, on a device a copy. */
static glm53_status place(glm53_model *m, const glm53_tensor *host, glm53_tensor *out) {
    if (host->scale)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "vision: FP8 weight %s: the vision tower is BF16 in every released "
                          "checkpoint and FP8 vision weights are not supported", host->name ? host->name : "?");
    return glm53_weight_place(&m->ranks[0], host, GLM53_SHARD_WHOLE, out);
}

static glm53_status load_weight(glm53_model *m, const char *name, int ndim, const int64_t *dims, glm53_tensor *out) {
    const glm53_tensor *t;
    GLM53_TRY(find(m, name, ndim, dims, &t));
    return place(m, t, out);
}

/* A 1-D parameter converted to F32 (biases: the binary op takes activations, F32 or the backend's dtype). */
static glm53_status load_f32(glm53_model *m, const char *name, int64_t n, glm53_tensor *out) {
    const glm53_tensor *t;
    GLM53_TRY(find(m, name, 1, (const int64_t[]){n}, &t));
    float *buf = malloc((size_t)n * sizeof *buf);
    if (!buf) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "vision: no memory for %s", name);
    glm53_status st = glm53_tensor_to_f32(t, buf, n);
    if (st == GLM53_OK) st = glm53_weight_upload(&m->ranks[0], GLM53_F32, n, 0, buf, t->name, out);
    free(buf);
    return st;
}

#define DIMS GLM53_DIMS

static glm53_status load_block(glm53_model *m, int b, vision_block *B) {
    const glm53_vision_config *c = &m->config.vision;
    const int64_t Dv = c->hidden_size, hd = Dv / c->num_heads, I = c->intermediate_size;
    char name[128];
#define NAME(fmt) (snprintf(name, sizeof name, "blocks.%d." fmt, b), name)
    GLM53_TRY(load_weight(m, NAME("norm1.weight"), 1, DIMS(Dv), &B->norm1));
    GLM53_TRY(load_weight(m, NAME("norm2.weight"), 1, DIMS(Dv), &B->norm2));
    glm53_tensor qkv, qkv_b;
    GLM53_TRY(load_weight(m, NAME("attn.qkv.weight"), 2, DIMS(3 * Dv, Dv), &qkv));
    B->wq = glm53_tensor_rows_view(&qkv, 0, Dv);
    B->wk = glm53_tensor_rows_view(&qkv, Dv, Dv);
    B->wv = glm53_tensor_rows_view(&qkv, 2 * Dv, Dv);
    if (c->attention_bias) {
        GLM53_TRY(load_f32(m, NAME("attn.qkv.bias"), 3 * Dv, &qkv_b));
        B->bq = glm53_tensor_rows_view(&qkv_b, 0, Dv);
        B->bk = glm53_tensor_rows_view(&qkv_b, Dv, Dv);
        B->bv = glm53_tensor_rows_view(&qkv_b, 2 * Dv, Dv);
        GLM53_TRY(load_f32(m, NAME("attn.proj.bias"), Dv, &B->proj_b));
        GLM53_TRY(load_f32(m, NAME("mlp.gate_proj.bias"), I, &B->gate_b));
        GLM53_TRY(load_f32(m, NAME("mlp.up_proj.bias"), I, &B->up_b));
        GLM53_TRY(load_f32(m, NAME("mlp.down_proj.bias"), Dv, &B->down_b));
    }
    GLM53_TRY(load_weight(m, NAME("attn.q_norm.weight"), 1, DIMS(hd), &B->q_norm));
    GLM53_TRY(load_weight(m, NAME("attn.k_norm.weight"), 1, DIMS(hd), &B->k_norm));
    GLM53_TRY(load_weight(m, NAME("attn.proj.weight"), 2, DIMS(Dv, Dv), &B->proj_w));
    GLM53_TRY(load_weight(m, NAME("mlp.gate_proj.weight"), 2, DIMS(I, Dv), &B->gate_w));
    GLM53_TRY(load_weight(m, NAME("mlp.up_proj.weight"), 2, DIMS(I, Dv), &B->up_w));
    GLM53_TRY(load_weight(m, NAME("mlp.down_proj.weight"), 2, DIMS(Dv, I), &B->down_w));
#undef NAME
    return GLM53_OK;
}

/* downsample.weight [Do, Dv, m, m] -> [Do, m*m*Dv] with column (a*m + b)*Dv + c = element [o, c, a, b]: the
 * layout of four consecutive patch rows (a, b) of a merge block, each Dv wide. */
static glm53_status load_downsample(glm53_model *m, glm53_vision *v) {
    const glm53_vision_config *c = &m->config.vision;
    const int64_t Do = c->out_hidden_size, Dv = c->hidden_size, ms = c->spatial_merge_size;
    const glm53_tensor *t;
    GLM53_TRY(find(m, "downsample.weight", 4, DIMS(Do, Dv, ms, ms), &t));
    if (t->dtype == GLM53_F8_E4M3)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "vision: FP8 downsample.weight is not supported");
    const size_t es = glm53_dtype_size((glm53_dtype)t->dtype);
    const int64_t K = ms * ms * Dv;
    char *buf = malloc((size_t)(Do * K) * es);
    if (!buf) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "vision: no memory to reorder downsample.weight");
    const char *src = t->data;
    for (int64_t o = 0; o < Do; o++)
        for (int64_t ch = 0; ch < Dv; ch++)
            for (int64_t ab = 0; ab < ms * ms; ab++)
                memcpy(buf + ((size_t)(o * K + ab * Dv + ch)) * es, src + ((size_t)((o * Dv + ch) * ms * ms + ab)) * es,
                       es);
    glm53_status st = glm53_weight_upload(&m->ranks[0], t->dtype, Do, K, buf, t->name, &v->down_w);
    free(buf);
    return st;
}

static glm53_status load_all(glm53_model *m, glm53_vision *v) {
    const glm53_vision_config *c = &m->config.vision;
    const int64_t Dv = c->hidden_size, Do = c->out_hidden_size, Pi = c->projection_intermediate_size;
    const int64_t C = c->in_channels, T = c->temporal_patch_size, P = c->patch_size;
    if (c->spatial_merge_size != 2 || c->in_channels != 3)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "vision: spatial_merge_size %d / in_channels %d: the processor and "
                          "tower support 2 / 3", c->spatial_merge_size, c->in_channels);
    if ((Dv / c->num_heads) % 4 != 0)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "vision: head dim %lld is not a multiple of 4 (2-D RoPE)",
                          (long long)(Dv / c->num_heads));
    if (Do != m->config.text.hidden_size)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "vision: out_hidden_size %lld differs from the text hidden_size %d",
                          (long long)Do, m->config.text.hidden_size);
    const glm53_tensor *pw;
    GLM53_TRY(find(m, "patch_embed.proj.weight", 5, DIMS(Dv, C, T, P, P), &pw));
    glm53_tensor flat = *pw;   /* the Conv3d kernel read as [Dv, C*T*P*P]: pixel rows use the same order */
    flat.ndim = 2;
    flat.shape[1] = C * T * P * P;
    flat.shape[2] = flat.shape[3] = flat.shape[4] = 0;
    glm53_tensor_set_contiguous(&flat);
    GLM53_TRY(place(m, &flat, &v->patch_w));
    GLM53_TRY(load_f32(m, "patch_embed.proj.bias", Dv, &v->patch_b));
    v->blocks = calloc((size_t)c->depth, sizeof *v->blocks);
    if (!v->blocks) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "vision: no memory for %d blocks", c->depth);
    for (int b = 0; b < c->depth; b++) GLM53_TRY(load_block(m, b, &v->blocks[b]));
    GLM53_TRY(load_weight(m, "post_layernorm.weight", 1, DIMS(Dv), &v->post_norm));
    GLM53_TRY(load_downsample(m, v));
    GLM53_TRY(load_f32(m, "downsample.bias", Do, &v->down_b));
    GLM53_TRY(load_weight(m, "merger.proj.weight", 2, DIMS(Do, Do), &v->merger_proj));
    GLM53_TRY(load_weight(m, "merger.post_projection_norm.weight", 1, DIMS(Do), &v->ln_w));
    GLM53_TRY(load_weight(m, "merger.post_projection_norm.bias", 1, DIMS(Do), &v->ln_b));
    GLM53_TRY(load_weight(m, "merger.gate_proj.weight", 2, DIMS(Pi, Do), &v->m_gate));
    GLM53_TRY(load_weight(m, "merger.up_proj.weight", 2, DIMS(Pi, Do), &v->m_up));
    GLM53_TRY(load_weight(m, "merger.down_proj.weight", 2, DIMS(Do, Pi), &v->m_down));
    return GLM53_OK;
}

void glm53_vision_free(glm53_model *m) {
    glm53_vision *v = m ? m->vision : NULL;
    if (!v) return;
    free(v->blocks);
    free(v);
    m->vision = NULL;
}

glm53_status glm53_vision_load(glm53_model *m) {
    m->vision = calloc(1, sizeof *m->vision);
    if (!m->vision) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the vision tower");
    glm53_status st = load_all(m, m->vision);
    if (st != GLM53_OK) glm53_vision_free(m);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Encoding
 */
/* The encoder runs on a step context of its own (graph.h's NEW and OP): the plan's scratch, no batch. */

/* y = x * w^T (+ b when b has data). */
static void linear(step_ctx *sc, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w, const glm53_tensor *b) {
    OP(sc->be->ops->matmul(sc->be, y, x, w));
    if (b && b->data) OP(sc->be->ops->binary(sc->be, y, y, b, GLM53_BINARY_ADD));
}

/* One chunk: rows [0, N) of pixel rows x_host (F32), n_seg segments cu[n_seg + 1], positions pos[N, 2]; writes
 * N / 4 embedding rows to out (host F32). */
static glm53_status encode_chunk(glm53_model *m, step_ctx *sc, const float *x_host, int64_t N, const int32_t *cu,
                                 int64_t n_seg, const int32_t *pos_host, float *out) {
    const glm53_vision *v = m->vision;
    const glm53_vision_config *c = &m->config.vision;
    glm53_backend *be = sc->be;
    /* F32 activations on every backend, also where the text model runs in BF16 (CUDA): the tower runs once per
     * image and costs little next to the text model, while its rows feed every later position. In BF16 its
     * output is ~1e-2 from float64 (measured on the H200), enough to carry image prompts' logits past the CUDA
     * tolerance; in F32 it is ~1e-6 (docs/vision.md). So pixels go up and embeddings come down as they are. */
    const int act = GLM53_F32;
    const int64_t Dv = c->hidden_size, H = c->num_heads, hd = Dv / H, I = c->intermediate_size;
    const int64_t Do = c->out_hidden_size, Pi = c->projection_intermediate_size, K = v->patch_w.shape[1];
    const int64_t ms2 = (int64_t)c->spatial_merge_size * c->spatial_merge_size, Nm = N / ms2;
    const float eps = c->rms_norm_eps, limit = c->swiglu_limit;

    glm53_tensor *x = NEW(act, 2, N, K, 0);
    glm53_tensor *pos = NEW(GLM53_I32, 2, N, 2, 0), *cut = NEW(GLM53_I32, 1, n_seg + 1, 0, 0);
    OP(be->ops->upload(be, x, x_host));
    OP(be->ops->upload(be, pos, pos_host));
    OP(be->ops->upload(be, cut, cu));
    glm53_tensor *h = NEW(act, 2, N, Dv, 0), *hn = NEW(act, 2, N, Dv, 0), *o = NEW(act, 3, N, H, hd);
    glm53_tensor *q = NEW(act, 3, N, H, hd), *k = NEW(act, 3, N, H, hd), *vv = NEW(act, 3, N, H, hd);
    glm53_tensor *a = NEW(act, 2, N, Dv, 0), *g = NEW(act, 2, N, I, 0), *u = NEW(act, 2, N, I, 0);
    glm53_tensor *gu = NEW(act, 2, N, I, 0);
    if (sc->st != GLM53_OK) return sc->st;
    linear(sc, h, x, &v->patch_w, &v->patch_b);

    glm53_tensor q2 = glm53_tensor_reshape(q, 2, N, Dv, 0), k2 = glm53_tensor_reshape(k, 2, N, Dv, 0);
    glm53_tensor v2 = glm53_tensor_reshape(vv, 2, N, Dv, 0), o2 = glm53_tensor_reshape(o, 2, N, Dv, 0);
    glm53_tensor qh = glm53_tensor_reshape(q, 2, N * H, hd, 0), kh = glm53_tensor_reshape(k, 2, N * H, hd, 0);
    for (int b = 0; b < c->depth && sc->st == GLM53_OK; b++) {
        const vision_block *B = &v->blocks[b];
        OP(be->ops->rmsnorm(be, hn, h, &B->norm1, eps));
        linear(sc, &q2, hn, &B->wq, &B->bq);
        linear(sc, &k2, hn, &B->wk, &B->bk);
        linear(sc, &v2, hn, &B->wv, &B->bv);
        OP(be->ops->rmsnorm(be, &qh, &qh, &B->q_norm, eps));
        OP(be->ops->rmsnorm(be, &kh, &kh, &B->k_norm, eps));
        OP(be->ops->rope_2d(be, q, q, pos, ROPE_THETA));
        OP(be->ops->rope_2d(be, k, k, pos, ROPE_THETA));
        OP(be->ops->attention_segments(be, o, q, k, vv, cut, 1.0f / sqrtf((float)hd)));
        linear(sc, a, &o2, &B->proj_w, &B->proj_b);
        OP(be->ops->binary(be, h, h, a, GLM53_BINARY_ADD));
        OP(be->ops->rmsnorm(be, hn, h, &B->norm2, eps));
        linear(sc, g, hn, &B->gate_w, &B->gate_b);
        linear(sc, u, hn, &B->up_w, &B->up_b);
        OP(be->ops->swiglu(be, gu, g, u, limit));
        linear(sc, a, gu, &B->down_w, &B->down_b);
        OP(be->ops->binary(be, h, h, a, GLM53_BINARY_ADD));
    }
    OP(be->ops->rmsnorm(be, h, h, &v->post_norm, eps));

    /* Merge: four consecutive rows (one 2x2 block) side by side, then the reordered Conv2d kernel. */
    glm53_tensor blocks = glm53_tensor_reshape(h, 2, Nm, ms2 * Dv, 0);
    glm53_tensor *z = NEW(act, 2, Nm, Do, 0), *zp = NEW(act, 2, Nm, Do, 0);
    glm53_tensor *mg = NEW(act, 2, Nm, Pi, 0), *mu = NEW(act, 2, Nm, Pi, 0), *mgu = NEW(act, 2, Nm, Pi, 0);
    if (sc->st != GLM53_OK) return sc->st;
    linear(sc, z, &blocks, &v->down_w, &v->down_b);
    linear(sc, zp, z, &v->merger_proj, NULL);
    OP(be->ops->layernorm(be, zp, zp, &v->ln_w, &v->ln_b, MERGER_LN_EPS));
    OP(be->ops->unary(be, zp, zp, GLM53_UNARY_GELU));
    linear(sc, mg, zp, &v->m_gate, NULL);
    linear(sc, mu, zp, &v->m_up, NULL);
    OP(be->ops->swiglu(be, mgu, mg, mu, limit));
    linear(sc, z, mgu, &v->m_down, NULL);
    OP(be->ops->download(be, out, z));
    OP(be->ops->sync(be));
    return sc->st;
}

glm53_status glm53_model_encode_vision(glm53_model *m, const float *pixels, int64_t n_patches,
                                       const int32_t *grid_thw, int32_t n_items, float *embeddings, int64_t capacity,
                                       int64_t *n_tokens) {
    if (!m || !grid_thw || n_items < 1 || !n_tokens)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "encode_vision: model, grid_thw, n_items >= 1 and n_tokens are "
                          "required");
    if (!m->vision)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "encode_vision: the model has no vision tower (its config has no "
                          "vision_config)");
    const glm53_vision_config *c = &m->config.vision;
    const int64_t ms = c->spatial_merge_size, Do = c->out_hidden_size, K = m->vision->patch_w.shape[1];
    int64_t rows = 0, n_seg = 0, max_seg = 0;
    for (int32_t i = 0; i < n_items; i++) {
        const int64_t t = grid_thw[3 * i], gh = grid_thw[3 * i + 1], gw = grid_thw[3 * i + 2];
        if (t < 1 || gh < 1 || gw < 1 || gh % ms || gw % ms || t > (1 << 20) || gh > (1 << 20) || gw > (1 << 20))
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "encode_vision: item %d has grid (%lld, %lld, %lld); t, h, w "
                              "must be >= 1 with h and w multiples of %lld", i, (long long)t, (long long)gh,
                              (long long)gw, (long long)ms);
        rows += t * gh * gw;
        n_seg += t;
        if (gh * gw > max_seg) max_seg = gh * gw;
    }
    if (rows != n_patches)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "encode_vision: the grids hold %lld patches, %lld pixel rows given",
                          (long long)rows, (long long)n_patches);
    if (max_seg > INT32_MAX / 2 || rows > INT32_MAX)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "encode_vision: %lld patches is too many", (long long)rows);
    *n_tokens = rows / (ms * ms);
    if (!embeddings) return GLM53_OK;
    if (capacity < *n_tokens)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "encode_vision: %lld embedding rows needed, the buffer holds %lld",
                          (long long)*n_tokens, (long long)capacity);
    if (!pixels) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "encode_vision: pixels is NULL");

    pthread_mutex_lock(&m->lock);
    bool busy = m->stepping;
    m->stepping = true;
    pthread_mutex_unlock(&m->lock);
    if (busy) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "encode_vision: a step of this model is running");

    /* Segments in order (item by item, frame group by frame group), with each row's (row, col) in its frame. */
    int32_t *seg_len = malloc((size_t)n_seg * sizeof *seg_len);
    int32_t *cu = malloc((size_t)(n_seg + 1) * sizeof *cu), *pos = malloc((size_t)(2 * rows) * sizeof *pos);
    glm53_status st = seg_len && cu && pos
                          ? GLM53_OK
                          : GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "encode_vision: no memory for %lld positions",
                                       (long long)rows);
    int64_t s = 0, r = 0;
    for (int32_t i = 0; i < n_items && st == GLM53_OK; i++) {
        const int64_t t = grid_thw[3 * i], gh = grid_thw[3 * i + 1], gw = grid_thw[3 * i + 2];
        for (int64_t f = 0; f < t; f++, s++) {
            seg_len[s] = (int32_t)(gh * gw);
            for (int64_t bh = 0; bh < gh / ms; bh++)
                for (int64_t bw = 0; bw < gw / ms; bw++)
                    for (int64_t a = 0; a < ms; a++)
                        for (int64_t b = 0; b < ms; b++, r++) {
                            pos[2 * r] = (int32_t)(bh * ms + a);
                            pos[2 * r + 1] = (int32_t)(bw * ms + b);
                        }
        }
    }
    /* Chunks of whole segments, each in the step plan's scratch (no metadata: pixels and positions upload as they
     * are, the encoder is not a decode step). */
    glm53_rank *rk = &m->ranks[0];   /* the tower is whole on rank 0; its embeddings go back to the host */
    step_ctx sc = {.m = m, .rank = rk, .be = rk->be, .plan = &rk->plan};
    int64_t seg0 = 0, row0 = 0;
    rk->be->workspace = &rk->plan.ws;
    while (st == GLM53_OK && seg0 < n_seg) {
        st = glm53_plan_begin(&rk->plan, 0);
        if (st != GLM53_OK) break;
        int64_t seg1 = seg0, n = 0;
        cu[0] = 0;
        while (seg1 < n_seg && (n == 0 || n + seg_len[seg1] <= CHUNK_ROWS)) {
            n += seg_len[seg1];
            cu[seg1 - seg0 + 1] = (int32_t)n;
            seg1++;
        }
        st = encode_chunk(m, &sc, pixels + row0 * K, n, cu, seg1 - seg0, pos + 2 * row0,
                          embeddings + row0 / (ms * ms) * Do);
        sc.st = GLM53_OK;
        row0 += n;
        seg0 = seg1;
    }
    rk->be->workspace = NULL;
    free(seg_len);
    free(cu);
    free(pos);
    pthread_mutex_lock(&m->lock);
    m->stepping = false;
    pthread_mutex_unlock(&m->lock);
    return st;
}
