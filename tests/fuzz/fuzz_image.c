/*
 * fuzz_image.c - libFuzzer target: image and video decoding + preprocessing (core/image.c) on arbitrary bytes.
 *
 * The first byte picks the entry point: the header-only grid query and a full image preprocess, a video from the
 * rest as one (GIF) input, or a video of two frames (the rest split in half). Limits are small so that a claimed
 * size turns into a fast error rather than a slow decode. On success the outputs must be consistent (grid and
 * row count agree, every value finite and inside the range normalisation can produce); a violation traps.
 * Built and run by tests/fuzz/run.sh (target "image").
 */
#include "core/base/base.h"

#include <stdlib.h>

/* (0 - 255 * mean) / (255 * std) .. (255 - 255 * mean) / (255 * std) over the CLIP constants, with margin. */
static void check_pixels(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!(p[i] > -2.0f && p[i] < 2.2f)) __builtin_trap();
}

static void check_grid(const int32_t g[3], int64_t n_patches) {
    if (g[0] < 1 || g[1] < 2 || g[2] < 2 || g[1] % 2 || g[2] % 2) __builtin_trap();
    if ((int64_t)g[0] * g[1] * g[2] != n_patches) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const uint8_t mode = data[0] % 3, knob = data[1];
    data += 2;
    size -= 2;
    glm53_image_params ip = glm53_image_default_params();
    ip.max_pixels = 1 << 20;
    ip.min_tokens = knob % 8;
    ip.max_tokens = 16 + knob % 64;
    int32_t grid[3], grid2[3];
    int64_t n = 0;
    if (mode == 0) {
        glm53_status gs = glm53_image_grid(data, size, &ip, grid);
        if (glm53_image_preprocess(data, size, &ip, NULL, 0, grid2, &n) != gs) __builtin_trap();
        if (gs != GLM53_OK) return 0;
        if (memcmp(grid, grid2, sizeof grid)) __builtin_trap();
        check_grid(grid, n);
        float *px = malloc((size_t)n * 1176 * sizeof *px);
        if (!px) return 0;
        if (glm53_image_preprocess(data, size, &ip, px, n, grid2, &n) == GLM53_OK) {
            check_grid(grid2, n);
            check_pixels(px, n * 1176);
        }
        free(px);
        return 0;
    }
    glm53_video_params vp = glm53_video_default_params();
    vp.image = ip;
    vp.image.max_tokens = 64 + knob;
    vp.max_total_pixels = 1 << 22;
    vp.max_frames = 64;
    vp.source_fps = mode == 2 ? 1 + knob % 30 : 0;
    const void *ptrs[2] = {data, data + size / 2};
    size_t lens[2] = {mode == 2 ? size / 2 : size, size - size / 2};
    int32_t n_in = mode == 2 ? 2 : 1;
    double ts[64];
    if (glm53_video_preprocess(ptrs, lens, n_in, &vp, NULL, 0, grid, ts, 64, &n) != GLM53_OK) return 0;
    check_grid(grid, n);
    float *px = malloc((size_t)n * 1176 * sizeof *px);
    if (!px) return 0;
    if (glm53_video_preprocess(ptrs, lens, n_in, &vp, px, n, grid2, ts, 64, &n) == GLM53_OK) {
        check_grid(grid2, n);
        check_pixels(px, n * 1176);
        for (int32_t g = 1; g < grid2[0]; g++)
            if (!(ts[g] >= ts[g - 1])) __builtin_trap();
    }
    free(px);
    return 0;
}
