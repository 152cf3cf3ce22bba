/*
 * mhc.c - the graph of mHC, the manifold-constrained hyper-connections around every mixer and feed-forward
 * (docs/architecture.md section 2): loading a site's weights, its pre step, and the whole site between two
 * blocks (the previous block's post step, the pre step, the block's input norm). The final collapse is a single
 * op (mhc_mean), called where the layer loop needs it (forward.c).
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
static void mhc_pre_site(step_ctx *sc, const mhc_weights *w, const glm53_tensor *H, glm53_tensor *x,
                         glm53_tensor *post, glm53_tensor *comb) {
    const glm53_text_config *c = &sc->m->config.text;
    OP(sc->be->ops->mhc_pre(sc->be, x, post, comb, H, &w->fn, &w->base, &w->scale, c->rms_norm_eps, c->hc_eps,
                            c->hc_sinkhorn_iters));
}

/* The site between two blocks: when y (the previous block's output) is given, the post step makes *H2 from *H and
 * the two are swapped (*H is then the new streams, traced as layer `H_layer`'s `H_label`); then the pre step and
 * the block's input norm: x, post, comb, xn. A backend with the fused mhc_site op does it in one; traced steps
 * take the op chain, which has the intermediates to show, and so do shapes the fused op refuses. */
void mhc_site(step_ctx *sc, const mhc_weights *w, const glm53_tensor *norm, const glm53_tensor *y, glm53_tensor **H,
              glm53_tensor **H2, int H_layer, const char *H_label, glm53_tensor *x, glm53_tensor *xn,
              glm53_tensor *post, glm53_tensor *comb) {
    const glm53_text_config *c = &sc->m->config.text;
    glm53_backend *be = sc->be;
    if (sc->st != GLM53_OK) return;
    if (be->ops->mhc_site && !sc->m->trace_dir) {
        const glm53_mhc_site site = {.H_out = *H2, .x = x, .xn = xn, .post = post, .comb = comb, .y = y, .H_in = *H,
                                     .fn = &w->fn, .base = &w->base, .scale = &w->scale, .norm = norm,
                                     .rms_eps = c->rms_norm_eps, .hc_eps = c->hc_eps, .norm_eps = c->rms_norm_eps,
                                     .sinkhorn_iters = c->hc_sinkhorn_iters};
        glm53_status st = be->ops->mhc_site(be, &site);
        if (st != GLM53_ERR_UNSUPPORTED) {
            sc->st = st;
            if (y) swap_tensors(H, H2);
            return;
        }
        glm53_clear_error();
    }
    if (y) {
        OP(be->ops->mhc_post(be, *H2, y, *H, post, comb));
        swap_tensors(H, H2);
        trace(sc, H_layer, H_label, *H);
    }
    mhc_pre_site(sc, w, *H, x, post, comb);
    OP(be->ops->rmsnorm(be, xn, x, norm, c->rms_norm_eps));
}
