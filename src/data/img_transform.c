/* img_transform.c - torchvision's transforms of an image file into a sample:
 * Resize + CenterCrop (evaluation) or RandomResizedCrop (training), on
 * 8-bit pixels, with the arithmetic of torchvision 0.14 on PIL images
 * (Python's round is half to even: rint).
 *
 * A JPEG is decoded at 1/2, 1/4 or 1/8 of its size when the output needs
 * no more pixels (PIL's draft rule: the largest k with min(w // out_w,
 * h // out_h) >= k); the resampling box is then in the reduced image's
 * coordinates, as PIL's thumbnail does. Without the reduction (k = 1) the
 * result is torchvision's, bit for bit.
 */
#include "data/img.h"
#include "base/err.h"

#include <math.h>
#include <string.h>

void bfit_img_resize_dims(int w, int h, int size, int *ow, int *oh)
{
    int s = w <= h ? w : h, l = w <= h ? h : w;
    int nl = (int)((double)size * l / s);

    *ow = w <= h ? size : nl;
    *oh = w <= h ? nl : size;
}

/* One axis of CenterCrop: torchvision pads a crop larger than the image by
 * (c - i) // 2 before it, else offsets by round((i - c) / 2). */
static int center_off(int i, int c) { return c > i ? -((c - i) / 2) : (int)rint((i - c) / 2.0); }

bfit_img_box bfit_img_center_box(int w, int h, int ch, int cw)
{
    return (bfit_img_box){center_off(h, ch), center_off(w, cw), ch, cw};
}

bfit_img_box bfit_img_rrc_box(int w, int h, double (*u)(void *, int), void *ud)
{
    const double area = (double)h * w, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    double in_ratio = (double)w / h;
    int cw, ch;

    for (int a = 0; a < 10; a++) {
        double target = area * (0.08 + (1.0 - 0.08) * u(ud, 4 * a));
        double ratio = exp(lr0 + (lr1 - lr0) * u(ud, 4 * a + 1));
        cw = (int)rint(sqrt(target * ratio));
        ch = (int)rint(sqrt(target / ratio));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            int top = (int)(u(ud, 4 * a + 2) * (h - ch + 1)), left = (int)(u(ud, 4 * a + 3) * (w - cw + 1));
            return (bfit_img_box){top, left, ch, cw};
        }
    }
    if (in_ratio < 3.0 / 4.0) {
        cw = w;
        ch = (int)rint(cw / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
        ch = h;
        cw = (int)rint(ch * (4.0 / 3.0));
    } else {
        cw = w;
        ch = h;
    }
    return (bfit_img_box){(h - ch) / 2, (w - cw) / 2, ch, cw};
}

/* b = the box of a, zeros where it reaches outside a. */
static int crop(bfit_img_scratch *s, const bfit_img *a, bfit_img_box bx, bfit_img *b)
{
    const int C = a->c;
    int rc = bfit_img_reserve(s, (void **)&b->px, &b->cap, (size_t)bx.w * bx.h * C);

    if (rc != BFIT_OK)
        return rc;
    b->w = bx.w, b->h = bx.h, b->c = C;
    for (int y = 0; y < bx.h; y++) {
        int sy = y + bx.top;
        uint8_t *o = b->px + (size_t)y * bx.w * C;
        if (sy < 0 || sy >= a->h) {
            memset(o, 0, (size_t)bx.w * C);
            continue;
        }
        for (int x = 0; x < bx.w; x++) {
            int sx = x + bx.left;
            for (int c = 0; c < C; c++)
                o[x * C + c] = sx >= 0 && sx < a->w ? a->px[((size_t)sy * a->w + sx) * C + c] : 0;
        }
    }
    return BFIT_OK;
}

/* PIL's draft rule: the largest of 8, 4, 2, 1 not above min(w // ow, h // oh). */
static int shrink_for(const bfit_img_tf *t, const bfit_img_info *in, int w, int h, int ow, int oh)
{
    int k = w / ow < h / oh ? w / ow : h / oh;

    if (!t->dct || in->kind != BFIT_IMG_JPEG)
        return 1;
    return k >= 8 ? 8 : k >= 4 ? 4 : k >= 2 ? 2 : 1;
}

int bfit_img_eval(bfit_img_scratch *s, const bfit_img_tf *t, const char *path, const uint8_t *b, size_t n,
                   const bfit_img_info *in)
{
    int R = t->resize ? t->resize : (t->h > t->w ? t->h : t->w), nw, nh, k, rc;

    bfit_img_resize_dims(in->w, in->h, R, &nw, &nh);
    k = shrink_for(t, in, in->w, in->h, nw, nh);
    if ((rc = bfit_img_decode(s, path, b, n, in, t->c, k, &s->dec)) != BFIT_OK)
        return rc;
    float box[4] = {0, 0, (float)((double)in->w / k), (float)((double)in->h / k)};
    if ((rc = bfit_img_resample(s, &s->dec, box, nw, nh, &s->tmp2)) != BFIT_OK)
        return rc;
    return crop(s, &s->tmp2, bfit_img_center_box(nw, nh, t->h, t->w), &s->out);
}

int bfit_img_resized_crop(bfit_img_scratch *s, const bfit_img_tf *t, const char *path, const uint8_t *b, size_t n,
                          const bfit_img_info *in, bfit_img_box bx)
{
    int k = shrink_for(t, in, bx.w, bx.h, t->w, t->h), rc;

    if ((rc = bfit_img_decode(s, path, b, n, in, t->c, k, &s->dec)) != BFIT_OK)
        return rc;
    /* room for the largest crop of this image, whatever this one's size */
    if ((rc = bfit_img_resample_reserve(s, &s->dec, t->w, t->h)) != BFIT_OK ||
        (rc = bfit_img_reserve(s, (void **)&s->tmp2.px, &s->tmp2.cap, (size_t)s->dec.w * s->dec.h * s->dec.c)))
        return rc;
    if (k == 1) {
        if ((rc = crop(s, &s->dec, bx, &s->tmp2)) != BFIT_OK)
            return rc;
        float box[4] = {0, 0, (float)bx.w, (float)bx.h};
        return bfit_img_resample(s, &s->tmp2, box, t->w, t->h, &s->out);
    }
    float box[4] = {(float)((double)bx.left / k), (float)((double)bx.top / k),
                    (float)((double)(bx.left + bx.w) / k), (float)((double)(bx.top + bx.h) / k)};
    for (int i = 2; i < 4; i++) /* the reduced image rounds its size up: the box stays inside */
        if (box[i] > (i == 2 ? s->dec.w : s->dec.h))
            box[i] = (float)(i == 2 ? s->dec.w : s->dec.h);
    return bfit_img_resample(s, &s->dec, box, t->w, t->h, &s->out);
}

int bfit_img_transform(bfit_img_scratch *s, const bfit_img_tf *t, const char *path, const uint8_t *b, size_t n,
                       double (*u)(void *, int), void *ud, int *flip)
{
    bfit_img_info in;
    int rc;

    *flip = 0;
    if ((rc = bfit_img_probe(s, path, b, n, &in)) != BFIT_OK)
        return rc;
    rc = t->rrc ? bfit_img_resized_crop(s, t, path, b, n, &in, bfit_img_rrc_box(in.w, in.h, u, ud))
                : bfit_img_eval(s, t, path, b, n, &in);
    if (rc == BFIT_OK && t->hflip)
        *flip = u(ud, 40) < 0.5;
    return rc;
}
