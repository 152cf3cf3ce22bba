/*
 * grouped.cu - where the grouped prefill experts' wgmma tiles (gemm_wgmma.cuh) spend their time. The promoted tile
 * runs at about 215 TFLOP/s on the H100 (27% of the BF16 peak) and Nsight Compute shows a third of the issue slots
 * busy; the conversions were suspected and ruled out (docs/performance.md). Here the promoted tile runs at the
 * shapes of a 4,096-row chunk of an 8,192-token prefill, once whole and then with one stage left out at a time
 * (GEMM_WG_SKIP_*: the results are then wrong, the time is what matters), so the differences say which stage the
 * block waits on (METHOD.md: leave a stage out, take differences):
 *
 *   build/bench_grouped            # tables: variant -> ms per launch, TFLOP/s, ms saved against the first row
 *
 * then the warp-specialized form (gemm_wgmma_ws_block: a producer warpgroup beside two consumers) and the folded
 * forms (GLM53_CUDA_GROUPED_FOLDED; the block scales multiplied into the converted codes, two blocks a
 * multiprocessor: "folded" with 128 rows, "folded 64" with one warpgroup of 64), each checked and timed the same way; and the three
 * moe.cu chooses between at 228 rows an expert (an 8,192-row chunk, moe.cu's GROUPED_CHUNK_ROWS) and at 57 (a
 * 2,048-token chunk of a chunked prefill, where moe.cu takes the 64-row tile).
 *
 * The shapes: 288 experts of gate and up [2048, 4096] FP8 with 128 x 128 block scales, 114 rows an expert (4,096
 * rows x 8 slots / 288) gathered from x [4096, 4096] BF16, ceil(114 / tile rows) m-tiles an expert, 32 f-tiles of
 * 64 gate + 64 up columns: 288 x 32 = 9,216 blocks of 128 rows. The epilogue writes h = silu(gate) * up in BF16 as
 * moe.cu's does. Every whole tile is checked against a CPU reference of its own precision contract on sampled rows
 * (BF16 x, F64 sums; gate and up rounded to BF16 before the SwiGLU as the engine does): the promoted tile's weights
 * are the decoded FP8 codes times their scales, the folded tiles' those products in F32 rounded to BF16 (the
 * dequantised weights of the cuBLAS fallback). Against the promoted reference the folded tiles are off by up to
 * 0.17 relative on these samples (2026-12-07, H100, reproduced exactly on the CPU): a sum whose terms cancel
 * keeps the weights' 2^-9 rounding errors, not the sum's size.
 */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/gemm_wgmma.cuh"
#include "kernels/cuda/bench/bench.cuh"

#include <cmath>

enum { EXPERTS = 288, ROWS_PER_EXPERT = 114, MAX_ROWS_PER_EXPERT = 228, X_ROWS = 4096, D = 4096, F = 2048, REPEATS = 7 };

/* A code for weight byte i of expert weight w: a hash, never the NaN code (0x7f / 0xff), exponents 4..9 as the
 * engine's tests draw them (magnitudes 2^-3 .. 2^3). The host reference calls it too. */
__host__ __device__ inline uint8_t bench_code(uint64_t i) {
    uint64_t h = i * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    const unsigned sign = (unsigned)(h & 1), exp = 4 + (unsigned)((h >> 1) % 6), man = (unsigned)((h >> 8) & 7);
    return (uint8_t)(sign << 7 | exp << 3 | man);
}
__host__ __device__ inline float bench_x(uint64_t i) {   /* x values in [-1, 1), exactly BF16 (8 significant bits) */
    uint64_t h = (i + 12345) * 0xD6E8FEB86659FD93ull;
    h ^= h >> 31;
    return (float)((int)(h & 0xff) - 128) / 128.0f;
}
static float host_e4m3(uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    const float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
    return s ? -v : v;
}

__global__ void fill_codes(uint8_t *w, int64_t n, uint64_t salt) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] = bench_code(salt + (uint64_t)i);
}
__global__ void fill_x(__nv_bfloat16 *x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(bench_x((uint64_t)i));
}

/* Block (f-tile, m-tile)'s operands: expert e's gate and up rows f0 .. f0 + 63. */
__device__ inline gemm_mma_tile bench_tile(int e, const __nv_bfloat16 *x, const uint8_t *gate, const uint8_t *up,
                                           const float *gate_scale, const float *up_scale) {
    const int64_t f0 = (int64_t)blockIdx.x * 64, sstride = D / 128;
    const weight_ref g = {gate + (int64_t)e * F * D, GLM53_F8_E4M3, D, gate_scale + (int64_t)e * (F / 128) * sstride,
                          sstride, 128, 128};
    const weight_ref u = {up + (int64_t)e * F * D, GLM53_F8_E4M3, D, up_scale + (int64_t)e * (F / 128) * sstride,
                          sstride, 128, 128};
    return gemm_mma_tile{x, D, {g, u}, {f0, f0}, {F, F}, D};
}

/* Block (f-tile, m-tile)'s place with `rows` rows an expert in m-tiles of bm: its expert and first expert row. */
struct bench_place {
    int e, r0;
};
__device__ inline bench_place bench_block(int rows, int bm) {
    const int m_tiles = (rows + bm - 1) / bm;
    return {(int)blockIdx.y / m_tiles, (int)blockIdx.y % m_tiles * bm};
}

/* The x row of expert row r (-1 past the expert's rows). */
__device__ inline int64_t bench_x_row(const int32_t *row_of, int rows, bench_place at, int r) {
    return r < rows ? row_of[at.e * rows + r] : -1;
}

/* moe.cu's epilogue: h = silu(round(gate)) * round(up) in BF16 for the m-tile's rows (bm of them at most), from the
 * result tile c. */
__device__ inline void bench_epilogue(__nv_bfloat16 *h, const float *c, int rows, int bm, bench_place at) {
    const int64_t f0 = (int64_t)blockIdx.x * 64;
    for (int i = threadIdx.x; i < bm * 64; i += blockDim.x) {
        const int r = i / 64, col = i % 64;
        if (at.r0 + r >= rows) break;
        const float gv = __bfloat162float(__float2bfloat16_rn(c[r * GEMM_WG_C_LD + col]));
        const float uv = __bfloat162float(__float2bfloat16_rn(c[r * GEMM_WG_C_LD + 64 + col]));
        h[((int64_t)at.e * rows + at.r0 + r) * F + f0 + col] = __float2bfloat16_rn(gv / (1.0f + expf(-gv)) * uv);
    }
}

/* grid (F / 64, EXPERTS x m-tiles): the lockstep tile (gemm_wgmma_block) of form FOLDED, BM with `rows` rows an
 * expert, stages left out as SKIP says. */
template <int SKIP, bool FOLDED, int BM>
__global__ void __launch_bounds__(gemm_wg_shape<FOLDED, BM>::THREADS, FOLDED ? 2 : 1)
bench_gate_up(__nv_bfloat16 *h, const __nv_bfloat16 *x, const int32_t *row_of, const uint8_t *gate, const uint8_t *up,
              const float *gate_scale, const float *up_scale, int rows) {
    extern __shared__ __align__(16) uint8_t smem[];
    const bench_place at = bench_block(rows, BM);
    int64_t x_row[4];
#pragma unroll
    for (int j = 0; j < 4; j++) x_row[j] = bench_x_row(row_of, rows, at, at.r0 + (int)threadIdx.x / 8 + BM / 4 * j);
    const float *c = gemm_wgmma_block<SKIP, FOLDED, BM>(smem, bench_tile(at.e, x, gate, up, gate_scale, up_scale), x_row);
    bench_epilogue(h, c, rows, BM, at);
}

/* The same with gemm_wgmma_ws_block (384 threads: a producer warpgroup, whose rows these are, and two consumers). */
__global__ void __launch_bounds__(GEMM_WS_THREADS, 1)
bench_gate_up_ws(__nv_bfloat16 *h, const __nv_bfloat16 *x, const int32_t *row_of, const uint8_t *gate,
                 const uint8_t *up, const float *gate_scale, const float *up_scale, int rows) {
    extern __shared__ __align__(16) uint8_t smem[];
    const bench_place at = bench_block(rows, GEMM_WG_BM);
    int64_t x_row[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        x_row[j] = threadIdx.x < 128 ? bench_x_row(row_of, rows, at, at.r0 + (int)threadIdx.x / 8 + 16 * j) : -1;
    bench_epilogue(h, gemm_wgmma_ws_block(smem, bench_tile(at.e, x, gate, up, gate_scale, up_scale), x_row), rows,
                   GEMM_WG_BM, at);
}

struct bench_data {
    __nv_bfloat16 *x, *h;
    int32_t *row_of;
    uint8_t *gate, *up;
    float *gate_scale, *up_scale;
    int rows;   /* an expert's, this table's */
};

typedef void (*bench_kernel)(__nv_bfloat16 *, const __nv_bfloat16 *, const int32_t *, const uint8_t *, const uint8_t *,
                             const float *, const float *, int);

/* Median milliseconds of REPEATS launches of `kernel` (threads, smem, m-tiles of bm rows) over the bench's grid,
 * after a warm-up. */
static float time_kernel(cudaStream_t stream, const bench_data &b, bench_kernel kernel, int threads, size_t smem,
                         int bm) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid(F / 64, EXPERTS * ((b.rows + bm - 1) / bm));
    kernel<<<grid, threads, smem, stream>>>(b.h, b.x, b.row_of, b.gate, b.up, b.gate_scale, b.up_scale, b.rows);   /* warm-up */
    CK(cudaGetLastError());
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    std::vector<float> ms;
    for (int i = 0; i < REPEATS; i++) {
        CK(cudaEventRecord(t0, stream));
        kernel<<<grid, threads, smem, stream>>>(b.h, b.x, b.row_of, b.gate, b.up, b.gate_scale, b.up_scale, b.rows);
        CK(cudaEventRecord(t1, stream));
        CK(cudaEventSynchronize(t1));
        float v;
        CK(cudaEventElapsedTime(&v, t0, t1));
        ms.push_back(v);
    }
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    return bench_median(ms);
}
template <int SKIP, bool FOLDED = false, int BM = GEMM_WG_BM>
static float time_variant(cudaStream_t stream, const bench_data &b) {
    using Shape = gemm_wg_shape<FOLDED, BM>;
    return time_kernel(stream, b, bench_gate_up<SKIP, FOLDED, BM>, Shape::THREADS, Shape::SMEM, BM);
}

/* The whole tile against the CPU on sampled (expert, row, column) triples, with the weights of the folded contract
 * (each code times its scale in F32, rounded to BF16) or of the promoted one (exact); returns the worst relative
 * error. */
static double check(const bench_data &b, const std::vector<int32_t> &row_of, const std::vector<float> &gs,
                    const std::vector<float> &us, bool folded) {
    const auto weight = [folded](uint8_t code, float scale) {
        return folded ? (double)__bfloat162float(__float2bfloat16_rn(host_e4m3(code) * scale))   /* F32, then BF16 */
                      : (double)host_e4m3(code) * scale;
    };
    std::vector<__nv_bfloat16> h((size_t)EXPERTS * b.rows * F);
    CK(cudaMemcpy(h.data(), b.h, h.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int sample = 0; sample < 64; sample++) {
        const int e = (sample * 37) % EXPERTS, r = (sample * 53) % b.rows, f = (sample * 611) % F;
        const int64_t xr = row_of[(size_t)e * b.rows + r];
        double sg = 0.0, su = 0.0;
        for (int k = 0; k < D; k++) {
            const double xv = bench_x((uint64_t)(xr * D + k));
            const uint64_t wi = ((uint64_t)e * F + f) * D + k;
            const size_t si = ((size_t)e * (F / 128) + f / 128) * (D / 128) + k / 128;
            sg += xv * weight(bench_code(wi), gs[si]);
            su += xv * weight(bench_code((uint64_t)EXPERTS * F * D + wi), us[si]);
        }
        const float gv = __bfloat162float(__float2bfloat16_rn((float)sg));
        const float uv = __bfloat162float(__float2bfloat16_rn((float)su));
        const double want = gv / (1.0 + exp(-(double)gv)) * uv;
        const double got = __bfloat162float(h[((size_t)e * b.rows + r) * F + f]);
        const double err = fabs(got - want) / (fabs(want) + 1e-3);
        if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;   /* a NaN (an output never written) fails */
    }
    return worst;
}

struct bench_checked {
    float ms;     /* median per launch */
    double err;   /* worst relative error against the form's reference */
};
/* Times the whole form FOLDED, BM at b.rows rows an expert after clearing h to NaN, and checks it. */
template <bool FOLDED, int BM>
static bench_checked time_checked(cudaStream_t stream, const bench_data &b, const std::vector<int32_t> &row_of,
                                  const std::vector<float> &gs, const std::vector<float> &us) {
    CK(cudaMemsetAsync(b.h, 0xff, (size_t)EXPERTS * b.rows * F * sizeof(__nv_bfloat16), stream));
    const float ms = time_variant<GEMM_WG_ALL, FOLDED, BM>(stream, b);
    return {ms, check(b, row_of, gs, us, FOLDED)};
}

int main() {
    cudaStream_t stream;
    CK(cudaStreamCreate(&stream));
    bench_data b;
    const int64_t wbytes = (int64_t)EXPERTS * F * D, n_scale = (int64_t)EXPERTS * (F / 128) * (D / 128);
    CK(cudaMalloc(&b.x, (size_t)X_ROWS * D * sizeof(__nv_bfloat16)));
    CK(cudaMalloc(&b.h, (size_t)EXPERTS * MAX_ROWS_PER_EXPERT * F * sizeof(__nv_bfloat16)));
    CK(cudaMalloc(&b.row_of, (size_t)EXPERTS * MAX_ROWS_PER_EXPERT * sizeof(int32_t)));
    CK(cudaMalloc(&b.gate, (size_t)wbytes));
    CK(cudaMalloc(&b.up, (size_t)wbytes));
    CK(cudaMalloc(&b.gate_scale, (size_t)n_scale * sizeof(float)));
    CK(cudaMalloc(&b.up_scale, (size_t)n_scale * sizeof(float)));
    fill_x<<<1024, 256, 0, stream>>>(b.x, (int64_t)X_ROWS * D);
    fill_codes<<<4096, 256, 0, stream>>>(b.gate, wbytes, 0);
    fill_codes<<<4096, 256, 0, stream>>>(b.up, wbytes, (uint64_t)wbytes);
    CK(cudaGetLastError());
    /* each expert's rows: a scattered set of x rows, as the routing gives them (expert e's row r at e * rows + r) */
    std::vector<int32_t> row_of((size_t)EXPERTS * MAX_ROWS_PER_EXPERT);
    for (size_t i = 0; i < row_of.size(); i++) row_of[i] = (int32_t)((i * 2654435761u) % X_ROWS);
    std::vector<float> gs((size_t)n_scale), us((size_t)n_scale);
    for (int64_t i = 0; i < n_scale; i++) gs[i] = 0.004f * (1.0f + (float)(i % 7) / 7.0f), us[i] = 0.003f * (1.0f + (float)(i % 5) / 5.0f);
    CK(cudaMemcpy(b.row_of, row_of.data(), row_of.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.gate_scale, gs.data(), gs.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.up_scale, us.data(), us.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaStreamSynchronize(stream));

    bool ok = true;
    double flop = 0.0;
    float first = 0.0f;   /* the table's first row, which "ms saved" is against */
    const auto table = [&](int rows, const char *what) {
        b.rows = rows;
        flop = 2.0 * EXPERTS * rows * (2.0 * F) * D;
        printf("\ngrouped gate + up, wgmma tiles: %d experts x %d rows (%s), D %d, F %d (%.2f TFLOP a launch)\n",
               EXPERTS, rows, what, D, F, flop / 1e12);
        printf("%-34s %10s %10s %14s\n", "variant", "ms", "TFLOP/s", "ms saved");
    };
    const auto row = [&](const char *name, float ms) {
        if (first == 0.0f) first = ms;
        printf("%-34s %10.3f %10.1f %14.3f\n", name, ms, flop / (ms * 1e-3) / 1e12, first - ms);
    };
    const auto checked = [&](const char *name, bench_checked r) {
        row(name, r.ms);
        printf("  check against the CPU on 64 sampled outputs: max rel err %.2e %s\n", r.err, r.err < 2e-2 ? "ok" : "FAIL");
        ok = ok && r.err < 2e-2;
    };

    /* the promoted tile, whole and with stages left out; the other forms beside it */
    table(ROWS_PER_EXPERT, "a 4,096-row chunk");
    checked("promoted: all stages", time_checked<false, GEMM_WG_BM>(stream, b, row_of, gs, us));
    row("no x copies", time_variant<GEMM_WG_SKIP_X_COPY>(stream, b));
    row("no code copies", time_variant<GEMM_WG_SKIP_W_COPY>(stream, b));
    row("no copies", time_variant<GEMM_WG_SKIP_X_COPY | GEMM_WG_SKIP_W_COPY>(stream, b));
    row("no conversion", time_variant<GEMM_WG_SKIP_CONVERT>(stream, b));
    row("no wgmma", time_variant<GEMM_WG_SKIP_MMA>(stream, b));
    row("no promotion (no k-block drain)", time_variant<GEMM_WG_SKIP_PROMOTE>(stream, b));
    row("only barriers and epilogue", time_variant<GEMM_WG_SKIP_X_COPY | GEMM_WG_SKIP_W_COPY | GEMM_WG_SKIP_CONVERT |
                                                   GEMM_WG_SKIP_MMA | GEMM_WG_SKIP_PROMOTE>(stream, b));
    /* the warp-specialized form (gemm_wgmma_ws_block) */
    CK(cudaMemsetAsync(b.h, 0xff, (size_t)EXPERTS * b.rows * F * sizeof(__nv_bfloat16), stream));
    const float ws = time_kernel(stream, b, bench_gate_up_ws, GEMM_WS_THREADS, GEMM_WS_SMEM, GEMM_WG_BM);
    checked("warp-specialized (384 threads)", {ws, check(b, row_of, gs, us, false)});
    /* the folded forms, whole */
    checked("folded (2 blocks/SM)", time_checked<true, GEMM_WG_BM>(stream, b, row_of, gs, us));
    checked("folded 64 (2 m-tiles an expert)", time_checked<true, 64>(stream, b, row_of, gs, us));
    row("folded: no conversion", time_variant<GEMM_WG_SKIP_CONVERT, true, GEMM_WG_BM>(stream, b));
    row("folded: no wgmma", time_variant<GEMM_WG_SKIP_MMA, true, GEMM_WG_BM>(stream, b));

    /* the three moe.cu chooses between, at an 8,192-row chunk's rows and at a 2,048-token chunk's */
    const int other_rows[2] = {MAX_ROWS_PER_EXPERT, 57};
    const char *other_what[2] = {"an 8,192-row chunk", "a 2,048-token chunk"};
    for (int t = 0; t < 2; t++) {
        first = 0.0f;
        table(other_rows[t], other_what[t]);
        checked("promoted", time_checked<false, GEMM_WG_BM>(stream, b, row_of, gs, us));
        checked("folded", time_checked<true, GEMM_WG_BM>(stream, b, row_of, gs, us));
        checked("folded 64", time_checked<true, 64>(stream, b, row_of, gs, us));
    }
    return ok ? 0 : 1;
}
