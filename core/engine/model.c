/*
 * model.c - loading a GLM-5.3-Flash model: parameters, the backend instance, config checks, every block's weights
 * (each block's loader lives with its graph: mhc.c, kda.c, sparse_mla.c, kpool_indexer.c, moe.c, mtp.c,
 * vision.c), the step plan, and freeing it all. The step itself is step.c; the graph, forward.c and mtp.c.
 */
#include "core/engine/graph.h"
#include "core/engine/ranks.h"
#include "core/engine/vision.h"
#include "core/engine/weights.h"
#include "core/engine/worker.h"
#include "core/io/config.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------------------
 * Parameters
 */
glm53_model_params glm53_model_default_params(void) {
    glm53_model_params p = {0};
    p.device = GLM53_DEVICE_CPU;
    p.n_threads = 0;
    p.cuda_device = 0;
    p.load_mtp = 1;
    p.cache_bytes_max = 0;
    p.activation_dtype = -1;
    p.step_rows = 0;
    p.tp = 1;
    p.ep = 1;
    p.communicator = GLM53_COMMUNICATOR_AUTO;
    return p;
}

glm53_seq_params glm53_seq_default_params(void) {
    glm53_seq_params p = {0};
    p.max_tokens = 4096;
    p.max_rollback = 16;
    return p;
}

/* Rows per pass when the caller leaves step_rows at 0: bounded scratch on the CPU; on a GPU passes large enough
 * that prefill stays efficient (the indexer's scores of a pass are rows x closed pools floats). */
enum { CPU_STEP_ROWS = 512, CUDA_STEP_ROWS = 8192 };

/* ------------------------------------------------------------------------------------------------------------
 * Loading
 */
static glm53_status load_layer(glm53_rank *rk, const char *prefix, layer_weights *L, int layer) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t D = c->hidden_size;
    GLM53_TRY(mhc_load(rk, prefix, &L->mhc_attn, layer, "attn"));
    GLM53_TRY(mhc_load(rk, prefix, &L->mhc_ffn, layer, "ffn"));
    LOAD1(&L->input_norm, D, "layers.%d.input_layernorm.weight", layer);
    LOAD1(&L->post_attn_norm, D, "layers.%d.post_attention_layernorm.weight", layer);
    if (L->mixer == GLM53_LAYER_KDA) {
        GLM53_TRY(kda_load(rk, prefix, &L->kda, layer));
    } else {
        GLM53_TRY(sparse_mla_load(rk, prefix, &L->mla, layer));
        if (c->indexer_types[layer] == GLM53_INDEXER_FULL)
            GLM53_TRY(kpool_indexer_load(rk, prefix, &L->indexer, layer));
    }
    if (L->mlp_type == GLM53_MLP_DENSE) GLM53_TRY(mlp_load(rk, prefix, &L->mlp, c->intermediate_size, "", layer));
    else GLM53_TRY(moe_load(rk, prefix, &L->moe, layer));
    return GLM53_OK;
}

/* The checkpoint's name prefix: "model.language_model." (the multimodal checkpoint) or "model.". */
static glm53_status find_prefix(glm53_model *m, const char **prefix) {
    const glm53_tensor *probe;
    *prefix = "model.language_model.";
    if (glm53_checkpoint_find(m->ckpt, "model.language_model.embed_tokens.weight", &probe) == GLM53_OK)
        return GLM53_OK;
    if (glm53_checkpoint_find(m->ckpt, "model.embed_tokens.weight", &probe) != GLM53_OK)
        return GLM53_FAIL(GLM53_ERR_NOT_FOUND, "checkpoint has neither "
                          "'model.language_model.embed_tokens.weight' nor 'model.embed_tokens.weight'");
    glm53_clear_error();
    *prefix = "model.";
    return GLM53_OK;
}

/* Everything rank rk holds of the text model. */
static glm53_status load_rank(glm53_rank *rk, const char *prefix) {
    glm53_model *m = rk->model;
    const glm53_text_config *c = &m->config.text;
    int64_t D = c->hidden_size, V = c->vocab_size;
    LOAD2(&rk->embed, V, D, "embed_tokens.weight");
    LOAD1(&rk->final_norm, D, "norm.weight");
    if (c->tie_word_embeddings) rk->lm_head = rk->embed;
    else GLM53_TRY(glm53_weight_load(rk, "", &rk->lm_head, GLM53_SHARD_WHOLE, 2, GLM53_DIMS(V, D), "lm_head.weight"));
    rk->layers = calloc((size_t)c->num_hidden_layers, sizeof *rk->layers);
    if (!rk->layers) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the layer table");
    int32_t n_kda = 0, n_mla = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        layer_weights *L = &rk->layers[l];
        L->mixer = c->layer_types[l];
        L->mlp_type = c->mlp_types[l];
        L->state_index = L->mixer == GLM53_LAYER_KDA ? n_kda++ : n_mla++;
        GLM53_TRY(load_layer(rk, prefix, L, l));
    }
    if (m->n_mtp > 0) {
        rk->mtp = calloc((size_t)m->n_mtp, sizeof *rk->mtp);
        if (!rk->mtp) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the MTP layers");
        for (int i = 0; i < m->n_mtp; i++) {
            rk->mtp[i].block.state_index = n_mla + i;
            GLM53_TRY(mtp_load(rk, prefix, &rk->mtp[i], c->num_hidden_layers + i));
        }
    }
    return GLM53_OK;
}

/* The split of every block across tp and ep (model.h, glm53_rank): each must divide evenly. */
static glm53_status check_split(const glm53_model *m) {
    const glm53_text_config *c = &m->config.text;
    int32_t tp = m->tp, ep = m->ep;
    struct { const char *what; int64_t size; int32_t by; } splits[] = {
        {"linear_num_heads (KDA heads)", c->linear_num_heads, tp},
        {"num_attention_heads (MLA heads)", c->num_attention_heads, tp},
        {"intermediate_size (dense MLP width)", c->intermediate_size, tp},
        {"moe_intermediate_size (expert width)", c->moe_intermediate_size, tp},
        {"n_routed_experts", c->n_routed_experts, ep},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++)
        if (splits[i].size % splits[i].by)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: %s = %lld does not split across %s = %d",
                              splits[i].what, (long long)splits[i].size, splits[i].by == tp ? "tp" : "ep",
                              splits[i].by);
    return GLM53_OK;
}

/* The backend of rank r: its own CPU instance (the cores shared out among the ranks), or CUDA device
 * cuda_device + r. */
static glm53_status make_backend(glm53_model *m, int32_t r, glm53_backend **out) {
    const glm53_model_params *p = &m->params;
    if (p->device == GLM53_DEVICE_CPU) {
        int32_t threads = p->n_threads;
        if (threads == 0 && m->n_ranks > 1) {
            threads = glm53_physical_cores() / m->n_ranks;
            if (threads < 1) threads = 1;
        }
        return glm53_backend_cpu_create(threads, out);
    }
    if (p->device == GLM53_DEVICE_CUDA) return glm53_backend_cuda_create(p->cuda_device + r, out);
    return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: unknown device %d", p->device);
}

/* The communicator the parameters ask for (none for one rank under AUTO). */
static glm53_status make_comms(glm53_model *m) {
    int32_t kind = m->params.communicator;
    bool cuda = m->params.device == GLM53_DEVICE_CUDA;
    if (kind == GLM53_COMMUNICATOR_AUTO) {
        if (m->n_ranks == 1) return GLM53_OK;
        kind = cuda ? GLM53_COMMUNICATOR_NCCL : GLM53_COMMUNICATOR_THREADS;
    }
    if (kind != GLM53_COMMUNICATOR_THREADS && kind != GLM53_COMMUNICATOR_NCCL)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: unknown communicator %d", kind);
    if (kind == GLM53_COMMUNICATOR_THREADS && cuda)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "model_load: the threads communicator reduces host memory; CUDA "
                          "ranks use NCCL");
    if (kind == GLM53_COMMUNICATOR_NCCL && !cuda)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "model_load: NCCL needs the CUDA backend");
    m->comms = calloc((size_t)m->n_ranks, sizeof *m->comms);
    if (!m->comms) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the communicator");
    glm53_status st;
    if (kind == GLM53_COMMUNICATOR_THREADS) {
        st = glm53_comm_threads_create(m->n_ranks, m->tp, m->comms);
    } else {
        int32_t devices[GLM53_MAX_RANKS];
        for (int32_t r = 0; r < m->n_ranks; r++) devices[r] = m->params.cuda_device + r;
        st = glm53_comm_nccl_create(m->n_ranks, m->tp, devices, m->comms);
    }
    if (st != GLM53_OK) {
        free(m->comms);
        m->comms = NULL;
        return st;
    }
    for (int32_t r = 0; r < m->n_ranks; r++) m->ranks[r].comm = m->comms[r];
    return GLM53_OK;
}

/* Rank r: its place in the grid, what it holds of the split blocks, its backend and plan. */
static glm53_status init_rank(glm53_model *m, int32_t r) {
    const glm53_text_config *c = &m->config.text;
    glm53_rank *rk = &m->ranks[r];
    rk->model = m;
    rk->index = r;
    rk->tp_rank = r % m->tp;
    rk->ep_rank = r / m->tp;
    rk->kda_heads = c->linear_num_heads / m->tp;
    rk->mla_heads = c->num_attention_heads / m->tp;
    rk->mlp_width = c->intermediate_size / m->tp;
    rk->expert_width = c->moe_intermediate_size / m->tp;
    rk->n_experts_held = c->n_routed_experts / m->ep;
    rk->first_expert = rk->ep_rank * rk->n_experts_held;
    rk->holds_shared_expert = rk->ep_rank == 0;
    GLM53_TRY(make_backend(m, r, &rk->be));
    if (m->params.activation_dtype >= 0) {
        int want = m->params.activation_dtype;
        if (want != GLM53_F32 && want != GLM53_BF16)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: activation dtype must be F32 or BF16, got %d", want);
        if (want == GLM53_BF16 && rk->be->device == GLM53_DEVICE_CPU)
            return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "model_load: the CPU backend computes in F32 only");
        rk->be->act_dtype = want;
    }
    return glm53_plan_init(&rk->plan, rk->be);
}

glm53_status glm53_model_load(const char *path, const glm53_model_params *params, glm53_model **out) {
    if (!path || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: path and out are required");
    *out = NULL;
    glm53_model *m = calloc(1, sizeof *m);
    if (!m) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a model");
    m->params = params ? *params : glm53_model_default_params();
    m->trace_dir = getenv("GLM53_TRACE_DIR");
    pthread_mutex_init(&m->lock, NULL);
    m->tp = m->params.tp > 0 ? m->params.tp : 1;
    m->ep = m->params.ep > 0 ? m->params.ep : 1;
    glm53_status st = GLM53_OK;
    if (m->params.step_rows < 0)
        st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: step_rows must be >= 0 (0: the backend's), got %d",
                        m->params.step_rows);
    else if (m->params.tp < 0 || m->params.ep < 0 || (int64_t)m->tp * m->ep > GLM53_MAX_RANKS)
        st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: tp = %d, ep = %d: each must be >= 1 (0: 1) and tp * ep "
                        "at most %d", m->params.tp, m->params.ep, GLM53_MAX_RANKS);
    m->n_ranks = st == GLM53_OK ? m->tp * m->ep : 0;
    if (st == GLM53_OK) st = glm53_checkpoint_open(path, &m->ckpt);
    if (st == GLM53_OK) st = glm53_checkpoint_config(m->ckpt, &m->config);
    if (st == GLM53_OK) st = check_split(m);
    if (st == GLM53_OK) {
        m->ranks = calloc((size_t)m->n_ranks, sizeof *m->ranks);
        if (!m->ranks) st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for %d ranks", m->n_ranks);
    }
    for (int32_t r = 0; st == GLM53_OK && r < m->n_ranks; r++) st = init_rank(m, r);
    if (st == GLM53_OK && m->params.step_rows == 0)
        m->params.step_rows = m->params.device == GLM53_DEVICE_CPU ? CPU_STEP_ROWS : CUDA_STEP_ROWS;
    if (st == GLM53_OK) {
        const glm53_text_config *c = &m->config.text;
        for (int l = 0; l < c->num_hidden_layers; l++) {
            if (c->layer_types[l] == GLM53_LAYER_KDA) m->n_kda_layers++;
            else m->n_mla_layers++;
        }
        m->n_mtp = m->params.load_mtp ? c->num_nextn_predict_layers : 0;
    }
    const char *prefix = NULL;
    if (st == GLM53_OK) st = find_prefix(m, &prefix);
    for (int32_t r = 0; st == GLM53_OK && r < m->n_ranks; r++) st = load_rank(&m->ranks[r], prefix);
    if (st == GLM53_OK && m->config.has_vision) st = glm53_vision_load(m);
    if (st == GLM53_OK) st = make_comms(m);
    if (st == GLM53_OK) st = glm53_ranks_start(m);
    if (st != GLM53_OK) {
        glm53_model_destroy(m);
        return st;
    }
    *out = m;
    return GLM53_OK;
}

static void rank_free(glm53_model *m, glm53_rank *rk) {
    const glm53_text_config *c = &m->config.text;
    if (rk->layers)
        for (int l = 0; l < c->num_hidden_layers; l++) moe_free(rk, &rk->layers[l].moe);
    if (rk->mtp)
        for (int i = 0; i < m->n_mtp; i++) moe_free(rk, &rk->mtp[i].block.moe);
    free(rk->layers);
    free(rk->mtp);
    if (rk->be) {
        glm53_weights_free(rk);
        glm53_plan_free(&rk->plan);
        rk->be->ops->destroy(rk->be);
    }
}

/* Frees everything, now. glm53_model_free defers to this while sequences are held. */
void glm53_model_destroy(glm53_model *m) {
    glm53_worker_stop(m);
    glm53_ranks_stop(m);
    glm53_vision_free(m);
    if (m->comms) {
        m->comms[0]->ops->destroy(m->comms, m->n_ranks);
        free(m->comms);
    }
    for (int32_t r = 0; m->ranks && r < m->n_ranks; r++) rank_free(m, &m->ranks[r]);
    free(m->ranks);
    glm53_checkpoint_free(m->ckpt);
    free(m->live);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void glm53_model_free(glm53_model *m) {
    if (!m) return;
    glm53_worker_stop(m);   /* queued steps are cancelled, a running one finishes */
    pthread_mutex_lock(&m->lock);
    bool defer = m->held_seqs > 0;
    m->free_requested = true;
    pthread_mutex_unlock(&m->lock);
    if (!defer) glm53_model_destroy(m);
}

const glm53_model_config *glm53_model_config_get(const glm53_model *m) { return m ? &m->config : NULL; }
int64_t glm53_model_weight_bytes(const glm53_model *m) { return m ? m->weight_bytes : 0; }
int32_t glm53_model_n_ranks(const glm53_model *m) { return m ? m->n_ranks : 0; }

int64_t glm53_model_cache_bytes(const glm53_model *m) {
    if (!m) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&m->lock);
    int64_t bytes = m->cache_bytes;
    pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
    return bytes;
}

glm53_status glm53_model_rank_info(const glm53_model *m, int32_t rank, glm53_rank_info *out) {
    if (!m || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_rank_info: model and out are required");
    if (rank < 0 || rank >= m->n_ranks)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "model_rank_info: rank %d of %d", rank, m->n_ranks);
    const glm53_rank *rk = &m->ranks[rank];
    pthread_mutex_lock((pthread_mutex_t *)&m->lock);
    *out = (glm53_rank_info){.tp_rank = rk->tp_rank, .ep_rank = rk->ep_rank, .device = rk->be->device,
                             .cuda_device = rk->be->device == GLM53_DEVICE_CUDA ? rk->be->ordinal : -1,
                             .first_expert = rk->first_expert, .n_experts = rk->n_experts_held,
                             .weight_bytes = rk->weight_bytes, .cache_bytes = rk->cache_bytes};
    pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
    return GLM53_OK;
}
