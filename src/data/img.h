/* img.h - inside the data module: image files (JPEG, PNG) decoded to 8-bit
 * pixels, PIL's bilinear resampling, torchvision's transforms, and the
 * image-folder data set that puts them together (docs/data.md, "Image
 * folders").
 *
 * Every buffer a decode or a transform needs lives in a scratch that one
 * thread owns and that grows to the largest image seen and never shrinks:
 * in the steady state a sample allocates nothing of ours (libjpeg-turbo
 * and libspng keep their own per-image pools).
 */
#ifndef BFIT_IMG_H
#define BFIT_IMG_H

#include <stddef.h>
#include <stdint.h>

/* PIL's decompression-bomb error threshold (2 x Image.MAX_IMAGE_PIXELS):
 * a header claiming more pixels is refused before anything is allocated. */
#define BFIT_IMG_MAX_PIXELS 178956970LL
#define BFIT_IMG_MAX_FILE ((int64_t)1 << 30) /* bytes of one image file */

enum { BFIT_IMG_JPEG = 1, BFIT_IMG_PNG = 2 };

/* 8-bit pixels, interleaved, rows of w * c bytes. */
typedef struct bfit_img {
    uint8_t *px;
    int w, h, c;
    size_t cap; /* bytes allocated at px */
} bfit_img;

/* What a file's header says. */
typedef struct bfit_img_info {
    int kind;   /* BFIT_IMG_JPEG or BFIT_IMG_PNG */
    int w, h;
    int cmyk;   /* a CMYK/YCCK JPEG */
} bfit_img_info;

/* One thread's buffers and decoder handles. */
typedef struct bfit_img_scratch {
    void *tj;                 /* TurboJPEG decompressor, made on first use */
    uint8_t *file;            /* the file's bytes */
    size_t file_cap;
    bfit_img dec, tmp, tmp2, out; /* decoded; resampling's horizontal pass; resized or cropped; final */
    uint8_t *cmyk;            /* CMYK pixels before conversion */
    size_t cmyk_cap;
    double *kk;               /* resampling coefficients (both passes) */
    int32_t *ik;
    int *bounds;
    size_t kk_cap, ik_cap, bounds_cap;
    int64_t grown;            /* how many times a buffer here grew: 0 in the steady state */
} bfit_img_scratch;

void bfit_img_scratch_free(bfit_img_scratch *s);
/* Make *buf hold at least n bytes (realloc, counted in s->grown). */
int bfit_img_reserve(bfit_img_scratch *s, void **buf, size_t *cap, size_t n);
/* Grow each of s's buffers to at least o's size (counted in s->grown), so
 * that a buffer set that has not yet met an image another has can take it
 * without growing. BFIT_ENOMEM leaves s as it was or partly grown. */
int bfit_img_scratch_cover(bfit_img_scratch *s, const bfit_img_scratch *o);

/* Read path whole into s->file (*n bytes): an image must be in memory to be
 * decoded. BFIT_EIO naming the file; BFIT_EFORMAT for one over
 * BFIT_IMG_MAX_FILE or empty. */
int bfit_img_read(bfit_img_scratch *s, const char *path, size_t *n);

/* The header of an image in b[0..n): its kind by its magic bytes (not its
 * extension), size and colour. BFIT_EFORMAT naming path: not a JPEG or PNG,
 * a broken header, or more than BFIT_IMG_MAX_PIXELS pixels. */
int bfit_img_probe(bfit_img_scratch *s, const char *path, const uint8_t *b, size_t n, bfit_img_info *info);

/* Decode b[0..n) into out with `channels` (1 or 3) channels by the rule of
 * docs/data.md (3: gray replicated, alpha dropped, CMYK to RGB as PIL
 * does; 1: PIL's ITU-R 601-2 luma of the RGB). JPEGs are decoded at
 * 1/shrink of their size (1, 2, 4 or 8: libjpeg-turbo's DCT scaling, as
 * PIL's draft mode), PNGs whole (shrink is ignored). Warnings of libjpeg
 * (a truncated file, corrupt data) and a PNG's bad CRC are errors naming
 * path. */
int bfit_img_decode(bfit_img_scratch *s, const char *path, const uint8_t *b, size_t n, const bfit_img_info *info,
                    int channels, int shrink, bfit_img *out);

/* PIL's Image.resize(..., BILINEAR, box) for 8-bit images, bit for bit:
 * the region box = {x0, y0, x1, y1} of in (floats, as PIL takes them)
 * resampled to ow x oh into out, with the antialiasing triangle filter
 * (its support widened by the scale when reducing), coefficients in 22-bit
 * fixed point, a horizontal then a vertical pass through an 8-bit image. */
int bfit_img_resample(bfit_img_scratch *s, const bfit_img *in, const float box[4], int ow, int oh, bfit_img *out);

/* Room for resampling any box of in to ow x oh (the whole image is the
 * worst case), so that random crops of it never grow a buffer. */
int bfit_img_resample_reserve(bfit_img_scratch *s, const bfit_img *in, int ow, int oh);

/* ---- transforms (img_transform.c) ----------------------------------------- */

/* A crop box in a source image's pixels (may reach outside it: zeros). */
typedef struct bfit_img_box {
    int top, left, h, w;
} bfit_img_box;

/* torchvision's Resize(size) output for a w x h image: the shorter side
 * becomes size, the longer int(size * long / short). */
void bfit_img_resize_dims(int w, int h, int size, int *ow, int *oh);
/* torchvision's CenterCrop(ch, cw) box of a w x h image: offsets
 * int(round((h - ch) / 2)) with Python's round (half to even); a crop
 * larger than the image reaches outside it as torchvision's padding does. */
bfit_img_box bfit_img_center_box(int w, int h, int ch, int cw);
/* torchvision's RandomResizedCrop.get_params for a w x h image with scale
 * (0.08, 1) and ratio (3/4, 4/3): up to 10 tries of draws u(k) (uniform in
 * [0, 1), the k-th of the sample), then the central fallback. */
bfit_img_box bfit_img_rrc_box(int w, int h, double (*u)(void *, int), void *ud);

/* How one sample is made from its file. */
typedef struct bfit_img_tf {
    int c, h, w;        /* the model's input */
    int resize;         /* evaluation: shorter side to this before the centre crop; 0: to the crop */
    int rrc;            /* training: RandomResizedCrop to h x w instead of resize + centre crop */
    int hflip;          /* training: flip left-right with probability 1/2 */
    int dct;            /* JPEG: decode at 1/2, 1/4 or 1/8 of the size where the output needs no more */
} bfit_img_tf;

/* Resize(R) then CenterCrop(h, w) (R: t->resize, else the larger of h, w)
 * of the image in b[0..n) (its header in in) into s->out: the whole image
 * resized, then cropped. */
int bfit_img_eval(bfit_img_scratch *s, const bfit_img_tf *t, const char *path, const uint8_t *b, size_t n,
                  const bfit_img_info *in);
/* torchvision's resized_crop(box, (h, w)): the box cropped, then resized,
 * into s->out; after a DCT reduction the box is resampled in the reduced
 * image instead. */
int bfit_img_resized_crop(bfit_img_scratch *s, const bfit_img_tf *t, const char *path, const uint8_t *b, size_t n,
                          const bfit_img_info *in, bfit_img_box bx);

/* The transformed sample as 8-bit pixels (interleaved, c channels, h x w)
 * in s->out, and whether to flip it; the draws come from u. b[0..n) is the
 * file at path. */
int bfit_img_transform(bfit_img_scratch *s, const bfit_img_tf *t, const char *path, const uint8_t *b, size_t n,
                       double (*u)(void *, int), void *ud, int *flip);

#endif
