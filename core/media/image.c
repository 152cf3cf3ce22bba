/*
 * image.c - image and video preprocessing for the vision tower, equal to transformers' Glm5NextImageProcessor and
 * Glm5NextVideoProcessor (the TorchvisionBackend processors transformers picks by default).
 *
 *   bytes --decode (stb_image: PNG, JPEG, BMP, GIF)--> RGB uint8 [h, w, 3]
 *         --smart_resize: the canvas, multiples of 28 inside the token budget; the content keeps the aspect ratio
 *         --resize (torch's antialiased bicubic on uint8) to the content size, only if it differs
 *         --zero padding right/bottom to the canvas (uint8)
 *         --(x - 255 mean) / (255 std) in F32, patchify--> pixel rows [patches, 3 * 2 * 14 * 14]
 *
 * Why these exact steps: the processor runs on uint8 tensors on the CPU. torchvision's resize(BICUBIC,
 * antialias=True) takes torch's native uint8 path there (_upsample_bicubic2d_aa): separable, horizontal pass
 * first, each pass rounding to uint8, with the PIL-style cubic kernel (a = -0.5, support 2 * max(scale, 1)) and
 * weights in int16 fixed point whose precision is chosen from the largest weight. resize_axis() below is that
 * algorithm; the PIL backend (Glm5NextImageProcessorPil) would differ in the fixed-point precision and is not what
 * transformers uses. Rescale and normalise are fused in the reference into one F32 normalise with mean * 255 and
 * std * 255 (each product rounded to F32), x - mean then / std, each rounded: normalise_value() does the same,
 * so pixel rows equal the reference bit for bit whenever the decoded and resized uint8 pixels do.
 *
 * Input hygiene: the format is sniffed from magic bytes (nothing else is handed to stb); dimensions come from
 * the header and are checked against max_pixels before stb parses anything (decompression bombs); GIFs are
 * walked block by block first (frame count and truncation) because stb would allocate every frame; BMP and JPEG
 * truncation is detected here because stb pads missing data with zeros instead of failing; and JPEG segments are
 * walked to reject what the packaged stb_image (2.27) would mishandle (Huffman tables over 256 codes, scans using
 * undefined tables: both found by tests/fuzz/fuzz_image.c, both fixed upstream after 2.27).
 */
#include "core/base/base.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STB_IMAGE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* OpenAI CLIP mean and std (transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD). */
static const double CLIP_MEAN[3] = {0.48145466, 0.4578275, 0.40821073};
static const double CLIP_STD[3] = {0.26862954, 0.26130258, 0.27577711};

glm53_image_params glm53_image_default_params(void) {
    glm53_image_params p = {0};
    p.min_tokens = 16;
    p.max_tokens = 8000;
    p.patch_size = 14;
    p.merge_size = 2;
    p.temporal_patch_size = 2;
    p.max_pixels = 89478485;
    return p;
}

glm53_video_params glm53_video_default_params(void) {
    glm53_video_params p = {0};
    p.image = glm53_image_default_params();
    p.image.max_tokens = 240000;
    p.source_fps = 0.0;
    p.sample_fps = 2.0;
    p.max_frames = 2048;
    p.max_total_pixels = (int64_t)1 << 30;
    return p;
}

static glm53_status check_params(const glm53_image_params *p) {
    if (p->patch_size < 1 || p->patch_size > 64 || p->merge_size < 1 || p->merge_size > 8 ||
        p->temporal_patch_size < 1 || p->temporal_patch_size > 8)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "image params: patch %d, merge %d, temporal %d out of range",
                          p->patch_size, p->merge_size, p->temporal_patch_size);
    if (p->min_tokens < 0 || p->max_tokens < 1 || p->max_tokens > (1 << 24) || p->min_tokens > (1 << 24))
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "image params: token budget %d..%d out of range", p->min_tokens,
                          p->max_tokens);
    if (p->max_pixels < 1) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "image params: max_pixels must be >= 1");
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Format sniffing and header checks
 */
typedef enum { FMT_PNG, FMT_JPEG, FMT_BMP, FMT_GIF } image_format;

static const char *format_name(image_format f) {
    static const char *names[] = {"PNG", "JPEG", "BMP", "GIF"};
    return names[f];
}

static glm53_status sniff(const uint8_t *d, size_t n, image_format *out) {
    if (!d || n == 0) return GLM53_FAIL(GLM53_ERR_FORMAT, "image: no data (0 bytes)");
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) *out = FMT_PNG;
    else if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) *out = FMT_JPEG;
    else if (n >= 2 && d[0] == 'B' && d[1] == 'M') *out = FMT_BMP;
    else if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) *out = FMT_GIF;
    else
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "image: not a PNG, JPEG, BMP or GIF file (%zu bytes starting "
                          "%02x %02x %02x %02x)", n, n > 0 ? d[0] : 0, n > 1 ? d[1] : 0, n > 2 ? d[2] : 0,
                          n > 3 ? d[3] : 0);
    return GLM53_OK;
}

static uint32_t le32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Uncompressed BMPs must hold every pixel row: stb reads past the end as zeros. */
static glm53_status check_bmp(const uint8_t *d, size_t n, int64_t *w_out, int64_t *h_out) {
    if (n < 34) return GLM53_FAIL(GLM53_ERR_FORMAT, "BMP: truncated header (%zu bytes)", n);
    uint32_t off = le32(d + 10), hsize = le32(d + 14);
    if (hsize < 40) return GLM53_OK;   /* OS/2 headers: stb checks those itself */
    int64_t w = (int32_t)le32(d + 18), h = (int32_t)le32(d + 22);
    uint16_t bpp = le16(d + 28);
    uint32_t comp = le32(d + 30);
    if (h < 0) h = -h;
    if (w <= 0 || h <= 0) return GLM53_FAIL(GLM53_ERR_FORMAT, "BMP: bad dimensions %lld x %lld", (long long)w,
                                            (long long)h);
    *w_out = w;
    *h_out = h;
    if (w > (1 << 24) || h > (1 << 24))
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "BMP: dimensions %lld x %lld over 2^24", (long long)w, (long long)h);
    if (comp == 0 || comp == 3) {
        int64_t stride = ((w * bpp + 31) / 32) * 4;
        if ((int64_t)off + stride * h > (int64_t)n)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "BMP: truncated: %lld x %lld at %u bits needs %lld bytes, file has "
                              "%zu", (long long)w, (long long)h, bpp, (long long)off + stride * h, n);
    }
    return GLM53_OK;
}

/* Walks a JPEG's segments up to its end-of-image marker: a file without one is truncated (stb would decode the
 * missing part as grey), and every Huffman table must hold at most 256 codes (stb_image 2.27, the packaged
 * version, writes past its table otherwise; 2.28 added the same check). */
static glm53_status check_jpeg(const uint8_t *d, size_t n, int64_t *w, int64_t *h) {
    size_t i = 2;
    bool defined[2][4] = {{false}};   /* Huffman tables seen so far: [DC, AC][id] */
    for (;;) {
        if (i >= n) return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: truncated (no end-of-image marker in %zu bytes)", n);
        if (d[i] != 0xFF) return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: expected a marker at byte %zu", i);
        while (i < n && d[i] == 0xFF) i++;   /* fill bytes */
        if (i >= n) continue;
        const uint8_t marker = d[i++];
        if (marker == 0xD9) return GLM53_OK;
        if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) continue;   /* no payload */
        if (i + 2 > n) continue;
        const size_t len = (size_t)d[i] << 8 | d[i + 1];
        if (len < 2 || i + len > n)
            return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: segment 0x%02x at byte %zu runs past the end (%zu bytes)",
                              marker, i, len);
        if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC && len >= 7) {
            *h = (int64_t)d[i + 3] << 8 | d[i + 4];   /* start of frame: precision, height, width */
            *w = (int64_t)d[i + 5] << 8 | d[i + 6];
        }
        if (marker == 0xC4)
            for (size_t p = i + 2; p < i + len;) {
                if (p + 17 > i + len) return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: truncated Huffman table");
                size_t codes = 0;
                for (int k = 1; k <= 16; k++) codes += d[p + k];
                if ((d[p] >> 4) < 2 && (d[p] & 15) < 4) defined[d[p] >> 4][d[p] & 15] = true;
                if (codes > 256)
                    return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: Huffman table with %zu codes (at most 256)", codes);
                p += 17 + codes;
                if (p > i + len) return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: Huffman table runs past its segment");
            }
        if (marker == 0xDA && len >= 3) {
            /* A scan may only use tables defined before it: stb 2.27 would read an undefined table's unset limits
             * and index past its arrays. DC tables are used by first DC scans (Ss = 0, Ah = 0), AC tables whenever
             * the scan has AC coefficients (Se > 0). */
            const size_t ns = d[i + 2];
            if (len < 6 + 2 * ns) return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: scan header too short");
            const uint8_t ss = d[i + 3 + 2 * ns], se = d[i + 4 + 2 * ns], ah = d[i + 5 + 2 * ns] >> 4;
            for (size_t c = 0; c < ns; c++) {
                const uint8_t tables = d[i + 4 + 2 * c], dc = tables >> 4, ac = tables & 15;
                if ((ss == 0 && ah == 0 && (dc > 3 || !defined[0][dc])) || (se > 0 && (ac > 3 || !defined[1][ac])))
                    return GLM53_FAIL(GLM53_ERR_FORMAT, "JPEG: a scan uses a Huffman table that is not defined");
            }
        }
        i += len;
        if (marker == 0xDA) {   /* entropy-coded data up to the next marker (0xFF00 is a stuffed byte) */
            while (i + 1 < n && !(d[i] == 0xFF && d[i + 1] != 0 && !(d[i + 1] >= 0xD0 && d[i + 1] <= 0xD7))) i++;
            if (i + 1 >= n) i = n;
        }
    }
}

/* Walks a GIF's blocks: counts its frames and fails on truncation or a malformed block. */
static glm53_status gif_scan(const uint8_t *d, size_t n, int64_t *frames) {
    *frames = 0;
    if (n < 13) return GLM53_FAIL(GLM53_ERR_FORMAT, "GIF: truncated header (%zu bytes)", n);
    size_t i = 13;
    if (d[10] & 0x80) i += 3u * (2u << (d[10] & 7));
#define GIF_NEED(k)                                                                                          \
    do {                                                                                                     \
        if (i + (k) > n) return GLM53_FAIL(GLM53_ERR_FORMAT, "GIF: truncated at byte %zu of %zu", i, n);     \
    } while (0)
    for (;;) {
        if (i >= n) break;   /* no trailer: tolerated when the last block was complete */
        uint8_t b = d[i++];
        if (b == 0x3B) break;
        if (b == 0x2C) {
            GIF_NEED(9);
            uint8_t flags = d[i + 8];
            i += 9;
            if (flags & 0x80) i += 3u * (2u << (flags & 7));
            GIF_NEED(1);
            i++;   /* LZW minimum code size */
            (*frames)++;
        } else if (b == 0x21) {
            GIF_NEED(1);
            i++;   /* extension label */
        } else {
            return GLM53_FAIL(GLM53_ERR_FORMAT, "GIF: unknown block 0x%02x at byte %zu", b, i - 1);
        }
        for (;;) {   /* data sub-blocks up to the zero-length terminator */
            GIF_NEED(1);
            uint8_t len = d[i++];
            if (len == 0) break;
            GIF_NEED(len);
            i += len;
        }
    }
#undef GIF_NEED
    if (*frames == 0) return GLM53_FAIL(GLM53_ERR_FORMAT, "GIF: no image in the file");
    return GLM53_OK;
}

/* Width and height from the header, checked against the pixel limit, after the structural checks above (they
 * run first because stb's own header parsing is among what they guard); no pixel is decoded. *frames is the
 * frame count of a GIF, 1 otherwise. */
static glm53_status probe(const uint8_t *d, size_t n, int64_t max_pixels, image_format *fmt, int *w, int *h,
                          int64_t *frames) {
    GLM53_TRY(sniff(d, n, fmt));
    if (n > INT_MAX) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "image: %zu bytes is more than 2 GiB", n);
    *frames = 1;
    int64_t hw = -1, hh = -1;   /* dimensions from our own reading of the header, where we have one */
    if (*fmt == FMT_PNG && n >= 24 && !memcmp(d + 12, "IHDR", 4)) {
        hw = (int64_t)d[16] << 24 | d[17] << 16 | d[18] << 8 | d[19];
        hh = (int64_t)d[20] << 24 | d[21] << 16 | d[22] << 8 | d[23];
    }
    if (*fmt == FMT_GIF && n >= 10) {
        hw = le16(d + 6);
        hh = le16(d + 8);
    }
    if (*fmt == FMT_BMP) GLM53_TRY(check_bmp(d, n, &hw, &hh));
    if (*fmt == FMT_JPEG) GLM53_TRY(check_jpeg(d, n, &hw, &hh));
    if (hw == 0 || hh == 0)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: zero-size image (%lld x %lld)", format_name(*fmt), (long long)hw,
                          (long long)hh);
    /* Before stb looks at it: its own size limits fail with a vaguer message. */
    if (hw > 0 && hh > 0 && hw > max_pixels / hh)   /* hw * hh > max_pixels, without overflowing */
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %lld x %lld pixels is over the limit of %lld "
                          "(glm53_image_params.max_pixels; a decompression-bomb guard)", format_name(*fmt),
                          (long long)hw, (long long)hh, (long long)max_pixels);
    if (*fmt == FMT_GIF) GLM53_TRY(gif_scan(d, n, frames));
    int comp;
    if (!stbi_info_from_memory(d, (int)n, w, h, &comp))
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: corrupt header (%s)", format_name(*fmt), stbi_failure_reason());
    if (*w <= 0 || *h <= 0)
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: zero-size image (%d x %d)", format_name(*fmt), *w, *h);
    if ((int64_t)*w * *h > max_pixels)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "%s: %d x %d = %lld pixels is over the limit of %lld "
                          "(glm53_image_params.max_pixels; a decompression-bomb guard)", format_name(*fmt), *w, *h,
                          (long long)*w * *h, (long long)max_pixels);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Decoding
 */
typedef struct {
    int      w, h;
    uint8_t *rgb;      /* [h, w, 3], malloc'd (stb's allocator is malloc) */
} rgb_image;

/* One image (the first frame of a GIF) as RGB: grey is replicated, alpha dropped (PIL's convert("RGB")). */
static glm53_status decode_image(const uint8_t *d, size_t n, int64_t max_pixels, rgb_image *out) {
    image_format fmt;
    int w, h, comp;
    int64_t frames;
    out->rgb = NULL;
    GLM53_TRY(probe(d, n, max_pixels, &fmt, &w, &h, &frames));
    uint8_t *rgb = stbi_load_from_memory(d, (int)n, &out->w, &out->h, &comp, 3);
    if (!rgb) return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: cannot decode (%s)", format_name(fmt), stbi_failure_reason());
    if (out->w != w || out->h != h) {
        stbi_image_free(rgb);
        return GLM53_FAIL(GLM53_ERR_FORMAT, "%s: decoded %d x %d, header said %d x %d", format_name(fmt), out->w,
                          out->h, w, h);
    }
    out->rgb = rgb;
    return GLM53_OK;
}

/* Every frame of a GIF, composited as the format says (stb), as RGB, and the frame delays in milliseconds. */
static glm53_status decode_gif_frames(const uint8_t *d, size_t n, int64_t max_pixels, int64_t max_total,
                                      rgb_image **frames_out, int32_t *n_out, double *total_ms) {
    image_format fmt;
    int w, h, comp, layers = 0;
    int64_t frames;
    *frames_out = NULL;
    *n_out = 0;
    GLM53_TRY(probe(d, n, max_pixels, &fmt, &w, &h, &frames));
    if (fmt != FMT_GIF) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "video: a single input must be an animated GIF");
    if (frames * w * h > max_total)
        return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "GIF: %lld frames of %d x %d = %lld pixels is over the limit of "
                          "%lld (glm53_video_params.max_total_pixels)", (long long)frames, w, h,
                          (long long)(frames * w * h), (long long)max_total);
    int *delays = NULL;
    stbi_uc *all = stbi_load_gif_from_memory(d, (int)n, &delays, &w, &h, &layers, &comp, 4);
    if (!all) return GLM53_FAIL(GLM53_ERR_FORMAT, "GIF: cannot decode (%s)", stbi_failure_reason());
    rgb_image *f = calloc((size_t)layers, sizeof *f);
    glm53_status st = f ? GLM53_OK : GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "GIF: no memory for %d frames", layers);
    double ms = 0;
    for (int i = 0; st == GLM53_OK && i < layers; i++) {
        f[i].w = w;
        f[i].h = h;
        f[i].rgb = malloc((size_t)w * h * 3);
        if (!f[i].rgb) {
            st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "GIF: no memory for frame %d", i);
            break;
        }
        const stbi_uc *src = all + (size_t)i * w * h * 4;
        for (size_t p = 0; p < (size_t)w * h; p++) memcpy(f[i].rgb + 3 * p, src + 4 * p, 3);
        ms += delays ? delays[i] : 0;
    }
    stbi_image_free(all);
    stbi_image_free(delays);
    if (st != GLM53_OK) {
        for (int i = 0; f && i < layers; i++) free(f[i].rgb);
        free(f);
        return st;
    }
    *frames_out = f;
    *n_out = layers;
    *total_ms = ms;
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Sizes: the reference's smart_resize and content size, in the same double arithmetic as its Python
 */
static int64_t align_up(int64_t v, int64_t f) { return (v + f - 1) / f * f; }

/* Python's math.ceil(a / b) for positive integers. */
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static glm53_status smart_resize(int64_t num_frames, int64_t height, int64_t width, int64_t temporal, int64_t factor,
                                 int64_t min_tokens, int64_t max_tokens, int64_t *th, int64_t *tw) {
    int64_t per_token = temporal * factor * factor;
    int64_t min_pixels = min_tokens * per_token, max_pixels = max_tokens * per_token;
    /* round(num_frames / temporal): Python rounds half to even */
    double q = (double)num_frames / (double)temporal;
    double r = nearbyint(q);
    int64_t aligned_frames = (int64_t)r * temporal;
    if (aligned_frames < temporal) aligned_frames = temporal;
    int64_t ah = ceil_div(height, factor) * factor, aw = ceil_div(width, factor) * factor;
    int64_t budget = aligned_frames * ah * aw;
    if (budget < min_pixels) {
        double scale = sqrt((double)min_pixels / ((double)num_frames * (double)height * (double)width));
        double sh = ceil((double)height * scale), sw = ceil((double)width * scale);
        ah = align_up(sh < 1 ? 1 : (int64_t)sh, factor);
        aw = align_up(sw < 1 ? 1 : (int64_t)sw, factor);
        budget = aligned_frames * ah * aw;
    }
    if (budget > max_pixels) {
        if (max_pixels < aligned_frames * factor * factor)
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "image: max_tokens %lld is too small for one aligned patch "
                              "of %lld frames", (long long)max_tokens, (long long)aligned_frames);
        int64_t lo = 1, hi = height, bh = factor, bw = factor;
        while (lo <= hi) {
            int64_t ch = (lo + hi) / 2;
            /* math.floor(width * ch / height): the product is exact in a double for any image we accept */
            int64_t cw = (int64_t)floor((double)(width * ch) / (double)height);
            if (cw < 1) cw = 1;
            int64_t cand_h = align_up(ch, factor), cand_w = align_up(cw, factor);
            if (aligned_frames * cand_h * cand_w <= max_pixels) {
                bh = cand_h;
                bw = cand_w;
                lo = ch + 1;
            } else {
                hi = ch - 1;
            }
        }
        ah = bh;
        aw = bw;
    }
    *th = ah;
    *tw = aw;
    return GLM53_OK;
}

typedef struct {
    int64_t canvas_h, canvas_w;    /* the aligned canvas */
    int64_t content_h, content_w;  /* the resized image in its top-left corner */
} layout;

static glm53_status plan_layout(int64_t num_frames, int64_t h, int64_t w, const glm53_image_params *p, layout *L) {
    int64_t factor = (int64_t)p->patch_size * p->merge_size, temporal = p->temporal_patch_size;
    GLM53_TRY(smart_resize(num_frames, h, w, temporal, factor, p->min_tokens, p->max_tokens, &L->canvas_h,
                           &L->canvas_w));
    double scale = fmin((double)L->canvas_h / (double)h, (double)L->canvas_w / (double)w);
    /* Only images under the minimum budget are enlarged; the rest are at most shrunk. */
    if (num_frames * h * w >= temporal * factor * factor * (int64_t)p->min_tokens) scale = fmin(1.0, scale);
    int64_t ch = (int64_t)floor((double)h * scale), cw = (int64_t)floor((double)w * scale);
    L->content_h = ch > L->canvas_h ? L->canvas_h : ch;
    L->content_w = cw > L->canvas_w ? L->canvas_w : cw;
    if (L->content_h < 1) L->content_h = 1;
    if (L->content_w < 1) L->content_w = 1;
    return GLM53_OK;
}

static void grid_of(const layout *L, int64_t groups, const glm53_image_params *p, int32_t grid_thw[3]) {
    grid_thw[0] = (int32_t)groups;
    grid_thw[1] = (int32_t)(L->canvas_h / p->patch_size);
    grid_thw[2] = (int32_t)(L->canvas_w / p->patch_size);
}

/* ------------------------------------------------------------------------------------------------------------
 * Resize: torch's antialiased bicubic on uint8 (aten/src/ATen/native/cpu/UpSampleKernel.cpp, the uint8 path)
 */
/* The cubic kernel with a = -0.5 (PIL's, which torch uses whenever antialias is on), in torch's expression form. */
static double aa_cubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

typedef struct {
    int64_t *xmin, *xsize;   /* [out] first input index and tap count of each output */
    int64_t *offset;         /* [out] start of each output's taps in w */
    int16_t *w;              /* [sum of xsize] fixed-point weights */
    int      precision;      /* fractional bits of w */
} axis_weights;

static void axis_free(axis_weights *a) {
    free(a->xmin);
    free(a->xsize);
    free(a->offset);
    free(a->w);
}

/* Weights of one axis in_size -> out_size, as torch computes them in double and then quantises to int16. */
static glm53_status axis_build(int64_t in_size, int64_t out_size, axis_weights *a) {
    memset(a, 0, sizeof *a);
    const double scale = (double)in_size / (double)out_size;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;   /* interp_size 4, halved, stretched */
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    const int64_t max_taps = (int64_t)ceil(support) * 2 + 1;
    a->xmin = malloc((size_t)out_size * sizeof *a->xmin);
    a->xsize = malloc((size_t)out_size * sizeof *a->xsize);
    a->offset = malloc((size_t)out_size * sizeof *a->offset);
    if (!a->xmin || !a->xsize || !a->offset) goto oom;
    int64_t total = 0;
    for (int64_t i = 0; i < out_size; i++) {
        double center = scale * ((double)i + 0.5);
        int64_t lo = (int64_t)(center - support + 0.5), hi = (int64_t)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        int64_t size = hi - lo;
        if (size < 0) size = 0;
        if (size > max_taps) size = max_taps;
        a->xmin[i] = lo;
        a->xsize[i] = size;
        a->offset[i] = total;
        total += size;
    }
    double *wd = malloc((size_t)(total > 0 ? total : 1) * sizeof *wd);
    a->w = malloc((size_t)(total > 0 ? total : 1) * sizeof *a->w);
    if (!wd || !a->w) {
        free(wd);
        goto oom;
    }
    double wt_max = 0.0;
    for (int64_t i = 0; i < out_size; i++) {
        double center = scale * ((double)i + 0.5), sum = 0.0;
        double *row = wd + a->offset[i];
        for (int64_t j = 0; j < a->xsize[i]; j++) {
            row[j] = aa_cubic(((double)(j + a->xmin[i]) - center + 0.5) * invscale);
            sum += row[j];
        }
        if (sum != 0.0)
            for (int64_t j = 0; j < a->xsize[i]; j++) {
                row[j] /= sum;
                if (row[j] > wt_max) wt_max = row[j];
            }
    }
    /* The most fractional bits (< 22) for which the largest weight still fits int16 with headroom. */
    int p = 0;
    for (p = 0; p < 22; p++) {
        int next = (int)(0.5 + wt_max * (double)(1 << (p + 1)));
        if (next >= (1 << 15)) break;
    }
    a->precision = p;
    for (int64_t k = 0; k < total; k++) {
        double v = wd[k] * (double)(1 << p);
        a->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(wd);
    return GLM53_OK;
oom:
    axis_free(a);
    return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "image resize: no memory for %lld -> %lld weights",
                      (long long)in_size, (long long)out_size);
}

static inline uint8_t fixed_to_u8(int32_t acc, int precision) {
    if (acc < 0) return 0;   /* torch shifts arithmetically and clamps: every negative sum ends at 0 */
    acc >>= precision;
    return (uint8_t)(acc > 255 ? 255 : acc);
}

/* dst[h, ow, 3] = src[h, w, 3] resampled along x. */
static void resize_x(const uint8_t *src, int64_t h, int64_t w, uint8_t *dst, int64_t ow, const axis_weights *a) {
    const int32_t round = 1 << (a->precision - 1);
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *s = src + y * w * 3;
        uint8_t *o = dst + y * ow * 3;
        for (int64_t x = 0; x < ow; x++) {
            const int16_t *k = a->w + a->offset[x];
            const uint8_t *base = s + a->xmin[x] * 3;
            int32_t acc[3] = {round, round, round};
            for (int64_t j = 0; j < a->xsize[x]; j++)
                for (int c = 0; c < 3; c++) acc[c] += base[j * 3 + c] * k[j];
            for (int c = 0; c < 3; c++) o[x * 3 + c] = fixed_to_u8(acc[c], a->precision);
        }
    }
}

/* dst[oh, w, 3] = src[h, w, 3] resampled along y. */
static void resize_y(const uint8_t *src, int64_t w, uint8_t *dst, int64_t oh, const axis_weights *a) {
    const int32_t round = 1 << (a->precision - 1);
    const int64_t row = w * 3;
    for (int64_t y = 0; y < oh; y++) {
        const int16_t *k = a->w + a->offset[y];
        const uint8_t *base = src + a->xmin[y] * row;
        uint8_t *o = dst + y * row;
        for (int64_t i = 0; i < row; i++) {
            int32_t acc = round;
            for (int64_t j = 0; j < a->xsize[y]; j++) acc += base[j * row + i] * k[j];
            o[i] = fixed_to_u8(acc, a->precision);
        }
    }
}

/* out[oh, ow, 3] = src[h, w, 3] resized: the x pass first (when the width changes), then the y pass. */
static glm53_status resize_rgb(const uint8_t *src, int64_t h, int64_t w, uint8_t *out, int64_t oh, int64_t ow) {
    if (oh == h && ow == w) {
        memcpy(out, src, (size_t)(h * w * 3));
        return GLM53_OK;
    }
    axis_weights ax = {0}, ay = {0};
    uint8_t *mid = NULL;
    glm53_status st = GLM53_OK;
    if (ow != w && oh != h) {
        mid = malloc((size_t)(h * ow * 3));
        if (!mid) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "image resize: no memory for %lld x %lld",
                                    (long long)h, (long long)ow);
    }
    if (ow != w) st = axis_build(w, ow, &ax);
    if (st == GLM53_OK && oh != h) st = axis_build(h, oh, &ay);
    if (st == GLM53_OK) {
        if (ow != w && oh != h) {
            resize_x(src, h, w, mid, ow, &ax);
            resize_y(mid, ow, out, oh, &ay);
        } else if (ow != w) {
            resize_x(src, h, w, out, ow, &ax);
        } else {
            resize_y(src, w, out, oh, &ay);
        }
    }
    axis_free(&ax);
    axis_free(&ay);
    free(mid);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Canvas, normalisation, patchify
 */
/* The reference's fused rescale + normalise: F32 mean*255 and std*255, then (x - m) / s, each step rounded. */
typedef struct {
    float mean[3], std[3];
} norm_consts;

static norm_consts norm_make(void) {
    norm_consts n;
    for (int c = 0; c < 3; c++) {
        volatile float m = (float)CLIP_MEAN[c], s = (float)CLIP_STD[c];   /* no contraction or excess precision */
        n.mean[c] = m * 255.0f;
        n.std[c] = s * 255.0f;
    }
    return n;
}

static inline float normalise_value(uint8_t v, const norm_consts *n, int c) {
    volatile float d = (float)v - n->mean[c];
    return d / n->std[c];
}

/* canvas[ch, cw, 3] uint8: the frame resized to the content size in the top-left corner, zeros elsewhere. */
static glm53_status make_canvas(const rgb_image *img, const layout *L, uint8_t *canvas) {
    memset(canvas, 0, (size_t)(L->canvas_h * L->canvas_w * 3));
    uint8_t *content = malloc((size_t)(L->content_h * L->content_w * 3));
    if (!content) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "image: no memory for the resized image");
    glm53_status st = resize_rgb(img->rgb, img->h, img->w, content, L->content_h, L->content_w);
    if (st == GLM53_OK)
        for (int64_t y = 0; y < L->content_h; y++)
            memcpy(canvas + y * L->canvas_w * 3, content + y * L->content_w * 3, (size_t)(L->content_w * 3));
    free(content);
    return st;
}

/* Pixel rows of one temporal group: frames[temporal] canvases [H, W, 3] -> rows [gh * gw, 3 * T * P * P] in
 * merge-block order, each row (channel, frame, y, x). */
static void patchify(uint8_t *const *frames, int64_t H, int64_t W, const glm53_image_params *p, const norm_consts *n,
                     float *out) {
    const int64_t P = p->patch_size, m = p->merge_size, T = p->temporal_patch_size;
    const int64_t gh = H / P, gw = W / P, row_len = 3 * T * P * P;
    int64_t r = 0;
    for (int64_t bh = 0; bh < gh / m; bh++)
        for (int64_t bw = 0; bw < gw / m; bw++)
            for (int64_t mh = 0; mh < m; mh++)
                for (int64_t mw = 0; mw < m; mw++, r++) {
                    const int64_t y0 = (bh * m + mh) * P, x0 = (bw * m + mw) * P;
                    float *o = out + r * row_len;
                    for (int c = 0; c < 3; c++)
                        for (int64_t t = 0; t < T; t++)
                            for (int64_t y = 0; y < P; y++)
                                for (int64_t x = 0; x < P; x++)
                                    *o++ = normalise_value(frames[t][((y0 + y) * W + x0 + x) * 3 + c], n, c);
                }
}

static glm53_status check_out(const char *what, float *pixels, int64_t capacity, int64_t need) {
    if (pixels && capacity < need)
        return GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "%s: %lld pixel rows needed, the buffer holds %lld", what,
                          (long long)need, (long long)capacity);
    return GLM53_OK;
}

/* ------------------------------------------------------------------------------------------------------------
 * Images
 */
/* The layout and grid of a still image from its header alone (no pixel decoding). */
static glm53_status plan_image(const void *data, size_t len, const glm53_image_params *params, layout *L,
                               int32_t grid_thw[3]) {
    GLM53_TRY(check_params(params));
    image_format fmt;
    int w, h;
    int64_t frames;
    GLM53_TRY(probe(data, len, params->max_pixels, &fmt, &w, &h, &frames));
    GLM53_TRY(plan_layout(params->temporal_patch_size, h, w, params, L));
    grid_of(L, 1, params, grid_thw);
    return GLM53_OK;
}

glm53_status glm53_image_grid(const void *data, size_t len, const glm53_image_params *params, int32_t grid_thw[3]) {
    if (!params || !grid_thw) return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "image_grid: params and grid_thw are required");
    layout L;
    return plan_image(data, len, params, &L, grid_thw);
}

glm53_status glm53_image_preprocess(const void *data, size_t len, const glm53_image_params *params, float *pixels,
                                    int64_t capacity, int32_t grid_thw[3], int64_t *n_patches) {
    if (!params || !grid_thw || !n_patches)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "image_preprocess: params, grid_thw and n_patches are required");
    layout L;
    GLM53_TRY(plan_image(data, len, params, &L, grid_thw));
    *n_patches = (int64_t)grid_thw[1] * grid_thw[2];
    if (!pixels) return GLM53_OK;
    GLM53_TRY(check_out("image_preprocess", pixels, capacity, *n_patches));
    rgb_image img;
    GLM53_TRY(decode_image(data, len, params->max_pixels, &img));
    uint8_t *canvas = malloc((size_t)(L.canvas_h * L.canvas_w * 3));
    glm53_status st = canvas ? make_canvas(&img, &L, canvas)
                             : GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "image: no memory for the canvas");
    if (st == GLM53_OK) {
        /* A still image fills every temporal slot with its one frame. */
        uint8_t *frames[8];
        for (int t = 0; t < params->temporal_patch_size; t++) frames[t] = canvas;
        norm_consts n = norm_make();
        patchify(frames, L.canvas_h, L.canvas_w, params, &n, pixels);
    }
    free(canvas);
    stbi_image_free(img.rgb);
    return st;
}

/* ------------------------------------------------------------------------------------------------------------
 * Videos
 */
/* numpy.linspace(start, stop, num, dtype=int) for 0 <= start <= stop: floor of start + i * step, last = stop. */
static void linspace_int(int64_t start, int64_t stop, int64_t num, int64_t *out) {
    if (num <= 0) return;
    if (num == 1) {
        out[0] = start;
        return;
    }
    double delta = (double)(stop - start), step = delta / (double)(num - 1);
    for (int64_t i = 0; i < num; i++) {
        double y = step == 0 ? ((double)i / (double)(num - 1)) * delta : (double)i * step;
        out[i] = (int64_t)floor(y + (double)start);
    }
    out[num - 1] = stop;
}

/* Glm5NextVideoProcessor.sample_frames for `total` frames at `fps` (duration = total / fps, as every video reader
 * of transformers reports it). idx must hold max(total, max_frames) + 1 entries; returns the count (even). */
static int64_t sample_frames(int64_t total, double fps, double target_fps, int64_t max_frames, int64_t *idx) {
    double duration = (double)total / fps;
    int64_t max_seconds = (int64_t)duration;
    int64_t extract_t = (int64_t)(duration * target_fps);
    if (extract_t > max_frames) extract_t = max_frames;
    int64_t n = 0;
    if (total < extract_t) {
        linspace_int(0, total - 1, extract_t, idx);
        n = extract_t;
    } else {
        double current = 0.0, inv = 1.0 / target_fps;
        for (int64_t i = 0; i < total; i++) {
            double ts = (double)i * (1.0 / fps);
            if (ts >= current) {
                current += inv;
                idx[n++] = i;
                if (current >= (double)max_seconds) break;
            }
        }
    }
    if (n < extract_t) {
        int64_t a = n == 0 ? 0 : idx[0], b = n == 0 ? (total - 1 > 0 ? total - 1 : 0) : idx[n - 1];
        linspace_int(a, b, extract_t, idx);
        n = extract_t;
    } else if (n > extract_t) {
        linspace_int(0, total - 1, extract_t, idx);
        n = extract_t;
    }
    int64_t u = 0;   /* drop repeats, keep the first occurrence (the reference's seen-set) */
    for (int64_t i = 0; i < n; i++) {
        bool seen = false;
        for (int64_t j = 0; j < u && !seen; j++) seen = idx[j] == idx[i];
        if (!seen) idx[u++] = idx[i];
    }
    if (u & 1) {
        idx[u] = idx[u - 1];
        u++;
    }
    return u;
}

static void free_frames(rgb_image *f, int32_t n, bool stb_owned) {
    for (int32_t i = 0; f && i < n; i++) {
        if (stb_owned) stbi_image_free(f[i].rgb);
        else free(f[i].rgb);
    }
    free(f);
}

glm53_status glm53_video_preprocess(const void *const *data, const size_t *len, int32_t n_inputs,
                                    const glm53_video_params *params, float *pixels, int64_t capacity,
                                    int32_t grid_thw[3], double *timestamps, int32_t capacity_groups,
                                    int64_t *n_patches) {
    if (!data || !len || n_inputs < 1 || !params || !grid_thw || !n_patches)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "video_preprocess: data, len, n_inputs >= 1, params, grid_thw and "
                          "n_patches are required");
    const glm53_image_params *ip = &params->image;
    GLM53_TRY(check_params(ip));
    if (!(params->sample_fps > 0) || params->max_frames < 1 || params->max_total_pixels < 1 ||
        !(params->source_fps >= 0) || params->source_fps > 1e6)
        return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "video params: sample_fps > 0, max_frames >= 1, "
                          "max_total_pixels >= 1 and 0 <= source_fps <= 1e6 are required");
    if (n_inputs > 1000000) return GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "video: %d frames", n_inputs);

    /* Decode every frame: one GIF, or one image per input. */
    rgb_image *frames = NULL;
    int32_t n_frames = 0;
    bool stb_owned = n_inputs > 1;
    double fps = params->source_fps;
    glm53_status st = GLM53_OK;
    image_format fmt;
    int w0, h0;
    if (n_inputs == 1 && sniff(data[0], len[0], &fmt) == GLM53_OK && fmt == FMT_GIF) {
        double total_ms = 0;
        GLM53_TRY(decode_gif_frames(data[0], len[0], ip->max_pixels, params->max_total_pixels, &frames, &n_frames,
                                    &total_ms));
        stb_owned = false;
        /* A GIF's own rate: frames over its running time; a GIF without delays runs at 10 fps, as browsers do. */
        if (!(fps > 0)) fps = total_ms > 0 ? (double)n_frames * 1000.0 / total_ms : 10.0;
    } else {
        glm53_clear_error();
        if (!(fps > 0))
            return GLM53_FAIL(GLM53_ERR_INVALID_ARG, "video: source_fps is required for a list of frames (it "
                              "decides the frame sampling and the timestamps)");
        frames = calloc((size_t)n_inputs, sizeof *frames);
        if (!frames) return GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "video: no memory for %d frames", n_inputs);
        stb_owned = true;
        int64_t total = 0;
        for (int32_t i = 0; i < n_inputs && st == GLM53_OK; i++) {
            int64_t frames;
            st = probe(data[i], len[i], ip->max_pixels, &fmt, &w0, &h0, &frames);
            if (st != GLM53_OK) {
                char why[256];
                snprintf(why, sizeof why, "%s", glm53_last_error());
                st = GLM53_FAIL(st, "video: frame %d: %s", i, why);
            } else if ((total += (int64_t)w0 * h0) > params->max_total_pixels)
                st = GLM53_FAIL(GLM53_ERR_UNSUPPORTED, "video: the frames hold more than %lld pixels "
                                "(glm53_video_params.max_total_pixels)", (long long)params->max_total_pixels);
        }
        for (int32_t i = 0; i < n_inputs && st == GLM53_OK; i++) {
            st = decode_image(data[i], len[i], ip->max_pixels, &frames[i]);
            n_frames = i + 1;
        }
    }
    for (int32_t i = 1; i < n_frames && st == GLM53_OK; i++)
        if (frames[i].w != frames[0].w || frames[i].h != frames[0].h)
            st = GLM53_FAIL(GLM53_ERR_FORMAT, "video: frame %d is %d x %d, frame 0 is %d x %d", i, frames[i].w,
                            frames[i].h, frames[0].w, frames[0].h);

    /* Frame sampling and the layout of the sampled frames. */
    int64_t *idx = NULL, n_idx = 0;
    layout L = {0};
    if (st == GLM53_OK) {
        int64_t cap = (n_frames > params->max_frames ? n_frames : params->max_frames) + 2;
        idx = malloc((size_t)cap * sizeof *idx);
        if (!idx) st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "video: no memory for frame indices");
    }
    if (st == GLM53_OK) {
        n_idx = sample_frames(n_frames, fps, params->sample_fps, params->max_frames, idx);
        if (n_idx == 0)
            st = GLM53_FAIL(GLM53_ERR_FORMAT, "video: %d frames at %g fps last %g s: sampling at %g fps keeps no "
                            "frame", n_frames, fps, n_frames / fps, params->sample_fps);
    }
    int64_t T = ip->temporal_patch_size, groups = 0;
    if (st == GLM53_OK) {
        /* The reference pads a frame count that is not a multiple of the temporal patch with the last frame. */
        groups = (n_idx + T - 1) / T;
        st = plan_layout(n_idx, frames[0].h, frames[0].w, ip, &L);
    }
    if (st == GLM53_OK) {
        grid_of(&L, groups, ip, grid_thw);
        *n_patches = groups * grid_thw[1] * grid_thw[2];
        if (timestamps && capacity_groups < groups)
            st = GLM53_FAIL(GLM53_ERR_OUT_OF_RANGE, "video_preprocess: %lld temporal groups, timestamps holds %d",
                            (long long)groups, capacity_groups);
    }
    if (st == GLM53_OK && timestamps)
        for (int64_t g = 0; g < groups; g++) timestamps[g] = (double)idx[g * T] / fps;
    if (st == GLM53_OK && pixels) st = check_out("video_preprocess", pixels, capacity, *n_patches);
    if (st == GLM53_OK && pixels) {
        const int64_t frame_bytes = L.canvas_h * L.canvas_w * 3, rows = (int64_t)grid_thw[1] * grid_thw[2];
        uint8_t *canvases = malloc((size_t)(frame_bytes * T));
        norm_consts n = norm_make();
        if (!canvases) st = GLM53_FAIL(GLM53_ERR_OUT_OF_MEMORY, "video: no memory for the canvases");
        for (int64_t g = 0; g < groups && st == GLM53_OK; g++) {
            uint8_t *slots[8];
            for (int64_t t = 0; t < T && st == GLM53_OK; t++) {
                int64_t k = g * T + t < n_idx ? g * T + t : n_idx - 1;
                slots[t] = canvases + t * frame_bytes;
                st = make_canvas(&frames[idx[k]], &L, slots[t]);
            }
            if (st == GLM53_OK) patchify(slots, L.canvas_h, L.canvas_w, ip, &n, pixels + g * rows * 3 * T *
                                         ip->patch_size * ip->patch_size);
        }
        free(canvases);
    }
    free(idx);
    free_frames(frames, n_frames, stb_owned);
    return st;
}
