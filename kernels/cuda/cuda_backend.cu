/*
 * cuda_backend.cu - the CUDA backend: construction, device memory, host <-> device copies, stream capture into
 * graphs, and the op table.
 *
 * One device, one stream and one cuBLAS handle (with its own workspace) per backend instance: several instances
 * (one per GPU of a process, or two on one GPU) share nothing but the process. Every op is enqueued on the
 * instance's stream and returns at once; upload, download and sync wait for the stream, so they are synchronous
 * from the caller's view, and they are where errors of earlier kernels surface. upload_async and
 * download_async (pinned host memory from host_alloc) only enqueue: a planned step uses them so that it waits
 * for the device once, when its outputs are read.
 *
 * Capture: capture_begin starts recording the stream (thread-local mode: a cudaMalloc or a synchronisation
 * made by this thread while recording fails the capture, which is how a step proves it does neither);
 * capture_end instantiates the recorded work as a graph, graph_launch replays it on the stream.
 *
 * Device memory comes from a caching allocator. Requests are rounded up to a size bucket (powers of two up to
 * 1 MiB, then eight buckets per power of two, so at most 12.5% is wasted) and a released block goes to its
 * bucket's free list instead of back to CUDA; the next request of that bucket takes it without a cudaMalloc.
 * Because every user of a block is ordered on the one stream, a block can be reused as soon as it is released:
 * whatever reads it next is queued after whatever used it before. cudaFree happens only when a cudaMalloc fails
 * (all cached blocks are freed and the cudaMalloc retried) and at destroy.
 *
 * Kernels that meet an out-of-range index record the first one in the backend's fault record (device memory);
 * sync and download read it back with the stream synchronisation they do anyway and report it as
 * GLM53_ERR_OUT_OF_RANGE, so checking ids never costs a synchronisation of its own.
 */
#include "kernels/cuda/cuda_common.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

/* Enough for cuBLAS on Hopper (NVIDIA recommends 32 MiB there). */
static const size_t CUBLAS_WORKSPACE_BYTES = 32u << 20;

/* ------------------------------------------------------------------------------------------------------------
 * Shared helpers declared in cuda_common.cuh
 */
static void profile_fold(cuda_backend *cb);

/* Every op starts here. While profiling, an event at op entry charges the time since the previous op's last
 * kernel to "device idle": that interval is zero when the host is ahead of the device, and it is the launch
 * gap (or the host's work between steps) when the device ran dry. */
glm53_status cuda_enter(cuda_backend *cb) {
    CUDA_TRY(cudaSetDevice(cb->device));
    if (cb->profile) {
        cb->profile_detail[0] = '\0';
        cuda_profile_mark(cb, "(device idle: waiting for the host)");
    }
    return GLM53_OK;
}

glm53_status cuda_stream_wait(cuda_backend *cb) {
    cb->counters.host_syncs++;
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    if (cb->profile) profile_fold(cb);
    return GLM53_OK;
}

glm53_status cuda_smem_optin(cuda_backend *cb, const void *kernel, size_t bytes, const char *what) {
    if (bytes <= 48u * 1024u) return GLM53_OK;
    if (bytes > (size_t)cb->smem_optin)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda %s: needs %zu bytes of shared memory per block, the device "
                          "allows %d", what, bytes, cb->smem_optin);
    /* Set once per kernel and size: a steady-state step (and a captured one) makes no attribute calls. */
    int32_t slot = -1;
    for (int32_t i = 0; i < cb->n_smem_opted && slot < 0; i++)
        if (cb->smem_opted[i].kernel == kernel) slot = i;
    if (slot >= 0 && cb->smem_opted[slot].bytes >= bytes) return GLM53_OK;
    CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (slot < 0 && cb->n_smem_opted < (int32_t)(sizeof cb->smem_opted / sizeof cb->smem_opted[0]))
        slot = cb->n_smem_opted++;
    if (slot >= 0) cb->smem_opted[slot] = {kernel, bytes};
    return GLM53_OK;
}

/* The performance switches' defaults: the first four on since the H100 run of 2026-12-07 checked and timed them,
 * mhc_site since a later H100 run of that day did, the wgmma experts and the chunked KDA since the H100 run of
 * 2026-12-07 15:13 (tests/cuda/h200/decode_ab.sh; docs/performance.md), the folded experts tile and kpool_score on
 * tensor cores since the H100 run of 2026-12-07 22:05 (tests/cuda/h200/prefill_check.sh), the chunked KDA's intra
 * kernel on tensor cores and the conv prep's cp.async loads since the H100 run of 2026-12-08 00:33 (the same
 * script); FP8 occupancy was slower where it ran. A new one is off until its first GPU run has (sparse MLA's flash
 * form on 16 warps, GLM53_CUDA_MLA_FLASH16, and KDA's gate and gated norm in many-rows forms, GLM53_CUDA_KDA_ROWS,
 * have not yet). "0" / "1" in GLM53_CUDA_<NAME> overrides a default, for an A/B or a suspected kernel. */
static const bool CUDA_DEFAULT_GEMV_STREAM = true, CUDA_DEFAULT_PDL = true, CUDA_DEFAULT_KDA_SEQUENCES = true,
                  CUDA_DEFAULT_GROUPED_EXPERTS = true, CUDA_DEFAULT_MHC_SITE = true,
                  CUDA_DEFAULT_FP8_OCCUPANCY = false, CUDA_DEFAULT_GROUPED_WGMMA = true,
                  CUDA_DEFAULT_KDA_CHUNKED = true, CUDA_DEFAULT_GROUPED_FOLDED = true, CUDA_DEFAULT_KPOOL_MMA = true,
                  CUDA_DEFAULT_KDA_INTRA_MMA = true, CUDA_DEFAULT_KDA_CONV_ASYNC = true,
                  CUDA_DEFAULT_MLA_FLASH16 = false, CUDA_DEFAULT_KDA_ROWS = false;
static const int64_t CUDA_DEFAULT_KDA_CHUNK_PIECE = 4096;   /* chunk-heads of scratch a piece (kda.cu) */
static const int64_t CUDA_DEFAULT_MHC_PIECE = 2048;         /* mhc_site's prefill rows a launch pair (mhc.cu) */

glm53_status cuda_blocks_per_sm(cuda_backend *cb, const void *kernel, int threads, size_t smem, int *blocks) {
    for (int32_t i = 0; i < cb->n_occupancy; i++)
        if (cb->occupancy[i].kernel == kernel && cb->occupancy[i].smem == smem && cb->occupancy[i].threads == threads) {
            *blocks = cb->occupancy[i].blocks;
            return GLM53_OK;
        }
    int n = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    *blocks = n > 0 ? n : 1;
    if (cb->n_occupancy < (int32_t)(sizeof cb->occupancy / sizeof cb->occupancy[0]))
        cb->occupancy[cb->n_occupancy++] = {kernel, smem, threads, *blocks};
    return GLM53_OK;
}

bool cuda_is_act(const glm53_tensor *t) {
    return t && t->data && (t->dtype == GLM53_F32 || t->dtype == GLM53_BF16) && t->device == GLM53_DEVICE_CUDA &&
           glm53_tensor_is_contiguous(t);
}

act_in cuda_act_in(const glm53_tensor *t) {
    assert(cuda_is_act(t));
    return act_in{t->data, t->dtype == GLM53_BF16};
}

act_out cuda_act_out(glm53_tensor *t) {
    assert(cuda_is_act(t));
    return act_out{t->data, t->dtype == GLM53_BF16};
}

glm53_status cuda_weight_ref(const glm53_tensor *w, weight_ref *out, const char *op) {
    assert(w && w->data && w->device == GLM53_DEVICE_CUDA && glm53_tensor_is_contiguous(w));
    const char *name = w->name ? w->name : "(unnamed)";
    *out = weight_ref{w->data, w->dtype, cuda_cols(w), nullptr, 0, 1, 1};
    switch (w->dtype) {
    case GLM53_F32:
    case GLM53_BF16:
    case GLM53_F16: return GLM53_OK;
    case GLM53_F8_E4M3: break;
    default:
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda %s: weight %s has dtype %s", op, name,
                          glm53_dtype_name((glm53_dtype)w->dtype));
    }
    const glm53_tensor *s = w->scale;
    if (!s) return GLM53_OK;
    int64_t rows = glm53_tensor_rows(w), cols = cuda_cols(w);
    if (s->dtype != GLM53_F32 || s->ndim != 2 || !s->data || s->device != GLM53_DEVICE_CUDA || w->block_rows <= 0 ||
        w->block_cols <= 0 || s->shape[0] * w->block_rows < rows || s->shape[1] * w->block_cols < cols)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda %s: FP8 weight %s has a malformed or host-side scale tensor",
                          op, name);
    out->scale = (const float *)s->data;
    out->scale_stride = s->stride[0];
    out->block_rows = w->block_rows;
    out->block_cols = w->block_cols;
    return GLM53_OK;
}

glm53_tensor cuda_view_2d(void *data, int32_t dtype, int64_t rows, int64_t cols) {
    glm53_tensor t = {};
    t.dtype = dtype;
    t.device = GLM53_DEVICE_CUDA;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.data = data;
    glm53_tensor_set_contiguous(&t);
    return t;
}

/* ------------------------------------------------------------------------------------------------------------
 * Caching allocator
 */
struct cuda_allocator {
    std::mutex mutex;   /* a model may load weights on one thread and step on another */
    std::unordered_map<size_t, std::vector<void *>> free_blocks;   /* bucket bytes -> cached blocks */
    std::unordered_map<void *, size_t> live;                       /* block handed out -> its bucket bytes */
    size_t live_bytes = 0, cached_bytes = 0;
};

static size_t bucket_bytes(size_t n) {
    if (n < 256) n = 256;
    if (n <= ((size_t)1 << 20)) {
        size_t b = 256;
        while (b < n) b <<= 1;
        return b;
    }
    size_t top = (size_t)1 << (63 - __builtin_clzll((unsigned long long)n));   /* largest power of two <= n */
    size_t step = top / 8;
    return (n + step - 1) / step * step;
}

/* Gives every cached block back to CUDA. cudaFree waits for the device, so blocks still read by queued work are
 * safe. Called with the allocator's mutex held. */
static glm53_status release_cached_blocks(cuda_allocator *a) {
    for (auto &bucket : a->free_blocks) {
        for (void *p : bucket.second) CUDA_TRY(cudaFree(p));
        a->cached_bytes -= bucket.first * bucket.second.size();
        bucket.second.clear();
    }
    return GLM53_OK;
}

glm53_status cuda_device_alloc(cuda_backend *cb, size_t bytes, void **out, const char *what) {
    *out = nullptr;
    cuda_allocator *a = cb->allocator;
    size_t size = bucket_bytes(bytes);
    std::lock_guard<std::mutex> lock(a->mutex);
    try {
        auto it = a->free_blocks.find(size);
        if (it != a->free_blocks.end() && !it->second.empty()) {
            *out = it->second.back();
            it->second.pop_back();
            a->cached_bytes -= size;
        } else {
            if (cb->capturing) {
                *out = nullptr;
                return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda: %s needs %zu new bytes of device memory while a "
                                  "step is being captured (a captured step must allocate nothing)", what, size);
            }
            cb->counters.device_allocs++;
            cudaError_t e = cudaMalloc(out, size);
            if (e == cudaErrorMemoryAllocation && a->cached_bytes > 0) {
                (void)cudaGetLastError();   /* an allocation failure is not sticky: clear it and retry */
                GLM53_TRY(release_cached_blocks(a));
                cb->counters.device_allocs++;
                e = cudaMalloc(out, size);
            }
            if (e == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();
                *out = nullptr;
                return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda: out of device memory allocating %zu bytes for %s "
                                  "(%zu bytes in use by this backend)", bytes, what, a->live_bytes);
            }
            if (e != cudaSuccess) {
                *out = nullptr;
                return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: cudaMalloc of %zu bytes for %s: %s", size, what,
                                  cudaGetErrorString(e));
            }
        }
        a->live[*out] = size;
        a->live_bytes += size;
    } catch (const std::bad_alloc &) {
        if (*out) cudaFree(*out);   /* not recorded anywhere yet: give it straight back */
        *out = nullptr;
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda: no host memory for the allocator's bookkeeping");
    }
    return GLM53_OK;
}

void cuda_device_free(cuda_backend *cb, void *ptr) {
    if (!ptr) return;
    cuda_allocator *a = cb->allocator;
    std::lock_guard<std::mutex> lock(a->mutex);
    auto it = a->live.find(ptr);
    assert(it != a->live.end() && "cuda: releasing memory this backend did not allocate");
    if (it == a->live.end()) return;
    size_t size = it->second;
    a->live.erase(it);
    a->live_bytes -= size;
    try {
        a->free_blocks[size].push_back(ptr);
        a->cached_bytes += size;
    } catch (const std::bad_alloc &) {
        cudaFree(ptr);   /* no room to cache it: hand it back (a synchronising call, but only in this corner) */
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Small kernels of the memory ops
 */
/* y[n] = x[n], F32 <-> BF16 either way. */
__global__ void convert_kernel(act_out y, act_in x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y.store(i, x[i]);
}

glm53_status cuda_convert(cuda_backend *cb, act_out y, act_in x, int64_t n) {
    if (n <= 0) return GLM53_OK;
    convert_kernel<<<cuda_blocks_for(n, 256), 256, 0, cb->stream>>>(y, x, n);
    CUDA_LAUNCHED("convert");
    return GLM53_OK;
}

/* data[n] = pattern, for 2- and 4-byte elements. */
template <typename T>
__global__ void fill_kernel(T *data, T pattern, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        data[i] = pattern;
}

/* ------------------------------------------------------------------------------------------------------------
 * Memory ops of the table
 */
static const char *fault_op_name(int32_t op) {
    switch (op) {
    case CUDA_FAULT_GATHER_ROWS: return "gather_rows";
    case CUDA_FAULT_SCATTER_ROWS: return "scatter_rows";
    case CUDA_FAULT_SPARSE_MLA: return "sparse_mla";
    case CUDA_FAULT_KPOOL_SELECT: return "kpool_select";
    default: return "a kernel";
    }
}

/* Waits for the stream and reports what went wrong since the last call: a failed kernel (sticky CUDA error) or
 * an out-of-range index a kernel recorded. */
static glm53_status cuda_finish(cuda_backend *cb, const char *what) {
    CUDA_TRY(cudaMemcpyAsync(cb->fault_host, cb->fault, sizeof(cuda_fault), cudaMemcpyDeviceToHost, cb->stream));
    GLM53_TRY(cuda_stream_wait(cb));
    CUDA_TRY(cudaGetLastError());
    if (cb->fault_host->op != CUDA_FAULT_NONE) {
        cuda_fault f = *cb->fault_host;
        CUDA_TRY(cudaMemsetAsync(cb->fault, 0, sizeof(cuda_fault), cb->stream));
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "cuda %s: index %lld at position %lld is outside [0, %lld) "
                          "(recorded by the kernel, reported at %s)", fault_op_name(f.op), f.value, f.position,
                          f.limit, what);
    }
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Per-kernel timing (profile_start / profile_report)
 *
 * An event is recorded on the stream after every kernel, cuBLAS call and copy (CUDA_LAUNCHED and the copy
 * paths call cuda_profile_mark) and at every op's entry. The stream runs in order, so the time between two
 * consecutive events is the work enqueued between them, charged to the later event's label. Intervals are
 * read when the host waits for the stream anyway (cuda_stream_wait), or when the event buffer is full (then
 * with a wait of its own, not counted in the counters).
 */
struct cuda_profile {
    enum { MAX_EVENTS = 4096 };
    cudaEvent_t events[MAX_EVENTS];   /* events[0]: the end of the previous interval */
    std::string labels[MAX_EVENTS];
    int         n_events = 0;         /* recorded in the current window, events[0] included */
    struct total { std::string label; int64_t calls; double ms; };
    std::vector<total>                      totals;
    std::unordered_map<std::string, size_t> index;   /* label -> totals[] */
    int64_t     host_waits = 0;       /* windows folded at a stream wait: one per step in a decode loop */
};

/* Charges every completed interval of the window to its label; events[n-1] becomes the next window's start. */
static void profile_fold(cuda_backend *cb) {
    cuda_profile *p = cb->profile;
    for (int i = 1; i < p->n_events; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->events[i - 1], p->events[i]) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        auto it = p->index.find(p->labels[i]);
        size_t k;
        if (it == p->index.end()) {
            k = p->totals.size();
            p->index.emplace(p->labels[i], k);
            p->totals.push_back({p->labels[i], 0, 0.0});
        } else {
            k = it->second;
        }
        p->totals[k].calls++;
        p->totals[k].ms += ms;
    }
    if (p->n_events > 1) std::swap(p->events[0], p->events[p->n_events - 1]);
    p->n_events = p->n_events > 0 ? 1 : 0;
    p->host_waits++;
}

void cuda_profile_mark(cuda_backend *cb, const char *what) {
    cuda_profile *p = cb->profile;
    if (!p || cb->capturing) return;   /* events in a graph would have no time to read */
    if (p->n_events == cuda_profile::MAX_EVENTS) {
        cudaEventSynchronize(p->events[p->n_events - 1]);
        profile_fold(cb);
        p->host_waits--;   /* not a wait of the caller's */
    }
    int i = p->n_events++;
    p->labels[i] = what;
    if (cb->profile_detail[0]) p->labels[i] += cb->profile_detail;
    if (cudaEventRecord(p->events[i], cb->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        p->n_events--;
    }
}

static void profile_free(cuda_backend *cb) {
    if (!cb->profile) return;
    for (cudaEvent_t e : cb->profile->events)
        if (e) cudaEventDestroy(e);
    delete cb->profile;
    cb->profile = nullptr;
}

static glm53_status cuda_profile_start(glm53_backend *be) {
    cuda_backend *cb = cuda_impl(be);
    profile_free(cb);
    GLM53_TRY(cuda_enter(cb));
    cuda_profile *p = new (std::nothrow) cuda_profile();
    if (!p) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda profile: no host memory");
    for (cudaEvent_t &e : p->events) e = nullptr;
    for (cudaEvent_t &e : p->events) {
        cudaError_t err = cudaEventCreate(&e);
        if (err != cudaSuccess) {
            cb->profile = p;
            profile_free(cb);
            return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda profile: cudaEventCreate: %s", cudaGetErrorString(err));
        }
    }
    CUDA_TRY(cudaStreamSynchronize(cb->stream));   /* the record starts with an idle stream */
    cb->profile = p;
    cb->profile_detail[0] = '\0';
    cuda_profile_mark(cb, "(start)");
    return GLM53_OK;
}

static glm53_status cuda_profile_report(glm53_backend *be, FILE *out) {
    cuda_backend *cb = cuda_impl(be);
    if (!cb->profile) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda profile_report without profile_start");
    CUDA_TRY(cudaSetDevice(cb->device));
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    profile_fold(cb);
    cuda_profile *p = cb->profile;
    int64_t waits = p->host_waits - 1;   /* the fold just above is not one of the caller's */
    std::vector<cuda_profile::total> rows = p->totals;
    std::sort(rows.begin(), rows.end(), [](const cuda_profile::total &a, const cuda_profile::total &b) {
        return a.ms > b.ms;
    });
    double sum = 0.0;
    for (const auto &r : rows) sum += r.ms;
    int64_t per = waits > 0 ? waits : 1;
    fprintf(out, "%-64s %9s %11s %10s %10s %7s\n", "kernel (label)", "calls", "total ms", "us / call", "ms / wait",
            "share");
    for (const auto &r : rows)
        fprintf(out, "%-64s %9lld %11.3f %10.2f %10.4f %6.1f%%\n", r.label.c_str(), (long long)r.calls, r.ms,
                r.calls ? 1e3 * r.ms / (double)r.calls : 0.0, r.ms / (double)per, sum > 0 ? 100.0 * r.ms / sum : 0.0);
    fprintf(out, "%-64s %9s %11.3f %10s %10.4f %6.1f%%\n", "total", "", sum, "", sum / (double)per, 100.0);
    fprintf(out, "host waits (steps) in the record: %lld\n", (long long)waits);
    profile_free(cb);
    return GLM53_OK;
}

static glm53_status cuda_alloc(glm53_backend *be, glm53_tensor *t) {
    cuda_backend *cb = cuda_impl(be);
    assert(t->ndim >= 0 && t->ndim <= GLM53_MAX_DIMS);
    glm53_tensor_set_contiguous(t);
    t->device = GLM53_DEVICE_CUDA;
    t->data = nullptr;
    GLM53_TRY(cuda_enter(cb));
    return cuda_device_alloc(cb, glm53_tensor_nbytes(t), &t->data, t->name ? t->name : "a tensor");
}

static void cuda_release(glm53_backend *be, glm53_tensor *t) {
    if (!t->data) return;
    cuda_device_free(cuda_impl(be), t->data);
    t->data = nullptr;
}

static glm53_status cuda_upload(glm53_backend *be, glm53_tensor *dst, const void *host_src) {
    cuda_backend *cb = cuda_impl(be);
    assert(dst->data && dst->device == GLM53_DEVICE_CUDA);
    GLM53_TRY(cuda_enter(cb));
    size_t n = glm53_tensor_nbytes(dst);
    if (n) CUDA_TRY(cudaMemcpyAsync(dst->data, host_src, n, cudaMemcpyHostToDevice, cb->stream));
    if (cb->profile) cuda_profile_mark(cb, "upload");
    return cuda_stream_wait(cb);   /* the caller may reuse host_src as soon as we return */
}

/* Enqueues the copy of `device` (a tensor of this backend) to or from pinned host memory. */
static glm53_status copy_async(glm53_backend *be, const glm53_tensor *device, void *pinned, cudaMemcpyKind kind) {
    cuda_backend *cb = cuda_impl(be);
    assert(device->data && device->device == GLM53_DEVICE_CUDA);
    GLM53_TRY(cuda_enter(cb));
    size_t n = glm53_tensor_nbytes(device);
    void *dst = kind == cudaMemcpyHostToDevice ? device->data : pinned;
    const void *src = kind == cudaMemcpyHostToDevice ? pinned : device->data;
    if (n) CUDA_TRY(cudaMemcpyAsync(dst, src, n, kind, cb->stream));
    if (cb->profile) cuda_profile_mark(cb, kind == cudaMemcpyHostToDevice ? "upload (async)" : "download (async)");
    return GLM53_OK;
}

static glm53_status cuda_upload_async(glm53_backend *be, glm53_tensor *dst, const void *pinned_src) {
    return copy_async(be, dst, (void *)pinned_src, cudaMemcpyHostToDevice);
}

static glm53_status cuda_download_async(glm53_backend *be, void *pinned_dst, const glm53_tensor *src) {
    return copy_async(be, src, pinned_dst, cudaMemcpyDeviceToHost);
}

static glm53_status cuda_host_alloc(glm53_backend *be, size_t bytes, void **out) {
    cuda_backend *cb = cuda_impl(be);
    *out = nullptr;
    GLM53_TRY(cuda_enter(cb));
    if (cb->capturing) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda: pinned host memory asked for while capturing");
    cb->counters.device_allocs++;
    cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = nullptr;
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda: cudaMallocHost of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    return GLM53_OK;
}

static void cuda_host_free(glm53_backend *be, void *ptr) {
    if (ptr) cudaFreeHost(ptr);   /* waits for the device: only called between steps */
}

/* ------------------------------------------------------------------------------------------------------------
 * Capture and replay
 */
struct glm53_graph {
    cudaGraph_t     graph;
    cudaGraphExec_t exec;
};

static glm53_status cuda_capture_begin(glm53_backend *be) {
    cuda_backend *cb = cuda_impl(be);
    GLM53_TRY(cuda_enter(cb));
    if (cb->capturing) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda: capture_begin while already capturing");
    CUDA_TRY(cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal));
    cb->capturing = true;
    return GLM53_OK;
}

static glm53_status cuda_capture_end(glm53_backend *be, glm53_graph **out) {
    cuda_backend *cb = cuda_impl(be);
    *out = nullptr;
    GLM53_TRY(cuda_enter(cb));
    if (!cb->capturing) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "cuda: capture_end without capture_begin");
    cb->capturing = false;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(cb->stream, &graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   /* a broken capture (an illegal call while recording) is not sticky */
        if (graph) cudaGraphDestroy(graph);
        return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: the capture failed: %s", cudaGetErrorString(e));
    }
    glm53_graph *g = new (std::nothrow) glm53_graph();
    if (!g) {
        cudaGraphDestroy(graph);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda: no host memory for a graph");
    }
    g->graph = graph;
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphDestroy(graph);
        delete g;
        return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: cudaGraphInstantiate: %s", cudaGetErrorString(e));
    }
    *out = g;
    return GLM53_OK;
}

static glm53_status cuda_graph_launch(glm53_backend *be, glm53_graph *g) {
    cuda_backend *cb = cuda_impl(be);
    GLM53_TRY(cuda_enter(cb));
    CUDA_TRY(cudaGraphLaunch(g->exec, cb->stream));
    return GLM53_OK;
}

static void cuda_graph_free(glm53_backend *be, glm53_graph *g) {
    if (!g) return;
    cudaSetDevice(cuda_impl(be)->device);
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    delete g;
}

static void cuda_counters(glm53_backend *be, glm53_backend_counters *out) { *out = cuda_impl(be)->counters; }

static glm53_status cuda_download(glm53_backend *be, void *host_dst, const glm53_tensor *src) {
    cuda_backend *cb = cuda_impl(be);
    assert(src->data && src->device == GLM53_DEVICE_CUDA);
    GLM53_TRY(cuda_enter(cb));
    size_t n = glm53_tensor_nbytes(src);
    if (n) CUDA_TRY(cudaMemcpyAsync(host_dst, src->data, n, cudaMemcpyDeviceToHost, cb->stream));
    if (cb->profile) cuda_profile_mark(cb, "download");
    return cuda_finish(cb, "download");
}

static glm53_status cuda_copy(glm53_backend *be, glm53_tensor *dst, const glm53_tensor *src) {
    cuda_backend *cb = cuda_impl(be);
    int64_t n = glm53_tensor_numel(src);
    assert(glm53_tensor_numel(dst) == n && dst->data && src->data);
    assert(dst->device == GLM53_DEVICE_CUDA && src->device == GLM53_DEVICE_CUDA);
    assert(glm53_tensor_is_contiguous(dst) && glm53_tensor_is_contiguous(src));
    GLM53_TRY(cuda_enter(cb));
    if (n == 0) return GLM53_OK;
    if (dst->dtype == src->dtype) {
        if (dst->data != src->data)
            CUDA_TRY(cudaMemcpyAsync(dst->data, src->data, glm53_tensor_nbytes(src), cudaMemcpyDeviceToDevice,
                                     cb->stream));
        if (cb->profile) cuda_profile_mark(cb, "copy");
        return GLM53_OK;
    }
    if (!cuda_is_act(dst) || !cuda_is_act(src))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda copy: %s -> %s is not a supported conversion",
                          glm53_dtype_name((glm53_dtype)src->dtype), glm53_dtype_name((glm53_dtype)dst->dtype));
    return cuda_convert(cb, cuda_act_out(dst), cuda_act_in(src), n);
}

static glm53_status cuda_fill(glm53_backend *be, glm53_tensor *t, float value) {
    cuda_backend *cb = cuda_impl(be);
    assert(t->data && t->device == GLM53_DEVICE_CUDA && glm53_tensor_is_contiguous(t));
    GLM53_TRY(cuda_enter(cb));
    int64_t n = glm53_tensor_numel(t);
    if (n == 0) return GLM53_OK;
    unsigned blocks = cuda_blocks_for(n, 256);
    switch (t->dtype) {
    case GLM53_F32: {
        uint32_t bits;
        memcpy(&bits, &value, 4);
        fill_kernel<uint32_t><<<blocks, 256, 0, cb->stream>>>((uint32_t *)t->data, bits, n);
        break;
    }
    case GLM53_BF16:
        fill_kernel<uint16_t><<<blocks, 256, 0, cb->stream>>>((uint16_t *)t->data, glm53_f32_to_bf16(value), n);
        break;
    case GLM53_I32: {
        /* NaN and out-of-range values have no int32 meaning; they become INT32_MIN, as x86's conversion gives. */
        int32_t v = (value == value && value >= -2147483648.0f && value < 2147483648.0f) ? (int32_t)value
                                                                                          : INT32_MIN;
        fill_kernel<uint32_t><<<blocks, 256, 0, cb->stream>>>((uint32_t *)t->data, (uint32_t)v, n);
        break;
    }
    default:
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cuda fill: dtype %s", glm53_dtype_name((glm53_dtype)t->dtype));
    }
    CUDA_LAUNCHED("fill");
    return GLM53_OK;
}

static glm53_status cuda_sync(glm53_backend *be) {
    cuda_backend *cb = cuda_impl(be);
    GLM53_TRY(cuda_enter(cb));
    return cuda_finish(cb, "sync");
}

/* Frees everything, including blocks still held by tensors: the backend's memory dies with it. Errors have
 * nowhere to go here, so every step is attempted. */
static void cuda_destroy(glm53_backend *be) {
    if (!be) return;
    cuda_backend *cb = cuda_impl(be);
    if (cb) {
        cudaSetDevice(cb->device);
        if (cb->stream) cudaStreamSynchronize(cb->stream);
        profile_free(cb);
        if (cb->allocator) {
            for (auto &bucket : cb->allocator->free_blocks)
                for (void *p : bucket.second) cudaFree(p);
            for (auto &block : cb->allocator->live) cudaFree(block.first);
            delete cb->allocator;
        }
        if (cb->cublas) cublasDestroy(cb->cublas);
        if (cb->cublas_workspace) cudaFree(cb->cublas_workspace);
        if (cb->fault) cudaFree(cb->fault);
        if (cb->mhc_tickets) cudaFree(cb->mhc_tickets);
        if (cb->fault_host) cudaFreeHost(cb->fault_host);
        if (cb->stream) cudaStreamDestroy(cb->stream);
        (void)cudaGetLastError();
        delete cb;
    }
    delete be;
}

/* ------------------------------------------------------------------------------------------------------------
 * Construction
 */
/* A kernel that exists only so creation can ask whether this build has code the device can run. */
__global__ void probe_kernel() {}

static glm53_status cuda_backend_init(cuda_backend *cb, int32_t ordinal) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: no usable CUDA device (cudaGetDeviceCount: %s)",
                          cudaGetErrorString(e));
    }
    if (count == 0) return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: no CUDA device is present");
    if (ordinal < 0 || ordinal >= count)
        return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: device %d requested, %d present", ordinal, count);
    cb->device = ordinal;
    CUDA_TRY(cudaSetDevice(ordinal));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal));
    cudaFuncAttributes attr;
    e = cudaFuncGetAttributes(&attr, probe_kernel);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return GLM53_FAIL(GLM53_ERR_BACKEND, "cuda: this build has no kernels for device %d (%s, compute capability "
                          "%d.%d; built for sm_90a): %s", ordinal, prop.name, prop.major, prop.minor,
                          cudaGetErrorString(e));
    }
    cb->smem_optin = (int32_t)prop.sharedMemPerBlockOptin;
    cb->sm_count = (int32_t)prop.multiProcessorCount;
    /* Performance switches (the decode path's, the prefill experts'): "0" off, "1" on, unset the default here
     * (tests/cuda/h200/decode_ab.sh times them side by side; docs/cuda.md says which are measured). */
    auto switched_on = [](const char *name, bool by_default) {
        const char *v = getenv(name);
        return v && (!strcmp(v, "0") || !strcmp(v, "1")) ? v[0] == '1' : by_default;
    };
    cb->gemv_stream = switched_on("GLM53_CUDA_GEMV_STREAM", CUDA_DEFAULT_GEMV_STREAM);
    cb->pdl = switched_on("GLM53_CUDA_PDL", CUDA_DEFAULT_PDL);
    cb->kda_sequences = switched_on("GLM53_CUDA_KDA_SEQUENCES", CUDA_DEFAULT_KDA_SEQUENCES);
    cb->grouped_experts = switched_on("GLM53_CUDA_GROUPED_EXPERTS", CUDA_DEFAULT_GROUPED_EXPERTS);
    cb->grouped_wgmma = switched_on("GLM53_CUDA_GROUPED_WGMMA", CUDA_DEFAULT_GROUPED_WGMMA);
    cb->mhc_site = switched_on("GLM53_CUDA_MHC_SITE", CUDA_DEFAULT_MHC_SITE);
    cb->fp8_occupancy = switched_on("GLM53_CUDA_FP8_OCCUPANCY", CUDA_DEFAULT_FP8_OCCUPANCY);
    cb->kda_chunked = switched_on("GLM53_CUDA_KDA_CHUNKED", CUDA_DEFAULT_KDA_CHUNKED);
    cb->grouped_folded = switched_on("GLM53_CUDA_GROUPED_FOLDED", CUDA_DEFAULT_GROUPED_FOLDED);
    cb->kpool_mma = switched_on("GLM53_CUDA_KPOOL_MMA", CUDA_DEFAULT_KPOOL_MMA);
    cb->kda_intra_mma = switched_on("GLM53_CUDA_KDA_INTRA_MMA", CUDA_DEFAULT_KDA_INTRA_MMA);
    cb->kda_conv_async = switched_on("GLM53_CUDA_KDA_CONV_ASYNC", CUDA_DEFAULT_KDA_CONV_ASYNC);
    cb->mla_flash16 = switched_on("GLM53_CUDA_MLA_FLASH16", CUDA_DEFAULT_MLA_FLASH16);
    cb->kda_rows = switched_on("GLM53_CUDA_KDA_ROWS", CUDA_DEFAULT_KDA_ROWS);
    const char *piece = getenv("GLM53_CUDA_KDA_CHUNK_PIECE");   /* a size, not a switch: tests make pieces small */
    cb->kda_chunk_piece = piece && atoll(piece) > 0 ? atoll(piece) : CUDA_DEFAULT_KDA_CHUNK_PIECE;
    const char *mhc_piece = getenv("GLM53_CUDA_MHC_PIECE");   /* a size too: the A/B of how much of H_out stays in L2 */
    cb->mhc_piece = mhc_piece && atoll(mhc_piece) > 0 ? atoll(mhc_piece) : CUDA_DEFAULT_MHC_PIECE;

    cb->allocator = new (std::nothrow) cuda_allocator();
    if (!cb->allocator) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda: no host memory for the allocator");
    CUDA_TRY(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaMalloc(&cb->fault, sizeof(cuda_fault)));
    CUDA_TRY(cudaMemset(cb->fault, 0, sizeof(cuda_fault)));
    CUDA_TRY(cudaMalloc(&cb->mhc_tickets, CUDA_MHC_TICKET_ROWS * sizeof(unsigned)));
    CUDA_TRY(cudaMemset(cb->mhc_tickets, 0, CUDA_MHC_TICKET_ROWS * sizeof(unsigned)));
    CUDA_TRY(cudaMallocHost(&cb->fault_host, sizeof(cuda_fault)));
    CUDA_TRY(cudaMalloc(&cb->cublas_workspace, CUBLAS_WORKSPACE_BYTES));

    CUBLAS_TRY(cublasCreate(&cb->cublas));
    CUBLAS_TRY(cublasSetStream(cb->cublas, cb->stream));
    CUBLAS_TRY(cublasSetWorkspace(cb->cublas, cb->cublas_workspace, CUBLAS_WORKSPACE_BYTES));
    /* No TF32 anywhere (the default math mode never uses it for F32), and no split-K reductions in BF16: every
     * GEMM accumulates in F32 and rounds once. */
    CUBLAS_TRY(cublasSetMathMode(cb->cublas,
                                 (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUDA_TRY(cudaDeviceSynchronize());
    return GLM53_OK;
}

static const glm53_backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
    .upload_async = cuda_upload_async,
    .download_async = cuda_download_async,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .counters = cuda_counters,
    .profile_start = cuda_profile_start,
    .profile_report = cuda_profile_report,
    .matmul = cuda_matmul,
    .matmul_multi = cuda_matmul_multi,
    .rmsnorm = cuda_rmsnorm,
    .layernorm = cuda_layernorm,
    .l2norm = cuda_l2norm,
    .softmax = cuda_softmax,
    .rmsnorm_gated = cuda_rmsnorm_gated,
    .unary = cuda_unary,
    .binary = cuda_binary,
    .axpby = cuda_axpby,
    .swiglu = cuda_swiglu,
    .swiglu_gate_up = cuda_swiglu_gate_up,
    .topk = cuda_topk,
    .gather_rows = cuda_gather_rows,
    .scatter_rows = cuda_scatter_rows,
    .mhc_expand = cuda_mhc_expand,
    .mhc_pre = cuda_mhc_pre,
    .mhc_post = cuda_mhc_post,
    .mhc_site = cuda_mhc_site,
    .mhc_mean = cuda_mhc_mean,
    .conv1d_causal = cuda_conv1d_causal,
    .kda_gate = cuda_kda_gate,
    .kda_recurrent = cuda_kda_recurrent,
    .kda_sequences = cuda_kda_sequences,
    .kpool_compress = cuda_kpool_compress,
    .kpool_score = cuda_kpool_score,
    .kpool_select = cuda_kpool_select,
    .sparse_mla = cuda_sparse_mla,
    .moe_route = cuda_moe_route,
    .moe_experts = cuda_moe_experts,
    .prepare_experts = cuda_prepare_experts,
    .release_experts = cuda_release_experts,
    .rope_2d = cuda_rope_2d,
    .attention_segments = cuda_attention_segments,
};

extern "C" glm53_status glm53_backend_cuda_create(int32_t ordinal, glm53_backend **out) {
    *out = nullptr;
    glm53_backend *be = new (std::nothrow) glm53_backend();
    cuda_backend *cb = new (std::nothrow) cuda_backend();
    if (!be || !cb) {
        delete be;
        delete cb;
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cuda backend: no host memory");
    }
    be->ops = &cuda_ops;
    be->impl = cb;
    cb->be = be;
    glm53_status st = cuda_backend_init(cb, ordinal);
    if (st != GLM53_OK) {
        cuda_destroy(be);
        return st;
    }
    /* A fused op switched off: this instance's table without it, so the engine runs the op chain without asking. */
    cb->ops = cuda_ops;
    if (!cb->kda_sequences) cb->ops.kda_sequences = nullptr;
    if (!cb->mhc_site) cb->ops.mhc_site = nullptr;
    be->ops = &cb->ops;
    be->device = GLM53_DEVICE_CUDA;
    be->ordinal = ordinal;
    be->stream = (void *)cb->stream;
    be->act_dtype = GLM53_BF16;
    *out = be;
    return GLM53_OK;
}
