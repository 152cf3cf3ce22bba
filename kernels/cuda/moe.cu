/*
 * moe.cu - MoE routing and routed-expert compute (docs/architecture.md section 6) on the CUDA backend.
 *
 * moe_route: one block per token row. The block computes the sigmoid scores into shared memory; thread 0 runs
 * the group stage (a no-op with GLM-5.3's one group), then warp 0 picks the top k one arg-best per round, with
 * the CPU backend's order and tie rule, so ids, their order and ties agree with the reference. (Thread 0 alone
 * ran the top-k before: 110 us per decode call at E = 288, k = 8.)
 *
 * moe_experts has three paths.
 *
 * Decode-sized batches (at most DEVICE_PATH_MAX_ROWS rows) stay on the device end to end, so a decode step
 * never waits for the host and can be captured into a CUDA graph: a table of every expert's weights is built
 * once at load (prepare_experts), and three kernels run per call: per slot (row, expert ids[slot]) the gate and
 * up products of the row, rounded to x's dtype, into the SwiGLU; per slot the down projection into F32; per row
 * the weighted sum over the slots in order. Expert weights are read once per slot that uses them. With BF16
 * activations and experts the tensor-core GEMV takes (gemv_mma.cuh; FP8 or BF16, same dtype for all), a block
 * computes 8 rows of gate and the same 8 of up (two n-tiles, the SwiGLU in its epilogue), or 16 rows of down,
 * for one slot; otherwise (F32 activations) a warp per output row and slot runs the CUDA-core dot product
 * (gemv.cuh). Either way a slot's arithmetic does not depend on the other slots: batch invariant.
 *
 * Larger batches (prefill) group the (row, slot) pairs by expert and run each used expert as three ordinary
 * matmuls over its rows, so every weight dtype and every matmul path (FP8 GEMV for few rows, dequantise +
 * cuBLAS for many) is reused as is:
 *   1. download ids (the grouping is decided on the host: one stream synchronisation per call);
 *   2. order the N*k slots by expert, upload the order;
 *   3. gather x rows into that order, then per expert: gate = x W_g^T, up = x W_u^T, gate = swiglu(gate, up),
 *      out = gate W_d^T (F32);
 *   4. y[n] = sum_slot weights[n, slot] * out[slot], in slot order, F32, one rounding.
 * Intermediates (gate, up) are in x's dtype: BF16 like every engine's expert GEMMs, or F32 for a full-precision
 * call. Rows are processed in chunks so the scratch stays bounded for long prefills. The host round trip makes
 * this path one synchronisation per call.
 *
 * With GLM53_CUDA_GROUPED_EXPERTS on (docs/cuda.md), larger batches whose x is BF16 and whose experts suit the
 * tensor cores take the device-grouped path instead (its section below): the same grouping done on the device
 * and every expert's rows in one launch of a tensor-core GEMM (gemm_wgmma.cuh's or gemm_mma.cuh's tile) per
 * projection, no host round trip.
 */
#include "kernels/cuda/gemm_mma.cuh"
#include "kernels/cuda/gemm_wgmma.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/gemv_mma.cuh"

#include <algorithm>
#include <new>
#include <vector>

enum {
    ROUTE_THREADS = 128,
    ROUTE_PER_LANE = 16,   /* experts a lane of moe_route's top-k warp holds: E <= 512 */
    EXPERT_THREADS = 256,
};
static const int64_t DEVICE_PATH_MAX_ROWS = 16;   /* rows up to which moe_experts stays on the device */
static const int64_t EXPERT_CHUNK_ROWS = 512;   /* token rows per round of moe_experts: bounds its scratch */

/* ------------------------------------------------------------------------------------------------------------
 * moe_route
 */
/* logits[N,E] F32, bias[E]; ids[N,K] I32, weights[N,K] F32. Dynamic shared memory: s, choice [E], keep [E]
 * (as floats), group_score [n_group]. */
__global__ void moe_route_kernel(int32_t *ids, float *weights, const float *logits, weight_ref bias, int64_t E,
                                 int64_t K, int32_t n_group, int32_t topk_group, bool norm, float scaling) {
    cuda_pdl_begin();
    extern __shared__ float smem[];
    float *s = smem, *choice = s + E, *keep = choice + E, *group_score = keep + E;
    const int64_t n = blockIdx.x;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        s[e] = cuda_sigmoid(logits[n * E + e]);
        choice[e] = s[e] + bias.at(0, e);
        keep[e] = n_group == 1 ? 1.0f : 0.0f;
    }
    __syncthreads();

    /* Group stage (thread 0; GLM-5.3 has one group, where it does nothing): a group's score is the sum of its
     * two best choice scores (one if it has one expert); keep the topk_group best groups, the lower group on
     * ties. */
    const int64_t per_group = E / n_group;
    if (n_group > 1 && threadIdx.x == 0) {
        for (int64_t grp = 0; grp < n_group; grp++) {
            float best = -INFINITY, second = -INFINITY;
            for (int64_t e = grp * per_group; e < (grp + 1) * per_group; e++) {
                if (choice[e] > best) {
                    second = best;
                    best = choice[e];
                } else if (choice[e] > second) {
                    second = choice[e];
                }
            }
            group_score[grp] = per_group >= 2 ? best + second : best;
        }
        for (int32_t picked = 0; picked < topk_group; picked++) {
            int64_t best = -1;
            for (int64_t grp = 0; grp < n_group; grp++)
                if (group_score[grp] != -INFINITY && (best < 0 || group_score[grp] > group_score[best])) best = grp;
            if (best < 0) break;   /* every remaining group scored -inf */
            for (int64_t e = best * per_group; e < (best + 1) * per_group; e++) keep[e] = 1.0f;
            group_score[best] = -INFINITY;
        }
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;

    /* Top-k of the kept choice scores, descending, the lower id on ties: warp 0, one arg-best per round. Lane l
     * holds experts e = l, l + 32, ... (ROUTE_PER_LANE of them) in registers, scans them ascending (so it keeps
     * its lowest id among equals); the warp then combines (score, id) pairs, the higher score or, equal, the
     * lower id, by a butterfly, so every lane ends with the round's pick. For finite scores that is the serial
     * scan's pick (the CPU backend's), so ids and their order agree with it. Every lane adds the picks' scores in
     * pick order (the same sum in each), and lane k keeps pick k, writing it at the end: nothing is read back from
     * global or shared memory between rounds (a lane-0 loop over shared memory and a read-back of the weights
     * took 12 us a call at E = 288). */
    const int lane = threadIdx.x;
    float mine[ROUTE_PER_LANE];
    uint32_t open = 0;   /* bit i: expert lane + 32 i is kept and not picked yet */
#pragma unroll
    for (int i = 0; i < ROUTE_PER_LANE; i++) {
        const int64_t e = lane + 32 * i;
        mine[i] = e < E ? choice[e] : 0.0f;
        if (e < E && keep[e] != 0.0f) open |= 1u << i;
    }
    float sum = 0.0f, my_weight = 0.0f;
    int32_t my_id = -1;
    for (int64_t k = 0; k < K; k++) {
        float bv = 0.0f;
        int32_t bi = -1;
#pragma unroll
        for (int i = 0; i < ROUTE_PER_LANE; i++)
            if ((open >> i & 1u) && (bi < 0 || mine[i] > bv)) bv = mine[i], bi = lane + 32 * i;
        for (int offset = 16; offset > 0; offset >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, offset);
            int32_t oi = __shfl_xor_sync(0xffffffffu, bi, offset);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        if (bi >= 0) {   /* else fewer kept experts than k (a config error): the slot stays unused */
            const float w = s[bi];
            sum += w;
            if (lane == k) my_id = bi, my_weight = w;
            if (bi % 32 == lane) open &= ~(1u << (bi / 32));
        }
    }
    if (lane < K) {
        ids[n * K + lane] = my_id;
        weights[n * K + lane] = my_id < 0 ? 0.0f : (norm ? my_weight / (sum + 1e-20f) : my_weight) * scaling;
    }
}

glm53_status cuda_moe_route(glm53_backend *be, glm53_tensor *ids, glm53_tensor *weights,
                            const glm53_tensor *logits, const glm53_tensor *bias, int32_t n_group,
                            int32_t topk_group, int32_t norm, float scaling) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(logits) && logits->dtype == GLM53_F32 && cuda_is_act(weights) && weights->dtype == GLM53_F32);
    assert(ids->dtype == GLM53_I32 && ids->data && ids->device == GLM53_DEVICE_CUDA);
    int64_t N = glm53_tensor_rows(logits), E = cuda_cols(logits), K = cuda_cols(ids);
    assert(n_group >= 1 && E % n_group == 0 && topk_group >= 1 && topk_group <= n_group && K <= E);
    assert(glm53_tensor_numel(ids) == N * K && glm53_tensor_numel(weights) == N * K && glm53_tensor_numel(bias) == E);
    assert(N <= INT32_MAX);
    if (E > 32 * ROUTE_PER_LANE || K > 32)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda moe_route: %lld experts, top %lld (at most %d and 32)",
                          (long long)E, (long long)K, 32 * ROUTE_PER_LANE);
    weight_ref br;
    GLM53_TRY(cuda_weight_ref(bias, &br, "moe_route"));
    GLM53_TRY(cuda_enter(cb));
    if (N == 0) return GLM53_OK;
    size_t smem = (size_t)(3 * E + n_group) * sizeof(float);
    GLM53_TRY(cuda_smem_optin(cb, (const void *)moe_route_kernel, smem, "moe_route"));
    CUDA_TRY(cuda_launch(cb, moe_route_kernel, (unsigned)N, ROUTE_THREADS, smem, cb->pdl, (int32_t *)ids->data,
                         (float *)weights->data, (const float *)logits->data, br, E, K, n_group, topk_group, norm != 0,
                         scaling));
    CUDA_LAUNCHED("moe_route");
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * moe_experts, device path
 */
/* One expert's weights as kernels read them (a routed-to expert without weights has gate.data == NULL). */
struct cuda_expert {
    weight_ref gate, up, down;
    int64_t    width;   /* Fe */
};

/* The experts this rank computes (glm53_expert_set.first_held / n_held; n 0: all). */
struct held_range {
    int32_t first, n;
    __device__ bool holds(int32_t e) const { return n == 0 || (e >= first && e < first + n); }
};

/* Whether this rank computes a slot routed to expert e: a used slot (e >= 0) of an expert it holds whose weights
 * it has. A held id outside the table or without weights is a fault, recorded by the pass that meets it first
 * (gate/up, or the grouped count); the other passes skip such a slot. */
__device__ inline bool expert_computed(int32_t e, const cuda_expert *experts, int32_t n_experts, held_range held) {
    return e >= 0 && held.holds(e) && e < n_experts && experts[e].gate.data != nullptr;
}

/* What prepare_experts leaves in glm53_expert_set.device. */
struct cuda_expert_table {
    cuda_expert *experts;   /* device [n_experts] */
    int64_t      max_width;
    bool         one_width; /* every expert with weights is max_width wide (the streaming kernels need it) */
    bool         gemm_fits; /* every expert's D and width are multiples of GEMM_MMA_BK (the grouped path needs it) */
    bool         wgmma_fits; /* every expert's three weights suit gemm_wgmma_block (FP8, 128 x 128 scale blocks) */
    int32_t      mma_dtype; /* every expert's weights suit the tensor-core GEMV in this dtype (FP8 / BF16); -1: no */
};

/* h[slot, f] = swiglu(round(x[slot / K] . gate_e[f]), round(x[slot / K] . up_e[f])), e = ids[slot]; h [N*K, F]
 * in x's dtype, F = the widest expert. grid (ceil(F / warps), N*K); warp f of the block row. */
__global__ void __launch_bounds__(EXPERT_THREADS)
expert_gate_up_kernel(act_out h, act_in x, const int32_t *ids, const cuda_expert *experts, int32_t n_experts,
                      held_range held, int64_t K, int64_t D, int64_t F, float limit, cuda_fault *fault) {
    const int64_t slot = blockIdx.y, f = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    const int32_t e = ids[slot];
    if (e < 0 || f >= F || !held.holds(e)) return;   /* an unused slot, or another rank's: combine skips it */
    if (e >= n_experts || !experts[e].gate.data) {
        if (f == 0 && lane == 0) cuda_record_fault(fault, CUDA_FAULT_MOE_EXPERTS, slot, e, n_experts);
        return;
    }
    const cuda_expert &ex = experts[e];
    if (f >= ex.width) return;
    float g[1] = {0.0f}, u[1] = {0.0f};
    gemv_lane_partials<1>(g, ex.gate, f, x, (slot / K) * D, 1, D, gemv_vec16(ex.gate, D), lane);
    gemv_lane_partials<1>(u, ex.up, f, x, (slot / K) * D, 1, D, gemv_vec16(ex.up, D), lane);
    float gs = round_as_act(cuda_warp_sum(g[0]), h.bf16), us = round_as_act(cuda_warp_sum(u[0]), h.bf16);
    if (lane == 0) h.store(slot * F + f, cuda_swiglu_value(gs, us, limit));
}

/* The same on tensor cores (BF16 x): grid (ceil(F / 8), N*K), gemv_mma_smem(1, 2, slab) bytes, slab =
 * gemv_mma_slab(1, D). Tile 0 is gate rows f0 .. f0+8 of expert ids[slot], tile 1 the same rows of up. */
template <bool FP8>
__global__ void __launch_bounds__(GEMV_MMA_THREADS)
expert_gate_up_mma_kernel(act_out h, const __nv_bfloat16 *x, const int32_t *ids, const cuda_expert *experts,
                          int32_t n_experts, held_range held, int64_t K, int D, int64_t F, float limit, int slab,
                          cuda_fault *fault) {
    extern __shared__ __align__(16) uint8_t expert_smem[];
    const int64_t slot = blockIdx.y, f0 = (int64_t)blockIdx.x * 8;
    const int32_t e = ids[slot];   /* the same for the whole block: the returns below leave together */
    if (e < 0 || !held.holds(e)) return;
    if (e >= n_experts || !experts[e].gate.data) {
        if (blockIdx.x == 0 && threadIdx.x == 0) cuda_record_fault(fault, CUDA_FAULT_MOE_EXPERTS, slot, e, n_experts);
        return;
    }
    const cuda_expert &ex = experts[e];
    if (f0 >= ex.width) return;
    const weight_ref tile_w[2] = {ex.gate, ex.up};
    const int64_t tile_row[2] = {f0, f0}, tile_end[2] = {ex.width, ex.width};
    const float *sums = gemv_mma_block<FP8, 2, 2>(expert_smem, tile_w, tile_row, tile_end, x + (slot / K) * D, 1, D, slab);
    if (threadIdx.x < 8 && f0 + threadIdx.x < ex.width) {   /* row m = 0 of tile 0 (gate) and tile 1 (up) */
        float g = round_as_act(sums[threadIdx.x], h.bf16), u = round_as_act(sums[16 * 8 + threadIdx.x], h.bf16);
        h.store(slot * F + f0 + threadIdx.x, cuda_swiglu_value(g, u, limit));
    }
}

/* out[slot, d] = h[slot, :Fe] . down_e[d] (F32); grid (ceil(D / warps), N*K). */
__global__ void __launch_bounds__(EXPERT_THREADS)
expert_down_kernel(float *out, act_in h, const int32_t *ids, const cuda_expert *experts, int32_t n_experts,
                   held_range held, int64_t D, int64_t F) {
    const int64_t slot = blockIdx.y, d = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    const int32_t e = ids[slot];
    if (!expert_computed(e, experts, n_experts, held) || d >= D) return;   /* faults: gate_up */
    const cuda_expert &ex = experts[e];
    float acc[1] = {0.0f};
    gemv_lane_partials<1>(acc, ex.down, d, h, slot * F, 1, ex.width, gemv_vec16(ex.down, ex.width), lane);
    float s = cuda_warp_sum(acc[0]);
    if (lane == 0) out[slot * D + d] = s;
}

/* The same on tensor cores: grid (ceil(D / 16), N*K), gemv_mma_smem(1, 2, slab) bytes, slab = gemv_mma_slab(1, F);
 * tiles 0 and 1 are down rows d0 .. d0+8 and d0+8 .. d0+16. */
template <bool FP8>
__global__ void __launch_bounds__(GEMV_MMA_THREADS)
expert_down_mma_kernel(float *out, const __nv_bfloat16 *h, const int32_t *ids, const cuda_expert *experts,
                       int32_t n_experts, held_range held, int64_t D, int64_t F, int slab) {
    extern __shared__ __align__(16) uint8_t expert_smem[];
    const int64_t slot = blockIdx.y, d0 = (int64_t)blockIdx.x * 16;
    const int32_t e = ids[slot];
    if (!expert_computed(e, experts, n_experts, held)) return;   /* faults: gate_up */
    const cuda_expert &ex = experts[e];
    const weight_ref tile_w[2] = {ex.down, ex.down};
    const int64_t tile_row[2] = {d0, d0 + 8}, tile_end[2] = {D, D};
    const float *sums = gemv_mma_block<FP8, 2, 2>(expert_smem, tile_w, tile_row, tile_end, h + slot * F, 1,
                                                  (int)ex.width, slab);
    if (threadIdx.x < 16) {   /* row m = 0 of both tiles */
        const int r = threadIdx.x / 8, c = threadIdx.x % 8;
        if (d0 + 8 * r + c < D) out[slot * D + d0 + 8 * r + c] = sums[r * 16 * 8 + c];
    }
}

/* The streaming forms of the two kernels above (gemv_mma.cuh's gemv_mma_stream: a block takes a run of tiles,
 * x staged once, loads running on across tiles), for calls whose x rows fit shared memory whole and whose experts
 * are all F wide: at one decode row the per-slot kernels read the 8 experts' 134 MB of gate and up at 0.37 of
 * the H200's bandwidth (84 us a layer), a block per 8 rows paying x's staging and a load round trip each. A tile
 * is what a block of the kernels above computes (gate and up rows f0 .. f0+8 of one slot; down rows d0 .. d0+16),
 * with the same arithmetic: the same bits. Unused slots and other ranks' experts load nothing and store nothing. */
struct expert_tiles_common {
    static constexpr bool rows_before_wait = false;   /* ids come from moe_route */
    const int32_t     *ids;
    const cuda_expert *experts;
    int32_t            n_experts;
    held_range         held;
    /* expert of `slot` when this rank computes it with weights, else NULL */
    __device__ const cuda_expert *expert_of(int64_t slot) const {
        const int32_t e = ids[slot];
        if (!expert_computed(e, experts, n_experts, held)) return nullptr;
        return &experts[e];
    }
};

template <bool FP8>
struct expert_gate_up_tiles : expert_tiles_common {
    act_out     h;            /* [N*K, F] */
    int64_t     K, F, f_tiles;
    int         D;
    float       limit;
    cuda_fault *fault;
    __device__ int rows(int t, gemv_mma_lane_rows (&lane_rows)[2], int g) const {
        const int64_t slot = t / f_tiles, f0 = (t % f_tiles) * 8;
        const cuda_expert *ex = expert_of(slot);
        const weight_ref none = {};
        lane_rows[0] = gemv_mma_rows_of<FP8>(ex ? ex->gate : none, f0, ex ? F : 0, D, g);
        lane_rows[1] = gemv_mma_rows_of<FP8>(ex ? ex->up : none, f0, ex ? F : 0, D, g);
        return (int)(slot / K);
    }
    __device__ void store(int t, const float *sums) const {
        const int64_t slot = t / f_tiles, f0 = (t % f_tiles) * 8;
        if (!expert_of(slot)) {   /* unused, another rank's, or (a fault) routed to an expert without weights */
            const int32_t e = ids[slot];
            if (e >= 0 && held.holds(e) && f0 == 0 && threadIdx.x == 0)
                cuda_record_fault(fault, CUDA_FAULT_MOE_EXPERTS, slot, e, n_experts);
            return;
        }
        if (threadIdx.x >= 8 || f0 + threadIdx.x >= F) return;
        float gv = round_as_act(sums[threadIdx.x], h.bf16), uv = round_as_act(sums[16 * 8 + threadIdx.x], h.bf16);
        h.store(slot * F + f0 + threadIdx.x, cuda_swiglu_value(gv, uv, limit));
    }
};

template <bool FP8>
struct expert_down_tiles : expert_tiles_common {
    float  *out;          /* [N*K, D] */
    int64_t D, d_tiles;
    int     F;
    __device__ int rows(int t, gemv_mma_lane_rows (&lane_rows)[2], int g) const {
        const int64_t slot = t / d_tiles, d0 = (t % d_tiles) * 16;
        const cuda_expert *ex = expert_of(slot);
        const weight_ref none = {};
        lane_rows[0] = gemv_mma_rows_of<FP8>(ex ? ex->down : none, d0, ex ? D : 0, F, g);
        lane_rows[1] = gemv_mma_rows_of<FP8>(ex ? ex->down : none, d0 + 8, ex ? D : 0, F, g);
        return (int)slot;
    }
    __device__ void store(int t, const float *sums) const {
        const int64_t slot = t / d_tiles, d0 = (t % d_tiles) * 16;
        if (threadIdx.x >= 16 || !expert_of(slot)) return;
        const int r = threadIdx.x / 8, col = threadIdx.x % 8;
        if (d0 + 8 * r + col < D) out[slot * D + d0 + 8 * r + col] = sums[r * 16 * 8 + col];
    }
};

/* Grid: ceil(tiles / per_block) blocks of GEMV_MMA_THREADS; gemv_mma_stream_smem(x_rows, 2, K) bytes. */
template <class Tiles, bool FP8>
__device__ inline void expert_stream(const Tiles &tiles, int n_tiles, int per_block, const __nv_bfloat16 *x,
                                     int x_rows, int K) {
    extern __shared__ __align__(16) uint8_t expert_smem[];
    const int t_begin = blockIdx.x * per_block, t_end = min(t_begin + per_block, n_tiles);
    gemv_mma_stream<FP8, 2, 2>(expert_smem, tiles, t_begin, t_end, x, x_rows, 1, K);
}
template <class Tiles, bool FP8>
__global__ void __launch_bounds__(GEMV_MMA_THREADS)
expert_stream_kernel(const Tiles tiles, int n_tiles, int per_block, const __nv_bfloat16 *x, int x_rows, int K) {
    expert_stream<Tiles, FP8>(tiles, n_tiles, per_block, x, x_rows, K);
}
/* The same with registers budgeted for GEMV_MMA_FP8_BLOCKS blocks a multiprocessor (GLM53_CUDA_FP8_OCCUPANCY). */
template <class Tiles, bool FP8>
__global__ void __launch_bounds__(GEMV_MMA_THREADS, GEMV_MMA_FP8_BLOCKS)
expert_stream_kernel_occupancy(const Tiles tiles, int n_tiles, int per_block, const __nv_bfloat16 *x, int x_rows,
                               int K) {
    expert_stream<Tiles, FP8>(tiles, n_tiles, per_block, x, x_rows, K);
}

template <class Tiles, bool FP8>
static glm53_status expert_stream_launch(cuda_backend *cb, const Tiles &tiles, int n_tiles, const __nv_bfloat16 *x,
                                         int x_rows, int K, const char *what) {
    auto kernel_fn = expert_stream_kernel<Tiles, FP8>;
    if constexpr (FP8)
        if (cb->fp8_occupancy) kernel_fn = expert_stream_kernel_occupancy<Tiles, FP8>;
    const void *kernel = (const void *)kernel_fn;
    const size_t smem = gemv_mma_stream_smem(x_rows, 2, K);
    GLM53_TRY(cuda_smem_optin(cb, kernel, smem, what));
    if (n_tiles == 0) return GLM53_OK;
    unsigned blocks;
    int per_block;
    GLM53_TRY(gemv_mma_stream_grid(cb, kernel, smem, n_tiles, &blocks, &per_block));
    CUDA_TRY(cuda_launch(cb, kernel_fn, blocks, GEMV_MMA_THREADS, smem, cb->pdl, tiles, n_tiles, per_block, x, x_rows,
                         K));
    CUDA_LAUNCHED(what);
    return GLM53_OK;
}

/* Whether rows x [rows, cols] BF16 fit the streaming kernels' shared memory whole. */
static bool expert_rows_stream(const cuda_backend *cb, int64_t rows, int64_t cols) {
    return cb->gemv_stream && rows * (cols + GEMV_MMA_PAD) * 2 <= GEMV_MMA_X_BUDGET;
}

/* y[n][d] = sum_k weights[n][k] * out[n*K + k][d] over the used slots this rank holds, in slot order. */
__global__ void slot_combine_kernel(act_out y, const float *out, const int32_t *ids, const float *weights,
                                    held_range held, int64_t N, int64_t K, int64_t D) {
    cuda_pdl_begin();
    GRID_STRIDE(i, N * D) {
        int64_t n = i / D, d = i % D;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            int32_t e = ids[n * K + k];
            if (e >= 0 && held.holds(e)) acc += weights[n * K + k] * out[(n * K + k) * D + d];
        }
        y.store(i, acc);
    }
}

/* The gate/up and down launches of the tensor-core expert path; h [N*K, F] BF16, out [N*K, D] F32. Each takes the
 * streaming kernel when its x rows fit shared memory whole and every expert is F wide, else a block per tile. */
template <bool FP8>
static glm53_status experts_mma_launch(cuda_backend *cb, void *h, void *out, const glm53_tensor *x, const int32_t *ids,
                                       const cuda_expert_table *table, int32_t n_experts, held_range held, int64_t N,
                                       int64_t K, int64_t D, int64_t F, float limit) {
    const expert_tiles_common common = {ids, table->experts, n_experts, held};
    if (table->one_width && expert_rows_stream(cb, N, D)) {
        const expert_gate_up_tiles<FP8> tiles = {common, act_out{h, true}, K, F, (F + 7) / 8, (int)D, limit, cb->fault};
        GLM53_TRY((expert_stream_launch<expert_gate_up_tiles<FP8>, FP8>(
            cb, tiles, (int)(N * K * tiles.f_tiles), (const __nv_bfloat16 *)x->data, (int)N, (int)D,
            "moe_experts (gate, up; mma stream)")));
    } else {
        const int slab = gemv_mma_slab(1, (int)D);
        const size_t smem = gemv_mma_smem(1, 2, slab);
        GLM53_TRY(cuda_smem_optin(cb, (const void *)expert_gate_up_mma_kernel<FP8>, smem, "moe_experts (gate, up)"));
        dim3 grid((unsigned)((F + 7) / 8), (unsigned)(N * K));
        expert_gate_up_mma_kernel<FP8><<<grid, GEMV_MMA_THREADS, smem, cb->stream>>>(
            act_out{h, true}, (const __nv_bfloat16 *)x->data, ids, table->experts, n_experts, held, K, (int)D, F, limit,
            slab, cb->fault);
        CUDA_LAUNCHED("moe_experts (gate, up; mma)");
    }
    if (table->one_width && expert_rows_stream(cb, N * K, F)) {
        const expert_down_tiles<FP8> tiles = {common, (float *)out, D, (D + 15) / 16, (int)F};
        return expert_stream_launch<expert_down_tiles<FP8>, FP8>(cb, tiles, (int)(N * K * tiles.d_tiles),
                                                                 (const __nv_bfloat16 *)h, (int)(N * K), (int)F,
                                                                 "moe_experts (down; mma stream)");
    }
    const int slab = gemv_mma_slab(1, (int)F);
    const size_t smem = gemv_mma_smem(1, 2, slab);
    GLM53_TRY(cuda_smem_optin(cb, (const void *)expert_down_mma_kernel<FP8>, smem, "moe_experts (down)"));
    dim3 grid((unsigned)((D + 15) / 16), (unsigned)(N * K));
    expert_down_mma_kernel<FP8><<<grid, GEMV_MMA_THREADS, smem, cb->stream>>>(
        (float *)out, (const __nv_bfloat16 *)h, ids, table->experts, n_experts, held, D, F, slab);
    CUDA_LAUNCHED("moe_experts (down; mma)");
    return GLM53_OK;
}

static glm53_status experts_on_tensor_cores(cuda_backend *cb, void *h, void *out, const glm53_tensor *x,
                                            const int32_t *ids, const cuda_expert_table *table, int32_t n_experts,
                                            held_range held, int64_t N, int64_t K, int64_t D, int64_t F, float limit) {
    if (table->mma_dtype == GLM53_F8_E4M3)
        return experts_mma_launch<true>(cb, h, out, x, ids, table, n_experts, held, N, K, D, F, limit);
    return experts_mma_launch<false>(cb, h, out, x, ids, table, n_experts, held, N, K, D, F, limit);
}

static glm53_status moe_experts_on_device(cuda_backend *cb, glm53_tensor *y, const glm53_tensor *x,
                                          const glm53_tensor *ids, const glm53_tensor *weights,
                                          const cuda_expert_table *table, const glm53_expert_set *set, float limit) {
    const int32_t n_experts = set->n_experts;
    const held_range held = {set->first_held, set->n_held};
    int64_t N = glm53_tensor_rows(x), D = cuda_cols(x), K = cuda_cols(ids), F = table->max_width;
    size_t act = glm53_dtype_size((glm53_dtype)x->dtype);
    cuda_scratch h_buf, out_buf;
    GLM53_TRY(h_buf.get(cb, (size_t)(N * K * F) * act, "moe_experts swiglu rows"));
    GLM53_TRY(out_buf.get(cb, (size_t)(N * K * D) * sizeof(float), "moe_experts expert outputs"));
    const int32_t *id = (const int32_t *)ids->data;
    if (x->dtype == GLM53_BF16 && table->mma_dtype >= 0 && (uintptr_t)x->data % 16 == 0) {
        GLM53_TRY(experts_on_tensor_cores(cb, h_buf.ptr, out_buf.ptr, x, id, table, n_experts, held, N, K, D, F, limit));
    } else {
        const int warps = EXPERT_THREADS / 32;
        dim3 grid_f((unsigned)((F + warps - 1) / warps), (unsigned)(N * K));
        expert_gate_up_kernel<<<grid_f, EXPERT_THREADS, 0, cb->stream>>>(
            act_out{h_buf.ptr, x->dtype == GLM53_BF16}, cuda_act_in(x), id, table->experts, n_experts, held, K, D, F,
            limit, cb->fault);
        CUDA_LAUNCHED("moe_experts (gate, up)");
        dim3 grid_d((unsigned)((D + warps - 1) / warps), (unsigned)(N * K));
        expert_down_kernel<<<grid_d, EXPERT_THREADS, 0, cb->stream>>>(
            (float *)out_buf.ptr, act_in{h_buf.ptr, x->dtype == GLM53_BF16}, id, table->experts, n_experts, held, D, F);
        CUDA_LAUNCHED("moe_experts (down)");
    }
    CUDA_TRY(cuda_launch(cb, slot_combine_kernel, cuda_blocks_for(N * D, 256), 256, 0, cb->pdl, cuda_act_out(y),
                         (const float *)out_buf.ptr, (const int32_t *)ids->data, (const float *)weights->data, held, N,
                         K, D));
    CUDA_LAUNCHED("moe_experts (combine)");
    return GLM53_OK;
}

glm53_status cuda_prepare_experts(glm53_backend *be, glm53_expert_set *set) {
    cuda_backend *cb = cuda_impl(be);
    if (set->device) return GLM53_OK;
    std::vector<cuda_expert> host;
    try {
        host.resize((size_t)set->n_experts);
    } catch (const std::bad_alloc &) {
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda prepare_experts: no host memory for %d experts", set->n_experts);
    }
    int64_t max_width = 0, min_width = INT64_MAX;
    int32_t mma_dtype = -2;   /* -2: no expert seen yet */
    bool gemm_fits = true, wgmma_fits = true;
    for (int32_t e = 0; e < set->n_experts; e++) {
        cuda_expert &ex = host[(size_t)e];
        ex = cuda_expert{};
        if (!set->gate[e] || !set->up[e] || !set->down[e]) continue;   /* a fault if ever routed to */
        GLM53_TRY(cuda_weight_ref(set->gate[e], &ex.gate, "prepare_experts"));
        GLM53_TRY(cuda_weight_ref(set->up[e], &ex.up, "prepare_experts"));
        GLM53_TRY(cuda_weight_ref(set->down[e], &ex.down, "prepare_experts"));
        ex.width = set->gate[e]->shape[0];
        if (ex.width % GEMM_MMA_BK || set->gate[e]->shape[1] % GEMM_MMA_BK) gemm_fits = false;
        if (ex.width > max_width) max_width = ex.width;
        if (ex.width < min_width) min_width = ex.width;
        /* the tensor-core path: every expert's three weights fit it, all in one dtype */
        const int64_t D = set->gate[e]->shape[1];
        bool fits = gemv_mma_weight_fits(ex.gate, D) && gemv_mma_weight_fits(ex.up, D) &&
                    gemv_mma_weight_fits(ex.down, ex.width) && ex.up.dtype == ex.gate.dtype &&
                    ex.down.dtype == ex.gate.dtype;
        wgmma_fits = wgmma_fits && gemm_wgmma_weight_fits(ex.gate, D) && gemm_wgmma_weight_fits(ex.up, D) &&
                     gemm_wgmma_weight_fits(ex.down, ex.width);   /* the down check: width % 128 == 0 */
        if (!fits) mma_dtype = -1;
        else if (mma_dtype == -2) mma_dtype = ex.gate.dtype;
        else if (mma_dtype != ex.gate.dtype) mma_dtype = -1;
    }
    cuda_expert_table *table = new (std::nothrow) cuda_expert_table();
    if (!table) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda prepare_experts: no host memory");
    table->max_width = max_width;
    table->one_width = min_width == max_width;
    table->gemm_fits = gemm_fits;
    table->wgmma_fits = wgmma_fits && max_width > 0;
    table->mma_dtype = mma_dtype >= 0 ? mma_dtype : -1;
    size_t bytes = host.size() * sizeof(cuda_expert);
    glm53_status st = cuda_device_alloc(cb, bytes ? bytes : 1, (void **)&table->experts, "expert table");
    if (st == GLM53_OK && bytes) {
        cudaError_t e = cudaMemcpyAsync(table->experts, host.data(), bytes, cudaMemcpyHostToDevice, cb->stream);
        if (e == cudaSuccess) st = cuda_stream_wait(cb);   /* host is a local: the copy must finish first */
        else st = GLM53_FAIL(GLM53_ERR_BACKEND, "cuda prepare_experts: upload: %s", cudaGetErrorString(e));
    }
    if (st != GLM53_OK) {
        if (table->experts) cuda_device_free(cb, table->experts);
        delete table;
        return st;
    }
    set->device = table;
    return GLM53_OK;
}

void cuda_release_experts(glm53_backend *be, glm53_expert_set *set) {
    cuda_expert_table *table = (cuda_expert_table *)set->device;
    if (!table) return;
    cuda_device_free(cuda_impl(be), table->experts);
    delete table;
    set->device = nullptr;
}

/* ------------------------------------------------------------------------------------------------------------
 * moe_experts, host-grouped path
 */
/* xg[i] = x[row_of[i]] for i < n, rows of D. */
__global__ void gather_by_index_kernel(act_out xg, act_in x, const int32_t *row_of, int64_t n, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * D; i += (int64_t)gridDim.x * blockDim.x)
        xg.store(i, x[(int64_t)row_of[i / D] * D + i % D]);
}

/* y[n][d] = sum_k weights[n][k] * out[place[n*K + k]][d] (place < 0: slot unused), rows n0 .. n0+rows. */
__global__ void combine_kernel(act_out y, const float *out, const int32_t *place, const float *weights, int64_t n0,
                               int64_t rows, int64_t K, int64_t D) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / D, d = i % D;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            int32_t at = place[r * K + k];
            if (at >= 0) acc += weights[(n0 + r) * K + k] * out[(int64_t)at * D + d];
        }
        y.store((n0 + r) * D + d, acc);
    }
}

static glm53_status upload_i32(cuda_backend *cb, void *dst, const int32_t *src, size_t n) {
    if (n) CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(int32_t), cudaMemcpyHostToDevice, cb->stream));
    return GLM53_OK;
}

static glm53_status moe_experts_grouped(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x,
                                        const glm53_tensor *ids, const glm53_tensor *weights,
                                        const glm53_expert_set *set, float limit) {
    cuda_backend *cb = cuda_impl(be);
    const glm53_tensor *const *gate = set->gate, *const *up = set->up, *const *down = set->down;
    const int32_t n_experts = set->n_experts;
    assert(cuda_is_act(y) && cuda_is_act(x) && x->dtype == y->dtype);
    assert(cuda_is_act(weights) && weights->dtype == GLM53_F32);
    assert(ids->dtype == GLM53_I32 && ids->data && ids->device == GLM53_DEVICE_CUDA);
    int64_t N = glm53_tensor_rows(x), D = cuda_cols(x), K = cuda_cols(ids);
    assert(glm53_tensor_rows(y) == N && cuda_cols(y) == D);
    assert(glm53_tensor_numel(ids) == N * K && glm53_tensor_numel(weights) == N * K);
    GLM53_TRY(cuda_enter(cb));
    if (N == 0 || D == 0) return GLM53_OK;

    /* 1. the routing decisions, on the host */
    std::vector<int32_t> id_host((size_t)(N * K));
    if (N * K > 0) CUDA_TRY(cudaMemcpyAsync(id_host.data(), ids->data, (size_t)(N * K) * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, cb->stream));
    GLM53_TRY(cuda_stream_wait(cb));
    int64_t F = 0;
    for (int64_t i = 0; i < N * K; i++) {
        int32_t &e = id_host[(size_t)i];
        if (e >= 0 && !glm53_expert_is_held(set, e)) e = -1;   /* another rank's expert: it adds this slot */
        if (e < 0) continue;   /* a slot moe_route left unused */
        if (e >= n_experts)
            return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "cuda moe_experts: expert id %d at slot %lld is outside [0, %d)",
                              e, (long long)i, n_experts);
        if (!gate[e] || !up[e] || !down[e])
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda moe_experts: expert %d is routed to but has no weights", e);
        assert(gate[e]->ndim == 2 && gate[e]->shape[1] == D && up[e]->shape[0] == gate[e]->shape[0]);
        assert(up[e]->shape[1] == D && down[e]->shape[0] == D && down[e]->shape[1] == gate[e]->shape[0]);
        if (gate[e]->shape[0] > F) F = gate[e]->shape[0];
    }

    /* Scratch for one chunk of rows: gathered x, gate/up (x's dtype), expert outputs (F32), two index arrays. */
    int64_t chunk_rows = N < EXPERT_CHUNK_ROWS ? N : EXPERT_CHUNK_ROWS, slots_max = chunk_rows * K;
    size_t act = glm53_dtype_size((glm53_dtype)x->dtype);
    cuda_scratch xg_buf, gate_buf, up_buf, out_buf, index_buf;
    GLM53_TRY(xg_buf.get(cb, (size_t)(slots_max * D) * act, "moe_experts gathered rows"));
    GLM53_TRY(gate_buf.get(cb, (size_t)(slots_max * (F > 0 ? F : 1)) * act, "moe_experts gate"));
    GLM53_TRY(up_buf.get(cb, (size_t)(slots_max * (F > 0 ? F : 1)) * act, "moe_experts up"));
    GLM53_TRY(out_buf.get(cb, (size_t)(slots_max * D) * sizeof(float), "moe_experts expert outputs"));
    GLM53_TRY(index_buf.get(cb, (size_t)(2 * slots_max) * sizeof(int32_t), "moe_experts slot order"));
    int32_t *row_of_dev = (int32_t *)index_buf.ptr, *place_dev = row_of_dev + slots_max;

    std::vector<int32_t> count((size_t)n_experts), start((size_t)n_experts), row_of((size_t)slots_max),
        place((size_t)slots_max);
    for (int64_t n0 = 0; n0 < N; n0 += chunk_rows) {
        int64_t rows = N - n0 < chunk_rows ? N - n0 : chunk_rows;
        /* 2. slots ordered by expert (ascending slot within an expert): row_of[i] is the x row of ordered slot
         *    i, place[slot] its position in that order (-1: unused slot). */
        std::fill(count.begin(), count.end(), 0);
        for (int64_t s = 0; s < rows * K; s++) {
            int32_t e = id_host[(size_t)(n0 * K + s)];
            if (e >= 0) count[(size_t)e]++;
        }
        int32_t used = 0;
        for (int32_t e = 0; e < n_experts; e++) {
            start[(size_t)e] = used;
            used += count[(size_t)e];
        }
        std::vector<int32_t> fill_at(start);
        for (int64_t s = 0; s < rows * K; s++) {
            int32_t e = id_host[(size_t)(n0 * K + s)];
            if (e < 0) {
                place[(size_t)s] = -1;
                continue;
            }
            int32_t at = fill_at[(size_t)e]++;
            row_of[(size_t)at] = (int32_t)(n0 + s / K);
            place[(size_t)s] = at;
        }
        /* From pageable memory both copies are staged before they return, so the vectors may change next chunk. */
        GLM53_TRY(upload_i32(cb, row_of_dev, row_of.data(), (size_t)used));
        GLM53_TRY(upload_i32(cb, place_dev, place.data(), (size_t)(rows * K)));

        /* 3. experts */
        if (used > 0) {
            gather_by_index_kernel<<<cuda_blocks_for(used * D, 256), 256, 0, cb->stream>>>(
                act_out{xg_buf.ptr, x->dtype == GLM53_BF16}, cuda_act_in(x), row_of_dev, used, D);
            CUDA_LAUNCHED("moe_experts (gather rows)");
        }
        for (int32_t e = 0; e < n_experts; e++) {
            int64_t m = count[(size_t)e], at = start[(size_t)e];
            if (m == 0) continue;
            int64_t Fe = gate[e]->shape[0];
            glm53_tensor xe = cuda_view_2d((char *)xg_buf.ptr + (size_t)(at * D) * act, x->dtype, m, D);
            /* slot i owns [i*F, (i+1)*F) of gate/up: experts of different widths never overlap */
            glm53_tensor ge = cuda_view_2d((char *)gate_buf.ptr + (size_t)(at * F) * act, x->dtype, m, Fe);
            glm53_tensor ue = cuda_view_2d((char *)up_buf.ptr + (size_t)(at * F) * act, x->dtype, m, Fe);
            glm53_tensor oe = cuda_view_2d((float *)out_buf.ptr + at * D, GLM53_F32, m, D);
            GLM53_TRY(cuda_matmul(be, &ge, &xe, gate[e]));
            GLM53_TRY(cuda_matmul(be, &ue, &xe, up[e]));
            GLM53_TRY(cuda_swiglu(be, &ge, &ge, &ue, limit));   /* elementwise: in place is safe */
            GLM53_TRY(cuda_matmul(be, &oe, &ge, down[e]));
        }

        /* 4. weighted sum per row */
        combine_kernel<<<cuda_blocks_for(rows * D, 256), 256, 0, cb->stream>>>(
            cuda_act_out(y), (const float *)out_buf.ptr, place_dev, (const float *)weights->data, n0, rows, K, D);
        CUDA_LAUNCHED("moe_experts (combine)");
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * moe_experts, device-grouped path on tensor cores (GLM53_CUDA_GROUPED_EXPERTS; prefill)
 *
 * More rows than the device path takes, BF16 x, an expert table whose weights suit the tensor cores (FP8 or BF16)
 * and whose D and widths are multiples of 64. Per chunk of up to GROUPED_CHUNK_ROWS rows (folded tile;
 * half as many otherwise), all on the device:
 *   1. count the slots of each expert (atomics; unused slots and other ranks' experts are skipped, a slot routed
 *      to an expert without weights records a fault), then one block turns the counts into each expert's first
 *      ordered slot (start) and first m-tile (tile_start; tile_start[E] = the number of m-tiles; an m-tile is
 *      the block tile's rows: 64 or 128, the chunk's tile below);
 *   2. place every slot: at = start[e] + atomicAdd(fill[e]), row_of[at] = its x row, place[slot] = at. The order
 *      within an expert depends on the atomics' order, the bits do not: a row's products see only that row;
 *   3. gate and up with the SwiGLU (block (f-tile of 64, m-tile): the m-tile's expert by binary search of
 *      tile_start, its gathered x rows, gate and up rows f0 .. f0 + 64), then down (block (d-tile of 128, m-tile),
 *      into F32), then the weighted sum per row in slot order (combine_kernel, the host-grouped path's).
 * The block tile (grouped_tile), chosen per chunk:
 *   - where every expert is FP8 with 128 x 128 scale blocks, D and the widths are multiples of 128 and
 *     GLM53_CUDA_GROUPED_WGMMA is on, gemm_wgmma.cuh's wgmma tile: folded (the block scales multiplied into the
 *     converted codes, the weights' BF16 the cuBLAS fallback's dequantise gives; two blocks a multiprocessor) where
 *     GLM53_CUDA_GROUPED_FOLDED is on (the default since the H100 run of 2026-12-07 22:05), else the promoted
 *     one (exact codes, F32 sums times the scale per 128 k, one block a multiprocessor). The folded tile has 128
 *     rows, or 64 (one warpgroup) when the chunk's slots average fewer than GROUPED_SMALL_TILE_ROWS an expert: a
 *     2,048-token chunk of a chunked prefill gives about 57 rows an expert at 288 experts, top 8, which would
 *     leave the 128-row tile half empty;
 *   - else gemm_mma.cuh's (64 rows, mma.sync; FP8 or BF16 weights).
 * The grid's m-tile dimension is the bound slots / tile rows + E; blocks past the real count return at once. No host
 * synchronisation, six launches and two memsets per chunk whatever the number of experts, each expert's weights
 * read as stored once per chunk per m-tile and f- or d-tile (an expert's m-tiles of one f- or d-tile run side by
 * side, so the later ones mostly hit L2): chunks of 8,192 rows halve the expert weight traffic of an 8,192-token
 * prefill against chunks of 4,096 (288 experts, D 4096, width 2048: 72 -> 36 GB). Intermediates as the other
 * paths: gate and up rounded to BF16 before the SwiGLU, h in BF16, expert outputs in F32, one rounding in the
 * combine.
 */
/* Token rows per round with the folded tile (half of it with the others, moe_experts_grouped_mma): at k = 8,
 * D = 4096, F = 2048 the scratch is h [65,536 slots][2048] BF16 256 MiB, the expert outputs [65,536][4096] F32
 * 1 GiB, the index arrays 0.5 MiB; the grid's m-tile bound 65,536 / 64 + E. */
static const int64_t GROUPED_CHUNK_ROWS = 8192;
/* Below this many slots an expert on average (slots / E), a chunk takes the 64-row folded tile. Under expert
 * parallelism too: a held expert still gets slots / E rows on average, the other ranks' experts taking theirs. */
static const int64_t GROUPED_SMALL_TILE_ROWS = 96;

struct expert_groups {
    int32_t *count;        /* [E] slots of each expert in this chunk */
    int32_t *fill;         /* [E] placed so far (step 2) */
    int32_t *start;        /* [E] first ordered slot of each expert */
    int32_t *tile_start;   /* [E + 1] first m-tile of each expert; [E]: the number of m-tiles */
    int32_t *row_of;       /* [slots] x row of ordered slot i */
    int32_t *place;        /* [slots] ordered position of slot s, -1: not computed here */
    int32_t  tile_rows;    /* rows of an m-tile: the chunk's block tile's (grouped_tile::BM: 64 or 128) */
};

/* ids [slots] (this chunk's); slot0: the chunk's first slot in the call (for the fault's position). */
__global__ void grouped_count_kernel(expert_groups gr, const int32_t *ids, const cuda_expert *experts,
                                     int32_t n_experts, held_range held, int64_t slots, int64_t slot0,
                                     cuda_fault *fault) {
    GRID_STRIDE(s, slots) {
        const int32_t e = ids[s];
        if (expert_computed(e, experts, n_experts, held)) atomicAdd(&gr.count[e], 1);
        else if (e >= 0 && held.holds(e)) cuda_record_fault(fault, CUDA_FAULT_MOE_EXPERTS, slot0 + s, e, n_experts);
    }
}

/* One block; dynamic shared memory [E] int32. The counts are read in parallel, scanned by one thread. */
__global__ void grouped_scan_kernel(expert_groups gr, int32_t n_experts) {
    extern __shared__ int32_t scan_counts[];
    for (int32_t e = threadIdx.x; e < n_experts; e += blockDim.x) scan_counts[e] = gr.count[e];
    __syncthreads();
    if (threadIdx.x != 0) return;
    int32_t at = 0, tiles = 0;
    for (int32_t e = 0; e < n_experts; e++) {
        gr.start[e] = at;
        gr.tile_start[e] = tiles;
        at += scan_counts[e];
        tiles += (scan_counts[e] + gr.tile_rows - 1) / gr.tile_rows;
    }
    gr.tile_start[n_experts] = tiles;
}

/* row0: the chunk's first x row; K slots a row. Faults were recorded by the count. */
__global__ void grouped_place_kernel(expert_groups gr, const int32_t *ids, const cuda_expert *experts,
                                     int32_t n_experts, held_range held, int64_t slots, int64_t row0, int64_t K) {
    GRID_STRIDE(s, slots) {
        const int32_t e = ids[s];
        if (!expert_computed(e, experts, n_experts, held)) {
            gr.place[s] = -1;
            continue;
        }
        const int32_t at = gr.start[e] + atomicAdd(&gr.fill[e], 1);
        gr.row_of[at] = (int32_t)(row0 + s / K);
        gr.place[s] = at;
    }
}

/* The expert of m-tile t (the last expert whose first m-tile is at or before t: experts without slots have no
 * m-tiles, so they are never the answer) and the tile's ordered slots [m0, m_end). */
__device__ inline int32_t grouped_tile_expert(const expert_groups &gr, int32_t n_experts, int32_t t, int32_t *m0,
                                              int32_t *m_end) {
    int32_t lo = 0, hi = n_experts - 1;
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if (gr.tile_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    *m0 = gr.start[lo] + (t - gr.tile_start[lo]) * gr.tile_rows;
    *m_end = gr.start[lo] + gr.count[lo];
    return lo;
}

/* The block tiles of the grouped GEMM (the section's head says which a chunk takes). */
enum {
    GROUPED_MMA,                  /* gemm_mma.cuh: 64 rows, mma.sync, FP8 or BF16 weights */
    GROUPED_WGMMA,                /* gemm_wgmma.cuh promoted: 128 rows, FP8 with 128 x 128 scale blocks */
    GROUPED_WGMMA_FOLDED,         /* gemm_wgmma.cuh folded: 128 rows, two blocks a multiprocessor */
    GROUPED_WGMMA_FOLDED_SMALL,   /* gemm_wgmma.cuh folded: 64 rows, one warpgroup */
};
/* Rows of tile KIND's m-tile (expert_groups::tile_rows). */
__host__ __device__ constexpr int grouped_tile_rows(int kind) {
    return kind == GROUPED_MMA ? (int)GEMM_MMA_BM : kind == GROUPED_WGMMA_FOLDED_SMALL ? 64 : (int)GEMM_WG_BM;
}
template <bool FP8, int KIND>
struct grouped_tile {
    static_assert(FP8 || KIND == GROUPED_MMA, "the wgmma tiles take FP8 weights");
    static constexpr bool WG = KIND != GROUPED_MMA, FOLDED = KIND == GROUPED_WGMMA_FOLDED || KIND == GROUPED_WGMMA_FOLDED_SMALL;
    static constexpr int BM = grouped_tile_rows(KIND);
    using Shape = gemm_wg_shape<FOLDED, WG ? BM : (int)GEMM_WG_BM>;   /* the wgmma forms' */
    static constexpr int THREADS = WG ? Shape::THREADS : (int)GEMM_MMA_THREADS;
    static constexpr int MIN_BLOCKS = KIND == GROUPED_WGMMA ? 1 : 2;   /* a multiprocessor, for __launch_bounds__ */
    static constexpr int ROWS = BM * 8 / THREADS;   /* x rows a thread copies: tile rows tid / 8 + (THREADS / 8) j */
    static constexpr int C_LD = WG ? (int)GEMM_WG_C_LD : (int)GEMM_MMA_C_LD;
    static size_t smem() { return WG ? Shape::SMEM : gemm_mma_smem(FP8); }
    static __device__ const float *block(uint8_t *smem, const gemm_mma_tile &t, const int64_t (&x_row)[ROWS]) {
        if constexpr (WG) return gemm_wgmma_block<GEMM_WG_ALL, FOLDED, BM>(smem, t, x_row);
        else return gemm_mma_block<FP8>(smem, t, x_row);
    }
    /* what the launches are profiled and reported as */
    static constexpr const char *GATE_UP_LABEL =
        KIND == GROUPED_MMA ? "moe_experts (grouped gate, up; mma)"
        : KIND == GROUPED_WGMMA ? "moe_experts (grouped gate, up; wgmma)"
        : KIND == GROUPED_WGMMA_FOLDED ? "moe_experts (grouped gate, up; wgmma folded)"
                                       : "moe_experts (grouped gate, up; wgmma folded 64)";
    static constexpr const char *DOWN_LABEL =
        KIND == GROUPED_MMA ? "moe_experts (grouped down; mma)"
        : KIND == GROUPED_WGMMA ? "moe_experts (grouped down; wgmma)"
        : KIND == GROUPED_WGMMA_FOLDED ? "moe_experts (grouped down; wgmma folded)"
                                       : "moe_experts (grouped down; wgmma folded 64)";
};

/* h[i, f] = swiglu(round(x[row_of[i]] . gate_e[f]), round(x[row_of[i]] . up_e[f])) for the ordered slots i of
 * expert e; h [slots, F] BF16. grid (ceil(F / 64), m-tile bound), Tile::THREADS threads, Tile::smem() bytes. */
template <bool FP8, int KIND>
__global__ void __launch_bounds__(grouped_tile<FP8, KIND>::THREADS, grouped_tile<FP8, KIND>::MIN_BLOCKS)
grouped_gate_up_kernel(__nv_bfloat16 *h, const __nv_bfloat16 *x, expert_groups gr, const cuda_expert *experts,
                       int32_t n_experts, int64_t D, int64_t F, float limit) {
    using Tile = grouped_tile<FP8, KIND>;
    extern __shared__ __align__(16) uint8_t gemm_smem[];
    const int32_t t = blockIdx.y;
    if (t >= gr.tile_start[n_experts]) return;   /* the whole block: past the real m-tiles */
    int32_t m0, m_end;
    const cuda_expert &ex = experts[grouped_tile_expert(gr, n_experts, t, &m0, &m_end)];
    const int64_t f0 = (int64_t)blockIdx.x * 64;
    if (f0 >= ex.width) return;
    int64_t x_row[Tile::ROWS];
#pragma unroll
    for (int j = 0; j < Tile::ROWS; j++) {
        const int32_t i = m0 + (int32_t)threadIdx.x / 8 + Tile::THREADS / 8 * j;
        x_row[j] = i < m_end ? gr.row_of[i] : -1;
    }
    const gemm_mma_tile tile = {x, D, {ex.gate, ex.up}, {f0, f0}, {ex.width, ex.width}, (int)D};
    const float *c = Tile::block(gemm_smem, tile, x_row);
    for (int i = threadIdx.x; i < Tile::BM * 64; i += Tile::THREADS) {
        const int r = i / 64, col = i % 64;
        if (m0 + r >= m_end || f0 + col >= ex.width) continue;
        const float gv = round_as_act(c[r * Tile::C_LD + col], true);
        const float uv = round_as_act(c[r * Tile::C_LD + 64 + col], true);
        h[(int64_t)(m0 + r) * F + f0 + col] = __float2bfloat16_rn(cuda_swiglu_value(gv, uv, limit));
    }
}

/* out[i, d] = h[i, :Fe] . down_e[d] (F32) for the ordered slots i of expert e. grid (ceil(D / 128), m-tile
 * bound), Tile::THREADS threads, Tile::smem() bytes. */
template <bool FP8, int KIND>
__global__ void __launch_bounds__(grouped_tile<FP8, KIND>::THREADS, grouped_tile<FP8, KIND>::MIN_BLOCKS)
grouped_down_kernel(float *out, const __nv_bfloat16 *h, expert_groups gr, const cuda_expert *experts,
                    int32_t n_experts, int64_t D, int64_t F) {
    using Tile = grouped_tile<FP8, KIND>;
    extern __shared__ __align__(16) uint8_t gemm_smem[];
    const int32_t t = blockIdx.y;
    if (t >= gr.tile_start[n_experts]) return;
    int32_t m0, m_end;
    const cuda_expert &ex = experts[grouped_tile_expert(gr, n_experts, t, &m0, &m_end)];
    const int64_t d0 = (int64_t)blockIdx.x * 128;
    int64_t x_row[Tile::ROWS];
#pragma unroll
    for (int j = 0; j < Tile::ROWS; j++) {
        const int32_t i = m0 + (int32_t)threadIdx.x / 8 + Tile::THREADS / 8 * j;
        x_row[j] = i < m_end ? i : -1;
    }
    const gemm_mma_tile tile = {h, F, {ex.down, ex.down}, {d0, d0 + 64}, {D, D}, (int)ex.width};
    const float *c = Tile::block(gemm_smem, tile, x_row);
    for (int i = threadIdx.x; i < Tile::BM * 128; i += Tile::THREADS) {
        const int r = i / 128, col = i % 128;
        if (m0 + r < m_end && d0 + col < D) out[(int64_t)(m0 + r) * D + d0 + col] = c[r * Tile::C_LD + col];
    }
}

/* The chunk's gate + up + SwiGLU and down launches on tile KIND; m_tiles: the grid's m-tile bound. */
template <bool FP8, int KIND>
static glm53_status grouped_gemm_launch(cuda_backend *cb, __nv_bfloat16 *h, float *out, const __nv_bfloat16 *x,
                                        const expert_groups &gr, const cuda_expert_table *table, int32_t n_experts,
                                        int64_t D, int64_t F, float limit, unsigned m_tiles) {
    using Tile = grouped_tile<FP8, KIND>;
    const size_t smem = Tile::smem();
    GLM53_TRY(cuda_smem_optin(cb, (const void *)grouped_gate_up_kernel<FP8, KIND>, smem, "moe_experts (grouped gate, up)"));
    GLM53_TRY(cuda_smem_optin(cb, (const void *)grouped_down_kernel<FP8, KIND>, smem, "moe_experts (grouped down)"));
    grouped_gate_up_kernel<FP8, KIND><<<dim3((unsigned)((F + 63) / 64), m_tiles), Tile::THREADS, smem, cb->stream>>>(
        h, x, gr, table->experts, n_experts, D, F, limit);
    CUDA_LAUNCHED(Tile::GATE_UP_LABEL);
    grouped_down_kernel<FP8, KIND><<<dim3((unsigned)((D + 127) / 128), m_tiles), Tile::THREADS, smem, cb->stream>>>(
        out, h, gr, table->experts, n_experts, D, F);
    CUDA_LAUNCHED(Tile::DOWN_LABEL);
    return GLM53_OK;
}

/* Whether the device-grouped path takes this call (the caller has checked the row count). */
static bool grouped_fits(const cuda_backend *cb, const cuda_expert_table *table, const glm53_tensor *x) {
    return cb->grouped_experts && table && table->max_width > 0 && table->mma_dtype >= 0 && table->gemm_fits &&
           x->dtype == GLM53_BF16 && cuda_cols(x) % GEMM_MMA_BK == 0 && (uintptr_t)x->data % 16 == 0;
}

static glm53_status moe_experts_grouped_mma(cuda_backend *cb, glm53_tensor *y, const glm53_tensor *x,
                                            const glm53_tensor *ids, const glm53_tensor *weights,
                                            const cuda_expert_table *table, const glm53_expert_set *set,
                                            float limit) {
    const int32_t E = set->n_experts;
    const held_range held = {set->first_held, set->n_held};
    const int64_t N = glm53_tensor_rows(x), D = cuda_cols(x), K = cuda_cols(ids), F = table->max_width;
    /* the wgmma tiles where every expert fits them (FP8, 128 x 128 scale blocks) and x's width is whole scale
     * blocks; the folded ones where switched on */
    const bool wg = cb->grouped_wgmma && table->wgmma_fits && D % 128 == 0, folded = wg && cb->grouped_folded;
    /* Rounds of GROUPED_CHUNK_ROWS with the folded tile (run and timed so on the H100, 2026-12-07 22:05); the
     * promoted and mma.sync tiles, now the switched-off paths, keep the rounds of 4,096 rows they were timed with. */
    const int64_t round_rows = folded ? GROUPED_CHUNK_ROWS : GROUPED_CHUNK_ROWS / 2;
    const int64_t chunk_rows = N < round_rows ? N : round_rows, slots_max = chunk_rows * K;
    cuda_scratch h_buf, out_buf, index_buf;
    GLM53_TRY(h_buf.get(cb, (size_t)(slots_max * F) * 2, "moe_experts grouped swiglu rows"));
    GLM53_TRY(out_buf.get(cb, (size_t)(slots_max * D) * sizeof(float), "moe_experts grouped expert outputs"));
    GLM53_TRY(index_buf.get(cb, (size_t)(4 * (E + 1) + 2 * slots_max) * sizeof(int32_t), "moe_experts groups"));
    int32_t *ints = (int32_t *)index_buf.ptr;
    expert_groups gr = {ints, ints + (E + 1), ints + 2 * (E + 1), ints + 3 * (E + 1), ints + 4 * (E + 1),
                        ints + 4 * (E + 1) + slots_max, 0};
    const int32_t *id = (const int32_t *)ids->data;
    for (int64_t n0 = 0; n0 < N; n0 += chunk_rows) {
        const int64_t rows = N - n0 < chunk_rows ? N - n0 : chunk_rows, slots = rows * K;
        const int kind = !wg ? GROUPED_MMA
                         : !folded ? GROUPED_WGMMA
                         : slots < GROUPED_SMALL_TILE_ROWS * E ? GROUPED_WGMMA_FOLDED_SMALL
                                                               : GROUPED_WGMMA_FOLDED;
        gr.tile_rows = grouped_tile_rows(kind);
        CUDA_TRY(cudaMemsetAsync(gr.count, 0, (size_t)(2 * (E + 1)) * sizeof(int32_t), cb->stream));   /* count, fill */
        grouped_count_kernel<<<cuda_blocks_for(slots, 256), 256, 0, cb->stream>>>(
            gr, id + n0 * K, table->experts, E, held, slots, n0 * K, cb->fault);
        CUDA_LAUNCHED("moe_experts (grouped count)");
        grouped_scan_kernel<<<1, 1024, (size_t)E * sizeof(int32_t), cb->stream>>>(gr, E);
        CUDA_LAUNCHED("moe_experts (grouped scan)");
        grouped_place_kernel<<<cuda_blocks_for(slots, 256), 256, 0, cb->stream>>>(gr, id + n0 * K, table->experts, E,
                                                                                  held, slots, n0, K);
        CUDA_LAUNCHED("moe_experts (grouped place)");
        const unsigned m_tiles = (unsigned)((slots + gr.tile_rows - 1) / gr.tile_rows + E);
        __nv_bfloat16 *h = (__nv_bfloat16 *)h_buf.ptr;
        float *out = (float *)out_buf.ptr;
        const __nv_bfloat16 *xb = (const __nv_bfloat16 *)x->data;
        if (kind == GROUPED_WGMMA_FOLDED)
            GLM53_TRY((grouped_gemm_launch<true, GROUPED_WGMMA_FOLDED>(cb, h, out, xb, gr, table, E, D, F, limit, m_tiles)));
        else if (kind == GROUPED_WGMMA_FOLDED_SMALL)
            GLM53_TRY((grouped_gemm_launch<true, GROUPED_WGMMA_FOLDED_SMALL>(cb, h, out, xb, gr, table, E, D, F, limit,
                                                                             m_tiles)));
        else if (kind == GROUPED_WGMMA)
            GLM53_TRY((grouped_gemm_launch<true, GROUPED_WGMMA>(cb, h, out, xb, gr, table, E, D, F, limit, m_tiles)));
        else if (table->mma_dtype == GLM53_F8_E4M3)
            GLM53_TRY((grouped_gemm_launch<true, GROUPED_MMA>(cb, h, out, xb, gr, table, E, D, F, limit, m_tiles)));
        else GLM53_TRY((grouped_gemm_launch<false, GROUPED_MMA>(cb, h, out, xb, gr, table, E, D, F, limit, m_tiles)));
        combine_kernel<<<cuda_blocks_for(rows * D, 256), 256, 0, cb->stream>>>(
            cuda_act_out(y), (const float *)out_buf.ptr, gr.place, (const float *)weights->data, n0, rows, K, D);
        CUDA_LAUNCHED("moe_experts (grouped combine)");
    }
    return GLM53_OK;
}

glm53_status cuda_moe_experts(glm53_backend *be, glm53_tensor *y, const glm53_tensor *x, const glm53_tensor *ids,
                              const glm53_tensor *weights, const glm53_expert_set *experts, float limit) {
    cuda_backend *cb = cuda_impl(be);
    assert(cuda_is_act(y) && cuda_is_act(x) && x->dtype == y->dtype);
    assert(cuda_is_act(weights) && weights->dtype == GLM53_F32);
    assert(ids->dtype == GLM53_I32 && ids->data && ids->device == GLM53_DEVICE_CUDA);
    int64_t N = glm53_tensor_rows(x), K = cuda_cols(ids);
    assert(glm53_tensor_rows(y) == N && cuda_cols(y) == cuda_cols(x));
    assert(glm53_tensor_numel(ids) == N * K && glm53_tensor_numel(weights) == N * K);
    GLM53_TRY(cuda_enter(cb));
    if (N == 0 || cuda_cols(x) == 0) return GLM53_OK;
    const cuda_expert_table *table = (const cuda_expert_table *)experts->device;
    if (table && N <= DEVICE_PATH_MAX_ROWS && table->max_width > 0)
        return moe_experts_on_device(cb, y, x, ids, weights, table, experts, limit);
    if (grouped_fits(cb, table, x)) return moe_experts_grouped_mma(cb, y, x, ids, weights, table, experts, limit);
    try {   /* the host-side grouping uses std::vector: its bad_alloc must not cross into C */
        return moe_experts_grouped(be, y, x, ids, weights, experts, limit);
    } catch (const std::bad_alloc &) {
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda moe_experts: no host memory for the expert grouping");
    }
}
