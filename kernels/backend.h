/*
 * backend.h - the interface every compute backend (kernels/cpu, kernels/cuda) implements: one static op table
 * per backend, and backend instances that each own one device and one stream.
 *
 * The model graph (core/engine) is written once against this table. A backend instance owns its memory
 * (activations, caches, uploaded weights) and runs ops on tensors that live on its device, in order on its
 * stream; several instances (several GPUs of one process, say) share nothing. The CPU backend is also the
 * reference: every CUDA op is tested against the CPU op of the same name on the same inputs (tests/cuda).
 * docs/architecture.md has the math each op implements; the comments here are the exact contracts.
 *
 * The table is grouped by op family, and each family lives in a file of the same name in every backend
 * (kernels/cpu/<family>.c, kernels/cuda/<family>.cu): linear, norm, elementwise, gather, mhc, kda,
 * kpool_indexer, sparse_mla, moe, vision. Memory ops are the backend's own file (cpu_backend.c,
 * cuda_backend.cu).
 *
 * Required and optional entries. Every compute op and every memory op is required. The entries marked
 * OPTIONAL may be NULL: asynchronous copies (the synchronous ones run instead), pinned host memory (malloc),
 * stream capture into graphs (the backend cannot capture), device-side expert tables, counters, and fused ops
 * (the generic chain of ops they replace runs instead; a fused op keeps the generic chain's rounding points, so
 * it may differ from it only in F32 accumulation order).
 *
 * Conventions for every op below
 *   - Tensors are contiguous and row-major. "rows" of a tensor = product of all dims but the last.
 *   - Shapes are given as [dims]; M = rows, the names are the ones used in docs/architecture.md.
 *   - Activations (x, y) are F32 on the CPU backend; the CUDA backend also accepts BF16 where it says so.
 *     Weights (w) may be F32, BF16, F16, or F8_E4M3 with a block scale (glm53_tensor.scale).
 *   - Accumulation is always F32 (F64 nowhere in the engine; F64 is for test references).
 *   - Outputs never alias inputs unless the op says "in place allowed".
 *   - Index arguments (ids, positions, slots) are I32 tensors on the backend's device, so that a step's
 *     metadata is device data and a captured step can be replayed without host work.
 *   - An op only enqueues work: it returns GLM53_OK or a failure to launch (GLM53_FAIL); failures inside
 *     kernels (an out-of-range index) surface at the next sync or download. Shape mismatches are programming
 *     errors and are asserted, not returned.
 *   - Scratch an op needs for itself comes from be->workspace when the engine has set one (a planned step),
 *     so a step that has run once allocates nothing and can be captured.
 */
#ifndef GLM53_BACKEND_H
#define GLM53_BACKEND_H

#include "core/base/base.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct glm53_backend     glm53_backend;
typedef struct glm53_backend_ops glm53_backend_ops;
typedef struct glm53_workspace   glm53_workspace;   /* kernels/workspace.h */
typedef struct glm53_graph       glm53_graph;       /* a captured stream of work, backend-specific */

typedef enum glm53_unary_op {
    GLM53_UNARY_SIGMOID  = 0,   /* 1 / (1 + exp(-x)) */
    GLM53_UNARY_SILU     = 1,   /* x * sigmoid(x) */
    GLM53_UNARY_GELU     = 2,   /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    GLM53_UNARY_SOFTPLUS = 3,   /* log(1 + exp(x)), torch's threshold 20 (x > 20 -> x) */
    GLM53_UNARY_EXP      = 4,
    GLM53_UNARY_RELU     = 5,
} glm53_unary_op;

typedef enum glm53_binary_op {
    GLM53_BINARY_ADD = 0,
    GLM53_BINARY_MUL = 1,
} glm53_binary_op;

/* The routed experts of one MoE layer as the moe ops take them: gate[e], up[e] [Fe, D] and down[e] [D, Fe]
 * (any weight dtype). `device` is the backend's own table of them (prepare_experts), NULL until prepared.
 * Expert parallelism: a rank holds experts [first_held, first_held + n_held) (n_held 0: all); slots routed to
 * the others contribute nothing here (their ranks add them in the all-reduce), and their entries are NULL. */
typedef struct glm53_expert_set {
    int32_t                    n_experts;
    const glm53_tensor *const *gate, *const *up, *const *down;
    void                      *device;
    int32_t                    first_held, n_held;
} glm53_expert_set;

/* Whether expert e's slots are computed by this rank's moe_experts. */
static inline bool glm53_expert_is_held(const glm53_expert_set *s, int32_t e) {
    return s->n_held == 0 || (e >= s->first_held && e < s->first_held + s->n_held);
}

/* One sequence's part of kda_sequences (a KDA layer's per-sequence work for a whole batch): its rows of the
 * batch, its conv rings and state ring, and the step's ring slots for it (step.c fills them; kernels/backend.h's
 * conv1d_causal, scatter_rows and kda_recurrent say what they mean). */
typedef struct glm53_kda_seq {
    int64_t             row0, n_rows;   /* rows [row0, row0 + n_rows) of the batch */
    int64_t             n_hist;         /* history rows that exist: the K-1 - n_hist before them are zeros */
    const glm53_tensor *conv_hist;      /* [n_hist] I32 conv ring slots of those rows (unused when n_hist is 0) */
    int64_t             n_write;
    const glm53_tensor *conv_write;     /* [n_write] I32 conv ring slots of the last n_write raw rows */
    glm53_tensor       *conv[3];        /* the q, k, v conv rings [conv_width, C] */
    glm53_tensor       *states;         /* [ring, H, dk, dv] */
    const glm53_tensor *slots;          /* [n_rows + 1] I32, as kda_recurrent's */
} glm53_kda_seq;

/* One hyper-connection site between two blocks of the layer stack (mhc_site): what forward_main does there with
 * mhc_post, mhc_pre and rmsnorm. post and comb are in and out: on entry the previous site's (read when y is
 * given), on return this site's. */
typedef struct glm53_mhc_site {
    glm53_tensor       *H_out;        /* [N,S,D] the streams after the previous block (written when y is given) */
    glm53_tensor       *x, *xn;       /* [N,D] the collapsed block input and its rmsnorm */
    glm53_tensor       *post, *comb;  /* [N,S], [N,S,S] F32, in and out */
    const glm53_tensor *y;            /* [N,D] the previous block's output, or NULL: no post step (H_in is used) */
    const glm53_tensor *H_in;         /* [N,S,D] the streams before the previous block's post step */
    const glm53_tensor *fn, *base, *scale;   /* this site's mhc_pre weights */
    const glm53_tensor *norm;         /* [D] the block's input norm weight */
    float               rms_eps, hc_eps, norm_eps;
    int32_t             sinkhorn_iters;
} glm53_mhc_site;

/* What a backend instance has done since it was made (OPTIONAL counters entry): the test hook that shows a
 * steady-state step allocates nothing and never waits. */
typedef struct glm53_backend_counters {
    int64_t device_allocs;   /* allocations that reached the device allocator (cudaMalloc), not cache hits */
    int64_t host_syncs;      /* times the host waited for the device (stream synchronisations, blocking copies) */
} glm53_backend_counters;

/* One backend instance: one device, one stream. */
struct glm53_backend {
    const glm53_backend_ops *ops;         /* the backend's static op table */
    int32_t                  device;      /* glm53_device */
    int32_t                  ordinal;     /* the CUDA device of this instance; 0 on the CPU */
    void                    *stream;      /* the cudaStream_t every op of this instance is enqueued on; NULL on CPU */
    int32_t                  act_dtype;   /* dtype the graph allocates activations in: F32 (cpu), BF16 (cuda) */
    glm53_workspace         *workspace;   /* set by the engine for the duration of a planned step, else NULL */
    void                    *impl;        /* backend private state (thread pool, handles, allocator) */
};

struct glm53_backend_ops {
    const char *name;   /* "cpu", "cuda" */

    /* === memory (cpu_backend.c, cuda_backend.cu) ============================================================== */
    /* t->dtype, ndim and shape are set by the caller; alloc sets contiguous strides and data (uninitialised). */
    glm53_status (*alloc)(glm53_backend *be, glm53_tensor *t);
    void         (*release)(glm53_backend *be, glm53_tensor *t);   /* frees t->data, sets it to NULL */
    /* Host <-> backend copies of glm53_tensor_nbytes(t) bytes, complete when they return (blocking). */
    glm53_status (*upload)(glm53_backend *be, glm53_tensor *dst, const void *host_src);
    glm53_status (*download)(glm53_backend *be, void *host_dst, const glm53_tensor *src);
    /* dst = src, same numel; converts between F32 and BF16 when dtypes differ. */
    glm53_status (*copy)(glm53_backend *be, glm53_tensor *dst, const glm53_tensor *src);
    glm53_status (*fill)(glm53_backend *be, glm53_tensor *t, float value);
    /* Waits until every op enqueued so far has run, and reports a kernel failure or a recorded bad index. */
    glm53_status (*sync)(glm53_backend *be);
    void         (*destroy)(glm53_backend *be);

    /* OPTIONAL. Copies enqueued on the stream, ordered with the ops; the host side must be memory from
     * host_alloc and must stay untouched until a sync. */
    glm53_status (*upload_async)(glm53_backend *be, glm53_tensor *dst, const void *pinned_src);
    glm53_status (*download_async)(glm53_backend *be, void *pinned_dst, const glm53_tensor *src);
    /* OPTIONAL. Page-locked host memory the async copies can use (NULL entries: plain malloc / free). */
    glm53_status (*host_alloc)(glm53_backend *be, size_t bytes, void **out);
    void         (*host_free)(glm53_backend *be, void *ptr);
    /* OPTIONAL. Stream capture: between capture_begin and capture_end the ops of this instance are recorded, not
     * run, into a graph that graph_launch replays on the stream with the same pointers. A call that would
     * allocate device memory or wait for the device while capturing fails the capture. */
    glm53_status (*capture_begin)(glm53_backend *be);
    glm53_status (*capture_end)(glm53_backend *be, glm53_graph **out);
    glm53_status (*graph_launch)(glm53_backend *be, glm53_graph *graph);
    void         (*graph_free)(glm53_backend *be, glm53_graph *graph);
    /* OPTIONAL. Counters since the instance was made. */
    void         (*counters)(glm53_backend *be, glm53_backend_counters *out);
    /* OPTIONAL. Per-kernel timing, the tool behind tests/cuda/profile_step.c: profile_start clears the
     * record and starts timing the work this instance enqueues (an event after every kernel and copy, so the
     * time between two events is the work between them; nothing is recorded while capturing); profile_report
     * writes one row per label (calls, total, mean, share) to `out`, longest first, and stops. Timing adds
     * host work per launch, so it is for finding where time goes, not for the headline figures. */
    glm53_status (*profile_start)(glm53_backend *be);
    glm53_status (*profile_report)(glm53_backend *be, FILE *out);

    /* === linear (linear.c / linear.cu) ======================================================================== */
    /* y[M,N] = x[M,K] * w[N,K]^T. w: F32, BF16, F16, or F8_E4M3 with scale (dequantised on the fly). */
    glm53_status (*matmul)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w);
    /* OPTIONAL. y[i] = x * w[i]^T for n <= 8 weights that read the same x (a layer's projections of one normed
     * input), each y[i] exactly what matmul gives it; the point is one launch instead of n (CUDA decode). */
    glm53_status (*matmul_multi)(glm53_backend *be, glm53_tensor *const *y, const glm53_tensor *x,
                                 const glm53_tensor *const *w, int32_t n);

    /* === norm (norm.c / norm.cu) ============================================================================== */
    /* y[M,D] = x / sqrt(mean(x^2) + eps) * w; w[D] may be NULL (unweighted). In place allowed. */
    glm53_status (*rmsnorm)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                            float eps);
    /* y[M,D] = (x - mean) / sqrt(var + eps) * w + b (biased variance); w, b may be NULL. In place allowed. */
    glm53_status (*layernorm)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w,
                              const glm53_tensor *b, float eps);
    /* y[M,D] = x / sqrt(sum(x^2) + eps) * scale  (FLA's l2norm: eps inside the sqrt). In place allowed. */
    glm53_status (*l2norm)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float eps, float scale);
    /* y[M,N] = softmax over each row, max-subtracted. In place allowed. */
    glm53_status (*softmax)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x);
    /* KDA output norm: per row of x[M,d] (M = N*heads): y = rmsnorm(x, w[d], eps) * sigmoid(gate), in F32,
     * one rounding at the end. gate[M,d]. In place allowed (y == x). */
    glm53_status (*rmsnorm_gated)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                  const glm53_tensor *gate, const glm53_tensor *w, float eps);

    /* === elementwise (elementwise.c / elementwise.cu) ========================================================= */
    /* y = op(x), same shape. In place allowed. */
    glm53_status (*unary)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, glm53_unary_op op);
    /* y[M,N] = a[M,N] op b, where b is [M,N] or a row vector [N] broadcast over rows. In place (y == a). */
    glm53_status (*binary)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *a, const glm53_tensor *b,
                           glm53_binary_op op);
    /* y = alpha * x + beta * y_old (beta 0: y_old is not read). Same shape. */
    glm53_status (*axpby)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, float alpha, float beta);
    /* Clamped SwiGLU: y[M,F] = silu(min(gate, limit)) * clamp(up, -limit, limit); limit <= 0: no clamp. */
    glm53_status (*swiglu)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *gate, const glm53_tensor *up,
                           float limit);
    /* OPTIONAL fused: y[M,F] = swiglu(x * w_gate^T, x * w_up^T, limit), x[M,D], w_gate and w_up [F,D], with the
     * generic chain's roundings (gate and up rounded to y's dtype before the SwiGLU). */
    glm53_status (*swiglu_gate_up)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                   const glm53_tensor *w_gate, const glm53_tensor *w_up, float limit);

    /* === gather: selection and indexing (gather.c / gather.cu) ================================================ */
    /* Per row of x[M,N] (F32): the k largest values among columns [0, n_valid) (n_valid <= 0 or >= N: all N),
     * descending; ties go to the lower index; NaN never wins. vals[M,k] F32, idx[M,k] I32. k <= the columns
     * that compete. The step's top-k outputs (glm53_step_output.top_k) use it on the logits. */
    glm53_status (*topk)(glm53_backend *be, glm53_tensor *vals, glm53_tensor *idx, const glm53_tensor *x,
                         int32_t k, int64_t n_valid);
    /* y[M,D] = table[ids[m]] (embedding lookup, cache reads). table: any weight dtype or an activation; ids I32
     * [M], each in [0, V). */
    glm53_status (*gather_rows)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *table,
                                const glm53_tensor *ids);
    /* y[ids[m]] = x[m] for m in [0, M); y[V,D], x[M,D]; ids distinct. */
    glm53_status (*scatter_rows)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                 const glm53_tensor *ids);

    /* === mhc: manifold-constrained hyper-connections (mhc.c / mhc.cu) ========================================
     * S = hc_mult residual streams, D = hidden size, N = rows of the batch. */
    /* H[N,S,D] = x[N,D] copied into every stream (the embedding enters all S streams). */
    glm53_status (*mhc_expand)(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x);
    /* The pre step of one site: from streams H[N,S,D] and the site's fn[(2+S)*S, S*D] (F32/BF16 weight),
     * base[(2+S)*S] and scale[3] (F32): m = rmsnorm_unweighted(flatten(H), rms_eps) * fn^T, then
     *   pre[k] = sigmoid(m[k]*scale[0] + base[k]) + hc_eps              (k < S)
     *   post[N,S][k] = 2*sigmoid(m[S+k]*scale[1] + base[S+k])
     *   comb[N,S,S] = sinkhorn(m[2S+..]*scale[2] + base[2S+..])          (row softmax + hc_eps, column norm,
     *                 then iters-1 x (row norm, column norm), every denominator + hc_eps)
     *   x[N,D] = sum_k pre[k] * H[k].
     * post and comb are F32; x is an activation. */
    glm53_status (*mhc_pre)(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                            const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                            const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters);
    /* The post step: H_out[N,S,D][k] = post[k] * y[N,D] + sum_j comb[j][k] * H_in[j]  (comb applied
     * transposed). H_out must not alias H_in. */
    glm53_status (*mhc_post)(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y,
                             const glm53_tensor *H_in, const glm53_tensor *post, const glm53_tensor *comb);
    /* OPTIONAL (fused). One site between two blocks (glm53_mhc_site): when y is given,
     * H_out = mhc_post(y, H_in, post, comb) and the pre step reads H_out, else it reads H_in; then
     * x, post, comb = mhc_pre(..., fn, base, scale, rms_eps, hc_eps, sinkhorn_iters) and xn = rmsnorm(x, norm,
     * norm_eps). Every element gets the operations of the chain it replaces, in its order: the same results.
     * GLM53_ERR_UNSUPPORTED, before doing anything, for shapes or dtypes it does not take (the chain runs). */
    glm53_status (*mhc_site)(glm53_backend *be, const glm53_mhc_site *site);
    /* y[N,D] = mean over the S streams of H[N,S,D] (the final collapse). */
    glm53_status (*mhc_mean)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H);

    /* === kda: Kimi delta attention (kda.c / kda.cu) ========================================================== */
    /* Depthwise causal conv1d. x[T+K-1, C] holds K-1 history rows then T new rows; w[C,K] (the checkpoint's
     * [C,1,K] viewed 2-D) may be F32 or BF16. y[T,C][t][c] = sum_i w[c][i] * x[t+i][c]. */
    glm53_status (*conv1d_causal)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                  const glm53_tensor *w);
    /* Per-channel forget gate, F32 out: with f[N,C] (C = heads*dk), A_log[heads], dt_bias[C] (F32 weights),
     *   has_lower_bound: g = lower_bound * sigmoid(exp(A_log[h]) * (f + dt_bias))
     *   else:            g = -exp(A_log[h]) * softplus(f + dt_bias)        (torch threshold 20)
     * where h = channel / dk. */
    glm53_status (*kda_gate)(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                             const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound);
    /* The delta-rule recurrence of one sequence over its T rows, token by token, state in F32:
     *   S <- S * exp(g_t) (row i scaled by exp(g_t[i])); u = beta_t * (v_t - S^T k_t); S <- S + k_t u^T;
     *   o_t = S^T q_t.
     * q[T,H,dk] and k[T,H,dk] arrive L2-normalised (q also scaled by dk^-1/2); v[T,H,dv]; g[T,H,dk] and
     * beta[T,H] F32; o[T,H,dv]. states[ring,H,dk,dv] F32 is the sequence's ring of states: the recurrence starts
     * from states[slots[0]], and after row t the state goes to states[slots[1 + t]] when that is >= 0 (the
     * last row's must be). slots[T + 1] I32. slots[1 + t] may equal slots[0] (a ring of one). */
    glm53_status (*kda_recurrent)(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                  const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                                  glm53_tensor *states, const glm53_tensor *slots);
    /* OPTIONAL (fused). A KDA layer's per-sequence work for every sequence of the batch at once - what
     * kda_forward's loop does with the ops above, one sequence at a time: for each sequence, q, k and v (raw
     * [N, H*dk], [N, H*dk], [N, H*dv], before the conv) through the causal conv over the sequence's history and
     * new rows (conv1d_causal, weights w[3] [C, K]), SiLU, the last n_write raw rows into the conv rings
     * (scatter_rows), q and k L2-normalised per head (eps; q then times q_scale), and the recurrence
     * (kda_recurrent) into o[N, H, dv], with g[N, H*dk] and beta[N, H] F32. The sequences' rows are disjoint.
     * Every element gets the operations of the chain it replaces, in its order: the same results. */
    glm53_status (*kda_sequences)(glm53_backend *be, glm53_tensor *o, const glm53_tensor *const raw[3],
                                  const glm53_tensor *const w[3], const glm53_tensor *g, const glm53_tensor *beta,
                                  const glm53_kda_seq *seqs, int32_t n_seqs, float eps, float q_scale);

    /* === kpool_indexer: the KPool indexer (kpool_indexer.c / kpool_indexer.cu) =============================== */
    /* Pooled keys of n_pools closed pools of P tokens: for pool g and channel c,
     *   a_i = sigma[g*P+i][c] + ape[i][c];  pi = softmax_i(a);  pooled[g][c] = sum_i pi_i * kappa[g*P+i][c].
     * kappa[n_pools*P, dI], sigma[n_pools*P, dI] (activations), ape[P, dI] weight, pooled[n_pools, dI] F32. */
    glm53_status (*kpool_compress)(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                   const glm53_tensor *sigma, const glm53_tensor *ape);
    /* Indexer scores of T query rows of one sequence against its G pooled keys:
     *   scores[t][g] = sum_h w[t][h] * relu(scale * Q[t,h] . pooled[g])   for g < n_closed[t]
     *   scores[t][g] = -inf                                               otherwise (not yet closed for row t)
     * Q[T,Hi,dI] activation, w[T,Hi] F32 (already times Hi^-1/2), pooled[G,dI] F32, n_closed[T] I32, scores[T,G]
     * F32. Sums of ReLUs: many pools score exactly 0, so ties are the common case, not the exception. */
    glm53_status (*kpool_score)(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q,
                                const glm53_tensor *w, const glm53_tensor *pooled, const glm53_tensor *n_closed,
                                float scale);
    /* Selected token positions per query row, from its scores (or none when every closed pool fits):
     * for the row at absolute position p, L = p + 1 visible tokens, G = L / P closed pools:
     *   G <= n_select: pools 0..G-1;  else the n_select best pools by score (equal scores: the lower pool);
     *   the chosen pools in ascending order, each expanded to positions g*P .. g*P+P-1; then, with_tail, the
     *   open pool's L - L%P .. L-1. (The order is pinned so every backend sums attention in the same order.)
     * idx[T, n_select*P + (with_tail ? P-1 : 0)] I32, -1 padded. pos[T] I32 are the rows' absolute
     * positions. scores[T,G] F32 (G >= the largest row's closed pool count). A row with no position at all
     * (possible only without the tail) makes sparse_mla write zeros for it. */
    glm53_status (*kpool_select)(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                                 const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail);

    /* === sparse_mla: NoPE MLA over the selected positions (sparse_mla.c / sparse_mla.cu) ===================== */
    /* Absorbed form over latent rows. For row t and head h, with the key rows Wk = kv_b[h*(dk+dv) .. +dk) and
     * value rows Wv = kv_b[h*(dk+dv)+dk .. +dv) of kv_b[H*(dk+dv), R]:
     *   qh = Wk^T q[t,h] (R);  s_j = scale * qh . latent[j] for j in idx[t] (-1 entries skipped);
     *   p = softmax(s);  o[t,h] = Wv (sum_j p_j latent[j]).
     * q[T,H,dk], latent[cap,R] (the sequence's latent cache), idx[T,W] I32, o[T,H,dv]. */
    glm53_status (*sparse_mla)(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q,
                               const glm53_tensor *latent, const glm53_tensor *idx, const glm53_tensor *kv_b,
                               float scale);

    /* === moe (moe.c / moe.cu) ================================================================================ */
    /* Router selection from F32 logits[N,E] and bias[E] (e_score_correction_bias, F32):
     *   s = sigmoid(logits); s' = s + bias; with n_group > 1 keep the topk_group groups with the largest
     *   (sum of the two largest s' in the group) and mask the rest; ids = top-k of s' (ties to lower id);
     *   w = s[ids], divided by (sum + 1e-20) when norm, times scaling.
     * ids[N,k] I32, weights[N,k] F32. If the group stage leaves fewer than k experts, the missing slots get
     * id -1 and weight 0, and moe_experts skips them. */
    glm53_status (*moe_route)(glm53_backend *be, glm53_tensor *ids, glm53_tensor *weights,
                              const glm53_tensor *logits, const glm53_tensor *bias, int32_t n_group,
                              int32_t topk_group, int32_t norm, float scaling);
    /* Routed experts: y[N,D] = sum_k weights[n,k] * down_e(swiglu(gate_e x, up_e x, limit)), e = ids[n,k],
     * summed in F32 and rounded once (in ascending expert order on the CPU, slot order k = 0..K-1 on CUDA).
     * gate and up are rounded to x's dtype before the SwiGLU, its result too (the roundings of the chain
     * matmul, matmul, swiglu, matmul). y is overwritten. */
    glm53_status (*moe_experts)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                const glm53_tensor *ids, const glm53_tensor *weights,
                                const glm53_expert_set *experts, float limit);
    /* OPTIONAL. Builds experts->device (the backend's table of the expert weights, made once at load, so a step
     * never uploads pointers), and releases it. */
    glm53_status (*prepare_experts)(glm53_backend *be, glm53_expert_set *experts);
    void         (*release_experts)(glm53_backend *be, glm53_expert_set *experts);

    /* === vision (vision.c / vision.cu) =======================================================================
     * The vision tower's own ops: M = patch rows, H heads, d head dim. Biases are the binary op with a row
     * vector; the Conv3d patch embedding and the 2x2 downsample Conv2d are matmuls. */
    /* 2-D axial RoPE, rotate-half form, on x[M,H,d] (d % 4 == 0) with pos[M,2] I32 = (row, col) per row:
     *   inv_freq[i] = 1 / theta^(2i / (d/2)) for i < d/4, in F32 (powf, then the reciprocal);
     *   a[d/2] = [row * inv_freq | col * inv_freq] (F32 products);  e = [a | a];
     *   y[m,h,j] = x[m,h,j] * cos(e[j]) + r[j] * sin(e[j]),  r = [-x[d/2:], x[:d/2]]   (F32 throughout).
     * Every head of a row gets the same angles. In place allowed (y == x). */
    glm53_status (*rope_2d)(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *pos,
                            float theta);
    /* Bidirectional (non-causal) attention within segments: rows [cu[s], cu[s+1]) form segment s and attend
     * only inside it. For row i of segment s and head h:
     *   p_j = softmax_j(scale * q[i,h] . k[j,h]) over the rows j of segment s;  o[i,h] = sum_j p_j v[j,h].
     * q, k, v, o [M,H,d] activations; cu_seqlens [n_seg + 1] I32 on this backend, non-decreasing, cu[0] = 0,
     * cu[n_seg] = M. Scores, softmax and the sums in F32. o must not alias q, k or v. */
    glm53_status (*attention_segments)(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q,
                                       const glm53_tensor *k, const glm53_tensor *v, const glm53_tensor *cu_seqlens,
                                       float scale);
};

/* Backend instances. n_threads 0 = all online cores. cuda: one instance per call, each with its own stream on
 * device `ordinal`; GLM53_ERR_BACKEND when the library was built without CUDA or no such device is present. */
glm53_status glm53_backend_cpu_create(int32_t n_threads, glm53_backend **out);
/* Physical cores this process may run on (hyperthread siblings counted once; logical CPUs without topology):
 * the CPU backend's default thread count (kernels/cpu/threadpool.c). */
int32_t      glm53_physical_cores(void);
glm53_status glm53_backend_cuda_create(int32_t ordinal, glm53_backend **out);

/* The counters of an instance (zeros when its backend keeps none). */
void glm53_backend_counters_get(glm53_backend *be, glm53_backend_counters *out);

#ifdef __cplusplus
}
#endif

#endif /* GLM53_BACKEND_H */
