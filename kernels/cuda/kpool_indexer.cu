/*
 * kpool_indexer.cu - the KPool "lightning" indexer (glm53-architecture.md section 4.7) on the CUDA backend: pool
 * compression, scoring of closed pools, and the per-row selection of positions.
 *
 * kpool_compress: one thread per (pool, channel), a softmax over the P slots in F32.
 * kpool_score: a block per (query row, up to 64 pools); the row's Q [Hi, dI] and head weights sit in shared
 *   memory, a warp scores one pool at a time (the key read once into registers, a warp sum per head, 8 heads'
 *   sums interleaved). A thread per pool, as before, ran 302 us per decode call at the real dims (a serial
 *   4096-term loop per thread). At decode (one row, ~513 pools) the launch was 17 blocks whose warps each ran 4
 *   pools x 32 heads of dependent shuffle chains, after staging Q one dependent load at a time: 21.6 us on an
 *   H100. A small grid now takes 1 pool per warp (65 blocks), Q comes in 16-byte loads, and a warp keeps 8
 *   heads' butterflies in flight; the arithmetic per score is unchanged, so are its bits.
 * kpool_score past 16 rows (prefill): kpool_score_rows_kernel, a block per (4 rows, 64 pools), a lane per pool
 *   with every head's dot product in registers (no shuffles; its section below); with BF16 Q (the engine's BF16
 *   activations) kpool_score_mma_kernel instead (GLM53_CUDA_KPOOL_MMA): a block per (64 rows, 128 pools), each
 *   head's dot products by mma.sync with the F32 keys split into BF16 hi + lo, the scores kept in registers
 *   across heads.
 * kpool_select: a block per query row. When every closed pool fits the budget the answer is 0 .. G*P-1.
 *   Otherwise a radix select over the scores' order-preserving 32-bit keys (up to four passes of 8 bits, a
 *   shared histogram each) finds the top bytes of the n_select-th best key and how many pools with exactly those
 *   bytes are still needed; one more ordered pass keeps every pool above them and the lowest-index ones at them
 *   (ties to the lower pool, as the contract says), compacting them with block scans. The selected pools come
 *   out in ascending pool order (the contract fixes the set, not the order: the CPU backend emits its heap
 *   order). At decode the old kernel (23.2 us on an H100, ~513 pools) was serial work inside one block: thread 0
 *   walked up to 256 bins per pass, and the final pass ran two block scans per 256 pools. The bin is now found
 *   by a block scan, the passes stop once the chosen bin holds exactly the keys still needed, and the final
 *   pass is one scan per 1024 pools.
 */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemv_mma.cuh"

#include <cub/block/block_scan.cuh>

enum {
    SCORE_THREADS = 256,
    SCORE_WARPS = SCORE_THREADS / 32,
    SCORE_POOLS_PER_WARP = 8,   /* at most; fewer when the grid would be small */
    SCORE_KEY_REGS = 4,         /* key channels a lane keeps in registers: dI <= 128 */
    SCORE_HEADS = 8,            /* heads whose dot products a warp computes together */
    ROWS_T = 4,                 /* kpool_score_rows: query rows a block */
    ROWS_POOLS = 64,            /* kpool_score_rows: pools a block, a lane each in two warps per row */
    ROWS_MAX_HEADS = 32,        /* kpool_score_rows: heads a lane accumulates in registers */
    SCORE_MIN_ROWS_FORM = 17,   /* rows from which kpool_score takes the many-rows form (verification: 16) */
    SELECT_THREADS = 256,
    SELECT_ITEMS = 4,           /* pools a kpool_select thread loads at once, in every pass */
};
static const int64_t MAX_GRID_Y = 65535;   /* gridDim.y limit: longer score launches are split */

/* ------------------------------------------------------------------------------------------------------------
 * kpool_compress
 */
/* pooled[G,dI] F32; kappa, sigma [G*P, dI] activations; ape [P, dI] weight.
 *   a_i = sigma[g*P+i][c] + ape[i][c];  pi = softmax_i(a);  pooled[g][c] = sum_i pi_i kappa[g*P+i][c]. */
__global__ void kpool_compress_kernel(float *pooled, act_in kappa, act_in sigma, weight_ref ape, int64_t G,
                                      int64_t dI, int64_t P) {
    for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < G * dI;
         item += (int64_t)gridDim.x * blockDim.x) {
        int64_t g = item / dI, c = item % dI;
        float mx = -INFINITY;
        for (int64_t i = 0; i < P; i++) mx = fmaxf(mx, sigma[(g * P + i) * dI + c] + ape.at(i, c));
        float sum = 0.0f;
        for (int64_t i = 0; i < P; i++) sum += expf(sigma[(g * P + i) * dI + c] + ape.at(i, c) - mx);
        float acc = 0.0f;
        for (int64_t i = 0; i < P; i++)
            acc += (expf(sigma[(g * P + i) * dI + c] + ape.at(i, c) - mx) / sum) * kappa[(g * P + i) * dI + c];
        pooled[item] = acc;
    }
}

glm53_status cuda_kpool_compress(glm53_backend *be, glm53_tensor *pooled, const glm53_tensor *kappa,
                                 const glm53_tensor *sigma, const glm53_tensor *ape) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(pooled) && pooled->dtype == GLM53_F32 && cuda_is_act(kappa) && cuda_is_act(sigma));
    assert(ape->ndim == 2);
    int64_t G = glm53_tensor_rows(pooled), dI = cuda_cols(pooled), P = ape->shape[0];
    assert(ape->shape[1] == dI && glm53_tensor_numel(kappa) == G * P * dI && glm53_tensor_numel(sigma) == G * P * dI);
    weight_ref ar;
    GLM53_TRY(cuda_weight_ref(ape, &ar, "kpool_compress"));
    GLM53_TRY(cuda_enter(cb));
    if (G * dI == 0) return GLM53_OK;
    kpool_compress_kernel<<<cuda_blocks_for(G * dI, 256), 256, 0, cb->stream>>>(
        (float *)pooled->data, cuda_act_in(kappa), cuda_act_in(sigma), ar, G, dI, P);
    CUDA_LAUNCHED("kpool_compress");
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * kpool_score
 */
/* grid (ceil(G / (SCORE_WARPS * pools_per_warp)), rows of this launch); row t = t0 + blockIdx.y; warp w scores
 * the pools g = blockIdx.x * SCORE_WARPS * pools_per_warp + w + j * SCORE_WARPS, j < pools_per_warp. Dynamic
 * shared memory: Q_t [Hi*dI], w_t [Hi] (vec: Hi*dI % 8 == 0 and Q 16-byte aligned, so Q_t comes in 16-byte
 * loads). For one pool the warp reads the key once (lane l holds channels l, l + 32, ... in registers when
 * dI <= 32 * SCORE_KEY_REGS), and per head the lanes' partial products are summed by cuda_warp_sum's butterfly:
 *   scores[t][g] = sum_h w[t][h] relu(scale * Q[t,h] . pooled[g])  for g < n_closed[t], else -inf,
 * with the sum over h in order h = 0, 1, ... Heads go SCORE_HEADS at a time: their dot products are independent,
 * so their partials and butterflies are interleaved (SCORE_HEADS shuffles in flight instead of one), and only
 * then added to the sum, still in head order; every value is computed by the same operations as one head at a
 * time, so the scores are bit for bit those of that order. The next pool's key is loaded while a pool is scored;
 * with it the kernel takes 64 registers (48, five blocks a multiprocessor, spilled), so four blocks. */
__global__ void __launch_bounds__(SCORE_THREADS, 4)
kpool_score_kernel(float *scores, act_in Q, const float *w, const float *pooled, const int32_t *n_closed,
                   int64_t t0, int64_t G, int64_t Hi, int64_t dI, float scale, int pools_per_warp, bool vec) {
    cuda_pdl_begin();
    extern __shared__ float smem[];
    float *q_t = smem, *w_t = smem + Hi * dI;
    const int64_t t = t0 + blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t pools_per_block = (int64_t)SCORE_WARPS * pools_per_warp;
    const bool in_regs = dI <= 32 * SCORE_KEY_REGS;
    const int64_t closed = n_closed[t];

    /* The first pool's key is requested with n_closed and before Q is staged, so the loads overlap (pooled has
     * at least G rows; the key of a pool that turns out not closed is simply not used). */
    const int64_t g0 = (int64_t)blockIdx.x * pools_per_block + warp;
    float kv[SCORE_KEY_REGS];
#pragma unroll
    for (int r = 0; r < SCORE_KEY_REGS; r++)
        kv[r] = g0 < G && in_regs && lane + 32 * r < dI ? pooled[g0 * dI + lane + 32 * r] : 0.0f;

    const int64_t HD = Hi * dI;
    if (vec) {
#pragma unroll 2
        for (int64_t i = 8 * (int64_t)threadIdx.x; i < HD; i += 8 * SCORE_THREADS) {
            float v[8];
            cuda_act_load8(Q, t * HD + i, true, v);
#pragma unroll
            for (int e = 0; e < 8; e++) q_t[i + e] = v[e];
        }
    } else {
#pragma unroll 4
        for (int64_t i = threadIdx.x; i < HD; i += SCORE_THREADS) q_t[i] = Q[t * HD + i];
    }
    for (int64_t i = threadIdx.x; i < Hi; i += SCORE_THREADS) w_t[i] = w[t * Hi + i];
    __syncthreads();

    for (int j = 0; j < pools_per_warp; j++) {
        const int64_t g = g0 + (int64_t)j * SCORE_WARPS;
        if (g >= G) break;
        /* the next pool's key is requested now and waited for only at the next pool: its load runs under this
         * pool's arithmetic (one pool at a time waited for every key: at a prefill's 4 pools a warp, most of the
         * time) */
        const int64_t g_next = g + SCORE_WARPS;
        float kv_next[SCORE_KEY_REGS];
#pragma unroll
        for (int r = 0; r < SCORE_KEY_REGS; r++)
            kv_next[r] = j + 1 < pools_per_warp && g_next < G && in_regs && lane + 32 * r < dI
                             ? pooled[g_next * dI + lane + 32 * r] : 0.0f;
        if (g >= closed) {
            if (lane == 0) scores[t * G + g] = -INFINITY;
#pragma unroll
            for (int r = 0; r < SCORE_KEY_REGS; r++) kv[r] = kv_next[r];
            continue;
        }
        const float *key = pooled + g * dI;
        float s = 0.0f;
        for (int64_t h0 = 0; h0 < Hi; h0 += SCORE_HEADS) {
            float part[SCORE_HEADS];
#pragma unroll
            for (int hh = 0; hh < SCORE_HEADS; hh++) {
                part[hh] = 0.0f;
                if (h0 + hh >= Hi) continue;
                const float *qh = q_t + (h0 + hh) * dI;
                if (in_regs) {
#pragma unroll
                    for (int r = 0; r < SCORE_KEY_REGS; r++)
                        if (lane + 32 * r < dI) part[hh] += qh[lane + 32 * r] * kv[r];
                } else {
                    for (int64_t d = lane; d < dI; d += 32) part[hh] += qh[d] * key[d];
                }
            }
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1)   /* cuda_warp_sum, SCORE_HEADS at once */
#pragma unroll
                for (int hh = 0; hh < SCORE_HEADS; hh++) part[hh] += __shfl_xor_sync(0xffffffffu, part[hh], offset);
#pragma unroll
            for (int hh = 0; hh < SCORE_HEADS; hh++) {
                if (h0 + hh >= Hi) break;
                float dot = part[hh] * scale;
                s += w_t[h0 + hh] * (dot > 0.0f ? dot : 0.0f);
            }
        }
        if (lane == 0) scores[t * G + g] = s;
#pragma unroll
        for (int r = 0; r < SCORE_KEY_REGS; r++) kv[r] = kv_next[r];
    }
}

/* The many-rows kernels' tile of scores that no row of the block has closed: rows tb .. tb + rows - 1 by pools
 * g0 .. g0 + pools - 1 are -inf, without any arithmetic (rows past T and pools past G are not the block's).
 * SCORE_THREADS threads. */
__device__ inline void kpool_fill_unclosed(float *scores, int64_t tb, int rows, int64_t g0, int pools, int64_t T,
                                           int64_t G) {
    for (int i = threadIdx.x; i < rows * pools; i += SCORE_THREADS) {
        const int64_t t = tb + i / pools, g = g0 + i % pools;
        if (t < T && g < G) scores[t * G + g] = -INFINITY;
    }
}

/* The many-rows form (prefill). The kernel above sums a head's dot product across the lanes of a warp and pays
 * five shuffles a head a pool: at 8,192 rows its two calls took 30 ms on the H100 against 1.2 ms of F32 FMAs.
 * Here a lane owns a pool and keeps every head's dot product in registers, so nothing is shuffled:
 *   grid (ceil(G / 64), ceil(T / 4)), 256 threads; warp w takes row t0 + 4 blockIdx.y + w / 2 and pools
 *   g0 + 32 (w % 2) + lane, g0 = 64 blockIdx.x. Shared memory: Q of the block's 4 rows [4][Hi*dI] F32, their head
 *   weights [4][Hi], the keys of its 64 pools [dI/4][64][4] (four channels of a pool in 16 bytes, so that lane l
 *   reads pool l's and a warp's loads are consecutive). Per four channels a lane loads its key's 4 values, then per
 *   head Q's 4 (one 16-byte load every lane of the warp shares) and adds the 4 products in channel order.
 *   scores[t][g] = sum_h w[t][h] relu(scale * dot_h), the sum over h in order; dot_h the FMA chain over channels
 *   0 .. dI-1. The rounding differs from the warp-sum form (a different order of the channel sum), so a row's
 *   scores depend on which form its launch took: decode and verification (up to 16 rows) keep the warp-sum form,
 *   and a prompt's selection may differ from a decode of the same tokens only where two pools' scores agree to
 *   the last bits (exact ReLU zeros stay exact in both). Needs dI % 4 == 0, Hi <= 32 and the shared memory. */
__global__ void __launch_bounds__(SCORE_THREADS)
kpool_score_rows_kernel(float *scores, act_in Q, const float *w, const float *pooled, const int32_t *n_closed,
                        int64_t T, int64_t G, int64_t Hi, int64_t dI, float scale) {
    cuda_pdl_begin();
    extern __shared__ __align__(16) float rows_smem[];
    const int64_t HD = Hi * dI;
    float *q_s = rows_smem, *w_s = q_s + ROWS_T * HD, *k_s = w_s + ROWS_T * ROWS_MAX_HEADS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t g0 = (int64_t)blockIdx.x * ROWS_POOLS, tb = (int64_t)blockIdx.y * ROWS_T;
    const int nt = (int)(T - tb < ROWS_T ? T - tb : ROWS_T);

    /* pools no row of the block has closed are -inf without any arithmetic */
    int32_t most_closed = 0;
    for (int r = 0; r < nt; r++) most_closed = max(most_closed, n_closed[tb + r]);
    if (g0 >= most_closed) {
        kpool_fill_unclosed(scores, tb, nt, g0, ROWS_POOLS, T, G);
        return;
    }
    for (int64_t i = threadIdx.x; i < (int64_t)nt * HD; i += SCORE_THREADS) q_s[i] = Q[tb * HD + i];
    for (int64_t i = threadIdx.x; i < (int64_t)nt * Hi; i += SCORE_THREADS)
        w_s[(i / Hi) * ROWS_MAX_HEADS + i % Hi] = w[(tb + i / Hi) * Hi + i % Hi];
    /* key channel c of local pool p at k_s[((c / 4) * 64 + p) * 4 + c % 4]; pools past G read as zeros */
    for (int64_t i = threadIdx.x; i < ROWS_POOLS * dI; i += SCORE_THREADS) {
        const int64_t p = i / dI, c = i % dI;
        k_s[((c / 4) * ROWS_POOLS + p) * 4 + c % 4] = g0 + p < G ? pooled[(g0 + p) * dI + c] : 0.0f;
    }
    __syncthreads();

    const int r = warp / 2, p = (warp % 2) * 32 + lane;
    const int64_t t = tb + r, g = g0 + p;
    if (r >= nt || g >= G) return;
    if (g >= n_closed[t]) {
        scores[t * G + g] = -INFINITY;
        return;
    }
    const float *q_row = q_s + (int64_t)r * HD;
    float dot[ROWS_MAX_HEADS];
#pragma unroll
    for (int h = 0; h < ROWS_MAX_HEADS; h++) dot[h] = 0.0f;
    for (int64_t c4 = 0; c4 < dI / 4; c4++) {
        const float4 k = *reinterpret_cast<const float4 *>(k_s + (c4 * ROWS_POOLS + p) * 4);
#pragma unroll
        for (int h = 0; h < ROWS_MAX_HEADS; h++)
            if (h < Hi) {
                const float4 qv = *reinterpret_cast<const float4 *>(q_row + h * dI + 4 * c4);
                dot[h] = __fmaf_rn(qv.x, k.x, dot[h]);
                dot[h] = __fmaf_rn(qv.y, k.y, dot[h]);
                dot[h] = __fmaf_rn(qv.z, k.z, dot[h]);
                dot[h] = __fmaf_rn(qv.w, k.w, dot[h]);
            }
    }
    float sum = 0.0f;
#pragma unroll
    for (int h = 0; h < ROWS_MAX_HEADS; h++)
        if (h < Hi) {
            const float d = __fmul_rn(dot[h], scale);
            sum = __fmaf_rn(w_s[r * ROWS_MAX_HEADS + h], d > 0.0f ? d : 0.0f, sum);
        }
    scores[t * G + g] = sum;
}

/* Shared memory of kpool_score_rows_kernel, bytes. */
static size_t kpool_score_rows_smem(int64_t Hi, int64_t dI) {
    return (size_t)(ROWS_T * Hi * dI + ROWS_T * ROWS_MAX_HEADS + ROWS_POOLS * dI) * sizeof(float);
}

/* The many-rows form on tensor cores (BF16 Q, cb->kpool_mma, GLM53_CUDA_KPOOL_MMA). Per head the score is a GEMM,
 * dot[t][g] = Q[t,h,:] . pooled[g,:] (T x G x dI), then scores[t][g] = sum_h w[t][h] relu(scale dot_h). The rows
 * kernel above does it in F32 FMAs on the CUDA cores: 17.1 ms at an 8,192-token prefill on an H100 (two DSA layers,
 * Hi 32, dI 128, up to 2,048 pools) and 263.7 ms at 32,768 tokens, the prefill's largest kernel, against a floor of
 * T G Hi dI (causal) FLOPs: 137 GFLOP at 8,192 tokens, twice that as the split keys' MMAs below, under a
 * millisecond of tensor-core time.
 *   grid (ceil(G / 128), ceil(T / 64)), 256 threads: a block computes 64 rows x 128 pools, 8 warps as 2 (rows) x 4
 *   (pools), a warp 32 x 32 as 2 x 4 MMA tiles (mma.sync m16n8k16, gemv_mma_16816), and loops over the heads in
 *   order h = 0, 1, ...: the head's dot products in registers, then the epilogue adds w[t][h] relu(scale dot) into
 *   the per-(t, g) score, also in registers, so nothing but the score leaves the block.
 *   Shared memory: the block's 128 keys split into BF16 hi and lo halves [2][128][dI] (staged once), Q of the 64
 *   rows for one head [2 stages][64][dI] BF16 (cp.async brings head h + 1 while head h is computed; one barrier a
 *   head), the head weights [Hi][64] F32; 104 KiB at Hi 32, dI 128 and 123 registers (no spills): two blocks a
 *   multiprocessor.
 *   Fragments as gemm_mma.cuh's: lane (g = lane / 4, q = lane % 4) reads 16 bytes (8 k-values) at 8 q of each 32
 *   k-values of its rows and feeds two k16 steps from them, A and B alike. Rows of dI % 64 == 0 BF16 values would
 *   put the two rows of a quarter-warp's 16-byte loads on the same banks, so odd rows store their 16-byte units
 *   swapped by 4 (kpool_mma_unit): conflict-free with no padding.
 *   A block whose 64 rows have none of its pools closed writes -inf without arithmetic (as the rows kernel), and a
 *   warp whose 32 rows have none of its 32 pools closed skips the MMAs (the causal diagonal's blocks).
 * Precision contract (split keys): Q is BF16, so exact as an MMA input. A key value k (F32) is split into
 * k_hi = bf16(k) and k_lo = bf16(k - k_hi) (the difference is exact in F32), |k - k_hi - k_lo| <= 2^-16 |k|; the
 * MMA multiplies q by both exactly (8-bit significands) and adds the products in F32 in its own order (the tensor
 * cores may truncate instead of rounding), 2 dI / 16 chained MMAs a dot product. So
 *   |dot - Q[t,h,:] . pooled[g,:]| <= (2^-16 + (dI / 8) 2^-22) sum_c |Q[t,h,c] pooled[g,c]|   (dI 128: 1.9e-5)
 * (TF32 keys through m16n8k8 would cost the same MMA time, TF32 running at half the BF16 rate, and round each key
 * to 2^-11.) The epilogue is the rows kernel's: dot * scale rounded, relu, fma into the score in head order. A dot
 * clearly negative (below minus the bound) stays negative, so a pool whose every head is such scores an exact zero,
 * as on the CPU; a dot within the bound of zero may land on the other side of the ReLU, a difference the same bound
 * covers (ReLU is 1-Lipschitz).
 * Scores are not the F32 kernels' bits (this form is taken from 17 rows, as the rows kernel: decode and
 * verification keep the warp-sum form), and a row's score does not depend on the other rows of its block. Needs
 * dI % 64 == 0, 16-byte aligned Q and pooled, and the shared memory (kpool_score_mma_fits). */
enum {
    MMA_ROWS = 64,     /* kpool_score_mma: query rows a block */
    MMA_POOLS = 128,   /* kpool_score_mma: pools a block */
};

/* Element offset of the 16-byte unit u (8 BF16 values, columns 8 u ..) of row r in a [rows][dI] BF16 tile,
 * dI % 64 == 0: odd rows hold their units XOR 4, so that rows r and r + 1 (r even) at units 4 c .. 4 c + 3 lie in
 * different halves of the 32 banks. */
__device__ inline int kpool_mma_unit(int r, int u, int dI) { return r * dI + 8 * (u ^ ((r & 1) << 2)); }

/* Dynamic shared memory of kpool_score_mma_kernel, bytes: k_hi, k_lo [128][dI], q [2][64][dI] BF16, w [Hi][64] F32. */
static size_t kpool_score_mma_smem(int64_t Hi, int64_t dI) {
    return (size_t)(2 * MMA_POOLS + 2 * MMA_ROWS) * dI * sizeof(__nv_bfloat16) + (size_t)Hi * MMA_ROWS * sizeof(float);
}

/* Copies Q[t, h, :] of the block's 64 rows (t = tb + r; rows past T: zeros) into the stage q [64][dI] with cp.async,
 * as one group. Every thread calls it. */
__device__ inline void kpool_mma_stage_q(__nv_bfloat16 *q, const __nv_bfloat16 *Q, int64_t tb, int64_t T, int Hi,
                                         int dI, int h) {
    const int units = dI / 8;
    for (int i = threadIdx.x; i < MMA_ROWS * units; i += SCORE_THREADS) {
        const int r = i / units, u = i % units;
        const bool in = tb + r < T;
        const __nv_bfloat16 *src = in ? Q + ((tb + r) * Hi + h) * (int64_t)dI + 8 * u : Q;
        cuda_cp_async16(q + kpool_mma_unit(r, u, dI), src, in ? 16 : 0);
    }
    cuda_cp_async_commit();
}

/* scores [T, G] F32; Q [T, Hi, dI] BF16; w [T, Hi] F32; pooled [>= G, dI] F32; n_closed [T] I32. */
__global__ void __launch_bounds__(SCORE_THREADS, 2)
kpool_score_mma_kernel(float *scores, const __nv_bfloat16 *Q, const float *w, const float *pooled,
                       const int32_t *n_closed, int64_t T, int64_t G, int Hi, int dI, float scale) {
    cuda_pdl_begin();
    extern __shared__ __align__(16) uint8_t mma_smem[];
    __nv_bfloat16 *k_hi = reinterpret_cast<__nv_bfloat16 *>(mma_smem), *k_lo = k_hi + MMA_POOLS * dI;
    __nv_bfloat16 *q_s = k_lo + MMA_POOLS * dI;   /* [2][64][dI] */
    float *w_s = reinterpret_cast<float *>(q_s + 2 * MMA_ROWS * dI);   /* [Hi][64] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane / 4, q = lane % 4;
    const int wm = warp % 2, wn = warp / 2;   /* this warp's 32 rows and 32 pools of the block */
    const int64_t g0 = (int64_t)blockIdx.x * MMA_POOLS, tb = (int64_t)blockIdx.y * MMA_ROWS;

    /* pools no row of the block has closed are -inf without any arithmetic */
    const bool row_closes_g0 = threadIdx.x < MMA_ROWS && tb + threadIdx.x < T && n_closed[tb + threadIdx.x] > g0;
    if (!__syncthreads_or(row_closes_g0)) {
        kpool_fill_unclosed(scores, tb, MMA_ROWS, g0, MMA_POOLS, T, G);
        return;
    }
    kpool_mma_stage_q(q_s, Q, tb, T, Hi, dI, 0);   /* head 0's Q flies while the keys are split */

    /* keys: 8 values a thread at a time, as hi and lo units; pools past G read as zeros */
    const int units = dI / 8;
    for (int i = threadIdx.x; i < MMA_POOLS * units; i += SCORE_THREADS) {
        const int p = i / units, u = i % units;
        float4 v[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
        if (g0 + p < G) {
            const float4 *src = reinterpret_cast<const float4 *>(pooled + (g0 + p) * dI + 8 * u);
            v[0] = src[0];
            v[1] = src[1];
        }
        const float k[8] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w};
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const __nv_bfloat162 h2 = __floats2bfloat162_rn(k[2 * j], k[2 * j + 1]);   /* .x: the lower k, low bits */
            const float2 hf = __bfloat1622float2(h2);
            const __nv_bfloat162 l2 = __floats2bfloat162_rn(k[2 * j] - hf.x, k[2 * j + 1] - hf.y);
            hi[j] = *reinterpret_cast<const uint32_t *>(&h2);
            lo[j] = *reinterpret_cast<const uint32_t *>(&l2);
        }
        *reinterpret_cast<uint4 *>(k_hi + kpool_mma_unit(p, u, dI)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(k_lo + kpool_mma_unit(p, u, dI)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    for (int i = threadIdx.x; i < Hi * MMA_ROWS; i += SCORE_THREADS) {
        const int h = i / MMA_ROWS, r = i % MMA_ROWS;
        w_s[i] = tb + r < T ? w[(tb + r) * Hi + h] : 0.0f;
    }

    /* a warp none of whose rows has closed its first pool only writes -inf */
    const int64_t t_lane = tb + wm * 32 + lane;
    const unsigned closed_lane = t_lane < T ? (unsigned)max(n_closed[t_lane], 0) : 0u;
    const bool warp_live = (int64_t)__reduce_max_sync(0xffffffffu, closed_lane) > g0 + wn * 32;

    float score[2][4][4];   /* C fragments: [mi][ni][0..1] row g, pools 2q, 2q + 1 of the n8 tile; [2..3] row g + 8 */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) score[mi][ni][0] = score[mi][ni][1] = score[mi][ni][2] = score[mi][ni][3] = 0.0f;

    for (int h = 0; h < Hi; h++) {
        /* head h's Q has landed and every warp is done with head h - 1 (whose stage the next copy overwrites) */
        cuda_cp_async_wait<0>();
        __syncthreads();
        if (h + 1 < Hi) kpool_mma_stage_q(q_s + ((h + 1) & 1) * MMA_ROWS * dI, Q, tb, T, Hi, dI, h + 1);
        if (!warp_live) continue;
        const __nv_bfloat16 *qh = q_s + (h & 1) * MMA_ROWS * dI;
        float dot[2][4][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++) dot[mi][ni][0] = dot[mi][ni][1] = dot[mi][ni][2] = dot[mi][ni][3] = 0.0f;
        for (int c = 0; c < dI / 32; c++) {   /* 32 k-values: this lane's 8 at 32 c + 8 q, two k16 steps */
            uint4 a[2][2];   /* [mi][rows g, g + 8] */
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int half = 0; half < 2; half++)
                    a[mi][half] = *reinterpret_cast<const uint4 *>(
                        qh + kpool_mma_unit(wm * 32 + mi * 16 + half * 8 + g, 4 * c + q, dI));
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int key = kpool_mma_unit(wn * 32 + ni * 8 + g, 4 * c + q, dI);
                const uint4 bh = *reinterpret_cast<const uint4 *>(k_hi + key);
                const uint4 bl = *reinterpret_cast<const uint4 *>(k_lo + key);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    const uint4 &x = a[mi][0], &y = a[mi][1];
                    gemv_mma_16816(dot[mi][ni], x.x, y.x, x.y, y.y, bh.x, bh.y);
                    gemv_mma_16816(dot[mi][ni], x.z, y.z, x.w, y.w, bh.z, bh.w);
                    gemv_mma_16816(dot[mi][ni], x.x, y.x, x.y, y.y, bl.x, bl.y);
                    gemv_mma_16816(dot[mi][ni], x.z, y.z, x.w, y.w, bl.z, bl.w);
                }
            }
        }
        /* the rows kernel's epilogue: w relu(dot * scale) added in head order */
        const float *wh = w_s + h * MMA_ROWS + wm * 32 + g;
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float wt = wh[mi * 16 + (j >= 2 ? 8 : 0)];
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    const float d = __fmul_rn(dot[mi][ni][j], scale);
                    score[mi][ni][j] = __fmaf_rn(wt, d > 0.0f ? d : 0.0f, score[mi][ni][j]);
                }
            }
    }

#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int64_t t = tb + wm * 32 + mi * 16 + half * 8 + g;
            if (t >= T) continue;
            const int64_t closed = n_closed[t];
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int64_t gg = g0 + wn * 32 + ni * 8 + 2 * q + e;
                    if (gg < G) scores[t * G + gg] = gg < closed ? score[mi][ni][2 * half + e] : -INFINITY;
                }
        }
}

/* Whether kpool_score_mma_kernel takes Q [T, Hi, dI] (BF16, T >= SCORE_MIN_ROWS_FORM: the caller checks). */
static bool kpool_score_mma_fits(const cuda_backend *cb, const glm53_tensor *Q, const glm53_tensor *pooled,
                                 int64_t T, int64_t Hi, int64_t dI) {
    return dI % 64 == 0 && (uintptr_t)Q->data % 16 == 0 && (uintptr_t)pooled->data % 16 == 0 &&
           (T + MMA_ROWS - 1) / MMA_ROWS <= MAX_GRID_Y &&
           kpool_score_mma_smem(Hi, dI) <= (size_t)cb->smem_optin;
}

glm53_status cuda_kpool_score(glm53_backend *be, glm53_tensor *scores, const glm53_tensor *Q,
                              const glm53_tensor *w, const glm53_tensor *pooled, const glm53_tensor *n_closed,
                              float scale) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(scores) && scores->dtype == GLM53_F32 && cuda_is_act(Q) && Q->ndim == 3);
    assert(cuda_is_act(w) && w->dtype == GLM53_F32 && cuda_is_act(pooled) && pooled->dtype == GLM53_F32);
    assert(n_closed->dtype == GLM53_I32 && n_closed->data && n_closed->device == GLM53_DEVICE_CUDA);
    int64_t T = Q->shape[0], Hi = Q->shape[1], dI = Q->shape[2], G = cuda_cols(scores);
    assert(glm53_tensor_rows(scores) == T && glm53_tensor_numel(w) == T * Hi);
    assert(cuda_cols(pooled) == dI && glm53_tensor_rows(pooled) >= G && glm53_tensor_numel(n_closed) == T);
    GLM53_TRY(cuda_enter(cb));
    if (T == 0 || G == 0) return GLM53_OK;
    if (T >= SCORE_MIN_ROWS_FORM && Q->dtype == GLM53_BF16 && cb->kpool_mma &&
        kpool_score_mma_fits(cb, Q, pooled, T, Hi, dI)) {
        const size_t mma_smem = kpool_score_mma_smem(Hi, dI);
        GLM53_TRY(cuda_smem_optin(cb, (const void *)kpool_score_mma_kernel, mma_smem, "kpool_score (mma)"));
        const dim3 grid((unsigned)((G + MMA_POOLS - 1) / MMA_POOLS), (unsigned)((T + MMA_ROWS - 1) / MMA_ROWS));
        CUDA_TRY(cuda_launch(cb, kpool_score_mma_kernel, grid, SCORE_THREADS, mma_smem, cb->pdl,
                             (float *)scores->data, (const __nv_bfloat16 *)Q->data, (const float *)w->data,
                             (const float *)pooled->data, (const int32_t *)n_closed->data, T, G, (int)Hi, (int)dI,
                             scale));
        CUDA_LAUNCHED("kpool_score (mma)");
        return GLM53_OK;
    }
    if (T >= SCORE_MIN_ROWS_FORM && dI % 4 == 0 && Hi <= ROWS_MAX_HEADS &&
        kpool_score_rows_smem(Hi, dI) <= (size_t)cb->smem_optin) {
        const size_t rows_smem = kpool_score_rows_smem(Hi, dI);
        GLM53_TRY(cuda_smem_optin(cb, (const void *)kpool_score_rows_kernel, rows_smem, "kpool_score (rows)"));
        const dim3 grid((unsigned)((G + ROWS_POOLS - 1) / ROWS_POOLS), (unsigned)((T + ROWS_T - 1) / ROWS_T));
        CUDA_TRY(cuda_launch(cb, kpool_score_rows_kernel, grid, SCORE_THREADS, rows_smem, cb->pdl,
                             (float *)scores->data, cuda_act_in(Q), (const float *)w->data,
                             (const float *)pooled->data, (const int32_t *)n_closed->data, T, G, Hi, dI, scale));
        CUDA_LAUNCHED("kpool_score (rows)");
        return GLM53_OK;
    }
    size_t smem = (size_t)(Hi * dI + Hi) * sizeof(float);
    GLM53_TRY(cuda_smem_optin(cb, (const void *)kpool_score_kernel, smem, "kpool_score"));
    /* SCORE_POOLS_PER_WARP pools per warp amortise the staging of Q over 64 pools a block, which is what many rows
     * want; a launch that would not give every multiprocessor two blocks (decode: one row, ~513 pools, 9 blocks
     * of 8 serial pools a warp) takes fewer pools per warp and more blocks instead. */
    const int64_t rows0 = T < MAX_GRID_Y ? T : MAX_GRID_Y;
    int pools_per_warp = SCORE_POOLS_PER_WARP;
    int64_t pools_per_block = (int64_t)SCORE_WARPS * pools_per_warp;
    while (pools_per_warp > 1 && rows0 * ((G + pools_per_block - 1) / pools_per_block) < 2 * (int64_t)cb->sm_count) {
        pools_per_warp /= 2;
        pools_per_block = (int64_t)SCORE_WARPS * pools_per_warp;
    }
    const bool vec = (Hi * dI) % 8 == 0 && (uintptr_t)Q->data % 16 == 0;
    for (int64_t t0 = 0; t0 < T; t0 += MAX_GRID_Y) {
        int64_t rows = T - t0 < MAX_GRID_Y ? T - t0 : MAX_GRID_Y;
        dim3 grid((unsigned)((G + pools_per_block - 1) / pools_per_block), (unsigned)rows);
        CUDA_TRY(cuda_launch(cb, kpool_score_kernel, grid, SCORE_THREADS, smem, cb->pdl, (float *)scores->data,
                             cuda_act_in(Q), (const float *)w->data, (const float *)pooled->data,
                             (const int32_t *)n_closed->data, t0, G, Hi, dI, scale, pools_per_warp, vec));
        CUDA_LAUNCHED("kpool_score");
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * kpool_select
 */
/* An unsigned key whose order is the selection order of scores: larger is better, -0 equals +0, and NaN (key 0)
 * is below every number (no number maps to 0: only a negative NaN would). */
__device__ inline uint32_t score_key(float f) {
    if (isnan(f)) return 0u;
    if (f == 0.0f) f = 0.0f;
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* One block per row t. idx[T, W] I32; scores[T, G] F32; pos[T] I32. */
__global__ void __launch_bounds__(SELECT_THREADS)
kpool_select_kernel(int32_t *idx, const float *scores, const int32_t *pos, int64_t G, int64_t W, int32_t P,
                    int32_t n_select, bool with_tail, cuda_fault *fault) {
    cuda_pdl_begin();
    static_assert(SELECT_THREADS == 256, "a thread per histogram bin");
    typedef cub::BlockScan<uint32_t, SELECT_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage scan_storage;
    __shared__ uint32_t hist[256];
    __shared__ uint32_t chosen_prefix, chosen_remaining, chosen_count;

    const int64_t t = blockIdx.x;
    int32_t *out = idx + t * W;
    const float *row = scores + t * G;
    const int64_t L = (int64_t)pos[t] + 1;                  /* visible tokens */
    const int64_t closed = L > 0 ? L / P : 0;                /* closed pools */

    int64_t written = 0;
    if (closed <= n_select) {
        for (int64_t i = threadIdx.x; i < closed * P; i += blockDim.x) out[i] = (int32_t)i;
        written = closed * P;
    } else if (closed > G) {   /* scores too narrow to rank this row's pools: a caller bug, reported at sync */
        if (threadIdx.x == 0) cuda_record_fault(fault, CUDA_FAULT_KPOOL_SELECT, t, closed, G + 1);
    } else {
        /* Radix select, most significant byte first: after the pass of byte b, `prefix` holds the top bytes of
         * the n_select-th best key (`mask` says which) and `remaining` how many keys with exactly those top
         * bytes are still needed. The row is read with SELECT_ITEMS loads in flight per thread (after the first
         * pass it is in L1). */
        uint32_t prefix = 0, mask = 0, remaining = (uint32_t)n_select;
        for (int shift = 24; shift >= 0; shift -= 8) {
            hist[threadIdx.x] = 0;
            __syncthreads();
            for (int64_t base = threadIdx.x; base < closed; base += SELECT_THREADS * SELECT_ITEMS) {
                uint32_t key[SELECT_ITEMS];
#pragma unroll
                for (int j = 0; j < SELECT_ITEMS; j++) {
                    const int64_t g = base + j * SELECT_THREADS;
                    key[j] = g < closed ? score_key(row[g]) : 0u;
                }
#pragma unroll
                for (int j = 0; j < SELECT_ITEMS; j++)
                    if (base + j * SELECT_THREADS < closed && (key[j] & mask) == prefix)
                        atomicAdd(&hist[(key[j] >> shift) & 0xffu], 1u);
            }
            __syncthreads();
            /* The bin of the n_select-th key, found by all threads at once (thread i holds bin 255 - i, so an
             * exclusive sum in thread order counts the keys in higher bins): the one bin with
             * above < remaining <= above + count. (One thread scanning the 256 bins serially cost ~4 us a pass.) */
            const uint32_t bin = 255u - threadIdx.x, count = hist[bin];
            uint32_t above;
            scan_t(scan_storage).ExclusiveSum(count, above);
            if (above < remaining && remaining <= above + count) {
                chosen_prefix = prefix | (bin << shift);
                chosen_remaining = remaining - above;
                chosen_count = count;
            }
            __syncthreads();
            prefix = chosen_prefix;
            remaining = chosen_remaining;
            mask |= 0xffu << shift;
            /* Every key under the prefix is needed: the lower bytes cannot change the set (the same for every
             * thread, so the block leaves together). */
            if (chosen_count == remaining) break;
        }
        /* Take every pool whose masked key is above prefix and the first `remaining` (by pool index) equal to it,
         * in ascending pool order. One scan per chunk of SELECT_THREADS * SELECT_ITEMS pools counts both kinds at
         * once (above in the low 16 bits, equal in the high 16: a chunk has at most 1024 of each); the equal
         * pools taken before a pool are the first min(equal rank, still needed) of them. */
        uint32_t equal_seen = 0;
        int64_t selected = 0;
        for (int64_t chunk = 0; chunk < closed; chunk += SELECT_THREADS * SELECT_ITEMS) {
            const int64_t first = chunk + (int64_t)threadIdx.x * SELECT_ITEMS;   /* blocked: the scan's order */
            uint32_t flag[SELECT_ITEMS], rank[SELECT_ITEMS], total;
#pragma unroll
            for (int j = 0; j < SELECT_ITEMS; j++) {
                const uint32_t key = first + j < closed ? score_key(row[first + j]) & mask : 0u;
                flag[j] = first + j >= closed ? 0u : key > prefix ? 1u : key == prefix ? 0x10000u : 0u;
            }
            scan_t(scan_storage).ExclusiveSum(flag, rank, total);
            __syncthreads();   /* scan_storage is reused by the next chunk */
            const uint32_t left = remaining > equal_seen ? remaining - equal_seen : 0u;   /* equal ones still needed */
#pragma unroll
            for (int j = 0; j < SELECT_ITEMS; j++) {
                const uint32_t equal_rank = rank[j] >> 16;
                if (flag[j] == 1u || (flag[j] && equal_rank < left)) {
                    const int64_t slot = selected + (rank[j] & 0xffffu) + (equal_rank < left ? equal_rank : left);
                    for (int32_t i = 0; i < P; i++) out[slot * P + i] = (int32_t)((first + j) * P + i);
                }
            }
            selected += (total & 0xffffu) + ((total >> 16) < left ? (total >> 16) : left);
            equal_seen += total >> 16;
        }
        written = (int64_t)n_select * P;
    }

    if (with_tail) {   /* the open pool: positions closed*P .. L-1 */
        int64_t tail = L - closed * P;
        for (int64_t i = threadIdx.x; i < tail; i += blockDim.x) out[written + i] = (int32_t)(closed * P + i);
        written += tail > 0 ? tail : 0;
    }
    for (int64_t i = written + threadIdx.x; i < W; i += blockDim.x) out[i] = -1;
}

glm53_status cuda_kpool_select(glm53_backend *be, glm53_tensor *idx, const glm53_tensor *scores,
                               const glm53_tensor *pos, int32_t pool_size, int32_t n_select, int32_t with_tail) {
    cuda_backend *cb = cuda_impl(be);
    assert(idx->dtype == GLM53_I32 && idx->data && idx->device == GLM53_DEVICE_CUDA && idx->ndim == 2);
    assert(pos->dtype == GLM53_I32 && pos->data && pos->device == GLM53_DEVICE_CUDA);
    assert(cuda_is_act(scores) && scores->dtype == GLM53_F32);
    int64_t T = idx->shape[0], W = idx->shape[1], G = cuda_cols(scores);
    assert(pool_size >= 1 && n_select >= 1);
    assert(W == (int64_t)n_select * pool_size + (with_tail ? pool_size - 1 : 0));
    assert(glm53_tensor_numel(pos) == T && glm53_tensor_rows(scores) == T && T <= INT32_MAX);
    GLM53_TRY(cuda_enter(cb));
    if (T == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, kpool_select_kernel, (unsigned)T, SELECT_THREADS, 0, cb->pdl, (int32_t *)idx->data,
                         (const float *)scores->data, (const int32_t *)pos->data, G, W, pool_size, n_select,
                         with_tail != 0, cb->fault));
    CUDA_LAUNCHED("kpool_select");
    return GLM53_OK;
}
