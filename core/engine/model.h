/*
 * model.h - the engine's internal layout of a loaded model and of a sequence's caches.
 *
 * Weights are glm53_tensor values. On the CPU backend they point straight into the mmapped checkpoint (FP8
 * keeps its scale pointer); on CUDA they point at device copies the model owns (weights.c). Names in comments
 * are the checkpoint names after the "model.language_model." prefix; shapes use docs/architecture.md's names:
 *   D hidden, S hc_mult, V vocab, C = linear heads * linear head dim, Hk linear heads, dk = dv linear head dim,
 *   Hm MLA heads, Dq q_lora_rank, R kv_lora_rank, dn qk_nope_head_dim, dvm v_head_dim,
 *   Hi index heads, dI index head dim, P index_kpool, F / Fe dense / expert width, E experts.
 *
 * Blocks, one name each everywhere (docs/model.md maps them to their graph functions, ops and tests):
 *   mhc            hyper-connections around every mixer and feed-forward      (engine/mhc.c)
 *   kda            Kimi delta attention, the linear-attention mixer              (engine/kda.c)
 *   sparse_mla     NoPE MLA over selected positions, the other mixer           (engine/sparse_mla.c)
 *   kpool_indexer  the KPool indexer that selects those positions              (engine/kpool_indexer.c)
 *   moe            routed + shared experts, and the dense MLP of early layers   (engine/moe.c)
 *   mtp            the NextN layer for speculative drafting                    (engine/mtp.c)
 *   vision         the vision tower                                            (engine/vision.c)
 */
#ifndef GLM53_ENGINE_MODEL_H
#define GLM53_ENGINE_MODEL_H

#include "core/engine/plan.h"
#include "kernels/backend.h"
#include "kernels/comm.h"

#include <pthread.h>

typedef struct {
    glm53_tensor fn, base, scale;                 /* [(2+S)*S, S*D], [(2+S)*S], [3] */
} mhc_weights;

typedef struct {
    glm53_tensor q_proj, k_proj, v_proj;          /* [C, D] */
    glm53_tensor q_conv, k_conv, v_conv;          /* [C, K] (checkpoint [C, 1, K]) */
    glm53_tensor b_proj;                          /* [Hk, D] */
    glm53_tensor f_a, f_b, g_a, g_b;              /* [dk, D], [C, dk], [dk, D], [C, dk] */
    glm53_tensor A_log, dt_bias;                  /* [Hk], [C] */
    glm53_tensor o_norm;                          /* [dv] */
    glm53_tensor o_proj;                          /* [D, C] */
} kda_weights;

typedef struct {
    glm53_tensor q_a, q_a_norm, q_b;              /* [Dq, D], [Dq], [Hm*dn, Dq] */
    glm53_tensor kv_a, kv_a_norm, kv_b;           /* [R, D], [R], [Hm*(dn+dvm), R] */
    glm53_tensor o_proj;                          /* [D, Hm*dvm] */
} sparse_mla_weights;

typedef struct {
    bool         present;                         /* false for "shared" indexer layers: they reuse a selection */
    glm53_tensor wq_b, wk, k_norm_w, k_norm_b;    /* [Hi*dI, Dq], [dI, D], [dI], [dI] */
    glm53_tensor weights_proj;                    /* [Hi, D] */
    glm53_tensor ape, compress_gate;              /* [P, dI], [dI, D] */
} kpool_indexer_weights;

typedef struct {
    glm53_tensor gate, up, down;                  /* [F, D], [F, D], [D, F] */
} mlp_weights;

typedef struct {
    glm53_tensor      router, bias;               /* [E, D], [E] */
    glm53_tensor     *gate, *up, *down;           /* E each: [Fe, D], [Fe, D], [D, Fe] */
    const glm53_tensor **gate_ptr, **up_ptr, **down_ptr;   /* the same, as glm53_expert_set points at them */
    glm53_expert_set  experts;                    /* what the moe ops take (prepared on the backend at load) */
    mlp_weights       shared;                     /* width Fe * n_shared_experts */
} moe_weights;

typedef struct {
    int32_t               mixer;                  /* glm53_layer_type */
    int32_t               mlp_type;               /* glm53_mlp_type */
    int32_t               state_index;            /* index among KDA layers or among sparse MLA layers */
    mhc_weights           mhc_attn, mhc_ffn;      /* absent (zero) on MTP layers */
    glm53_tensor          input_norm, post_attn_norm;   /* [D] */
    kda_weights           kda;
    sparse_mla_weights    mla;
    kpool_indexer_weights indexer;
    mlp_weights           mlp;
    moe_weights           moe;
} layer_weights;

typedef struct {
    glm53_tensor  enorm, hnorm, eh_proj, head_norm;   /* [D], [D], [D, 2D], [D] */
    layer_weights block;                               /* a sparse MLA + MoE decoder layer with plain residuals */
} mtp_weights;

typedef struct glm53_worker       glm53_worker;         /* engine/worker.c */
typedef struct glm53_rank_threads glm53_rank_threads;   /* engine/ranks.c */

/* One rank of the model (docs/multi-gpu.md): a backend instance (its device and stream), the slices of the
 * weights it holds, its step plan and its communicator endpoint. A model on one device is one rank holding
 * everything. Rank index = ep_rank * tp + tp_rank. Split across the tp ranks of an ep_rank: KDA and MLA heads,
 * the dense MLP width and every expert's width; across ep_ranks: the routed experts; the shared expert lives on
 * ep_rank 0; everything else (embedding, norms, mHC, the indexer, router, head) is whole on every rank. */
typedef struct glm53_rank {
    glm53_model       *model;
    int32_t            index, tp_rank, ep_rank;
    glm53_backend     *be;
    glm53_comm        *comm;                          /* NULL: one rank without a communicator */
    int64_t            kda_heads, mla_heads;          /* Hk / tp, Hm / tp */
    int64_t            mlp_width, expert_width;       /* F / tp, Fe / tp */
    int32_t            first_expert, n_experts_held;  /* routed experts [first, first + held): E / ep of them */
    bool               holds_shared_expert;           /* ep_rank 0 (its width split by tp) */

    glm53_tensor       embed, final_norm, lm_head;    /* [V, D], [D], [V, D] */
    layer_weights     *layers;                        /* [num_hidden_layers] */
    mtp_weights       *mtp;                           /* [n_mtp] or NULL */
    glm53_tensor     **owned;                         /* backend tensors the rank allocated (weights.c) */
    int64_t            n_owned, cap_owned;
    int64_t            weight_bytes;
    int64_t            cache_bytes;                   /* this rank's share of the live sequences' caches */
    glm53_step_plan    plan;                          /* scratch and metadata of steps, reserved once (plan.h) */
} glm53_rank;

struct glm53_model {
    glm53_model_config config;
    glm53_model_params params;
    glm53_checkpoint  *ckpt;                      /* kept open: CPU weights live in its mmap */

    glm53_rank        *ranks;                     /* [n_ranks]; rank 0 also runs the vision tower */
    int32_t            n_ranks, tp, ep;
    glm53_comm       **comms;                     /* [n_ranks] endpoints, or NULL without a communicator */
    glm53_rank_threads *rank_threads;             /* the threads of ranks 1 .. n_ranks-1 (ranks.c) */
    int32_t            n_kda_layers, n_mla_layers;
    int32_t            n_mtp;
    struct glm53_vision *vision;                  /* vision tower (engine/vision.c), NULL without a vision_config */
    int64_t            weight_bytes;              /* all ranks */

    glm53_worker      *worker;                    /* the async step thread, started by the first submit */

    const char        *trace_dir;                 /* $GLM53_TRACE_DIR: dump intermediates of every step there */
    int64_t            trace_step;
    pthread_mutex_t    lock;                      /* cache accounting, the live-sequence list, the one-step rule */
    int64_t            cache_bytes;
    bool               stepping;
    glm53_seq        **live;                      /* sequences not freed (a batch naming another is refused) */
    int64_t            n_live, cap_live;
    int64_t            held_seqs;                 /* sequences whose memory exists (live, or freed mid-step) */
    bool               free_requested;            /* freed while sequences are held: goes with the last of them */
};

/* Per-layer cache of one sequence. */
typedef struct {
    glm53_tensor conv[3];        /* kda: ring of raw (pre-conv) q, k, v rows [conv_width, C], by position mod width */
    glm53_tensor states;         /* kda: ring of recurrent states [ring, Hk, dk, dv] F32, by length mod ring */
    glm53_tensor latent;         /* sparse_mla: normalised MLA latent rows [cap, R] */
    glm53_tensor kappa, sigma;   /* kpool_indexer: raw indexer keys / pool gate scores [cap, dI] */
    glm53_tensor pooled;         /* kpool_indexer: pooled keys of closed pools [cap / P + 1, dI] F32 */
    /* research capture (glm53_seq_params.capture), host memory, one row per position of this layer's cache */
    int32_t     *cap_ids;        /* moe: [cap, k] routed expert ids */
    float       *cap_weights;    /* moe: [cap, k] their weights */
    int32_t     *cap_positions;  /* kpool_indexer: [cap, W] selected positions */
} layer_cache;

struct glm53_seq {
    glm53_model     *model;
    glm53_seq_params params;
    int64_t          length;
    int32_t          ring;         /* KDA state slots = max_rollback + 1 */
    int32_t          conv_width;   /* raw conv rows kept = conv kernel - 1 + max_rollback */
    /* What the rings hold, shared by every KDA layer (all write the same slots in a step): the length whose
     * state is in each state slot and the position whose raw row is in each conv slot (-1: nothing usable).
     * After a rollback and regrowth, slots of abandoned lengths were overwritten; these tell which survived. */
    int64_t         *state_len;    /* [ring] */
    int64_t         *conv_pos;     /* [conv_width] */
    int64_t         *mtp_length;   /* [n_mtp] positions each MTP layer's cache holds */
    int32_t          n_layers;     /* cache layers per rank: num_hidden_layers + n_mtp (MTP layers last) */
    layer_cache     *layers;       /* [n_ranks][n_layers]: each rank's caches (capture rows on rank 0 only) */
    int64_t          bytes;
    int32_t          in_step;      /* steps running (or queued on the worker) that include this sequence */
    bool             free_requested;   /* freed while in a step: released when the step ends */
};

/* Rank rk's cache of `layer` in sequence s. */
static inline layer_cache *seq_cache(const glm53_seq *s, const glm53_rank *rk, int layer) {
    return &s->layers[(int64_t)rk->index * s->n_layers + layer];
}

/* model.c */
void glm53_model_destroy(glm53_model *model);

/* seq.c */
glm53_status glm53_seq_alloc(glm53_model *model, const glm53_seq_params *params, glm53_seq **out);
/* Records which ring slots a step over rows [pos0, pos0 + n_rows) wrote: valid = true after a step that
 * completed, false after one that failed (the slots hold nothing usable). */
void glm53_seq_note_step(glm53_seq *seq, int64_t pos0, int64_t n_rows, bool valid);
/* Under the model lock: whether `seq` is a live sequence of `model` (compares pointers, reads nothing). */
bool glm53_seq_is_live(const glm53_model *model, const glm53_seq *seq);
/* Under the model lock: a step over these sequences starts / ends; a sequence freed meanwhile is released by
 * glm53_seq_step_end (it returns after the model lock is released). */
void glm53_seq_step_begin(glm53_seq *const *seqs, int32_t n);
void glm53_seq_step_end(glm53_model *model, glm53_seq *const *seqs, int32_t n);

#endif /* GLM53_ENGINE_MODEL_H */
