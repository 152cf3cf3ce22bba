/*
 * cpu_model_ops.h - private to the CPU backend: entry points of the GLM-5.3 model ops (ops_model.c).
 * Shapes and semantics are those of the "GLM-5.3 model ops" section of kernels/backend.h.
 */
#ifndef GLM53_CPU_MODEL_OPS_H
#define GLM53_CPU_MODEL_OPS_H

#include "cpu_ops.h"

glm53_status cpu_mhc_expand(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x);
glm53_status cpu_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                         const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                         const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters);
glm53_status cpu_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y, const glm53_tensor *H_in,
                          const glm53_tensor *post, const glm53_tensor *comb);
glm53_status cpu_mhc_mean(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H);

glm53_status cpu_kda_gate(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                          const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound);
glm53_status cpu_kda_recurrent(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                               const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                               glm53_tensor *state, glm53_tensor *const *snapshots);
glm53_status cpu_rmsnorm_gated(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *gate,
                               const glm53_tensor *w, float eps);

glm53_status cpu_kpool_compress(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                const glm53_tensor *sigma, const glm53_tensor *ape);
glm53_status cpu_kpool_score(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q, const glm53_tensor *w,
                             const glm53_tensor *pooled, const glm53_tensor *n_closed, float scale);
glm53_status cpu_kpool_select(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                              const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail);
glm53_status cpu_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                            const glm53_tensor *idx, const glm53_tensor *kv_b, float scale);

glm53_status cpu_moe_route(glm53_backend *be, glm53_tensor *ids, glm53_tensor *weights, const glm53_tensor *logits,
                           const glm53_tensor *bias, int32_t n_group, int32_t topk_group, int32_t norm,
                           float scaling);
glm53_status cpu_moe_experts(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids,
                             const glm53_tensor *weights, const glm53_tensor *const *gate,
                             const glm53_tensor *const *up, const glm53_tensor *const *down, int32_t n_experts,
                             float limit);

#endif /* GLM53_CPU_MODEL_OPS_H */
