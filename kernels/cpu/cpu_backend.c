/*
 * cpu_backend.c - the CPU backend: construction, memory ops, and the helpers every CPU op shares.
 *
 * Memory is plain host memory (64-byte aligned so vector loads of a row start on a cache line); upload and
 * download are memcpy. Activations are F32. The ops themselves live in ops_*.c; this file fills the op table.
 */
#include "kernels/cpu/cpu_ops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Below this cost a run stays on the caller. The unit is about a flop of a vectorised kernel (some 50 per ns on
 * one core here): 2^18 is 3-5 us of work, about where handing half of it to a spinning worker (a microsecond or
 * so) starts to pay; ops made of exponentials and divisions count those at their cost. */
enum { CPU_PARALLEL_MIN_COST = 1 << 18 };

void cpu_parallel_for(glm53_backend *be, int64_t n_items, int64_t cost_per_item, glm53_pool_fn fn, void *ctx) {
    if (n_items <= 0) return;
    if (n_items * cost_per_item < CPU_PARALLEL_MIN_COST) fn(ctx, 0, n_items);
    else glm53_pool_run(cpu_impl(be)->pool, n_items, fn, ctx);
}

void *cpu_scratch(glm53_backend *be, size_t bytes) {
    cpu_backend *impl = cpu_impl(be);
    if (bytes <= impl->scratch_bytes) return impl->scratch;
    size_t grown = (bytes + 4095) / 4096 * 4096;
    void *p = aligned_alloc(64, grown);
    if (!p) return NULL;
    free(impl->scratch);
    impl->scratch = p;
    impl->scratch_bytes = grown;
    return p;
}

bool cpu_weight_supported(const glm53_tensor *w) {
    switch (w->dtype) {
    case GLM53_F32:
    case GLM53_BF16:
    case GLM53_F16: return true;
    case GLM53_F8_E4M3:
        return !w->scale || (w->scale->dtype == GLM53_F32 && w->block_rows > 0 && w->block_cols > 0 &&
                             w->scale->ndim == 2 &&
                             w->scale->shape[0] * w->block_rows >= w->shape[0] &&
                             w->scale->shape[1] * w->block_cols >= w->shape[w->ndim - 1]);
    default: return false;
    }
}

const float *cpu_param_f32(const glm53_tensor *p, bool *owned, glm53_status *status) {
    *owned = false;
    *status = GLM53_OK;
    if (p->dtype == GLM53_F32) return (const float *)p->data;
    if (p->dtype != GLM53_BF16 && p->dtype != GLM53_F16) {
        *status = GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu: parameter %s has dtype %s, not F32, BF16 or F16",
                             p->name ? p->name : "(unnamed)", glm53_dtype_name((glm53_dtype)p->dtype));
        return NULL;
    }
    int64_t n = glm53_tensor_numel(p);
    float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!buf) {
        *status = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cpu: %lld floats for parameter %s", (long long)n,
                             p->name ? p->name : "(unnamed)");
        return NULL;
    }
    if (p->dtype == GLM53_BF16)
        cpu_bf16_to_f32_n(p->data, n, buf);
    else
        for (int64_t i = 0; i < n; i++) buf[i] = glm53_f16_to_f32(((const uint16_t *)p->data)[i]);
    *owned = true;
    return buf;
}

float *cpu_weight_to_f32(glm53_backend *be, const glm53_tensor *w) {
    int64_t rows = w->shape[0], cols = w->shape[w->ndim - 1];
    float *out = malloc((size_t)(rows * cols) * sizeof(float));
    if (!out) return NULL;
    for (int64_t r = 0; r < rows; r++) cpu_weight_row_to_f32(w, cpu_impl(be)->fp8_table, r, 0, cols, out + r * cols);
    return out;
}

/* ------------------------------------------------------------------------------------------------------------
 * Memory ops
 */
/* Blocks of CPU_MAP_MIN_BYTES or more get an anonymous mapping of their own; smaller ones come from the heap.
 * Why: most large blocks are sequence caches (a sequence of 8,192 tokens of glm53-tiny holds 21 MB in tensors of
 * 64 KB to 2 MB), made and freed once per request. From malloc, glibc serves them from its heap once its dynamic
 * mmap threshold has risen past their size (it does at the first such free), and freed heap memory stays
 * resident: a server's RSS grew by a fifth to two thirds over two minutes of requests (docs/server.md, load).
 *
 * A released mapping is kept for the next block of the same size while the kept ones total at most the most
 * mapped bytes that were ever in use at once (CPU_KEEP_BYTES at least), and unmapped beyond that: a server frees a
 * request's caches and makes the next request's of the same sizes a moment later, and unmapping each (a TLB
 * shootdown across the step's threads, which interrupts them) and faulting its pages in again cost a quarter of
 * the server's throughput under load on a 2-core VM. The bound is the peak in use, not a constant: a burst of
 * requests that end together (16 streams of 21 MB each) is followed by a burst of the same sizes, and with 64 MiB
 * 13 of the 16 sequences were unmapped and mapped again per burst, a third of the event loop's CPU per streamed
 * token in tests/server/bench.lua (docs/server.md, item 4). So mapped memory is bounded by the live blocks plus the
 * peak of live blocks (at least CPU_KEEP_BYTES): what was in use at once may stay mapped for reuse, no more.
 * Kept mappings are found by size (a list of the few sizes seen, each a stack), not by walking every block.
 *
 * Under AddressSanitizer every block comes from the heap, so its bounds checks keep covering the caches.
 * Every block starts with a header of CPU_BLOCK_HEADER bytes (keeping the data 64-byte aligned) that records how
 * it was made, so release does not depend on the tensor's shape being the one it was allocated with. */
#if defined(__SANITIZE_ADDRESS__)
#define CPU_MAP_MIN_BYTES SIZE_MAX
#else
#define CPU_MAP_MIN_BYTES ((size_t)64 << 10)
#endif
#define CPU_KEEP_BYTES ((size_t)64 << 20)
enum { CPU_BLOCK_HEADER = 64 };

struct cpu_block {
    size_t     mapped;   /* bytes of the block's own mapping; 0 when it came from the heap */
    cpu_block *next;     /* in its cpu_kept_size's stack while released */
};

struct cpu_kept_size {
    size_t         mapped;   /* the size of every block in the stack */
    cpu_block     *blocks;
    cpu_kept_size *next;
};

/* A mapped block of `bytes` goes into use (kept_lock held): the live bytes and their peak. */
static void cpu_count_live(cpu_backend *impl, size_t bytes) {
    impl->live_bytes += bytes;
    if (impl->live_bytes > impl->peak_bytes) impl->peak_bytes = impl->live_bytes;
}

static void *cpu_block_alloc(cpu_backend *impl, size_t nbytes) {
    /* aligned_alloc wants a multiple of the alignment; a zero-size tensor still gets a valid pointer. */
    size_t total = CPU_BLOCK_HEADER + (nbytes + 63) / 64 * 64;
    cpu_block *b = NULL;
    if (nbytes >= CPU_MAP_MIN_BYTES) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        total = (total + page - 1) / page * page;
        pthread_mutex_lock(&impl->kept_lock);
        for (cpu_kept_size *k = impl->kept; k; k = k->next)
            if (k->mapped == total) {
                if (k->blocks) {
                    b = k->blocks;
                    k->blocks = b->next;
                    impl->kept_bytes -= total;
                }
                break;
            }
        if (b) cpu_count_live(impl, total);   /* a reused block: one critical section */
        pthread_mutex_unlock(&impl->kept_lock);
        if (!b) {
            void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) return NULL;
            b = p;
            b->mapped = total;
            pthread_mutex_lock(&impl->kept_lock);
            cpu_count_live(impl, total);
            pthread_mutex_unlock(&impl->kept_lock);
        }
    } else {
        b = aligned_alloc(64, total);
        if (!b) return NULL;
        b->mapped = 0;
    }
    b->next = NULL;
    return (char *)b + CPU_BLOCK_HEADER;
}

static void cpu_block_free(cpu_backend *impl, void *data) {
    if (!data) return;
    cpu_block *b = (cpu_block *)((char *)data - CPU_BLOCK_HEADER);
    if (!b->mapped) {
        free(b);
        return;
    }
    pthread_mutex_lock(&impl->kept_lock);
    impl->live_bytes -= b->mapped;
    size_t bound = impl->peak_bytes > CPU_KEEP_BYTES ? impl->peak_bytes : CPU_KEEP_BYTES;
    bool keep = impl->kept_bytes + b->mapped <= bound;
    cpu_kept_size *k = impl->kept;
    while (keep && k && k->mapped != b->mapped) k = k->next;
    if (keep && !k) {
        k = malloc(sizeof *k);
        if (k) {
            *k = (cpu_kept_size){.mapped = b->mapped, .next = impl->kept};
            impl->kept = k;
        } else {
            keep = false;
        }
    }
    if (keep) {
        b->next = k->blocks;
        k->blocks = b;
        impl->kept_bytes += b->mapped;
    }
    pthread_mutex_unlock(&impl->kept_lock);
    if (!keep) munmap(b, b->mapped);
}

static glm53_status cpu_alloc(glm53_backend *be, glm53_tensor *t) {
    assert(t->ndim >= 0 && t->ndim <= GLM53_MAX_DIMS);
    glm53_tensor_set_contiguous(t);
    t->device = GLM53_DEVICE_CPU;
    size_t nbytes = glm53_tensor_nbytes(t);
    t->data = cpu_block_alloc(cpu_impl(be), nbytes);
    if (!t->data)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cpu: allocating %zu bytes for %s", nbytes,
                          t->name ? t->name : "a tensor");
    return GLM53_OK;
}

static void cpu_release(glm53_backend *be, glm53_tensor *t) {
    cpu_block_free(cpu_impl(be), t->data);
    t->data = NULL;
}

static glm53_status cpu_upload(glm53_backend *be, glm53_tensor *dst, const void *host_src) {
    memcpy(dst->data, host_src, glm53_tensor_nbytes(dst));
    return GLM53_OK;
}

static glm53_status cpu_download(glm53_backend *be, void *host_dst, const glm53_tensor *src) {
    memcpy(host_dst, src->data, glm53_tensor_nbytes(src));
    return GLM53_OK;
}

/* dst = src (same numel); F32 <-> BF16 converts, BF16 rounding to nearest even. */
static glm53_status cpu_copy(glm53_backend *be, glm53_tensor *dst, const glm53_tensor *src) {
    int64_t n = glm53_tensor_numel(src);
    assert(glm53_tensor_numel(dst) == n);
    if (dst->dtype == src->dtype) {
        memcpy(dst->data, src->data, glm53_tensor_nbytes(src));
    } else if (dst->dtype == GLM53_BF16 && src->dtype == GLM53_F32) {
        const float *s = src->data;
        uint16_t *d = dst->data;
        for (int64_t i = 0; i < n; i++) d[i] = glm53_f32_to_bf16(s[i]);
    } else if (dst->dtype == GLM53_F32 && src->dtype == GLM53_BF16) {
        cpu_bf16_to_f32_n(src->data, n, dst->data);
    } else {
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu copy: %s -> %s is not a supported conversion",
                          glm53_dtype_name((glm53_dtype)src->dtype), glm53_dtype_name((glm53_dtype)dst->dtype));
    }
    return GLM53_OK;
}

static glm53_status cpu_fill(glm53_backend *be, glm53_tensor *t, float value) {
    int64_t n = glm53_tensor_numel(t);
    switch (t->dtype) {
    case GLM53_F32:
        for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = value;
        break;
    case GLM53_BF16: {
        uint16_t h = glm53_f32_to_bf16(value);
        for (int64_t i = 0; i < n; i++) ((uint16_t *)t->data)[i] = h;
        break;
    }
    case GLM53_I32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)t->data)[i] = (int32_t)value;
        break;
    default:
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "cpu fill: dtype %s", glm53_dtype_name((glm53_dtype)t->dtype));
    }
    return GLM53_OK;
}

static glm53_status cpu_sync(glm53_backend *be) { return GLM53_OK; }

static void cpu_destroy(glm53_backend *be) {
    if (!be) return;
    cpu_backend *impl = cpu_impl(be);
    if (impl) {
        glm53_pool_free(impl->pool);
        free(impl->scratch);
        for (cpu_kept_size *k = impl->kept, *next_k; k; k = next_k) {
            next_k = k->next;
            for (cpu_block *b = k->blocks, *next; b; b = next) {
                next = b->next;
                munmap(b, b->mapped);
            }
            free(k);
        }
        pthread_mutex_destroy(&impl->kept_lock);
    }
    free(impl);
    free(be);
}

/* ------------------------------------------------------------------------------------------------------------
 * Construction
 */
static const glm53_backend_ops cpu_ops = {
    .name = "cpu",
    /* memory: host memory; no async copies, no pinned memory, no capture, no counters (all synchronous) */
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    /* linear, norm, elementwise, gather */
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .layernorm = cpu_layernorm,
    .l2norm = cpu_l2norm,
    .softmax = cpu_softmax,
    .rmsnorm_gated = cpu_rmsnorm_gated,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .axpby = cpu_axpby,
    .swiglu = cpu_swiglu,
    .topk = cpu_topk,
    .gather_rows = cpu_gather_rows,
    .scatter_rows = cpu_scatter_rows,
    /* model blocks */
    .mhc_expand = cpu_mhc_expand,
    .mhc_pre = cpu_mhc_pre,
    .mhc_post = cpu_mhc_post,
    .mhc_mean = cpu_mhc_mean,
    .conv1d_causal = cpu_conv1d_causal,
    .kda_gate = cpu_kda_gate,
    .kda_recurrent = cpu_kda_recurrent,
    .kda_sequences = cpu_kda_sequences,
    .kpool_compress = cpu_kpool_compress,
    .kpool_score = cpu_kpool_score,
    .kpool_select = cpu_kpool_select,
    .sparse_mla = cpu_sparse_mla,
    .moe_route = cpu_moe_route,
    .moe_experts = cpu_moe_experts,
    .rope_2d = cpu_rope_2d,
    .attention_segments = cpu_attention_segments,
};

glm53_status glm53_backend_cpu_create(int32_t n_threads, glm53_backend **out) {
    *out = NULL;
    /* $GLM53_CPU_ISA caps the builds that run, to measure or check here what a machine without AVX-512 (avx2: the
     * same results, bit for bit) or without AVX2 (baseline: other roundings) runs; avx512 or unset: what cpuid
     * allows. */
    const char *isa = getenv("GLM53_CPU_ISA");
    if (isa && *isa && strcmp(isa, "avx2") != 0 && strcmp(isa, "baseline") != 0 && strcmp(isa, "avx512") != 0)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "GLM53_CPU_ISA is '%s': expected baseline, avx2 or avx512", isa);
    glm53_backend *be = calloc(1, sizeof *be);
    cpu_backend *impl = calloc(1, sizeof *impl);
    if (!be || !impl) {
        free(be);
        free(impl);
        return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "cpu backend: out of memory");
    }
    glm53_status st = glm53_pool_create(n_threads, &impl->pool);
    if (st != GLM53_OK) {
        free(be);
        free(impl);
        return st;
    }
    pthread_mutex_init(&impl->kept_lock, NULL);
#if defined(__x86_64__)
    __builtin_cpu_init();
    impl->use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    impl->use_avx512 = impl->use_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#endif
    if (isa && strcmp(isa, "avx2") == 0) impl->use_avx512 = false;
    if (isa && strcmp(isa, "baseline") == 0) impl->use_avx2 = impl->use_avx512 = false;
    for (int c = 0; c < 256; c++) impl->fp8_table[c] = glm53_fp8_e4m3_to_f32((uint8_t)c);

    be->ops = &cpu_ops;
    be->device = GLM53_DEVICE_CPU;
    be->act_dtype = GLM53_F32;
    be->impl = impl;
    *out = be;
    return GLM53_OK;
}
