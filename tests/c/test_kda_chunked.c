/*
 * test_kda_chunked.c - the chunked (WY / UT-transform) form of the KDA recurrence, modelled on the CPU in exactly
 * the decomposition of the CUDA prefill kernels (kernels/cuda/kda.cu, kda_chunk_intra_kernel and
 * kda_chunk_inter_kernel), checked against the token-by-token recurrence: the CPU backend's kda_recurrent op (F32,
 * the engine's reference) and the same recurrence in double precision.
 *
 * Why a model of the kernels here: the chunked form reorders the recurrence's arithmetic, so it can be right only
 * to F32 rounding, and a wrong reference point or a mask off by one row would show as an error of the same order
 * as a tolerance at the first GPU run. The math is checked here first, on every CPU, with the kernels' chunk size,
 * sub-chunks, reference points, zero padding of a partial chunk, summation order and snapshot walk.
 *
 * The recurrence (kernels/backend.h's kda_recurrent; per head, state S [dk, dv], a_t = exp(g_t) per key row):
 *   S_t = Diag(a_t) S_{t-1};  u_t = beta_t (v_t - S_t^T k_t);  S_t += k_t u_t^T;  o_t = S_t^T q_t
 * Over a chunk of C rows from the state S0 before it, with b_t = g_0 + ... + g_t (per key channel, inclusive):
 *   S_t = exp(b_t) * S0 + sum_{s<=t} (k_s * exp(b_t - b_s)) u_s^T        (* : per key row)
 *   u_t + beta_t sum_{s<t} A[t,s] u_s = beta_t (v_t - S0^T (exp(b_t) * k_t)),  A[t,s] = sum_c k_t k_s exp(b_t - b_s)
 * so with T = (I + Diag(beta) A)^-1 (unit lower triangular, forward substitution):
 *   U = Ut - W S0,   Ut = T Diag(beta) V,   W = T Diag(beta) (exp(b) * K)
 *   O = Qb S0 + Mqk U,   Qb = exp(b) * Q,   Mqk[t,s] = sum_c q_t k_s exp(b_t - b_s) for s <= t (0 above)
 *   S_C = Diag(exp(b_last)) S0 + Kd^T U,   Kd[s] = k_s * exp(b_last - b_s)
 * Every exponent above is <= 0 (g <= 0, t >= s), so no factor exceeds 1; exp(-b_s) alone (up to exp(+160) over a
 * chunk at the gate's bound -5) is never formed. Each exponent is also a sum of the g it spans, accumulated from a
 * point at most a sub-chunk (16 rows) away, never the difference of two sums over the whole chunk (b_t - b_s
 * computed as such loses ulp(|b_s|), up to ulp(160) at the bound, in a factor that may be near 1):
 *   Qb, W, decay:  exp(b_t), b_t = g_0 + ... + g_t;   Kd:  exp(g_{s+1} + ... + g_{C-1}), summed backwards
 *   A, Mqk with t, s in the same sub-chunk:  exp(P_t - P_s) pairwise, P the running sum from the sub-chunk's
 *     first row (|P| <= 16 rows of decay)
 *   A, Mqk with s < 16 <= t:  (k_t exp(P_t)) . (k_s exp(g_{s+1} + ... + g_15)), through the boundary between the
 *     sub-chunks: one exponential per row and channel instead of one per pair and channel, both factors <= 1.
 * A partial chunk (the sequence's last) is padded with zero rows of k, q, v, g and beta: they add nothing to any
 * sum, leave b_last = b of the last real row, and give zero rows of W, Ut, Qb, Kd, Mqk.
 *
 * Snapshots (ring slots asked for after a row): a chunk none of whose rows asks is stepped whole (S_C above); a
 * chunk where some row asks walks its rows, S = a_t * S + k_t u_t^T with the u_t just computed (the rank-1 update
 * of the recurrence without its dependent sums), writing each state asked for.
 *
 * Measured here (2026-12-07): within 7.5e-7 of the output scale (max|err| / max|ref|, outputs and states) of double
 * with the lower-bound gate, weak or at the bound; within 3.5e-6 with an unbounded gate of up to -60 a row (the
 * pairwise P_t - P_s of a sub-chunk loses ulp(|P_s|)); the CPU op is 1e-7 .. 5e-7 from double.
 */
#include "test_util.h"

#include "kernels/backend.h"

#include <stdbool.h>
#include <string.h>

enum {
    KC = 32,            /* rows a chunk: kda.cu's KDA_CHUNK */
    KSUB = 16,          /* rows a sub-chunk: KDA_SUB; a chunk is two */
};

/* ------------------------------------------------------------------------------------------------------------
 * The model of the two kernels. One head h of a sequence of T rows: q, k [T, H, dk], v [T, H, dv], g [T, H, dk],
 * beta [T, H], o [T, H, dv]; states [ring, H, dk, dv], slots [T + 1] as kernels/backend.h's kda_recurrent.
 */
typedef struct {
    const float *q, *k, *v, *g, *beta;
    float *o, *states;
    const int32_t *slots;
    int64_t T, H, dk, dv;
} kda_seq;

/* One chunk-head's scratch, as kda_chunk_intra_kernel writes it: W, Qb, Kd [KC, dk], Ut [KC, dv], Mqk [KC, KC],
 * decay [dk] (exp(b_last)). */
typedef struct {
    float *W, *Qb, *Kd, *Ut, *Mqk, *decay;
} chunk_scratch;

/* kda_chunk_intra_kernel for rows t0 .. t0 + n - 1 of head h. */
static void model_intra(const kda_seq *s, int64_t h, int64_t t0, int n, const chunk_scratch *out) {
    const int64_t H = s->H, dk = s->dk, dv = s->dv;
    float *kk = calloc((size_t)(KC * dk), sizeof(float)), *qq = calloc((size_t)(KC * dk), sizeof(float));
    float *gg = calloc((size_t)(KC * dk), sizeof(float)), *P = malloc(sizeof(float) * (size_t)(KC * dk));
    float *sc = malloc(sizeof(float) * (size_t)(3 * KSUB * dk));
    float bt[KC], A[KC][KC], M[KC][KC], Tm[KC][KC], Tb[KC][KC];
    float *kt1 = sc, *qt1 = sc + KSUB * dk, *ks0 = sc + 2 * KSUB * dk;

    /* rows, zero past n; P the running sum of g from the first row of each sub-chunk (inclusive) */
    for (int t = 0; t < KC; t++) {
        const int64_t at = ((t0 + t) * H + h) * dk;
        bt[t] = t < n ? s->beta[(t0 + t) * H + h] : 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            kk[t * dk + i] = t < n ? s->k[at + i] : 0.0f;
            qq[t * dk + i] = t < n ? s->q[at + i] : 0.0f;
            gg[t * dk + i] = t < n ? s->g[at + i] : 0.0f;
            P[t * dk + i] = (t % KSUB > 0 ? P[(t - 1) * dk + i] : 0.0f) + gg[t * dk + i];
        }
    }
    memset(A, 0, sizeof A);
    memset(M, 0, sizeof M);
    /* the diagonal sub-chunk blocks: exp(b_t - b_s) = exp(P_t - P_s) pairwise, as the kernel takes them: exp2f of
     * (P_t - P_s) log2(e), the difference formed before the scaling (scaled sums lose 60% more: 1.2e-6 of the
     * output scale here instead of 7.5e-7) */
    for (int t = 0; t < KC; t++)
        for (int u = t / KSUB * KSUB; u <= t; u++) {
            float a = 0.0f, m = 0.0f;
            for (int64_t i = 0; i < dk; i++) {
                const float ke = kk[u * dk + i] * exp2f((P[t * dk + i] - P[u * dk + i]) * 1.4426950408889634f);
                a += kk[t * dk + i] * ke;
                m += qq[t * dk + i] * ke;
            }
            if (u < t) A[t][u] = a;
            M[t][u] = m;
        }
    /* the block of rows KSUB.. against columns ..KSUB-1, through the boundary between the sub-chunks:
     * b_t - b_s = (g_{s+1} + ... + g_{KSUB-1}) + (g_KSUB + ... + g_t), the first the sum after s to the end of
     * sub-chunk 0 (accumulated backwards from it), the second P_t */
    for (int64_t i = 0; i < dk; i++) {
        float after = 0.0f;   /* g_{u+1} + ... + g_{KSUB-1} */
        for (int u = KSUB - 1; u >= 0; u--) {
            ks0[u * dk + i] = kk[u * dk + i] * expf(after);
            after += gg[u * dk + i];
        }
        for (int t = 0; t < KSUB; t++) {
            const float e1 = expf(P[(KSUB + t) * dk + i]);
            kt1[t * dk + i] = kk[(KSUB + t) * dk + i] * e1;
            qt1[t * dk + i] = qq[(KSUB + t) * dk + i] * e1;
        }
    }
    for (int t = KSUB; t < KC; t++)
        for (int u = 0; u < KSUB; u++) {
            float a = 0.0f, m = 0.0f;
            for (int64_t i = 0; i < dk; i++) {
                a += kt1[(t - KSUB) * dk + i] * ks0[u * dk + i];
                m += qt1[(t - KSUB) * dk + i] * ks0[u * dk + i];
            }
            A[t][u] = a;
            M[t][u] = m;
        }
    /* T = (I + Diag(beta) A)^-1 by columns: T[t][r] = -beta_t sum_{r<=u<t} A[t][u] T[u][r] */
    for (int r = 0; r < KC; r++)
        for (int t = 0; t < KC; t++) {
            if (t <= r) {
                Tm[t][r] = t == r ? 1.0f : 0.0f;
                continue;
            }
            float acc = 0.0f;
            for (int u = r; u < t; u++) acc += A[t][u] * Tm[u][r];
            Tm[t][r] = -bt[t] * acc;
        }
    for (int t = 0; t < KC; t++)
        for (int u = 0; u < KC; u++) Tb[t][u] = Tm[t][u] * bt[u];
    /* per key channel: b_u = g_0 + ... + g_u, Qb = exp(b) q, W = Tb (exp(b) k), decay = exp(b_last) and
     * Kd = exp(b_last - b_u) k with b_last - b_u = g_{u+1} + ... + g_{KC-1} accumulated backwards */
    for (int64_t i = 0; i < dk; i++) {
        float kb[KC], b = 0.0f, after = 0.0f;
        for (int u = 0; u < KC; u++) {
            b += gg[u * dk + i];
            const float eb = expf(b);
            out->Qb[u * dk + i] = qq[u * dk + i] * eb;
            kb[u] = kk[u * dk + i] * eb;
        }
        out->decay[i] = expf(b);
        for (int u = KC - 1; u >= 0; u--) {
            out->Kd[u * dk + i] = kk[u * dk + i] * expf(after);
            after += gg[u * dk + i];
        }
        for (int t = 0; t < KC; t++) {
            float w = 0.0f;
            for (int u = 0; u <= t; u++) w += Tb[t][u] * kb[u];
            out->W[t * dk + i] = w;
        }
    }
    /* per value column: Ut = Tb V */
    for (int64_t j = 0; j < dv; j++) {
        float vc[KC];
        for (int u = 0; u < KC; u++) vc[u] = u < n ? s->v[((t0 + u) * H + h) * dv + j] : 0.0f;
        for (int t = 0; t < KC; t++) {
            float acc = 0.0f;
            for (int u = 0; u <= t; u++) acc += Tb[t][u] * vc[u];
            out->Ut[t * dv + j] = acc;
        }
    }
    for (int t = 0; t < KC; t++)
        for (int u = 0; u < KC; u++) out->Mqk[t * KC + u] = M[t][u];
    free(kk), free(qq), free(gg), free(P), free(sc);
}

/* kda_chunk_inter_kernel's step over one chunk: S [dk, dv] in and out, o rows written, snapshots written. */
static void model_inter(const kda_seq *s, int64_t h, int64_t t0, int n, const chunk_scratch *c, float *S) {
    const int64_t H = s->H, dk = s->dk, dv = s->dv, slot_size = H * dk * dv;
    float *U = malloc(sizeof(float) * (size_t)(KC * dv)), *Op = malloc(sizeof(float) * (size_t)(KC * dv));
    bool walk = false;
    for (int t = 0; t < n; t++) walk |= s->slots[1 + t0 + t] >= 0;
    /* phase A: U = Ut - W S, Op = Qb S, each as two halves of the key rows (i ascending in each; the halves at
     * kmid = dk / 2 rounded up to 4) added, as the kernel's two thread halves do */
    const int64_t kmid = (dk / 4 + 1) / 2 * 4;
    for (int t = 0; t < KC; t++)
        for (int64_t j = 0; j < dv; j++) {
            float pw[2] = {0.0f, 0.0f}, pq[2] = {0.0f, 0.0f};
            for (int64_t i = 0; i < dk; i++) {
                pw[i >= kmid] += c->W[t * dk + i] * S[i * dv + j];
                pq[i >= kmid] += c->Qb[t * dk + i] * S[i * dv + j];
            }
            U[t * dv + j] = c->Ut[t * dv + j] - (pw[0] + pw[1]);
            Op[t * dv + j] = pq[0] + pq[1];
        }
    /* phase B: O = Op + Mqk U (u ascending, u <= t) */
    for (int t = 0; t < n; t++)
        for (int64_t j = 0; j < dv; j++) {
            float acc = Op[t * dv + j];
            for (int u = 0; u <= t; u++) acc += c->Mqk[t * KC + u] * U[u * dv + j];
            s->o[((t0 + t) * H + h) * dv + j] = acc;
        }
    /* phase C: the state after the chunk, whole or walked */
    if (!walk) {
        for (int64_t i = 0; i < dk; i++)
            for (int64_t j = 0; j < dv; j++) {
                float acc = c->decay[i] * S[i * dv + j];
                for (int u = 0; u < KC; u++) acc += c->Kd[u * dk + i] * U[u * dv + j];
                S[i * dv + j] = acc;
            }
    } else {
        for (int t = 0; t < n; t++) {
            const int64_t at = ((t0 + t) * H + h) * dk;
            for (int64_t i = 0; i < dk; i++) {
                const float a = expf(s->g[at + i]), ki = s->k[at + i];
                for (int64_t j = 0; j < dv; j++) {
                    float x = S[i * dv + j] * a;
                    S[i * dv + j] = x + ki * U[t * dv + j];
                }
            }
            const int32_t slot = s->slots[1 + t0 + t];
            if (slot >= 0) memcpy(s->states + slot * slot_size + h * dk * dv, S, sizeof(float) * (size_t)(dk * dv));
        }
    }
    free(U), free(Op);
}

/* The chunked form over the whole sequence, every head (the launch's pieces only cut the chunk loop, with the
 * state carried through F32 memory: no change to any value). */
static void model_chunked(const kda_seq *s) {
    const int64_t dk = s->dk, dv = s->dv, slot_size = s->H * dk * dv;
    float *buf = malloc(sizeof(float) * (size_t)(3 * KC * dk + KC * dv + KC * KC + dk));
    chunk_scratch c = {buf, buf + KC * dk, buf + 2 * KC * dk, buf + 3 * KC * dk, buf + 3 * KC * dk + KC * dv,
                       buf + 3 * KC * dk + KC * dv + KC * KC};
    float *S = malloc(sizeof(float) * (size_t)(dk * dv));
    for (int64_t h = 0; h < s->H; h++) {
        memcpy(S, s->states + s->slots[0] * slot_size + h * dk * dv, sizeof(float) * (size_t)(dk * dv));
        for (int64_t t0 = 0; t0 < s->T; t0 += KC) {
            const int n = (int)(s->T - t0 < KC ? s->T - t0 : KC);
            model_intra(s, h, t0, n, &c);
            model_inter(s, h, t0, n, &c, S);
        }
    }
    free(buf), free(S);
}

/* The recurrence in double precision, from s->states[slots[0]]. */
static void recurrence_f64(const kda_seq *s, double *o, double *states) {
    const int64_t H = s->H, dk = s->dk, dv = s->dv, slot_size = H * dk * dv;
    double *S = malloc(sizeof(double) * (size_t)(dk * dv)), *u = malloc(sizeof(double) * (size_t)dv);
    for (int64_t h = 0; h < H; h++) {
        for (int64_t e = 0; e < dk * dv; e++) S[e] = s->states[s->slots[0] * slot_size + h * dk * dv + e];
        for (int64_t t = 0; t < s->T; t++) {
            const int64_t ak = (t * H + h) * dk, av = (t * H + h) * dv;
            for (int64_t j = 0; j < dv; j++) u[j] = 0.0;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) {
                    S[i * dv + j] *= exp((double)s->g[ak + i]);
                    u[j] += S[i * dv + j] * s->k[ak + i];
                }
            for (int64_t j = 0; j < dv; j++) u[j] = s->beta[t * H + h] * (s->v[av + j] - u[j]);
            for (int64_t j = 0; j < dv; j++) o[av + j] = 0.0;
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++) {
                    S[i * dv + j] += s->k[ak + i] * u[j];
                    o[av + j] += S[i * dv + j] * s->q[ak + i];
                }
            const int32_t slot = s->slots[1 + t];
            if (slot >= 0) memcpy(states + slot * slot_size + h * dk * dv, S, sizeof(double) * (size_t)(dk * dv));
        }
    }
    free(S), free(u);
}

/* ------------------------------------------------------------------------------------------------------------
 * Cases
 */
typedef enum { GATE_MIXED, GATE_STRONG, GATE_WEAK, GATE_STEEP } gate_kind;
static const char *gate_name[] = {"mixed", "strong", "weak", "steep"};

static glm53_backend *cpu;
static double worst_f32, worst_f64;   /* over every case: against the CPU op, against double */

static glm53_tensor f32_tensor(float *data, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    glm53_tensor t = {.dtype = GLM53_F32, .ndim = ndim, .shape = {a, b, c, d}};
    glm53_tensor_set_contiguous(&t);
    t.data = data;
    return t;
}

/* One sequence: the chunked model, the CPU op and the double recurrence from the same inputs; o and every state
 * written compared. snap_every > 0: states asked for after every snap_every-th row, offset so that they fall
 * inside chunks; the last row's state always (the contract). */
static void run_case(int64_t T, int64_t H, int64_t dk, int64_t dv, gate_kind gate, int snap_every) {
    const int64_t rows = T * H, ring = 1 + (snap_every ? T / snap_every + 1 : 0), slot_size = H * dk * dv;
    float *q = malloc(sizeof(float) * (size_t)(rows * dk)), *k = malloc(sizeof(float) * (size_t)(rows * dk));
    float *v = malloc(sizeof(float) * (size_t)(rows * dv)), *g = malloc(sizeof(float) * (size_t)(rows * dk));
    float *beta = malloc(sizeof(float) * (size_t)rows), *s0 = malloc(sizeof(float) * (size_t)(ring * slot_size));
    float *o_model = calloc((size_t)(rows * dv), sizeof(float)), *o_cpu = calloc((size_t)(rows * dv), sizeof(float));
    float *st_model = malloc(sizeof(float) * (size_t)(ring * slot_size));
    float *st_cpu = malloc(sizeof(float) * (size_t)(ring * slot_size));
    double *o_f64 = calloc((size_t)(rows * dv), sizeof(double));
    double *st_f64 = calloc((size_t)(ring * slot_size), sizeof(double));
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)(T + 1));

    /* q, k L2-normalised per head (q times dk^-1/2), as the model feeds them; v ~ N(0,1); beta = sigmoid */
    for (int64_t r = 0; r < rows; r++) {
        double sq = 0, sk = 0;
        for (int64_t i = 0; i < dk; i++) {
            q[r * dk + i] = test_normal(), k[r * dk + i] = test_normal();
            sq += (double)q[r * dk + i] * q[r * dk + i], sk += (double)k[r * dk + i] * k[r * dk + i];
        }
        for (int64_t i = 0; i < dk; i++) {
            q[r * dk + i] = (float)(q[r * dk + i] / sqrt(sq) / sqrt((double)dk));
            k[r * dk + i] = (float)(k[r * dk + i] / sqrt(sk));
        }
        beta[r] = 1.0f / (1.0f + expf(-test_normal()));
    }
    for (int64_t e = 0; e < rows * dv; e++) v[e] = test_normal();
    /* gates: mixed, the lower-bound gate -5 sigmoid(x); strong, the bound -5 itself on most rows (runs of 40 of
     * every 50) and the mixed gate between; weak, in (-1e-3, 0] (almost no forgetting); steep, the gate without
     * a bound (-exp(A_log) softplus(x), here up to -60 a row: exp(b) underflows to 0 within a chunk) */
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = t * H * dk; e < (t + 1) * H * dk; e++) {
            const float x = test_normal(), mixed = -5.0f / (1.0f + expf(-x));
            g[e] = gate == GATE_WEAK                     ? -1e-3f * test_uniform()
                   : gate == GATE_STRONG && t % 50 < 40 ? -5.0f
                   : gate == GATE_STEEP                  ? -10.0f * log1pf(expf(2.0f * x))
                                                        : mixed;
        }
    for (int64_t e = 0; e < ring * slot_size; e++) s0[e] = 0.1f * test_normal();
    memcpy(st_model, s0, sizeof(float) * (size_t)(ring * slot_size));
    memcpy(st_cpu, s0, sizeof(float) * (size_t)(ring * slot_size));
    for (int64_t e = 0; e < ring * slot_size; e++) st_f64[e] = s0[e];
    int32_t next_slot = 1;
    slots[0] = 0;
    for (int64_t t = 0; t < T; t++) {
        const bool snap = snap_every && (t + 3) % snap_every == 0;
        slots[1 + t] = t == T - 1 ? 0 : snap ? next_slot++ : -1;
    }

    kda_seq seq = {q, k, v, g, beta, o_model, st_model, slots, T, H, dk, dv};
    model_chunked(&seq);
    glm53_tensor tq = f32_tensor(q, 3, T, H, dk, 0), tk = f32_tensor(k, 3, T, H, dk, 0);
    glm53_tensor tv = f32_tensor(v, 3, T, H, dv, 0), tg = f32_tensor(g, 3, T, H, dk, 0);
    glm53_tensor tb = f32_tensor(beta, 2, T, H, 0, 0), to = f32_tensor(o_cpu, 3, T, H, dv, 0);
    glm53_tensor ts = f32_tensor(st_cpu, 4, ring, H, dk, dv), tsl = {.dtype = GLM53_I32, .ndim = 1, .shape = {T + 1}};
    glm53_tensor_set_contiguous(&tsl);
    tsl.data = slots;
    glm53_status st = cpu->ops->kda_recurrent(cpu, &to, &tq, &tk, &tv, &tg, &tb, &ts, &tsl);
    CHECK(st == GLM53_OK, "cpu kda_recurrent: %s", glm53_last_error());
    seq.o = NULL, seq.states = s0;   /* the double recurrence starts from the untouched ring */
    recurrence_f64(&seq, o_f64, st_f64);

    /* errors: o over every row and head; states over every slot written */
    double e_o = test_rel_err_f32(o_model, o_cpu, rows * dv), e_o64 = test_rel_err_f32_f64(o_model, o_f64, rows * dv);
    double e_cpu64 = test_rel_err_f32_f64(o_cpu, o_f64, rows * dv), e_s = 0, e_s64 = 0;
    for (int32_t sl = 0; sl < next_slot; sl++) {
        const int64_t at = sl * slot_size;
        double a = test_rel_err_f32(st_model + at, st_cpu + at, slot_size);
        double b = test_rel_err_f32_f64(st_model + at, st_f64 + at, slot_size);
        e_s = a > e_s ? a : e_s, e_s64 = b > e_s64 ? b : e_s64;
    }
    const double e_f32 = e_o > e_s ? e_o : e_s, e_f64 = e_o64 > e_s64 ? e_o64 : e_s64;
    printf("T %4lld H %lld dk %3lld dv %3lld %-6s snaps %-3s | vs cpu op: o %.2e state %.2e | vs f64: o %.2e "
           "state %.2e (cpu op vs f64: o %.2e)\n", (long long)T, (long long)H, (long long)dk, (long long)dv,
           gate_name[gate], snap_every ? "yes" : "no", e_o, e_s, e_o64, e_s64, e_cpu64);
    /* F32 rounding: a few 1e-6 of the output scale; the CPU op's own distance from double is of the same order */
    CHECK(e_f32 <= 1e-5, "T %lld %s: chunked vs the CPU op %.3e", (long long)T, gate_name[gate], e_f32);
    CHECK(e_f64 <= 1e-5, "T %lld %s: chunked vs double %.3e", (long long)T, gate_name[gate], e_f64);
    worst_f32 = e_f32 > worst_f32 ? e_f32 : worst_f32;
    worst_f64 = e_f64 > worst_f64 ? e_f64 : worst_f64;
    free(q), free(k), free(v), free(g), free(beta), free(s0), free(o_model), free(o_cpu), free(st_model);
    free(st_cpu), free(o_f64), free(st_f64), free(slots);
}

int main(void) {
    test_seed(20261208);
    if (glm53_backend_cpu_create(1, &cpu) != GLM53_OK) {
        fprintf(stderr, "cpu backend: %s\n", glm53_last_error());
        return 1;
    }
    static const int64_t Ts[] = {1, 15, 16, 63, 64, 65, 200, 1000};
    TEST_CASE("kda chunked form against the recurrence") {
        for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
            for (int gate = 0; gate < 4; gate++) {
                run_case(Ts[i], 2, 16, 16, (gate_kind)gate, 0);
                run_case(Ts[i], 2, 16, 24, (gate_kind)gate, 7);
            }
        for (int gate = 0; gate < 3; gate++) {
            run_case(200, 1, 128, 128, (gate_kind)gate, 0);   /* the model's head */
            run_case(100, 1, 128, 128, (gate_kind)gate, 23);
            run_case(1000, 1, 32, 64, (gate_kind)gate, 0);
        }
    }
    printf("worst: vs the CPU op %.3e, vs double %.3e\n", worst_f32, worst_f64);
    cpu->ops->destroy(cpu);
    return test_finish("test_kda_chunked");
}
