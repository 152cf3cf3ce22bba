/*
 * launch.cu - what one kernel launch costs inside a captured decode step: a chain of dependent kernels captured
 * in a CUDA graph and replayed, per kernel, with and without programmatic dependent launch (PDL), for the grid
 * sizes the decode step launches. It says how much fusing two kernels into one can save, before anyone writes
 * the fused kernel (docs/performance.md, "What a launch costs").
 *
 *   build/bench_launch            # one table: grid x work x PDL -> microseconds per kernel in the chain
 *
 * Each kernel of the chain reads what the one before it wrote (so the chain is a true dependency chain, as in a
 * decode step) and writes its own output: `words` 16-byte words per block read and written, 0 for an empty body
 * (a kernel that only waits). With PDL a kernel is launched with cudaLaunchAttributeProgrammaticStreamSerialization
 * and begins with griddepcontrol.launch_dependents then griddepcontrol.wait, as the engine's kernels do
 * (cuda_common.cuh, cuda_pdl_begin). The figure is the median replay time of a graph of CHAIN kernels / CHAIN
 * (first replay dropped). The reference point: a kernel with no work still costs what this table says.
 */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/bench/bench.cuh"

enum { CHAIN = 200, REPLAYS = 12 };

/* out[block][i] = in[block][i] + 1 for `words` 16-byte words per block (block-strided so every block has its own). */
__global__ void chain_kernel(uint4 *out, const uint4 *in, int words) {
    cuda_pdl_begin();
    const int64_t base = (int64_t)blockIdx.x * words;
    for (int i = threadIdx.x; i < words; i += blockDim.x) {
        uint4 v = in[base + i];
        v.x += 1;
        out[base + i] = v;
    }
}

/* Microseconds per kernel of a replayed chain of CHAIN launches of `blocks` x `threads`, ping-ponging a and b. */
static float time_chain(cudaStream_t stream, uint4 *a, uint4 *b, int blocks, int threads, int words, bool pdl) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    return bench_graph_us(stream, CHAIN, REPLAYS, [&] {
        for (int k = 0; k < CHAIN; k++) {
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(blocks);
            cfg.blockDim = dim3(threads);
            cfg.stream = stream;
            cfg.attrs = attr;
            cfg.numAttrs = pdl ? 1 : 0;
            uint4 *out = k % 2 ? a : b;
            const uint4 *in = k % 2 ? b : a;
            CK(cudaLaunchKernelEx(&cfg, chain_kernel, out, in, words));
        }
    });
}

int main(void) {
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sm = prop.multiProcessorCount;
    const size_t bytes = (size_t)64 << 20;
    uint4 *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 0, bytes));
    CK(cudaMemset(b, 0, bytes));

    struct shape { const char *what; int blocks, threads, words; };
    const shape shapes[] = {
        {"1 block x 32, empty", 1, 32, 0},
        {"1 block x 256, 4 KB", 1, 256, 256},
        {"SMs x 256, empty", sm, 256, 0},
        {"SMs x 256, 16 KB a block", sm, 256, 1024},
        {"4 SMs x 256, 4 KB a block", 4 * sm, 256, 256},
        {"1024 x 256, 4 KB a block", 1024, 256, 256},
    };
    printf("# %s, %d SMs; a chain of %d dependent kernels in one graph, median of %d replays, us per kernel\n",
           prop.name, sm, CHAIN, REPLAYS - 1);
    printf("%-28s %10s %10s\n", "grid, work", "plain", "PDL");
    for (const shape &s : shapes) {
        if ((size_t)s.blocks * s.words * 16 > bytes) continue;
        const float plain = time_chain(stream, a, b, s.blocks, s.threads, s.words, false);
        const float pdl = time_chain(stream, a, b, s.blocks, s.threads, s.words, true);
        printf("%-28s %10.2f %10.2f\n", s.what, plain, pdl);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    return 0;
}
