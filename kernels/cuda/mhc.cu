/*
 * mhc.cu - manifold-constrained hyper-connections (glm53-architecture.md section 4.3) on the CUDA backend:
 * expand (embedding into every stream), pre (the 24-wide F32 projection, Sinkhorn, collapse), post (write-back
 * and stream mixing), mean (final collapse).
 *
 * mhc_pre runs in two kernels, so that a decode row is spread over many multiprocessors (one block per row did
 * all of it before: 754 us per call at the real dims on the H200, for a 786 KB weight):
 *   1. projections: grid (row, 512-element chunk of the flattened streams S*D), each block the partial dot
 *      products of its chunk with the (2+S)*S = 24 rows of fn and the partial sum of squares, 16-byte loads when
 *      H and fn are BF16, all 24 rows' loads in flight at once; partials to scratch [N, chunks, 25];
 *   2. mix: grid (row, 512-column block of x + 1). Each collapse block adds the partials it needs in chunk order,
 *      applies 1 / rms (one scalar per row, so it commutes with the projection), computes pre and collapses the
 *      streams into its columns of x; the last block computes post and runs the Sinkhorn iterations on the
 *      S x S matrix (S * S <= 32: one lane per element, in a register, the sums gathered by shuffles; larger S:
 *      one lane per row / column in shared memory; either way each sum over its S terms in the CPU's order).
 *   On the H100's flash slice the two took 15.4 and 23.2 us a call (0.62 ms of a batch-1 step over 16 calls)
 *   when stage 1 waited on its loads one row at a time and stage 2 was one block per row.
 * Every row is computed alone, in a fixed order: the result of a row does not depend on the batch.
 */
#include "kernels/cuda/cuda_common.cuh"

enum {
    MHC_THREADS = 256,
    MHC_MAX_S = 16,
    MHC_MAX_MIX = (2 + MHC_MAX_S) * MHC_MAX_S,
    MHC_GROUP = 24,              /* stage-1 projections per pass: all (2 + S) * S of them at S = 4 */
    MHC_PROJECT_THREADS = 64,
    MHC_CHUNK = 512,             /* flattened-stream elements per stage-1 block: 8 per thread, 32 blocks a row */
    MHC_PROJECT_ROWS = 8,        /* rows per stage-1 block (fewer rows than that: one block a row group anyway) */
    MHC_COLS = 512,              /* columns of x per stage-2 collapse block: 8 blocks a row at D = 4096 */
    MHC_SITE_THREADS = 96,       /* mhc_site_kernel: stage 1's 64, and a warp for the Sinkhorn of the last block */
    MHC_SITE_MANY_ROWS = 64,     /* mhc_site from this many rows: mhc_site_rows_kernel + mhc_site_tail_kernel */
    MHC_TAIL_THREADS = CUDA_NORM_THREADS + 32,   /* mhc_site_tail_kernel: rmsnorm's 256, and a Sinkhorn warp */
    MHC_CHUNK_WARPS = MHC_PROJECT_THREADS / 32,  /* warp sums per chunk (mhc_chunk_partials adds them in order) */
};
static_assert(MHC_CHUNK == 8 * MHC_PROJECT_THREADS, "stage 1's BF16 path: one 8-element piece of a chunk a thread");

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
/* H[N,S,D][n][s] = x[N,D][n]. */
__global__ void mhc_expand_kernel(act_out H, act_in x, int64_t N, int64_t S, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * S * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / (S * D), d = i % D;
        H.store(i, x[n * D + d]);
    }
}

/* Stage 1 of mhc_pre. grid (ceil(N / MHC_PROJECT_ROWS), n_chunks), MHC_PROJECT_THREADS threads; block (b, c) covers
 * the flattened streams H[n] [S*D] from c * MHC_CHUNK to (c+1) * MHC_CHUNK of its rows n (MHC_PROJECT_ROWS from
 * b * MHC_PROJECT_ROWS; the fn rows' pieces are loaded once for all of them: a block per row read 24 fn pieces for
 * each H piece, 6.4 GB of L2 traffic a call at 8,192 rows) and writes for each n_mix + 1 partial sums
 *   part[n][c][j] = sum_i H[n][i] * fn[j][i]   (j < n_mix),     part[n][c][n_mix] = sum_i H[n][i]^2,
 * MHC_GROUP projections per pass over the chunk (one pass at S = 4), the sum of squares in the first.
 * VEC: H and fn are BF16 and 16-byte aligned, SD % 8 == 0: each thread takes 8 consecutive elements per 16-byte
 * load (of H, and of each fn row); the MHC_GROUP rows' loads are issued before any is used (a row past n_mix
 * reads row n_mix - 1 and is dropped), because a load under a run-time condition waits for the previous one:
 * 24 round trips to memory in a row took 15 us per call. Otherwise one element at a time through act_in /
 * weight_ref. part[N, n_chunks, n_mix + 1] F32 scratch; stage 2 adds the chunks in order, so the result is fixed. */
/* The MHC_GROUP fn rows v0 .. v0 + MHC_GROUP at elements [i, i + 8) of the flattened streams, 16 bytes each, all
 * issued before any is used (a row past n_mix reads row n_mix - 1; its products are dropped). fn BF16 [n_mix, SD]. */
__device__ inline void mhc_fn_load8(uint4 (&raw)[MHC_GROUP], const __nv_bfloat16 *fn, int v0, int n_mix, int64_t SD,
                                    int64_t i) {
#pragma unroll
    for (int g = 0; g < MHC_GROUP; g++)
        raw[g] = *reinterpret_cast<const uint4 *>(fn + (int64_t)min(v0 + g, n_mix - 1) * SD + i);
}

/* One thread's 8 elements of a chunk: acc[g] += hv . fn row (v0 + g) (raw, as mhc_fn_load8 loaded it),
 * acc[MHC_GROUP] += hv . hv. mhc_project_kernel and mhc_site_kernel both sum here: the same bits. Every rounding
 * is spelled out (__fmaf_rn, __fmul_rn, __fadd_rn): a compiler free to contract x*w + y*v may pick either product
 * to fuse, and may pick differently in two kernels (this file's kernels and the fused one must agree bit for bit;
 * mhc_post, the collapse and rmsnorm spell theirs out for the same reason). */
__device__ inline void mhc_project8(float (&acc)[MHC_GROUP + 1], const float (&hv)[8], const uint4 (&raw)[MHC_GROUP]) {
#pragma unroll
    for (int g = 0; g < MHC_GROUP; g++) {
        float wv[8], a = 0.0f;
        cuda_bf16x8_to_float(raw[g], wv);
#pragma unroll
        for (int e = 0; e < 4; e++)
            a = __fadd_rn(a, __fmaf_rn(hv[2 * e], wv[2 * e], __fmul_rn(hv[2 * e + 1], wv[2 * e + 1])));
        acc[g] = __fadd_rn(acc[g], a);
    }
    float sq = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) sq = __fmaf_rn(hv[e], hv[e], sq);
    acc[MHC_GROUP] = __fadd_rn(acc[MHC_GROUP], sq);
}

/* The chunk's sums of the threads' acc over the first MHC_PROJECT_THREADS threads of the block (warp sums, then
 * the warps added in order) into out[v0 ..] (and out[n_mix], the squares, when v0 == 0). Every thread of the block
 * calls it (barriers inside); threads past the first MHC_PROJECT_THREADS contribute nothing. */
__device__ inline void mhc_chunk_partials(float *out, const float (&acc)[MHC_GROUP + 1], int v0, int n_mix) {
    __shared__ float warp_part[MHC_PROJECT_THREADS / 32][MHC_GROUP + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int g = 0; g <= MHC_GROUP; g++) {
        float v = cuda_warp_sum(acc[g]);
        if (lane == 0 && warp < MHC_PROJECT_THREADS / 32) warp_part[warp][g] = v;
    }
    __syncthreads();
    const int g = threadIdx.x, v = g < MHC_GROUP ? v0 + g : n_mix;
    if (g <= MHC_GROUP && (g < MHC_GROUP ? v < n_mix : v0 == 0)) {
        float s = 0.0f;
        for (int w = 0; w < MHC_PROJECT_THREADS / 32; w++) s += warp_part[w][g];
        out[v] = s;
    }
    __syncthreads();   /* warp_part is written again by the next group */
}

/* One step of mhc_warp_sums_halving at offset O: values [0, 2 O) in, [0, O) out. A bit mask picks what is kept and
 * what is sent, not a ?: on v (which the compiler turned into a select of addresses: v in local memory). */
template <int O>
__device__ inline void mhc_halve(float (&v)[32], int lane) {
    const unsigned upper = (lane & O) ? 0xffffffffu : 0u;
#pragma unroll
    for (int i = 0; i < O; i++) {
        const unsigned lo = __float_as_uint(v[i]), hi = __float_as_uint(v[i + O]);
        const float send = __uint_as_float((lo & upper) | (hi & ~upper));
        const float keep = __uint_as_float((hi & upper) | (lo & ~upper));
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

/* mhc_chunk_partials' warp sums without its barriers: lane g (g <= MHC_GROUP) of each warp gets cuda_warp_sum of
 * the lanes' acc[g], the same additions in the same order (at offset o a lane adds its partner's partial sum to its
 * own), by halving: at offset o a lane keeps the half of its values whose index has bit o equal to its lane's bit o
 * and sends the other half, so 31 shuffles instead of 125, and lane g ends with value g. (A C replay of both on
 * 200,000 random warps, signed zeros among them, found the same bits for every value.) */
__device__ inline float mhc_warp_sums_halving(const float (&acc)[MHC_GROUP + 1]) {
    const int lane = threadIdx.x & 31;
    float v[32];
#pragma unroll
    for (int g = 0; g < 32; g++) v[g] = g <= MHC_GROUP ? acc[g] : 0.0f;
    mhc_halve<16>(v, lane);
    mhc_halve<8>(v, lane);
    mhc_halve<4>(v, lane);
    mhc_halve<2>(v, lane);
    mhc_halve<1>(v, lane);
    return v[0];
}

template <bool VEC>
__global__ void __launch_bounds__(MHC_PROJECT_THREADS)
mhc_project_kernel(float *part, act_in H, weight_ref fn, int64_t N, int64_t S, int64_t D) {
    cuda_pdl_begin();
    const int64_t SD = S * D, n0 = (int64_t)blockIdx.x * MHC_PROJECT_ROWS;
    const int64_t n_end = n0 + MHC_PROJECT_ROWS < N ? n0 + MHC_PROJECT_ROWS : N;
    const int n_mix = (int)((2 + S) * S), n_chunks = (int)gridDim.y;
    const int64_t i0 = (int64_t)blockIdx.y * MHC_CHUNK, i1 = i0 + MHC_CHUNK < SD ? i0 + MHC_CHUNK : SD;

    for (int v0 = 0; v0 < n_mix; v0 += MHC_GROUP) {   /* projections v0 .. v0 + MHC_GROUP; slot MHC_GROUP: squares */
        if (VEC) {
            /* this thread's 8 elements of the chunk (one piece a thread: MHC_CHUNK = 8 * MHC_PROJECT_THREADS), the
             * fn rows' pieces loaded once for all the block's rows */
            const __nv_bfloat16 *w = (const __nv_bfloat16 *)fn.data;
            const int64_t i = i0 + (int64_t)threadIdx.x * 8;
            uint4 raw[MHC_GROUP];
            if (i < i1) mhc_fn_load8(raw, w, v0, n_mix, SD, i);
            for (int64_t n = n0; n < n_end; n++) {
                float acc[MHC_GROUP + 1];
#pragma unroll
                for (int g = 0; g <= MHC_GROUP; g++) acc[g] = 0.0f;
                if (i < i1) {
                    float hv[8];
                    const __nv_bfloat16 *h = (const __nv_bfloat16 *)H.data + n * SD + i;
                    cuda_bf16x8_to_float(*reinterpret_cast<const uint4 *>(h), hv);
                    mhc_project8(acc, hv, raw);
                }
                mhc_chunk_partials(part + (n * n_chunks + blockIdx.y) * (n_mix + 1), acc, v0, n_mix);
            }
        } else {
            for (int64_t n = n0; n < n_end; n++) {
                float acc[MHC_GROUP + 1];
#pragma unroll
                for (int g = 0; g <= MHC_GROUP; g++) acc[g] = 0.0f;
                for (int64_t i = i0 + threadIdx.x; i < i1; i += MHC_PROJECT_THREADS) {
                    float x = H[n * SD + i];
#pragma unroll
                    for (int g = 0; g < MHC_GROUP; g++)
                        if (v0 + g < n_mix) acc[g] += x * fn.at(v0 + g, i);
                    acc[MHC_GROUP] += x * x;
                }
                mhc_chunk_partials(part + (n * n_chunks + blockIdx.y) * (n_mix + 1), acc, v0, n_mix);
            }
        }
    }
}

/* Sum over the chunks, in chunk order, of stage 1's partial value j of row n. */
__device__ inline float mhc_chunk_sum(const float *part, int64_t n, int n_chunks, int n_mix, int j) {
    const float *p = part + (int64_t)n * n_chunks * (n_mix + 1) + j;
    float v = 0.0f;
#pragma unroll 8
    for (int c = 0; c < n_chunks; c++) v += p[(int64_t)c * (n_mix + 1)];
    return v;
}

/* Sinkhorn on an S x S matrix (S * S <= 32) in one warp: lane j*S + k holds C[j][k] in a register; a row
 * (column) sum gathers its S terms by shuffles and adds them in the CPU's order, so every lane of the row divides
 * by the same sum the serial loop forms. SS: S known at compile time (4, the model's), which lets the S shuffles
 * of a sum go out together (a run-time S took one round trip per term: 20 iterations of them dominated the
 * call); 0: S = s at run time. m: the row's chunk sums, r its 1 / rms; comb[S * S] out. */
template <int SS>
__device__ inline void mhc_sinkhorn_lanes(float *comb, const float *m, float r, float s2, const weight_ref &base, int s,
                                          float hc_eps, int32_t iters) {
    const int S = SS ? SS : s, lane = threadIdx.x & 31;
    const int j = lane / S, k = lane % S;
    const bool mine = lane < S * S;
    float c = mine ? m[2 * S + lane] * r * s2 + base.at(0, 2 * S + lane) : 0.0f;
    float mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int q = 0; q < S; q++) mx = fmaxf(mx, __shfl_sync(0xffffffffu, c, (j * S + q) & 31));
    /* The CPU's max is a serial `if (row[k] > mx)`: equal to fmaxf for the non-NaN values it meets. */
    c = mine ? expf(c - mx) : 0.0f;
#pragma unroll
    for (int q = 0; q < S; q++) sum += __shfl_sync(0xffffffffu, c, (j * S + q) & 31);
    c = c / sum + hc_eps;
    for (int32_t it = 0; it < iters; it++) {
        if (it > 0) {
            float rs = 0.0f;
#pragma unroll
            for (int q = 0; q < S; q++) rs += __shfl_sync(0xffffffffu, c, (j * S + q) & 31);
            c /= rs + hc_eps;
        }
        float cs = 0.0f;
#pragma unroll
        for (int q = 0; q < S; q++) cs += __shfl_sync(0xffffffffu, c, (q * S + k) & 31);
        c /= cs + hc_eps;
    }
    if (mine) comb[lane] = c;
}

/* Stage 2 of mhc_pre. grid (N, n_col_blocks + 1), MHC_THREADS threads. Blocks y < n_col_blocks collapse columns
 * y * MHC_COLS .. + MHC_COLS of row n into x, each computing the row's pre weights itself (S + 1 chunk sums, the
 * same in every block); block n_col_blocks computes post and comb: the Sinkhorn iterations on the S x S matrix
 * in warp 0, each row or column sum over its S terms in the CPU's order, so the matrix comes out as the serial
 * loop's. The Sinkhorn block and the collapse blocks run side by side (one block doing both took 23 us a call).
 * post[N,S], comb[N,S,S] F32; x[N,D] activation; H[N,S,D]; part[N, n_chunks, n_mix + 1]. */
__global__ void __launch_bounds__(MHC_THREADS)
mhc_mix_kernel(act_out x, float *post, float *comb, act_in H, const float *part, int n_chunks, weight_ref base,
               weight_ref scale, int64_t S, int64_t D, float rms_eps, float hc_eps, int32_t iters) {
    cuda_pdl_begin();
    __shared__ float m[MHC_MAX_MIX + 1];
    __shared__ float pre[MHC_MAX_S];
    __shared__ float C[MHC_MAX_S * MHC_MAX_S];
    const int64_t n = blockIdx.x, SD = S * D;
    const int n_mix = (int)((2 + S) * S);
    const bool sinkhorn_block = blockIdx.y == gridDim.y - 1;

    if (!sinkhorn_block) {
        /* pre, then x[n][d] = sum_k pre[k] H[n][k][d] over this block's columns */
        if (threadIdx.x <= S) {
            const int j = threadIdx.x < S ? (int)threadIdx.x : n_mix;
            m[j] = mhc_chunk_sum(part, n, n_chunks, n_mix, j);
        }
        __syncthreads();
        if (threadIdx.x < S) {
            const float r = 1.0f / sqrtf(m[n_mix] / (float)SD + rms_eps);
            pre[threadIdx.x] = cuda_sigmoid(m[threadIdx.x] * r * scale.at(0, 0) + base.at(0, threadIdx.x)) + hc_eps;
        }
        __syncthreads();
        const int64_t d0 = (int64_t)blockIdx.y * MHC_COLS, d1 = d0 + MHC_COLS < D ? d0 + MHC_COLS : D;
        for (int64_t d = d0 + threadIdx.x; d < d1; d += blockDim.x) {
            float acc = 0.0f;
            for (int64_t k = 0; k < S; k++) acc = __fmaf_rn(pre[k], H[n * SD + k * D + d], acc);
            x.store(n * D + d, acc);
        }
        return;
    }

    for (int j = threadIdx.x; j <= n_mix; j += blockDim.x) m[j] = mhc_chunk_sum(part, n, n_chunks, n_mix, j);
    __syncthreads();
    if (threadIdx.x >= 32) return;
    const float r = 1.0f / sqrtf(m[n_mix] / (float)SD + rms_eps);
    const float s1 = scale.at(0, 1), s2 = scale.at(0, 2);
    const int lane = threadIdx.x;
    if (lane < S) post[n * S + lane] = 2.0f * cuda_sigmoid(m[S + lane] * r * s1 + base.at(0, S + lane));
    if (S == 4) {
        mhc_sinkhorn_lanes<4>(comb + n * S * S, m, r, s2, base, 4, hc_eps, iters);
    } else if (S * S <= 32) {
        mhc_sinkhorn_lanes<0>(comb + n * S * S, m, r, s2, base, (int)S, hc_eps, iters);
    } else {
        /* Larger S: lane j normalises row j, lane k column k, in shared memory. */
        if (lane < S) {
            float *row = C + lane * S, mx = -INFINITY, sum = 0.0f;
            for (int64_t k = 0; k < S; k++) {
                row[k] = m[2 * S + lane * S + k] * r * s2 + base.at(0, 2 * S + lane * S + k);
                if (row[k] > mx) mx = row[k];
            }
            for (int64_t k = 0; k < S; k++) sum += (row[k] = expf(row[k] - mx));
            for (int64_t k = 0; k < S; k++) row[k] = row[k] / sum + hc_eps;
        }
        __syncwarp();
        for (int32_t it = 0; it < iters; it++) {
            if (it > 0) {
                if (lane < S) {
                    float sum = 0.0f;
                    for (int64_t k = 0; k < S; k++) sum += C[lane * S + k];
                    for (int64_t k = 0; k < S; k++) C[lane * S + k] /= sum + hc_eps;
                }
                __syncwarp();
            }
            if (lane < S) {
                float sum = 0.0f;
                for (int64_t j = 0; j < S; j++) sum += C[j * S + lane];
                for (int64_t j = 0; j < S; j++) C[j * S + lane] /= sum + hc_eps;
            }
            __syncwarp();
        }
        for (int64_t i = lane; i < S * S; i += 32) comb[n * S * S + i] = C[i];
    }
}

/* Eight elements of a new stream k in mhc_post_kernel's order: a[e] = post_k y[e] + sum_j comb[j][k] H_j[e], every
 * rounding spelled out so the two site kernels (and the chain) get the same bits. */
__device__ inline void mhc_post8(float (&a)[8], float pk, const float (&cjk)[4], const float (&yv)[8],
                                 const float (&hj)[4][8]) {
#pragma unroll
    for (int e = 0; e < 8; e++) {
        a[e] = __fmul_rn(pk, yv[e]);
#pragma unroll
        for (int j = 0; j < 4; j++) a[e] = __fmaf_rn(cjk[j], hj[j][e], a[e]);
    }
}

/* Eight elements of the collapse x = sum_k pre[k] H_k (S = 4, in k order from zero), rounded to BF16: what both
 * site kernels store and feed to the rmsnorm's sums. */
__device__ inline uint4 mhc_collapse8(const float *pre, const uint4 (&hk)[4]) {
    float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float hf[8];
        cuda_bf16x8_to_float(hk[k], hf);
#pragma unroll
        for (int e = 0; e < 8; e++) a[e] = __fmaf_rn(pre[k], hf[e], a[e]);
    }
    return cuda_float8_to_bf16x8(a);
}

/* mhc_site in one kernel, S = 4, BF16 activations and fn (cuda_mhc_site checks), grid (rows, n_chunks),
 * MHC_SITE_THREADS threads. Block (n, c) owns chunk c of row n's flattened streams (as stage 1 of mhc_pre):
 *   1. (POST) its 512 elements of the new streams, H_out[n][k][d] = post[k] y[d] + sum_j comb[j][k] H_in[j][d]
 *      in mhc_post_kernel's order, rounded to BF16 and stored; (!POST) its 512 elements of H_in;
 *   2. the chunk's partial projections of those BF16 values (mhc_project8 / mhc_chunk_partials: stage 1's bits),
 *      the fn rows loaded before the wait on the previous kernel (weights only);
 *   3. a ticket: the block that finishes the row's last chunk (tickets[n] counts them, and that block sets it
 *      back to 0 for the next call) adds the chunks' partials in order, then warp 2 makes post and comb
 *      (mhc_mix_kernel's Sinkhorn) while warps 0-1 make x (the collapse) and xn (rmsnorm_rows_kernel's sums: the
 *      64 threads play its 256, thread u for threads u, u + 64, u + 128, u + 192, so warp r's v-th warp sum is
 *      that kernel's warp 2v + r, and the 8 are added in its order).
 * So x, xn, post, comb and H_out are the op chain's bits (test_cuda_ops checks them equal), with one launch for
 * the chain's four (mhc_post, the two of mhc_pre, rmsnorm) and no pass over H_out but the one that writes it.
 * In place: post and comb are read in step 1 by every block of the row before its ticket, written in step 3
 * after the last ticket. */
template <bool POST>
__global__ void __launch_bounds__(MHC_SITE_THREADS)
mhc_site_kernel(act_out H_out, act_out x, act_out xn, float *post, float *comb, act_in y, act_in H_in, float *part,
                unsigned *tickets, weight_ref fn, weight_ref base, weight_ref scale, weight_ref norm, int64_t D,
                float rms_eps, float hc_eps, float norm_eps, int32_t iters) {
    constexpr int S = 4, n_mix = (2 + S) * S;
    __shared__ float m[n_mix + 1];
    __shared__ float pre[S];
    __shared__ float red[CUDA_NORM_THREADS / 32];
    __shared__ bool last;
    const int64_t n = blockIdx.x, SD = S * D;
    const int n_chunks = (int)gridDim.y, u = threadIdx.x;
    const int64_t i = (int64_t)blockIdx.y * MHC_CHUNK + (int64_t)u * 8;   /* this thread's 8 elements */
    const bool mine = u < MHC_PROJECT_THREADS && i < SD;
    const __nv_bfloat16 *Hs = (const __nv_bfloat16 *)(POST ? H_out.data : H_in.data) + n * SD;   /* the pre's input */

    cuda_pdl_launch_dependents();
    uint4 raw[MHC_GROUP];
    if (mine) mhc_fn_load8(raw, (const __nv_bfloat16 *)fn.data, 0, n_mix, SD, i);
    cuda_pdl_wait();

    float acc[MHC_GROUP + 1];
#pragma unroll
    for (int g = 0; g <= MHC_GROUP; g++) acc[g] = 0.0f;
    if (mine) {
        float hv[8];
        if (POST) {
            const int64_t k = i / D, d = i % D;
            float yv[8], hj[S][8];
            cuda_act_load8(y, n * D + d, true, yv);
#pragma unroll
            for (int j = 0; j < S; j++) cuda_act_load8(H_in, (n * S + j) * D + d, true, hj[j]);
            const float pk = post[n * S + k];
            float cjk[S];
#pragma unroll
            for (int j = 0; j < S; j++) cjk[j] = comb[(n * S + j) * S + k];
            float a[8];
            mhc_post8(a, pk, cjk, yv, hj);
            const uint4 hb = cuda_float8_to_bf16x8(a);
            *reinterpret_cast<uint4 *>((__nv_bfloat16 *)H_out.data + n * SD + i) = hb;
            cuda_bf16x8_to_float(hb, hv);
        } else {
            cuda_bf16x8_to_float(*reinterpret_cast<const uint4 *>(Hs + i), hv);
        }
        mhc_project8(acc, hv, raw);
    }
    mhc_chunk_partials(part + ((int64_t)n * n_chunks + blockIdx.y) * (n_mix + 1), acc, 0, n_mix);

    /* the ticket: every thread's writes (its H_out elements, the partials) are made visible device-wide before the
     * block's ticket is counted, so the block that draws the last one reads them all */
    __threadfence();
    __syncthreads();
    if (u == 0) {
        last = atomicAdd(&tickets[n], 1u) == (unsigned)n_chunks - 1;
        if (last) tickets[n] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();

    if (u <= n_mix) {   /* the row's sums, chunks in order (L2 loads: other blocks wrote them) */
        const float *p = part + (int64_t)n * n_chunks * (n_mix + 1) + u;
        float v = 0.0f;
#pragma unroll 8
        for (int c = 0; c < n_chunks; c++) v += __ldcg(p + (int64_t)c * (n_mix + 1));
        m[u] = v;
    }
    __syncthreads();
    const float r = 1.0f / sqrtf(m[n_mix] / (float)SD + rms_eps);
    if (u >= 64) {   /* warp 2: post and the Sinkhorn */
        const int lane = u & 31;
        if (lane < S) post[n * S + lane] = 2.0f * cuda_sigmoid(m[S + lane] * r * scale.at(0, 1) + base.at(0, S + lane));
        mhc_sinkhorn_lanes<4>(comb + n * S * S, m, r, scale.at(0, 2), base, 4, hc_eps, iters);
        return;
    }
    /* warps 0-1: x = sum_k pre[k] H[k], then xn = rmsnorm(x) */
    if (u < S) pre[u] = cuda_sigmoid(m[u] * r * scale.at(0, 0) + base.at(0, u)) + hc_eps;
    asm volatile("bar.sync 1, 64;" ::: "memory");
    constexpr int V = CUDA_NORM_THREADS / MHC_PROJECT_THREADS;   /* rmsnorm threads per thread here: 4 */
    constexpr int CH = 2;   /* 8-column chunks per rmsnorm thread: D <= 8 * 256 * CH (cuda_mhc_site checks) */
    auto column = [&](int v, int c) { return ((int64_t)c * CUDA_NORM_THREADS + u + v * MHC_PROJECT_THREADS) * 8; };
    uint4 hk[V][CH][S];   /* every load in flight before any is used */
#pragma unroll
    for (int v = 0; v < V; v++)
#pragma unroll
        for (int c = 0; c < CH; c++)
#pragma unroll
            for (int k = 0; k < S; k++)
                hk[v][c][k] = column(v, c) < D ? __ldcg(reinterpret_cast<const uint4 *>(Hs + k * D + column(v, c)))
                                               : make_uint4(0, 0, 0, 0);
    uint4 xb[V][CH];   /* x as BF16, what the rmsnorm kernel would read back */
    float ss[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
        ss[v] = 0.0f;
#pragma unroll
        for (int c = 0; c < CH; c++) {
            float xr[8];
            xb[v][c] = mhc_collapse8(pre, hk[v][c]);
            if (column(v, c) >= D) continue;
            *reinterpret_cast<uint4 *>((__nv_bfloat16 *)x.data + n * D + column(v, c)) = xb[v][c];
            cuda_bf16x8_to_float(xb[v][c], xr);
#pragma unroll
            for (int e = 0; e < 8; e++) ss[v] = __fmaf_rn(xr[e], xr[e], ss[v]);
        }
    }
#pragma unroll
    for (int v = 0; v < V; v++) {
        const float w = cuda_warp_sum(ss[v]);
        if ((u & 31) == 0) red[2 * v + (u >> 5)] = w;
    }
    asm volatile("bar.sync 1, 64;" ::: "memory");
    float total = 0.0f;
    for (int w = 0; w < CUDA_NORM_THREADS / 32; w++) total += red[w];
    const float inv_rms = 1.0f / sqrtf(total / (float)D + norm_eps);
#pragma unroll
    for (int v = 0; v < V; v++)
#pragma unroll
        for (int c = 0; c < CH; c++) {
            const int64_t col = column(v, c);
            if (col >= D) continue;
            float xr[8], o[8];
            cuda_bf16x8_to_float(xb[v][c], xr);
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = xr[e] * inv_rms * norm.at(0, col + e);
            *reinterpret_cast<uint4 *>((__nv_bfloat16 *)xn.data + n * D + col) = cuda_float8_to_bf16x8(o);
        }
}

/* mhc_site for many rows (prefill; cuda_mhc_site takes it from MHC_SITE_MANY_ROWS rows on): the one-launch kernel
 * above is a latency chain per block (one row, 24 KB of fn re-read from L2 per block, two barriers, a fence and an
 * atomic, 4 blocks of 3 warps a multiprocessor at 156 registers): 2.1 ms a call at 8,192 rows on the H100 against
 * ~0.25 ms of HBM bytes. Here in two launches, each element through the same device functions in the same order:
 *   1. mhc_site_rows_kernel: grid (row groups, n_chunks), MHC_PROJECT_THREADS threads, as many blocks as the
 *      device holds at once (one wave: blocks of equal work, no last partial wave); block (b, c) takes chunk c of
 *      rows_per_block consecutive rows: the fn rows' pieces loaded once (before the wait on the previous kernel)
 *      for all of them, then per row the post step (mhc_site_kernel's step 1, its expressions),
 *      mhc_project8, and mhc_chunk_partials' warp sums (mhc_warp_sums_halving: the same bits, no barrier, no shared
 *      memory, a quarter of the shuffles) stored per warp: part [rows, n_chunks, MHC_CHUNK_WARPS, n_mix + 1]; the
 *      warps never wait for each other, and the next row's inputs are loaded before this row's sums;
 *   2. mhc_site_tail_kernel: a block per row, the row's tail as mhc_site_kernel's last block does it (each chunk's
 *      warp sums added as mhc_chunk_partials adds them, then the chunks in order), with rmsnorm_rows_kernel's own
 *      256 threads (thread t its columns, warp w its warp sum) and a ninth warp for post and the Sinkhorn; the row's
 *      streams (the pre's input) are loaded before the partials are summed.
 * No tickets: the kernel boundary orders the partials and H_out before the tail, and post / comb (read in 1,
 * written in 2) are in place as in the one-launch form. */
template <bool POST>
__global__ void __launch_bounds__(MHC_PROJECT_THREADS, 6)
mhc_site_rows_kernel(act_out H_out, const float *post, const float *comb, act_in y, act_in H_in, float *part,
                     weight_ref fn, int64_t N, int64_t D, int64_t rows_per_block) {
    constexpr int S = 4, n_mix = (2 + S) * S;
    const int64_t SD = S * D, n0 = (int64_t)blockIdx.x * rows_per_block;
    const int64_t n_end = n0 + rows_per_block < N ? n0 + rows_per_block : N;
    const int n_chunks = (int)gridDim.y;
    const int64_t i = (int64_t)blockIdx.y * MHC_CHUNK + (int64_t)threadIdx.x * 8;   /* this thread's 8 elements */
    const bool mine = i < SD;
    const int64_t k = i / D, d = i % D;   /* the stream and column of the 8 (D % 8 == 0: one stream) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    cuda_pdl_launch_dependents();
    uint4 raw[MHC_GROUP];
    if (mine) mhc_fn_load8(raw, (const __nv_bfloat16 *)fn.data, 0, n_mix, SD, i);
    cuda_pdl_wait();

    /* row n's inputs at this thread's elements: y, the S streams of H_in, post[k], comb[.][k] (!POST: H_in's own) */
    uint4 yb, hb[S];
    float pk, cjk[S];
    auto load = [&](int64_t n) {
        if (!mine) return;
        if (POST) {
            yb = *reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)y.data + n * D + d);
#pragma unroll
            for (int j = 0; j < S; j++)
                hb[j] = *reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)H_in.data + (n * S + j) * D + d);
            pk = post[n * S + k];
#pragma unroll
            for (int j = 0; j < S; j++) cjk[j] = comb[(n * S + j) * S + k];
        } else {
            hb[0] = *reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)H_in.data + n * SD + i);
        }
    };
    load(n0);
    for (int64_t n = n0; n < n_end; n++) {
        float acc[MHC_GROUP + 1];
#pragma unroll
        for (int g = 0; g <= MHC_GROUP; g++) acc[g] = 0.0f;
        if (mine) {
            /* raw as if new each row: otherwise the compiler keeps all 192 fn values converted across the loop (252
             * to 255 registers, 4 blocks a multiprocessor, a spill with the post step); 165-168 here, 6 blocks */
#pragma unroll
            for (int g = 0; g < MHC_GROUP; g++)
                asm volatile("" : "+r"(raw[g].x), "+r"(raw[g].y), "+r"(raw[g].z), "+r"(raw[g].w));
            float hv[8];
            if (POST) {   /* mhc_site_kernel's step 1, term for term */
                float yv[8], hj[S][8], a[8];
                cuda_bf16x8_to_float(yb, yv);
#pragma unroll
                for (int j = 0; j < S; j++) cuda_bf16x8_to_float(hb[j], hj[j]);
                mhc_post8(a, pk, cjk, yv, hj);
                const uint4 out = cuda_float8_to_bf16x8(a);
                *reinterpret_cast<uint4 *>((__nv_bfloat16 *)H_out.data + n * SD + i) = out;
                cuda_bf16x8_to_float(out, hv);
            } else {
                cuda_bf16x8_to_float(hb[0], hv);
            }
            mhc_project8(acc, hv, raw);
        }
        if (n + 1 < n_end) load(n + 1);   /* in flight across this row's sums */
        const float w = mhc_warp_sums_halving(acc);
        if (lane <= n_mix) part[((n * n_chunks + blockIdx.y) * MHC_CHUNK_WARPS + warp) * (n_mix + 1) + lane] = w;
    }
}

/* Step 2 above: grid (rows), MHC_TAIL_THREADS threads. Hs: the pre's input (H_out with the post step, else H_in). */
__global__ void __launch_bounds__(MHC_TAIL_THREADS)
mhc_site_tail_kernel(act_out x, act_out xn, float *post, float *comb, act_in Hs_all, const float *part, int n_chunks,
                     weight_ref base, weight_ref scale, weight_ref norm, int64_t D, float rms_eps, float hc_eps,
                     float norm_eps, int32_t iters) {
    constexpr int S = 4, n_mix = (2 + S) * S;
    constexpr int CH = 2;   /* 8-column chunks per thread: D <= 8 * 256 * CH (cuda_mhc_site checks) */
    static_assert(CUDA_NORM_THREADS == 256, "the named barrier of warps 0-7 below");
    __shared__ float m[n_mix + 1];
    __shared__ float pre[S];
    __shared__ float red[CUDA_NORM_THREADS / 32];
    const int64_t n = blockIdx.x, SD = S * D;
    const int u = threadIdx.x;
    const __nv_bfloat16 *Hs = (const __nv_bfloat16 *)Hs_all.data + n * SD;
    auto column = [&](int c) { return ((int64_t)c * CUDA_NORM_THREADS + u) * 8; };

    cuda_pdl_launch_dependents();
    cuda_pdl_wait();
    uint4 hk[CH][S];   /* rmsnorm thread u's columns of the S streams, in flight while the partials are summed */
    if (u < CUDA_NORM_THREADS)
#pragma unroll
        for (int c = 0; c < CH; c++)
#pragma unroll
            for (int k = 0; k < S; k++)
                hk[c][k] = column(c) < D ? __ldcg(reinterpret_cast<const uint4 *>(Hs + k * D + column(c)))
                                         : make_uint4(0, 0, 0, 0);
    if (u <= n_mix) {   /* the row's sums: each chunk's two warp sums as mhc_chunk_partials adds them, chunks in order */
        const float *p = part + (int64_t)n * n_chunks * MHC_CHUNK_WARPS * (n_mix + 1) + u;
        float v = 0.0f;
#pragma unroll 8
        for (int c = 0; c < n_chunks; c++) {
            float chunk = 0.0f;
#pragma unroll
            for (int w = 0; w < MHC_CHUNK_WARPS; w++)
                chunk += __ldcg(p + (int64_t)(MHC_CHUNK_WARPS * c + w) * (n_mix + 1));
            v += chunk;
        }
        m[u] = v;
    }
    __syncthreads();
    const float r = 1.0f / sqrtf(m[n_mix] / (float)SD + rms_eps);
    if (u >= CUDA_NORM_THREADS) {   /* the ninth warp: post and the Sinkhorn */
        const int lane = u & 31;
        if (lane < S) post[n * S + lane] = 2.0f * cuda_sigmoid(m[S + lane] * r * scale.at(0, 1) + base.at(0, S + lane));
        mhc_sinkhorn_lanes<4>(comb + n * S * S, m, r, scale.at(0, 2), base, 4, hc_eps, iters);
        return;
    }
    /* warps 0-7: x = sum_k pre[k] H[k], then xn = rmsnorm(x) */
    if (u < S) pre[u] = cuda_sigmoid(m[u] * r * scale.at(0, 0) + base.at(0, u)) + hc_eps;
    asm volatile("bar.sync 1, 256;" ::: "memory");   /* warps 0-7 */
    uint4 xb[CH];   /* x as BF16, what the rmsnorm kernel would read back */
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        float xr[8];
        xb[c] = mhc_collapse8(pre, hk[c]);
        if (column(c) >= D) continue;
        *reinterpret_cast<uint4 *>((__nv_bfloat16 *)x.data + n * D + column(c)) = xb[c];
        cuda_bf16x8_to_float(xb[c], xr);
#pragma unroll
        for (int e = 0; e < 8; e++) ss = __fmaf_rn(xr[e], xr[e], ss);
    }
    const float w = cuda_warp_sum(ss);
    if ((u & 31) == 0) red[u >> 5] = w;
    asm volatile("bar.sync 1, 256;" ::: "memory");   /* warps 0-7 */
    float total = 0.0f;
    for (int v = 0; v < CUDA_NORM_THREADS / 32; v++) total += red[v];
    const float inv_rms = 1.0f / sqrtf(total / (float)D + norm_eps);
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int64_t col = column(c);
        if (col >= D) continue;
        float xr[8], o[8];
        cuda_bf16x8_to_float(xb[c], xr);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = xr[e] * inv_rms * norm.at(0, col + e);
        *reinterpret_cast<uint4 *>((__nv_bfloat16 *)xn.data + n * D + col) = cuda_float8_to_bf16x8(o);
    }
}

/* H_out[n][k][d] = post[n][k] y[n][d] + sum_j comb[n][j][k] H_in[n][j][d]  (comb applied transposed). */
__global__ void mhc_post_kernel(act_out H_out, act_in y, act_in H_in, const float *post, const float *comb,
                                int64_t N, int64_t S, int64_t D) {
    cuda_pdl_begin();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * S * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / (S * D), k = (i / D) % S, d = i % D;
        float acc = __fmul_rn(post[n * S + k], y[n * D + d]);
        for (int64_t j = 0; j < S; j++) acc = __fmaf_rn(comb[(n * S + j) * S + k], H_in[(n * S + j) * D + d], acc);
        H_out.store(i, acc);
    }
}

/* y[n][d] = sum_s H[n][s][d] / S. */
__global__ void mhc_mean_kernel(act_out y, act_in H, int64_t N, int64_t S, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * D; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / D, d = i % D;
        float acc = 0.0f;
        for (int64_t s = 0; s < S; s++) acc += H[(n * S + s) * D + d];
        y.store(i, acc / (float)S);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
glm53_status cuda_mhc_expand(glm53_backend *be, glm53_tensor *H, const glm53_tensor *x) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(H) && cuda_is_act(x) && H->ndim == 3);
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(glm53_tensor_rows(x) == N && cuda_cols(x) == D);
    GLM53_TRY(cuda_enter(cb));
    if (N * S * D == 0) return GLM53_OK;
    mhc_expand_kernel<<<cuda_blocks_for(N * S * D, 256), 256, 0, cb->stream>>>(cuda_act_out(H), cuda_act_in(x), N,
                                                                             S, D);
    CUDA_LAUNCHED("mhc_expand");
    return GLM53_OK;
}

glm53_status cuda_mhc_pre(glm53_backend *be, glm53_tensor *x, glm53_tensor *post, glm53_tensor *comb,
                          const glm53_tensor *H, const glm53_tensor *fn, const glm53_tensor *base,
                          const glm53_tensor *scale, float rms_eps, float hc_eps, int32_t sinkhorn_iters) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(H) && H->ndim == 3 && cuda_is_act(x));
    assert(cuda_is_act(post) && post->dtype == GLM53_F32 && cuda_is_act(comb) && comb->dtype == GLM53_F32);
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(S >= 1 && S <= MHC_MAX_S && sinkhorn_iters >= 1);
    assert(glm53_tensor_rows(x) == N && cuda_cols(x) == D);
    assert(glm53_tensor_numel(post) == N * S && glm53_tensor_numel(comb) == N * S * S);
    assert(fn->ndim == 2 && fn->shape[0] == (2 + S) * S && fn->shape[1] == S * D);
    assert(glm53_tensor_numel(base) == (2 + S) * S && glm53_tensor_numel(scale) == 3);
    assert(N <= INT32_MAX && S * D <= (int64_t)MHC_CHUNK * 65535 && D <= (int64_t)MHC_COLS * 65534);   /* the grids */
    weight_ref fr, br, sr;
    GLM53_TRY(cuda_weight_ref(fn, &fr, "mhc_pre"));
    GLM53_TRY(cuda_weight_ref(base, &br, "mhc_pre"));
    GLM53_TRY(cuda_weight_ref(scale, &sr, "mhc_pre"));
    GLM53_TRY(cuda_enter(cb));
    if (N == 0) return GLM53_OK;
    const int64_t SD = S * D, n_mix = (2 + S) * S;
    const int n_chunks = (int)((SD + MHC_CHUNK - 1) / MHC_CHUNK);
    cuda_scratch part;
    GLM53_TRY(part.get(cb, (size_t)(N * n_chunks * (n_mix + 1)) * sizeof(float), "mhc_pre partial sums"));
    const bool vec = H->dtype == GLM53_BF16 && fn->dtype == GLM53_BF16 && SD % 8 == 0 &&
                     (uintptr_t)H->data % 16 == 0 && (uintptr_t)fn->data % 16 == 0;
    dim3 grid((unsigned)((N + MHC_PROJECT_ROWS - 1) / MHC_PROJECT_ROWS), (unsigned)n_chunks);
    if (vec)
        CUDA_TRY(cuda_launch(cb, mhc_project_kernel<true>, grid, MHC_PROJECT_THREADS, 0, cb->pdl, (float *)part.ptr,
                             cuda_act_in(H), fr, N, S, D));
    else
        CUDA_TRY(cuda_launch(cb, mhc_project_kernel<false>, grid, MHC_PROJECT_THREADS, 0, cb->pdl, (float *)part.ptr,
                             cuda_act_in(H), fr, N, S, D));
    CUDA_LAUNCHED("mhc_pre (projections)");
    const dim3 mix_grid((unsigned)N, (unsigned)((D + MHC_COLS - 1) / MHC_COLS + 1));   /* + the Sinkhorn block */
    CUDA_TRY(cuda_launch(cb, mhc_mix_kernel, mix_grid, MHC_THREADS, 0, cb->pdl, cuda_act_out(x), (float *)post->data,
                         (float *)comb->data, cuda_act_in(H), (const float *)part.ptr, n_chunks, br, sr, S, D, rms_eps,
                         hc_eps, sinkhorn_iters));
    CUDA_LAUNCHED("mhc_pre (sinkhorn, collapse)");
    return GLM53_OK;
}

/* mhc_site (backend.h) where it fits (S = 4, BF16 activations and fn, D % 8 == 0 and D <= 4096, 16-byte aligned
 * rows), else GLM53_ERR_UNSUPPORTED before anything runs. Fewer than MHC_SITE_MANY_ROWS rows (decode): one launch
 * of mhc_site_kernel per piece of at most CUDA_MHC_TICKET_ROWS rows (the tickets it counts chunks with,
 * cb->mhc_tickets). From MHC_SITE_MANY_ROWS rows (prefill): mhc_site_rows_kernel then mhc_site_tail_kernel per piece
 * of at most cb->mhc_piece rows (GLM53_CUDA_MHC_PIECE, default 2048: the partials' scratch, and the piece's H_out
 * for the tail to find in L2; at D 4096 a piece of 2048 rows is 64 MB of H_out, more than the H100's 50 MB of L2,
 * so smaller pieces are the A/B to run). */
glm53_status cuda_mhc_site(glm53_backend *be, const glm53_mhc_site *site) {
    cuda_backend *cb = cuda_impl(be);
    const glm53_tensor *H_in = site->H_in, *y = site->y, *fn = site->fn;
    assert(cuda_is_act(H_in) && H_in->ndim == 3 && cuda_is_act(site->x) && cuda_is_act(site->xn));
    const int64_t N = H_in->shape[0], S = H_in->shape[1], D = H_in->shape[2], SD = S * D;
    assert(glm53_tensor_numel(site->post) == N * S && glm53_tensor_numel(site->comb) == N * S * S);
    assert(fn->ndim == 2 && fn->shape[0] == (2 + S) * S && fn->shape[1] == SD);
    assert(glm53_tensor_numel(site->norm) == D && site->sinkhorn_iters >= 1);
    const glm53_tensor *aligned[] = {H_in, site->x, site->xn, fn, y ? y : H_in, y ? site->H_out : H_in};
    bool fits = S == 4 && D % 8 == 0 && D <= 8 * CUDA_NORM_THREADS * 2 && fn->dtype == GLM53_BF16 &&
                H_in->dtype == GLM53_BF16 && site->x->dtype == GLM53_BF16 && site->xn->dtype == GLM53_BF16 &&
                (!y || (y->dtype == GLM53_BF16 && site->H_out->dtype == GLM53_BF16)) &&
                !(site->norm->dtype == GLM53_F8_E4M3 && site->norm->scale);
    for (const glm53_tensor *t : aligned) fits = fits && (uintptr_t)t->data % 16 == 0;
    if (!fits) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda mhc_site: not S = 4 with BF16 rows of D <= 4096");
    if (y) {
        assert(site->H_out->data != H_in->data && glm53_tensor_numel(site->H_out) == N * SD);
        assert(glm53_tensor_rows(y) == N && cuda_cols(y) == D);
    }
    weight_ref fr, br, sr, nr;
    GLM53_TRY(cuda_weight_ref(fn, &fr, "mhc_site"));
    GLM53_TRY(cuda_weight_ref(site->base, &br, "mhc_site"));
    GLM53_TRY(cuda_weight_ref(site->scale, &sr, "mhc_site"));
    GLM53_TRY(cuda_weight_ref(site->norm, &nr, "mhc_site"));
    GLM53_TRY(cuda_enter(cb));
    if (N == 0) return GLM53_OK;
    const int n_mix = (int)((2 + S) * S), n_chunks = (int)((SD + MHC_CHUNK - 1) / MHC_CHUNK);
    const bool many = N >= MHC_SITE_MANY_ROWS;
    const int64_t limit = many ? cb->mhc_piece : (int64_t)CUDA_MHC_TICKET_ROWS, piece = N < limit ? N : limit;
    cuda_scratch part;
    const int64_t part_per_row = (many ? MHC_CHUNK_WARPS : 1) * n_chunks * (n_mix + 1);   /* the rows kernel's: warps' */
    GLM53_TRY(part.get(cb, (size_t)(piece * part_per_row) * sizeof(float), "mhc_site partial sums"));
    for (int64_t n0 = 0; n0 < N; n0 += piece) {   /* every tensor here is BF16 but post and comb */
        const int64_t rows = N - n0 < piece ? N - n0 : piece;
        auto bf16_rows = [](const glm53_tensor *t, int64_t offset) { return (char *)t->data + 2 * offset; };
        const act_out Ho{y ? bf16_rows(site->H_out, n0 * SD) : nullptr, true};
        const act_out xs{bf16_rows(site->x, n0 * D), true}, xns{bf16_rows(site->xn, n0 * D), true};
        const act_in ys{y ? bf16_rows(y, n0 * D) : nullptr, true}, Hi{bf16_rows(H_in, n0 * SD), true};
        float *post = (float *)site->post->data + n0 * S, *comb = (float *)site->comb->data + n0 * S * S;
        if (many) {
            auto rows_kernel = y ? mhc_site_rows_kernel<true> : mhc_site_rows_kernel<false>;
            int per_sm = 0;   /* one wave: row groups per chunk as the device holds at once, rows shared evenly */
            GLM53_TRY(cuda_blocks_per_sm(cb, (const void *)rows_kernel, MHC_PROJECT_THREADS, 0, &per_sm));
            const int64_t fit = (int64_t)per_sm * cb->sm_count / n_chunks, most = fit > 0 ? fit : 1;
            const int64_t per_block = (rows + most - 1) / most, groups = (rows + per_block - 1) / per_block;
            CUDA_TRY(cuda_launch(cb, rows_kernel, dim3((unsigned)groups, (unsigned)n_chunks), MHC_PROJECT_THREADS, 0,
                                 cb->pdl, Ho, (const float *)post, (const float *)comb, ys, Hi, (float *)part.ptr, fr,
                                 rows, D, per_block));
            CUDA_LAUNCHED("mhc_site (rows)");
            const act_in Hs{y ? Ho.data : Hi.data, true};   /* the pre's input */
            CUDA_TRY(cuda_launch(cb, mhc_site_tail_kernel, dim3((unsigned)rows), MHC_TAIL_THREADS, 0, cb->pdl, xs, xns,
                                 post, comb, Hs, (const float *)part.ptr, n_chunks, br, sr, nr, D, site->rms_eps,
                                 site->hc_eps, site->norm_eps, site->sinkhorn_iters));
            CUDA_LAUNCHED("mhc_site");
            continue;
        }
        const dim3 grid((unsigned)rows, (unsigned)n_chunks);
        auto kernel = y ? mhc_site_kernel<true> : mhc_site_kernel<false>;
        CUDA_TRY(cuda_launch(cb, kernel, grid, MHC_SITE_THREADS, 0, cb->pdl, Ho, xs, xns, post, comb, ys, Hi,
                             (float *)part.ptr, cb->mhc_tickets, fr, br, sr, nr, D, site->rms_eps, site->hc_eps,
                             site->norm_eps, site->sinkhorn_iters));
        CUDA_LAUNCHED("mhc_site");
    }
    return GLM53_OK;
}

glm53_status cuda_mhc_post(glm53_backend *be, glm53_tensor *H_out, const glm53_tensor *y,
                           const glm53_tensor *H_in, const glm53_tensor *post, const glm53_tensor *comb) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(H_out) && cuda_is_act(y) && cuda_is_act(H_in) && H_in->ndim == 3);
    assert(H_out->data != H_in->data);
    assert(cuda_is_act(post) && post->dtype == GLM53_F32 && cuda_is_act(comb) && comb->dtype == GLM53_F32);
    int64_t N = H_in->shape[0], S = H_in->shape[1], D = H_in->shape[2];
    assert(glm53_tensor_numel(H_out) == N * S * D && glm53_tensor_rows(y) == N && cuda_cols(y) == D);
    assert(glm53_tensor_numel(post) == N * S && glm53_tensor_numel(comb) == N * S * S);
    GLM53_TRY(cuda_enter(cb));
    if (N * S * D == 0) return GLM53_OK;
    CUDA_TRY(cuda_launch(cb, mhc_post_kernel, cuda_blocks_for(N * S * D, 256), 256, 0, cb->pdl, cuda_act_out(H_out),
                         cuda_act_in(y), cuda_act_in(H_in), (const float *)post->data, (const float *)comb->data, N, S,
                         D));
    CUDA_LAUNCHED("mhc_post");
    return GLM53_OK;
}

glm53_status cuda_mhc_mean(glm53_backend *be, glm53_tensor *y, const glm53_tensor *H) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y) && cuda_is_act(H) && H->ndim == 3);
    int64_t N = H->shape[0], S = H->shape[1], D = H->shape[2];
    assert(glm53_tensor_rows(y) == N && cuda_cols(y) == D);
    GLM53_TRY(cuda_enter(cb));
    if (N * D == 0) return GLM53_OK;
    mhc_mean_kernel<<<cuda_blocks_for(N * D, 256), 256, 0, cb->stream>>>(cuda_act_out(y), cuda_act_in(H), N, S, D);
    CUDA_LAUNCHED("mhc_mean");
    return GLM53_OK;
}
