/*
 * model.c - loading a GLM-5.3-Flash model: parameters, the backend instance, config checks, every block's weights
 * (each block's loader lives with its graph: mhc.c, kda.c, sparse_mla.c, kpool_indexer.c, moe.c, mtp.c,
 * vision.c), the step plan, and freeing it all. The step itself is step.c; the graph, forward.c and mtp.c.
 */
#include "core/engine/graph.h"
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
static glm53_status load_layer(glm53_model *m, const char *prefix, layer_weights *L, int layer) {
    const glm53_text_config *c = &m->config.text;
    int64_t D = c->hidden_size;
    GLM53_TRY(mhc_load(m, prefix, &L->mhc_attn, layer, "attn"));
    GLM53_TRY(mhc_load(m, prefix, &L->mhc_ffn, layer, "ffn"));
    LOAD1(&L->input_norm, D, "layers.%d.input_layernorm.weight", layer);
    LOAD1(&L->post_attn_norm, D, "layers.%d.post_attention_layernorm.weight", layer);
    if (L->mixer == GLM53_LAYER_KDA) {
        GLM53_TRY(kda_load(m, prefix, &L->kda, layer));
    } else {
        GLM53_TRY(sparse_mla_load(m, prefix, &L->mla, layer));
        if (c->indexer_types[layer] == GLM53_INDEXER_FULL)
            GLM53_TRY(kpool_indexer_load(m, prefix, &L->indexer, layer));
    }
    if (L->mlp_type == GLM53_MLP_DENSE) GLM53_TRY(mlp_load(m, prefix, &L->mlp, c->intermediate_size, "", layer));
    else GLM53_TRY(moe_load(m, prefix, &L->moe, layer));
    return GLM53_OK;
}

static glm53_status load_model(glm53_model *m) {
    const glm53_text_config *c = &m->config.text;
    int64_t D = c->hidden_size, V = c->vocab_size;
    const glm53_tensor *probe;
    const char *prefix = "model.language_model.";
    if (glm53_checkpoint_find(m->ckpt, "model.language_model.embed_tokens.weight", &probe) != GLM53_OK) {
        if (glm53_checkpoint_find(m->ckpt, "model.embed_tokens.weight", &probe) != GLM53_OK)
            return GLM53_FAIL(GLM53_ERR_NOT_FOUND, "checkpoint has neither "
                              "'model.language_model.embed_tokens.weight' nor 'model.embed_tokens.weight'");
        prefix = "model.";
    }
    glm53_clear_error();
    LOAD2(&m->embed, V, D, "embed_tokens.weight");
    LOAD1(&m->final_norm, D, "norm.weight");
    if (c->tie_word_embeddings) m->lm_head = m->embed;
    else GLM53_TRY(glm53_weight_load(m, "", &m->lm_head, 2, GLM53_DIMS(V, D), "lm_head.weight"));
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    if (!m->layers) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the layer table");
    for (int l = 0; l < c->num_hidden_layers; l++) {
        layer_weights *L = &m->layers[l];
        L->mixer = c->layer_types[l];
        L->mlp_type = c->mlp_types[l];
        L->state_index = L->mixer == GLM53_LAYER_KDA ? m->n_kda_layers++ : m->n_mla_layers++;
        GLM53_TRY(load_layer(m, prefix, L, l));
    }
    if (m->params.load_mtp && c->num_nextn_predict_layers > 0) {
        m->mtp = calloc((size_t)c->num_nextn_predict_layers, sizeof *m->mtp);
        if (!m->mtp) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the MTP layers");
        m->n_mtp = c->num_nextn_predict_layers;
        for (int i = 0; i < m->n_mtp; i++) {
            m->mtp[i].block.state_index = m->n_mla_layers + i;
            GLM53_TRY(mtp_load(m, prefix, &m->mtp[i], c->num_hidden_layers + i));
        }
    }
    return GLM53_OK;
}

glm53_status glm53_model_load(const char *path, const glm53_model_params *params, glm53_model **out) {
    if (!path || !out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: path and out are required");
    *out = NULL;
    glm53_model *m = calloc(1, sizeof *m);
    if (!m) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a model");
    m->params = params ? *params : glm53_model_default_params();
    m->trace_dir = getenv("GLM53_TRACE_DIR");
    pthread_mutex_init(&m->lock, NULL);
    glm53_status st = GLM53_OK;
    if (m->params.step_rows < 0)
        st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: step_rows must be >= 0 (0: the backend's), got %d",
                        m->params.step_rows);
    if (st == GLM53_OK) st = glm53_checkpoint_open(path, &m->ckpt);
    if (st == GLM53_OK) st = glm53_checkpoint_config(m->ckpt, &m->config);
    if (st == GLM53_OK) {
        if (m->params.device == GLM53_DEVICE_CPU) st = glm53_backend_cpu_create(m->params.n_threads, &m->be);
        else if (m->params.device == GLM53_DEVICE_CUDA) st = glm53_backend_cuda_create(m->params.cuda_device, &m->be);
        else st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: unknown device %d", m->params.device);
    }
    if (st == GLM53_OK && m->params.activation_dtype >= 0) {
        int want = m->params.activation_dtype;
        if (want != GLM53_F32 && want != GLM53_BF16)
            st = GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_load: activation dtype must be F32 or BF16, got %d", want);
        else if (want == GLM53_BF16 && m->be->device == GLM53_DEVICE_CPU)
            st = GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "model_load: the CPU backend computes in F32 only");
        else m->be->act_dtype = want;
    }
    if (st == GLM53_OK && m->params.step_rows == 0)
        m->params.step_rows = m->be->device == GLM53_DEVICE_CPU ? CPU_STEP_ROWS : CUDA_STEP_ROWS;
    if (st == GLM53_OK) st = glm53_plan_init(&m->plan, m->be);
    if (st == GLM53_OK) st = load_model(m);
    if (st == GLM53_OK && m->config.has_vision) st = glm53_vision_load(m);
    if (st != GLM53_OK) {
        glm53_model_destroy(m);
        return st;
    }
    *out = m;
    return GLM53_OK;
}

/* Frees everything, now. glm53_model_free defers to this while sequences are held. */
void glm53_model_destroy(glm53_model *m) {
    const glm53_text_config *c = &m->config.text;
    glm53_worker_stop(m);
    if (m->layers)
        for (int l = 0; l < c->num_hidden_layers; l++) moe_free(m, &m->layers[l].moe);
    for (int i = 0; i < m->n_mtp; i++) moe_free(m, &m->mtp[i].block.moe);
    free(m->layers);
    free(m->mtp);
    glm53_vision_free(m);
    if (m->be) {
        glm53_weights_free(m);
        glm53_plan_free(&m->plan);
        m->be->ops->destroy(m->be);
    }
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

int64_t glm53_model_cache_bytes(const glm53_model *m) {
    if (!m) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&m->lock);
    int64_t bytes = m->cache_bytes;
    pthread_mutex_unlock((pthread_mutex_t *)&m->lock);
    return bytes;
}
