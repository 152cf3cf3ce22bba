/*
 * kda.cu - Kimi delta attention (docs/architecture.md section 3) on the CUDA backend: the depthwise causal conv1d
 * over q, k, v, the per-channel forget gate and the token-by-token delta-rule recurrence with an F32 state.
 *
 * kda_recurrent's kernel, the column-split form: a block holds 32 columns of one head's state S[dk, dv] (H x dv / 32
 * blocks: 256 at 64 heads of 128 x 128), four lanes per column each holding a quarter of the column (dk / 4
 * floats) in registers, so the state is never re-read from memory between tokens; a column's sums are the four
 * quarters' sums added by two shuffles. The token rows (k, q, exp(g), beta, the block's v values, the ring slots)
 * come through shared memory 8 rows at a time, two stages: the next stage's loads are issued before the current
 * stage's arithmetic and stored after it, so their latency hides behind 8 rows of arithmetic, and the rows of a
 * stage need no barrier. The state is read from the ring slot of the sequence's length and written to the slots of
 * the lengths the ring keeps (slot numbers are device data, so a captured step can be replayed).
 * A row's arithmetic is the same whatever T and wherever the stages cut, so one call over T rows gives the bits of
 * T one-row calls: a verification chunk gives a decode step's bits (exact greedy speculative decoding), and a
 * prompt gives the same state whether it is prefilled at once or in chunks.
 *
 * The form before it, kept for heads the column split does not take (dk not a multiple of 4, or past 128):
 * kda_recurrent_kernel, one block per head for the whole sequence, the state in shared memory, thread j owning
 * column j and summing over i = 0..dk-1 in the CPU backend's order. It was the prefill kernel until 2026-12-07,
 * measured at 54 ms a layer for 8,192 tokens at 64 x 128 x 128 on the H100: about 13,000 cycles a token, which is
 * what each thread walking its column in shared memory twice a token costs when every load waits for the store
 * before it (S and the staged rows share one array, so the compiler cannot reorder them). The column split
 * measured 14.3 ms for six such layers at 2,048 tokens (about 2,000 cycles a token: each warp's token is two
 * dependent 32-term sums and their shuffles); reading the staged rows 16 bytes at a time made it slower (16.5 ms),
 * and the chunked form's floor is under a millisecond.
 *
 * kda_sequences (the fused per-sequence part of a KDA layer, OPTIONAL in the op table) runs what kda_forward's
 * op-by-op loop runs for every sequence of the batch in two launches, whatever the number of sequences (up to 64
 * a launch): kda_conv_prep_kernel (the conv over each sequence's history and new rows, SiLU, the per-head L2
 * norms of q and k, and the ring update; a block per (sequence, head, q|k|v, 16 rows)) into scratch, then the
 * recurrence kernel above over every sequence at once (grid.z = sequence). Its contract is the chain's bits: each
 * element gets the chain's operations in the chain's order through the same device functions (conv_causal_sum,
 * cuda_silu, cuda_block_sum and the l2norm helpers, the recurrence kernels themselves), and every value the chain
 * would have stored in an activation tensor is rounded to that dtype at the same point (cuda_act_round).
 *
 * Both are token-by-token forms. The chunked (WY / UT) form, for prefill behind GLM53_CUDA_KDA_CHUNKED (on by
 * default), has its own section below: F32 FMAs on the CUDA cores, agreeing with the token kernel to F32 rounding
 * rather than in bits; decode and verification keep the token kernel.
 */
#include "kernels/cuda/cuda_common.cuh"

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
/* The causal conv of channel c at one output row: sum over the K taps in order of w[c][i] * x(i), x(i) the input
 * row i of the row's window, in F32. conv1d_causal and kda_sequences both compute it here (same bits). */
template <typename Window>
__device__ inline float conv_causal_sum(const weight_ref &w, int64_t c, int64_t K, const Window &x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < K; i++) acc += w.at(c, i) * x(i);
    return acc;
}

/* y[T,C][t][c] = sum_i w[c][i] x[t+i][c]; x[T+K-1, C]. Consecutive threads take consecutive channels, so every
 * read of x is coalesced. */
__global__ void conv1d_causal_kernel(act_out y, act_in x, weight_ref w, int64_t T, int64_t C, int64_t K) {
    GRID_STRIDE(item, T * C) {
        const int64_t t = item / C, c = item % C;
        y.store(item, conv_causal_sum(w, c, K, [&](int64_t i) { return x[(t + i) * C + c]; }));
    }
}

/* g[N,C] F32 from f[N,C]; h = channel / dk.
 *   lower bound:  g = lb * sigmoid(exp(A_log[h]) * (f + dt_bias))
 *   else:         g = -exp(A_log[h]) * softplus(f + dt_bias) */
__device__ inline float kda_gate_value(act_in f, int64_t i, weight_ref A_log, weight_ref dt_bias, int64_t ch,
                                       int64_t h, bool has_lower_bound, float lower_bound) {
    const float rate = expf(A_log.at(0, h)), u = f[i] + dt_bias.at(0, ch);
    return has_lower_bound ? lower_bound * cuda_sigmoid(rate * u) : -rate * cuda_softplus(u);
}

__global__ void kda_gate_kernel(float *g, act_in f, weight_ref A_log, weight_ref dt_bias, int64_t N, int64_t C,
                                int64_t dk, bool has_lower_bound, float lower_bound) {
    cuda_pdl_begin();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = i % C;
        g[i] = kda_gate_value(f, i, A_log, dt_bias, ch, ch / dk, has_lower_bound, lower_bound);
    }
}

/* The same over a grid (ceil(C / 256), N / KDA_GATE_ROWS rounded up): a block takes 256 channels of KDA_GATE_ROWS
 * rows, so a thread's channel and head are worked out once in 32-bit arithmetic instead of a 64-bit remainder and
 * quotient an element (GLM53_CUDA_KDA_ROWS). Why: 383 us a call at an 8,192-token prefill (H100, N 8,192 x C 8,192)
 * against about 130 us of traffic (2 bytes read, 4 written an element). The same expressions, so the same bits. */
enum { KDA_GATE_ROWS = 16 };
__global__ void kda_gate_rows_kernel(float *g, act_in f, weight_ref A_log, weight_ref dt_bias, int64_t N, int C,
                                     int dk, bool has_lower_bound, float lower_bound) {
    cuda_pdl_begin();
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    const int h = ch / dk;
    const int64_t n0 = (int64_t)blockIdx.y * KDA_GATE_ROWS;
    const int64_t n_end = n0 + KDA_GATE_ROWS < N ? n0 + KDA_GATE_ROWS : N;
#pragma unroll 4
    for (int64_t n = n0; n < n_end; n++)
        g[n * C + ch] = kda_gate_value(f, n * C + ch, A_log, dt_bias, ch, h, has_lower_bound, lower_bound);
}

/* ------------------------------------------------------------------------------------------------------------
 * The recurrence. One launch covers up to KDA_SEQS_PER_LAUNCH sequences of the batch (grid.z = sequence); the
 * kda_recurrent op is a table of one. A sequence is its rows [row0, row0 + T) of q, k, v, g, beta and o, its state
 * ring states [ring, H, dk, dv] F32 and its ring slots slots [T + 1] I32 (backend.h's kda_recurrent contract). The
 * table is a kernel parameter (by value: a captured launch replays it with no upload); the slot numbers in it are
 * device data, read on the device.
 */
enum { KDA_SEQS_PER_LAUNCH = 64 };

struct kda_rec_seq {
    int64_t        row0, T;
    float         *states;
    const int32_t *slots;
};

struct kda_rec_table {
    kda_rec_seq seq[KDA_SEQS_PER_LAUNCH];
};

/* Batch row `row` of head h into shared memory for the state update, between the caller's barriers: its k and q
 * rows, exp(g) (the decay per row of the state) and beta (by thread 0). */
__device__ inline void kda_stage_token(float *k_t, float *q_t, float *decay, float *beta_t, act_in q, act_in k,
                                       const float *g, const float *beta, int64_t row, int64_t H, int64_t h,
                                       int64_t dk) {
    const int64_t at = (row * H + h) * dk;
    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
        k_t[i] = k[at + i];
        q_t[i] = q[at + i];
        decay[i] = expf(g[at + i]);
    }
    if (threadIdx.x == 0) *beta_t = beta[row * H + h];
}

/* One block per (head h = blockIdx.x, sequence blockIdx.z); blockDim.x >= dv (a multiple of 32); thread j < dv owns
 * column j. q, k [N,H,dk], v [N,H,dv] activations; g [N,H,dk], beta [N,H] F32; o [N,H,dv] (N rows of the batch;
 * the sequence's rows are [row0, row0 + T)); the state is read from slot slots[0] and written after row t to slot
 * slots[1+t] when that is >= 0. Dynamic shared memory: S [dk*dv], then k, q, decay [dk] each. */
__global__ void kda_recurrent_kernel(act_out o, act_in q, act_in k, act_in v, const float *g, const float *beta,
                                     const __grid_constant__ kda_rec_table seqs, int64_t H, int64_t dk, int64_t dv) {
    extern __shared__ float smem[];
    __shared__ float beta_t;
    const kda_rec_seq &sq = seqs.seq[blockIdx.z];
    float *S = smem, *k_t = S + dk * dv, *q_t = k_t + dk, *decay = q_t + dk;
    const int64_t h = blockIdx.x, j = threadIdx.x, head = h * dk * dv;
    const bool owns_column = j < dv;

    const int64_t slot_size = H * dk * dv;
    const float *state_in = sq.states + (int64_t)sq.slots[0] * slot_size + head;
    for (int64_t i = threadIdx.x; i < dk * dv; i += blockDim.x) S[i] = state_in[i];

    for (int64_t t = 0; t < sq.T; t++) {
        const int64_t row = sq.row0 + t;
        __syncthreads();   /* S loaded; the previous token's reads of k_t, q_t, decay, beta_t are done */
        kda_stage_token(k_t, q_t, decay, &beta_t, q, k, g, beta, row, H, h, dk);
        __syncthreads();
        if (!owns_column) continue;

        /* S <- S * exp(g) by rows; u = beta (v - S^T k) */
        float mem = 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            float s = S[i * dv + j] * decay[i];
            S[i * dv + j] = s;
            mem += s * k_t[i];
        }
        float u = beta_t * (v[(row * H + h) * dv + j] - mem);
        /* S <- S + k u^T; o = S^T q */
        float out = 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            float s = S[i * dv + j] + k_t[i] * u;
            S[i * dv + j] = s;
            out += s * q_t[i];
        }
        o.store((row * H + h) * dv + j, out);
        /* Thread j writes only its own column, which no other thread reads: no barrier needed. The slot read at
         * the start may be written here (a ring of one): it was copied into S before the first token. */
        const int32_t slot = sq.slots[1 + t];
        if (slot >= 0) {
            float *snap = sq.states + (int64_t)slot * slot_size + head;
            for (int64_t i = 0; i < dk; i++) snap[i * dv + j] = S[i * dv + j];
        }
    }
}

enum {
    KDA_COLS = 32,          /* state columns a block of the column-split kernel holds */
    KDA_SPLIT = 4,          /* lanes per column, each with a quarter of its rows in registers */
    KDA_MAX_QUARTER = 32,   /* rows a lane holds: dk up to 128 */
    KDA_STAGE_ROWS = 8,     /* token rows staged in shared memory at a time */
    KDA_COLUMN_THREADS = KDA_COLS * KDA_SPLIT,
    KDA_STAGE_KQG = 3 * KDA_STAGE_ROWS,   /* k, q and g values of a stage per thread: element tid of each row */
    KDA_STAGE_V = KDA_STAGE_ROWS * KDA_COLS / KDA_COLUMN_THREADS,   /* v values of a stage per thread */
};
static_assert(KDA_STAGE_ROWS <= KDA_COLUMN_THREADS && KDA_SPLIT * KDA_MAX_QUARTER <= KDA_COLUMN_THREADS,
              "a thread per staged row loads its beta and slot, a thread per element i < dk its k, q and g");

/* One stage in shared memory, floats: k, q and decay = exp(g) [KDA_STAGE_ROWS][dkp] each, dkp = dk + KDA_SPLIT (a
 * pad float after each quarter, so that the four quarters' lanes, which read rows i0 + r at once, read four banks
 * rather than one); v of the block's columns [KDA_STAGE_ROWS][KDA_COLS]; beta and the ring slot [KDA_STAGE_ROWS]
 * each. Two stages: one is computed while the next is filled. */
__host__ __device__ inline int64_t kda_stage_floats(int64_t dk) {
    return 3 * KDA_STAGE_ROWS * (dk + KDA_SPLIT) + KDA_STAGE_ROWS * KDA_COLS + 2 * KDA_STAGE_ROWS;
}

/* What a thread loads from global memory for a stage: issued before the current stage is computed, written to
 * shared memory after it, so the loads' latency hides behind KDA_STAGE_ROWS rows of arithmetic. */
struct kda_stage_regs {
    float   kqg[KDA_STAGE_KQG];   /* [k | q | g][row], element tid */
    float   v[KDA_STAGE_V];       /* element tid + KDA_COLUMN_THREADS * n of v [row][column] */
    float   beta;                 /* thread t < rows: row t's */
    int32_t slot;
};

/* The column-split recurrence (see the top of the file). grid (H, ceil(dv / 32), sequences), KDA_COLUMN_THREADS
 * threads: thread t holds column blockIdx.y * 32 + t / 4 (columns past dv compute on zeros and store nothing) and
 * rows quarter * dk/4 .. (quarter + 1) * dk/4 of it, quarter = t % 4. Same tensors as kda_recurrent_kernel. The
 * token rows go through shared memory KDA_STAGE_ROWS at a time, two stages (kda_stage_floats each). A row's
 * arithmetic depends neither on T, nor on where the stages cut, nor on the other sequences of the launch. */
__global__ void __launch_bounds__(KDA_COLUMN_THREADS)
kda_recurrent_columns_kernel(act_out o, act_in q, act_in k, act_in v, const float *g, const float *beta,
                             const __grid_constant__ kda_rec_table seqs, int64_t H, int64_t dk, int64_t dv) {
    cuda_pdl_begin();
    extern __shared__ float column_smem[];
    const kda_rec_seq &sq = seqs.seq[blockIdx.z];
    const int tid = threadIdx.x;
    const int64_t h = blockIdx.x, col0 = (int64_t)blockIdx.y * KDA_COLS, col = col0 + tid / KDA_SPLIT;
    const int quarter = tid % KDA_SPLIT, rows = (int)(dk / KDA_SPLIT), i0 = quarter * rows;
    const bool owns = col < dv;
    const int64_t slot_size = H * dk * dv, head = h * dk * dv, dkp = dk + KDA_SPLIT;
    const int64_t stage_floats = kda_stage_floats(dk);

    /* stage layout (kda_stage_floats): the offsets within one stage */
    const int64_t at_k = 0, at_q = KDA_STAGE_ROWS * dkp, at_decay = 2 * KDA_STAGE_ROWS * dkp;
    const int64_t at_v = 3 * KDA_STAGE_ROWS * dkp, at_beta = at_v + KDA_STAGE_ROWS * KDA_COLS;
    const int64_t at_slot = at_beta + KDA_STAGE_ROWS;

    /* Rows t0 .. t0 + nt of the sequence into registers (loads issued, not waited for): thread i < dk takes element
     * i of every staged row of k, q and g (n = part * KDA_STAGE_ROWS + row), and two of the rows' v values. */
    const bool loads_kqg = tid < dk;
    const auto load = [&](kda_stage_regs &r, int64_t t0, int nt) {
#pragma unroll
        for (int n = 0; n < KDA_STAGE_KQG; n++) {
            const int part = n / KDA_STAGE_ROWS, tt = n % KDA_STAGE_ROWS;
            const int64_t at = ((sq.row0 + t0 + tt) * H + h) * dk + tid;
            r.kqg[n] = !loads_kqg || tt >= nt ? 0.0f : part == 0 ? k[at] : part == 1 ? q[at] : g[at];
        }
#pragma unroll
        for (int n = 0; n < KDA_STAGE_V; n++) {
            const int e = tid + KDA_COLUMN_THREADS * n, tt = e / KDA_COLS;
            const int64_t c = col0 + e % KDA_COLS;
            r.v[n] = tt < nt && c < dv ? v[((sq.row0 + t0 + tt) * H + h) * dv + c] : 0.0f;
        }
        if (tid < nt) {
            r.beta = beta[(sq.row0 + t0 + tid) * H + h];
            r.slot = sq.slots[1 + t0 + tid];
        }
    };
    /* ... and from registers into a stage: decay = exp(g); element i of a row at i + i / rows (the quarters' pads) */
    const int padded = tid + (rows > 0 ? tid / rows : 0);
    const auto store = [&](float *stage, const kda_stage_regs &r, int nt) {
#pragma unroll
        for (int n = 0; n < KDA_STAGE_KQG; n++) {
            const int part = n / KDA_STAGE_ROWS, tt = n % KDA_STAGE_ROWS;
            if (loads_kqg && tt < nt) stage[part * KDA_STAGE_ROWS * dkp + tt * dkp + padded] =
                part == 2 ? expf(r.kqg[n]) : r.kqg[n];
        }
#pragma unroll
        for (int n = 0; n < KDA_STAGE_V; n++) stage[at_v + tid + KDA_COLUMN_THREADS * n] = r.v[n];
        if (tid < nt) {
            stage[at_beta + tid] = r.beta;
            ((int32_t *)stage)[at_slot + tid] = r.slot;
        }
    };

    float s[KDA_MAX_QUARTER];   /* S[i0 + r, col] */
    const float *state_in = sq.states + (int64_t)sq.slots[0] * slot_size + head;
#pragma unroll
    for (int r = 0; r < KDA_MAX_QUARTER; r++) s[r] = owns && r < rows ? state_in[(i0 + r) * dv + col] : 0.0f;

    kda_stage_regs next;
    if (sq.T > 0) {
        const int nt = (int)(sq.T < KDA_STAGE_ROWS ? sq.T : KDA_STAGE_ROWS);
        load(next, 0, nt);
        store(column_smem, next, nt);
    }
    __syncthreads();
    int stage_no = 0;
    for (int64_t t0 = 0; t0 < sq.T; t0 += KDA_STAGE_ROWS, stage_no ^= 1) {
        const int nt = (int)(sq.T - t0 < KDA_STAGE_ROWS ? sq.T - t0 : KDA_STAGE_ROWS);
        const int64_t t1 = t0 + KDA_STAGE_ROWS;
        const int n_next = (int)(sq.T - t1 < KDA_STAGE_ROWS ? sq.T - t1 : KDA_STAGE_ROWS);
        if (n_next > 0) load(next, t1, n_next);
        const float *stage = column_smem + stage_no * stage_floats;
        for (int tt = 0; tt < nt; tt++) {
            const int64_t row = sq.row0 + t0 + tt;
            const float *k_t = stage + at_k + tt * dkp + quarter * (rows + 1);   /* this lane's quarter */
            const float *q_t = stage + at_q + tt * dkp + quarter * (rows + 1);
            const float *decay = stage + at_decay + tt * dkp + quarter * (rows + 1);

            /* S <- S * exp(g) by rows; u = beta (v - S^T k): the quarter's sum, then the four added by shuffles
             * (lanes 4c .. 4c+3 hold column c; both orders of an addition give the same bits, so all four
             * agree). Every rounding is spelled out: the bits must not depend on how the compiler contracts. */
            float mem = 0.0f;
#pragma unroll
            for (int r = 0; r < KDA_MAX_QUARTER; r++)
                if (r < rows) {
                    s[r] = __fmul_rn(s[r], decay[r]);
                    mem = __fmaf_rn(s[r], k_t[r], mem);
                }
            mem = __fadd_rn(mem, __shfl_xor_sync(0xffffffffu, mem, 1));
            mem = __fadd_rn(mem, __shfl_xor_sync(0xffffffffu, mem, 2));
            const float v_t = stage[at_v + tt * KDA_COLS + tid / KDA_SPLIT];
            const float u = __fmul_rn(stage[at_beta + tt], __fsub_rn(v_t, mem));
            /* S <- S + k u^T; o = S^T q */
            float out = 0.0f;
#pragma unroll
            for (int r = 0; r < KDA_MAX_QUARTER; r++)
                if (r < rows) {
                    s[r] = __fmaf_rn(k_t[r], u, s[r]);
                    out = __fmaf_rn(s[r], q_t[r], out);
                }
            out = __fadd_rn(out, __shfl_xor_sync(0xffffffffu, out, 1));
            out = __fadd_rn(out, __shfl_xor_sync(0xffffffffu, out, 2));
            if (owns && quarter == 0) o.store((row * H + h) * dv + col, out);
            /* each thread writes only its own part of its column, which it alone reads */
            const int32_t slot = ((const int32_t *)stage)[at_slot + tt];
            if (owns && slot >= 0) {
                float *snap = sq.states + (int64_t)slot * slot_size + head;
#pragma unroll
                for (int r = 0; r < KDA_MAX_QUARTER; r++)
                    if (r < rows) snap[(i0 + r) * dv + col] = s[r];
            }
        }
        /* The other stage was last read before the previous barrier: fill it, then one barrier for both. */
        if (n_next > 0) store(column_smem + (stage_no ^ 1) * stage_floats, next, n_next);
        __syncthreads();
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * The chunked form (prefill, behind GLM53_CUDA_KDA_CHUNKED; docs/cuda.md). Why: the column-split kernel above is
 * latency-bound (each token is two dependent sums over the state's rows, and tokens follow one another): 11 ms a
 * layer for 8,192 tokens at 64 heads of 128 x 128 on the H100. Over a chunk of C = 32 rows from the state S0 before
 * it, the recurrence is a few dense products with no dependence between tokens (the WY / UT form; the derivation,
 * and a CPU model of exactly these kernels checked against the recurrence, in tests/c/test_kda_chunked.c):
 *   b_t = g_0 + ... + g_t (per key channel),  A[t,s] = sum_c k_t k_s exp(b_t - b_s) (s < t),
 *   T = (I + Diag(beta) A)^-1,  W = T Diag(beta) (exp(b) * K),  Ut = T Diag(beta) V,  Qb = exp(b) * Q,
 *   Mqk[t,s] = sum_c q_t k_s exp(b_t - b_s) (s <= t),  Kd[s] = exp(b_last - b_s) * k_s,  decay = exp(b_last)
 *   U = Ut - W S0,   O = Qb S0 + Mqk U,   S_C = decay * S0 + Kd^T U
 * No exponent is positive, and each is a sum of the g it spans taken from at most a sub-chunk (16 rows) away
 * (pairwise inside a sub-chunk, through the boundary between the two across it), so no factor overflows and none
 * near 1 carries the rounding of a long prefix sum.
 *
 * Two kernels per piece of the batch's chunks:
 *   kda_chunk_intra_kernel, a block per (chunk, head, sequence), 256 threads (two per key channel; two blocks a
 *     multiprocessor): everything above that does not depend on S0 (A and Mqk, T by forward substitution, W, Ut,
 *     Qb, Kd, decay) into F32 scratch, kda_chunk_floats(dk, dv) floats a chunk and head (70,144 bytes at 128 x 128).
 *   kda_chunk_inter_kernel, a block per (head, 64 state columns, sequence), 512 threads (one block a
 *     multiprocessor), walks the sequence's chunks in order with its part of S: U = Ut - W S and Qb S (one product
 *     of [W; Qb] [64, dk] by S, the key rows in two halves), O, then S_C; each chunk's scratch is copied into
 *     shared memory (cp.async) while the one before is computed.
 *   A chunk with a row whose state the ring keeps (slots[1 + t] >= 0: the last `ring` rows of a prefill) walks
 *     its rows instead of taking S_C: S = exp(g_t) * S + k_t u_t^T with the chunk's u, the token kernel's
 *     operations for that update, writing each state asked for. The last row's state always goes to a slot (the
 *     contract), so the state that ends a sequence is a walked one.
 * The products are F32 FMAs on the CUDA cores, each a sum in a fixed order (tests/c/test_kda_chunked.c models
 * them, the kernels' orders included: [W; Qb] S as two halves of the key rows added, the pairwise decays as
 * exp2f((P_t - P_s) log2(e))); each of them is a tile product that tensor cores could take over (3xTF32 or
 * split BF16 to keep F32 accuracy).
 *
 * Cost per chunk and head at dk = dv = 128: intra 0.56 MFLOP (A and Mqk 528 pairs x 128 x 2, W and Ut 528 x 128
 * each, T 5 k) and 41 k exponentials; inter 3.3 MFLOP (2 x 32 x 128 x 128 for [W; Qb] S, 528 x 128 for Mqk U,
 * 32 x 128 x 128 for Kd^T U). 8,192 tokens x 64 heads = 16,384 chunk-heads: 63 GFLOP, 1.3 ms at the ~50 TFLOP/s
 * of F32 FMAs an H100 sustains, against 11 ms for the token kernel; scratch traffic 1.15 GB written and read
 * once more, about 0.7 ms of HBM if it did not overlap (the inter kernel's copies run ahead of its products).
 * Expected about 1.5-2 ms a layer; measured on the H100 (2026-12-07, 8,192 tokens): 3.2 ms intra + 2.7 ms inter a
 * layer (Nsight Compute on a call of 2 chunks, grid (2, 64): intra 53 us a block, 4 warps a multiprocessor, 16% of
 * issue slots busy, 22 of 32 threads active (most warps ran both kinds of pair), 17 k instructions a warp; inter
 * 8 warps, 27% busy, waiting on shared-memory loads: latency-bound, not at their FLOPs), against 9.6 ms for the
 * token kernel. Hence: intra 256 threads, two blocks a multiprocessor (16 warps), pairs of one kind a warp, exp2f
 * for the pairwise decays, W beside Kd and Ut, about 30 k instructions a block instead of 69 k; inter 512 threads
 * (16 warps), phase A split over the key rows; measured on the H100 at 15:40 the same day: 2.2 ms intra + 2.6 ms
 * inter a layer. The inter kernel's floor on the CUDA cores is about 3.2 us a chunk at 100% FMA issue (0.8 ms a
 * layer); past that, tensor cores.
 *
 * Precision: the sums are reordered, so the chunked form agrees with the CPU op (and with the token kernel) to F32
 * rounding, not bit for bit; prefill in pieces of different sizes agrees to rounding. Decode and verification
 * (fewer than KDA_CHUNKED_MIN_ROWS rows) keep the token kernel and its bits.
 */
enum {
    KDA_CHUNK = 32,               /* rows a chunk */
    KDA_SUB = 16,                 /* rows a sub-chunk */
    KDA_CHUNK_MAX_DK = 128,       /* key widths the chunked kernels take */
    KDA_CHUNKED_MIN_ROWS = 64,    /* a sequence of fewer rows keeps the token kernel (decode, verification) */
    KDA_INTRA_THREADS = 256,      /* two threads per key channel: one per sub-chunk, or one per product */
    KDA_INTER_COLS = 64,          /* state columns an inter-chunk block carries */
    KDA_INTER_THREADS = 512,      /* 32 x 16 threads: row groups x groups of 4 columns */
    KDA_CHUNK_PAIRS = KDA_CHUNK * (KDA_CHUNK + 1) / 2,   /* (t, s), s <= t */
    KDA_DECAY_PAIRS = 2 * KDA_SUB * (KDA_SUB - 1) / 2,   /* s < t in one sub-chunk: a pairwise exponential a channel */
    KDA_MQK_STRIDE = KDA_CHUNK + 4,                      /* shared rows of A, Mqk, Tb: 16-byte multiples */
    KDA_INTER_STRIDE = KDA_INTER_COLS + 4,               /* shared rows of S, U and Qb S */
};
static_assert(KDA_CHUNK == 2 * KDA_SUB, "a chunk is two sub-chunks: one block of pairs across them");
static_assert(KDA_CHUNK == 32, "the forward substitution: a lane per column of T; phase B: 2 rows x 16 groups");
static_assert(KDA_INTRA_THREADS == 2 * KDA_CHUNK_MAX_DK, "the intra kernel: two threads per key channel");
static_assert(KDA_DECAY_PAIRS <= KDA_INTRA_THREADS, "the intra kernel: the pairwise-decay pairs in one round");
static_assert(KDA_INTER_THREADS == 32 * (KDA_INTER_COLS / 4) && KDA_CHUNK_MAX_DK == 32 * 4 && KDA_CHUNK == 32,
              "the inter kernel: 32 row groups (4 rows of W or Qb and half the key rows, 1 of O, 4 of S) x 16 groups "
              "of 4 columns");

/* One sequence's part of a piece: its chunks chunk0 .. chunk0 + n_chunks - 1 (chunk c = rows 32c .. 32c + 31 of the
 * sequence, the last one partial), whose scratch starts at chunk index `base` of the piece. */
struct kda_chunk_seq {
    float         *states;     /* [ring, H, dk, dv] */
    const int32_t *slots;      /* [T + 1], as kda_rec_seq's */
    int32_t        row0, T;    /* the sequence's rows of the batch */
    int32_t        chunk0, n_chunks, base;
    int32_t        carry;      /* KDA_CARRY_IN: S0 from the carry buffer, not slots[0]; KDA_CARRY_OUT: S to it */
};
enum { KDA_CARRY_IN = 1, KDA_CARRY_OUT = 2 };

struct kda_chunk_table {
    kda_chunk_seq seq[KDA_SEQS_PER_LAUNCH];
};

/* A chunk-head's scratch, offsets in floats: W, Qb, Kd [KDA_CHUNK, dk], Ut [KDA_CHUNK, dv], Mqk [KDA_CHUNK,
 * KDA_CHUNK] (zero above the diagonal), decay [dk]. Every part a multiple of 4 floats (dk, dv multiples of 4). */
struct kda_chunk_layout {
    int64_t W, Qb, Kd, Ut, Mqk, decay, size;
};
__host__ __device__ inline kda_chunk_layout kda_chunk_layout_of(int64_t dk, int64_t dv) {
    kda_chunk_layout l;
    l.W = 0, l.Qb = KDA_CHUNK * dk, l.Kd = 2 * KDA_CHUNK * dk, l.Ut = 3 * KDA_CHUNK * dk;
    l.Mqk = l.Ut + KDA_CHUNK * dv, l.decay = l.Mqk + KDA_CHUNK * KDA_CHUNK, l.size = l.decay + dk;
    return l;
}

/* Dynamic shared memory of the intra kernel, floats (dkp = dk + 4): k, q, g, P [KDA_CHUNK][dkp]; the factored
 * block's rows kt1, qt1, ks0 [KDA_SUB][dkp]; A, Mqk, Tb [KDA_CHUNK][KDA_MQK_STRIDE]; beta [KDA_CHUNK]. */
static inline int64_t kda_intra_smem_floats(int64_t dk) {
    return (4 * KDA_CHUNK + 3 * KDA_SUB) * (dk + 4) + 3 * KDA_CHUNK * KDA_MQK_STRIDE + KDA_CHUNK;
}

/* out[t * stride] = sum_{u <= t} Tb[t][u] x[u] for the chunk's rows t, in u order: Tb (lower triangular, rows of
 * `ld` floats in shared memory) applied to one key channel or value column x. */
__device__ inline void kda_tril_apply(float *out, int64_t stride, const float *Tb, int64_t ld,
                                      const float (&x)[KDA_CHUNK]) {
#pragma unroll
    for (int t = 0; t < KDA_CHUNK; t++) {
        float acc = 0.0f;
#pragma unroll
        for (int u = 0; u <= t; u++) acc = fmaf(Tb[t * ld + u], x[u], acc);
        out[t * stride] = acc;
    }
}

/* Both intra kernels' T = (I + Diag(beta) A)^-1 by forward substitution, lane r of one warp owning column r in
 * registers: T[t][r] = -beta_t sum_{s<t} A[t][s] T[s][r] (T[s][r] = 0 for s < r, so the sum runs from r in
 * effect); then Tb = T Diag(beta) into s_Tb. A, Tb [KDA_CHUNK][M], beta [KDA_CHUNK] in shared memory; the sums of
 * a row overlap the previous row's. */
__device__ __forceinline__ void kda_forward_substitution(const float *s_A, const float *s_beta, float *s_Tb, int64_t M,
                                                         int r) {
    float tc[KDA_CHUNK];
#pragma unroll
    for (int t = 0; t < KDA_CHUNK; t++) {
        float acc = 0.0f;
#pragma unroll
        for (int s = 0; s < t; s++) acc = fmaf(s_A[t * M + s], tc[s], acc);
        tc[t] = t < r ? 0.0f : t == r ? 1.0f : -s_beta[t] * acc;
    }
    const float br = s_beta[r];
#pragma unroll
    for (int t = 0; t < KDA_CHUNK; t++) s_Tb[t * M + r] = tc[t] * br;
}

/* Both intra kernels' first phase. Sub-chunk `half` of the rows, by key channel i (coalesced over i), zero past n;
 * P the running sum of g from the sub-chunk's first row; then this channel of the factored block: half 0 the
 * ks0 = k_s exp(g_{s+1} + ... + g_15) (s < 16), half 1 the kt1 = k_t exp(P_t) and qt1 = q_t exp(P_t) (t >= 16);
 * beta; A and Mqk ([KDA_CHUNK][M] each from s_A) zeroed. Each thread reads back only what it wrote; the caller's
 * barrier follows. Shared rows of dkp floats: k, q, g, P [KDA_CHUNK], kt1, qt1, ks0 [KDA_SUB]. */
__device__ __forceinline__ void kda_intra_stage(act_in q, act_in k, const float *g, const float *beta,
                                                const kda_chunk_seq &sq, int64_t t0, int n, int64_t h, int64_t H,
                                                int64_t dk, int64_t dkp, int64_t M, int tid, int half, int i,
                                                float *s_k, float *s_q, float *s_g, float *s_P, float *kt1, float *qt1,
                                                float *ks0, float *s_A, float *s_beta) {
    if (i < dk) {
        float P = 0.0f;
        for (int r = 0; r < KDA_SUB; r++) {
            const int t = half * KDA_SUB + r;
            const int64_t at = ((sq.row0 + t0 + t) * H + h) * dk + i;
            const bool in = t < n;
            const float gv = in ? g[at] : 0.0f;
            P = (r > 0 ? P : 0.0f) + gv;
            s_k[t * dkp + i] = in ? k[at] : 0.0f;
            s_q[t * dkp + i] = in ? q[at] : 0.0f;
            s_g[t * dkp + i] = gv;
            s_P[t * dkp + i] = P;
        }
        if (half == 0) {
            float after = 0.0f;
            for (int s = KDA_SUB - 1; s >= 0; s--) {
                ks0[s * dkp + i] = s_k[s * dkp + i] * expf(after);
                after += s_g[s * dkp + i];
            }
        } else {
            for (int t = 0; t < KDA_SUB; t++) {
                const float e = expf(s_P[(KDA_SUB + t) * dkp + i]);
                kt1[t * dkp + i] = s_k[(KDA_SUB + t) * dkp + i] * e;
                qt1[t * dkp + i] = s_q[(KDA_SUB + t) * dkp + i] * e;
            }
        }
    }
    if (tid < KDA_CHUNK) s_beta[tid] = tid < n ? beta[(sq.row0 + t0 + tid) * H + h] : 0.0f;
    for (int e = tid; e < 2 * KDA_CHUNK * M; e += blockDim.x) s_A[e] = 0.0f;   /* A and Mqk: zero above the diagonal */
}

/* grid (chunks of the piece's longest entry, H, entries), KDA_INTRA_THREADS threads, kda_intra_smem_floats(dk)
 * floats of dynamic shared memory (two blocks a multiprocessor: 16 warps). q, k [N,H,dk], v [N,H,dv] activations,
 * g [N,H,dk], beta [N,H] F32; scratch [chunks of the piece][H][kda_chunk_layout.size] F32. The arithmetic of
 * tests/c/test_kda_chunked.c's model_intra up to FMA contraction; the pairwise decays of A and Mqk are
 * exp2f((P_t - P_s) log2(e)) there too (a MUFU op and a fix-up where expf takes about eight instructions; the
 * difference is formed before the scaling, which keeps expf's accuracy there).
 * Two threads per key channel i (half = tid / 128): the rows are loaded by sub-chunk (half h takes rows 16h ..
 * 16h + 15: their running sums restart at the sub-chunk), the pairs of A and Mqk go in two classes so that a warp
 * never runs both (the 240 pairs s < t of one sub-chunk, each with 128 exponentials, one round of 240 threads;
 * then the 256 factored pairs and the 32 pairs t = s, plain dot products), and the last part runs W (half 0)
 * beside Kd and Ut (half 1). Until 2026-12-07 it had 128 threads, a pair order that put both kinds of pair in most
 * warps, and W, Kd and Ut one after another: 53 us a block, 16% of issue slots busy (Nsight Compute). */
__global__ void __launch_bounds__(KDA_INTRA_THREADS, 2)
kda_chunk_intra_kernel(act_in q, act_in k, act_in v, const float *g, const float *beta,
                       const __grid_constant__ kda_chunk_table seqs, float *scratch, int64_t H, int64_t dk,
                       int64_t dv) {
    cuda_pdl_begin();
    const kda_chunk_seq &sq = seqs.seq[blockIdx.z];
    if ((int)blockIdx.x >= sq.n_chunks) return;
    const int tid = threadIdx.x, half = tid / KDA_CHUNK_MAX_DK, i = tid % KDA_CHUNK_MAX_DK;
    const int64_t h = blockIdx.y, t0 = (int64_t)(sq.chunk0 + blockIdx.x) * KDA_CHUNK;
    const int n = (int)(sq.T - t0 < KDA_CHUNK ? sq.T - t0 : KDA_CHUNK);   /* rows of this chunk; the rest zero */
    const int64_t dkp = dk + 4, M = KDA_MQK_STRIDE;
    const kda_chunk_layout lay = kda_chunk_layout_of(dk, dv);
    float *out = scratch + ((int64_t)(sq.base + blockIdx.x) * H + h) * lay.size;
    const float log2e = 1.4426950408889634f;

    extern __shared__ __align__(16) float intra_smem[];
    float *s_k = intra_smem, *s_q = s_k + KDA_CHUNK * dkp, *s_g = s_q + KDA_CHUNK * dkp, *s_P = s_g + KDA_CHUNK * dkp;
    float *kt1 = s_P + KDA_CHUNK * dkp, *qt1 = kt1 + KDA_SUB * dkp, *ks0 = qt1 + KDA_SUB * dkp;
    float *s_A = ks0 + KDA_SUB * dkp, *s_M = s_A + KDA_CHUNK * M, *s_Tb = s_M + KDA_CHUNK * M;
    float *s_beta = s_Tb + KDA_CHUNK * M;

    kda_intra_stage(q, k, g, beta, sq, t0, n, h, H, dk, dkp, M, tid, half, i, s_k, s_q, s_g, s_P, kt1, qt1, ks0, s_A,
                    s_beta);
    __syncthreads();

    /* A[t][s] (s < t) and Mqk[t][s] (s <= t), a pair a thread, sums over the channels in order. Pairs p < 240:
     * s < t in one sub-chunk, the pairwise decay exp2(P_t - P_s) (no exponent positive). The rest: t = 16 + c / 16,
     * s = c % 16 for c = p - 240 < 256 (across the sub-chunks: the factored rows), then t = s (decay 1, Mqk only).
     * Warp 7 of the first round holds both kinds (16 lanes each); every other warp one. */
    for (int p = tid; p < KDA_CHUNK_PAIRS; p += blockDim.x) {
        float a = 0.0f, m = 0.0f;
        int t, s;
        if (p < KDA_DECAY_PAIRS) {
            const int sub = p / (KDA_DECAY_PAIRS / 2), w = p % (KDA_DECAY_PAIRS / 2);
            int tt = 1;
            while ((tt + 1) * tt / 2 <= w) tt++;
            t = sub * KDA_SUB + tt, s = sub * KDA_SUB + w - tt * (tt - 1) / 2;
            const float *kt = s_k + t * dkp, *qt = s_q + t * dkp, *ks = s_k + s * dkp;
            const float *Pt = s_P + t * dkp, *Ps = s_P + s * dkp;
            for (int64_t c = 0; c < dk; c += 4) {
                const float4 k4 = *(const float4 *)(kt + c), q4 = *(const float4 *)(qt + c);
                const float4 s4 = *(const float4 *)(ks + c), pt = *(const float4 *)(Pt + c);
                const float4 ps = *(const float4 *)(Ps + c);
                const float kv[4] = {k4.x, k4.y, k4.z, k4.w}, qv[4] = {q4.x, q4.y, q4.z, q4.w};
                const float sv[4] = {s4.x, s4.y, s4.z, s4.w}, tv[4] = {pt.x, pt.y, pt.z, pt.w};
                const float uv[4] = {ps.x, ps.y, ps.z, ps.w};
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const float ke = sv[r] * exp2f((tv[r] - uv[r]) * log2e);
                    a = fmaf(kv[r], ke, a);
                    m = fmaf(qv[r], ke, m);
                }
            }
        } else {
            const int c = p - KDA_DECAY_PAIRS;
            const float *kt, *qt, *ks;
            if (c < KDA_SUB * KDA_SUB) {
                t = KDA_SUB + c / KDA_SUB, s = c % KDA_SUB;
                kt = kt1 + (t - KDA_SUB) * dkp, qt = qt1 + (t - KDA_SUB) * dkp, ks = ks0 + s * dkp;
            } else {
                t = s = c - KDA_SUB * KDA_SUB;
                kt = s_k + t * dkp, qt = s_q + t * dkp, ks = s_k + s * dkp;
            }
            for (int64_t c4 = 0; c4 < dk; c4 += 4) {
                const float4 k4 = *(const float4 *)(kt + c4), q4 = *(const float4 *)(qt + c4);
                const float4 s4 = *(const float4 *)(ks + c4);
                a = fmaf(k4.x, s4.x, a), a = fmaf(k4.y, s4.y, a), a = fmaf(k4.z, s4.z, a), a = fmaf(k4.w, s4.w, a);
                m = fmaf(q4.x, s4.x, m), m = fmaf(q4.y, s4.y, m), m = fmaf(q4.z, s4.z, m), m = fmaf(q4.w, s4.w, m);
            }
        }
        if (s < t) s_A[t * M + s] = a;
        s_M[t * M + s] = m;
    }
    __syncthreads();

    /* T and Tb by forward substitution: one warp */
    if (tid < KDA_CHUNK) {
        kda_forward_substitution(s_A, s_beta, s_Tb, M, tid);
    }
    __syncthreads();

    if (half == 0) {
        /* By key channel: b = g_0 + ... + g_u, Qb = exp(b) q, W = Tb (exp(b) k), decay = exp(b_last). */
        if (i < dk) {
            float kb[KDA_CHUNK], b = 0.0f;
#pragma unroll
            for (int u = 0; u < KDA_CHUNK; u++) {
                b += s_g[u * dkp + i];
                const float eb = expf(b);
                out[lay.Qb + u * dk + i] = s_q[u * dkp + i] * eb;
                kb[u] = s_k[u * dkp + i] * eb;
            }
            out[lay.decay + i] = expf(b);
            kda_tril_apply(out + lay.W + i, dk, s_Tb, M, kb);
        }
    } else {
        /* By key channel: Kd = exp(g_{u+1} + ... + g_31) k summed backwards. */
        if (i < dk) {
            float after = 0.0f;
            for (int u = KDA_CHUNK - 1; u >= 0; u--) {
                out[lay.Kd + u * dk + i] = s_k[u * dkp + i] * expf(after);
                after += s_g[u * dkp + i];
            }
        }
        /* By value column: Ut = Tb V. (The empty asm keeps the compiler from hoisting Tb's 528 loads out of the
         * loop, which would hold them all in registers for the columns past the first and spill.) */
        for (int64_t j = i; j < dv; j += KDA_CHUNK_MAX_DK) {
            asm volatile("" ::: "memory");
            float vc[KDA_CHUNK];
#pragma unroll
            for (int u = 0; u < KDA_CHUNK; u++) vc[u] = u < n ? v[((sq.row0 + t0 + u) * H + h) * dv + j] : 0.0f;
            kda_tril_apply(out + lay.Ut + j, dv, s_Tb, M, vc);
        }
    }
    for (int e = tid; e < KDA_CHUNK * KDA_CHUNK; e += blockDim.x)
        out[lay.Mqk + e] = s_M[(e / KDA_CHUNK) * M + e % KDA_CHUNK];
}

/* ------------------------------------------------------------------------------------------------------------
 * The intra kernel on tensor cores (GLM53_CUDA_KDA_INTRA_MMA, off by default until a GPU has run it). Why: the F32
 * kernel above is latency-bound, not FLOP-bound: 2.25 ms a layer at an 8,192-token prefill of 64 heads of 128 x 128
 * on the H100 (16,384 chunk-heads), against a floor of about 0.35 ms for its 9 GFLOP and 0.67 G exponentials on the
 * CUDA cores and about 0.4 ms for its 1.15 GB of scratch written; each pair of A and Mqk is a serial 128-term chain
 * of FMAs and exponentials, and T's rows, W and Ut are more such chains. Here every product is an mma.sync and the
 * exponentials are only the ones the factors need.
 *
 * The pairs of A and Mqk as products. A pair's decay exp(b_t - b_s) = exp(g_{s+1} + ... + g_t) factors at any
 * boundary row r + 1 between them (s <= r < t) as exp(g_{r+1} + ... + g_t) * exp(g_{s+1} + ... + g_r): both
 * exponents <= 0, so neither factor overflows, and each spans at most 16 rows (the F32 kernel's precision rule for
 * its exponents). The 496 pairs s < t of the chunk fall into the blocks of a binary tree of boundaries:
 *   level 16: t in rows 16 .. 31, s in 0 .. 15, boundary 16 (the F32 kernel's factored block: kt1, qt1, ks0);
 *   level B = 8, 4, 2, 1, in each sub-chunk: blocks of 2B rows, t in the block's second half, s in its first,
 *     boundary its middle: T side x_t = k_t exp(P_t - P_r), y_t = q_t exp(P_t - P_r), S side z_s = k_s exp(P_r - P_s),
 *     r the last row of the first half, P the sub-chunk's running sums of g (the F32 kernel's exponents, as
 *     exp2f((P_x - P_y) log2(e))), so A[t][s] = x_t . z_s and Mqk[t][s] = y_t . z_s.
 * A level's tile (mma.sync m16n8k8 .tf32): A-operand rows 0 .. 7 are x of 8 T rows, rows 8 .. 15 the y of the same
 * rows (one factor serves both), B-operand columns the z of 8 S rows; at level 16 the 8 T rows and 8 S rows are any
 * of 2 x 2 halves (4 tiles), at levels 8 .. 1 they are those of one sub-chunk (2 tiles each), and a tile's entries
 * whose t and s lie in different blocks are dropped: 12 tiles of 16 k-steps at dk 128. Each element of x, y, z at
 * levels 8 .. 1 is made (one exponential a row, channel and level) and split exactly once, in the registers of the
 * lane whose fragment holds it; level 16's staged kt1, qt1, ks0 are split once by each of the two tiles that read
 * them. The pairs take 20 k exponentials a chunk-head (5 levels x 32 rows x 128 channels), against the F32 kernel's
 * 35 k (31 k pairwise and level 16's 4 k). Mqk[t][t] (decay 1) are 32 plain dot products on the CUDA cores.
 * W = Tb (exp(b) K) and Ut = Tb V as [32 x 32] by [32 x dk] and [32 x dv] products: n-tiles of 8 columns spread
 * over the 8 warps, Tb's fragments split once a warp (m-tile 0 stops at u = 15: Tb is lower triangular), exp(b) K
 * staged in shared memory by the channel threads that make Qb, V read once from global memory into the B
 * fragments (each value feeds one warp's two m-tiles).
 *
 * Block: 256 threads (8 warps), the F32 kernel's shared memory (106,880 bytes at dk 128: two blocks, 16 warps, a
 * multiprocessor), exp(b) K [32][dk + 8] over the factored rows kt1, qt1, ks0 once they are dead. Phases (a barrier
 * after each): 1, the F32 kernel's loads (k, q, g, P, kt1, qt1, ks0, beta); 2, the pair tiles (warp w: level
 * 8 >> (w / 2), sub-chunk w % 2; warps 0-3 also level-16 tile w; warps 4-7 also the 32 diagonal dots); 3, warp 0
 * the forward substitution (as the F32 kernel), warps 1-3 Mqk to scratch, warps 4-7 by channel Qb, decay, Kd and
 * exp(b) K; 4, W and Ut (6 MMA steps of 3 a n-tile). The Qb, Kd, decay and forward-substitution arithmetic is the
 * F32 kernel's (expf of the running sums, fmaf chains).
 *
 * Precision (3xTF32): an F32 operand a is split as a_hi = tf32(a) (cvt.rna: 11 significant bits, |a - a_hi| <=
 * 2^-11 |a|) and a_lo = tf32(a - a_hi) (a - a_hi exact in F32, rounded to within 2^-22 |a|); a b is taken as
 * a_lo b_hi + a_hi b_lo + a_hi b_hi (three MMAs, the small ones first), each product exact in the MMA's F32
 * accumulation, the dropped a_lo b_lo and the two lo roundings each within 2^-22 |a b|: within 3 x 2^-22 = 12 units
 * of F32 rounding (u = 2^-24) of each term, and the MMA's F32 sums add at most about one u of their partial sum per
 * k-step of 8 (the tensor cores may truncate: count two), (dk / 8) x 3 steps a dot. So a pair's error is within
 * about (12 + 2 x 3 dk / 8) u sum_c |a_c b_c| (108 u at dk 128), against 128 u for the F32 kernel's chain of 128
 * FMAs by the same worst-case bound: the same F32-rounding contract ("agrees with the CPU op to F32 rounding, not
 * bits"), and the tests' tolerances unchanged. Split BF16 would need three parts (hi, mid, lo: 8 bits each) for
 * the same 2^-24 and six MMAs a product at twice TF32's rate: the same tensor time with twice the fragments; two
 * parts give 2^-16 (256 u a term), F32 accuracy lost.
 *
 * Cost and expected time (to be measured: this form has not run on a GPU). A chunk-head: 576 pair MMAs (12 tiles x
 * 16 k-steps x 3) and 32 x 18 = 576 W / Ut MMAs at dk = dv = 128, 2.4 MFLOP of TF32 (4x the useful 0.56 MFLOP:
 * zero tiles and three passes), 40 GFLOP a layer, about 0.1 ms at a few hundred TFLOP/s of mma.sync TF32; the
 * instruction count moves to the element work, which is what remains of the F32 kernel's: per k-step of a pair
 * tile a lane makes 4 exponentials, 6 products and 6 splits from 12 shared loads (about 55 instructions for 3 MMAs),
 * about 9 k warp instructions a chunk-head for the pairs, 2 k for W and Ut, 3 k for the loads, Qb, Kd and T
 * (against about 30 k for the F32 kernel), and no warp holds a 128-term chain. Expected 0.6-0.9 ms a layer (the
 * scratch writes' 0.4 ms floor plus the loads and T's serial chain that do not shrink), against 2.25 ms.
 * ptxas (sm_90a, nvcc 13.0, -O3, -Xptxas -v): 101 registers, 0 bytes stack, no spills, 1 barrier (the F32
 * kernel: 112; 114 before the two shared their first phase and forward substitution), under the 128 that two
 * blocks of 256 threads allow; 106,880 bytes of dynamic shared memory at dk = 128, as the F32 kernel's
 * (kda_intra_smem_floats).
 */

/* x as TF32 hi + lo (3xTF32): hi = tf32(x), lo = tf32(x - hi); x - hi is exact in F32. */
__device__ inline void kda_tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(__fsub_rn(x, __uint_as_float(hi))));
}

/* d[16 x 8] += a[16 x 8] b[8 x 8], mma.sync m16n8k8 TF32 with F32 accumulation. Fragments (lane: fr = lane / 4,
 * fc = lane % 4): a = (fr, fc), (fr + 8, fc), (fr, fc + 4), (fr + 8, fc + 4); b = (k fc, n fr), (k fc + 4, n fr);
 * d = (fr, 2 fc), (fr, 2 fc + 1), (fr + 8, 2 fc), (fr + 8, 2 fc + 1). */
__device__ inline void kda_mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* d += a b to F32 accuracy from split operands: a_lo b_hi and a_hi b_lo first, then a_hi b_hi (a_lo b_lo dropped). */
__device__ inline void kda_mma_3xtf32(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                      const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
    kda_mma_tf32(d, a_lo, b_hi);
    kda_mma_tf32(d, a_hi, b_lo);
    kda_mma_tf32(d, a_hi, b_hi);
}

/* ... the same from F32 fragments, each value split once here. */
__device__ inline void kda_mma_f32(float (&d)[4], const float (&a)[4], const float (&b)[2]) {
    uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2];
#pragma unroll
    for (int e = 0; e < 4; e++) kda_tf32_split(a[e], a_hi[e], a_lo[e]);
#pragma unroll
    for (int e = 0; e < 2; e++) kda_tf32_split(b[e], b_hi[e], b_lo[e]);
    kda_mma_3xtf32(d, a_hi, a_lo, b_hi, b_lo);
}

enum { KDA_MMA_KB_PAD = 8 };   /* exp(b) K rows of dk + 8 floats: a B fragment's loads (u = fc, c = fr) on 32 banks */

/* Whether the tensor-core intra kernel takes these widths: k-steps and W's n-tiles of 8 channels, Ut's of 8 columns. */
static bool kda_intra_mma_fits(int64_t dk, int64_t dv) {
    return dk % 8 == 0 && dk <= KDA_CHUNK_MAX_DK && dv % 8 == 0;
}

/* kda_chunk_intra_kernel's grid, tensors, shared memory and scratch (see the section's comment above). */
__global__ void __launch_bounds__(KDA_INTRA_THREADS, 2)
kda_chunk_intra_mma_kernel(act_in q, act_in k, act_in v, const float *g, const float *beta,
                           const __grid_constant__ kda_chunk_table seqs, float *scratch, int64_t H, int64_t dk,
                           int64_t dv) {
    cuda_pdl_begin();
    const kda_chunk_seq &sq = seqs.seq[blockIdx.z];
    if ((int)blockIdx.x >= sq.n_chunks) return;
    const int tid = threadIdx.x, half = tid / KDA_CHUNK_MAX_DK, i = tid % KDA_CHUNK_MAX_DK;
    const int warp = tid / 32, lane = tid % 32, fr = lane / 4, fc = lane % 4;   /* fragment row and column */
    const int64_t h = blockIdx.y, t0 = (int64_t)(sq.chunk0 + blockIdx.x) * KDA_CHUNK;
    const int n = (int)(sq.T - t0 < KDA_CHUNK ? sq.T - t0 : KDA_CHUNK);   /* rows of this chunk; the rest zero */
    const int64_t dkp = dk + 4, M = KDA_MQK_STRIDE, kbs = dk + KDA_MMA_KB_PAD;
    const int ndk = (int)dk;
    const kda_chunk_layout lay = kda_chunk_layout_of(dk, dv);
    float *out = scratch + ((int64_t)(sq.base + blockIdx.x) * H + h) * lay.size;
    const float log2e = 1.4426950408889634f;

    extern __shared__ __align__(16) float intra_mma_smem[];
    float *s_k = intra_mma_smem, *s_q = s_k + KDA_CHUNK * dkp, *s_g = s_q + KDA_CHUNK * dkp;
    float *s_P = s_g + KDA_CHUNK * dkp;
    float *kt1 = s_P + KDA_CHUNK * dkp, *qt1 = kt1 + KDA_SUB * dkp, *ks0 = qt1 + KDA_SUB * dkp;
    float *s_A = ks0 + KDA_SUB * dkp, *s_M = s_A + KDA_CHUNK * M, *s_Tb = s_M + KDA_CHUNK * M;
    float *s_beta = s_Tb + KDA_CHUNK * M;
    float *s_Kb = kt1;   /* exp(b) K [KDA_CHUNK][kbs], phases 3-4: over kt1, qt1, ks0 (48 rows of dkp >= 32 of kbs) */

    /* Phase 1: the F32 kernel's (kda_intra_stage). */
    kda_intra_stage(q, k, g, beta, sq, t0, n, h, H, dk, dkp, M, tid, half, i, s_k, s_q, s_g, s_P, kt1, qt1, ks0, s_A,
                    s_beta);
    __syncthreads();

    /* Phase 2: the pair tiles. Level 16 (warps 0-3): T rows 16 + 8 (w / 2) + fr (kt1, qt1), S rows 8 (w % 2) + fr
     * (ks0), every entry kept. Channels k0 + fc and k0 + fc + 4 of each k-step. */
    if (warp < 4) {
        const int ti = warp / 2, si = warp % 2;
        const float *kt = kt1 + (8 * ti + fr) * dkp, *qt = qt1 + (8 * ti + fr) * dkp, *ks = ks0 + (8 * si + fr) * dkp;
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = fc; c < ndk; c += 8) {
            const float a[4] = {kt[c], qt[c], kt[c + 4], qt[c + 4]}, b[2] = {ks[c], ks[c + 4]};
            kda_mma_f32(d, a, b);
        }
        const int t = KDA_SUB + 8 * ti + fr, s = 8 * si + 2 * fc;
        s_A[t * M + s] = d[0], s_A[t * M + s + 1] = d[1];
        s_M[t * M + s] = d[2], s_M[t * M + s + 1] = d[3];
    }
    /* Level B = 8 >> (w / 2) in sub-chunk w % 2 (every warp): this lane's T row t (fragment row fr), S row s (B
     * column fr) and their block's last first-half row r; fr / B is the block within the sub-chunk. */
    {
        const int B = 8 >> (warp / 2), sub = warp % 2;
        const int base = sub * KDA_SUB + 2 * B * (fr / B), t = base + B + fr % B, s = base + fr % B, r = base + B - 1;
        const float *kt = s_k + t * dkp, *qt = s_q + t * dkp, *ks = s_k + s * dkp;
        const float *Pt = s_P + t * dkp, *Pr = s_P + r * dkp, *Ps = s_P + s * dkp;
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = fc; c < ndk; c += 8) {
            const float et0 = exp2f((Pt[c] - Pr[c]) * log2e), et1 = exp2f((Pt[c + 4] - Pr[c + 4]) * log2e);
            const float es0 = exp2f((Pr[c] - Ps[c]) * log2e), es1 = exp2f((Pr[c + 4] - Ps[c + 4]) * log2e);
            const float a[4] = {kt[c] * et0, qt[c] * et0, kt[c + 4] * et1, qt[c + 4] * et1};
            const float b[2] = {ks[c] * es0, ks[c + 4] * es1};
            kda_mma_f32(d, a, b);
        }
        /* d: A (d[0], d[1]) and Mqk (d[2], d[3]) of row t at B columns 2 fc, 2 fc + 1, kept in t's block */
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int col = 2 * fc + e;
            if (col / B != fr / B) continue;
            const int s_col = sub * KDA_SUB + 2 * B * (col / B) + col % B;
            s_A[t * M + s_col] = d[e];
            s_M[t * M + s_col] = d[2 + e];
        }
    }
    /* Mqk[t][t] = q_t . k_t (warps 4-7: 4 lanes a row, a quarter of the channels each) */
    if (warp >= 4) {
        const int t = (warp - 4) * 8 + fr;
        float m = 0.0f;
        for (int c = fc; c < ndk; c += 4) m = fmaf(s_q[t * dkp + c], s_k[t * dkp + c], m);
        m += __shfl_xor_sync(0xffffffffu, m, 1);
        m += __shfl_xor_sync(0xffffffffu, m, 2);
        if (fc == 0) s_M[t * M + t] = m;
    }
    __syncthreads();

    if (warp == 0) {
        /* Phase 3, warp 0: T = (I + Diag(beta) A)^-1 by forward substitution, Tb = T Diag(beta): the F32 kernel's. */
        kda_forward_substitution(s_A, s_beta, s_Tb, M, lane);
    } else if (warp < 4) {
        /* warps 1-3: Mqk to scratch */
        for (int e = tid - 32; e < KDA_CHUNK * KDA_CHUNK; e += 3 * 32)
            out[lay.Mqk + e] = s_M[(e / KDA_CHUNK) * M + e % KDA_CHUNK];
    } else if (i < dk) {
        /* warps 4-7, by key channel: b = g_0 + ... + g_u, Qb = exp(b) q, exp(b) k (for W), decay = exp(b_last),
         * then Kd = exp(g_{u+1} + ... + g_31) k summed backwards: the F32 kernel's. */
        float b = 0.0f;
        for (int u = 0; u < KDA_CHUNK; u++) {
            b += s_g[u * dkp + i];
            const float eb = expf(b);
            out[lay.Qb + u * dk + i] = s_q[u * dkp + i] * eb;
            s_Kb[u * kbs + i] = s_k[u * dkp + i] * eb;
        }
        out[lay.decay + i] = expf(b);
        float after = 0.0f;
        for (int u = KDA_CHUNK - 1; u >= 0; u--) {
            out[lay.Kd + u * dk + i] = s_k[u * dkp + i] * expf(after);
            after += s_g[u * dkp + i];
        }
    }
    __syncthreads();

    /* Phase 4: W = Tb (exp(b) K) and Ut = Tb V by n-tiles of 8 columns (W's dk / 8, then Ut's dv / 8), tile j on warp
     * j % 8. Tb's A fragments split once: f = 0, 1 m-tile 0 (rows 0 .. 15) at k-steps 0, 1 (u < 16: Tb is lower
     * triangular, the rest of its row zero); f = 2 .. 5 m-tile 1 (rows 16 .. 31) at k-steps 0 .. 3. */
    uint32_t tb_hi[6][4], tb_lo[6][4];
#pragma unroll
    for (int f = 0; f < 6; f++) {
        const int mt = f < 2 ? 0 : 1, ks = f < 2 ? f : f - 2;
        const float *Tf = s_Tb + (16 * mt + fr) * M + 8 * ks + fc;
        const float a[4] = {Tf[0], Tf[8 * M], Tf[4], Tf[8 * M + 4]};
#pragma unroll
        for (int e = 0; e < 4; e++) kda_tf32_split(a[e], tb_hi[f][e], tb_lo[f][e]);
    }
    const int n_w = ndk / 8, n_tiles = n_w + (int)(dv / 8);
    for (int j = warp; j < n_tiles; j += KDA_INTRA_THREADS / 32) {
        const bool is_w = j < n_w;
        const int64_t col = (int64_t)(is_w ? j : j - n_w) * 8 + fr;   /* this lane's B column */
        float bv[4][2];   /* k-step ks: B[u = 8 ks + fc][col], B[8 ks + fc + 4][col] */
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int u = 8 * ks + fc + 4 * e;
                bv[ks][e] = is_w ? s_Kb[u * kbs + col] : u < n ? v[((sq.row0 + t0 + u) * H + h) * dv + col] : 0.0f;
            }
        uint32_t b_hi[4][2], b_lo[4][2];
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
#pragma unroll
            for (int e = 0; e < 2; e++) kda_tf32_split(bv[ks][e], b_hi[ks][e], b_lo[ks][e]);
        float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < 2; ks++) kda_mma_3xtf32(d0, tb_hi[ks], tb_lo[ks], b_hi[ks], b_lo[ks]);
#pragma unroll
        for (int ks = 0; ks < 4; ks++) kda_mma_3xtf32(d1, tb_hi[2 + ks], tb_lo[2 + ks], b_hi[ks], b_lo[ks]);
        /* d0: rows fr, fr + 8; d1: rows 16 + fr, 24 + fr; columns 2 fc, 2 fc + 1 of the tile (8-byte aligned) */
        const int64_t ld = is_w ? dk : dv, c0 = col - fr + 2 * fc;
        float *dst = out + (is_w ? lay.W : lay.Ut) + c0;
        *(float2 *)(dst + fr * ld) = make_float2(d0[0], d0[1]);
        *(float2 *)(dst + (fr + 8) * ld) = make_float2(d0[2], d0[3]);
        *(float2 *)(dst + (16 + fr) * ld) = make_float2(d1[0], d1[1]);
        *(float2 *)(dst + (24 + fr) * ld) = make_float2(d1[2], d1[3]);
    }
}

/* One chunk's scratch in the inter kernel's shared memory, floats (dkp = dk + 4): W, Qb, Kd [KDA_CHUNK][dkp], Mqk
 * [KDA_CHUNK][KDA_MQK_STRIDE], the block's columns of Ut [KDA_CHUNK][KDA_INTER_COLS], decay [dkp]. */
__host__ __device__ inline int64_t kda_inter_stage_floats(int64_t dk) {
    return 3 * KDA_CHUNK * (dk + 4) + KDA_CHUNK * KDA_MQK_STRIDE + KDA_CHUNK * KDA_INTER_COLS + (dk + 4);
}
/* Dynamic shared memory of the inter kernel, floats: two stages, then S [dk][KDA_INTER_STRIDE], U and Qb S
 * [KDA_CHUNK][KDA_INTER_STRIDE]. 180,256 bytes at dk = 128. */
static inline int64_t kda_inter_smem_floats(int64_t dk) {
    return 2 * kda_inter_stage_floats(dk) + (dk + 2 * KDA_CHUNK) * KDA_INTER_STRIDE;
}

/* grid (H, ceil(dv / KDA_INTER_COLS), entries), KDA_INTER_THREADS threads, kda_inter_smem_floats(dk) floats of
 * dynamic shared memory; one block a multiprocessor (128 blocks at 64 heads of 128 columns: one wave), 16 warps.
 * Thread (rg = tid / 16, cg = tid % 16) takes columns col0 + 4cg .. + 3 (none past dv, which is a multiple of 4):
 *   phase A: rows 4 (rg % 8) .. + 3 of W ((rg / 8) % 2 = 0) or of Qb (1) times S, over the key rows of half
 *     kh = rg / 16 of them ([0, kmid) or [kmid, dk), kmid = dk / 2 rounded up to 4): half 1 leaves its partial
 *     sums in U and Qb S, half 0 adds its own to them: U = Ut - (W S)_0 - ... as Ut - (p0 + p1), Qb S = p0 + p1;
 *   phase B: row rg of O = Qb S + Mqk U (stored);
 *   phase C: rows 4rg .. 4rg + 3 of S (kept in registers from chunk to chunk): S = decay * S + Kd^T U, or the
 *     walk over the chunk's rows when one of them asks for its state.
 * The state comes from states[slots[0]] (or the carry buffer when the piece before ended inside this sequence)
 * and is read before any snapshot is written, so a ring of one is safe; carry_out gets the piece's last state
 * when the sequence goes on in the next piece. The arithmetic of test_kda_chunked.c's model_inter (W S and Qb S as
 * two halves of the key rows added, there too) up to FMA contraction; the walk has the token kernel's
 * operations. Until 2026-12-07 it had 256 threads (8 warps a multiprocessor, each with the whole of the key rows
 * and 8 rows of S): 27% of issue slots busy, the warps waiting on their shared-memory loads (Nsight Compute). */
__global__ void __launch_bounds__(KDA_INTER_THREADS, 1)
kda_chunk_inter_kernel(act_out o, act_in k, const float *g, const __grid_constant__ kda_chunk_table seqs,
                       const float *scratch, const float *carry_in, float *carry_out, int64_t H, int64_t dk,
                       int64_t dv) {
    cuda_pdl_begin();
    const kda_chunk_seq &sq = seqs.seq[blockIdx.z];
    const int tid = threadIdx.x, rg = tid / 16, cg = tid % 16;
    const int64_t h = blockIdx.x, col0 = (int64_t)blockIdx.y * KDA_INTER_COLS, c4 = col0 + 4 * cg;
    const bool cols_in = c4 < dv;
    const int64_t dkp = dk + 4, SP = KDA_INTER_STRIDE, M = KDA_MQK_STRIDE, slot_size = H * dk * dv, head = h * dk * dv;
    const kda_chunk_layout lay = kda_chunk_layout_of(dk, dv);
    const int64_t stage = kda_inter_stage_floats(dk);
    const int64_t at_Qb = KDA_CHUNK * dkp, at_Kd = 2 * KDA_CHUNK * dkp, at_M = 3 * KDA_CHUNK * dkp;
    const int64_t at_Ut = at_M + KDA_CHUNK * M, at_decay = at_Ut + KDA_CHUNK * KDA_INTER_COLS;

    extern __shared__ __align__(16) float inter_smem[];
    float *s_S = inter_smem + 2 * stage, *s_U = s_S + dk * SP, *s_Op = s_U + KDA_CHUNK * SP;

    /* Chunk `c` of the entry into a stage, 16 bytes a copy (none waited for here). */
    const auto load_stage = [&](float *st, int c) {
        const float *src = scratch + ((int64_t)(sq.base + c) * H + h) * lay.size;
        const int q4 = (int)(dk / 4), per_part = KDA_CHUNK * q4;
        for (int e = tid; e < 3 * per_part; e += blockDim.x) {
            const int part = e / per_part, r = (e / q4) % KDA_CHUNK, c16 = e % q4;
            cuda_cp_async16(st + part * KDA_CHUNK * dkp + r * dkp + 4 * c16,
                            src + lay.W + part * KDA_CHUNK * dk + r * dk + 4 * c16, 16);
        }
        for (int e = tid; e < KDA_CHUNK * KDA_CHUNK / 4; e += blockDim.x) {
            const int r = e / (KDA_CHUNK / 4), c16 = e % (KDA_CHUNK / 4);
            cuda_cp_async16(st + at_M + r * M + 4 * c16, src + lay.Mqk + r * KDA_CHUNK + 4 * c16, 16);
        }
        for (int e = tid; e < KDA_CHUNK * KDA_INTER_COLS / 4; e += blockDim.x) {
            const int r = e / (KDA_INTER_COLS / 4), c16 = e % (KDA_INTER_COLS / 4);
            const bool in = col0 + 4 * c16 < dv;   /* columns past dv: zeros */
            cuda_cp_async16(st + at_Ut + r * KDA_INTER_COLS + 4 * c16, src + lay.Ut + r * dv + (in ? col0 + 4 * c16 : 0),
                            in ? 16 : 0);
        }
        for (int e = tid; e < q4; e += blockDim.x) cuda_cp_async16(st + at_decay + 4 * e, src + lay.decay + 4 * e, 16);
    };

    /* S0 into registers (this thread's 4 x 4 of phase C) and into shared memory for phase A */
    const int i0 = 4 * rg;
    const bool rows_in = i0 < dk;   /* dk a multiple of 4: rows i0 .. i0 + 3 all in, or none */
    float s[4][4];
    {
        const float *from = (sq.carry & KDA_CARRY_IN) ? carry_in + head
                                                      : sq.states + (int64_t)sq.slots[0] * slot_size + head;
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const bool in = rows_in && cols_in;
            const float4 x = in ? *(const float4 *)(from + (i0 + m) * dv + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
            s[m][0] = x.x, s[m][1] = x.y, s[m][2] = x.z, s[m][3] = x.w;
            if (rows_in) *(float4 *)(s_S + (i0 + m) * SP + 4 * cg) = x;
        }
    }

    /* phase A's part of the key rows: [0, kmid) for kh 0, [kmid, dk) for kh 1 */
    const int kh = rg / 16;
    const int64_t kmid = (dk / 4 + 1) / 2 * 4, k_lo = kh == 0 ? 0 : kmid, k_hi = kh == 0 ? kmid : dk;
    const bool of_W = (rg / 8) % 2 == 0;
    const int tA = 4 * (rg % 8);

    load_stage(inter_smem, 0);
    cuda_cp_async_commit();
    for (int c = 0; c < sq.n_chunks; c++) {
        const float *st = inter_smem + (c & 1) * stage;
        if (c + 1 < sq.n_chunks) load_stage(inter_smem + ((c + 1) & 1) * stage, c + 1);
        cuda_cp_async_commit();
        cuda_cp_async_wait<1>();   /* this thread's copies of chunk c are in; the barrier makes everyone's visible */
        const int64_t t0 = (int64_t)(sq.chunk0 + c) * KDA_CHUNK;
        const int n = (int)(sq.T - t0 < KDA_CHUNK ? sq.T - t0 : KDA_CHUNK);
        const bool walk = __syncthreads_or(tid < n && sq.slots[1 + t0 + tid] >= 0);

        /* phase A: [W; Qb] rows times S, over this half of the key rows in order; half 1's sums go to shared
         * memory first, then half 0 adds its own */
        float acc[4][4] = {};
        {
            const float *A = st + (of_W ? 0 : at_Qb) + tA * dkp;
#pragma unroll 2
            for (int64_t i = k_lo; i < k_hi; i += 4) {
                float a[4][4], b[4][4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const float4 x = *(const float4 *)(A + r * dkp + i);
                    a[r][0] = x.x, a[r][1] = x.y, a[r][2] = x.z, a[r][3] = x.w;
                    const float4 y = *(const float4 *)(s_S + (i + r) * SP + 4 * cg);
                    b[r][0] = y.x, b[r][1] = y.y, b[r][2] = y.z, b[r][3] = y.w;
                }
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
#pragma unroll
                    for (int r = 0; r < 4; r++)
#pragma unroll
                        for (int cc = 0; cc < 4; cc++) acc[r][cc] = fmaf(a[r][kk], b[kk][cc], acc[r][cc]);
            }
        }
        float *part = (of_W ? s_U : s_Op) + tA * SP + 4 * cg;   /* rows tA .. tA + 3 of U or of Qb S */
        if (kh == 1)
#pragma unroll
            for (int r = 0; r < 4; r++)
                *(float4 *)(part + r * SP) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        __syncthreads();
        if (kh == 0)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float4 p1 = *(const float4 *)(part + r * SP);
                float4 x = make_float4(acc[r][0] + p1.x, acc[r][1] + p1.y, acc[r][2] + p1.z, acc[r][3] + p1.w);
                if (of_W) {
                    const float4 ut = *(const float4 *)(st + at_Ut + (tA + r) * KDA_INTER_COLS + 4 * cg);
                    x = make_float4(ut.x - x.x, ut.y - x.y, ut.z - x.z, ut.w - x.w);
                }
                *(float4 *)(part + r * SP) = x;
            }
        __syncthreads();

        /* phase B: O = Qb S + Mqk U over s <= t (rounded up to 4, in order: Mqk is zero above the diagonal), stored */
        {
            const int t = rg;
            const float4 x = *(const float4 *)(s_Op + t * SP + 4 * cg);
            float ob[4] = {x.x, x.y, x.z, x.w};
            for (int u = 0; u < t + 1; u += 4) {
                const float4 y = *(const float4 *)(st + at_M + t * M + u);
                const float mq[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
                for (int w = 0; w < 4; w++) {
                    const float4 z = *(const float4 *)(s_U + (u + w) * SP + 4 * cg);
                    ob[0] = fmaf(mq[w], z.x, ob[0]), ob[1] = fmaf(mq[w], z.y, ob[1]);
                    ob[2] = fmaf(mq[w], z.z, ob[2]), ob[3] = fmaf(mq[w], z.w, ob[3]);
                }
            }
            if (t < n && cols_in) {
                const int64_t at = ((sq.row0 + t0 + t) * H + h) * dv + c4;
#pragma unroll
                for (int cc = 0; cc < 4; cc++) o.store(at + cc, ob[cc]);
            }
        }

        /* phase C: the state after the chunk (phase B reads no S: no barrier between them) */
        if (rows_in && !walk) {
            const float *Kd = st + at_Kd, *decay = st + at_decay;
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int cc = 0; cc < 4; cc++) s[m][cc] = decay[i0 + m] * s[m][cc];
#pragma unroll 4
            for (int u = 0; u < KDA_CHUNK; u++) {
                const float4 k0 = *(const float4 *)(Kd + u * dkp + i0);
                const float kd[4] = {k0.x, k0.y, k0.z, k0.w};
                const float4 x = *(const float4 *)(s_U + u * SP + 4 * cg);
                const float uu[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int m = 0; m < 4; m++)
#pragma unroll
                    for (int cc = 0; cc < 4; cc++) s[m][cc] = fmaf(kd[m], uu[cc], s[m][cc]);
            }
        } else if (rows_in) {
            for (int t = 0; t < n; t++) {
                const int64_t at = ((sq.row0 + t0 + t) * H + h) * dk + i0;
                const float4 x = *(const float4 *)(s_U + t * SP + 4 * cg);
                const float uu[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const float a = expf(g[at + m]), kv = k[at + m];
#pragma unroll
                    for (int cc = 0; cc < 4; cc++) s[m][cc] = __fmaf_rn(kv, uu[cc], __fmul_rn(s[m][cc], a));
                }
                const int32_t slot = sq.slots[1 + t0 + t];
                if (slot >= 0 && cols_in) {
                    float *snap = sq.states + (int64_t)slot * slot_size + head;
#pragma unroll
                    for (int m = 0; m < 4; m++)
                        *(float4 *)(snap + (i0 + m) * dv + c4) = make_float4(s[m][0], s[m][1], s[m][2], s[m][3]);
                }
            }
        }
        if (rows_in)
#pragma unroll
            for (int m = 0; m < 4; m++)
                *(float4 *)(s_S + (i0 + m) * SP + 4 * cg) = make_float4(s[m][0], s[m][1], s[m][2], s[m][3]);
        __syncthreads();   /* S is in; U, Qb S and this chunk's stage are free */
    }
    if ((sq.carry & KDA_CARRY_OUT) && rows_in && cols_in)
#pragma unroll
        for (int m = 0; m < 4; m++)
            *(float4 *)(carry_out + head + (i0 + m) * dv + c4) = make_float4(s[m][0], s[m][1], s[m][2], s[m][3]);
}

/* ------------------------------------------------------------------------------------------------------------
 * kda_sequences' first kernel: q, k and v of every sequence through the conv, SiLU and (q, k) the L2 norms, and
 * the conv rings updated. A block per (head, q|k|v, 16 rows of a sequence, sequence); thread i owns channel i of
 * its head's part (width dk, dk or dv) for those rows, so the L2 norm of a row is a block sum, and the ring
 * channels a thread reads are the ones it writes.
 */
enum {
    KDA_CONV_ROWS = 16,                   /* rows of a sequence per block */
    KDA_MAX_K = 16,                       /* conv kernel widths taken */
    KDA_MAX_WIDTH = CUDA_NORM_THREADS,    /* head widths taken: the l2norm op's one element per thread */
};
/* Only the block of a sequence's first rows reads history from its conv ring (row t reads input rows t .. t+K-1
 * of [K-1 history rows | new rows]), so that block alone writes the ring, after its reads. */
static_assert(KDA_CONV_ROWS >= KDA_MAX_K - 1, "a sequence's first block must hold every row that reads history");

/* One sequence of the conv launch. Its history is K-1 rows: n_zero = K-1 - n_hist zeros (before the sequence's
 * start), then the conv ring rows hist[0 .. n_hist); then its new rows row0 .. row0 + n_rows - 1 of raw. */
struct kda_conv_seq {
    int32_t        row0, n_rows, n_hist, n_write;
    const int32_t *hist;      /* [n_hist] I32 conv ring slots of the history rows (device) */
    const int32_t *write;     /* [n_write] I32 conv ring slots the last n_write raw rows go to (device) */
    void          *ring[3];   /* the q, k, v conv rings [conv_width, H * width], raw's dtype */
};

struct kda_conv_table {
    kda_conv_seq seq[KDA_SEQS_PER_LAUNCH];
};

/* What the sequences share. Part j = 0, 1, 2 is q, k, v, of width dk, dk, dv per head (C_j = H * width). */
struct kda_conv_args {
    act_in     raw[3];    /* [N, C_j] the projections, before the conv */
    weight_ref w[3];      /* [C_j, K] the depthwise conv weights */
    act_out    out[3];    /* [N, C_j] raw's dtype: q and k normalised (q times q_scale), v after SiLU */
    int64_t    H, dk, dv, K;
    float      eps, q_scale;
};

/* grid (3 * H, ceil(max n_rows / KDA_CONV_ROWS), sequences), blockDim.x = max(dk, dv) rounded up to 32, dynamic
 * shared memory (KDA_CONV_ROWS + K - 1) x blockDim.x floats (the block's input rows). ASYNC
 * (GLM53_CUDA_KDA_CONV_ASYNC, on by default since an H100 ran it; the host checks kda_conv_async_fits): the
 * input rows come as 16-byte pieces of raw's dtype by cp.async, all in flight at once, into [rows][width] of
 * that dtype, instead of one element a thread and row, each load waiting for the one before (its shared store may
 * alias raw's generic pointer, so the compiler keeps them in order). Why: at an 8,192-token prefill the kernel
 * takes 1.8 ms a layer (H100) against about 0.25 ms of traffic; a block lives about 38 us, of which the 19
 * dependent loads of 0.5-1 us each are the largest part. An earlier rewrite that also batched the row sums (one
 * barrier per 16 rows) took 62 registers instead of 40, half the blocks a multiprocessor, and was slower (10.7 ->
 * 15.2 ms); this one adds almost none. The values are the same (BF16 -> F32 exact), so are the bits. Each
 * element gets the chain's operations: conv1d_causal's sum (rounded to raw's dtype, as its output tensor is), unary
 * SiLU (rounded), then for q and k l2norm's block sum over the head and its scaling (rounded). The block sum runs
 * over this block's warps where the l2norm op's block has 256 threads: its extra warps add +0.0 to a sum of
 * squares, which changes no bit. */
template <bool ASYNC>
__global__ void __launch_bounds__(KDA_MAX_WIDTH)
kda_conv_prep_kernel(const __grid_constant__ kda_conv_args a, const __grid_constant__ kda_conv_table seqs) {
    cuda_pdl_begin();
    const kda_conv_seq &sq = seqs.seq[blockIdx.z];
    const int part = (int)(blockIdx.x % 3);
    const int64_t h = blockIdx.x / 3, t0 = (int64_t)blockIdx.y * KDA_CONV_ROWS;
    if (t0 >= sq.n_rows) return;   /* the whole block: past this sequence's rows */
    const int64_t t_end = t0 + KDA_CONV_ROWS < sq.n_rows ? t0 + KDA_CONV_ROWS : sq.n_rows;
    const int64_t width = part == 2 ? a.dv : a.dk, C = a.H * width, c = h * width + threadIdx.x;
    const int64_t K = a.K, n_zero = K - 1 - sq.n_hist;
    const bool owns = threadIdx.x < width;
    const act_in raw = a.raw[part], ring = {sq.ring[part], raw.bf16};
    const float scale = part == 0 ? a.q_scale : 1.0f;

    /* The block's input rows t0 .. t_end + K - 1 of the sequence's [zeros | history | new rows] at channel c, all
     * loaded before the first output (a row's loads no longer wait for the previous row's block sum), into
     * conv_in [rows][blockDim.x]. */
    extern __shared__ float conv_in[];
    const int64_t n_in = t_end - t0 + K - 1;
    if constexpr (ASYNC) {
        /* [n_in][width] of raw's dtype: piece p of row i is bytes 16 p .. of the row's width elements of this part
         * of head h; rows before the sequence's start are zero-filled (no bytes read) */
        const int64_t elem = raw.bf16 ? 2 : 4;
        const int pieces = (int)(width * elem / 16), n_pieces = (int)n_in * pieces;   /* at most 31 rows x 64 */
        uint8_t *stage = (uint8_t *)conv_in;
        for (int e = threadIdx.x; e < n_pieces; e += blockDim.x) {
            const int i = e / pieces, p = e % pieces;
            const int64_t r = t0 + i;
            const uint8_t *src = (const uint8_t *)raw.data;   /* a valid address for the zero rows */
            if (r >= n_zero)
                src = r < K - 1 ? (const uint8_t *)ring.data + ((int64_t)sq.hist[r - n_zero] * C + h * width) * elem
                                : (const uint8_t *)raw.data + ((sq.row0 + r - (K - 1)) * C + h * width) * elem;
            cuda_cp_async16(stage + e * 16, src + 16 * p, r >= n_zero ? 16 : 0);
        }
        cuda_cp_async_commit();
        cuda_cp_async_wait<0>();
    } else {
        for (int64_t i = 0; i < n_in; i++) {
            const int64_t r = t0 + i;
            float x = 0.0f;
            if (owns && r >= n_zero)
                x = r < K - 1 ? ring[(int64_t)sq.hist[r - n_zero] * C + c] : raw[(sq.row0 + r - (K - 1)) * C + c];
            conv_in[i * blockDim.x + threadIdx.x] = x;
        }
    }
    __syncthreads();

    for (int64_t t = t0; t < t_end; t++) {
        const auto window = [&](int64_t i) {
            const int64_t row = t - t0 + i;
            if constexpr (ASYNC)
                return raw.bf16 ? __bfloat162float(((const __nv_bfloat16 *)conv_in)[row * width + threadIdx.x])
                                : conv_in[row * width + threadIdx.x];
            else return conv_in[row * blockDim.x + threadIdx.x];
        };
        float y = 0.0f;
        if (owns) {
            const float conv = cuda_act_round(raw.bf16, conv_causal_sum(a.w[part], c, K, window));
            y = cuda_act_round(raw.bf16, cuda_silu(conv));
        }
        if (part < 2) {   /* the same for the whole block: every thread takes part in the sum */
            /* The l2norm op's thread sum 0 + v*v is one rounding of v*v; a plain y * y here could be contracted
             * with the block sum's first addition into an FMA (one rounding fewer), so the product is explicit. */
            const float factor = cuda_l2norm_factor(cuda_block_sum(__fmul_rn(y, y)), a.eps);
            y = cuda_l2norm_apply(y, factor, scale);
        }
        if (owns) a.out[part].store((sq.row0 + t) * C + c, y);
    }

    /* The ring keeps the sequence's last n_write raw rows, bit for bit (scatter_rows). This thread has done all its
     * reads of channel c of the ring, and no other thread reads that channel, so a kept row may take the slot of
     * a history row just read. */
    if (blockIdx.y != 0 || !owns) return;
    const int64_t first = sq.row0 + sq.n_rows - sq.n_write;
    for (int64_t r = 0; r < sq.n_write; r++) {
        const int64_t to = (int64_t)sq.write[r] * C + c, from = (first + r) * C + c;
        if (raw.bf16) ((uint16_t *)sq.ring[part])[to] = ((const uint16_t *)raw.data)[from];
        else ((uint32_t *)sq.ring[part])[to] = ((const uint32_t *)raw.data)[from];
    }
}

/* Whether kda_conv_prep_kernel<true> takes this launch: every part's row segment (width elements of one head) and
 * row (C elements) whole 16-byte pieces, and raw's and every conv ring's data 16-byte aligned. */
static bool kda_conv_async_fits(const kda_conv_args &a, const kda_conv_table &conv, int n_conv) {
    const int64_t elem = a.raw[0].bf16 ? 2 : 4;
    for (int j = 0; j < 3; j++) {
        const int64_t width = j == 2 ? a.dv : a.dk;
        if ((width * elem) % 16 != 0 || (uintptr_t)a.raw[j].data % 16 != 0) return false;
        for (int i = 0; i < n_conv; i++)
            if ((uintptr_t)conv.seq[i].ring[j] % 16 != 0) return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------------------------
 * Host side
 */
glm53_status cuda_conv1d_causal(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *w) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(x) && cuda_is_act(y));
    int64_t T = glm53_tensor_rows(y), C = cuda_cols(y), K = cuda_cols(w);
    assert(K >= 1 && glm53_tensor_rows(w) == C);
    assert(cuda_cols(x) == C && glm53_tensor_rows(x) == T + K - 1);
    weight_ref wr;
    GLM53_TRY(cuda_weight_ref(w, &wr, "conv1d_causal"));   /* [C,K] or the checkpoint's [C,1,K]: rows of K */
    GLM53_TRY(cuda_enter(cb));
    if (T == 0 || C == 0) return GLM53_OK;
    conv1d_causal_kernel<<<cuda_blocks_for(T * C, 256), 256, 0, cb->stream>>>(
        cuda_act_out(y), cuda_act_in(x), wr, T, C, K);
    CUDA_LAUNCHED("conv1d_causal");
    return GLM53_OK;
}

static bool is_f32_on_device(const glm53_tensor *t) { return cuda_is_act(t) && t->dtype == GLM53_F32; }

glm53_status cuda_kda_gate(glm53_backend *be, glm53_tensor *g, const glm53_tensor *f, const glm53_tensor *A_log,
                           const glm53_tensor *dt_bias, int32_t has_lower_bound, float lower_bound) {
    cuda_backend *cb = cuda_impl(be);
    assert(is_f32_on_device(g) && cuda_is_act(f));
    int64_t N = glm53_tensor_rows(f), C = cuda_cols(f), heads = glm53_tensor_numel(A_log);
    assert(heads > 0 && C % heads == 0 && glm53_tensor_numel(dt_bias) == C && glm53_tensor_numel(g) == N * C);
    weight_ref ar, dr;
    GLM53_TRY(cuda_weight_ref(A_log, &ar, "kda_gate"));
    GLM53_TRY(cuda_weight_ref(dt_bias, &dr, "kda_gate"));
    GLM53_TRY(cuda_enter(cb));
    if (N * C == 0) return GLM53_OK;
    if (cb->kda_rows && C <= INT32_MAX && N / KDA_GATE_ROWS < 65535) {
        const dim3 grid((unsigned)((C + 255) / 256), (unsigned)((N + KDA_GATE_ROWS - 1) / KDA_GATE_ROWS));
        CUDA_TRY(cuda_launch(cb, kda_gate_rows_kernel, grid, 256, 0, cb->pdl, (float *)g->data, cuda_act_in(f), ar, dr,
                             N, (int)C, (int)(C / heads), has_lower_bound != 0, lower_bound));
        CUDA_LAUNCHED("kda_gate (rows)");
    } else {
        CUDA_TRY(cuda_launch(cb, kda_gate_kernel, cuda_blocks_for(N * C, 256), 256, 0, cb->pdl, (float *)g->data,
                             cuda_act_in(f), ar, dr, N, C, C / heads, has_lower_bound != 0, lower_bound));
        CUDA_LAUNCHED("kda_gate");
    }
    return GLM53_OK;
}

/* Whether the recurrence of heads of width dk takes the column-split kernel (dk a multiple of 4, at most 128: every
 * model's) rather than the sequential one. kda_recurrent and kda_sequences both decide here, so a row gets the same
 * kernel, and the same bits, from either. */
static bool kda_column_split(int64_t dk) {
    return dk % KDA_SPLIT == 0 && dk / KDA_SPLIT <= KDA_MAX_QUARTER;
}

/* Dynamic shared memory of kda_recurrent_kernel: the state S [dk, dv], then k, q and the decay [dk] each. */
static size_t kda_sequential_smem(int64_t dk, int64_t dv) { return (size_t)(dk * dv + 3 * dk) * sizeof(float); }

/* The token-by-token recurrence of the first n sequences of `seqs` in one launch labelled `what`: the column-split
 * kernel where kda_column_split(dk), else the sequential one. q, k [N,H,dk], v [N,H,dv] activations, g [N,H,dk] and beta [N,H]
 * F32, o [N,H,dv]. */
static glm53_status kda_token_launch(cuda_backend *cb, act_out o, act_in q, act_in k, act_in v, const float *g,
                                     const float *beta, const kda_rec_table &seqs, int n, int64_t H, int64_t dk,
                                     int64_t dv, const char *what) {
    if (kda_column_split(dk)) {
        const dim3 grid((unsigned)H, (unsigned)((dv + KDA_COLS - 1) / KDA_COLS), (unsigned)n);
        CUDA_TRY(cuda_launch(cb, kda_recurrent_columns_kernel, grid, KDA_COLUMN_THREADS,
                             2 * (size_t)kda_stage_floats(dk) * sizeof(float), cb->pdl, o, q, k, v, g, beta, seqs, H,
                             dk, dv));
    } else {
        const size_t smem = kda_sequential_smem(dk, dv);
        GLM53_TRY(cuda_smem_optin(cb, (const void *)kda_recurrent_kernel, smem, what));
        const unsigned threads = (unsigned)((dv + 31) / 32 * 32);
        kda_recurrent_kernel<<<dim3((unsigned)H, 1, (unsigned)n), threads, smem, cb->stream>>>(o, q, k, v, g, beta,
                                                                                              seqs, H, dk, dv);
    }
    CUDA_LAUNCHED(what);
    return GLM53_OK;
}

/* Whether heads of these widths can take the chunked kernels (every model's: dk = dv = 128). */
static bool kda_chunked_fits(int64_t dk, int64_t dv) {
    return dk >= 4 && dk % 4 == 0 && dk <= KDA_CHUNK_MAX_DK && dv >= 4 && dv % 4 == 0;
}

/* Opts the chunked kernels in to their shared memory (GLM53_ERR_UNSUPPORTED where a device has too little). */
static glm53_status kda_chunked_optin(cuda_backend *cb, int64_t dk, int64_t dv, const char *what) {
    GLM53_TRY(cuda_smem_optin(cb, (const void *)kda_chunk_intra_kernel,
                              (size_t)kda_intra_smem_floats(dk) * sizeof(float), what));
    if (cb->kda_intra_mma && kda_intra_mma_fits(dk, dv))
        GLM53_TRY(cuda_smem_optin(cb, (const void *)kda_chunk_intra_mma_kernel,
                                  (size_t)kda_intra_smem_floats(dk) * sizeof(float), what));
    return cuda_smem_optin(cb, (const void *)kda_chunk_inter_kernel, (size_t)kda_inter_smem_floats(dk) * sizeof(float),
                           what);
}

/* The chunked form (see its kernels) of n sequences of at least KDA_CHUNKED_MIN_ROWS rows. The batch's chunks go in
 * pieces of at most cb->kda_chunk_piece chunk-heads of scratch (GLM53_CUDA_KDA_CHUNK_PIECE, default 4096: 64
 * chunks = 2,048 rows at 64 heads, 287 MB at 128 x 128), a piece being one launch of each kernel over up to
 * KDA_SEQS_PER_LAUNCH sequences' runs of chunks; a sequence cut by a piece's end carries its state to the next
 * piece through one of two carry buffers [H, dk, dv] F32 (piece p writes buffer p % 2 and reads the other). The
 * carried state goes through memory unchanged, so where the pieces cut changes no value. */
static glm53_status kda_chunked_launch(cuda_backend *cb, act_out o, act_in q, act_in k, act_in v, const float *g,
                                       const float *beta, const kda_rec_seq *seqs, int n, int64_t H, int64_t dk,
                                       int64_t dv, const char *what) {
    const kda_chunk_layout lay = kda_chunk_layout_of(dk, dv);
    GLM53_TRY(kda_chunked_optin(cb, dk, dv, what));
    const size_t intra_smem = (size_t)kda_intra_smem_floats(dk) * sizeof(float);   /* either intra kernel's */
    const bool intra_mma = cb->kda_intra_mma && kda_intra_mma_fits(dk, dv);
    const size_t inter_smem = (size_t)kda_inter_smem_floats(dk) * sizeof(float);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        assert(seqs[i].T >= 1 && seqs[i].row0 + seqs[i].T <= INT32_MAX);
        total += (seqs[i].T + KDA_CHUNK - 1) / KDA_CHUNK;
    }
    const int64_t cap = cb->kda_chunk_piece / H > 0 ? cb->kda_chunk_piece / H : 1;   /* chunks a piece */
    const int64_t per_piece = total < cap ? total : cap;
    const bool carries = total > per_piece;
    const int64_t state_floats = H * dk * dv;
    cuda_scratch scratch;
    GLM53_TRY(scratch.get(cb, (size_t)(per_piece * H * lay.size + (carries ? 2 * state_floats : 0)) * sizeof(float),
                          "kda_recurrent chunked scratch"));
    float *chunks = (float *)scratch.ptr, *carry = chunks + per_piece * H * lay.size;

    kda_chunk_table table = {};
    int entries = 0, piece = 0;
    int64_t used = 0, widest = 0;
    const auto launch_piece = [&]() -> glm53_status {
        const float *carry_in = carries ? carry + ((piece + 1) & 1) * state_floats : nullptr;
        float *carry_out = carries ? carry + (piece & 1) * state_floats : nullptr;
        const dim3 intra_grid((unsigned)widest, (unsigned)H, (unsigned)entries);
        if (intra_mma) {
            CUDA_TRY(cuda_launch(cb, kda_chunk_intra_mma_kernel, intra_grid, KDA_INTRA_THREADS, intra_smem, cb->pdl, q,
                                 k, v, g, beta, table, chunks, H, dk, dv));
            CUDA_LAUNCHED("kda_recurrent chunked (intra, mma)");
        } else {
            CUDA_TRY(cuda_launch(cb, kda_chunk_intra_kernel, intra_grid, KDA_INTRA_THREADS, intra_smem, cb->pdl, q, k,
                                 v, g, beta, table, chunks, H, dk, dv));
            CUDA_LAUNCHED("kda_recurrent chunked (intra)");
        }
        const dim3 grid((unsigned)H, (unsigned)((dv + KDA_INTER_COLS - 1) / KDA_INTER_COLS), (unsigned)entries);
        CUDA_TRY(cuda_launch(cb, kda_chunk_inter_kernel, grid, KDA_INTER_THREADS, inter_smem, cb->pdl, o, k, g, table,
                             (const float *)chunks, carry_in, carry_out, H, dk, dv));
        CUDA_LAUNCHED("kda_recurrent chunked (inter)");
        table = {};
        entries = 0, used = 0, widest = 0, piece++;
        return GLM53_OK;
    };
    for (int i = 0; i < n; i++) {
        const int64_t n_chunks = (seqs[i].T + KDA_CHUNK - 1) / KDA_CHUNK;
        for (int64_t c0 = 0; c0 < n_chunks;) {
            const int64_t take = n_chunks - c0 < per_piece - used ? n_chunks - c0 : per_piece - used;
            table.seq[entries++] = kda_chunk_seq{
                seqs[i].states, seqs[i].slots, (int32_t)seqs[i].row0, (int32_t)seqs[i].T, (int32_t)c0, (int32_t)take,
                (int32_t)used, (c0 > 0 ? KDA_CARRY_IN : 0) | (c0 + take < n_chunks ? KDA_CARRY_OUT : 0)};
            used += take, c0 += take;
            widest = take > widest ? take : widest;
            if (used == per_piece || entries == KDA_SEQS_PER_LAUNCH) GLM53_TRY(launch_piece());
        }
    }
    if (entries > 0) GLM53_TRY(launch_piece());
    return GLM53_OK;
}

/* The recurrence of the first n sequences of `seqs`: with GLM53_CUDA_KDA_CHUNKED, heads the chunked kernels take
 * and sequences of at least KDA_CHUNKED_MIN_ROWS rows (prefill) go through them, the others (decode, verification:
 * the token kernel's bits, one call over T rows equal to T one-row calls) through the token kernel. */
static glm53_status kda_recurrent_launch(cuda_backend *cb, act_out o, act_in q, act_in k, act_in v, const float *g,
                                         const float *beta, const kda_rec_table &seqs, int n, int64_t H, int64_t dk,
                                         int64_t dv, const char *what) {
    if (cb->kda_chunked && kda_chunked_fits(dk, dv)) {
        kda_rec_table token = {};
        kda_rec_seq chunked[KDA_SEQS_PER_LAUNCH];
        int n_token = 0, n_chunked = 0;
        for (int i = 0; i < n; i++) {
            /* (the inter kernel moves states 16 bytes at a time: a ring at an odd address keeps the token kernel) */
            if (seqs.seq[i].T >= KDA_CHUNKED_MIN_ROWS && (uintptr_t)seqs.seq[i].states % 16 == 0)
                chunked[n_chunked++] = seqs.seq[i];
            else token.seq[n_token++] = seqs.seq[i];
        }
        if (n_chunked > 0) {
            if (n_token > 0) GLM53_TRY(kda_token_launch(cb, o, q, k, v, g, beta, token, n_token, H, dk, dv, what));
            return kda_chunked_launch(cb, o, q, k, v, g, beta, chunked, n_chunked, H, dk, dv, what);
        }
    }
    return kda_token_launch(cb, o, q, k, v, g, beta, seqs, n, H, dk, dv, what);
}

glm53_status cuda_kda_recurrent(glm53_backend *be, glm53_tensor *o, const glm53_tensor *q, const glm53_tensor *k,
                                const glm53_tensor *v, const glm53_tensor *g, const glm53_tensor *beta,
                                glm53_tensor *states, const glm53_tensor *slots) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(o) && cuda_is_act(q) && cuda_is_act(k) && cuda_is_act(v));
    assert(is_f32_on_device(g) && is_f32_on_device(beta) && is_f32_on_device(states));
    assert(q->ndim == 3 && v->ndim == 3 && states->ndim == 4);
    int64_t T = q->shape[0], H = q->shape[1], dk = q->shape[2], dv = v->shape[2];
    assert(glm53_tensor_numel(k) == T * H * dk && glm53_tensor_numel(g) == T * H * dk);
    assert(glm53_tensor_numel(v) == T * H * dv && glm53_tensor_numel(o) == T * H * dv);
    assert(glm53_tensor_numel(beta) == T * H);
    assert(states->shape[1] == H && states->shape[2] == dk && states->shape[3] == dv);
    assert(slots->dtype == GLM53_I32 && slots->data && slots->device == GLM53_DEVICE_CUDA);
    assert(glm53_tensor_numel(slots) == T + 1);
    assert(dv >= 1 && dv <= 1024 && H <= INT32_MAX);
    GLM53_TRY(cuda_enter(cb));
    if (H == 0) return GLM53_OK;
    kda_rec_table seqs = {};   /* one sequence: the tensors' rows [0, T) */
    seqs.seq[0] = kda_rec_seq{0, T, (float *)states->data, (const int32_t *)slots->data};
    return kda_recurrent_launch(cb, cuda_act_out(o), cuda_act_in(q), cuda_act_in(k), cuda_act_in(v),
                                (const float *)g->data, (const float *)beta->data, seqs, 1, H, dk, dv,
                                "kda_recurrent");
}

/* Both tables go by value as kernel parameters: within the classic 4 KiB a launch, whatever the toolkit. */
static_assert(sizeof(kda_conv_args) + sizeof(kda_conv_table) <= 4096, "kda_sequences' conv launch parameters");
static_assert(sizeof(kda_rec_table) + 256 <= 4096, "kda_sequences' recurrence launch parameters");
static_assert(sizeof(kda_chunk_table) + 256 <= 4096, "the chunked kernels' launch parameters");

/* The per-sequence part of a KDA layer for the whole batch (backend.h): per KDA_SEQS_PER_LAUNCH sequences, the conv
 * launch into scratch q, k, v [N, C_j] (raw's dtype, the chain's intermediate tensors), then the recurrence from
 * them, one launch for every sequence whatever its length. Every refusal
 * (GLM53_ERR_UNSUPPORTED: head widths past 256, a conv kernel past 16, a weight dtype, a state too large for shared
 * memory) comes before anything is enqueued, so the caller can run the op-by-op chain instead. */
glm53_status cuda_kda_sequences(glm53_backend *be, glm53_tensor *o, const glm53_tensor *const raw[3],
                                const glm53_tensor *const w[3], const glm53_tensor *g, const glm53_tensor *beta,
                                const glm53_kda_seq *seqs, int32_t n_seqs, float eps, float q_scale) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(o) && o->ndim == 3 && is_f32_on_device(g) && is_f32_on_device(beta));
    const int64_t N = o->shape[0], H = o->shape[1], dv = o->shape[2], K = cuda_cols(w[0]);
    assert(H >= 1 && cuda_cols(raw[0]) % H == 0 && N <= INT32_MAX);
    const int64_t dk = cuda_cols(raw[0]) / H, width[3] = {dk, dk, dv};
    const int32_t act = raw[0]->dtype;
    for (int j = 0; j < 3; j++)
        assert(cuda_is_act(raw[j]) && raw[j]->dtype == act && glm53_tensor_rows(raw[j]) == N &&
               cuda_cols(raw[j]) == H * width[j] && glm53_tensor_rows(w[j]) == H * width[j] && cuda_cols(w[j]) == K);
    assert(glm53_tensor_numel(g) == N * H * dk && glm53_tensor_numel(beta) == N * H);
    if (dk > KDA_MAX_WIDTH || dv > KDA_MAX_WIDTH || K < 1 || K > KDA_MAX_K)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED,
                          "cuda kda_sequences: head widths %lld, %lld (at most %d) or conv kernel %lld (1 .. %d)",
                          (long long)dk, (long long)dv, (int)KDA_MAX_WIDTH, (long long)K, (int)KDA_MAX_K);
    kda_conv_args args = {};
    for (int j = 0; j < 3; j++) GLM53_TRY(cuda_weight_ref(w[j], &args.w[j], "kda_sequences"));

    for (int32_t i = 0; i < n_seqs; i++) {
        const glm53_kda_seq *s = &seqs[i];
        assert(s->row0 >= 0 && s->n_rows >= 0 && s->row0 + s->n_rows <= N);
        assert(s->n_rows <= (int64_t)KDA_CONV_ROWS * 65535);   /* grid.y of the conv launch */
        assert(s->n_hist >= 0 && s->n_hist <= K - 1 && s->n_write >= 0 && s->n_write <= s->n_rows);
        assert(s->n_hist == 0 || (s->conv_hist->dtype == GLM53_I32 && s->conv_hist->device == GLM53_DEVICE_CUDA &&
                                  glm53_tensor_numel(s->conv_hist) == s->n_hist));
        assert(s->n_write == 0 || (s->conv_write->dtype == GLM53_I32 && s->conv_write->device == GLM53_DEVICE_CUDA &&
                                   glm53_tensor_numel(s->conv_write) == s->n_write));
        for (int j = 0; j < 3; j++)
            assert(cuda_is_act(s->conv[j]) && s->conv[j]->dtype == act && s->conv[j]->ndim == 2 &&
                   cuda_cols(s->conv[j]) == H * width[j]);
        assert(is_f32_on_device(s->states) && s->states->ndim == 4 && s->states->shape[1] == H &&
               s->states->shape[2] == dk && s->states->shape[3] == dv);
        assert(s->slots->dtype == GLM53_I32 && s->slots->device == GLM53_DEVICE_CUDA &&
               glm53_tensor_numel(s->slots) == s->n_rows + 1);
    }
    GLM53_TRY(cuda_enter(cb));
    /* Before the first launch: a device that cannot hold the state in shared memory refuses with nothing done. */
    if (!kda_column_split(dk))
        GLM53_TRY(cuda_smem_optin(cb, (const void *)kda_recurrent_kernel, kda_sequential_smem(dk, dv),
                                  "kda_sequences"));
    if (cb->kda_chunked && kda_chunked_fits(dk, dv))
        for (int32_t i = 0; i < n_seqs; i++)
            if (seqs[i].n_rows >= KDA_CHUNKED_MIN_ROWS) {
                GLM53_TRY(kda_chunked_optin(cb, dk, dv, "kda_sequences"));
                break;
            }
    if (N == 0 || n_seqs == 0) return GLM53_OK;

    /* q, k, v after the conv (q and k normalised) for the batch's rows: [N, H*dk], [N, H*dk], [N, H*dv] */
    const size_t elem = glm53_dtype_size((glm53_dtype)act);
    cuda_scratch scratch;
    GLM53_TRY(scratch.get(cb, (size_t)(N * H * (2 * dk + dv)) * elem, "kda_sequences q, k, v"));
    glm53_tensor qkv[3];
    char *at = (char *)scratch.ptr;
    for (int j = 0; j < 3; j++) {
        qkv[j] = cuda_view_2d(at, act, N, H * width[j]);
        at += (size_t)(N * H * width[j]) * elem;
        args.raw[j] = cuda_act_in(raw[j]);
        args.out[j] = cuda_act_out(&qkv[j]);
    }
    args.H = H, args.dk = dk, args.dv = dv, args.K = K, args.eps = eps, args.q_scale = q_scale;
    const act_out o_out = cuda_act_out(o);
    const act_in q_in = cuda_act_in(&qkv[0]), k_in = cuda_act_in(&qkv[1]), v_in = cuda_act_in(&qkv[2]);
    const float *g_in = (const float *)g->data, *beta_in = (const float *)beta->data;
    const unsigned conv_threads = (unsigned)(((dk > dv ? dk : dv) + 31) / 32 * 32);

    for (int32_t first = 0; first < n_seqs; first += KDA_SEQS_PER_LAUNCH) {
        const int32_t end = n_seqs - first < KDA_SEQS_PER_LAUNCH ? n_seqs : first + KDA_SEQS_PER_LAUNCH;
        kda_conv_table conv = {};
        kda_rec_table rec = {};
        int n_conv = 0;
        int64_t max_rows = 0;
        for (int32_t i = first; i < end; i++) {
            const glm53_kda_seq *s = &seqs[i];
            if (s->n_rows == 0) continue;   /* no rows: nothing to compute, no raw row to keep */
            kda_conv_seq &c = conv.seq[n_conv++];
            c.row0 = (int32_t)s->row0, c.n_rows = (int32_t)s->n_rows;
            c.n_hist = (int32_t)s->n_hist, c.n_write = (int32_t)s->n_write;
            c.hist = s->n_hist > 0 ? (const int32_t *)s->conv_hist->data : nullptr;
            c.write = s->n_write > 0 ? (const int32_t *)s->conv_write->data : nullptr;
            for (int j = 0; j < 3; j++) c.ring[j] = s->conv[j]->data;
            rec.seq[n_conv - 1] =
                kda_rec_seq{s->row0, s->n_rows, (float *)s->states->data, (const int32_t *)s->slots->data};
            max_rows = s->n_rows > max_rows ? s->n_rows : max_rows;
        }
        if (n_conv == 0) continue;
        const dim3 grid((unsigned)(3 * H), (unsigned)((max_rows + KDA_CONV_ROWS - 1) / KDA_CONV_ROWS),
                        (unsigned)n_conv);
        const size_t conv_smem = (size_t)(KDA_CONV_ROWS + K - 1) * conv_threads * sizeof(float);
        if (cb->kda_conv_async && kda_conv_async_fits(args, conv, n_conv)) {
            CUDA_TRY(cuda_launch(cb, kda_conv_prep_kernel<true>, grid, conv_threads, conv_smem, cb->pdl, args, conv));
            CUDA_LAUNCHED("kda_sequences (conv, async)");
        } else {
            CUDA_TRY(cuda_launch(cb, kda_conv_prep_kernel<false>, grid, conv_threads, conv_smem, cb->pdl, args, conv));
            CUDA_LAUNCHED("kda_sequences (conv)");
        }
        GLM53_TRY(kda_recurrent_launch(cb, o_out, q_in, k_in, v_in, g_in, beta_in, rec, n_conv, H, dk, dv,
                                       "kda_sequences (recurrent)"));
    }
    return GLM53_OK;
}
