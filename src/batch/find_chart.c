/* find_chart.c - the chart of `batchfit find`: throughput (samples/s) and
 * planned/measured memory against the micro-batch, as a standalone SVG
 * written atomically (temporary file, sync, rename). */
#include "base/atomic.h"
#include "base/err.h"
#include "base/svg.h"
#include "base/text.h"
#include "batch/probe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *fmt(uint64_t b, char *buf) { return bfit_format_size(b, buf, 32); }


#define W 760
#define PL 86   /* plot area left */
#define PR 700  /* plot area right */
#define T1 70   /* throughput panel top, bottom */
#define B1 270
#define T2 330  /* memory panel top, bottom */
#define B2 530
#define H 600

typedef bfit_svg_axis axis;

static double ax(const axis *a, double v) { return bfit_svg_at(a, v); }

static void x_ticks(FILE *f, const axis *x, int top, int bottom, int labels, int largest)
{
    double last_label = -1e9;
    for (int64_t m = 1; m <= largest; m *= 2) {
        double px = ax(x, log2((double)m));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n", px, top, px, bottom);
        /* keep labels apart; the largest gets its own below */
        if (labels && px - last_label >= 30 && ax(x, log2((double)largest)) - px >= 30) {
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%lld</text>\n", px, bottom + 16,
                    (long long)m);
            last_label = px;
        }
    }
    if (labels)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"tick\">%d</text>\n",
                ax(x, log2((double)largest)), bottom + 16, largest);
}

/* The header: size, styles, title and the subtitle with the recommendation. */
static void svg_head(FILE *f, const char *model, double tol, const bfit_probe_result *r)
{
    char b1[32], b2[32];
    int rec = r->rungs[r->recommended].m;

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<style>.tick{fill:#444;font-size:11px}.lab{fill:#222}.title{font-size:15px;font-weight:bold}"
               ".note{font-size:11px}</style>\n");
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%d\" y=\"24\" class=\"title\">batchfit find: ", PL);
    bfit_xml_text(f, model);
    fprintf(f, ", memory %s, budget %s</text>\n", fmt(r->capacity, b1), fmt(r->budget, b2));
    if (r->clear_best)
        fprintf(f, "<text x=\"%d\" y=\"42\" class=\"note\">%d thread%s; largest batch %d, fastest %d (the best "
                   "throughput, ahead of every other size by more than the spread)</text>\n", PL, r->threads,
                r->threads == 1 ? "" : "s", r->largest, rec);
    else
        fprintf(f, "<text x=\"%d\" y=\"42\" class=\"note\">%d thread%s; largest batch %d, fastest %d (the largest "
                   "within %g%% of the best: the rates tie within their spread)</text>\n", PL, r->threads,
                r->threads == 1 ? "" : "s", r->largest, rec, 100 * tol);
}

/* The upper panel: samples/s per rung, the band within tol of the best and
 * the recommended micro-batch. */
static void throughput_panel(FILE *f, const axis *xp, double tol, const bfit_probe_result *r)
{
    axis x = *xp, y1;
    double best = r->rungs[r->best].samples_per_s, step;
    int rec = r->rungs[r->recommended].m;

    y1.lo = 0;
    y1.hi = bfit_svg_nice_top(best * 1.1, 5, &step);
    y1.px0 = B1;
    y1.px1 = T1;
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lab\" font-weight=\"bold\">training throughput (samples/s, "
               "forward + backward, median)</text>\n", PL, T1 - 8);
    bfit_svg_y_grid(f, &y1, PL, PR, step, 1, 0);
    x_ticks(f, &x, T1, B1, 1, r->largest);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"#2ca02c\" fill-opacity=\"0.12\"/>\n", PL,
            ax(&y1, best), PR - PL, ax(&y1, best * (1 - tol)) - ax(&y1, best));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"note\" fill=\"#2a7a2a\">within %g%% of the best</text>\n",
            PL + 6, ax(&y1, best) - 5, 100 * tol);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < r->nrungs; i++)
        fprintf(f, "%.1f,%.1f ", ax(&x, log2(r->rungs[i].m)), ax(&y1, r->rungs[i].samples_per_s));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < r->nrungs; i++) { /* the rate and its spread: the middle half of the measured steps */
        double px = ax(&x, log2(r->rungs[i].m)), v = r->rungs[i].samples_per_s, u = v * r->rungs[i].spread / 2;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-width=\"1\"/>\n",
                px, ax(&y1, v - u > 0 ? v - u : 0), px, ax(&y1, v + u < y1.hi ? v + u : y1.hi));
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#1f77b4\"/>\n", px, ax(&y1, v));
    }
    {
        double px = ax(&x, log2(rec)), py = ax(&y1, r->rungs[r->recommended].samples_per_s);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#2ca02c\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"5,4\"/>\n", px, T1, px, B1);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\"/>\n",
                px, py);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\" class=\"note\" fill=\"#2a7a2a\">fastest %d"
                   "</text>\n", px + (px > (PL + PR) / 2 ? -5 : 5), B1 - 8, px > (PL + PR) / 2 ? "end" : "start", rec);
    }
    bfit_svg_axes(f, PL, T1, PR, B1);
}

/* The lower panel: planned and measured peaks per rung against the memory
 * and the budget, and the largest micro-batch. */
static void memory_panel(FILE *f, const axis *xp, double margin, const bfit_probe_result *r)
{
    axis x = *xp, y2;
    double div, step;
    uint64_t mmax = r->capacity;
    const char *unit;
    char b1[32];
    int dec;

    bfit_svg_mem_unit(mmax, &div, &unit);
    y2.lo = 0;
    y2.hi = bfit_svg_nice_top((double)mmax * 1.05 / div, 5, &step) * div;
    y2.px0 = B2;
    y2.px1 = T2;
    dec = step < 1 ? 1 : 0;
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lab\" font-weight=\"bold\">memory of a training step (%s)</text>\n",
            PL, T2 - 8, unit);
    bfit_svg_y_grid(f, &y2, PL, PR, step * div, div, dec);
    x_ticks(f, &x, T2, B2, 1, r->largest);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\n", PL,
            ax(&y2, (double)r->capacity), PR, ax(&y2, (double)r->capacity));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"note\" fill=\"#555\">memory %s</text>\n", PL + 6,
            ax(&y2, (double)r->capacity) - 4, fmt(r->capacity, b1));
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"6,4\"/>\n", PL,
            ax(&y2, (double)r->budget), PR, ax(&y2, (double)r->budget));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"note\" fill=\"#b22222\">budget %s (memory less the %g%% "
               "margin)</text>\n", PL + 6, ax(&y2, (double)r->budget) + 14, fmt(r->budget, b1),
            100 * margin);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < r->nrungs; i++)
        fprintf(f, "%.1f,%.1f ", ax(&x, log2(r->rungs[i].m)), ax(&y2, (double)r->rungs[i].planned_peak));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < r->nrungs; i++) {
        double px = ax(&x, log2(r->rungs[i].m)), py = ax(&y2, (double)r->rungs[i].measured_peak);
        fprintf(f, "<path d=\"M%.1f,%.1f l8,8 m0,-8 l-8,8\" stroke=\"#222\" stroke-width=\"1.5\"/>\n", px - 4, py - 4);
    }
    {
        double px = ax(&x, log2(r->largest));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"5,4\"/>\n", px, T2, px, B2);
        if (r->largest < r->limit)
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" class=\"note\" fill=\"#b22222\">largest %d "
                       "(%d was refused)</text>\n", px - 5, B2 - 8, r->largest, r->largest + 1);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"end\" class=\"note\" fill=\"#b22222\">largest %d "
                       "(the limit)</text>\n", px - 5, B2 - 8, r->largest);
    }
    /* legend, in the lower left where the peaks are small */
    fprintf(f, "<g class=\"note\" transform=\"translate(%d,%d)\">"
               "<line x1=\"0\" y1=\"0\" x2=\"22\" y2=\"0\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>"
               "<text x=\"28\" y=\"4\">planned peak</text>"
               "<path d=\"M7,14 l8,8 m0,-8 l-8,8\" stroke=\"#222\" stroke-width=\"1.5\"/>"
               "<text x=\"28\" y=\"22\">measured peak of a real step</text></g>\n",
            PL + 14, T2 + (B2 - T2) * 2 / 5);
    bfit_svg_axes(f, PL, T2, PR, B2);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"lab\">micro-batch size (log2 scale)</text>\n",
            (PL + PR) / 2, B2 + 40);
    fprintf(f, "</svg>\n");
}

static void write_svg(FILE *f, const char *model, double tol, double margin, const bfit_probe_result *r)
{
    axis x;

    x.lo = -0.4;
    x.hi = log2((double)r->largest + 1) + 0.4;
    x.px0 = PL;
    x.px1 = PR;
    svg_head(f, model, tol, r);
    throughput_panel(f, &x, tol, r);
    memory_panel(f, &x, margin, r);
}

int bfit_probe_chart_save(const char *path, const char *model, double tolerance, double margin,
                          const bfit_probe_result *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    bfit_atomic_file af;
    int rc;

    if (!mem)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    write_svg(mem, model, tolerance, margin, r);
    if (fclose(mem) != 0 || !buf) {
        free(buf);
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    }
    rc = bfit_atomic_open(&af, path);
    if (rc == BFIT_OK)
        rc = bfit_atomic_write(&af, buf, len);
    if (rc == BFIT_OK)
        rc = bfit_atomic_commit(&af);
    free(buf);
    return rc;
}
