/* img_decode.c - JPEG (TurboJPEG) and PNG (libspng) files to 8-bit pixels
 * with the model's channels.
 *
 * The header is read and its size checked before any pixel buffer is
 * allocated, so a file claiming 60000 x 60000 pixels costs nothing. The
 * channel rules copy what torchvision's ImageFolder (PIL's convert("RGB"),
 * then convert("L") for one channel) makes of the same file.
 */
#include "data/img.h"
#include "base/err.h"

#include <errno.h>
#include <limits.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

void bfit_img_scratch_free(bfit_img_scratch *s)
{
    if (!s)
        return;
    if (s->tj)
        tjDestroy(s->tj);
    free(s->file);
    free(s->dec.px);
    free(s->tmp.px);
    free(s->tmp2.px);
    free(s->out.px);
    free(s->cmyk);
    free(s->kk);
    free(s->ik);
    free(s->bounds);
    memset(s, 0, sizeof *s);
}

int bfit_img_reserve(bfit_img_scratch *s, void **buf, size_t *cap, size_t n)
{
    void *p;

    if (n <= *cap)
        return BFIT_OK;
    n += n / 4; /* room for the next slightly larger image */
    if (!(p = realloc(*buf, n)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory for an image buffer of %zu bytes", n);
    *buf = p;
    *cap = n;
    s->grown++;
    return BFIT_OK;
}

static int cover(bfit_img_scratch *s, void **buf, size_t *cap, size_t n)
{
    void *p;
    if (n <= *cap)
        return BFIT_OK;
    if (!(p = realloc(*buf, n)))
        return BFIT_ENOMEM;
    *buf = p;
    *cap = n;
    s->grown++;
    return BFIT_OK;
}

int bfit_img_scratch_cover(bfit_img_scratch *s, const bfit_img_scratch *o)
{
    int rc = cover(s, (void **)&s->file, &s->file_cap, o->file_cap);
    rc = rc ? rc : cover(s, (void **)&s->dec.px, &s->dec.cap, o->dec.cap);
    rc = rc ? rc : cover(s, (void **)&s->tmp.px, &s->tmp.cap, o->tmp.cap);
    rc = rc ? rc : cover(s, (void **)&s->tmp2.px, &s->tmp2.cap, o->tmp2.cap);
    rc = rc ? rc : cover(s, (void **)&s->out.px, &s->out.cap, o->out.cap);
    rc = rc ? rc : cover(s, (void **)&s->cmyk, &s->cmyk_cap, o->cmyk_cap);
    rc = rc ? rc : cover(s, (void **)&s->kk, &s->kk_cap, o->kk_cap);
    rc = rc ? rc : cover(s, (void **)&s->ik, &s->ik_cap, o->ik_cap);
    return rc ? rc : cover(s, (void **)&s->bounds, &s->bounds_cap, o->bounds_cap);
}

static int img_reserve(bfit_img_scratch *s, bfit_img *im, int w, int h, int c)
{
    im->w = w;
    im->h = h;
    im->c = c;
    return bfit_img_reserve(s, (void **)&im->px, &im->cap, (size_t)w * (size_t)h * (size_t)c);
}

int bfit_img_read(bfit_img_scratch *s, const char *path, size_t *n)
{
    struct stat st;
    FILE *f = fopen(path, "rb");
    int rc = BFIT_OK;

    *n = 0;
    if (!f)
        return bfit_fail(BFIT_EIO, "cannot open image %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = bfit_fail(BFIT_EIO, "image %s is not a regular file", path);
        goto out_close;
    }
    if (st.st_size == 0 || st.st_size > BFIT_IMG_MAX_FILE) {
        rc = bfit_fail(BFIT_EFORMAT, "image %s: %lld bytes, expected 1..%lld", path, (long long)st.st_size,
                       (long long)BFIT_IMG_MAX_FILE);
        goto out_close;
    }
    if ((rc = bfit_img_reserve(s, (void **)&s->file, &s->file_cap, (size_t)st.st_size)) != BFIT_OK)
        goto out_close;
    if (fread(s->file, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        rc = bfit_fail(BFIT_EIO, "cannot read image %s: %s", path, ferror(f) ? strerror(errno) : "file shrank");
        goto out_close;
    }
    *n = (size_t)st.st_size;
out_close:
    fclose(f);
    return rc;
}

static int check_size(const char *path, const char *what, long long w, long long h)
{
    if (w < 1 || h < 1 || w * h > BFIT_IMG_MAX_PIXELS)
        return bfit_fail(BFIT_EFORMAT, "image %s: the %s header says %lld x %lld pixels; at most %lld pixels are "
                         "decoded (PIL's limit), and never an empty image", path, what, w, h, BFIT_IMG_MAX_PIXELS);
    return BFIT_OK;
}

static int jpeg_handle(bfit_img_scratch *s)
{
    if (!s->tj && !(s->tj = tjInitDecompress()))
        return bfit_fail(BFIT_ENOMEM, "cannot make a JPEG decompressor: %s", tjGetErrorStr2(NULL));
    return BFIT_OK;
}

/* The handle is made anew after a failure: libjpeg's state after an error
 * is not to be trusted with the next file. */
static int jpeg_fail(bfit_img_scratch *s, const char *path, const char *what)
{
    int rc = bfit_fail(BFIT_EFORMAT, "image %s: bad JPEG %s: %s", path, what, tjGetErrorStr2(s->tj));
    tjDestroy(s->tj);
    s->tj = NULL;
    return rc;
}

static int probe_jpeg(bfit_img_scratch *s, const char *path, const uint8_t *b, size_t n, bfit_img_info *info)
{
    int w, h, sub, cs, rc;

    if ((rc = jpeg_handle(s)) != BFIT_OK)
        return rc;
    if (n > ULONG_MAX || tjDecompressHeader3(s->tj, b, (unsigned long)n, &w, &h, &sub, &cs) != 0)
        return jpeg_fail(s, path, "header");
    info->kind = BFIT_IMG_JPEG;
    info->w = w;
    info->h = h;
    info->cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    return check_size(path, "JPEG", w, h);
}

static void spng_limits(spng_ctx *ctx)
{
    spng_set_image_limits(ctx, 1u << 24, 1u << 24); /* the pixel count is checked by us */
    spng_set_chunk_limits(ctx, 64u << 20, 64u << 20);
}

static int probe_png(const char *path, const uint8_t *b, size_t n, bfit_img_info *info)
{
    spng_ctx *ctx = spng_ctx_new(0);
    struct spng_ihdr ih;
    int e, rc;

    if (!ctx)
        return bfit_fail(BFIT_ENOMEM, "cannot make a PNG decoder");
    spng_limits(ctx);
    if ((e = spng_set_png_buffer(ctx, b, n)) || (e = spng_get_ihdr(ctx, &ih))) {
        rc = bfit_fail(BFIT_EFORMAT, "image %s: bad PNG header: %s", path, spng_strerror(e));
        goto out;
    }
    info->kind = BFIT_IMG_PNG;
    info->w = (int)ih.width;
    info->h = (int)ih.height;
    info->cmyk = 0;
    rc = check_size(path, "PNG", ih.width, ih.height);
out:
    spng_ctx_free(ctx);
    return rc;
}

int bfit_img_probe(bfit_img_scratch *s, const char *path, const uint8_t *b, size_t n, bfit_img_info *info)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

    memset(info, 0, sizeof *info);
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return probe_jpeg(s, path, b, n, info);
    if (n >= 8 && !memcmp(b, png_magic, 8))
        return probe_png(path, b, n, info);
    return bfit_fail(BFIT_EFORMAT, "image %s is neither JPEG nor PNG (its first bytes are not either's "
                     "signature)", path);
}

/* PIL's luma (Convert.c, L24): L = R 299/1000 + G 587/1000 + B 114/1000,
 * in 16-bit fixed point, rounded. In place: out may be in. */
static void rgb_to_l(const uint8_t *in, uint8_t *out, size_t npx)
{
    for (size_t i = 0; i < npx; i++, in += 3)
        out[i] = (uint8_t)((in[0] * 19595 + in[1] * 38470 + in[2] * 7471 + 0x8000) >> 16);
}

/* PIL's CMYK JPEG: Adobe polarity ("CMYK;I": stored values inverted), then
 * Convert.c's cmyk2rgb: each of R, G, B is (255 - K) less (255 - K) x C / 255. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, size_t npx)
{
    for (size_t i = 0; i < npx; i++, in += 4, out += 3) {
        int nk = in[3]; /* 255 - (255 - stored K) */
        for (int k = 0; k < 3; k++) {
            int tmp = (255 - in[k]) * nk + 128;
            int v = nk - (((tmp >> 8) + tmp) >> 8);
            out[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static int decode_jpeg(bfit_img_scratch *s, const char *path, const uint8_t *b, size_t n, const bfit_img_info *info,
                       int channels, int shrink, bfit_img *out)
{
    tjscalingfactor sf = {1, shrink};
    int w = TJSCALED(info->w, sf), h = TJSCALED(info->h, sf), rc;
    size_t npx = (size_t)w * (size_t)h;

    if ((rc = img_reserve(s, out, w, h, channels == 1 ? 3 : channels)) != BFIT_OK)
        return rc;
    if (info->cmyk) {
        if ((rc = bfit_img_reserve(s, (void **)&s->cmyk, &s->cmyk_cap, npx * 4)) != BFIT_OK)
            return rc;
        if (tjDecompress2(s->tj, b, (unsigned long)n, s->cmyk, w, 0, h, TJPF_CMYK, TJFLAG_STOPONWARNING))
            return jpeg_fail(s, path, "data");
        cmyk_to_rgb(s->cmyk, out->px, npx);
    } else if (tjDecompress2(s->tj, b, (unsigned long)n, out->px, w, 0, h, TJPF_RGB, TJFLAG_STOPONWARNING))
        return jpeg_fail(s, path, "data");
    if (channels == 1) {
        rgb_to_l(out->px, out->px, npx);
        out->c = 1;
    }
    return BFIT_OK;
}

static int decode_png(const char *path, const uint8_t *b, size_t n, bfit_img_scratch *s, int channels,
                      bfit_img *out)
{
    spng_ctx *ctx = spng_ctx_new(0);
    struct spng_ihdr ih;
    size_t size;
    int e, rc, gray8;

    if (!ctx)
        return bfit_fail(BFIT_ENOMEM, "cannot make a PNG decoder");
    spng_limits(ctx);
    if ((e = spng_set_png_buffer(ctx, b, n)) || (e = spng_get_ihdr(ctx, &ih))) {
        rc = bfit_fail(BFIT_EFORMAT, "image %s: bad PNG header: %s", path, spng_strerror(e));
        goto out;
    }
    /* one channel from 8-bit gray is the gray itself (RGB -> L of g, g, g is g) */
    gray8 = channels == 1 && ih.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ih.bit_depth == 8;
    if ((e = spng_decoded_image_size(ctx, gray8 ? SPNG_FMT_G8 : SPNG_FMT_RGB8, &size))) {
        rc = bfit_fail(BFIT_EFORMAT, "image %s: bad PNG: %s", path, spng_strerror(e));
        goto out;
    }
    if ((rc = img_reserve(s, out, (int)ih.width, (int)ih.height, gray8 ? 1 : 3)) != BFIT_OK)
        goto out;
    /* then the chunks to IEND, so that every CRC is checked (the image's
     * data may end before its last chunk's CRC) */
    if ((e = spng_decode_image(ctx, out->px, size, gray8 ? SPNG_FMT_G8 : SPNG_FMT_RGB8, 0)) ||
        (e = spng_decode_chunks(ctx))) {
        rc = bfit_fail(BFIT_EFORMAT, "image %s: bad PNG data: %s%s", path, spng_strerror(e),
                       e == SPNG_ECHUNK_CRC ? " (a chunk's CRC does not match its bytes: the file is damaged)" : "");
        goto out;
    }
    if (channels == 1 && !gray8) {
        rgb_to_l(out->px, out->px, (size_t)out->w * (size_t)out->h);
        out->c = 1;
    }
out:
    spng_ctx_free(ctx);
    return rc;
}

int bfit_img_decode(bfit_img_scratch *s, const char *path, const uint8_t *b, size_t n, const bfit_img_info *info,
                    int channels, int shrink, bfit_img *out)
{
    if (channels != 1 && channels != 3)
        return bfit_fail(BFIT_EINVAL, "image %s: a model input of %d channels; images give 1 (gray) or 3 (RGB)",
                         path, channels);
    if (info->kind == BFIT_IMG_PNG)
        return decode_png(path, b, n, s, channels, out);
    if (shrink != 1 && shrink != 2 && shrink != 4 && shrink != 8)
        return bfit_fail(BFIT_EINVAL, "image %s: JPEG scale 1/%d, expected 1, 2, 4 or 8", path, shrink);
    return decode_jpeg(s, path, b, n, info, channels, shrink, out);
}
