/*
 * mhc.c - the graph of mHC, the manifold-constrained hyper-connections around every mixer and feed-forward
 * (docs/architecture.md section 2): loading a site's weights and its pre step. The post step and the final
 * collapse are single ops (mhc_post, mhc_mean), called where the layer loop needs them (forward.c).
 */
#include "core/engine/graph.h"
#include "core/engine/weights.h"

glm53_status mhc_load(glm53_rank *rk, const char *prefix, mhc_weights *w, int layer, const char *site) {
    const glm53_text_config *c = &rk->model->config.text;
    int64_t S = c->hc_mult, mix = (2 + S) * S;
    LOAD2(&w->fn, mix, S * c->hidden_size, "layers.%d.hc_%s_fn", layer, site);
    LOAD1(&w->base, mix, "layers.%d.hc_%s_base", layer, site);
    LOAD1(&w->scale, 3, "layers.%d.hc_%s_scale", layer, site);
    return GLM53_OK;
}

/* x[N,D] (the collapsed input of the block), post[N,S] and comb[N,S,S] from the streams H[N,S,D]. */
void mhc_pre_site(step_ctx *sc, const mhc_weights *w, const glm53_tensor *H, glm53_tensor *x, glm53_tensor *post,
                  glm53_tensor *comb) {
    const glm53_text_config *c = &sc->m->config.text;
    OP(sc->be->ops->mhc_pre(sc->be, x, post, comb, H, &w->fn, &w->base, &w->scale, c->rms_norm_eps, c->hc_eps,
                            c->hc_sinkhorn_iters));
}
