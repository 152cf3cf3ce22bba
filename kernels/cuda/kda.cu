/*
 * kda.cu - Kimi delta attention (docs/architecture.md section 3) on the CUDA backend: the depthwise causal conv1d
 * over q, k, v, the per-channel forget gate and the token-by-token delta-rule recurrence with an F32 state.
 *
 * kda_recurrent runs one block per head for the whole sequence. The head's state S[dk, dv] (64 KiB at 128 x 128)
 * lives in shared memory for all T rows; it is read from the ring slot of the sequence's length and written to
 * the slots of the lengths the ring keeps (slot numbers are device data, so a captured step can be replayed).
 * Thread j owns column j
 * of S: every per-token step (decay, S^T k, the rank-1 update, S^T q) touches only that column, so the only
 * barriers are the two around loading each token's k, q and decay vectors, and each sum runs over i = 0..dk-1
 * in the CPU backend's order. Consecutive threads hold consecutive columns, so shared-memory accesses are
 * conflict-free and snapshot writes are coalesced.
 *
 * Decode and speculative verification (T <= KDA_FEW_ROWS, dk a multiple of 4 up to 128) take
 * kda_recurrent_few_kernel instead: the one-block-per-head kernel keeps 64 blocks of 4 warps busy for 63 us a call
 * at 64 x 128 x 128 on the H100 (each thread walks its 128-float column serially: few loads in flight), against
 * 50 MB of state traffic per step that the bytes alone would move in 3 us. There a block holds 32 columns of one
 * head, four lanes per column each holding a quarter of the column (dk / 4 floats) in registers, so the state
 * is read with dk / 4 independent loads per thread and H * dv / 32 blocks share the work; the column's sums are
 * the four quarters' sums added by two shuffles. Its arithmetic per token is the same whatever T, so a row gives
 * the same bits in a verification chunk as in a one-row decode step (exact greedy speculative decoding); longer
 * prefills keep the sequential-sum kernel (the two kernels' roundings differ, within F32 of each other).
 *
 * This is the plain sequential form; the chunked (WY) form for long prefills is the performance issue's.
 */
#include "kernels/cuda/cuda_common.cuh"

/* ------------------------------------------------------------------------------------------------------------
 * Kernels
 */
/* y[T,C][t][c] = sum_i w[c][i] x[t+i][c]; x[T+K-1, C]. Consecutive threads take consecutive channels, so every
 * read of x is coalesced. */
__global__ void conv1d_causal_kernel(act_out y, act_in x, weight_ref w, int64_t T, int64_t C, int64_t K) {
    GRID_STRIDE(item, T * C) {
        int64_t t = item / C, c = item % C;
        float acc = 0.0f;
        for (int64_t i = 0; i < K; i++) acc += w.at(c, i) * x[(t + i) * C + c];
        y.store(item, acc);
    }
}

/* g[N,C] F32 from f[N,C]; h = channel / dk.
 *   lower bound:  g = lb * sigmoid(exp(A_log[h]) * (f + dt_bias))
 *   else:         g = -exp(A_log[h]) * softplus(f + dt_bias) */
__global__ void kda_gate_kernel(float *g, act_in f, weight_ref A_log, weight_ref dt_bias, int64_t N, int64_t C,
                                int64_t dk, bool has_lower_bound, float lower_bound) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = i % C;
        float rate = expf(A_log.at(0, ch / dk)), u = f[i] + dt_bias.at(0, ch);
        g[i] = has_lower_bound ? lower_bound * cuda_sigmoid(rate * u) : -rate * cuda_softplus(u);
    }
}

/* Token t of head h into shared memory for the state update, between the caller's barriers: its k and q rows,
 * exp(g) (the decay per row of the state) and beta (by thread 0). */
__device__ inline void kda_stage_token(float *k_t, float *q_t, float *decay, float *beta_t, act_in q, act_in k,
                                       const float *g, const float *beta, int64_t t, int64_t H, int64_t h, int64_t dk) {
    const int64_t row = (t * H + h) * dk;
    for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
        k_t[i] = k[row + i];
        q_t[i] = q[row + i];
        decay[i] = expf(g[row + i]);
    }
    if (threadIdx.x == 0) *beta_t = beta[t * H + h];
}

/* One block per head h; blockDim.x >= dv (a multiple of 32); thread j < dv owns column j.
 * q, k [T,H,dk], v [T,H,dv] activations; g [T,H,dk], beta [T,H] F32; o [T,H,dv]; states [ring,H,dk,dv] F32;
 * slots [T+1] I32: the state is read from slot slots[0] and written after row t to slot slots[1+t] (>= 0).
 * Dynamic shared memory: S [dk*dv], then k, q, decay [dk] each. */
__global__ void kda_recurrent_kernel(act_out o, act_in q, act_in k, act_in v, const float *g, const float *beta,
                                     float *states, const int32_t *slots, int64_t T, int64_t H, int64_t dk,
                                     int64_t dv) {
    extern __shared__ float smem[];
    __shared__ float beta_t;
    float *S = smem, *k_t = S + dk * dv, *q_t = k_t + dk, *decay = q_t + dk;
    const int64_t h = blockIdx.x, j = threadIdx.x, head = h * dk * dv;
    const bool owns_column = j < dv;

    const int64_t slot_size = H * dk * dv;
    const float *state_in = states + (int64_t)slots[0] * slot_size + head;
    for (int64_t i = threadIdx.x; i < dk * dv; i += blockDim.x) S[i] = state_in[i];

    for (int64_t t = 0; t < T; t++) {
        __syncthreads();   /* S loaded; the previous token's reads of k_t, q_t, decay, beta_t are done */
        kda_stage_token(k_t, q_t, decay, &beta_t, q, k, g, beta, t, H, h, dk);
        __syncthreads();
        if (!owns_column) continue;

        /* S <- S * exp(g) by rows; u = beta (v - S^T k) */
        float mem = 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            float s = S[i * dv + j] * decay[i];
            S[i * dv + j] = s;
            mem += s * k_t[i];
        }
        float u = beta_t * (v[(t * H + h) * dv + j] - mem);
        /* S <- S + k u^T; o = S^T q */
        float out = 0.0f;
        for (int64_t i = 0; i < dk; i++) {
            float s = S[i * dv + j] + k_t[i] * u;
            S[i * dv + j] = s;
            out += s * q_t[i];
        }
        o.store((t * H + h) * dv + j, out);
        /* Thread j writes only its own column, which no other thread reads: no barrier needed. The slot read at
         * the start may be written here (a ring of one): it was copied into S before the first token. */
        const int32_t slot = slots[1 + t];
        if (slot >= 0) {
            float *snap = states + (int64_t)slot * slot_size + head;
            for (int64_t i = 0; i < dk; i++) snap[i * dv + j] = S[i * dv + j];
        }
    }
}

enum { KDA_FEW_ROWS = 16, KDA_FEW_COLS = 32, KDA_FEW_SPLIT = 4, KDA_FEW_MAX_QUARTER = 32 };

/* The few-rows form (see the top of the file). grid (H, ceil(dv / 32)), 128 threads: thread t holds column
 * blockIdx.y * 32 + t / 4 (columns past dv compute on zeros and store nothing) and rows quarter * dk/4 ..
 * (quarter + 1) * dk/4 of it, quarter = t % 4. Same tensors as kda_recurrent_kernel; shared memory: k, q, decay
 * [dk] each. */
__global__ void __launch_bounds__(KDA_FEW_COLS * KDA_FEW_SPLIT)
kda_recurrent_few_kernel(act_out o, act_in q, act_in k, act_in v, const float *g, const float *beta, float *states,
                         const int32_t *slots, int64_t T, int64_t H, int64_t dk, int64_t dv) {
    extern __shared__ float few_smem[];
    __shared__ float beta_t;
    float *k_t = few_smem, *q_t = k_t + dk, *decay = q_t + dk;
    const int64_t h = blockIdx.x, col = (int64_t)blockIdx.y * KDA_FEW_COLS + threadIdx.x / KDA_FEW_SPLIT;
    const int quarter = threadIdx.x % KDA_FEW_SPLIT, rows = (int)(dk / KDA_FEW_SPLIT), i0 = quarter * rows;
    const bool owns = col < dv;
    const int64_t slot_size = H * dk * dv, head = h * dk * dv;

    float s[KDA_FEW_MAX_QUARTER];   /* S[i0 + r, col] */
    const float *state_in = states + (int64_t)slots[0] * slot_size + head;
#pragma unroll
    for (int r = 0; r < KDA_FEW_MAX_QUARTER; r++) s[r] = owns && r < rows ? state_in[(i0 + r) * dv + col] : 0.0f;

    for (int64_t t = 0; t < T; t++) {
        __syncthreads();   /* the previous token's reads of k_t, q_t, decay, beta_t are done */
        kda_stage_token(k_t, q_t, decay, &beta_t, q, k, g, beta, t, H, h, dk);
        __syncthreads();

        /* S <- S * exp(g) by rows; u = beta (v - S^T k): the quarter's sum, then the four added by shuffles
         * (lanes 4c .. 4c+3 hold column c; both orders of an addition give the same bits, so all four agree) */
        float mem = 0.0f;
#pragma unroll
        for (int r = 0; r < KDA_FEW_MAX_QUARTER; r++)
            if (r < rows) {
                s[r] *= decay[i0 + r];
                mem += s[r] * k_t[i0 + r];
            }
        mem += __shfl_xor_sync(0xffffffffu, mem, 1);
        mem += __shfl_xor_sync(0xffffffffu, mem, 2);
        const float u = beta_t * ((owns ? v[(t * H + h) * dv + col] : 0.0f) - mem);
        /* S <- S + k u^T; o = S^T q */
        float out = 0.0f;
#pragma unroll
        for (int r = 0; r < KDA_FEW_MAX_QUARTER; r++)
            if (r < rows) {
                s[r] += k_t[i0 + r] * u;
                out += s[r] * q_t[i0 + r];
            }
        out += __shfl_xor_sync(0xffffffffu, out, 1);
        out += __shfl_xor_sync(0xffffffffu, out, 2);
        if (owns && quarter == 0) o.store((t * H + h) * dv + col, out);
        /* each thread writes only its own part of its column, which it alone reads */
        const int32_t slot = slots[1 + t];
        if (owns && slot >= 0) {
            float *snap = states + (int64_t)slot * slot_size + head;
#pragma unroll
            for (int r = 0; r < KDA_FEW_MAX_QUARTER; r++)
                if (r < rows) snap[(i0 + r) * dv + col] = s[r];
        }
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
    kda_gate_kernel<<<cuda_blocks_for(N * C, 256), 256, 0, cb->stream>>>((float *)g->data, cuda_act_in(f), ar, dr, N,
                                                                         C, C / heads, has_lower_bound != 0,
                                                                         lower_bound);
    CUDA_LAUNCHED("kda_gate");
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

    if (T <= KDA_FEW_ROWS && dk % KDA_FEW_SPLIT == 0 && dk / KDA_FEW_SPLIT <= KDA_FEW_MAX_QUARTER) {
        dim3 grid((unsigned)H, (unsigned)((dv + KDA_FEW_COLS - 1) / KDA_FEW_COLS));
        kda_recurrent_few_kernel<<<grid, KDA_FEW_COLS * KDA_FEW_SPLIT, (size_t)(3 * dk) * sizeof(float), cb->stream>>>(
            cuda_act_out(o), cuda_act_in(q), cuda_act_in(k), cuda_act_in(v), (const float *)g->data,
            (const float *)beta->data, (float *)states->data, (const int32_t *)slots->data, T, H, dk, dv);
        CUDA_LAUNCHED("kda_recurrent (few rows)");
        return GLM53_OK;
    }
    size_t smem = (size_t)(dk * dv + 3 * dk) * sizeof(float);
    GLM53_TRY(cuda_smem_optin(cb, (const void *)kda_recurrent_kernel, smem, "kda_recurrent"));
    unsigned threads = (unsigned)((dv + 31) / 32 * 32);
    kda_recurrent_kernel<<<(unsigned)H, threads, smem, cb->stream>>>(
        cuda_act_out(o), cuda_act_in(q), cuda_act_in(k), cuda_act_in(v), (const float *)g->data,
        (const float *)beta->data, (float *)states->data, (const int32_t *)slots->data, T, H, dk, dv);
    CUDA_LAUNCHED("kda_recurrent");
    return GLM53_OK;
}
