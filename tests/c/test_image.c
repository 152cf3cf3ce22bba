/*
 * test_image.c - image and video preprocessing (core/image.c): what the reference fixes exactly, and bad input.
 *
 * Exact behaviour checked without the reference fixtures (tests/lua/vision_spec.lua compares with transformers):
 *   - an aligned image is not resized: every pixel row value is (x - 255 mean) / (255 std) in F32 of its source
 *     pixel, at the position the merge-block order and (channel, frame, y, x) inside a row put it, both frames
 *     equal; padding is zero pixels, i.e. -mean / std;
 *   - grids: the header-only query equals the preprocess result; budgets shrink and grow images as smart_resize;
 *   - video frame sampling and timestamps for a 9-frame 4 fps list (frames 0, 2, 4, 6: t = 2, 0 s and 1 s).
 * Bad input, each a clear error and never a crash (this suite also runs under ASan + UBSan, label "asan"):
 * empty data, unknown formats, PNG / JPEG / BMP / GIF truncated at many lengths, zero-size and huge headers
 * (decompression bombs), a GIF with too many frames, frames of different sizes, missing fps, small buffers.
 */
#include "test_util.h"

#include "core/base/base.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBIW_ASSERT(x) ((void)0)
#include <stb/stb_image_write.h>

#include <string.h>

typedef struct {
    unsigned char *data;
    size_t n, cap;
} buf;

static void buf_write(void *ctx, void *data, int size) {
    buf *b = ctx;
    if (b->n + (size_t)size > b->cap) {
        b->cap = (b->n + (size_t)size) * 2;
        b->data = realloc(b->data, b->cap);
    }
    memcpy(b->data + b->n, data, (size_t)size);
    b->n += (size_t)size;
}

static unsigned char *pattern(int w, int h, int seed) {
    unsigned char *p = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++) p[i] = (unsigned char)((i * 7 + seed * 13 + (i / 3) % w * 5) & 255);
    return p;
}

/* PNG ('p') or BMP ('b') of the test pattern. */
static buf encode(char kind, int w, int h, int seed) {
    buf b = {0};
    unsigned char *p = pattern(w, h, seed);
    if (kind == 'p') stbi_write_png_to_func(buf_write, &b, w, h, 3, p, w * 3);
    else stbi_write_bmp_to_func(buf_write, &b, w, h, 3, p);
    free(p);
    return b;
}

/* A real JPEG (70 x 90, from the fixture generator): the fuzz seed, after its two control bytes. stb's JPEG
 * writer is not used: UBSan flags its bit packing. */
static buf read_jpeg_seed(void) {
    buf b = {0};
    FILE *f = fopen("tests/fuzz/seeds/image/0_photo.jpg", "rb");
    if (!f) return b;
    unsigned char tmp[4096];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) buf_write(&b, tmp, (int)k);
    fclose(f);
    if (b.n >= 2) {
        memmove(b.data, b.data + 2, b.n - 2);
        b.n -= 2;
    }
    return b;
}

/* A 2-frame 2x2 GIF89a (global palette of 4 colours, 100 ms per frame), written by hand. */
static const unsigned char GIF2[] = {
    'G', 'I', 'F', '8', '9', 'a', 2, 0, 2, 0, 0x81, 0, 0,            /* screen 2x2, global table of 4 */
    0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255,                         /* black red green blue */
    0x21, 0xF9, 4, 0, 10, 0, 0, 0,                                    /* GCE: 10 cs */
    0x2C, 0, 0, 0, 0, 2, 0, 2, 0, 0, 2, 3, 0x84, 0x1D, 0x05, 0,       /* frame 1 */
    0x21, 0xF9, 4, 0, 10, 0, 0, 0,
    0x2C, 0, 0, 0, 0, 2, 0, 2, 0, 0, 2, 3, 0x84, 0x1D, 0x05, 0,       /* frame 2 */
    0x3B};

static float norm_value(unsigned char v, int c) {
    static const double mean[3] = {0.48145466, 0.4578275, 0.40821073}, std[3] = {0.26862954, 0.26130258, 0.27577711};
    volatile float m = (float)mean[c] * 255.0f, s = (float)std[c] * 255.0f;
    volatile float d = (float)v - m;
    return d / s;
}

static void test_exact_aligned(void) {
    /* 56 x 84 is aligned but below the default 16-token minimum; min_tokens 4 keeps it as is. */
    const int w = 84, h = 56;
    buf b = encode('p', w, h, 3);
    unsigned char *src = pattern(w, h, 3);
    glm53_image_params p = glm53_image_default_params();
    p.min_tokens = 4;
    int32_t grid[3];
    int64_t n = 0;
    CHECK(glm53_image_preprocess(b.data, b.n, &p, NULL, 0, grid, &n) == GLM53_OK, "%s", glm53_last_error());
    CHECK(grid[0] == 1 && grid[1] == 4 && grid[2] == 6 && n == 24, "grid %d %d %d, %lld rows", grid[0], grid[1],
          grid[2], (long long)n);
    float *px = malloc((size_t)n * 1176 * sizeof *px);
    CHECK(glm53_image_preprocess(b.data, b.n, &p, px, n, grid, &n) == GLM53_OK, "%s", glm53_last_error());
    int bad = 0;
    for (int64_t r = 0; r < n; r++) {
        /* row r: block r / 4 in row-major order over 2 x 3 blocks, then (r % 4) row-major in the block */
        int blk = (int)(r / 4), in = (int)(r % 4), prow = (blk / 3) * 2 + in / 2, pcol = (blk % 3) * 2 + in % 2;
        for (int c = 0; c < 3; c++)
            for (int t = 0; t < 2; t++)
                for (int y = 0; y < 14; y++)
                    for (int x = 0; x < 14; x++) {
                        float got = px[r * 1176 + ((c * 2 + t) * 14 + y) * 14 + x];
                        float want = norm_value(src[((prow * 14 + y) * w + pcol * 14 + x) * 3 + c], c);
                        bad += memcmp(&got, &want, 4) != 0;
                    }
    }
    CHECK(bad == 0, "%d of %lld values differ from the exact normalised source pixel", bad, (long long)n * 1176);
    free(px);
    free(src);
    free(b.data);
}

static void test_padding_and_budgets(void) {
    glm53_image_params p = glm53_image_default_params();
    int32_t grid[3], grid2[3];
    int64_t n;
    /* 100 x 130 (above the minimum): no resize, padded to 112 x 140. The last column of patches is padding. */
    buf b = encode('p', 130, 100, 5);
    CHECK(glm53_image_grid(b.data, b.n, &p, grid) == GLM53_OK, "%s", glm53_last_error());
    CHECK(grid[1] == 8 && grid[2] == 10, "grid %d x %d", grid[1], grid[2]);
    CHECK(glm53_image_preprocess(b.data, b.n, &p, NULL, 0, grid2, &n) == GLM53_OK && !memcmp(grid, grid2, 12),
          "grid query and preprocess disagree");
    float *px = malloc((size_t)n * 1176 * sizeof *px);
    CHECK(glm53_image_preprocess(b.data, b.n, &p, px, n, grid, &n) == GLM53_OK, "%s", glm53_last_error());
    /* block row 0, block col 4, patch (0, 1) = patch column 9 = x 126..139: x >= 130 is padding */
    int64_t r = 4 * 4 + 1;
    CHECK(px[r * 1176 + 13] == norm_value(0, 0), "padding pixel is %g, not %g", px[r * 1176 + 13], norm_value(0, 0));
    CHECK(glm53_image_preprocess(b.data, b.n, &p, px, n - 1, grid, &n) == GLM53_ERR_OUT_OF_RANGE,
          "a short buffer was accepted");
    free(px);
    /* A large budget-exceeding image shrinks into max_tokens; a tiny one grows to min_tokens. */
    p.max_tokens = 12;
    p.min_tokens = 4;
    CHECK(glm53_image_grid(b.data, b.n, &p, grid) == GLM53_OK, "%s", glm53_last_error());
    CHECK(grid[1] * grid[2] / 4 <= 12 && grid[1] * grid[2] / 4 >= 4, "shrunk grid %d x %d", grid[1], grid[2]);
    free(b.data);
    p = glm53_image_default_params();
    b = encode('p', 3, 2, 1);
    CHECK(glm53_image_grid(b.data, b.n, &p, grid) == GLM53_OK && grid[1] * grid[2] / 4 >= 16, "tiny grid %d x %d",
          grid[1], grid[2]);
    px = malloc((size_t)grid[1] * grid[2] * 1176 * sizeof *px);
    CHECK(glm53_image_preprocess(b.data, b.n, &p, px, grid[1] * grid[2], grid, &n) == GLM53_OK, "%s",
          glm53_last_error());
    free(px);
    free(b.data);
    p.max_tokens = 0;
    b = encode('p', 8, 8, 1);
    CHECK(glm53_image_grid(b.data, b.n, &p, grid) == GLM53_ERR_INVALID_ARG, "max_tokens 0 accepted");
    free(b.data);
}

static void test_video(void) {
    glm53_video_params vp = glm53_video_default_params();
    const void *data[9];
    size_t len[9];
    buf frames[9];
    for (int i = 0; i < 9; i++) {
        frames[i] = encode('p', 90, 70, i);
        data[i] = frames[i].data;
        len[i] = frames[i].n;
    }
    int32_t grid[3];
    int64_t n;
    double ts[8];
    CHECK(glm53_video_preprocess(data, len, 9, &vp, NULL, 0, grid, ts, 8, &n) == GLM53_ERR_INVALID_ARG,
          "frames without fps accepted");
    vp.source_fps = 4;
    CHECK(glm53_video_preprocess(data, len, 9, &vp, NULL, 0, grid, ts, 8, &n) == GLM53_OK, "%s", glm53_last_error());
    CHECK(grid[0] == 2 && grid[1] == 6 && grid[2] == 8 && n == 96, "grid %d %d %d", grid[0], grid[1], grid[2]);
    CHECK(ts[0] == 0.0 && ts[1] == 1.0, "timestamps %g %g", ts[0], ts[1]);
    float *px = malloc((size_t)n * 1176 * sizeof *px);
    CHECK(glm53_video_preprocess(data, len, 9, &vp, px, n, grid, ts, 8, &n) == GLM53_OK, "%s", glm53_last_error());
    /* Group 1 frame 0 is input frame 4: its first pixel, channel 0, sits at row 48 (group 1), value 0. */
    unsigned char *f4 = pattern(90, 70, 4);
    CHECK(px[48 * 1176] == norm_value(f4[0], 0), "frame sampling / grouping: %g vs %g", px[48 * 1176],
          norm_value(f4[0], 0));
    free(f4);
    CHECK(glm53_video_preprocess(data, len, 9, &vp, px, n, grid, ts, 1, &n) == GLM53_ERR_OUT_OF_RANGE,
          "short timestamps buffer accepted");
    free(px);
    /* Frames of different sizes */
    buf other = encode('p', 50, 70, 1);
    data[3] = other.data;
    len[3] = other.n;
    CHECK(glm53_video_preprocess(data, len, 9, &vp, NULL, 0, grid, NULL, 0, &n) == GLM53_ERR_FORMAT,
          "mixed frame sizes accepted");
    free(other.data);
    for (int i = 0; i < 9; i++) free(frames[i].data);
    /* An animated GIF: its own frame rate (100 ms: 10 fps); 2 frames of 0.2 s keep one frame, twice. */
    const void *g = GIF2;
    size_t glen = sizeof GIF2;
    vp.source_fps = 0;
    CHECK(glm53_video_preprocess(&g, &glen, 1, &vp, NULL, 0, grid, ts, 8, &n) == GLM53_ERR_FORMAT,
          "a 0.2 s GIF that sampling leaves empty was accepted");
    vp.source_fps = 1;
    CHECK(glm53_video_preprocess(&g, &glen, 1, &vp, NULL, 0, grid, ts, 8, &n) == GLM53_OK, "%s", glm53_last_error());
    CHECK(grid[0] == 1, "GIF video groups %d", grid[0]);
    vp.max_total_pixels = 7;
    CHECK(glm53_video_preprocess(&g, &glen, 1, &vp, NULL, 0, grid, ts, 8, &n) == GLM53_ERR_UNSUPPORTED,
          "a GIF over the frame pixel limit accepted");
}

/* Every prefix of a valid file must fail cleanly, never crash; the only prefixes allowed to decode are those
 * listed in ok_prefixes (a PNG without its IEND chunk holds the whole image; a GIF cut at a block boundary is a
 * complete GIF with fewer frames). */
static void truncations(const char *what, const unsigned char *data, size_t n, bool last_ok, const size_t *ok_prefixes,
                        int n_ok) {
    glm53_image_params p = glm53_image_default_params();
    int32_t grid[3];
    int64_t rows;
    int fails = 0, accepted = 0;
    float *px = malloc(256 * 1176 * sizeof *px);
    for (size_t k = 0; k < n; k++) {
        glm53_status st = glm53_image_preprocess(data, k, &p, px, 256, grid, &rows);
        bool allowed = false;
        for (int i = 0; i < n_ok; i++) allowed |= ok_prefixes[i] == k;
        if (st == GLM53_OK) accepted += !allowed;
        else {
            fails++;
            CHECK(glm53_last_error()[0] != '\0', "%s cut at %zu: empty error message", what, k);
        }
    }
    glm53_status full = glm53_image_preprocess(data, n, &p, px, 256, grid, &rows);
    CHECK((full == GLM53_OK) == last_ok, "%s: the whole file gives %s", what, glm53_status_name(full));
    CHECK(accepted == 0, "%s: %d truncated prefixes were accepted", what, accepted);
    free(px);
}

static void test_bad_input(void) {
    glm53_image_params p = glm53_image_default_params();
    int32_t grid[3];
    int64_t n;
    CHECK(glm53_image_preprocess(NULL, 0, &p, NULL, 0, grid, &n) == GLM53_ERR_FORMAT &&
          strstr(glm53_last_error(), "0 bytes"), "empty: %s", glm53_last_error());
    const char text[] = "hello, this is not an image";
    CHECK(glm53_image_preprocess(text, sizeof text, &p, NULL, 0, grid, &n) == GLM53_ERR_UNSUPPORTED &&
          strstr(glm53_last_error(), "not a PNG, JPEG, BMP or GIF"), "text: %s", glm53_last_error());
    const unsigned char webp[] = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
    CHECK(glm53_image_preprocess(webp, sizeof webp, &p, NULL, 0, grid, &n) == GLM53_ERR_UNSUPPORTED, "webp");

    buf png = encode('p', 33, 20, 2), jpg = read_jpeg_seed(), bmp = encode('b', 33, 20, 2);
    CHECK(jpg.n > 100, "tests/fuzz/seeds/image/0_photo.jpg is missing (run from the source root)");
    const size_t png_ok[] = {png.n - 12, png.n - 11, png.n - 10, png.n - 9, png.n - 8, png.n - 7, png.n - 6,
                             png.n - 5, png.n - 4, png.n - 3, png.n - 2, png.n - 1};
    const size_t gif_ok[] = {49, 57, 73};   /* after frame 1, after the second frame's extension, no trailer */
    truncations("PNG", png.data, png.n, true, png_ok, 12);
    truncations("JPEG", jpg.data, jpg.n, true, NULL, 0);
    truncations("BMP", bmp.data, bmp.n, true, NULL, 0);
    truncations("GIF", GIF2, sizeof GIF2, true, gif_ok, 3);

    /* Zero-size and huge headers (IHDR width/height patched; the CRC is not checked by the decoder). */
    unsigned char *m = malloc(png.n);
    memcpy(m, png.data, png.n);
    memset(m + 16, 0, 4);
    CHECK(glm53_image_preprocess(m, png.n, &p, NULL, 0, grid, &n) == GLM53_ERR_FORMAT, "zero-width PNG: %s",
          glm53_status_name(glm53_image_preprocess(m, png.n, &p, NULL, 0, grid, &n)));
    memcpy(m, png.data, png.n);
    const unsigned char big[8] = {0, 0, 0x9c, 0x40, 0, 0, 0x9c, 0x40};   /* 40000 x 40000 */
    memcpy(m + 16, big, 8);
    glm53_status st = glm53_image_preprocess(m, png.n, &p, NULL, 0, grid, &n);
    CHECK(st == GLM53_ERR_UNSUPPORTED && strstr(glm53_last_error(), "over the limit"), "40000^2 PNG: %s %s",
          glm53_status_name(st), glm53_last_error());
    /* Garbage inside the compressed data */
    memcpy(m, png.data, png.n);
    for (size_t i = 41; i < png.n - 12; i++) m[i] ^= 0x5a;
    st = glm53_image_preprocess(m, png.n, &p, NULL, 0, grid, &n);
    float *px = malloc(256 * 1176 * sizeof *px);
    st = glm53_image_preprocess(m, png.n, &p, px, 256, grid, &n);
    CHECK(st == GLM53_ERR_FORMAT, "corrupt PNG data: %s", glm53_status_name(st));
    free(px);
    free(m);
    /* BMP claiming more rows than the file holds */
    m = malloc(bmp.n);
    memcpy(m, bmp.data, bmp.n);
    m[22] = 200;
    CHECK(glm53_image_preprocess(m, bmp.n, &p, NULL, 0, grid, &n) == GLM53_ERR_FORMAT &&
          strstr(glm53_last_error(), "truncated"), "tall BMP: %s", glm53_last_error());
    free(m);
    /* Pixel limit as a parameter */
    p.max_pixels = 100;
    CHECK(glm53_image_preprocess(png.data, png.n, &p, NULL, 0, grid, &n) == GLM53_ERR_UNSUPPORTED, "max_pixels");
    free(png.data);
    free(jpg.data);
    free(bmp.data);
}

int main(void) {
    TEST_CASE("exact values of an aligned image") test_exact_aligned();
    TEST_CASE("padding and token budgets") test_padding_and_budgets();
    TEST_CASE("video sampling and grouping") test_video();
    TEST_CASE("bad input") test_bad_input();
    return test_finish("test_image");
}
