/*
 * glm53.h - the public C API of glm53, an inference engine for GLM-5.3-Flash (HF model_type "glm5_next").
 *
 * Everything a program (or the LuaJIT package in lua/glm53) needs is declared here; nothing else is public.
 * The engine owns weights, caches and the model step; callers own token ids, sampling decisions and loops.
 *
 * A complete greedy generate loop:
 *
 *     glm53_model_params mp = glm53_model_default_params();
 *     mp.device = GLM53_DEVICE_CPU;                 // or GLM53_DEVICE_CUDA
 *     glm53_model *model;
 *     if (glm53_model_load("models/tiny", &mp, &model) != GLM53_OK) {
 *         fprintf(stderr, "%s\n", glm53_last_error());   // e.g. "safetensors.c:96: model.safetensors: ..."
 *         return 1;
 *     }
 *     const glm53_model_config *cfg = glm53_model_config_get(model);
 *
 *     glm53_seq_params sp = glm53_seq_default_params();
 *     sp.max_tokens = 4096;                          // cache capacity, checked against the model's budget
 *     glm53_seq *seq;
 *     glm53_seq_create(model, &sp, &seq);
 *
 *     int32_t prompt[] = {1, 2, 3};
 *     float *logits = malloc(sizeof(float) * cfg->text.vocab_size);
 *     glm53_step_output out = {.logits = logits, .capacity = 1};
 *     int32_t n_rows = 3;
 *     glm53_batch batch = {.n_seqs = 1, .seqs = &seq, .n_rows = &n_rows, .tokens = prompt};
 *     for (int i = 0; i < 16; i++) {
 *         if (glm53_model_step(model, &batch, &out) != GLM53_OK) break;   // prefill, then decode
 *         int32_t next = glm53_argmax_f32(logits, cfg->text.vocab_size);
 *         printf("%d\n", next);
 *         prompt[0] = next; n_rows = 1;              // feed the chosen token back
 *     }
 *     glm53_seq_free(seq); glm53_model_free(model); free(logits);
 *
 * Conventions
 *   - Every entry point that can fail returns glm53_status; GLM53_OK is 0. The message of the last failure on
 *     the calling thread is glm53_last_error() ("file.c:line: what went wrong"). Nothing here exits, aborts or
 *     longjmps on bad input.
 *   - Handles (glm53_checkpoint, glm53_model, glm53_seq) are opaque; each has a _free that accepts NULL.
 *   - Parameter structs come from *_default_params(); set only the fields you need.
 *   - Enums are append-only: values never change meaning between versions.
 *   - Shapes are row-major, outermost first; a matrix W[out, in] is applied as y = x * W^T.
 *
 * Thread safety
 *   - glm53_last_error, glm53_dtype_*, glm53_version are safe from any thread.
 *   - A glm53_checkpoint or glm53_model may be read (config, tensor list) from several threads at once.
 *   - glm53_model_step runs one batch at a time per model: a call that overlaps another step of the same model
 *     fails with GLM53_ERR_INVALID_ARG (nothing changes). glm53_model_submit queues steps for the model's worker
 *     thread instead; submit, poll, wait and completion_fd may be called from any thread.
 *   - glm53_seq_free may be called at any time, also while a step (or a queued one) includes the sequence: it
 *     leaves the model's live sequences at once (later steps naming it fail cleanly) and its memory goes when
 *     that step ends. A sequence must not be forked or truncated while a step that includes it runs.
 *
 * The ffi.cdef of the Lua package is generated from the region between the API markers below
 * (scripts/gen_cdef.lua); keep that region free of preprocessor lines.
 */
#ifndef GLM53_H
#define GLM53_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define GLM53_API __declspec(dllexport)
#else
#define GLM53_API __attribute__((visibility("default")))
#endif

/* The version of the binary interface below: bumped whenever a struct layout, an enum value or a signature of
 * the API region changes. The Lua package checks glm53_abi_version() against the version its cdef was generated
 * from, so a stale libglm53.so is refused at load instead of corrupting memory. */
#define GLM53_ABI_VERSION 6

#ifdef __cplusplus
extern "C" {
#endif

/* GLM53_API_BEGIN */

/* ------------------------------------------------------------------------------------------------------------
 * Status and errors
 */
typedef enum glm53_status {
    GLM53_OK                = 0,
    GLM53_ERR_INVALID_ARG   = 1,  /* a caller passed something the API forbids (NULL handle, bad shape, ...) */
    GLM53_ERR_IO            = 2,  /* open/read/mmap failed */
    GLM53_ERR_FORMAT        = 3,  /* a file is malformed: bad JSON, truncated safetensors, shape mismatch ... */
    GLM53_ERR_UNSUPPORTED   = 4,  /* well-formed but not something glm53 implements (unknown dtype, key value) */
    GLM53_ERR_NOT_FOUND     = 5,  /* a named tensor, file or key is missing */
    GLM53_ERR_OUT_OF_MEMORY = 6,  /* host or device allocation failed */
    GLM53_ERR_CACHE_FULL    = 7,  /* a sequence or the model's cache budget has no room for more tokens */
    GLM53_ERR_OUT_OF_RANGE  = 8,  /* an index (token id, position, row) outside its valid range */
    GLM53_ERR_BACKEND       = 9,  /* a CUDA / cuBLAS call failed, or the backend is not compiled in */
} glm53_status;

GLM53_API const char *glm53_last_error(void);                 /* "" when the thread has no error */
GLM53_API const char *glm53_status_name(glm53_status status);  /* "GLM53_ERR_FORMAT", ... */
GLM53_API const char *glm53_version(void);
GLM53_API int32_t     glm53_abi_version(void);                 /* GLM53_ABI_VERSION of the built library */

/* ------------------------------------------------------------------------------------------------------------
 * Tensors
 */
typedef enum glm53_dtype {
    GLM53_F32      = 0,
    GLM53_BF16     = 1,
    GLM53_F16      = 2,
    GLM53_F8_E4M3  = 3,   /* OCP E4M3 ("e4m3fn"): no infinities, 0x7f/0xff are NaN, max 448 */
    GLM53_I32      = 4,
    GLM53_I64      = 5,
    GLM53_F64      = 6,
    GLM53_DTYPE_COUNT = 7
} glm53_dtype;

typedef enum glm53_device {
    GLM53_DEVICE_CPU  = 0,
    GLM53_DEVICE_CUDA = 1,
} glm53_device;

enum { GLM53_MAX_DIMS = 5 };

/* A view of n-dimensional data. Checkpoint tensors point into the mmapped file (read-only); model tensors
 * may live on a device. `stride` counts elements. `scale` is set on F8_E4M3 weights that have a
 * `weight_scale_inv` companion: F32 [ceil(shape[0]/block_rows), ceil(shape[1]/block_cols)], and the real value
 * of element (i, j) is e4m3(data[i, j]) * scale[i / block_rows, j / block_cols]. */
typedef struct glm53_tensor {
    int32_t dtype;                    /* glm53_dtype */
    int32_t device;                   /* glm53_device */
    int32_t ndim;
    int32_t block_rows, block_cols;   /* FP8 scale block (128 x 128 in released checkpoints); 0 without scale */
    int64_t shape[GLM53_MAX_DIMS];
    int64_t stride[GLM53_MAX_DIMS];
    void   *data;
    const struct glm53_tensor *scale;
    const char *name;                 /* checkpoint name, or NULL */
} glm53_tensor;

GLM53_API size_t       glm53_dtype_size(glm53_dtype dtype);   /* bytes per element; 0 if unknown */
GLM53_API const char  *glm53_dtype_name(glm53_dtype dtype);   /* "F32", "BF16", "F8_E4M3", ... */
GLM53_API int64_t      glm53_tensor_numel(const glm53_tensor *t);
/* Converts the first `n` elements (row-major) of any numeric CPU tensor (checkpoint tensors are) to float,
 * dequantising FP8 with its scale. n must be <= numel. */
GLM53_API glm53_status glm53_tensor_to_f32(const glm53_tensor *t, float *dst, int64_t n);
/* Index of the largest of n floats (the lowest index on ties); -1 if n <= 0. */
GLM53_API int32_t      glm53_argmax_f32(const float *x, int64_t n);

/* ------------------------------------------------------------------------------------------------------------
 * Model configuration (parsed from config.json: nested text_config/vision_config or the flat text-only form)
 */
enum { GLM53_MAX_LAYERS = 128 };

/* KDA: Kimi delta attention ("linear_attention" in config.json); SPARSE_MLA: NoPE MLA over the positions the
 * KPool indexer selects ("deepseek_sparse_attention"). */
typedef enum glm53_layer_type   { GLM53_LAYER_KDA = 0, GLM53_LAYER_SPARSE_MLA = 1 } glm53_layer_type;
typedef enum glm53_mlp_type     { GLM53_MLP_DENSE = 0, GLM53_MLP_MOE = 1 } glm53_mlp_type;
typedef enum glm53_indexer_type { GLM53_INDEXER_FULL = 0, GLM53_INDEXER_SHARED = 1 } glm53_indexer_type;

typedef struct glm53_text_config {
    int32_t vocab_size, hidden_size, num_hidden_layers;
    int32_t intermediate_size, moe_intermediate_size;
    /* MoE */
    int32_t n_routed_experts, num_experts_per_tok, n_shared_experts, n_group, topk_group, norm_topk_prob;
    float   routed_scaling_factor;
    /* MLA (NoPE) */
    int32_t num_attention_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* KPool indexer */
    int32_t index_n_heads, index_head_dim, index_topk, index_kpool, index_kpool_always_select_tail;
    /* KDA */
    int32_t linear_num_heads, linear_head_dim, linear_conv_kernel_dim;
    int32_t linear_has_lower_bound;   /* 1: g = lb * sigmoid(exp(A_log) * (f + dt_bias)); 0: Kimi softplus form */
    float   linear_lower_bound;
    /* mHC */
    int32_t hc_mult, hc_sinkhorn_iters;
    float   hc_eps;
    /* misc */
    float   rms_norm_eps, swiglu_limit;
    int32_t num_nextn_predict_layers;   /* MTP layers stored after the main layers (0 if absent) */
    int32_t pad_token_id, tie_word_embeddings;
    int32_t layer_types[GLM53_MAX_LAYERS];    /* glm53_layer_type per main layer */
    int32_t mlp_types[GLM53_MAX_LAYERS];      /* glm53_mlp_type per main layer */
    int32_t indexer_types[GLM53_MAX_LAYERS];  /* glm53_indexer_type per main layer (sparse MLA layers only) */
} glm53_text_config;

typedef struct glm53_vision_config {
    int32_t depth, hidden_size, num_heads, intermediate_size, out_hidden_size, projection_intermediate_size;
    int32_t in_channels, patch_size, temporal_patch_size, spatial_merge_size, attention_bias;
    float   rms_norm_eps, swiglu_limit;
} glm53_vision_config;

typedef struct glm53_model_config {
    glm53_text_config   text;
    glm53_vision_config vision;
    int32_t has_vision;
    int32_t image_token_id, video_token_id;
    int32_t image_start_token_id, image_end_token_id, video_start_token_id, video_end_token_id;
    int32_t fp8_block_rows, fp8_block_cols;   /* quantization_config.weight_block_size; 0 when unquantised */
} glm53_model_config;

/* ------------------------------------------------------------------------------------------------------------
 * Checkpoints: config.json + model.safetensors, or sharded with model.safetensors.index.json, mmapped.
 */
typedef struct glm53_checkpoint glm53_checkpoint;

/* `path` is a checkpoint directory or a single .safetensors file. Every tensor header is validated on open;
 * a malformed file fails with GLM53_ERR_FORMAT naming the file and tensor. */
GLM53_API glm53_status glm53_checkpoint_open(const char *path, glm53_checkpoint **out);
GLM53_API void         glm53_checkpoint_free(glm53_checkpoint *ckpt);
GLM53_API int64_t      glm53_checkpoint_n_tensors(const glm53_checkpoint *ckpt);
/* Tensors in name order; NULL if i is out of range. FP8 weights carry their scale in ->scale. */
GLM53_API const glm53_tensor *glm53_checkpoint_tensor(const glm53_checkpoint *ckpt, int64_t i);
GLM53_API const char  *glm53_checkpoint_tensor_file(const glm53_checkpoint *ckpt, int64_t i);
/* GLM53_ERR_NOT_FOUND (message names the tensor) if absent. */
GLM53_API glm53_status glm53_checkpoint_find(const glm53_checkpoint *ckpt, const char *name,
                                             const glm53_tensor **out);
/* The raw config.json text, or NULL when the checkpoint is a bare .safetensors file. */
GLM53_API const char  *glm53_checkpoint_config_json(const glm53_checkpoint *ckpt);
/* Parses config.json; unknown values of known keys (a layer type "foo", scoring_func "softmax") are errors. */
GLM53_API glm53_status glm53_checkpoint_config(const glm53_checkpoint *ckpt, glm53_model_config *out);

/* ------------------------------------------------------------------------------------------------------------
 * Models, sequences (caches) and steps
 */
typedef struct glm53_model glm53_model;
typedef struct glm53_seq   glm53_seq;

typedef struct glm53_model_params {
    int32_t device;            /* glm53_device */
    int32_t n_threads;         /* CPU worker threads; 0 = number of online cores */
    int32_t cuda_device;       /* CUDA ordinal */
    int32_t load_mtp;          /* 1: also load the MTP layers when the checkpoint has them */
    int64_t cache_bytes_max;   /* budget for all sequence caches of this model; 0 = unlimited */
    int32_t activation_dtype;  /* -1: the backend's (CPU F32, CUDA BF16); GLM53_F32 runs CUDA in F32 (slower,
                                  for precision studies); BF16 on the CPU backend is refused */
    int32_t step_rows;         /* most batch rows one pass of a step computes at once; a longer step (a long
                                  prompt) runs in passes, so its scratch stays bounded. 0: the backend's (CPU
                                  512, CUDA 8192) */
    /* Tensor and expert parallelism (docs/multi-gpu.md): tp * ep ranks, rank r = (ep_rank r / tp, tp_rank r % tp)
     * on CUDA device cuda_device + r (or a CPU backend instance of its own). Attention heads and MLP widths split
     * across the tp ranks of an ep_rank, routed experts across the ep_ranks. 0 means 1. */
    int32_t tp, ep;
    int32_t communicator;      /* glm53_communicator */
} glm53_model_params;

/* How the ranks of a model exchange partial sums. */
typedef enum glm53_communicator {
    GLM53_COMMUNICATOR_AUTO    = 0,   /* none for one rank; else threads on the CPU, NCCL on CUDA */
    GLM53_COMMUNICATOR_THREADS = 1,   /* ranks as threads of this process over host memory (CPU backend) */
    GLM53_COMMUNICATOR_NCCL    = 2,   /* NCCL (CUDA backend); also with one rank, to exercise the path */
} glm53_communicator;

/* What one rank of a model holds. */
typedef struct glm53_rank_info {
    int32_t tp_rank, ep_rank;
    int32_t device;            /* glm53_device */
    int32_t cuda_device;       /* its CUDA ordinal (-1 on the CPU) */
    int32_t first_expert, n_experts;   /* the routed experts it computes */
    int64_t weight_bytes;      /* the weight slices placed on it */
    int64_t cache_bytes;       /* its share of the live sequences' caches */
} glm53_rank_info;

typedef struct glm53_seq_params {
    int64_t max_tokens;        /* tokens the sequence can hold; its cache memory is reserved up front */
    int32_t max_rollback;      /* how many of the latest tokens truncate/fork can go back over (KDA state
                                  snapshots kept per token); speculative decoding needs at least K + 1 */
    int32_t capture;           /* glm53_capture_flags: what steps record for this sequence; 0 (the default):
                                  nothing, and nothing is spent on it */
} glm53_seq_params;

/* Research capture: per token of a sequence, what the routing and the selection chose (glm53_seq_capture_*). */
typedef enum glm53_capture_flags {
    GLM53_CAPTURE_EXPERTS   = 1,   /* every MoE layer: the routed expert ids and their weights */
    GLM53_CAPTURE_SELECTION = 2,   /* every sparse MLA layer with a full indexer: the positions each token attends */
} glm53_capture_flags;

GLM53_API glm53_model_params glm53_model_default_params(void);
GLM53_API glm53_seq_params   glm53_seq_default_params(void);

GLM53_API glm53_status glm53_model_load(const char *path, const glm53_model_params *params, glm53_model **out);
/* Frees the model; while sequences of it are alive the model stays until the last of them is freed. */
GLM53_API void         glm53_model_free(glm53_model *model);
GLM53_API const glm53_model_config *glm53_model_config_get(const glm53_model *model);
GLM53_API int64_t      glm53_model_weight_bytes(const glm53_model *model);
GLM53_API int64_t      glm53_model_cache_bytes(const glm53_model *model);    /* reserved by live sequences */
GLM53_API int32_t      glm53_model_n_ranks(const glm53_model *model);        /* tp * ep */
GLM53_API glm53_status glm53_model_rank_info(const glm53_model *model, int32_t rank, glm53_rank_info *out);

GLM53_API glm53_status glm53_seq_create(glm53_model *model, const glm53_seq_params *params, glm53_seq **out);
/* A new sequence holding the first n_tokens of src (prefix reuse). n_tokens may be any length from
 * seq_length(src) - max_rollback to seq_length(src); earlier lengths fail with GLM53_ERR_OUT_OF_RANGE. params:
 * the fork's own (NULL: src's), so a prefix kept small can start a request of any size (max_tokens >=
 * n_tokens). Only the kept positions are copied. A fork with src's max_rollback can roll back as far as src
 * could; with another, only to n_tokens (and to 0). A fork that captures where src did not has zero capture
 * rows for the kept positions. */
GLM53_API glm53_status glm53_seq_fork(const glm53_seq *src, int64_t n_tokens, const glm53_seq_params *params,
                                      glm53_seq **out);
/* Drops the tokens after n_tokens (same range rule as fork): speculative rollback. */
GLM53_API glm53_status glm53_seq_truncate(glm53_seq *seq, int64_t n_tokens);
GLM53_API int64_t      glm53_seq_length(const glm53_seq *seq);
GLM53_API int64_t      glm53_seq_capacity(const glm53_seq *seq);
GLM53_API glm53_seq_params glm53_seq_params_get(const glm53_seq *seq);   /* what it was made with (defaults: NULL) */
GLM53_API int64_t      glm53_seq_cache_bytes(const glm53_seq *seq);
GLM53_API void         glm53_seq_free(glm53_seq *seq);

/* What a sequence made with a capture flag recorded for `layer` (main layers 0 .. num_hidden_layers-1, MTP
 * layer i as num_hidden_layers + i), one row per position of that layer's cache, rows [0, *n_positions):
 *   experts:   ids[n, k] I32 (in the router's order: best first) and weights[n, k] F32 (after normalisation
 *              and routed_scaling_factor, as the experts are summed; -1 / 0 for an unused slot);
 *   selection: positions[n, width] I32, the attended positions in the order attention sums them (the chosen
 *              pools ascending, then the open pool), -1 padded. A layer with a "shared" indexer attends the
 *              previous full layer's selection and records nothing of its own.
 * The pointers stay valid until the sequence is freed; later steps overwrite the rows they recompute (after a
 * rollback, rows past the length are stale and outside *n_positions). GLM53_ERR_UNSUPPORTED when the layer has
 * no such block or the sequence was made without the flag. A fork copies the capture of the positions it keeps. */
GLM53_API glm53_status glm53_seq_capture_experts(const glm53_seq *seq, int32_t layer, const int32_t **ids,
                                                 const float **weights, int32_t *k, int64_t *n_positions);
GLM53_API glm53_status glm53_seq_capture_selection(const glm53_seq *seq, int32_t layer, const int32_t **positions,
                                                   int32_t *width, int64_t *n_positions);

/* One step: every sequence in the batch receives its new rows (tokens, or embeddings for image/video rows).
 * Rows are concatenated sequence by sequence. Prefill, chunked prefill, decode and speculative verification
 * are all this call with different row counts. */
typedef struct glm53_batch {
    int32_t         n_seqs;
    glm53_seq     **seqs;           /* [n_seqs], each at most once */
    const int32_t  *n_rows;         /* [n_seqs] new rows per sequence (>= 1) */
    const int32_t  *tokens;         /* [total rows] token ids */
    const float    *embeddings;     /* NULL, or [total rows, hidden] used where use_embedding[r] != 0 */
    const uint8_t  *use_embedding;  /* NULL, or [total rows] */
    const uint8_t  *want_output;    /* NULL: the last row of each sequence; else [total rows] flags */
} glm53_batch;

/* Outputs for the requested rows, in row order. The caller owns the buffers.
 *
 * top_k > 0 asks for each row's top_k largest logits, chosen where the logits are (on the GPU with CUDA):
 * ids [0, top_n_valid) compete (<= 0 or >= vocab_size: every id; GLM-5.3's tokenizer ends at 154856 of 154880
 * rows), descending, the lower id first on equal values, NaN after every number. top_k = 1 is greedy decoding
 * (the id glm53_argmax_f32 gives over the valid ids): with logits NULL a step then copies 4 bytes a row to the
 * host instead of the vocabulary-wide row (620 KB at GLM-5.3's vocabulary). Larger top_k hands a Lua policy or
 * a host-side filter its candidates. */
enum { GLM53_MAX_TOP_K = 64 };
typedef struct glm53_step_output {
    float   *logits;                /* NULL, or host [capacity, vocab_size] */
    float   *hidden;                /* NULL, or host [capacity, hidden_size]: final-normed hidden (MTP input) */
    int32_t  capacity;              /* rows the buffers hold */
    int32_t  n_out;                 /* set by the step: rows written */
    int32_t  top_k;                 /* 0: none; 1 .. GLM53_MAX_TOP_K */
    int32_t  top_n_valid;           /* ids >= this never compete; <= 0: every id */
    int32_t *top_ids;               /* host [capacity, top_k] when top_k > 0 */
    float   *top_logits;            /* NULL, or host [capacity, top_k]: their logits */
} glm53_step_output;

GLM53_API glm53_status glm53_model_step(glm53_model *model, const glm53_batch *batch, glm53_step_output *out);

/* ---- Async steps ----
 * A worker thread per model (started by the first submit or completion_fd) runs submitted steps one after the
 * other, and signals each completion on a file descriptor an event loop can poll (readable while completions
 * wait to be taken), so the loop keeps running while a long prefill computes:
 *
 *     int fd = glm53_model_completion_fd(model);       // uv_poll_start(fd, UV_READABLE, ...) in luv
 *     glm53_step_request rq = {.mtp_layer = -1, .batch = &batch, .out = &out, .tag = 7};
 *     glm53_model_submit(model, &rq);
 *     ... when fd is readable:
 *     glm53_step_completion c;
 *     while (glm53_model_poll(model, &c)) handle(c.tag, c.status, c.error);
 *
 * The batch, everything it points to, hidden_in and the output buffers must stay valid and unchanged until the
 * request's completion is taken. The error of a failed step travels in its completion (the worker's own
 * glm53_last_error is not the caller's). Freeing the model cancels what is queued and waits for the step that
 * is running. */
typedef struct glm53_step_request {
    int32_t            mtp_layer;   /* -1: a step of the model (glm53_model_step); >= 0: of that MTP layer */
    const glm53_batch *batch;
    const float       *hidden_in;   /* MTP steps: as glm53_model_mtp_step */
    glm53_step_output *out;
    uint64_t           tag;         /* the caller's, handed back with the completion */
} glm53_step_request;

typedef struct glm53_step_completion {
    uint64_t tag;
    int32_t  status;                /* glm53_status of the step */
    int32_t  n_out;                 /* output rows written */
    char     error[512];            /* the step's error message ("" when it succeeded) */
} glm53_step_completion;

/* Queues a step. Fails at once (nothing queued) when the request is malformed or names a sequence that is not
 * live; everything else the step checks is reported in its completion. */
GLM53_API glm53_status glm53_model_submit(glm53_model *model, const glm53_step_request *request);
/* The worker's completion descriptor (an eventfd; starts the worker); -1 with the error set on failure. */
GLM53_API int32_t      glm53_model_completion_fd(glm53_model *model);
/* Takes the oldest completion: 1 when one was taken into *out, 0 when none is waiting. Never blocks. */
GLM53_API int32_t      glm53_model_poll(glm53_model *model, glm53_step_completion *out);
/* Waits for the oldest completion; GLM53_ERR_INVALID_ARG when nothing is queued or running. */
GLM53_API glm53_status glm53_model_wait(glm53_model *model, glm53_step_completion *out);

/* ------------------------------------------------------------------------------------------------------------
 * MTP (multi-token prediction) layers, for speculative drafting. The checkpoint stores them after the main
 * layers (layer 45 in GLM-5.3-Flash); each keeps its own cache in every sequence, with its own length.
 * A row at MTP position p consumes the target's final hidden h_p (glm53_step_output.hidden of the row at p) and
 * the token x_{p+1}, and predicts x_{p+2}. Chained drafting feeds a draft step's output hidden (the MTP layer's
 * post shared_head.norm state) and its drafted token back in at position p+1.
 */
GLM53_API int32_t      glm53_model_n_mtp(const glm53_model *model);   /* MTP layers loaded (0: none) */
/* batch->tokens are the x_{p+1}; hidden_in is host F32 [total rows, hidden_size]. Outputs as glm53_model_step:
 * the draft logits and, in out->hidden, the MTP output hidden for the next chained step. */
GLM53_API glm53_status glm53_model_mtp_step(glm53_model *model, int32_t mtp_layer, const glm53_batch *batch,
                                            const float *hidden_in, glm53_step_output *out);
GLM53_API int64_t      glm53_seq_mtp_length(const glm53_seq *seq, int32_t mtp_layer);   /* -1: no such layer */
/* Drops MTP cache positions after n_tokens (any n_tokens <= its length: the MTP cache has no recurrent state). */
GLM53_API glm53_status glm53_seq_mtp_truncate(glm53_seq *seq, int32_t mtp_layer, int64_t n_tokens);

/* ---- Tokenizer ---- */
/* Byte-level BPE exactly as HF tokenizers runs it, from a tokenizer.json (model BPE; pre-tokenizers Split with
 * a regex and behavior Isolated, ByteLevel, Sequence of those; normalizer none or NFC; decoder ByteLevel) or
 * from a tiktoken rank file. Anything else in a file is GLM53_ERR_UNSUPPORTED naming it.
 *   - Text is UTF-8. Invalid input bytes are encoded as if each maximal invalid sequence were U+FFFD (what
 *     Python's bytes.decode("utf-8", "replace") would hand HF); decode turns invalid output into U+FFFD the way
 *     HF does (Rust's from_utf8_lossy).
 *   - Ids: the base vocabulary, then the added tokens, as numbered in the file. Encoding never adds anything
 *     (no BOS): a chat template writes its own special tokens, and they are matched in the text.
 *   - Added tokens (special or not) are matched in the text literally, leftmost-longest, before anything else.
 *   - A loaded tokenizer is immutable: every call below may run on any thread, concurrently. */
typedef struct glm53_tokenizer glm53_tokenizer;

typedef enum glm53_encode_flags {
    GLM53_ENCODE_SPECIAL_AS_TEXT = 1,   /* special added tokens in the text are encoded as plain text (for
                                           untrusted input; HF's encode_special_tokens) */
} glm53_encode_flags;

typedef enum glm53_decode_flags {
    GLM53_DECODE_SKIP_SPECIAL = 1,      /* leave special added tokens out (HF's skip_special_tokens) */
} glm53_decode_flags;

/* `path` is a tokenizer.json, or a tiktoken rank file (recognised as not JSON), which then gets the GLM-5.3
 * split regex and no special tokens; glm53_tokenizer_load_tiktoken says more. */
GLM53_API glm53_status glm53_tokenizer_load(const char *path, glm53_tokenizer **out);
/* A tiktoken rank file: one "<base64 token bytes> <rank>" per line; ranks are the ids, and BPE merges the
 * adjacent pair whose concatenation has the lowest rank. `pattern`: the split regex (NULL: GLM-5.3's).
 * special_tokens[n_special] (UTF-8, NUL-terminated) get the ids special_ids[n_special] and are matched in the
 * text like added tokens. */
GLM53_API glm53_status glm53_tokenizer_load_tiktoken(const char *path, const char *pattern,
                                                     const char *const *special_tokens,
                                                     const int32_t *special_ids, int32_t n_special,
                                                     glm53_tokenizer **out);
GLM53_API void         glm53_tokenizer_free(glm53_tokenizer *tok);

/* Encodes text[0, len) with glm53_encode_flags into ids[0, cap). *n_out receives the number of ids the text
 * needs; when that exceeds cap, the first cap ids are written and GLM53_ERR_OUT_OF_RANGE is returned, so the
 * caller can grow its buffer to *n_out and retry. */
GLM53_API glm53_status glm53_tokenizer_encode(const glm53_tokenizer *tok, const char *text, size_t len,
                                              int32_t flags, int32_t *ids, int64_t cap, int64_t *n_out);
/* Encodes texts[n_texts] (lengths[n_texts] bytes each) on n_threads threads (0 or 1: the calling thread).
 * The ids of text i land in ids[offsets[i], offsets[i + 1]); offsets has n_texts + 1 entries and
 * offsets[n_texts] is the total. Same cap rule as glm53_tokenizer_encode (offsets are always complete). */
GLM53_API glm53_status glm53_tokenizer_encode_batch(const glm53_tokenizer *tok, const char *const *texts,
                                                    const size_t *lengths, int32_t n_texts, int32_t flags,
                                                    int32_t n_threads, int32_t *ids, int64_t cap,
                                                    int64_t *offsets);
/* Decodes ids[n] with glm53_decode_flags to UTF-8 in out[0, cap); *n_out receives the byte count, and a NUL
 * follows the text when cap leaves room. Same cap rule as encode. An id without a token is
 * GLM53_ERR_OUT_OF_RANGE (the message names it). */
GLM53_API glm53_status glm53_tokenizer_decode(const glm53_tokenizer *tok, const int32_t *ids, int64_t n,
                                              int32_t flags, char *out, int64_t cap, int64_t *n_out);
/* The raw bytes of one token (what decode concatenates before repairing UTF-8): *piece points into the
 * tokenizer (valid until it is freed; not NUL-terminated), *len is its length. */
GLM53_API glm53_status glm53_tokenizer_token_to_piece(const glm53_tokenizer *tok, int32_t id,
                                                      const char **piece, int64_t *len);
/* A token as the file spells it ("Ġhello", "<|user|>"; tiktoken tokens in the same byte-level spelling),
 * NUL-terminated and owned by the tokenizer; NULL for an id without a token. */
GLM53_API const char  *glm53_tokenizer_token_string(const glm53_tokenizer *tok, int32_t id);
/* The id of a spelling (an added token's content, or a vocabulary entry as the file spells it); -1 if none. */
GLM53_API int32_t      glm53_tokenizer_token_id(const glm53_tokenizer *tok, const char *str);
/* Ids run over [0, n_vocab) = the largest id + 1 (GLM-5.3: 154856; its embedding has 154880 rows). */
GLM53_API int32_t      glm53_tokenizer_n_vocab(const glm53_tokenizer *tok);
/* 1 for a special added token (what GLM53_DECODE_SKIP_SPECIAL leaves out), 0 otherwise or for a bad id. */
GLM53_API int32_t      glm53_tokenizer_is_special(const glm53_tokenizer *tok, int32_t id);
/* 1 for any added token (special or not), 0 otherwise or for a bad id. */
GLM53_API int32_t      glm53_tokenizer_is_added(const glm53_tokenizer *tok, int32_t id);

/* ---- Sampling ---- */
/* Vocab-wide sampling on host F32 logits rows (as glm53_step_output returns them). A glm53_sampler belongs to
 * one sequence: it owns that sequence's seeded RNG and its penalty history, and preallocated scratch for one
 * row, so no call below allocates per token (the output history grows by doubling). Logits come to the host
 * first, or only their best few (glm53_sampler_sample_top below).
 *
 * The filtered distribution of a row, in vLLM's order (definitions are vLLM's, which HF shares where both exist):
 *   0. ids >= n_valid (padded vocabulary rows) are banned; their logits are not read
 *   1. x = logits + logit_bias                                   (-inf bans a token; NaN or +inf logits are an error)
 *   2. repetition penalty r on tokens seen in the prompt or the output: x > 0 ? x / r : x * r      (HF and vLLM)
 *      frequency penalty f and presence penalty a on output tokens: x -= f * count + a * (count > 0)   (OpenAI/vLLM)
 *   3. temperature < 1e-5: greedy, the distribution is one-hot at argmax x (lowest id on ties); stop here
 *   4. x = x / temperature;  p = softmax(x)
 *   5. min_p: drop tokens with p < min_p * max p
 *   6. top_k: keep the k largest (ties by lower id)
 *   7. top_p: keep the largest tokens while the mass before each (renormalised after 5 and 6) is < top_p
 *   8. renormalise over what is kept
 * glm53_sampler_probs gives that distribution; glm53_sampler_sample draws from it; speculative decoding applies
 * the very same function to target and draft rows, so both sides are filtered identically by construction.
 *
 * RNG: xoshiro256** seeded through splitmix64, one stream per sampler: the same seed and the same calls give the
 * same tokens on every run; across platforms the stream is identical and tokens differ only if exp() rounds
 * differently right at a sampling boundary.
 *
 * Thread safety: a sampler is not synchronised; use each from one thread at a time. Distinct samplers share
 * nothing and may run concurrently. */
typedef struct glm53_sampler glm53_sampler;

typedef struct glm53_sampler_params {
    float    temperature;         /* < 1e-5 (0, say): greedy */
    int32_t  top_k;               /* <= 0 or >= vocab: off */
    float    top_p;               /* (0, 1]; 1: off */
    float    min_p;               /* [0, 1]; 0: off */
    float    repetition_penalty;  /* > 0; 1: off */
    float    presence_penalty;    /* 0: off */
    float    frequency_penalty;   /* 0: off */
    uint64_t seed;                /* the RNG stream (create and reset start it) */
    int32_t  n_valid;             /* ids >= n_valid are never produced: the embedding rows past the tokenizer's
                                     vocabulary (GLM-5.3: 154856 of 154880), masked as -inf before step 1;
                                     <= 0 or >= vocab: every id is valid */
} glm53_sampler_params;

GLM53_API glm53_sampler_params glm53_sampler_default_params(void);   /* greedy, every filter off, seed 0 */
GLM53_API glm53_status glm53_sampler_create(int32_t vocab_size, const glm53_sampler_params *params,
                                            glm53_sampler **out);
GLM53_API void         glm53_sampler_free(glm53_sampler *s);
/* New filter settings; the RNG and the history are kept (the seed is read by create and reset only). */
GLM53_API glm53_status glm53_sampler_set_params(glm53_sampler *s, const glm53_sampler_params *params);
GLM53_API glm53_status glm53_sampler_get_params(const glm53_sampler *s, glm53_sampler_params *out);
/* Forgets the prompt and output history and restarts the RNG from params.seed. */
GLM53_API glm53_status glm53_sampler_reset(glm53_sampler *s);
/* Replaces the logit bias with bias[i] added to token ids[i] (n = 0 clears it); ids repeat: the last wins. */
GLM53_API glm53_status glm53_sampler_set_logit_bias(glm53_sampler *s, const int32_t *ids, const float *bias,
                                                    int32_t n);
/* History for the penalties: prompt tokens (repetition only) and accepted output tokens (all three). rewind
 * drops the last n accepted tokens, e.g. drafts that verification rejected. */
GLM53_API glm53_status glm53_sampler_add_prompt(glm53_sampler *s, const int32_t *ids, int64_t n);
GLM53_API glm53_status glm53_sampler_accept(glm53_sampler *s, int32_t id);
GLM53_API glm53_status glm53_sampler_rewind(glm53_sampler *s, int64_t n);
GLM53_API int64_t      glm53_sampler_n_accepted(const glm53_sampler *s);
/* The filtered distribution of logits[vocab] into probs[vocab] (zeros where filtered out; sums to 1). */
GLM53_API glm53_status glm53_sampler_probs(glm53_sampler *s, const float *logits, float *probs);
/* A token drawn from the filtered distribution of logits[vocab] (argmax when greedy; no RNG draw then). */
GLM53_API glm53_status glm53_sampler_sample(glm53_sampler *s, const float *logits, int32_t *token);
/* A token drawn from probs[vocab] (non-negative, any positive total). */
GLM53_API glm53_status glm53_sampler_sample_probs(glm53_sampler *s, const float *probs, int32_t *token);
/* A token drawn from normalise(max(0, p - q)) over [vocab]: the resample after a rejected draft. Where p <= q
 * everywhere (p == q) it draws from p. */
GLM53_API glm53_status glm53_sampler_sample_residual(glm53_sampler *s, const float *p, const float *q,
                                                     int32_t *token);
/* The filtered candidates of logits[vocab], most likely first, at most max_n of them: ids, processed logits
 * (steps 1-4: bias, penalties, temperature) and probabilities renormalised over the candidates returned. */
GLM53_API glm53_status glm53_sampler_candidates(glm53_sampler *s, const float *logits, int32_t max_n,
                                                int32_t *ids, float *cand_logits, float *cand_probs,
                                                int32_t *n_out);
/* The same draw from a row's best logits instead of the whole row: a step's top-k outputs, chosen where the
 * logits are (glm53_step_output.top_k, top_n_valid = the sampler's n_valid), so no logits row comes to the host.
 * glm53_sampler_top_needed is how many best logits a draw needs: top_k + 1, or 1 when greedy; 0 when these
 * settings need the whole row (a logit bias, a penalty, or sampling without a top_k below GLM53_MAX_TOP_K).
 * glm53_sampler_sample_top draws from ids[n], logits[n] (n >= that; the row's best over the valid ids, best
 * first, the lower id on equal values, as the step gives them) the token glm53_sampler_sample gives for the
 * whole row from the same sampler state: the same filters, the same weights summed in the same order, the same
 * uniform. GLM53_ERR_UNSUPPORTED when top_needed is 0; only the n logits are checked for NaN and +inf. */
GLM53_API int32_t      glm53_sampler_top_needed(const glm53_sampler *s);
GLM53_API glm53_status glm53_sampler_sample_top(glm53_sampler *s, const int32_t *ids, const float *logits,
                                                int32_t n, int32_t *token);
/* The next uniform double in [0, 1) of the sampler's stream (for policies and rejection tests). */
GLM53_API glm53_status glm53_sampler_uniform(glm53_sampler *s, double *out);

/* ---- Images and video ---- */
/* Preprocessing for the vision tower, equal to transformers' Glm5NextImageProcessor / Glm5NextVideoProcessor
 * (the TorchvisionBackend ones, which transformers uses by default): decode (PNG, JPEG, BMP, GIF), RGB, the
 * aspect-preserving resize to multiples of patch * merge (28) inside the token budget (torchvision's
 * antialiased bicubic on uint8, as torch runs it on the CPU), zero padding right/bottom, (x - 255 mean) /
 * (255 std) with the OpenAI CLIP mean and std, and patchify. docs/vision.md has the details and precision.
 *
 * Pixel rows: one row per patch, 3 * temporal_patch_size * patch_size^2 floats (1176) ordered (channel, frame,
 * y, x); rows in merge-block order (for each 2x2 block of patches, row-major over blocks, its four patches
 * row-major), temporal group by temporal group. grid_thw = (temporal groups, patch rows, patch columns); the tower
 * turns t * h * w / merge^2 of them into embedding rows, one per <|image|> placeholder token.
 *
 * Buffers are the caller's: *n_patches receives the rows needed (and grid_thw the grid). With pixels NULL the
 * call only reports them (GLM53_OK); with a buffer of fewer than *n_patches rows it writes nothing else and
 * returns GLM53_ERR_OUT_OF_RANGE. Bad input (empty, truncated, corrupt, unsupported format, dimensions or a
 * frame count over the limits) fails with GLM53_ERR_FORMAT / GLM53_ERR_UNSUPPORTED and a message saying which.
 * Every call here is thread-safe (no shared state). */
typedef struct glm53_image_params {
    int32_t min_tokens;          /* token budget per image (per video: all of it), merged tokens; 16 */
    int32_t max_tokens;          /* 8000 for images; glm53_video_default_params: 240000 */
    int32_t patch_size;          /* 14 */
    int32_t merge_size;          /* 2 */
    int32_t temporal_patch_size; /* 2: a still image is its frame twice */
    int64_t max_pixels;          /* decoded width * height allowed per image or frame; 89478485 (PIL's limit) */
} glm53_image_params;

typedef struct glm53_video_params {
    glm53_image_params image;    /* max_tokens 240000: the budget of the whole video */
    double  source_fps;          /* frame rate of the frames given; 0: a GIF's own (from its frame delays),
                                    required (> 0) for a list of frames */
    double  sample_fps;          /* frames kept per second: 2 */
    int32_t max_frames;          /* frames kept at most: 2048 */
    int64_t max_total_pixels;    /* decoded width * height summed over all input frames; 1 << 30 */
} glm53_video_params;

GLM53_API glm53_image_params glm53_image_default_params(void);
GLM53_API glm53_video_params glm53_video_default_params(void);

/* The grid an encoded image (data[len]) will get, from its header alone (nothing is decoded). */
GLM53_API glm53_status glm53_image_grid(const void *data, size_t len, const glm53_image_params *params,
                                        int32_t grid_thw[3]);
/* Decodes and preprocesses one image into pixels[capacity rows, 1176]. An animated GIF gives its first frame. */
GLM53_API glm53_status glm53_image_preprocess(const void *data, size_t len, const glm53_image_params *params,
                                              float *pixels, int64_t capacity, int32_t grid_thw[3],
                                              int64_t *n_patches);
/* A video: n_inputs encoded frames (data[i], len[i]) in order, or one animated GIF (n_inputs = 1). Frames are
 * sampled as the reference does (sample_fps of them per second of source_fps video, an even count, at most
 * max_frames), resized to one canvas and grouped in pairs. timestamps[capacity_groups], if not NULL, receives
 * the time in seconds of each group's first frame (the prompt writes them as "%.1f seconds"); n_groups = t. */
GLM53_API glm53_status glm53_video_preprocess(const void *const *data, const size_t *len, int32_t n_inputs,
                                              const glm53_video_params *params, float *pixels, int64_t capacity,
                                              int32_t grid_thw[3], double *timestamps, int32_t capacity_groups,
                                              int64_t *n_patches);

/* The vision tower (checkpoint tensors model.visual.*; loaded when the config has a vision_config): pixel rows
 * pixels[n_patches, 1176] of n_items images or videos, each with its grid_thw[n_items, 3] and its rows
 * consecutive, become embeddings[n_tokens, hidden_size] (F32, host), n_tokens = sum of t * h * w / merge^2, in
 * the order their placeholders take them. Attention runs within each image and within each temporal group of a
 * video. *n_tokens receives the rows needed; capacity as for the pixel buffers above. Runs on the model's
 * device; like glm53_model_step it must not overlap another step or encode of the same model. */
GLM53_API glm53_status glm53_model_encode_vision(glm53_model *model, const float *pixels, int64_t n_patches,
                                                 const int32_t *grid_thw, int32_t n_items, float *embeddings,
                                                 int64_t capacity, int64_t *n_tokens);

/* GLM53_API_END */

#ifdef __cplusplus
}
#endif

#endif /* GLM53_H */
