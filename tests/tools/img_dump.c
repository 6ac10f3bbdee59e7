/* img_dump.c - the image oracle's helper (tests/oracle/img_oracle.py): runs
 * the library's image decoding and transforms on the commands read from
 * stdin, one a line, and writes each result as a file "w h c\n" + pixels,
 * answering "ok" or "error: message" on stdout.
 *   decode FILE C SHRINK OUT
 *   resize FILE C X0 Y0 X1 Y1 OW OH OUT          (decoded whole, then PIL's resize with box)
 *   eval FILE C H W R DCT OUT                    (Resize(R) + CenterCrop(H, W))
 *   crop FILE C H W TOP LEFT CH CW DCT OUT       (resized_crop to H x W)
 */
#include "data/img.h"
#include "base/err.h"

#include <stdio.h>
#include <string.h>

static int put(const char *out, const bfit_img *im)
{
    FILE *f = fopen(out, "wb");
    if (!f)
        return bfit_fail(BFIT_EIO, "cannot write %s", out);
    fprintf(f, "%d %d %d\n", im->w, im->h, im->c);
    fwrite(im->px, 1, (size_t)im->w * im->h * im->c, f);
    fclose(f);
    return BFIT_OK;
}

static int run(bfit_img_scratch *s, const char *line)
{
    char cmd[16], file[1024], out[1024];
    int c, a[8], n_read, rc;
    float box[4];
    size_t n;
    bfit_img_info in;

    if (sscanf(line, "%15s %1023s %d", cmd, file, &c) != 3)
        return bfit_fail(BFIT_EINVAL, "bad command: %s", line);
    if ((rc = bfit_img_read(s, file, &n)) != BFIT_OK || (rc = bfit_img_probe(s, file, s->file, n, &in)) != BFIT_OK)
        return rc;
    if (!strcmp(cmd, "decode") && sscanf(line, "%*s %*s %*d %d %1023s", &a[0], out) == 2) {
        rc = bfit_img_decode(s, file, s->file, n, &in, c, a[0], &s->dec);
        return rc ? rc : put(out, &s->dec);
    }
    if (!strcmp(cmd, "resize") &&
        sscanf(line, "%*s %*s %*d %f %f %f %f %d %d %1023s", &box[0], &box[1], &box[2], &box[3], &a[0], &a[1], out) == 7) {
        if ((rc = bfit_img_decode(s, file, s->file, n, &in, c, 1, &s->dec)) != BFIT_OK ||
            (rc = bfit_img_resample(s, &s->dec, box, a[0], a[1], &s->out)) != BFIT_OK)
            return rc;
        return put(out, &s->out);
    }
    if (!strcmp(cmd, "eval") && sscanf(line, "%*s %*s %*d %d %d %d %d %1023s", &a[0], &a[1], &a[2], &a[3], out) == 5) {
        bfit_img_tf t = {c, a[0], a[1], a[2], 0, 0, a[3]};
        rc = bfit_img_eval(s, &t, file, s->file, n, &in);
        return rc ? rc : put(out, &s->out);
    }
    n_read = sscanf(line, "%*s %*s %*d %d %d %d %d %d %d %d %1023s", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], out);
    if (!strcmp(cmd, "crop") && n_read == 8) {
        bfit_img_tf t = {c, a[0], a[1], 0, 1, 0, a[6]};
        rc = bfit_img_resized_crop(s, &t, file, s->file, n, &in, (bfit_img_box){a[2], a[3], a[4], a[5]});
        return rc ? rc : put(out, &s->out);
    }
    return bfit_fail(BFIT_EINVAL, "bad command: %s", line);
}

int main(void)
{
    bfit_img_scratch s = {0};
    char line[4096];

    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        if (run(&s, line) == BFIT_OK)
            printf("ok\n");
        else
            printf("error: %s\n", bfit_errmsg());
        fflush(stdout);
    }
    bfit_img_scratch_free(&s);
    return 0;
}
