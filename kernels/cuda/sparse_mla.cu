/*
 * sparse_mla.cu - sparse MLA in absorbed form (glm53-architecture.md section 4.6) on the CUDA backend.
 *
 * The math (backend.h): for row t and head h, qh = Wk^T q[t,h]; s_j = scale * qh . latent[idx_j] over the valid
 * selected positions; p = softmax(s); o[t,h] = Wv (sum_j p_j latent[idx_j]). At the real dims (H 64, dk = dv =
 * 256, R 512, W 2051) one decode row reads 32 MB of kv_b and 2 MB of latent rows and does 2 x 134 MFLOP in the
 * two W-long products: the weight reads are the floor (~8 us) and the products need the whole GPU, so the op
 * is four kernels, each with enough blocks to fill 132 SMs at T = 1. The one-block-per-(t,h) kernel this
 * replaces spent 1373 us, most of it one thread per latent column walking 2051 positions serially.
 *
 *   qh      qh[t,h,r] = sum_i q[t,h,i] kv_b[h*(dk+dv)+i][r]                       grid (R/128, H, T/4)
 *           A block owns 128 columns of one head's key rows: a thread reads 8 contiguous columns of every 16th
 *           key row (one 16-byte load for BF16), for up to 4 query rows at once, so each weight byte is read
 *           once per 4 rows. The 16 row groups are summed in order through shared memory (32 KiB).
 *   scores  S[t,h,j] = scale * qh[t,h] . latent[idx[t,j]]                          grid (W/32, H/32, T)
 *           A 32 head x 32 position tile, the R axis in chunks of 64 staged in shared memory as F32 (the next
 *           chunk is loaded into registers while this one is used). Each of the 8 warps takes 8 of a chunk's
 *           64 columns for the whole tile (a lane: 4 heads x 8 positions, float4 reads that broadcast), so
 *           the inner loop is FMA-bound; the 8 warp partials are summed in order at the end (36 KiB).
 *           Positions >= cap are recorded as faults here, by the first head tile only.
 *   pv      for split s of 128 positions: m_s[t,h] = max_j s_j, l_s = sum_j e_j with e_j = exp(s_j - m_s),
 *           cpart_s[t,h,r] = sum_j e_j latent[idx_j][r]                           grid (R/64, W/128, T*H/64)
 *           The split softmax of flash decoding: no pass over all W positions before the products. A block
 *           owns 64 heads x 64 columns; chunks of 32 positions stage e (transposed, [j][h]) and the latent
 *           slice in shared memory (17 KiB); a thread keeps 4 heads x 4 columns, positions in order.
 *   out     c[t,h] = sum_s exp(m_s - M) cpart_s / sum_s exp(m_s - M) l_s, M = max_s m_s;
 *           o[t,h,e] = Wv[e] . c                                                  grid (dv/64, H, T/4)
 *           A block first combines c for its head and up to 4 rows into shared memory (4 R + 4 W/128 floats),
 *           then each warp takes 8 value rows, 4 at a time, lanes over R in 16-byte loads (each weight byte
 *           read once per 4 rows), a warp sum per output.
 *           A row whose splits are all empty (no valid position) writes zeros.
 *
 * Past MLA_GEMM_MIN_ROWS rows (prefill) qh and the value product are cuBLAS batched GEMMs over the heads instead
 * (the GEMM form): each weight is read once per chunk of rows rather than once per 4, on tensor cores for BF16
 * activations (kv_b dequantised to BF16 once a call when it is FP8: matmul's "dequantise then BF16 GEMM"; c
 * rounded to BF16 as the GEMM's input), in F32 for F32 activations. Between them, with BF16 activations, 64-head
 * groups and R = 512 (the model's), sparse_mla_flash_kernel computes c from qh in one kernel on tensor cores (its
 * section below; sparse_mla_flash16_kernel with GLM53_CUDA_MLA_FLASH16); otherwise scores and pv as above and
 * sparse_mla_combine_kernel (the out kernel's first half).
 *
 * Up to MLA_GEMM_MIN_ROWS rows every reduction has a fixed order that depends on H, dk, dv, R and W only, never on
 * T or on the other rows, so a row's result is deterministic and the same in any batch of up to that many rows.
 * Invalid positions (idx < 0, or >= cap after the fault) are read as zero latent rows and weighted 0, which adds
 * exact zeros.
 *
 * Scratch (cuda_scratch, one piece): per row 4 * (H*R + H*W + S*H*R + 2*S*H) bytes with S = ceil(W / 128)
 * splits, 2.9 MB at the real dims (the flash form: qh, 2 * H*R bytes). Rows are processed in chunks whose scratch
 * fits MLA_SCRATCH_BUDGET, so a long prefill does not reserve gigabytes; a row's result does not depend on the
 * chunking.
 */
#include "kernels/cuda/gemv_mma.cuh"   /* gemv_mma_16816 */

enum {
    MLA_THREADS = 256,
    MLA_ROWS = 4,        /* query rows a qh / out block serves per weight read */
    QH_COLS = 128,       /* qh: columns of R per block (16 threads x 8) */
    QH_GROUPS = 16,      /* qh: key-row groups per block */
    QH_AHEAD = 16,       /* qh: key rows per thread requested before the wait (dk <= QH_GROUPS * QH_AHEAD) */
    SC_HEADS = 32,       /* scores: heads per tile */
    SC_POS = 32,         /* scores: positions per tile */
    SC_K = 64,           /* scores: columns of R per staged chunk */
    SC_STRIDE = SC_K + 4,   /* shared row stride: 8 consecutive rows hit 8 distinct 16-byte bank groups */
    SC_RED_STRIDE = 36,  /* reduction row stride: a warp's 32 writes hit 32 banks */
    PV_HEADS = 64,       /* pv: heads per block */
    PV_COLS = 64,        /* pv: columns of R per block */
    PV_SPLIT = 128,      /* pv: positions per split (the softmax split) */
    PV_CHUNK = 32,       /* pv: positions per staged chunk */
    PV_PT_STRIDE = PV_HEADS + 4,
    OUT_ROWS = 64,       /* out: value rows per block, 8 per warp */
};
static const size_t MLA_SCRATCH_BUDGET = (size_t)64 << 20;   /* bytes of scratch per chunk of rows */

/* ------------------------------------------------------------------------------------------------------------
 * Loads of 8 contiguous elements as floats. `vec` (decided on the host: the row length a multiple of 8 and the
 * base 16-byte aligned) takes 16-byte loads; otherwise single elements, zeros past the end of the row. Both
 * give the same values, so the choice never changes a result.
 */
/* v = w[row, c0 .. c0+8), c0 < cols. */
__device__ inline void weight_load8(const weight_ref &w, int64_t row, int64_t c0, int64_t cols, bool vec,
                                    float (&v)[8]) {
    const int64_t i = row * cols + c0;
    if (vec && w.dtype == GLM53_BF16) {
        cuda_bf16x8_to_float(*reinterpret_cast<const uint4 *>((const __nv_bfloat16 *)w.data + i), v);
    } else if (vec && w.dtype == GLM53_F32) {
        float4 a = *reinterpret_cast<const float4 *>((const float *)w.data + i);
        float4 b = *reinterpret_cast<const float4 *>((const float *)w.data + i + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else if (vec && w.dtype == GLM53_F16) {
        uint4 u = *reinterpret_cast<const uint4 *>((const __half *)w.data + i);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 8; k++) {
            __half_raw hr;
            hr.x = (unsigned short)(words[k / 2] >> (16 * (k % 2)));
            v[k] = __half2float(__half(hr));
        }
    } else if (vec) {   /* F8_E4M3: 8 codes in one 8-byte load, the block scale as weight_ref::at applies it */
        uint2 u = *reinterpret_cast<const uint2 *>((const uint8_t *)w.data + i);
        const uint32_t words[2] = {u.x, u.y};
        const float *srow = w.scale ? w.scale + (row / w.block_rows) * w.scale_stride : nullptr;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            v[k] = cuda_fp8_e4m3_to_float((uint8_t)(words[k / 4] >> (8 * (k % 4))));
            if (srow) v[k] *= srow[(c0 + k) / w.block_cols];
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = c0 + k < cols ? w.at(row, c0 + k) : 0.0f;
    }
}

/* v = a[row_off + c0 .. + 8) of an activation row of `cols` elements, c0 < cols: zeros past the row's end. */
__device__ inline void act_load8(act_in a, int64_t row_off, int64_t c0, int64_t cols, bool vec, float (&v)[8]) {
    if (vec) {
        cuda_act_load8(a, row_off + c0, true, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = c0 + k < cols ? a[row_off + c0 + k] : 0.0f;
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Kernels. Rows t0 .. t0+nc of the call form the chunk; scratch rows are chunk-local (tl = t - t0).
 */
/* qh[nc,H,R] F32 = Wk^T q. q[T,H,dk]; kv_b[H*(dk+dv), R]. Block (column tile, h, 4-row pass). */
__global__ void __launch_bounds__(MLA_THREADS)
sparse_mla_qh_kernel(float *qh, act_in q, weight_ref kv_b, bool w_vec, int64_t t0, int64_t nc, int64_t H,
                     int64_t dk, int64_t dv, int64_t R) {
    __shared__ __align__(16) float red[QH_GROUPS][MLA_ROWS][QH_COLS];
    const int64_t h = blockIdx.y, tl0 = (int64_t)blockIdx.z * MLA_ROWS;
    const int nt = (int)(nc - tl0 < MLA_ROWS ? nc - tl0 : MLA_ROWS);
    const int ct = threadIdx.x % (QH_COLS / 8), g = threadIdx.x / (QH_COLS / 8);
    const int64_t c0 = (int64_t)blockIdx.x * QH_COLS + ct * 8;

    /* BF16 rows in 16-byte loads and at most QH_AHEAD of them per thread (dk <= 256): the thread's whole share of
     * the weight is requested before the wait on the previous kernel (weights are never written), so the read
     * overlaps that kernel's tail; the products are the other path's, in the same order. */
    const bool ahead = w_vec && kv_b.dtype == GLM53_BF16 && dk <= (int64_t)QH_GROUPS * QH_AHEAD && c0 < R;
    uint4 wraw[QH_AHEAD];
    cuda_pdl_launch_dependents();
    if (ahead) {
        const __nv_bfloat16 *wb = (const __nv_bfloat16 *)kv_b.data;
#pragma unroll
        for (int a = 0; a < QH_AHEAD; a++) {
            const int64_t i = g + (int64_t)a * QH_GROUPS;
            wraw[a] = i < dk ? *reinterpret_cast<const uint4 *>(wb + (h * (dk + dv) + i) * R + c0)
                             : make_uint4(0, 0, 0, 0);
        }
    }
    cuda_pdl_wait();

    float acc[MLA_ROWS][8] = {};
    auto add_key_row = [&](int64_t i, const float (&w)[8]) {   /* acc[m] += q[m][i] * key row i, columns c0 .. +8 */
#pragma unroll
        for (int m = 0; m < MLA_ROWS; m++) {
            if (m < nt) {
                float x = q[((t0 + tl0 + m) * H + h) * dk + i];
#pragma unroll
                for (int k = 0; k < 8; k++) acc[m][k] += x * w[k];
            }
        }
    };
    if (ahead) {
#pragma unroll
        for (int a = 0; a < QH_AHEAD; a++) {
            const int64_t i = g + (int64_t)a * QH_GROUPS;
            if (i >= dk) break;
            float w[8];
            cuda_bf16x8_to_float(wraw[a], w);
            add_key_row(i, w);
        }
    } else if (c0 < R) {
#pragma unroll 8
        for (int64_t i = g; i < dk; i += QH_GROUPS) {
            float w[8];
            weight_load8(kv_b, h * (dk + dv) + i, c0, R, w_vec, w);
            add_key_row(i, w);
        }
    }
#pragma unroll
    for (int m = 0; m < MLA_ROWS; m++) {
        *reinterpret_cast<float4 *>(&red[g][m][ct * 8]) = make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
        *reinterpret_cast<float4 *>(&red[g][m][ct * 8 + 4]) = make_float4(acc[m][4], acc[m][5], acc[m][6], acc[m][7]);
    }
    __syncthreads();
    for (int o = threadIdx.x; o < MLA_ROWS * QH_COLS; o += blockDim.x) {
        const int m = o / QH_COLS, col = o % QH_COLS;
        const int64_t r = (int64_t)blockIdx.x * QH_COLS + col;
        if (m >= nt || r >= R) continue;
        float sum = 0.0f;
        for (int gg = 0; gg < QH_GROUPS; gg++) sum += red[gg][m][col];
        qh[((tl0 + m) * H + h) * R + r] = sum;
    }
}

/* S[nc,H,W] F32 = scale * qh . latent[idx]. qh[nc,H,R] F32; latent[cap,R]; idx[T,W].
 * Block (position tile, head tile, tl). */
__global__ void __launch_bounds__(MLA_THREADS, 2)
sparse_mla_scores_kernel(float *S, const float *qh, act_in latent, bool l_vec, const int32_t *idx, int64_t t0,
                         int64_t H, int64_t R, int64_t W, int64_t cap, float scale, cuda_fault *fault) {
    cuda_pdl_begin();
    constexpr int TILE = 2 * SC_HEADS * SC_STRIDE, RED = 8 * SC_HEADS * SC_RED_STRIDE;
    __shared__ __align__(16) float smem[TILE > RED ? TILE : RED];
    float *qs = smem, *ls = smem + SC_HEADS * SC_STRIDE;   /* [32][SC_STRIDE] each: heads, positions */
    const int64_t j0 = (int64_t)blockIdx.x * SC_POS, h0 = (int64_t)blockIdx.y * SC_HEADS, tl = blockIdx.z;
    const int64_t t = t0 + tl;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool q_vec = R % 4 == 0;

    /* staging: qh float4 f = tid + 256u (row f/16, columns 4*(f%16) .. +4); latent row tid/8, columns
     * 8*(tid%8) .. +8 */
    const int lrow = tid >> 3, lc = 8 * (tid & 7);
    int32_t pos;   /* the latent row this thread stages, -1: none */
    {
        const int64_t j = j0 + lrow;
        int32_t id = j < W ? idx[t * W + j] : -1;
        if (id >= cap) {
            if (blockIdx.y == 0 && lc == 0) cuda_record_fault(fault, CUDA_FAULT_SPARSE_MLA, t * W + j, id, cap);
            id = -1;
        }
        pos = id < 0 ? -1 : id;
    }
    float4 qr[2];
    float lr[8];
    auto fetch = [&](int64_t kc) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int f = tid + 256 * u;
            const int64_t h = h0 + (f >> 4), k = kc + 4 * (f & 15);
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (h < H && k < R) {
                const float *src = qh + (tl * H + h) * R + k;
                if (q_vec) v = *reinterpret_cast<const float4 *>(src);
                else {
                    v.x = src[0];
                    if (k + 1 < R) v.y = src[1];
                    if (k + 2 < R) v.z = src[2];
                    if (k + 3 < R) v.w = src[3];
                }
            }
            qr[u] = v;
        }
        if (pos >= 0 && kc + lc < R) act_load8(latent, (int64_t)pos * R, kc + lc, R, l_vec, lr);
        else
#pragma unroll
            for (int e = 0; e < 8; e++) lr[e] = 0.0f;
    };
    auto store = [&]() {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int f = tid + 256 * u;
            *reinterpret_cast<float4 *>(&qs[(f >> 4) * SC_STRIDE + 4 * (f & 15)]) = qr[u];
        }
        float *dst = &ls[lrow * SC_STRIDE + lc];
        *reinterpret_cast<float4 *>(dst) = make_float4(lr[0], lr[1], lr[2], lr[3]);
        *reinterpret_cast<float4 *>(dst + 4) = make_float4(lr[4], lr[5], lr[6], lr[7]);
    };

    /* lane: heads hg + 8a (a < 4), positions jg + 4b (b < 8); warp: columns 8*warp .. +8 of each chunk */
    const int hg = lane & 7, jg = lane >> 3;
    float acc[4][8] = {};
    fetch(0);
    store();
    __syncthreads();
    for (int64_t kc = 0; kc < R; kc += SC_K) {
        const bool more = kc + SC_K < R;
        if (more) fetch(kc + SC_K);
#pragma unroll
        for (int s = 0; s < SC_K / 32; s++) {
            const int kk = warp * (SC_K / 8) + s * 4;
            float4 qv[4];
#pragma unroll
            for (int a = 0; a < 4; a++) qv[a] = *reinterpret_cast<const float4 *>(&qs[(hg + 8 * a) * SC_STRIDE + kk]);
#pragma unroll
            for (int b = 0; b < 8; b++) {
                const float4 lv = *reinterpret_cast<const float4 *>(&ls[(jg + 4 * b) * SC_STRIDE + kk]);
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    float v = acc[a][b];
                    v = fmaf(qv[a].x, lv.x, v);
                    v = fmaf(qv[a].y, lv.y, v);
                    v = fmaf(qv[a].z, lv.z, v);
                    acc[a][b] = fmaf(qv[a].w, lv.w, v);
                }
            }
        }
        __syncthreads();
        if (more) {
            store();
            __syncthreads();
        }
    }

    /* the 8 warps' partial sums (disjoint column ranges), added in warp order */
    float *red = smem;   /* [8][32 heads][SC_RED_STRIDE] */
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) red[(warp * SC_HEADS + hg + 8 * a) * SC_RED_STRIDE + jg + 4 * b] = acc[a][b];
    __syncthreads();
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const int o = tid + 256 * u, hl = o >> 5, jl = o & 31;
        const int64_t h = h0 + hl, j = j0 + jl;
        if (h >= H || j >= W) continue;
        float sum = 0.0f;
        for (int w = 0; w < 8; w++) sum += red[(w * SC_HEADS + hl) * SC_RED_STRIDE + jl];
        S[(tl * H + h) * W + j] = sum * scale;
    }
}

/* Split s of positions [128 s, 128 s + 128): mpart, lpart [nS,nc,H] F32 (written by column tile 0),
 * cpart[nS,nc,H,R] F32. S[nc,H,W] F32; latent[cap,R]; idx[T,W]. Block (column tile, s, tl * nHT + head tile). */
__global__ void __launch_bounds__(MLA_THREADS)
sparse_mla_pv_kernel(float *cpart, float *mpart, float *lpart, const float *S, act_in latent, bool l_vec,
                     const int32_t *idx, int64_t t0, int64_t nc, int64_t H, int64_t R, int64_t W, int64_t cap) {
    cuda_pdl_begin();
    __shared__ int64_t pos_s[PV_SPLIT];
    __shared__ float m_s[PV_HEADS];
    __shared__ __align__(16) float pT[PV_CHUNK][PV_PT_STRIDE];   /* e[j][h] */
    __shared__ __align__(16) float lt[PV_CHUNK][PV_COLS];        /* latent[pos_j][r0 + c] */
    const int64_t n_ht = (H + PV_HEADS - 1) / PV_HEADS;
    const int64_t r0 = (int64_t)blockIdx.x * PV_COLS, s = blockIdx.y, j0 = s * PV_SPLIT;
    const int64_t tl = blockIdx.z / n_ht, h0 = (blockIdx.z % n_ht) * PV_HEADS, t = t0 + tl;
    const int64_t jn = W - j0 < PV_SPLIT ? W - j0 : PV_SPLIT;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    for (int i = tid; i < PV_SPLIT; i += blockDim.x) {
        int64_t id = i < jn ? idx[t * W + j0 + i] : -1;
        pos_s[i] = id >= 0 && id < cap ? id : -1;
    }
    __syncthreads();

    /* staging: scores f = tid + 256u (head f/32, position f%32: coalesced along j); latent row tid/8, columns
     * 8*(tid%8) .. +8. The raw scores are fetched ahead; the exp is taken when they are stored. */
    float sr[8], lr[8];
    auto fetch = [&](int jc) {
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int f = tid + 256 * u, hl = f >> 5, j = jc + (f & 31);
            sr[u] = h0 + hl < H && j < jn && pos_s[j] >= 0 ? S[(tl * H + h0 + hl) * W + j0 + j] : 0.0f;
        }
        const int j = jc + (tid >> 3);
        const int64_t c0 = r0 + 8 * (tid & 7);
        if (j < jn && pos_s[j] >= 0 && c0 < R) act_load8(latent, pos_s[j] * R, c0, R, l_vec, lr);
        else
#pragma unroll
            for (int e = 0; e < 8; e++) lr[e] = 0.0f;
    };
    fetch(0);   /* the first chunk's latent rows are on their way while the split's statistics are taken */

    /* split max and sum of exps: 4 threads per head, positions sub, sub + 4, ...; the thread's 32 scores are
     * loaded at once (a load per position in a loop waited for each in turn), then max and sum in that order */
    {
        const int hl = tid >> 2, sub = tid & 3;
        const int64_t h = h0 + hl;
        const float *srow = S + (tl * H + h) * W + j0;
        float sv[PV_SPLIT / 4];
        bool valid[PV_SPLIT / 4];
#pragma unroll
        for (int q = 0; q < PV_SPLIT / 4; q++) {
            const int j = sub + 4 * q;
            valid[q] = h < H && j < jn && pos_s[j] >= 0;
            sv[q] = valid[q] ? srow[j] : 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
#pragma unroll
        for (int q = 0; q < PV_SPLIT / 4; q++)
            if (valid[q]) m = fmaxf(m, sv[q]);
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        if (h < H && m != -INFINITY)
#pragma unroll
            for (int q = 0; q < PV_SPLIT / 4; q++)
                if (valid[q]) l += expf(sv[q] - m);
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        if (sub == 0) {
            m_s[hl] = m;
            if (blockIdx.x == 0 && h < H) {
                mpart[(s * nc + tl) * H + h] = m;
                lpart[(s * nc + tl) * H + h] = l;
            }
        }
    }
    __syncthreads();

    auto store = [&](int jc) {
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int f = tid + 256 * u, hl = f >> 5, jl = f & 31, j = jc + jl;
            pT[jl][hl] = h0 + hl < H && j < jn && pos_s[j] >= 0 ? expf(sr[u] - m_s[hl]) : 0.0f;
        }
        float *dst = &lt[tid >> 3][8 * (tid & 7)];
        *reinterpret_cast<float4 *>(dst) = make_float4(lr[0], lr[1], lr[2], lr[3]);
        *reinterpret_cast<float4 *>(dst + 4) = make_float4(lr[4], lr[5], lr[6], lr[7]);
    };

    /* thread: heads 4*hg .. +4, columns 4*rg .. +4; a warp reads 4 head groups x 8 column groups per j */
    const int rg = (lane & 7) + 8 * (warp & 1), hg = (lane >> 3) + 4 * (warp >> 1);
    float acc[4][4] = {};
    store(0);
    __syncthreads();
    for (int jc = 0; jc < jn; jc += PV_CHUNK) {
        const bool more = jc + PV_CHUNK < jn;
        if (more) fetch(jc + PV_CHUNK);
#pragma unroll 8
        for (int jl = 0; jl < PV_CHUNK; jl++) {
            const float4 pv = *reinterpret_cast<const float4 *>(&pT[jl][4 * hg]);
            const float4 lv = *reinterpret_cast<const float4 *>(&lt[jl][4 * rg]);
            const float p[4] = {pv.x, pv.y, pv.z, pv.w}, x[4] = {lv.x, lv.y, lv.z, lv.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][b] = fmaf(p[a], x[b], acc[a][b]);
        }
        __syncthreads();
        if (more) {
            store(jc + PV_CHUNK);
            __syncthreads();
        }
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int64_t h = h0 + 4 * hg + a;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int64_t r = r0 + 4 * rg + b;
            if (h < H && r < R) cpart[((s * nc + tl) * H + h) * R + r] = acc[a][b];
        }
    }
}

/* Combining the pv kernel's splits for row tl (of the chunk) and head h, in three pieces that the out kernel (for
 * up to 4 rows, before Wv) and the combine kernel (one row, the GEMM form's c) share, so both give the same bits:
 *   mla_split_weights  wts[s] = exp(m_s - M), M = max_s m_s (0 where m_s = -inf); true when the row has no valid
 *                      position (M = -inf, or `real` false: a row past the chunk). Every thread computes M; the
 *                      weights are spread over the block's threads, so a barrier comes before they are read.
 *   mla_split_sum      L = sum_s wts[s] l_s, in split order;
 *   mla_combined       column r of c: sum_s wts[s] cpart_s[r] in split order, over L. */
__device__ inline bool mla_split_weights(float *wts, const float *mpart, int64_t tl, int64_t h, int64_t nc,
                                         int64_t H, int64_t nS, bool real) {
    float M = -INFINITY;
    if (real)
        for (int64_t s = 0; s < nS; s++) M = fmaxf(M, mpart[(s * nc + tl) * H + h]);
    const bool empty = M == -INFINITY;
    for (int64_t s = threadIdx.x; s < nS; s += blockDim.x) {
        const float ms = empty ? -INFINITY : mpart[(s * nc + tl) * H + h];
        wts[s] = ms == -INFINITY ? 0.0f : expf(ms - M);
    }
    return empty;
}
__device__ inline float mla_split_sum(const float *wts, const float *lpart, int64_t tl, int64_t h, int64_t nc,
                                      int64_t H, int64_t nS) {
    float L = 0.0f;
    for (int64_t s = 0; s < nS; s++) L += wts[s] * lpart[(s * nc + tl) * H + h];
    return L;
}
__device__ inline float mla_combined(const float *wts, const float *cpart, float L, int64_t tl, int64_t h,
                                     int64_t r, int64_t nc, int64_t H, int64_t R, int64_t nS) {
    float a = 0.0f;
    for (int64_t s = 0; s < nS; s++) a += wts[s] * cpart[((s * nc + tl) * H + h) * R + r];
    return a / L;
}

/* o[T,H,dv] = Wv c, c combined from the nS splits. kv_b[H*(dk+dv), R]. Block (value-row tile, h, 4-row pass).
 * Dynamic shared memory: c[4][Rp] (Rp = R rounded up to 8, zero padded), split weights [4][nS]. */
__global__ void __launch_bounds__(MLA_THREADS, 2)
sparse_mla_out_kernel(act_out o, const float *cpart, const float *mpart, const float *lpart, weight_ref kv_b,
                      bool w_vec, int64_t t0, int64_t nc, int64_t H, int64_t dk, int64_t dv, int64_t R,
                      int64_t nS) {
    cuda_pdl_begin();
    extern __shared__ __align__(16) float out_smem[];
    const int64_t Rp = (R + 7) / 8 * 8;
    float *c_s = out_smem, *wts = out_smem + MLA_ROWS * Rp;
    const int64_t h = blockIdx.y, tl0 = (int64_t)blockIdx.z * MLA_ROWS;
    const int nt = (int)(nc - tl0 < MLA_ROWS ? nc - tl0 : MLA_ROWS);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* c of the block's rows (zeros for a row with no valid position, and in the pad past R) */
    bool empty[MLA_ROWS];
#pragma unroll
    for (int m = 0; m < MLA_ROWS; m++) empty[m] = mla_split_weights(wts + m * nS, mpart, tl0 + m, h, nc, H, nS, m < nt);
    __syncthreads();
#pragma unroll
    for (int m = 0; m < MLA_ROWS; m++) {
        float L = 0.0f;
        if (!empty[m]) L = mla_split_sum(wts + m * nS, lpart, tl0 + m, h, nc, H, nS);
        for (int64_t r = tid; r < Rp; r += blockDim.x) {
            float a = 0.0f;
            if (!empty[m] && r < R) a = mla_combined(wts + m * nS, cpart, L, tl0 + m, h, r, nc, H, R, nS);
            c_s[m * Rp + r] = a;
        }
    }
    __syncthreads();

    /* warp: value rows e0 .. e0+8, 4 at a time; lane: columns 8*lane + 256k */
    const int64_t v_row0 = h * (dk + dv) + dk;
    for (int64_t e0 = (int64_t)blockIdx.x * OUT_ROWS + warp * 8; e0 < (int64_t)blockIdx.x * OUT_ROWS + warp * 8 + 8;
         e0 += 4) {
        float acc[4][MLA_ROWS] = {};
#pragma unroll 2
        for (int64_t c0 = 8 * lane; c0 < R; c0 += 256) {
            float w[4][8];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (e0 + e < dv) weight_load8(kv_b, v_row0 + e0 + e, c0, R, w_vec, w[e]);
                else
#pragma unroll
                    for (int k = 0; k < 8; k++) w[e][k] = 0.0f;
            }
#pragma unroll
            for (int m = 0; m < MLA_ROWS; m++) {
                if (m >= nt) continue;
                const float4 ca = *reinterpret_cast<const float4 *>(&c_s[m * Rp + c0]);
                const float4 cb = *reinterpret_cast<const float4 *>(&c_s[m * Rp + c0 + 4]);
                const float c[8] = {ca.x, ca.y, ca.z, ca.w, cb.x, cb.y, cb.z, cb.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float part = 0.0f;
#pragma unroll
                    for (int k = 0; k < 8; k++) part += w[e][k] * c[k];
                    acc[e][m] += part;
                }
            }
        }
#pragma unroll
        for (int m = 0; m < MLA_ROWS; m++) {
            if (m >= nt) continue;   /* uniform over the block */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float v = cuda_warp_sum(acc[e][m]);
                if (lane == 0 && e0 + e < dv) o.store(((t0 + tl0 + m) * H + h) * dv + e0 + e, empty[m] ? 0.0f : v);
            }
        }
    }
}

/* c[t,h] = sum_s exp(m_s - M) cpart_s / sum_s exp(m_s - M) l_s (zeros for a row with no valid position): the out
 * kernel's first half on its own (the same helpers), for the GEMM form (see cuda_sparse_mla). Block (t, h) of the
 * chunk, 128 threads over R. c [nc, H, R] in the activation dtype (the GEMM's input). */
__global__ void sparse_mla_combine_kernel(act_out c, const float *cpart, const float *mpart, const float *lpart,
                                          int64_t nc, int64_t H, int64_t R, int64_t nS) {
    cuda_pdl_begin();
    extern __shared__ float combine_wts[];   /* [nS] */
    const int64_t row = blockIdx.x, tl = row / H, h = row % H;   /* row = tl * H + h of the chunk */
    const bool empty = mla_split_weights(combine_wts, mpart, tl, h, nc, H, nS, true);
    __syncthreads();
    const float L = empty ? 0.0f : mla_split_sum(combine_wts, lpart, tl, h, nc, H, nS);
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
        c.store(row * R + r, empty ? 0.0f : mla_combined(combine_wts, cpart, L, tl, h, r, nc, H, R, nS));
}

/* ------------------------------------------------------------------------------------------------------------
 * The flash form (prefill with BF16 activations, H a multiple of 64, R = 512): scores, the softmax and the
 * weighted sum of the selected latent rows for one query row and 64 heads in one block, on tensor cores, the
 * softmax online over tiles of 32 positions (flash attention's), c straight out: no S and no split partials in
 * memory, so a chunk of rows needs 2 x H x R BF16 of scratch (qh and c) instead of 2.9 MB.
 *
 *   block (row t of the chunk, 64 heads), 256 threads = 8 warps: warp w takes heads 16 (w % 4) .. +16 (an MMA's
 *   rows) and latent columns 256 (w / 4) .. +256 (its half). Shared memory: qh [64][512] BF16, two tiles of 32
 *   gathered latent rows [32][512] BF16 (cp.async, zeros for invalid positions; the next tile is in flight while
 *   this one is computed), the halves' partial scores [8][16][32] F32. Per tile:
 *     scores  each warp: its 16 heads x 32 positions over its half of R (mma.sync m16n8k16, BF16 in, F32 sums;
 *             ldmatrix from XOR-swizzled rows), then the two halves' partials added through shared memory (both
 *             warps of a head group hold the same sums: a + b and b + a round alike), times scale; an invalid
 *             position's score is -inf.
 *     softmax the running max m and sum l per head (flash attention's rescaling of l and the accumulators); the
 *             probabilities exp(s - m) rounded to BF16 as the next MMA's A operand (the C-fragment layout of the
 *             scores is the A-fragment layout of P); l sums them in F32 before rounding.
 *     values  each warp: acc[16 heads][its 256 columns] += P [16][32] V [32][256], V the same latent tile read
 *             transposed (ldmatrix.trans).
 *   c = acc / l (zeros where l = 0: no valid position), BF16.
 *   The tiles after the row's last selected position are skipped (at 8,192 tokens 12.5% of the tiles: rows early
 *   in a causal prefill select fewer than W positions). Such a tile would change no bit: its scores are all -inf,
 *   so once a position was valid m stays, the rescale is expf(0) = 1 (l and acc unchanged), every probability is
 *   expf(-inf) = 0 and l += 0 is exact; with nothing valid yet acc and l are +0 and stay so. Its value product adds
 *   zero products (P = 0, zero-filled rows) to acc, which changes no finite nonzero acc; only an acc of -0 could
 *   come out +0 there (IEEE -0 + +0), which needs every probability of the last processed tile to round to 0 and a
 *   rescale to underflow a negative acc: not a case real scores reach.
 *
 * Precision contract (the BF16 path's, as attention in BF16 elsewhere): qh rounded to BF16 (the qh GEMM's output),
 * BF16 products summed in F32, the probabilities rounded to BF16 for the value product, c rounded to BF16. A row's
 * result depends on its own qh, idx and the latent rows only (fixed order over tiles and k-steps), so it is the
 * same in any chunk and any batch that takes this form.
 */
enum {
    FL_HEADS = 64,     /* heads per block */
    FL_R = 512,        /* the latent width the kernel is built for */
    FL_POS = 32,       /* positions per tile */
    FL_THREADS = 256,
    FL_CHUNKS = FL_R / 8,   /* 16-byte chunks per row */
};
/* Dynamic shared memory: qh, two latent tiles, the partial scores. */
constexpr size_t FL_SMEM = (size_t)FL_HEADS * FL_R * 2 + 2 * (size_t)FL_POS * FL_R * 2 + 8 * 16 * FL_POS * 4;

/* Element offset of (row, col) in a [rows][FL_R] BF16 array whose 16-byte chunks are XOR-swizzled by row % 8, so
 * that eight rows' chunk c (an ldmatrix's eight addresses) lie in eight different bank groups. */
__device__ inline int fl_swizzle(int row, int col) {
    return row * FL_R + (((col >> 3) ^ (row & 7)) << 3) + (col & 7);
}
__device__ inline void fl_ldmatrix_x4(uint32_t (&r)[4], const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ inline void fl_ldmatrix_x4_trans(uint32_t (&r)[4], const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ inline uint32_t fl_pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
}

/* Both flash kernels' end: c = acc / l for a warp's heads head0 + g and head0 + g + 8 (rows of c [., 512]) and its
 * N_TILES n-tiles of 8 columns from col0 (columns col0 + 8 n + 2 qd + {0, 1}); l is the quad's four parts of l_run
 * added, zeros where l = 0 (no valid position), BF16. */
template <int N_TILES>
__device__ __forceinline__ void fl_store_c(__nv_bfloat16 *c, const float (&acc)[N_TILES][4], const float (&l_run)[2],
                                           int64_t head0, int64_t col0, int g, int qd) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = l_run[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        __nv_bfloat16 *c_row = c + (head0 + g + 8 * r) * FL_R + col0 + 2 * qd;   /* [8 N_TILES] of the row */
#pragma unroll
        for (int n = 0; n < N_TILES; n++)
            *reinterpret_cast<uint32_t *>(c_row + 8 * n) = fl_pack_bf16x2(acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    }
}

/* grid (nc, H / 64). qh [nc, H, 512] BF16 (the chunk's rows), latent [cap, 512] BF16, idx [T, W] (row t0 + t of
 * the call), c [nc, H, 512] BF16. */
__global__ void __launch_bounds__(FL_THREADS, 1)
sparse_mla_flash_kernel(__nv_bfloat16 *c, const __nv_bfloat16 *qh, const __nv_bfloat16 *latent, const int32_t *idx,
                        int64_t t0, int64_t H, int64_t W, int64_t cap, float scale, cuda_fault *fault) {
    cuda_pdl_begin();
    extern __shared__ __align__(16) uint8_t fl_smem[];
    __nv_bfloat16 *q_s = (__nv_bfloat16 *)fl_smem;                         /* [64][512] swizzled */
    __nv_bfloat16 *tile_s = q_s + FL_HEADS * FL_R;                          /* [2][32][512] swizzled */
    float *part_s = (float *)(tile_s + 2 * FL_POS * FL_R);                  /* [8 warps][16][32 lanes] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
    const int hg = warp & 3, half = warp >> 2, row0 = 16 * hg, col0 = 256 * half;
    const int64_t tl = blockIdx.x, t = t0 + tl, h0 = (int64_t)blockIdx.y * FL_HEADS;
    const int32_t *ids = idx + t * W;

    /* qh rows of the block's heads: 64 x 64 chunks, 16 a thread */
    const __nv_bfloat16 *q_rows = qh + (tl * H + h0) * FL_R;
    for (int e = tid; e < FL_HEADS * FL_CHUNKS; e += FL_THREADS) {
        const int r = e / FL_CHUNKS, ch = e % FL_CHUNKS;
        cuda_cp_async16(q_s + fl_swizzle(r, 8 * ch), q_rows + (int64_t)r * FL_R + 8 * ch, 16);
    }
    /* tile j's latent rows into buffer j % 2: 32 x 64 chunks, 8 a thread; invalid positions read as zeros */
    const auto gather = [&](int64_t j0, int buf) {
        __nv_bfloat16 *dst = tile_s + buf * FL_POS * FL_R;
        for (int e = tid; e < FL_POS * FL_CHUNKS; e += FL_THREADS) {
            const int r = e / FL_CHUNKS, ch = e % FL_CHUNKS;
            const int64_t j = j0 + r;
            int32_t id = j < W ? ids[j] : -1;
            if (id >= cap) {
                if (ch == 0 && blockIdx.y == 0) cuda_record_fault(fault, CUDA_FAULT_SPARSE_MLA, t * W + j, id, cap);
                id = -1;
            }
            const __nv_bfloat16 *src = latent + (id >= 0 ? (int64_t)id * FL_R + 8 * ch : 0);
            cuda_cp_async16(dst + fl_swizzle(r, 8 * ch), src, id >= 0 ? 16 : 0);
        }
        cuda_cp_async_commit();
    };
    gather(0, 0);   /* one group with qh */

    /* The tiles up to the row's last selected position (idx >= 0; one >= cap counts, so its fault is recorded);
     * the ones past it would change nothing (the top of the section). kpool_select pads with -1 at the end, but
     * the op's contract allows -1 anywhere, so the bound is a max over the whole list. At least tile 0, which is
     * in flight with qh. */
    __shared__ int32_t warp_end[FL_THREADS / 32];
    int32_t end = 0;   /* one past this thread's last selected position */
#pragma unroll 4
    for (int64_t j = tid; j < W; j += FL_THREADS)
        if (ids[j] >= 0) end = (int32_t)j + 1;
    end = (int32_t)__reduce_max_sync(0xffffffffu, (uint32_t)end);
    if (lane == 0) warp_end[warp] = end;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < FL_THREADS / 32; w++) end = max(end, warp_end[w]);
    const int64_t n_tiles = end > FL_POS ? (end + FL_POS - 1) / FL_POS : 1;

    float acc[32][4] = {};                     /* [n-tile of 8 columns][fragment]: heads g, g+8 of the group */
    float m_run[2] = {-INFINITY, -INFINITY};   /* heads row0 + g, row0 + g + 8 */
    float l_run[2] = {0.0f, 0.0f};             /* this lane's part of the sums (the quad's four added at the end) */
    for (int64_t jt = 0; jt < n_tiles; jt++) {
        const int64_t j0 = jt * FL_POS;
        cuda_cp_async_wait<0>();
        __syncthreads();   /* tile jt (and qh) landed for every thread; the previous tile's reads are done */
        if (jt + 1 < n_tiles) gather(j0 + FL_POS, (int)((jt + 1) & 1));
        const __nv_bfloat16 *tile = tile_s + (jt & 1) * FL_POS * FL_R;

        /* partial scores over this warp's half of R: s[n][.] for positions 8n + 2qd + {0,1}, heads g and g + 8 */
        float s[4][4] = {};
#pragma unroll
        for (int kk = 0; kk < 16; kk++) {
            const int k0 = col0 + 16 * kk;
            uint32_t a[4], b01[4], b23[4];
            fl_ldmatrix_x4(a, q_s + fl_swizzle(row0 + (lane & 15), k0 + 8 * (lane >> 4)));
            const int m = lane >> 3, pr = lane & 7;   /* matrix m: positions 8 (m / 2) + pr, columns k0 + 8 (m % 2) */
            fl_ldmatrix_x4(b01, tile + fl_swizzle(8 * (m >> 1) + pr, k0 + 8 * (m & 1)));
            fl_ldmatrix_x4(b23, tile + fl_swizzle(16 + 8 * (m >> 1) + pr, k0 + 8 * (m & 1)));
            gemv_mma_16816(s[0], a[0], a[1], a[2], a[3], b01[0], b01[1]);
            gemv_mma_16816(s[1], a[0], a[1], a[2], a[3], b01[2], b01[3]);
            gemv_mma_16816(s[2], a[0], a[1], a[2], a[3], b23[0], b23[1]);
            gemv_mma_16816(s[3], a[0], a[1], a[2], a[3], b23[2], b23[3]);
        }
        /* the other half's partials, through shared memory */
        float *mine = part_s + warp * 16 * 32, *other = part_s + (warp ^ 4) * 16 * 32;
#pragma unroll
        for (int i = 0; i < 16; i++) mine[i * 32 + lane] = s[i / 4][i % 4];
        __syncthreads();
        float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int n = i / 4, f = i % 4;
            const int64_t j = j0 + 8 * n + 2 * qd + (f & 1);
            const int32_t id = j < W ? ids[j] : -1;
            const float v = (s[n][f] + other[i * 32 + lane]) * scale;
            s[n][f] = id >= 0 && id < cap ? v : -INFINITY;
            row_max[f >> 1] = fmaxf(row_max[f >> 1], s[n][f]);
        }
        /* online softmax: the quad (lanes 4g .. 4g + 3) holds a head's 32 scores */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
            row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
            const float m_new = fmaxf(m_run[r], row_max[r]);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   /* nothing valid yet: every exp is 0 */
            const float corr = expf(m_run[r] - m_use);
            m_run[r] = m_new;
            l_run[r] *= corr;
#pragma unroll
            for (int n = 0; n < 32; n++) acc[n][2 * r] *= corr, acc[n][2 * r + 1] *= corr;
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int f = 2 * r; f < 2 * r + 2; f++) {
                    s[n][f] = expf(s[n][f] - m_use);
                    l_run[r] += s[n][f];
                }
        }
        /* acc += P V: k-step kk covers positions 16 kk .. +16; P's A fragment from the score tiles 2 kk, 2 kk + 1 */
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            const uint32_t a0 = fl_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
            const uint32_t a1 = fl_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
            const uint32_t a2 = fl_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            const uint32_t a3 = fl_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            /* matrix m: positions 16 kk + 8 (m % 2) + pr, columns + 8 (m / 2) */
            const int m = lane >> 3, pr = lane & 7;
#pragma unroll
            for (int n = 0; n < 32; n += 2) {
                uint32_t b[4];
                fl_ldmatrix_x4_trans(b, tile + fl_swizzle(16 * kk + 8 * (m & 1) + pr, col0 + 8 * n + 8 * (m >> 1)));
                gemv_mma_16816(acc[n], a0, a1, a2, a3, b[0], b[1]);
                gemv_mma_16816(acc[n + 1], a0, a1, a2, a3, b[2], b[3]);
            }
        }
    }

    fl_store_c(c, acc, l_run, tl * H + h0 + row0, col0, g, qd);
}

/* ------------------------------------------------------------------------------------------------------------
 * The flash form on 16 warps (GLM53_CUDA_MLA_FLASH16, off by default until a GPU has run it). The kernel above
 * keeps 128 accumulators a thread (a warp's 16 heads x 256 columns), so it runs at 227 registers, one block of 8
 * warps a multiprocessor, and Nsight Compute finds it latency-bound (12.5% occupancy, 18% of issue slots busy,
 * 143 TFLOP/s: 26.8 ms of a 197 ms prefill of 8,192 tokens on the H100). This one does the same block work with
 * twice the warps, each with half the columns:
 *
 *   block (row t of the chunk, 64 heads), 512 threads = 16 warps: warp w takes head group hg = w % 4 (heads
 *   16 hg .. +16, an MMA's rows) and column quarter qr = w / 4 (latent columns 128 qr .. +128). acc [16 n-tiles][4]
 *   is 64 registers; the kernel fits __launch_bounds__(512, 1)'s 128 with no spills.
 *
 *   shared memory (FL16_SMEM = 213,568 bytes, opted in; one block a multiprocessor)
 *     q_s     [64][512] BF16, fl_swizzle                    65,536   qh of the block's heads, cp.async once
 *     tile_s  [3][32][512] BF16, fl_swizzle                 98,304   a ring of three latent tiles (cp.async)
 *     part_s  [16 warps][4 n-tiles][32 lanes] float4        32,768   each warp's partial scores of the tile
 *     ids_s   [FL16_MAX_W] int32                            16,384   the row's ids, -1 where invalid (< 0 or >= cap)
 *     mask_s  [FL16_MAX_W / 32] uint32                         512   per tile, bit i: position 32 jt + i is valid
 *     end_s   [16] int32                                        64   the warps' last selected positions
 *
 *   prologue  qh by cp.async; the row's ids into ids_s and mask_s (a fault recorded for an id >= cap as the kernel
 *             above does: op, position t W + j, value, cap, by head tile 0; every such id lies below `end`, so
 *             the same positions fault), `end` = one past the last id >= 0 from the same reads; a barrier; tiles
 *             0 and 1 requested (two cp.async groups, qh in the first).
 *   tile jt   cp.async.wait_group 1 (tile jt landed; tile jt + 1 stays in flight), barrier A (tile jt landed for
 *             every thread; every warp is past tile jt - 1, so its buffer and part_s are free), request tile
 *             jt + 2 into buffer (jt + 2) % 3 (a group every tile, empty past the end, so the wait's count holds);
 *     scores  each warp: its 16 heads x 32 positions over its 128 columns (8 k-steps x 4 mma.sync m16n8k16, A by
 *             ldmatrix from q_s, B from the tile), the partials to part_s, barrier B among the head group's four
 *             warps (bar.sync 1 + hg, 128: only they exchange partials), then every warp of the group adds the
 *             four quarters' partials as ((q0 + q1) + (q2 + q3)) (the code's order, with its own quarter from
 *             registers, is the same pairs: see there), times scale, -inf where mask_s says invalid. The four
 *             warps of a head group thus hold bit-identical scores, maxima, probabilities and l, so their column
 *             quarters are one softmax.
 *     softmax the kernel above's online softmax; the rescale of acc is skipped when the correction is exactly 1
 *             for every lane of the warp (a vote: x * 1 = x, no bit changes).
 *     values  each warp: acc [16 heads][its 128 columns] += P [16][32] V [32][128] (2 k-steps x 16 mma.sync, V by
 *             ldmatrix.trans from the same tile).
 *   c = acc / l (as acc * (1 / l), the kernel above's form; zeros where l = 0), BF16: heads 16 hg + g (+ 8),
 *   columns 128 qr + 8 n + 2 qd.
 *
 * Why, per tile and multiprocessor: both kernels issue 1,024 mma.sync (here 16 warps x (32 scores + 32 values),
 * there 8 x (64 + 64)) and 640 ldmatrix.x4 (320 KB of shared reads: 16 x (24 + 16) here, 8 x (48 + 32) there),
 * and two barriers (here the second is a head group's, not the block's). This one adds 96 KB of shared reads
 * (each warp reads three quarters' 2 KB of partial scores where there each read the other half's) and 16 KB of
 * writes: 448 KB against 352 KB, about 3,500 cycles of shared-memory bandwidth against 2,750, with the MMAs at
 * about 1,500 (mma.sync at two thirds of the tensor cores' rate). The kernel above takes about 6,800 cycles a
 * tile (26.8 ms / (8,192 rows x ~60 tiles / 132 multiprocessors)), waiting on latencies; here twice the warps
 * cover them, each score accumulator is a chain of 8 MMAs instead of 16, two tiles are in flight instead of one,
 * and the tile loop reads no ids from global memory (the kernel above reads them twice a tile, in its critical
 * path). Expected: bound by shared memory near 3,500-4,500 cycles a tile, 14-18 ms for the two layers instead of
 * 26.8 (not yet measured).
 * Against the brief it was written to: part_s is one buffer, not two. Barrier A of tile jt + 1 already separates
 * the reads of tile jt's partials from the writes of tile jt + 1's, so a second buffer would only serve to merge
 * A and B into one barrier (which needs the scores of tile jt + 1 before the values of tile jt, and so a fourth
 * tile buffer for the same prefetch distance); and its 32 KB would leave room for 768 ids, fewer than the model's
 * W (kpool_select's 512 x 4 + 3 = 2,051). FL16_MAX_W is 4,096 so that W fits with room; a longer list takes the
 * kernel above (cuda_sparse_mla). The validity test reads mask_s (one word a tile) rather than ids_s: eight id
 * loads a lane cost the registers that the 128-register bound could not spare (they spilled).
 *
 * Precision contract: the kernel above's (qh BF16, BF16 products summed in F32, the probabilities rounded to BF16
 * for the value product, l summed in F32 before rounding, c in BF16), with the scores' sum over R in four quarters
 * of 8 k-steps added as ((q0 + q1) + (q2 + q3)) instead of two halves of 16: it agrees with that kernel to F32
 * rounding, not bit for bit. A row's result still depends only on its own qh, ids and latent rows (fixed order over
 * tiles, k-steps and quarters), so it is the same in any chunk and any batch that takes this form. The tiles past
 * the row's last selected position are skipped as there (the same argument).
 */
enum {
    FL16_THREADS = 512,
    FL16_STAGES = 3,      /* latent tiles in the ring */
    FL16_MAX_W = 4096,    /* ids staged in shared memory (a longer list takes sparse_mla_flash_kernel) */
};
constexpr size_t FL16_Q_BYTES = (size_t)FL_HEADS * FL_R * 2, FL16_TILE_BYTES = (size_t)FL_POS * FL_R * 2,
                 FL16_PART_BYTES = (size_t)(FL16_THREADS / 32) * 4 * 32 * sizeof(float4),
                 FL16_IDS_BYTES = (size_t)FL16_MAX_W * 4, FL16_MASK_BYTES = (size_t)FL16_MAX_W / FL_POS * 4;
constexpr size_t FL16_SMEM = FL16_Q_BYTES + FL16_STAGES * FL16_TILE_BYTES + FL16_PART_BYTES + FL16_IDS_BYTES +
                             FL16_MASK_BYTES + (FL16_THREADS / 32) * 4;
static_assert(FL16_SMEM <= 227 * 1024, "sparse_mla_flash16_kernel: shared memory past the H100's 227 KB");

/* threadIdx.x, read where it is called (asm volatile: not merged with another read of it) */
__device__ inline int fl16_tid() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}
/* Barrier 1 + hg among the 128 threads of head group hg's four warps (barrier 0 is __syncthreads') */
__device__ inline void fl16_group_sync(int hg) { asm volatile("bar.sync %0, 128;" ::"r"(1 + hg) : "memory"); }
/* cp.async and ldmatrix at a shared address (32 bits: fewer registers than generic pointers, which the 128-register
 * bound needs) */
__device__ inline void fl16_cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ inline void fl16_ldmatrix_x4(uint32_t (&r)[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ inline void fl16_ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* grid (nc, H / 64). qh [nc, H, 512] BF16 (the chunk's rows), latent [cap, 512] BF16, idx [T, W] (row t0 + t of
 * the call, W <= FL16_MAX_W), c [nc, H, 512] BF16. */
__global__ void __launch_bounds__(FL16_THREADS, 1)
sparse_mla_flash16_kernel(__nv_bfloat16 *c, const __nv_bfloat16 *qh, const __nv_bfloat16 *latent,
                          const int32_t *idx, int64_t t0, int64_t H, int64_t W, int64_t cap, float scale,
                          cuda_fault *fault) {
    cuda_pdl_begin();
    extern __shared__ __align__(16) uint8_t fl16_smem[];
    __nv_bfloat16 *q_s = (__nv_bfloat16 *)fl16_smem;                                    /* [64][512] swizzled */
    __nv_bfloat16 *tile_s = q_s + FL_HEADS * FL_R;                                      /* [3][32][512] swizzled */
    float4 *part_s = (float4 *)(tile_s + FL16_STAGES * FL_POS * FL_R);                  /* [16][4][32] */
    int32_t *ids_s = (int32_t *)(part_s + (FL16_THREADS / 32) * 4 * 32);                /* [FL16_MAX_W] */
    uint32_t *mask_s = (uint32_t *)(ids_s + FL16_MAX_W);                                /* [FL16_MAX_W / 32] */
    int32_t *end_s = (int32_t *)(mask_s + FL16_MAX_W / FL_POS);                         /* [16] */
    const uint32_t q_a = (uint32_t)__cvta_generic_to_shared(q_s), tile_a = (uint32_t)__cvta_generic_to_shared(tile_s);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
    const int hg = warp & 3, qr = warp >> 2, row0 = 16 * hg, col0 = 128 * qr;
    const int64_t tl = blockIdx.x, t = t0 + tl, h0 = (int64_t)blockIdx.y * FL_HEADS;
    const int32_t *ids = idx + t * W;   /* [W] */

    /* qh rows of the block's heads: 64 x 64 chunks, 8 a thread (committed with tile 0) */
    const __nv_bfloat16 *q_rows = qh + (tl * H + h0) * FL_R;   /* [64][512] */
#pragma unroll
    for (int i = 0; i < FL_HEADS * FL_CHUNKS / FL16_THREADS; i++) {
        const int e = tid + FL16_THREADS * i, r = e / FL_CHUNKS, ch = e % FL_CHUNKS;
        cuda_cp_async16(q_s + fl_swizzle(r, 8 * ch), q_rows + (int64_t)r * FL_R + 8 * ch, 16);
    }

    /* The row's ids, up to a whole tile past W (-1 there), and `end`: one past the last id >= 0 (one >= cap
     * counts, as in the kernel above). */
    const int w_pad = (int)((W + FL_POS - 1) / FL_POS * FL_POS);
    int32_t end = 0;
#pragma unroll 4
    for (int j = tid; j < w_pad; j += FL16_THREADS) {
        int32_t id = j < W ? ids[j] : -1;
        if (id >= 0) end = j + 1;
        if (id >= cap) {
            if (blockIdx.y == 0) cuda_record_fault(fault, CUDA_FAULT_SPARSE_MLA, t * W + j, id, cap);
            id = -1;
        }
        ids_s[j] = id;
        const uint32_t valid = __ballot_sync(0xffffffffu, id >= 0);   /* the warp's 32 positions are tile j / 32 */
        if (lane == 0) mask_s[j / FL_POS] = valid;
    }
    end = (int32_t)__reduce_max_sync(0xffffffffu, (uint32_t)end);
    if (lane == 0) end_s[warp] = end;
    __syncthreads();   /* ids_s, mask_s and end_s written */
#pragma unroll
    for (int w = 0; w < FL16_THREADS / 32; w++) end = max(end, end_s[w]);
    const int n_tiles = end > FL_POS ? (end + FL_POS - 1) / FL_POS : 1;   /* at least tile 0 (in flight with qh) */

    /* Tile jt's latent rows into ring buffer `buf`: 32 x 64 chunks, 4 a thread (chunk ch of rows r0, r0 + 8, r0 + 16,
     * r0 + 24; r0 < 8, so one swizzle for the four); invalid positions read as zeros. The thread index is read anew
     * (fl16_tid) so that what the gather derives from it is not held through the tile loop: held, it was spilled. */
    const auto gather = [&](int jt, int buf) {
        const int g_tid = fl16_tid(), g_r0 = g_tid / FL_CHUNKS, g_ch = g_tid % FL_CHUNKS;
        const uint32_t g_dst = tile_a + 2 * fl_swizzle(g_r0, 8 * g_ch);
#pragma unroll
        for (int i = 0; i < FL_POS * FL_CHUNKS / FL16_THREADS; i++) {
            const int32_t id = ids_s[FL_POS * jt + g_r0 + 8 * i];
            const __nv_bfloat16 *src = latent + (id >= 0 ? (int64_t)id * FL_R + 8 * g_ch : 0);
            fl16_cp_async16(g_dst + buf * (uint32_t)FL16_TILE_BYTES + i * 8 * FL_R * 2, src, id >= 0 ? 16 : 0);
        }
    };
    gather(0, 0);
    cuda_cp_async_commit();   /* group 0: qh and tile 0 */
    if (n_tiles > 1) gather(1, 1);
    cuda_cp_async_commit();   /* group 1: tile 1 (empty with one tile) */

    float acc[16][4] = {};                     /* [n-tile of 8 columns][fragment]: heads g, g+8 of the group */
    float m_run[2] = {-INFINITY, -INFINITY};   /* heads row0 + g, row0 + g + 8 */
    float l_run[2] = {0.0f, 0.0f};             /* this lane's part of the sums (the quad's four added at the end) */
    int buf = 0;                               /* jt % 3 */
    /* The ldmatrix addresses. Lane l gives row l % 8 of matrix m = l / 8, and all three operands take matrix m at
     * rows + 8 (m % 2), chunk + m / 2 of their 16 x 16 piece (16-byte chunks of 8 columns):
     *   scores A  q_s rows row0 + 8 (m % 2) + l % 8, chunk 16 qr + 2 kk + m / 2   (heads; columns 128 qr + 16 kk ..)
     *   scores B  tile rows 8 (m % 2) + l % 8 (+16), chunk 16 qr + 2 kk + m / 2   (positions; the same columns)
     *   values B  tile rows 16 kk + 8 (m % 2) + l % 8, chunk 16 qr + n + m / 2     (transposed: positions are k)
     * Every such row is l % 8 modulo 8 (its swizzle key sw), so chunk c lies at row * 1024 + ((c ^ sw) << 4) bytes,
     * and c ^ sw = 16 qr + ((2 kk or n) ^ (m / 2 ^ sw)): one lane offset `lo` for all three (plus the operand's
     * rows) and an XOR with a constant a step. For scores B this makes matrices 0, 1 positions 0-7, 8-15 at the
     * k-step's low columns and 2, 3 at its high ones: n-tile 0 takes registers 0 and 2, n-tile 1 registers 1 and 3. */
    const int m = lane >> 3, sw = lane & 7;
    const uint32_t lo = (8 * (m & 1) + sw) * FL_R * 2 + 256 * qr, lx = ((m >> 1) ^ sw) << 4;
    const uint32_t a_row = q_a + row0 * FL_R * 2 + lo;
    for (int jt = 0; jt < n_tiles; jt++) {
        cuda_cp_async_wait<1>();
        __syncthreads();   /* A: tile jt landed for every thread; every warp is done with tile jt - 1 and part_s */
        const int next = buf == 0 ? FL16_STAGES - 1 : buf - 1;   /* (jt + 2) % 3: tile jt - 1's buffer */
        if (jt + 2 < n_tiles) gather(jt + 2, next);
        cuda_cp_async_commit();
        const uint32_t tile = tile_a + buf * (uint32_t)FL16_TILE_BYTES;   /* [32][512] swizzled, a shared address */

        /* partial scores over this warp's quarter of R: s[n][.] for positions 8n + 2qd + {0,1}, heads g and g + 8 */
        float s[4][4] = {};
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            uint32_t a[4], b01[4], b23[4];
            fl16_ldmatrix_x4(a, a_row + ((32 * kk) ^ lx));
            fl16_ldmatrix_x4(b01, tile + lo + ((32 * kk) ^ lx));
            fl16_ldmatrix_x4(b23, tile + lo + 16 * FL_R * 2 + ((32 * kk) ^ lx));
            gemv_mma_16816(s[0], a[0], a[1], a[2], a[3], b01[0], b01[2]);
            gemv_mma_16816(s[1], a[0], a[1], a[2], a[3], b01[1], b01[3]);
            gemv_mma_16816(s[2], a[0], a[1], a[2], a[3], b23[0], b23[2]);
            gemv_mma_16816(s[3], a[0], a[1], a[2], a[3], b23[1], b23[3]);
        }
#pragma unroll
        for (int n = 0; n < 4; n++) part_s[(warp * 4 + n) * 32 + lane] = make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
        fl16_group_sync(hg);   /* B: the head group's four quarters stored */

        /* The four quarters added as ((q0 + q1) + (q2 + q3)), written ((own + q[qr ^ 1]) + (q[qr ^ 2] + q[qr ^ 3])):
         * the same pairs, and a + b rounds as b + a, so every warp of the group gets the same bits, with no branch
         * on which quarter is its own. Times scale; -inf where the id is invalid. */
        const uint32_t valid = mask_s[jt] >> (2 * qd);   /* bit 8 n + b: position 32 jt + 8 n + 2 qd + b */
        float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 4; n++) {
            const float4 p1 = part_s[((warp ^ 4) * 4 + n) * 32 + lane];   /* quarter qr ^ 1: warp hg + 4 (qr ^ 1) */
            const float4 p2 = part_s[((warp ^ 8) * 4 + n) * 32 + lane];
            const float4 p3 = part_s[((warp ^ 12) * 4 + n) * 32 + lane];
            const bool ok0 = (valid >> (8 * n)) & 1, ok1 = (valid >> (8 * n + 1)) & 1;   /* positions +0, +1 */
            const float v0 = ((s[n][0] + p1.x) + (p2.x + p3.x)) * scale;
            const float v1 = ((s[n][1] + p1.y) + (p2.y + p3.y)) * scale;
            const float v2 = ((s[n][2] + p1.z) + (p2.z + p3.z)) * scale;
            const float v3 = ((s[n][3] + p1.w) + (p2.w + p3.w)) * scale;
            s[n][0] = ok0 ? v0 : -INFINITY;
            s[n][1] = ok1 ? v1 : -INFINITY;
            s[n][2] = ok0 ? v2 : -INFINITY;
            s[n][3] = ok1 ? v3 : -INFINITY;
            row_max[0] = fmaxf(row_max[0], fmaxf(s[n][0], s[n][1]));
            row_max[1] = fmaxf(row_max[1], fmaxf(s[n][2], s[n][3]));
        }
        /* online softmax: the quad (lanes 4g .. 4g + 3) holds a head's 32 scores */
        float corr[2], m_use[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
            row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
            const float m_new = fmaxf(m_run[r], row_max[r]);
            m_use[r] = m_new == -INFINITY ? 0.0f : m_new;   /* nothing valid yet: every exp is 0 */
            corr[r] = expf(m_run[r] - m_use[r]);
            m_run[r] = m_new;
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l_run[r] *= corr[r];
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int f = 2 * r; f < 2 * r + 2; f++) {
                    s[n][f] = expf(s[n][f] - m_use[r]);
                    l_run[r] += s[n][f];
                }
        }
        /* P as the value product's A fragments: k-step kk covers positions 16 kk .. +16, score tiles 2 kk, 2 kk + 1 */
        uint32_t pa[2][4];
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            pa[kk][0] = fl_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
            pa[kk][1] = fl_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
            pa[kk][2] = fl_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[kk][3] = fl_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        }
        if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f))
#pragma unroll
            for (int n = 0; n < 16; n++) acc[n][0] *= corr[0], acc[n][1] *= corr[0], acc[n][2] *= corr[1], acc[n][3] *= corr[1];
        /* acc += P V */
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
#pragma unroll
            for (int n = 0; n < 16; n += 2) {
                uint32_t b[4];
                fl16_ldmatrix_x4_trans(b, tile + lo + 16 * kk * FL_R * 2 + ((16 * n) ^ lx));
                gemv_mma_16816(acc[n], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b[0], b[1]);
                gemv_mma_16816(acc[n + 1], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b[2], b[3]);
            }
        }
        buf = buf == FL16_STAGES - 1 ? 0 : buf + 1;
    }

    fl_store_c(c, acc, l_run, tl * H + h0 + row0, col0, g, qd);
}

/* ------------------------------------------------------------------------------------------------------------
 * Launch
 */
/* Query rows past which a call takes the GEMM form: qh and the value product as cuBLAS batched GEMMs over the
 * heads (each weight read once per chunk of rows, on tensor cores in BF16) instead of the qh and out kernels
 * (each weight byte read once per 4 rows, on CUDA cores). Up to it a row's bits do not depend on the call's row
 * count (decode, speculative verification); past it they may, as with matmul past its GEMV rows. */
enum { MLA_GEMM_MIN_ROWS = 16 };

/* C_h = op(A_h) B_h for h < batch, column-major (cuBLAS), F32 sums: A_h at A + h * strideA elements, and so on. */
static glm53_status mla_batched_gemm(cuda_backend *cb, cublasOperation_t op_a, int64_t m, int64_t n, int64_t k,
                                     const void *A, cudaDataType a_type, int64_t lda, int64_t stride_a, const void *B,
                                     cudaDataType b_type, int64_t ldb, int64_t stride_b, void *C, cudaDataType c_type,
                                     int64_t ldc, int64_t stride_c, int64_t batch, const char *what) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_TRY(cublasGemmStridedBatchedEx(cb->cublas, op_a, CUBLAS_OP_N, (int)m, (int)n, (int)k, &one, A, a_type,
                                          (int)lda, stride_a, B, b_type, (int)ldb, stride_b, &zero, C, c_type,
                                          (int)ldc, stride_c, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (cb->profile) cuda_profile_mark(cb, what);
    return GLM53_OK;
}

static inline unsigned ceil_div(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* Whether the flash form's 16-warp kernel (sparse_mla_flash16_kernel) takes a call: the switch on, the row's ids fit
 * its staged copy, and the device gives a block its shared memory. Otherwise the flash form runs
 * sparse_mla_flash_kernel. */
static bool mla_flash16_fits(const cuda_backend *cb, int64_t W) {
    return cb->mla_flash16 && W <= FL16_MAX_W && FL16_SMEM <= (size_t)cb->smem_optin;
}

glm53_status cuda_sparse_mla(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *latent,
                             const glm53_tensor *idx, const glm53_tensor *kv_b, float scale) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(o) && cuda_is_act(q) && cuda_is_act(latent) && q->ndim == 3 && o->ndim == 3);
    assert(idx->dtype == GLM53_I32 && idx->data && idx->device == GLM53_DEVICE_CUDA && idx->ndim == 2);
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = o->shape[2];
    int64_t R = cuda_cols(latent), cap = glm53_tensor_rows(latent), W = idx->shape[1];
    assert(o->shape[0] == T && o->shape[1] == H && idx->shape[0] == T);
    assert(kv_b->ndim == 2 && kv_b->shape[0] == H * (dk + dv) && kv_b->shape[1] == R);
    assert(T * H <= INT32_MAX && H <= 65535);
    weight_ref kr;
    GLM53_TRY(cuda_weight_ref(kv_b, &kr, "sparse_mla"));
    GLM53_TRY(cuda_enter(cb));
    if (T * H * dv == 0) return GLM53_OK;
    if (R == 0 || W == 0) {   /* nothing to attend to (or an empty value space): zeros, in either dtype */
        CUDA_TRY(cudaMemsetAsync(o->data, 0, glm53_tensor_nbytes(o), cb->stream));
        return GLM53_OK;
    }

    const bool w_vec = R % 8 == 0 && (uintptr_t)kr.data % 16 == 0;
    const bool l_vec = R % 8 == 0 && (uintptr_t)latent->data % 16 == 0;
    const int64_t nS = (W + PV_SPLIT - 1) / PV_SPLIT, n_ht = (H + PV_HEADS - 1) / PV_HEADS;

    /* The forms (top of the file): up to MLA_GEMM_MIN_ROWS rows the four kernels; past it the GEMM form, and of
     * that the flash form where its shapes hold (BF16 activations, 64-head groups, R = 512, aligned rows). The GEMM
     * form takes kv_b in the GEMMs' dtype (BF16 for BF16 activations, F32 otherwise; an FP8 or other weight
     * dequantised once for the call) and writes c [chunk, H, R] in the activation dtype. */
    const bool gemm_form = T > MLA_GEMM_MIN_ROWS;
    const bool act_bf16 = q->dtype == GLM53_BF16;
    const bool flash_form = gemm_form && act_bf16 && latent->dtype == GLM53_BF16 && H % FL_HEADS == 0 && R == FL_R &&
                            l_vec;
    const bool flash16 = flash_form && mla_flash16_fits(cb, W);   /* its 16-warp kernel (GLM53_CUDA_MLA_FLASH16) */
    const cudaDataType act_type = act_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const size_t act_size = act_bf16 ? 2 : 4, o_size = glm53_dtype_size((glm53_dtype)o->dtype);
    const cudaDataType o_type = o->dtype == GLM53_BF16 ? CUDA_R_16BF : CUDA_R_32F;

    /* scratch per row: the flash form's qh [H,R] BF16; the others' qh [H,R], S [H,W], nS splits' partials F32 */
    const size_t row_bytes = flash_form ? (size_t)(H * R) * 2
                                        : (size_t)(H * R + H * W + nS * H * R + 2 * nS * H) * sizeof(float);
    int64_t chunk = (int64_t)(MLA_SCRATCH_BUDGET / row_bytes);
    if (chunk < 1) chunk = 1;
    if (chunk > T) chunk = T;
    if (chunk > 65535 / n_ht) chunk = 65535 / n_ht;   /* gridDim.z of the pv launch */

    cuda_scratch w_conv, c_rows;
    const void *w_gemm = kv_b->data;
    if (gemm_form && kv_b->dtype != (act_bf16 ? GLM53_BF16 : GLM53_F32)) {
        GLM53_TRY(cuda_dequantize_weight(cb, &w_conv, kr, H * (dk + dv), R, act_bf16 ? GLM53_BF16 : GLM53_F32));
        w_gemm = w_conv.ptr;
    }
    cuda_scratch s;
    GLM53_TRY(s.get(cb, (size_t)chunk * row_bytes, "sparse_mla scratch"));
    if (gemm_form) GLM53_TRY(c_rows.get(cb, (size_t)(chunk * H * R) * act_size, "sparse_mla c rows"));
    float *qh = (float *)s.ptr;                    /* [chunk,H,R] (BF16 in the flash form) */
    float *S = qh + chunk * H * R;                 /* [chunk,H,W] */
    float *cpart = S + chunk * H * W;              /* [nS,chunk,H,R] */
    float *mpart = cpart + nS * chunk * H * R;     /* [nS,chunk,H] */
    float *lpart = mpart + nS * chunk * H;         /* [nS,chunk,H] */

    const int64_t Rp = (R + 7) / 8 * 8;
    const size_t out_smem = (size_t)(MLA_ROWS * Rp + MLA_ROWS * nS) * sizeof(float);
    if (flash16)
        GLM53_TRY(cuda_smem_optin(cb, (const void *)sparse_mla_flash16_kernel, FL16_SMEM, "sparse_mla (flash16)"));
    else if (flash_form)
        GLM53_TRY(cuda_smem_optin(cb, (const void *)sparse_mla_flash_kernel, FL_SMEM, "sparse_mla (flash)"));
    else if (!gemm_form)
        GLM53_TRY(cuda_smem_optin(cb, (const void *)sparse_mla_out_kernel, out_smem, "sparse_mla (out)"));

    const act_in qa = cuda_act_in(q), la = cuda_act_in(latent);
    const act_out oa = cuda_act_out(o);
    const int32_t *ids = (const int32_t *)idx->data;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t nc = T - t0 < chunk ? T - t0 : chunk;
        if (gemm_form) {
            /* per head h: qh_h [nc, R] = q_h [nc, dk] Wk_h [dk, R], i.e. column-major qh_h^T = Wk_h^T q_h^T with
             * Wk_h the rows h*(dk+dv) .. +dk of kv_b (R x dk column-major, lda R), q_h^T dk x nc (ldb H*dk) */
            GLM53_TRY(mla_batched_gemm(cb, CUBLAS_OP_N, R, nc, dk, w_gemm, act_type, R, (dk + dv) * R,
                                       (const char *)q->data + (size_t)(t0 * H * dk) * act_size, act_type, H * dk, dk,
                                       qh, flash_form ? CUDA_R_16BF : CUDA_R_32F, H * R, R, H,
                                       "sparse_mla (qh, cublas)"));
        } else {
            CUDA_TRY(cuda_launch(cb, sparse_mla_qh_kernel,
                                 dim3(ceil_div(R, QH_COLS), (unsigned)H, ceil_div(nc, MLA_ROWS)), MLA_THREADS, 0,
                                 cb->pdl, qh, qa, kr, w_vec, t0, nc, H, dk, dv, R));
            CUDA_LAUNCHED("sparse_mla (qh)");
        }
        if (flash16) {
            CUDA_TRY(cuda_launch(cb, sparse_mla_flash16_kernel, dim3((unsigned)nc, (unsigned)(H / FL_HEADS)),
                                 FL16_THREADS, FL16_SMEM, cb->pdl, (__nv_bfloat16 *)c_rows.ptr,
                                 (const __nv_bfloat16 *)qh, (const __nv_bfloat16 *)latent->data, ids, t0, H, W, cap,
                                 scale, cb->fault));
            CUDA_LAUNCHED("sparse_mla (flash16)");
        } else if (flash_form) {
            CUDA_TRY(cuda_launch(cb, sparse_mla_flash_kernel, dim3((unsigned)nc, (unsigned)(H / FL_HEADS)), FL_THREADS,
                                 FL_SMEM, cb->pdl, (__nv_bfloat16 *)c_rows.ptr, (const __nv_bfloat16 *)qh,
                                 (const __nv_bfloat16 *)latent->data, ids, t0, H, W, cap, scale, cb->fault));
            CUDA_LAUNCHED("sparse_mla (flash)");
        } else {
            CUDA_TRY(cuda_launch(cb, sparse_mla_scores_kernel,
                                 dim3(ceil_div(W, SC_POS), ceil_div(H, SC_HEADS), (unsigned)nc), MLA_THREADS, 0,
                                 cb->pdl, S, qh, la, l_vec, ids, t0, H, R, W, cap, scale, cb->fault));
            CUDA_LAUNCHED("sparse_mla (scores)");
            CUDA_TRY(cuda_launch(cb, sparse_mla_pv_kernel,
                                 dim3(ceil_div(R, PV_COLS), (unsigned)nS, (unsigned)(nc * n_ht)), MLA_THREADS, 0,
                                 cb->pdl, cpart, mpart, lpart, S, la, l_vec, ids, t0, nc, H, R, W, cap));
            CUDA_LAUNCHED("sparse_mla (pv)");
        }
        if (gemm_form) {
            if (!flash_form) {
                CUDA_TRY(cuda_launch(cb, sparse_mla_combine_kernel, (unsigned)(nc * H), 128,
                                     (size_t)nS * sizeof(float), cb->pdl, act_out{c_rows.ptr, act_bf16}, cpart, mpart,
                                     lpart, nc, H, R, nS));
                CUDA_LAUNCHED("sparse_mla (combine)");
            }
            /* per head h: o_h [nc, dv] = c_h [nc, R] Wv_h^T, Wv_h the rows h*(dk+dv)+dk .. +dv of kv_b: column-major
             * o_h^T = op_T(Wv_h as R x dv, lda R) c_h^T (R x nc, ldb H*R) */
            GLM53_TRY(mla_batched_gemm(cb, CUBLAS_OP_T, dv, nc, R, (const char *)w_gemm + (size_t)(dk * R) * act_size,
                                       act_type, R, (dk + dv) * R, c_rows.ptr, act_type, H * R, R,
                                       (char *)o->data + (size_t)(t0 * H * dv) * o_size, o_type, H * dv, dv, H,
                                       "sparse_mla (out, cublas)"));
        } else {
            CUDA_TRY(cuda_launch(cb, sparse_mla_out_kernel,
                                 dim3(ceil_div(dv, OUT_ROWS), (unsigned)H, ceil_div(nc, MLA_ROWS)), MLA_THREADS,
                                 out_smem, cb->pdl, oa, cpart, mpart, lpart, kr, w_vec, t0, nc, H, dk, dv, R, nS));
            CUDA_LAUNCHED("sparse_mla (out)");
        }
    }
    return GLM53_OK;
}
