/*
 * bench.cuh - what the per-kernel benchmarks of kernels/cuda/bench/ share: the error check that stops a bench at
 * the first failing CUDA call, and the timing of work captured in a CUDA graph (what a kernel costs inside a
 * replayed decode step: launch latency hidden, the first replay dropped as warm-up, the median of the rest).
 */
#ifndef GLM53_CUDA_BENCH_CUH
#define GLM53_CUDA_BENCH_CUH

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static inline float bench_median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Microseconds per launch: enqueue() (which launches `launches` kernels on `stream`) captured once into a graph,
 * the graph replayed `replays` times, the first replay dropped, the median of the others / launches. */
template <class Enqueue>
static float bench_graph_us(cudaStream_t stream, int launches, int replays, Enqueue &&enqueue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < replays; i++) {
        CK(cudaEventRecord(a, stream));
        CK(cudaGraphLaunch(exec, stream));
        CK(cudaEventRecord(b, stream));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i) t.push_back(ms * 1000.0f / launches);   /* the first replay warms up */
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return bench_median(t);
}

#endif
