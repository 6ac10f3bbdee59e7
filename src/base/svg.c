/* svg.c - axes and ticks shared by the SVG charts (find, run report). */
#include "base/svg.h"
#include "base/text.h"

#include <math.h>

/* The first multiple of step at or above lo (+0, never -0, for a label). */
static double first_tick(double lo, double step)
{
    double v = ceil(lo / step - 1e-9) * step;
    return v == 0 ? 0 : v;
}

double bfit_svg_at(const bfit_svg_axis *a, double v)
{
    return a->px0 + (v - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0);
}

double bfit_svg_nice_step(double span, int n)
{
    double raw = span / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

double bfit_svg_nice_top(double max, int n, double *step)
{
    *step = bfit_svg_nice_step(max, n);
    return ceil(max / *step) * *step;
}

void bfit_svg_mem_unit(uint64_t max, double *div, const char **name)
{
    if (max >= (3ull << 30)) {
        *div = 1024.0 * 1024 * 1024;
        *name = "GiB";
    } else if (max >= (3ull << 20)) {
        *div = 1024.0 * 1024;
        *name = "MiB";
    } else {
        *div = 1024;
        *name = "KiB";
    }
}

void bfit_svg_y_grid(FILE *f, const bfit_svg_axis *y, double x0, double x1, double step, double div, int decimals)
{
    char b[32];
    /* multiples of step, so that a range not from 0 still gets round labels */
    for (double v = first_tick(y->lo, step); v <= y->hi * 1.0001 + 1e-12; v += step) {
        double py = bfit_svg_at(y, v);
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", x0, py, x1, py);
        if (decimals)
            snprintf(b, sizeof b, "%.*f", decimals, v / div);
        else
            bfit_thousands(v / div, b, sizeof b);
        fprintf(f, "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">%s</text>\n", x0 - 6, py + 4, b);
    }
}

void bfit_svg_x_grid(FILE *f, const bfit_svg_axis *x, double y0, double y1, double step)
{
    char b[32];
    for (double v = first_tick(x->lo, step); v <= x->hi + 1e-9; v += step) {
        double px = bfit_svg_at(x, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e4e4e4\"/>\n", px, y0, px, y1);
        fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\" class=\"tick\">%s</text>\n", px, y1 + 16,
                bfit_thousands(v, b, sizeof b));
    }
}

void bfit_svg_axes(FILE *f, double x0, double y0, double x1, double y1)
{
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#222\"/>\n", x0, y1, x1, y1);
    fprintf(f, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#222\"/>\n", x0, y0, x0, y1);
}
