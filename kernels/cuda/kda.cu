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
 * Both are token-by-token forms; the chunked (WY) form on tensor cores is the prefill issue's next step.
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
__global__ void kda_gate_kernel(float *g, act_in f, weight_ref A_log, weight_ref dt_bias, int64_t N, int64_t C,
                                int64_t dk, bool has_lower_bound, float lower_bound) {
    cuda_pdl_begin();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = i % C;
        float rate = expf(A_log.at(0, ch / dk)), u = f[i] + dt_bias.at(0, ch);
        g[i] = has_lower_bound ? lower_bound * cuda_sigmoid(rate * u) : -rate * cuda_softplus(u);
    }
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
 * shared memory (KDA_CONV_ROWS + K - 1) x blockDim.x floats (the block's input rows). Each
 * element gets the chain's operations: conv1d_causal's sum (rounded to raw's dtype, as its output tensor is), unary
 * SiLU (rounded), then for q and k l2norm's block sum over the head and its scaling (rounded). The block sum runs
 * over this block's warps where the l2norm op's block has 256 threads: its extra warps add +0.0 to a sum of
 * squares, which changes no bit. */
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
    for (int64_t i = 0; i < n_in; i++) {
        const int64_t r = t0 + i;
        float x = 0.0f;
        if (owns && r >= n_zero)
            x = r < K - 1 ? ring[(int64_t)sq.hist[r - n_zero] * C + c] : raw[(sq.row0 + r - (K - 1)) * C + c];
        conv_in[i * blockDim.x + threadIdx.x] = x;
    }
    __syncthreads();

    for (int64_t t = t0; t < t_end; t++) {
        const auto window = [&](int64_t i) { return conv_in[(t - t0 + i) * blockDim.x + threadIdx.x]; };
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
    CUDA_TRY(cuda_launch(cb, kda_gate_kernel, cuda_blocks_for(N * C, 256), 256, 0, cb->pdl, (float *)g->data,
                         cuda_act_in(f), ar, dr, N, C, C / heads, has_lower_bound != 0, lower_bound));
    CUDA_LAUNCHED("kda_gate");
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

/* The recurrence of the first n sequences of `seqs` in one launch labelled `what`: the column-split kernel where
 * kda_column_split(dk), else the sequential one. q, k [N,H,dk], v [N,H,dv] activations, g [N,H,dk] and beta [N,H]
 * F32, o [N,H,dv]. */
static glm53_status kda_recurrent_launch(cuda_backend *cb, act_out o, act_in q, act_in k, act_in v, const float *g,
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
        CUDA_TRY(cuda_launch(cb, kda_conv_prep_kernel, grid, conv_threads, conv_smem, cb->pdl, args, conv));
        CUDA_LAUNCHED("kda_sequences (conv)");
        GLM53_TRY(kda_recurrent_launch(cb, o_out, q_in, k_in, v_in, g_in, beta_in, rec, n_conv, H, dk, dv,
                                       "kda_sequences (recurrent)"));
    }
    return GLM53_OK;
}
