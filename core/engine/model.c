/*
 * model.c - the GLM-5.3-Flash text model: loading weights from a checkpoint and running one batched step.
 *
 * The graph is written once against the backend op table (kernels/backend.h); the CPU and CUDA backends run
 * the same code. glm53-architecture.md section 4 is the math, docs/model.md the user's account of it. One step:
 *
 *   E[N,D]   = embed(tokens)  (or caller embeddings for image/video rows)
 *   H[N,S,D] = E copied into S streams
 *   per layer:  x,post,comb = mhc_pre(H, hc_attn);  y = KDA or DSA(rmsnorm(x));  H = mhc_post(y, H, post, comb)
 *               x,post,comb = mhc_pre(H, hc_ffn);   y = MLP or MoE(rmsnorm(x));  H = mhc_post(y, H, post, comb)
 *   for the rows asked for: h = rmsnorm(mean_s H);  logits = h * lm_head^T
 *
 * Per-row work (projections, norms, mHC, MoE) runs over all N rows of the batch at once; the parts with
 * per-sequence state (KDA conv + recurrence, the indexer and sparse attention) loop over sequences on views of
 * those rows. Sequence state is addressed through the glm53_seq handle, never through its row in the batch.
 */
#include "core/engine/model.h"

#include "core/engine/arena.h"
#include "core/io/config.h"
#include "core/engine/vision.h"   /* vision tower: loaded and freed with the model */

#include <stdarg.h>
#include <stdio.h>
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
    return p;
}

glm53_seq_params glm53_seq_default_params(void) {
    glm53_seq_params p = {0};
    p.max_tokens = 4096;
    p.max_rollback = 16;
    return p;
}

/* ------------------------------------------------------------------------------------------------------------
 * Loading
 */
typedef struct {
    glm53_model *m;
    const char  *prefix;   /* "model.language_model." (composite checkpoint) or "model." (text only) */
} loader;

static glm53_status own_tensor(glm53_model *m, const glm53_tensor *t, glm53_tensor **out) {
    if (m->n_owned == m->cap_owned) {
        int64_t cap = m->cap_owned ? 2 * m->cap_owned : 256;
        glm53_tensor *grown = realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the weight table");
        m->owned = grown;
        m->cap_owned = cap;
    }
    (void)t;
    *out = &m->owned[m->n_owned++];
    return GLM53_OK;
}

/* Makes `w` (a checkpoint tensor, host memory) usable by the backend: on CPU as is, on a device as a copy. */
static glm53_status place_weight(glm53_model *m, glm53_tensor *w) {
    m->weight_bytes += (int64_t)glm53_tensor_nbytes(w) + (w->scale ? (int64_t)glm53_tensor_nbytes(w->scale) : 0);
    if (m->be->device == GLM53_DEVICE_CPU) return GLM53_OK;
    glm53_tensor host = *w, dev = *w;
    dev.device = m->be->device;
    dev.scale = NULL;
    GLM53_TRY(m->be->alloc(m->be, &dev));
    GLM53_TRY(m->be->upload(m->be, &dev, host.data));
    if (host.scale) {
        /* Scales live in the owned array, which grows: keep them in a separate allocation per tensor. */
        glm53_tensor *scale = malloc(sizeof *scale);
        if (!scale) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for a scale tensor");
        *scale = *host.scale;
        scale->device = m->be->device;
        glm53_status st = m->be->alloc(m->be, scale);
        if (st == GLM53_OK) st = m->be->upload(m->be, scale, host.scale->data);
        if (st != GLM53_OK) { free(scale); return st; }
        dev.scale = scale;
    }
    glm53_tensor *slot = NULL;
    GLM53_TRY(own_tensor(m, &dev, &slot));
    *slot = dev;
    *w = dev;
    return GLM53_OK;
}

/* Looks up prefix+name, checks its shape against dims[0..ndim) (-1 = any), copies it into *dst and places it. */
static glm53_status load_tensor(loader *ld, glm53_tensor *dst, int ndim, const int64_t *dims, const char *fmt, ...) {
    char name[256];
    int n = snprintf(name, sizeof name, "%s", ld->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - (size_t)n, fmt, ap);
    va_end(ap);
    const glm53_tensor *t;
    GLM53_TRY(glm53_checkpoint_find(ld->m->ckpt, name, &t));
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = dims[i] < 0 || t->shape[i] == dims[i];
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? ", " : "", (long long)dims[i]);
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        return GLM53_FAIL(GLM53_ERR_FORMAT, "tensor '%s' has shape [%s], the config implies [%s]", name, got, want);
    }
    if (t->dtype == GLM53_I32 || t->dtype == GLM53_I64)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "tensor '%s' has integer dtype %s, expected a float weight", name,
                          glm53_dtype_name((glm53_dtype)t->dtype));
    *dst = *t;
    return place_weight(ld->m, dst);
}

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define LOAD1(dst, a, ...) GLM53_TRY(load_tensor(ld, (dst), 1, DIMS(a), __VA_ARGS__))
#define LOAD2(dst, a, b, ...) GLM53_TRY(load_tensor(ld, (dst), 2, DIMS(a, b), __VA_ARGS__))
#define LOAD3(dst, a, b, c, ...) GLM53_TRY(load_tensor(ld, (dst), 3, DIMS(a, b, c), __VA_ARGS__))

static glm53_status load_hc(loader *ld, hc_weights *hc, int layer, const char *site) {
    const glm53_text_config *c = &ld->m->config.text;
    int64_t S = c->hc_mult, mix = (2 + S) * S;
    LOAD2(&hc->fn, mix, S * c->hidden_size, "layers.%d.hc_%s_fn", layer, site);
    LOAD1(&hc->base, mix, "layers.%d.hc_%s_base", layer, site);
    LOAD1(&hc->scale, 3, "layers.%d.hc_%s_scale", layer, site);
    return GLM53_OK;
}

static glm53_status load_kda(loader *ld, kda_weights *w, int layer) {
    const glm53_text_config *c = &ld->m->config.text;
    int64_t D = c->hidden_size, Hk = c->linear_num_heads, dk = c->linear_head_dim, C = Hk * dk;
    int64_t K = c->linear_conv_kernel_dim;
    LOAD2(&w->q_proj, C, D, "layers.%d.self_attn.q_proj.weight", layer);
    LOAD2(&w->k_proj, C, D, "layers.%d.self_attn.k_proj.weight", layer);
    LOAD2(&w->v_proj, C, D, "layers.%d.self_attn.v_proj.weight", layer);
    const char *conv_names[3] = {"q", "k", "v"};
    glm53_tensor *conv[3] = {&w->q_conv, &w->k_conv, &w->v_conv};
    for (int i = 0; i < 3; i++) {
        /* The checkpoint's depthwise [C, 1, K] is used as [C, K]; view it before placing it. */
        const glm53_tensor *t;
        char name[256];
        snprintf(name, sizeof name, "%slayers.%d.self_attn.%s_conv1d.weight", ld->prefix, layer, conv_names[i]);
        GLM53_TRY(glm53_checkpoint_find(ld->m->ckpt, name, &t));
        if (t->ndim != 3 || t->shape[0] != C || t->shape[1] != 1 || t->shape[2] != K)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "tensor '%s' must have shape [%lld, 1, %lld]", name, (long long)C,
                              (long long)K);
        *conv[i] = *t;
        conv[i]->ndim = 2;
        conv[i]->shape[1] = K;
        conv[i]->shape[2] = 0;
        glm53_tensor_set_contiguous(conv[i]);
        GLM53_TRY(place_weight(ld->m, conv[i]));
    }
    LOAD2(&w->b_proj, Hk, D, "layers.%d.self_attn.b_proj.weight", layer);
    LOAD2(&w->f_a, dk, D, "layers.%d.self_attn.f_a_proj.weight", layer);
    LOAD2(&w->f_b, C, dk, "layers.%d.self_attn.f_b_proj.weight", layer);
    LOAD2(&w->g_a, dk, D, "layers.%d.self_attn.g_a_proj.weight", layer);
    LOAD2(&w->g_b, C, dk, "layers.%d.self_attn.g_b_proj.weight", layer);
    LOAD1(&w->A_log, Hk, "layers.%d.self_attn.A_log", layer);
    LOAD1(&w->dt_bias, C, "layers.%d.self_attn.dt_bias", layer);
    LOAD1(&w->o_norm, dk, "layers.%d.self_attn.o_norm.weight", layer);
    LOAD2(&w->o_proj, D, C, "layers.%d.self_attn.o_proj.weight", layer);
    return GLM53_OK;
}

static glm53_status load_dsa(loader *ld, dsa_weights *w, int layer, bool has_indexer) {
    const glm53_text_config *c = &ld->m->config.text;
    int64_t D = c->hidden_size, Hm = c->num_attention_heads, Dq = c->q_lora_rank, R = c->kv_lora_rank;
    int64_t dn = c->qk_nope_head_dim, dvm = c->v_head_dim, Hi = c->index_n_heads, dI = c->index_head_dim;
    LOAD2(&w->q_a, Dq, D, "layers.%d.self_attn.q_a_proj.weight", layer);
    LOAD1(&w->q_a_norm, Dq, "layers.%d.self_attn.q_a_layernorm.weight", layer);
    LOAD2(&w->q_b, Hm * dn, Dq, "layers.%d.self_attn.q_b_proj.weight", layer);
    LOAD2(&w->kv_a, R, D, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", layer);
    LOAD1(&w->kv_a_norm, R, "layers.%d.self_attn.kv_a_layernorm.weight", layer);
    LOAD2(&w->kv_b, Hm * (dn + dvm), R, "layers.%d.self_attn.kv_b_proj.weight", layer);
    LOAD2(&w->o_proj, D, Hm * dvm, "layers.%d.self_attn.o_proj.weight", layer);
    w->has_indexer = has_indexer;
    if (!has_indexer) return GLM53_OK;
    LOAD2(&w->wq_b, Hi * dI, Dq, "layers.%d.self_attn.indexer.wq_b.weight", layer);
    LOAD2(&w->wk, dI, D, "layers.%d.self_attn.indexer.wk.weight", layer);
    LOAD1(&w->k_norm_w, dI, "layers.%d.self_attn.indexer.k_norm.weight", layer);
    LOAD1(&w->k_norm_b, dI, "layers.%d.self_attn.indexer.k_norm.bias", layer);
    LOAD2(&w->weights_proj, Hi, D, "layers.%d.self_attn.indexer.weights_proj.weight", layer);
    LOAD2(&w->ape, c->index_kpool, dI, "layers.%d.self_attn.indexer.index_kpool_compress_ape", layer);
    LOAD2(&w->compress_gate, dI, D, "layers.%d.self_attn.indexer.index_kpool_compress_gate", layer);
    return GLM53_OK;
}

static glm53_status load_mlp(loader *ld, mlp_weights *w, int64_t width, const char *fmt_prefix, int layer) {
    int64_t D = ld->m->config.text.hidden_size;
    LOAD2(&w->gate, width, D, "layers.%d.mlp.%sgate_proj.weight", layer, fmt_prefix);
    LOAD2(&w->up, width, D, "layers.%d.mlp.%sup_proj.weight", layer, fmt_prefix);
    LOAD2(&w->down, D, width, "layers.%d.mlp.%sdown_proj.weight", layer, fmt_prefix);
    return GLM53_OK;
}

static glm53_status load_moe(loader *ld, moe_weights *w, int layer) {
    const glm53_text_config *c = &ld->m->config.text;
    int64_t D = c->hidden_size, E = c->n_routed_experts, Fe = c->moe_intermediate_size;
    LOAD2(&w->router, E, D, "layers.%d.mlp.gate.weight", layer);
    LOAD1(&w->bias, E, "layers.%d.mlp.gate.e_score_correction_bias", layer);
    w->gate = calloc((size_t)E, sizeof *w->gate);
    w->up = calloc((size_t)E, sizeof *w->up);
    w->down = calloc((size_t)E, sizeof *w->down);
    w->gate_ptr = calloc((size_t)E, sizeof *w->gate_ptr);
    w->up_ptr = calloc((size_t)E, sizeof *w->up_ptr);
    w->down_ptr = calloc((size_t)E, sizeof *w->down_ptr);
    if (!w->gate || !w->up || !w->down || !w->gate_ptr || !w->up_ptr || !w->down_ptr)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for %lld expert descriptors", (long long)E);
    for (int64_t e = 0; e < E; e++) {
        LOAD2(&w->gate[e], Fe, D, "layers.%d.mlp.experts.%lld.gate_proj.weight", layer, (long long)e);
        LOAD2(&w->up[e], Fe, D, "layers.%d.mlp.experts.%lld.up_proj.weight", layer, (long long)e);
        LOAD2(&w->down[e], D, Fe, "layers.%d.mlp.experts.%lld.down_proj.weight", layer, (long long)e);
        w->gate_ptr[e] = &w->gate[e];
        w->up_ptr[e] = &w->up[e];
        w->down_ptr[e] = &w->down[e];
    }
    if (c->n_shared_experts > 0)
        GLM53_TRY(load_mlp(ld, &w->shared, Fe * c->n_shared_experts, "shared_experts.", layer));
    return GLM53_OK;
}

static void free_moe(moe_weights *w) {
    free(w->gate); free(w->up); free(w->down);
    free(w->gate_ptr); free(w->up_ptr); free(w->down_ptr);
}

/* Checks the parts of the config the graph relies on beyond what the config parser validates. */
static glm53_status check_config(const glm53_text_config *c) {
    if (c->hc_mult < 1 || c->hc_mult > 16)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "hc_mult %d: glm53 supports 1..16 streams", c->hc_mult);
    if (c->linear_head_dim <= 0 || c->linear_num_heads <= 0 || c->linear_conv_kernel_dim < 1)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "config: linear attention dims must be positive");
    if (c->index_kpool < 1 || c->index_kpool > 64 || c->index_topk % c->index_kpool)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "index_kpool %d / index_topk %d not supported", c->index_kpool,
                          c->index_topk);
    if (c->n_group < 1 || c->n_routed_experts % c->n_group || c->topk_group > c->n_group ||
        c->num_experts_per_tok > c->n_routed_experts)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "config: inconsistent routing (experts %d, groups %d/%d, top-k %d)",
                          c->n_routed_experts, c->n_group, c->topk_group, c->num_experts_per_tok);
    bool seen_full = false;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        if (c->layer_types[l] != GLM53_LAYER_DSA) continue;
        if (c->indexer_types[l] == GLM53_INDEXER_SHARED && !seen_full)
            return GLM53_FAIL(GLM53_ERR_FORMAT,
                              "config: layer %d has a shared indexer but no earlier layer has a full one", l);
        seen_full |= c->indexer_types[l] == GLM53_INDEXER_FULL;
    }
    return GLM53_OK;
}

static glm53_status load_layer(loader *ld, layer_weights *L, int layer, bool with_hc) {
    const glm53_text_config *c = &ld->m->config.text;
    int64_t D = c->hidden_size;
    if (with_hc) {
        GLM53_TRY(load_hc(ld, &L->hc_attn, layer, "attn"));
        GLM53_TRY(load_hc(ld, &L->hc_ffn, layer, "ffn"));
    }
    LOAD1(&L->input_norm, D, "layers.%d.input_layernorm.weight", layer);
    LOAD1(&L->post_attn_norm, D, "layers.%d.post_attention_layernorm.weight", layer);
    if (L->mixer == GLM53_LAYER_KDA) GLM53_TRY(load_kda(ld, &L->kda, layer));
    else GLM53_TRY(load_dsa(ld, &L->dsa, layer, layer >= c->num_hidden_layers ||
                                                   c->indexer_types[layer] == GLM53_INDEXER_FULL));
    if (L->mlp_type == GLM53_MLP_DENSE) GLM53_TRY(load_mlp(ld, &L->mlp, c->intermediate_size, "", layer));
    else GLM53_TRY(load_moe(ld, &L->moe, layer));
    return GLM53_OK;
}

static glm53_status load_model(glm53_model *m) {
    const glm53_text_config *c = &m->config.text;
    int64_t D = c->hidden_size, V = c->vocab_size;
    const glm53_tensor *probe;
    loader ld_value = {m, "model.language_model."}, *ld = &ld_value;
    if (glm53_checkpoint_find(m->ckpt, "model.language_model.embed_tokens.weight", &probe) != GLM53_OK) {
        if (glm53_checkpoint_find(m->ckpt, "model.embed_tokens.weight", &probe) != GLM53_OK)
            return GLM53_FAIL(GLM53_ERR_NOT_FOUND, "checkpoint has neither "
                              "'model.language_model.embed_tokens.weight' nor 'model.embed_tokens.weight'");
        ld->prefix = "model.";
    }
    glm53_clear_error();
    LOAD2(&m->embed, V, D, "embed_tokens.weight");
    LOAD1(&m->final_norm, D, "norm.weight");
    {
        loader top = {m, ""};
        const char *head = c->tie_word_embeddings ? "embed_tokens.weight" : "lm_head.weight";
        if (c->tie_word_embeddings) m->lm_head = m->embed;
        else GLM53_TRY(load_tensor(&top, &m->lm_head, 2, DIMS(V, D), "%s", head));
    }
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    if (!m->layers) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the layer table");
    for (int l = 0; l < c->num_hidden_layers; l++) {
        layer_weights *L = &m->layers[l];
        L->mixer = c->layer_types[l];
        L->mlp_type = c->mlp_types[l];
        L->state_index = L->mixer == GLM53_LAYER_KDA ? m->n_kda_layers++ : m->n_dsa_layers++;
        GLM53_TRY(load_layer(ld, L, l, true));
    }
    if (m->params.load_mtp && c->num_nextn_predict_layers > 0) {
        m->mtp = calloc((size_t)c->num_nextn_predict_layers, sizeof *m->mtp);
        if (!m->mtp) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the MTP layers");
        m->n_mtp = c->num_nextn_predict_layers;
        for (int i = 0; i < m->n_mtp; i++) {
            int layer = c->num_hidden_layers + i;
            mtp_weights *w = &m->mtp[i];
            LOAD1(&w->enorm, D, "layers.%d.enorm.weight", layer);
            LOAD1(&w->hnorm, D, "layers.%d.hnorm.weight", layer);
            LOAD2(&w->eh_proj, D, 2 * D, "layers.%d.eh_proj.weight", layer);
            LOAD1(&w->head_norm, D, "layers.%d.shared_head.norm.weight", layer);
            w->block.mixer = GLM53_LAYER_DSA;
            w->block.mlp_type = GLM53_MLP_MOE;
            w->block.state_index = m->n_dsa_layers + i;
            GLM53_TRY(load_layer(ld, &w->block, layer, false));
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
    glm53_status st = glm53_checkpoint_open(path, &m->ckpt);
    if (st == GLM53_OK) st = glm53_checkpoint_config(m->ckpt, &m->config);
    if (st == GLM53_OK) st = check_config(&m->config.text);
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
    if (st == GLM53_OK) st = load_model(m);
    if (st == GLM53_OK && m->config.has_vision) st = glm53_vision_load(m);   /* vision tower (core/vision.c) */
    if (st != GLM53_OK) {
        glm53_model_destroy(m);
        return st;
    }
    *out = m;
    return GLM53_OK;
}

/* Frees everything, now. glm53_model_free defers to this while sequences are alive. */
void glm53_model_destroy(glm53_model *m) {
    const glm53_text_config *c = &m->config.text;
    if (m->layers)
        for (int l = 0; l < c->num_hidden_layers; l++) free_moe(&m->layers[l].moe);
    for (int i = 0; i < m->n_mtp; i++) free_moe(&m->mtp[i].block.moe);
    free(m->layers);
    free(m->mtp);
    for (int64_t i = 0; i < m->n_owned; i++) {
        glm53_tensor *t = &m->owned[i];
        if (t->scale) {
            glm53_tensor *scale = (glm53_tensor *)t->scale;
            m->be->release(m->be, scale);
            free(scale);
        }
        m->be->release(m->be, t);
    }
    free(m->owned);
    glm53_vision_free(m);   /* vision tower (core/vision.c) */
    if (m->be) m->be->destroy(m->be);
    glm53_checkpoint_free(m->ckpt);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void glm53_model_free(glm53_model *m) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    bool defer = m->live_seqs > 0;
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

/* ------------------------------------------------------------------------------------------------------------
 * Step helpers
 */
static glm53_tensor rows(const glm53_tensor *t, int64_t row0, int64_t n) { return glm53_tensor_rows_view(t, row0, n); }

/* One sequence's slice of the batch. */
typedef struct {
    glm53_seq *seq;
    int64_t    row0, n_rows;   /* rows [row0, row0 + n_rows) of the batch */
    int64_t    pos0;           /* absolute position of its first new row = length before the step */
    glm53_tensor *idx;         /* selected positions of the latest full-indexer DSA layer [n_rows, W] I32 */
} seq_slice;

typedef struct {
    glm53_model *m;
    glm53_backend *be;
    glm53_arena  *A;
    seq_slice    *slices;
    int32_t       n_seqs;
    int64_t       N;
    int           act;
    glm53_status  st;
    int           layer;        /* the layer being run, for trace() */
} step_ctx;

#define NEW(dtype, ndim, d0, d1, d2) glm53_arena_new(sc->A, &sc->st, (dtype), (ndim), (d0), (d1), (d2))
#define OP(call)                                   \
    do {                                           \
        if (sc->st == GLM53_OK) sc->st = (call);   \
    } while (0)

/* Debugging aid: with $GLM53_TRACE_DIR set, every traced activation of a step is written there as float32 .npy
 * (<step>_<layer>_<name>.npy), so two backends, or the engine and transformers, can be compared point by point.
 * Costs nothing when unset. */
static void trace(step_ctx *sc, int layer, const char *name, const glm53_tensor *t) {
    if (!sc->m->trace_dir || sc->st != GLM53_OK || !t) return;
    int64_t n = glm53_tensor_numel(t);
    glm53_tensor *t32 = NEW(GLM53_F32, 1, n, 0, 0);
    float *host = malloc((size_t)n * sizeof(float));
    glm53_tensor flat = glm53_tensor_reshape(t, 1, n, 0, 0);
    OP(sc->be->copy(sc->be, t32, &flat));
    if (host) OP(sc->be->download(sc->be, host, t32));
    char path[1024], header[256];
    snprintf(path, sizeof path, "%s/%03lld_%02d_%s.npy", sc->m->trace_dir, (long long)sc->m->trace_step, layer, name);
    FILE *f = host && sc->st == GLM53_OK ? fopen(path, "wb") : NULL;
    if (f) {
        char shape[128] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%lld,%s", (long long)t->shape[i],
                     i + 1 < t->ndim ? " " : "");
        int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shape);
        int pad = 64 - (10 + len + 1) % 64;
        if (pad == 64) pad = 0;
        fwrite("\x93NUMPY\x01\x00", 1, 8, f);
        uint16_t hlen = (uint16_t)(len + pad + 1);
        fwrite(&hlen, 2, 1, f);
        fwrite(header, 1, (size_t)len, f);
        for (int i = 0; i < pad; i++) fputc(' ', f);
        fputc('\n', f);
        fwrite(host, sizeof(float), (size_t)n, f);
        fclose(f);
    }
    free(host);
}

/* Uploads host int32 values into a new I32 tensor [n]. */
static glm53_tensor *upload_i32(step_ctx *sc, const int32_t *values, int64_t n) {
    glm53_tensor *t = NEW(GLM53_I32, 1, n, 0, 0);
    OP(sc->be->upload(sc->be, t, values));
    return t;
}

/* ------------------------------------------------------------------------------------------------------------
 * KDA layer
 */
static void kda_conv_one(step_ctx *sc, const seq_slice *s, glm53_tensor *ring, const glm53_tensor *raw,
                         const glm53_tensor *w, glm53_tensor *out) {
    glm53_backend *be = sc->be;
    glm53_seq *q = s->seq;
    int64_t T = s->n_rows, K = w->shape[1], C = raw->shape[1], width = q->conv_width;
    glm53_tensor *xpad = NEW(sc->act, 2, T + K - 1, C, 0);
    if (sc->st != GLM53_OK) return;
    /* K-1 history rows (positions pos0-K+1 .. pos0-1; zeros before the sequence start), then the new rows. */
    for (int64_t i = 0; i < K - 1; i++) {
        int64_t p = s->pos0 - (K - 1) + i;
        glm53_tensor dst = rows(xpad, i, 1);
        if (p < 0) OP(be->fill(be, &dst, 0.0f));
        else {
            glm53_tensor src = rows(ring, p % width, 1);
            OP(be->copy(be, &dst, &src));
        }
    }
    glm53_tensor dst_new = rows(xpad, K - 1, T), src_new = rows(raw, s->row0, T);
    OP(be->copy(be, &dst_new, &src_new));
    OP(be->conv1d_causal(be, out, xpad, w));
    OP(be->unary(be, out, out, GLM53_UNARY_SILU));
    /* Keep the raw rows the next steps (and a rollback of up to max_rollback tokens) need. */
    for (int64_t t = T > width ? T - width : 0; t < T; t++) {
        glm53_tensor dst = rows(ring, (s->pos0 + t) % width, 1), src = rows(raw, s->row0 + t, 1);
        OP(be->copy(be, &dst, &src));
    }
}

static void kda_layer(step_ctx *sc, const layer_weights *L, int layer, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    const kda_weights *w = &L->kda;
    int64_t N = sc->N, Hk = c->linear_num_heads, dk = c->linear_head_dim, C = Hk * dk;

    glm53_tensor *qkv[3] = {NEW(sc->act, 2, N, C, 0), NEW(sc->act, 2, N, C, 0), NEW(sc->act, 2, N, C, 0)};
    const glm53_tensor *proj[3] = {&w->q_proj, &w->k_proj, &w->v_proj};
    const glm53_tensor *conv_w[3] = {&w->q_conv, &w->k_conv, &w->v_conv};
    for (int i = 0; i < 3; i++) OP(be->matmul(be, qkv[i], xn, proj[i]));
    glm53_tensor *fa = NEW(sc->act, 2, N, dk, 0), *f = NEW(sc->act, 2, N, C, 0), *g = NEW(GLM53_F32, 2, N, C, 0);
    OP(be->matmul(be, fa, xn, &w->f_a));
    OP(be->matmul(be, f, fa, &w->f_b));
    OP(be->kda_gate(be, g, f, &w->A_log, &w->dt_bias, c->linear_has_lower_bound, c->linear_lower_bound));
    glm53_tensor *beta = NEW(GLM53_F32, 2, N, Hk, 0);
    OP(be->matmul(be, beta, xn, &w->b_proj));
    OP(be->unary(be, beta, beta, GLM53_UNARY_SIGMOID));
    glm53_tensor *ga = NEW(sc->act, 2, N, dk, 0), *gz = NEW(sc->act, 2, N, C, 0);
    OP(be->matmul(be, ga, xn, &w->g_a));
    OP(be->matmul(be, gz, ga, &w->g_b));
    glm53_tensor *o = NEW(sc->act, 3, N, Hk, dk);
    trace(sc, layer, "kda_q_raw", qkv[0]);
    trace(sc, layer, "kda_g", g);
    trace(sc, layer, "kda_beta", beta);
    trace(sc, layer, "kda_gz", gz);

    for (int32_t i = 0; i < sc->n_seqs && sc->st == GLM53_OK; i++) {
        const seq_slice *s = &sc->slices[i];
        layer_cache *lc = &s->seq->layers[layer];
        int64_t T = s->n_rows, mark = glm53_arena_mark(sc->A);
        glm53_tensor *cq[3];
        for (int j = 0; j < 3; j++) {
            cq[j] = NEW(sc->act, 2, T, C, 0);
            if (sc->st == GLM53_OK) kda_conv_one(sc, s, &lc->conv[j], qkv[j], conv_w[j], cq[j]);
        }
        if (sc->st != GLM53_OK) break;
        trace(sc, layer, "kda_q_conv", cq[0]);
        trace(sc, layer, "kda_v_conv", cq[2]);
        glm53_tensor qh = glm53_tensor_reshape(cq[0], 2, T * Hk, dk, 0), kh = glm53_tensor_reshape(cq[1], 2, T * Hk, dk, 0);
        OP(be->l2norm(be, &qh, &qh, 1e-6f, 1.0f / sqrtf((float)dk)));
        OP(be->l2norm(be, &kh, &kh, 1e-6f, 1.0f));

        /* State in from the slot of the current length; snapshots of the last `ring` lengths go to their slots,
         * so truncating back over up to max_rollback tokens finds its state without recomputation. */
        glm53_seq *q = s->seq;
        glm53_tensor *state = NEW(GLM53_F32, 3, Hk, dk, dk);
        glm53_tensor **snap = calloc((size_t)T, sizeof *snap);
        glm53_tensor *snap_views = calloc((size_t)T, sizeof *snap_views);
        if (!snap || !snap_views) sc->st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for KDA snapshots");
        if (sc->st == GLM53_OK) {
            glm53_tensor slot_in = rows(&lc->states, s->pos0 % q->ring, 1);
            slot_in = glm53_tensor_reshape(&slot_in, 3, Hk, dk, dk);
            OP(be->copy(be, state, &slot_in));
            for (int64_t t = T > q->ring ? T - q->ring : 0; t < T; t++) {
                glm53_tensor slot = rows(&lc->states, (s->pos0 + t + 1) % q->ring, 1);
                snap_views[t] = glm53_tensor_reshape(&slot, 3, Hk, dk, dk);
                snap[t] = &snap_views[t];
            }
            glm53_tensor q3 = glm53_tensor_reshape(cq[0], 3, T, Hk, dk), k3 = glm53_tensor_reshape(cq[1], 3, T, Hk, dk);
            glm53_tensor v3 = glm53_tensor_reshape(cq[2], 3, T, Hk, dk), o3 = rows(o, s->row0, T);
            glm53_tensor g_rows = rows(g, s->row0, T), b_rows = rows(beta, s->row0, T);
            glm53_tensor g3 = glm53_tensor_reshape(&g_rows, 3, T, Hk, dk);
            OP(be->kda_recurrent(be, &o3, &q3, &k3, &v3, &g3, &b_rows, state, snap));
        }
        free(snap);
        free(snap_views);
        glm53_arena_reset(sc->A, mark);
    }
    trace(sc, layer, "kda_core", o);
    glm53_tensor oh = glm53_tensor_reshape(o, 2, N * Hk, dk, 0), gzh = glm53_tensor_reshape(gz, 2, N * Hk, dk, 0);
    OP(be->rmsnorm_gated(be, &oh, &oh, &gzh, &w->o_norm, c->rms_norm_eps));
    trace(sc, layer, "kda_normed", o);
    glm53_tensor o2 = glm53_tensor_reshape(o, 2, N, C, 0);
    OP(be->matmul(be, y, &o2, &w->o_proj));
}

/* ------------------------------------------------------------------------------------------------------------
 * DSA layer: NoPE MLA over the KPool indexer's selection
 */
static void dsa_layer(step_ctx *sc, const layer_weights *L, int layer, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    const dsa_weights *w = &L->dsa;
    int64_t N = sc->N, Hm = c->num_attention_heads, Dq = c->q_lora_rank, R = c->kv_lora_rank;
    int64_t dn = c->qk_nope_head_dim, dvm = c->v_head_dim, Hi = c->index_n_heads, dI = c->index_head_dim;
    int64_t P = c->index_kpool, n_select = c->index_topk / P;
    int with_tail = c->index_kpool_always_select_tail;
    int64_t W = n_select * P + (with_tail ? P - 1 : 0);

    glm53_tensor *qa = NEW(sc->act, 2, N, Dq, 0), *q = NEW(sc->act, 3, N, Hm, dn), *lat = NEW(sc->act, 2, N, R, 0);
    OP(be->matmul(be, qa, xn, &w->q_a));
    OP(be->rmsnorm(be, qa, qa, &w->q_a_norm, c->rms_norm_eps));
    glm53_tensor q2 = glm53_tensor_reshape(q, 2, N, Hm * dn, 0);
    OP(be->matmul(be, &q2, qa, &w->q_b));
    OP(be->matmul(be, lat, xn, &w->kv_a));
    OP(be->rmsnorm(be, lat, lat, &w->kv_a_norm, c->rms_norm_eps));

    glm53_tensor *kap = NULL, *sig = NULL, *Qi = NULL, *wi = NULL;
    if (w->has_indexer) {
        kap = NEW(sc->act, 2, N, dI, 0);
        sig = NEW(sc->act, 2, N, dI, 0);
        Qi = NEW(sc->act, 3, N, Hi, dI);
        wi = NEW(GLM53_F32, 2, N, Hi, 0);
        OP(be->matmul(be, kap, xn, &w->wk));
        OP(be->layernorm(be, kap, kap, &w->k_norm_w, &w->k_norm_b, 1e-6f));
        OP(be->matmul(be, sig, xn, &w->compress_gate));
        if (sc->st == GLM53_OK) {
            glm53_tensor Qi2 = glm53_tensor_reshape(Qi, 2, N, Hi * dI, 0);
            OP(be->matmul(be, &Qi2, qa, &w->wq_b));
        }
        OP(be->matmul(be, wi, xn, &w->weights_proj));
        OP(be->axpby(be, wi, wi, 1.0f / sqrtf((float)Hi), 0.0f));
    }
    glm53_tensor *o = NEW(sc->act, 3, N, Hm, dvm);
    trace(sc, layer, "dsa_qa", qa);
    trace(sc, layer, "dsa_q", q);
    trace(sc, layer, "dsa_latent", lat);
    trace(sc, layer, "dsa_kappa", kap);
    trace(sc, layer, "dsa_sigma", sig);
    trace(sc, layer, "dsa_Qi", Qi);
    trace(sc, layer, "dsa_wi", wi);

    for (int32_t i = 0; i < sc->n_seqs && sc->st == GLM53_OK; i++) {
        seq_slice *s = &sc->slices[i];
        layer_cache *lc = &s->seq->layers[layer];
        int64_t T = s->n_rows, pos0 = s->pos0;
        glm53_tensor dst = rows(&lc->latent, pos0, T), src = rows(lat, s->row0, T);
        OP(be->copy(be, &dst, &src));
        if (w->has_indexer) {
            int64_t mark = glm53_arena_mark(sc->A);
            glm53_tensor kd = rows(&lc->kappa, pos0, T), ks = rows(kap, s->row0, T);
            glm53_tensor sd = rows(&lc->sigma, pos0, T), ss = rows(sig, s->row0, T);
            OP(be->copy(be, &kd, &ks));
            OP(be->copy(be, &sd, &ss));
            /* Pools closed by this step's rows, compressed once and kept in the cache. */
            int64_t G0 = pos0 / P, G1 = (pos0 + T) / P;
            if (G1 > G0) {
                glm53_tensor pooled = rows(&lc->pooled, G0, G1 - G0);
                glm53_tensor kr = rows(&lc->kappa, G0 * P, (G1 - G0) * P), sr = rows(&lc->sigma, G0 * P, (G1 - G0) * P);
                OP(be->kpool_compress(be, &pooled, &kr, &sr, &w->ape));
            }
            int32_t *host = malloc((size_t)(2 * T) * sizeof(int32_t));
            if (!host) { sc->st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for positions"); break; }
            for (int64_t t = 0; t < T; t++) {
                host[t] = (int32_t)(pos0 + t);
                host[T + t] = (int32_t)((pos0 + t + 1) / P);
            }
            glm53_tensor *pos = upload_i32(sc, host, T), *closed = upload_i32(sc, host + T, T);
            free(host);
            /* Scores matter only for rows with more closed pools than the budget; otherwise every pool is taken. */
            glm53_tensor *scores = NEW(GLM53_F32, 2, T, G1 > n_select ? G1 : 1, 0);
            if (G1 > n_select && sc->st == GLM53_OK) {
                glm53_tensor Qr = rows(Qi, s->row0, T), wr = rows(wi, s->row0, T);
                glm53_tensor pooled = rows(&lc->pooled, 0, G1);
                OP(be->kpool_score(be, scores, &Qr, &wr, &pooled, closed, 1.0f / sqrtf((float)dI)));
            }
            /* The selection outlives this layer's scratch (a following "shared" layer reuses it), so it is the
             * slice's own tensor, replaced by the next full indexer and freed at the end of the step. */
            if (!s->idx) {
                s->idx = calloc(1, sizeof *s->idx);
                if (!s->idx) { sc->st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for an index list"); break; }
                *s->idx = (glm53_tensor){.dtype = GLM53_I32, .device = be->device, .ndim = 2, .shape = {T, W}};
                OP(be->alloc(be, s->idx));
            }
            OP(be->kpool_select(be, s->idx, scores, pos, (int32_t)P, (int32_t)n_select, with_tail));
            if (G1 > n_select) trace(sc, layer, "dsa_scores", scores);
            glm53_arena_reset(sc->A, mark);
        } else if (!s->idx) {
            sc->st = GLM53_FAIL(GLM53_ERR_FORMAT, "layer %d shares an indexer but no full indexer ran before it",
                                layer);
            break;
        }
        glm53_tensor qr = rows(q, s->row0, T), orow = rows(o, s->row0, T);
        OP(be->sparse_mla(be, &orow, &qr, &lc->latent, s->idx, &w->kv_b, 1.0f / sqrtf((float)dn)));
    }
    trace(sc, layer, "dsa_o", o);
    glm53_tensor o2 = glm53_tensor_reshape(o, 2, N, Hm * dvm, 0);
    OP(be->matmul(be, y, &o2, &w->o_proj));
}

/* ------------------------------------------------------------------------------------------------------------
 * Feed-forward
 */
static void mlp_forward(step_ctx *sc, const mlp_weights *w, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    int64_t F = w->gate.shape[0];
    glm53_tensor *gate = NEW(sc->act, 2, sc->N, F, 0), *up = NEW(sc->act, 2, sc->N, F, 0);
    glm53_tensor *h = NEW(sc->act, 2, sc->N, F, 0);
    OP(be->matmul(be, gate, xn, &w->gate));
    OP(be->matmul(be, up, xn, &w->up));
    OP(be->swiglu(be, h, gate, up, sc->m->config.text.swiglu_limit));
    OP(be->matmul(be, y, h, &w->down));
}

static void moe_forward(step_ctx *sc, const moe_weights *w, const glm53_tensor *xn, glm53_tensor *y) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    int64_t N = sc->N, E = c->n_routed_experts, K = c->num_experts_per_tok;
    glm53_tensor *logits = NEW(GLM53_F32, 2, N, E, 0);
    glm53_tensor *ids = NEW(GLM53_I32, 2, N, K, 0), *wts = NEW(GLM53_F32, 2, N, K, 0);
    OP(be->matmul(be, logits, xn, &w->router));
    OP(be->moe_route(be, ids, wts, logits, &w->bias, c->n_group, c->topk_group, c->norm_topk_prob,
                     c->routed_scaling_factor));
    OP(be->moe_experts(be, y, xn, ids, wts, w->gate_ptr, w->up_ptr, w->down_ptr, (int32_t)E, c->swiglu_limit));
    trace(sc, sc->layer, "moe_logits", logits);
    trace(sc, sc->layer, "moe_weights", wts);
    trace(sc, sc->layer, "moe_routed", y);
    if (c->n_shared_experts > 0) {
        glm53_tensor *shared = NEW(sc->act, 2, N, c->hidden_size, 0);
        mlp_forward(sc, &w->shared, xn, shared);
        OP(be->binary(be, y, y, shared, GLM53_BINARY_ADD));
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * The step
 */
/* Rows a sequence already holds in the cache a step writes: the main layers, or MTP layer mtp_layer. */
static int64_t seq_position(const glm53_seq *s, int32_t mtp_layer) {
    return mtp_layer < 0 ? s->length : s->mtp_length[mtp_layer];
}

static glm53_status validate_batch(glm53_model *m, const glm53_batch *b, const glm53_step_output *out,
                                   int32_t mtp_layer, int64_t *n_rows, int64_t *n_out) {
    const glm53_text_config *c = &m->config.text;
    if (!b || b->n_seqs < 1 || !b->seqs || !b->n_rows || !b->tokens)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: batch needs n_seqs >= 1, seqs, n_rows and tokens");
    if (!out) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: out is required");
    int64_t total = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        glm53_seq *s = b->seqs[i];
        if (!s || s->model != m) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: sequence %d is not of this model", i);
        for (int32_t j = 0; j < i; j++)
            if (b->seqs[j] == s) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: sequence %d appears twice", i);
        if (b->n_rows[i] < 1) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: sequence %d has %d rows", i,
                                                b->n_rows[i]);
        int64_t held = seq_position(s, mtp_layer);
        if (held + b->n_rows[i] > s->params.max_tokens)
            return GLM53_FAIL(GLM53_ERR_CACHE_FULL, "model_step: sequence %d holds %lld of %lld tokens, %d more do not "
                              "fit", i, (long long)held, (long long)s->params.max_tokens, b->n_rows[i]);
        total += b->n_rows[i];
    }
    int64_t wanted = 0;
    for (int64_t r = 0; r < total; r++) {
        bool is_embedding = b->use_embedding && b->use_embedding[r];
        if (is_embedding && !b->embeddings)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: row %lld asks for an embedding but none given",
                              (long long)r);
        if (!is_embedding && (b->tokens[r] < 0 || b->tokens[r] >= c->vocab_size))
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "model_step: token id %d at row %lld is outside [0, %d)",
                              b->tokens[r], (long long)r, c->vocab_size);
        if (b->want_output) wanted += b->want_output[r] != 0;
    }
    if (!b->want_output) wanted = b->n_seqs;
    if (wanted > 0 && (out->logits || out->hidden) && out->capacity < wanted)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: %lld output rows asked for, buffers hold %d",
                          (long long)wanted, out->capacity);
    *n_rows = total;
    *n_out = wanted;
    return GLM53_OK;
}

/* E[N,D]: token rows from the embedding table, caller rows (image/video) scattered over them. */
static glm53_tensor *embed_rows(step_ctx *sc, const glm53_batch *b) {
    glm53_model *m = sc->m;
    glm53_backend *be = sc->be;
    int64_t N = sc->N, D = m->config.text.hidden_size;
    int32_t *ids_host = malloc((size_t)N * sizeof(int32_t));
    if (!ids_host) {
        sc->st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for token ids");
        return NULL;
    }
    int64_t n_emb = 0;
    for (int64_t r = 0; r < N; r++) {
        bool is_embedding = b->use_embedding && b->use_embedding[r];
        ids_host[r] = is_embedding ? 0 : b->tokens[r];
        n_emb += is_embedding;
    }
    glm53_tensor *ids = upload_i32(sc, ids_host, N);
    glm53_tensor *E = NEW(sc->act, 2, N, D, 0);
    OP(be->gather_rows(be, E, &m->embed, ids));
    if (n_emb > 0 && sc->st == GLM53_OK) {
        int32_t *emb_rows = ids_host;   /* reuse: the gather above is done with it */
        float *emb = malloc((size_t)(n_emb * D) * sizeof(float));
        if (!emb) sc->st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for embeddings");
        int64_t k = 0;
        for (int64_t r = 0; r < N && emb; r++)
            if (b->use_embedding[r]) {
                memcpy(emb + k * D, b->embeddings + r * D, (size_t)D * sizeof(float));
                emb_rows[k++] = (int32_t)r;
            }
        glm53_tensor *emb32 = NEW(GLM53_F32, 2, n_emb, D, 0), *emb_act = NEW(sc->act, 2, n_emb, D, 0);
        glm53_tensor *rows_t = upload_i32(sc, emb_rows, n_emb);
        if (emb) OP(be->upload(be, emb32, emb));
        OP(be->copy(be, emb_act, emb32));
        OP(be->scatter_rows(be, E, emb_act, rows_t));
        free(emb);
    }
    free(ids_host);
    return E;
}

/* The rows whose outputs were asked for, as an I32 tensor [n_out]. */
static glm53_tensor *output_rows(step_ctx *sc, const glm53_batch *b, int64_t n_out) {
    int32_t *want = malloc((size_t)n_out * sizeof(int32_t));
    if (!want) {
        sc->st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for output rows");
        return NULL;
    }
    int64_t k = 0;
    if (b->want_output) {
        for (int64_t r = 0; r < sc->N; r++) if (b->want_output[r]) want[k++] = (int32_t)r;
    } else {
        for (int32_t i = 0; i < sc->n_seqs; i++) want[k++] = (int32_t)(sc->slices[i].row0 + sc->slices[i].n_rows - 1);
    }
    glm53_tensor *t = upload_i32(sc, want, n_out);
    free(want);
    return t;
}

/* Writes the outputs of the final-normed hidden rows h[n_out, D]: hidden (F32) and logits (F32). */
static void write_outputs(step_ctx *sc, const glm53_tensor *h, int64_t n_out, glm53_step_output *out) {
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &sc->m->config.text;
    if (out->hidden) {
        glm53_tensor *h32 = NEW(GLM53_F32, 2, n_out, c->hidden_size, 0);
        OP(be->copy(be, h32, h));
        OP(be->download(be, out->hidden, h32));
    }
    if (out->logits) {
        glm53_tensor *logits = NEW(GLM53_F32, 2, n_out, c->vocab_size, 0);
        OP(be->matmul(be, logits, h, &sc->m->lm_head));
        OP(be->download(be, out->logits, logits));
    }
}

static glm53_status run_step(step_ctx *sc, const glm53_batch *b, glm53_step_output *out, int64_t n_out) {
    glm53_model *m = sc->m;
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &m->config.text;
    int64_t N = sc->N, D = c->hidden_size, S = c->hc_mult;

    glm53_tensor *E = embed_rows(sc, b);
    glm53_tensor *H = NEW(sc->act, 3, N, S, D), *H2 = NEW(sc->act, 3, N, S, D);
    glm53_tensor *x = NEW(sc->act, 2, N, D, 0), *xn = NEW(sc->act, 2, N, D, 0), *y = NEW(sc->act, 2, N, D, 0);
    glm53_tensor *post = NEW(GLM53_F32, 2, N, S, 0), *comb = NEW(GLM53_F32, 3, N, S, S);
    OP(be->mhc_expand(be, H, E));
    trace(sc, 99, "embed", E);

    for (int l = 0; l < c->num_hidden_layers && sc->st == GLM53_OK; l++) {
        const layer_weights *L = &m->layers[l];
        const float eps = c->rms_norm_eps, hc_eps = c->hc_eps;
        int64_t mark = glm53_arena_mark(sc->A);
        glm53_tensor *tmp;
        sc->layer = l;

        OP(be->mhc_pre(be, x, post, comb, H, &L->hc_attn.fn, &L->hc_attn.base, &L->hc_attn.scale, eps, hc_eps,
                       c->hc_sinkhorn_iters));
        OP(be->rmsnorm(be, xn, x, &L->input_norm, eps));
        trace(sc, l, "attn_x", x);
        trace(sc, l, "attn_post", post);
        trace(sc, l, "attn_comb", comb);
        trace(sc, l, "attn_xn", xn);
        if (L->mixer == GLM53_LAYER_KDA) kda_layer(sc, L, l, xn, y);
        else dsa_layer(sc, L, l, xn, y);
        trace(sc, l, "attn_y", y);
        OP(be->mhc_post(be, H2, y, H, post, comb));
        tmp = H; H = H2; H2 = tmp;
        trace(sc, l, "attn_H", H);
        glm53_arena_reset(sc->A, mark);

        int64_t mark_ffn = glm53_arena_mark(sc->A);
        OP(be->mhc_pre(be, x, post, comb, H, &L->hc_ffn.fn, &L->hc_ffn.base, &L->hc_ffn.scale, eps, hc_eps,
                       c->hc_sinkhorn_iters));
        OP(be->rmsnorm(be, xn, x, &L->post_attn_norm, eps));
        trace(sc, l, "ffn_xn", xn);
        if (L->mlp_type == GLM53_MLP_DENSE) mlp_forward(sc, &L->mlp, xn, y);
        else moe_forward(sc, &L->moe, xn, y);
        trace(sc, l, "ffn_y", y);
        OP(be->mhc_post(be, H2, y, H, post, comb));
        tmp = H; H = H2; H2 = tmp;
        trace(sc, l, "ffn_H", H);
        glm53_arena_reset(sc->A, mark_ffn);
    }
    if (sc->st != GLM53_OK) return sc->st;

    /* Outputs: the final collapse, norm and head for the requested rows only. */
    if (n_out > 0 && (out->logits || out->hidden)) {
        glm53_tensor *want_t = output_rows(sc, b, n_out);
        glm53_tensor Hflat = glm53_tensor_reshape(H, 2, N, S * D, 0);
        glm53_tensor *Ho = NEW(sc->act, 2, n_out, S * D, 0), *hm = NEW(sc->act, 2, n_out, D, 0);
        glm53_tensor *h = NEW(sc->act, 2, n_out, D, 0);
        OP(be->gather_rows(be, Ho, &Hflat, want_t));
        if (sc->st == GLM53_OK) {
            glm53_tensor Ho3 = glm53_tensor_reshape(Ho, 3, n_out, S, D);
            OP(be->mhc_mean(be, hm, &Ho3));
        }
        OP(be->rmsnorm(be, h, hm, &m->final_norm, c->rms_norm_eps));
        write_outputs(sc, h, n_out, out);
    }
    OP(be->sync(be));
    return sc->st;
}

/* One MTP layer (DeepSeek NextN) over the batch rows; hidden_in[N, D] host F32 (the target's final hidden at the
 * row's position, or the previous draft step's output hidden):
 *   z = [rmsnorm(embed(tok), enorm) | rmsnorm(h, hnorm)] * eh_proj^T
 *   r = z + DSA(rmsnorm(z, input_ln));  out = r + MoE(rmsnorm(r, post_ln));  h' = rmsnorm(out, head_norm)
 *   logits = h' * lm_head^T, and h' is the hidden the next draft step consumes (post-norm recycling). */
static glm53_status run_mtp_step(step_ctx *sc, int32_t mtp_layer, const glm53_batch *b, const float *hidden_in,
                                 glm53_step_output *out, int64_t n_out) {
    glm53_model *m = sc->m;
    glm53_backend *be = sc->be;
    const glm53_text_config *c = &m->config.text;
    const mtp_weights *w = &m->mtp[mtp_layer];
    int64_t N = sc->N, D = c->hidden_size;
    float eps = c->rms_norm_eps;

    glm53_tensor *E = embed_rows(sc, b);
    glm53_tensor *h32 = NEW(GLM53_F32, 2, N, D, 0), *h = NEW(sc->act, 2, N, D, 0);
    OP(be->upload(be, h32, hidden_in));
    OP(be->copy(be, h, h32));
    /* cat[N, 2D] = [enorm(E) | hnorm(h)], built row by row (each half of a row is contiguous). */
    glm53_tensor *en = NEW(sc->act, 2, N, D, 0), *hn = NEW(sc->act, 2, N, D, 0);
    glm53_tensor *cat = NEW(sc->act, 2, N, 2 * D, 0);
    OP(be->rmsnorm(be, en, E, &w->enorm, eps));
    OP(be->rmsnorm(be, hn, h, &w->hnorm, eps));
    for (int64_t r = 0; r < N && sc->st == GLM53_OK; r++) {
        glm53_tensor row = rows(cat, r, 1);
        glm53_tensor left = glm53_tensor_reshape(&row, 2, 1, D, 0), right = left;
        right.data = (char *)row.data + (size_t)D * glm53_dtype_size((glm53_dtype)sc->act);
        glm53_tensor e_row = rows(en, r, 1), h_row = rows(hn, r, 1);
        OP(be->copy(be, &left, &e_row));
        OP(be->copy(be, &right, &h_row));
    }
    glm53_tensor *z = NEW(sc->act, 2, N, D, 0), *u = NEW(sc->act, 2, N, D, 0), *y = NEW(sc->act, 2, N, D, 0);
    OP(be->matmul(be, z, cat, &w->eh_proj));
    OP(be->rmsnorm(be, u, z, &w->block.input_norm, eps));
    if (sc->st == GLM53_OK) dsa_layer(sc, &w->block, c->num_hidden_layers + mtp_layer, u, y);
    OP(be->binary(be, z, z, y, GLM53_BINARY_ADD));
    OP(be->rmsnorm(be, u, z, &w->block.post_attn_norm, eps));
    if (sc->st == GLM53_OK) moe_forward(sc, &w->block.moe, u, y);
    OP(be->binary(be, z, z, y, GLM53_BINARY_ADD));
    if (n_out > 0 && (out->logits || out->hidden)) {
        glm53_tensor *want_t = output_rows(sc, b, n_out);
        glm53_tensor *zo = NEW(sc->act, 2, n_out, D, 0), *ho = NEW(sc->act, 2, n_out, D, 0);
        OP(be->gather_rows(be, zo, z, want_t));
        OP(be->rmsnorm(be, ho, zo, &w->head_norm, eps));
        write_outputs(sc, ho, n_out, out);
    }
    OP(be->sync(be));
    return sc->st;
}

/* The step driver shared by the main model (mtp_layer < 0) and the MTP layers. */
static glm53_status step(glm53_model *m, int32_t mtp_layer, const glm53_batch *b, const float *hidden_in,
                         glm53_step_output *out) {
    if (!m) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: model is NULL");
    if (mtp_layer >= 0 && mtp_layer >= m->n_mtp)
        return GLM53_FAIL(m->n_mtp ? GLM53_ERR_OUT_OF_RANGE : GLM53_ERR_UNSUPPORTED,
                          "mtp_step: MTP layer %d asked for; the model has %d loaded%s", mtp_layer, m->n_mtp,
                          m->n_mtp ? "" : " (the checkpoint has no MTP layer, or load_mtp was off)");
    if (mtp_layer >= 0 && !hidden_in) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "mtp_step: hidden_in is required");
    int64_t N = 0, n_out = 0;
    GLM53_TRY(validate_batch(m, b, out, mtp_layer, &N, &n_out));
    pthread_mutex_lock(&m->lock);
    bool busy = m->stepping;
    m->stepping = true;
    pthread_mutex_unlock(&m->lock);
    if (busy) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "model_step: another step of this model is running");

    glm53_arena A = {.be = m->be};
    seq_slice *slices = calloc((size_t)b->n_seqs, sizeof *slices);
    step_ctx sc = {m, m->be, &A, slices, b->n_seqs, N, m->be->act_dtype, GLM53_OK, 0};
    glm53_status st;
    if (!slices) {
        st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "no memory for the batch");
    } else {
        int64_t row = 0;
        for (int32_t i = 0; i < b->n_seqs; i++) {
            slices[i] = (seq_slice){b->seqs[i], row, b->n_rows[i], seq_position(b->seqs[i], mtp_layer), NULL};
            row += b->n_rows[i];
        }
        if (mtp_layer < 0) {
            st = run_step(&sc, b, out, n_out);
        m->trace_step++;
            for (int32_t i = 0; i < b->n_seqs; i++)
                glm53_seq_note_step(b->seqs[i], slices[i].pos0, b->n_rows[i], st == GLM53_OK);
        } else {
            st = run_mtp_step(&sc, mtp_layer, b, hidden_in, out, n_out);
        }
        if (st == GLM53_OK) {
            for (int32_t i = 0; i < b->n_seqs; i++) {
                if (mtp_layer < 0) b->seqs[i]->length += b->n_rows[i];
                else b->seqs[i]->mtp_length[mtp_layer] += b->n_rows[i];
            }
            out->n_out = (int32_t)n_out;
        }
    }
    glm53_arena_free(&A);
    for (int32_t i = 0; slices && i < b->n_seqs; i++)
        if (slices[i].idx) {
            if (slices[i].idx->data) m->be->release(m->be, slices[i].idx);
            free(slices[i].idx);
        }
    free(slices);
    pthread_mutex_lock(&m->lock);
    m->stepping = false;
    pthread_mutex_unlock(&m->lock);
    return st;
}

glm53_status glm53_model_step(glm53_model *m, const glm53_batch *b, glm53_step_output *out) {
    return step(m, -1, b, NULL, out);
}

glm53_status glm53_model_mtp_step(glm53_model *m, int32_t mtp_layer, const glm53_batch *b, const float *hidden_in,
                                  glm53_step_output *out) {
    if (mtp_layer < 0) return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "mtp_step: MTP layer %d < 0", mtp_layer);
    return step(m, mtp_layer, b, hidden_in, out);
}

int32_t glm53_model_n_mtp(const glm53_model *m) { return m ? m->n_mtp : 0; }
