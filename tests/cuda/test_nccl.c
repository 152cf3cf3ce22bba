/*
 * test_nccl.c - the NCCL communicator on real GPUs: the modes of tests/c/parallel_modes.h (prefill, decode,
 * chunked, batch, mtp) on NCCL ranks against the same fixture on one GPU without a communicator.
 *
 *     test_nccl            (from the repository root; needs libnccl.so.2, or $GLM53_NCCL_LIBRARY)
 *
 * Always: one rank with the NCCL communicator forced, in F32 and BF16 activations: every collective point is an
 * ncclAllReduce (of one rank), so the path is exercised on a single GPU; the logits must equal the plain run's
 * within 1e-5 relative (F32) or 1e-3 (BF16; in practice both are bit-identical, an all-reduce of one rank copies).
 * With 2 or more GPUs also TP 2, EP 2 (and with 4, TP 4, EP 4, TP 2 x EP 2) in F32, within 1e-5 of one GPU
 * (the CPU communicator's bound; the order of the partial sums is NCCL's). First of all, the plain F32 CUDA run
 * against the CPU backend's (row "cuda f32 vs cpu", within 1e-5): the reference itself is right.
 * Prints a table; exit 0 when all pass.
 */
#include "parallel_modes.h"

#include "kernels/comm.h"

#include <cuda_runtime.h>

typedef struct {
    int32_t tp, ep, act;
    const char *name;
} layout;

static const layout LAYOUTS[] = {
    {1, 1, GLM53_F32, "nccl x1 f32"}, {1, 1, GLM53_BF16, "nccl x1 bf16"}, {2, 1, GLM53_F32, "tp2 f32"},
    {1, 2, GLM53_F32, "ep2 f32"},     {4, 1, GLM53_F32, "tp4 f32"},       {1, 4, GLM53_F32, "ep4 f32"},
    {2, 2, GLM53_F32, "tp2 ep2 f32"},
};

static glm53_model_params cuda_params(int32_t act) {
    glm53_model_params p = glm53_model_default_params();
    p.device = GLM53_DEVICE_CUDA;
    p.activation_dtype = act;
    return p;
}

int main(void) {
    int32_t version = 0;
    glm53_status probe = glm53_comm_nccl_probe(&version);
    CHECK(probe == GLM53_OK, "libnccl: %s", glm53_last_error());
    if (probe != GLM53_OK) return test_finish("test_nccl");
    int gpus = 0;
    cudaGetDeviceCount(&gpus);
    printf("NCCL %d, %d GPU(s)\n\n", version, gpus);
    print_mode_header(13);
    for (size_t f = 0; f < sizeof FIXTURES / sizeof FIXTURES[0]; f++) {
        TEST_CASE(FIXTURES[f]) {
            fixture fx;
            if (!fixture_open(FIXTURES[f], &fx)) continue;
            floats want[2][MODES];   /* one GPU, no communicator: [0] F32, [1] BF16 */
            bool have[2] = {false, false};
            for (int a = 0; a < 2; a++) {
                glm53_model_params p = cuda_params(a == 0 ? GLM53_F32 : GLM53_BF16);
                glm53_model *m = load_with(&fx, p, 0), *mc = load_with(&fx, p, CHUNK_PASS_ROWS);
                if (m && mc) {
                    run_modes(m, mc, &fx, want[a]);
                    have[a] = true;
                }
                glm53_model_free(m);
                glm53_model_free(mc);
            }
            if (have[0]) {
                glm53_model_params p = glm53_model_default_params();
                glm53_model *m = load_with(&fx, p, 0), *mc = load_with(&fx, p, CHUNK_PASS_ROWS);
                if (m && mc) {
                    floats cpu[MODES];
                    run_modes(m, mc, &fx, cpu);
                    printf("%-18s %-13s", FIXTURES[f], "cuda f32/cpu");
                    for (int k = 0; k < MODES; k++) {
                        if (cpu[k].n == 0) {
                            printf(" %10s", "-");
                            continue;
                        }
                        double rel = want[0][k].n == cpu[k].n ? rel_diff(&want[0][k], &cpu[k]) : INFINITY;
                        printf(" %10.2e", rel);
                        CHECK(rel <= 1e-5, "%s %s: CUDA F32 %.3e relative from the CPU's", FIXTURES[f],
                              MODE_NAMES[k], rel);
                        free(cpu[k].v);
                    }
                    printf("\n");
                }
                glm53_model_free(m);
                glm53_model_free(mc);
            }
            for (size_t l = 0; l < sizeof LAYOUTS / sizeof LAYOUTS[0]; l++) {
                const layout *L = &LAYOUTS[l];
                int bf16 = L->act == GLM53_BF16;
                if (L->tp * L->ep > gpus || !have[bf16]) continue;
                glm53_model_params p = cuda_params(L->act);
                p.tp = L->tp;
                p.ep = L->ep;
                p.communicator = GLM53_COMMUNICATOR_NCCL;
                glm53_model *m = NULL;
                if (glm53_model_load(fx.dir, &p, &m) != GLM53_OK) {
                    /* a layout the fixture does not split into: refused at load, which test_parallel checks */
                    printf("%-18s %-13s %10s  (%s)\n", FIXTURES[f], L->name, "refused", glm53_last_error());
                    continue;
                }
                glm53_model *mc = load_with(&fx, p, CHUNK_PASS_ROWS);
                if (mc) {
                    floats got[MODES];
                    run_modes(m, mc, &fx, got);
                    double tol = bf16 ? 1e-3 : 1e-5;
                    printf("%-18s %-13s", FIXTURES[f], L->name);
                    for (int k = 0; k < MODES; k++) {
                        if (want[bf16][k].n == 0) {
                            printf(" %10s", "-");
                            continue;
                        }
                        double rel = got[k].n == want[bf16][k].n ? rel_diff(&got[k], &want[bf16][k]) : INFINITY;
                        printf(" %10.2e", rel);
                        CHECK(rel <= tol, "%s %s %s: %.3e relative from one GPU's", FIXTURES[f], L->name,
                              MODE_NAMES[k], rel);
                    }
                    printf("\n");
                    for (int k = 0; k < MODES; k++) free(got[k].v);
                }
                glm53_model_free(m);
                glm53_model_free(mc);
            }
            for (int a = 0; a < 2; a++)
                for (int k = 0; have[a] && k < MODES; k++) free(want[a][k].v);
        }
    }
    return test_finish("test_nccl");
}
