/* report.c - the run report: one self-contained HTML file drawn from a
 * run's JSON-lines event log. Charts are inline SVG on the step axis, with
 * every batch change, memory change, warning and error marked on each of
 * them (numbered, with a hover title, and listed below since a phone has no
 * hover); then the run's configuration and its memory plan. No script and
 * nothing fetched: it reads the same from a file, on a phone and on paper.
 * Written atomically, and only after the whole log has been read. */
#include "base/median.h"
#include "base/atomic.h"
#include "base/err.h"
#include "base/svg.h"
#include "base/text.h"
#include "train/report_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One chart's SVG coordinates: the viewBox and the plot area in it. Small
 * enough that its text stays legible when a phone scales it down. */
#define W 520
#define H 300
#define PL 72
#define PR 504
#define PT 56 /* room above for three rows of event numbers */
#define PB 250
#define MAX_POINTS 2400 /* a longer series is drawn as the min and max of buckets */

typedef struct pt {
    double x, y;
} pt;

typedef struct chart {
    FILE *f;
    const rp_log *L;
    bfit_svg_axis x, y;
    double xstep;
    pt *a, *b; /* scratch series, as long as the longest */
} chart;

typedef struct legend {
    const char *color, *dash, *label;
} legend;

static const char *mark_color(const char *kind)
{
    return !strcmp(kind, "batch_change") ? "#d67d00" : !strcmp(kind, "batch_hold") ? "#2a9d8f"
                                                   : !strcmp(kind, "memory")   ? "#7b4fb0"
                                                   : !strcmp(kind, "warning")  ? "#a07800"
                                                   : !strcmp(kind, "throttle") ? "#e0457b"
                                                                               : "#c00000";
}

static const char *mark_name(const char *kind)
{
    return !strcmp(kind, "batch_change") ? "batch change" : !strcmp(kind, "batch_hold") ? "batch held" : kind;
}

/* ---- the pieces of a chart --------------------------------------------------- */

static void poly_pt(const chart *c, pt p)
{
    fprintf(c->f, "%.1f,%.1f ", bfit_svg_at(&c->x, p.x), bfit_svg_at(&c->y, p.y));
}

/* A line through p[0..n); past MAX_POINTS each bucket gives its lowest and
 * highest point, in step order, so spikes stay visible. */
static void series(const chart *c, const char *cls, const char *color, const char *dash, const pt *p, size_t n)
{
    if (!n)
        return;
    fprintf(c->f, "<polyline class=\"line %s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s%s%s points=\"", cls,
            color, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    if (n <= MAX_POINTS) {
        for (size_t i = 0; i < n; i++)
            poly_pt(c, p[i]);
    } else {
        size_t per = (n + MAX_POINTS / 2 - 1) / (MAX_POINTS / 2);
        for (size_t i = 0; i < n; i += per) {
            size_t lo = i, hi = i, end = i + per < n ? i + per : n;
            for (size_t j = i; j < end; j++) {
                lo = p[j].y < p[lo].y ? j : lo;
                hi = p[j].y > p[hi].y ? j : hi;
            }
            poly_pt(c, p[lo < hi ? lo : hi]);
            if (lo != hi)
                poly_pt(c, p[lo < hi ? hi : lo]);
        }
    }
    fprintf(c->f, "\"/>\n");
}

/* Points with a hover title each (evaluations: few). */
static void dots(const chart *c, const char *cls, const char *color, const pt *p, size_t n, const char *what,
                 double scale, const char *unit)
{
    for (size_t i = 0; i < n; i++)
        fprintf(c->f, "<circle class=\"pt %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>step %.0f: %s "
                      "%.4g%s</title></circle>\n",
                cls, bfit_svg_at(&c->x, p[i].x), bfit_svg_at(&c->y, p[i].y), color, p[i].x, what, p[i].y * scale,
                unit);
}

static int decimals_for(double step)
{
    return step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
}

/* The y axis over the points of p and q (from 0 when from_zero and none
 * is negative), with its grid; labels show values times scale. */
static void y_linear(chart *c, const pt *p, size_t n, const pt *q, size_t nq, int from_zero, double scale)
{
    double lo = INFINITY, hi = -INFINITY, step;
    for (size_t i = 0; i < n; i++)
        lo = fmin(lo, p[i].y), hi = fmax(hi, p[i].y);
    for (size_t i = 0; i < nq; i++)
        lo = fmin(lo, q[i].y), hi = fmax(hi, q[i].y);
    if (!(hi > -INFINITY)) /* nothing to show: an axis from 0 to 1 */
        lo = 0, hi = 1;
    if (from_zero && lo >= 0)
        lo = 0;
    if (hi - lo < 1e-12) { /* one value: a band around it */
        double pad = fabs(hi) > 1e-12 ? fabs(hi) * 0.1 : 1;
        hi += pad;
        lo = from_zero && lo >= 0 ? 0 : lo - pad;
    }
    step = bfit_svg_nice_step((hi - lo) * 1.05, 5);
    c->y.lo = floor(lo / step + 1e-9) * step;
    c->y.hi = ceil(hi / step - 1e-9) * step;
    if (c->y.hi <= c->y.lo)
        c->y.hi = c->y.lo + step;
    c->y.px0 = PB;
    c->y.px1 = PT;
    bfit_svg_y_grid(c->f, &c->y, PL, PR, step, 1 / scale, decimals_for(step * scale));
}

static const char *pow2_label(int p, char *buf, size_t n)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = p < 0 ? 0 : p / 10 > 5 ? 5 : p / 10;
    snprintf(buf, n, "%.0f %s", ldexp(1, p - 10 * u), unit[u]);
    return buf;
}

/* A log2 y axis over bytes (memory in use and capacity differ by orders of
 * magnitude): ticks at powers of two. */
static void y_log2(chart *c, const pt *p, size_t n, const pt *q, size_t nq)
{
    double lo = INFINITY, hi = -INFINITY;
    int t;
    char b[32];
    for (size_t i = 0; i < n; i++)
        lo = fmin(lo, p[i].y), hi = fmax(hi, p[i].y);
    for (size_t i = 0; i < nq; i++)
        lo = fmin(lo, q[i].y), hi = fmax(hi, q[i].y);
    if (!(hi > -INFINITY))
        lo = 10, hi = 30;
    c->y.lo = floor(lo - 0.25);
    c->y.hi = ceil(hi + 0.25);
    c->y.px0 = PB;
    c->y.px1 = PT;
    t = (int)ceil((c->y.hi - c->y.lo) / 6);
    for (int e = (int)c->y.lo; e <= (int)c->y.hi; e += t) {
        double py = bfit_svg_at(&c->y, e);
        fprintf(c->f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", PL, py, PR, py);
        fprintf(c->f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\">%s</text>\n", PL - 6, py + 4,
                pow2_label(e, b, sizeof b));
    }
}

/* The events as numbered markers on the step axis; a number that would
 * overlap the one before it goes up a row. */
static void markers(const chart *c)
{
    double last[3] = {-1e9, -1e9, -1e9};
    for (size_t i = 0; i < c->L->nmk; i++) {
        const rp_mark *m = &c->L->mk[i];
        const char *color = mark_color(m->kind);
        double px = bfit_svg_at(&c->x, m->step);
        int row = 0, cy;
        while (row < 2 && px - last[row] < 19)
            row++;
        last[row] = px;
        cy = PT - 10 - 17 * row;
        fprintf(c->f, "<g class=\"ev ev-%s\"><title>%zu. step %.0f, %s: ", m->kind, i + 1, m->step, mark_name(m->kind));
        bfit_xml_text(c->f, m->text);
        fprintf(c->f, "</title><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"1.2\" "
                      "stroke-dasharray=\"4,3\"/><circle cx=\"%.1f\" cy=\"%d\" r=\"9\" fill=\"%s\"/>"
                      "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" class=\"evn\">%zu</text></g>\n",
                px, cy + 8, px, PB, color, px, cy, color, px, cy + 4, i + 1);
    }
}

static void chart_begin(chart *c, const char *id, const char *title, const char *what)
{
    fprintf(c->f, "<figure class=\"chart\" id=\"%s\"><figcaption>%s</figcaption>\n", id, title);
    fprintf(c->f, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%s\">\n",
            W, H, what);
    fprintf(c->f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    bfit_svg_x_grid(c->f, &c->x, PT, PB, c->xstep);
}

/* Axes, the event markers over everything, the x axis title and the legend
 * (in HTML, so that it wraps on a narrow screen). */
static void chart_end(chart *c, const char *empty, const legend *lg, int nlg)
{
    if (empty)
        fprintf(c->f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"empty\">%s</text>\n", (PL + PR) / 2,
                (PT + PB) / 2, empty);
    bfit_svg_axes(c->f, PL, PT, PR, PB);
    markers(c);
    fprintf(c->f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"axis\">optimizer step</text>\n</svg>\n",
            (PL + PR) / 2, H - 6);
    fprintf(c->f, "<ul class=\"legend\">");
    for (int i = 0; i < nlg; i++)
        fprintf(c->f, "<li><span class=\"sw%s\" style=\"border-color:%s\"></span>%s</li>",
                lg[i].dash ? " dashed" : "", lg[i].color, lg[i].label);
    fprintf(c->f, "</ul></figure>\n");
}

/* ---- the charts ------------------------------------------------------------- */

static void chart_loss(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#1f77b4", NULL, "training loss (per step)"}, {"#d62728", NULL, "test loss (per evaluation)"}};
    for (size_t i = 0; i < L->nst; i++)
        c->a[i] = (pt){L->st[i].step, L->st[i].loss};
    for (size_t i = 0; i < L->nev; i++)
        c->b[i] = (pt){L->ev[i].step, L->ev[i].test_loss};
    chart_begin(c, "loss", "Loss", "training loss per step and test loss per evaluation");
    y_linear(c, c->a, L->nst, c->b, L->nev, 1, 1);
    series(c, "train-loss", "#1f77b4", NULL, c->a, L->nst);
    series(c, "test-loss", "#d62728", NULL, c->b, L->nev);
    dots(c, "test-loss", "#d62728", c->b, L->nev, "test loss", 1, "");
    chart_end(c, L->nst || L->nev ? NULL : "no steps in this log", lg, 2);
}

static void chart_accuracy(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#2ca02c", NULL, "test accuracy (per evaluation)"}};
    for (size_t i = 0; i < L->nev; i++)
        c->b[i] = (pt){L->ev[i].step, L->ev[i].test_acc};
    chart_begin(c, "accuracy", "Test accuracy (%)", "test accuracy per evaluation");
    y_linear(c, c->b, L->nev, NULL, 0, 0, 100);
    series(c, "test-acc", "#2ca02c", NULL, c->b, L->nev);
    dots(c, "test-acc", "#2ca02c", c->b, L->nev, "test accuracy", 100, "%");
    chart_end(c, L->nev ? NULL : "no evaluation in this log", lg, 1);
}

/* What E, m and the rates count: a token budget's log says so in its start. */
static const char *unit(const rp_log *L)
{
    const cJSON *t = L->start ? cJSON_GetObjectItemCaseSensitive(L->start, "batch_tokens") : NULL;
    return cJSON_IsNumber(t) && t->valuedouble > 0 ? "tokens" : "samples";
}

static void chart_batch(chart *c)
{
    const rp_log *L = c->L;
    char e[64];
    legend lg[] = {{"#1f77b4", NULL, e},
                   {"#ff7f0e", "5,3", "m: micro-batch on the device (E = m &#215; k, k micro-steps)"}};
    snprintf(e, sizeof e, "E: %s per optimizer step", unit(L));
    for (size_t i = 0; i < L->nst; i++) {
        c->a[i] = (pt){L->st[i].step, L->st[i].E};
        c->b[i] = (pt){L->st[i].step, L->st[i].m};
    }
    chart_begin(c, "batch", "Batch: E and m &#215; k", "effective batch and micro-batch per step");
    y_linear(c, c->a, L->nst, c->b, L->nst, 1, 1);
    series(c, "batch-E", "#1f77b4", NULL, c->a, L->nst);
    series(c, "batch-m", "#ff7f0e", "5,3", c->b, L->nst);
    chart_end(c, L->nst ? NULL : "no steps in this log", lg, 2);
}

static void chart_memory(chart *c)
{
    const rp_log *L = c->L;
    const cJSON *cap0 = L->start ? cJSON_GetObjectItemCaseSensitive(L->start, "capacity") : NULL;
    legend lg[] = {{"#9467bd", NULL, "memory in use after the step"}, {"#555555", "6,4", "capacity for the step"}};
    size_t na = 0, nb = 0;
    if (cJSON_IsNumber(cap0) && cap0->valuedouble > 0)
        c->b[nb++] = (pt){0, log2(cap0->valuedouble)};
    for (size_t i = 0; i < L->nst; i++) {
        if (L->st[i].mem > 0)
            c->a[na++] = (pt){L->st[i].step, log2(L->st[i].mem)};
        if (L->st[i].capacity > 0) { /* the capacity after a step is the next step's */
            pt p = {L->st[i].step + 1, log2(L->st[i].capacity)};
            if (nb && p.y != c->b[nb - 1].y) { /* a step, not a slope */
                double before = c->b[nb - 1].y;
                c->b[nb++] = (pt){p.x, before};
            }
            c->b[nb++] = p;
        }
    }
    chart_begin(c, "memory", "Device memory (log scale)", "memory in use and capacity per step");
    y_log2(c, c->a, na, c->b, nb);
    series(c, "capacity", "#555555", "6,4", c->b, nb);
    series(c, "mem", "#9467bd", NULL, c->a, na);
    chart_end(c, na || nb ? NULL : "no steps in this log", lg, 2);
}

static void chart_throughput(chart *c)
{
    const rp_log *L = c->L;
    char each[64], title[64];
    legend lg[] = {{"#9ecae1", NULL, each}, {"#08519c", NULL, "median of 9 steps"}};
    size_t n = 0;
    snprintf(each, sizeof each, "%s/s of each step", unit(L));
    snprintf(title, sizeof title, "Throughput (%s/s)", unit(L));
    for (size_t i = 0; i < L->nst; i++)
        if (L->st[i].seconds > 0)
            c->a[n++] = (pt){L->st[i].step, L->st[i].E / L->st[i].seconds};
    /* single steps are noisy (other processes, the last step of an epoch) */
    for (size_t i = 0; i < n; i++) {
        double w[9];
        size_t lo = i >= 4 ? i - 4 : 0, hi = i + 5 < n ? i + 5 : n, k = 0;
        for (size_t j = lo; j < hi; j++)
            w[k++] = c->a[j].y;
        c->b[i] = (pt){c->a[i].x, bfit_median(w, (int)k)};
    }
    chart_begin(c, "throughput", title, "training samples (or tokens) per second per step");
    y_linear(c, c->a, n, NULL, 0, 1, 1);
    series(c, "thru", "#9ecae1", NULL, c->a, n);
    series(c, "thru-median", "#08519c", NULL, c->b, n);
    chart_end(c, n ? NULL : "no timed steps in this log", lg, 2);
}

/* The share of each step spent waiting for samples: the loader's part of
 * the time (a high share says the loader, not the device, sets the speed). */
static void chart_data(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#2a9d8f", NULL, "data wait, % of the step"}};
    size_t n = 0;
    for (size_t i = 0; i < L->nst; i++)
        if (L->st[i].data_share >= 0)
            c->a[n++] = (pt){L->st[i].step, 100 * L->st[i].data_share};
    chart_begin(c, "data", "Data wait (% of each step)", "the share of each step spent waiting for samples");
    y_linear(c, c->a, n, NULL, 0, 1, 1);
    series(c, "data-share", "#2a9d8f", NULL, c->a, n);
    if (n <= 200)
        dots(c, "data-share", "#2a9d8f", c->a, n, "data wait", 1, "%");
    chart_end(c, n ? NULL : "no step logged its data wait", lg, 1);
}

static void chart_noise(chart *c)
{
    const rp_log *L = c->L;
    char what[64];
    legend lg[] = {{"#8c564b", NULL, what}};
    size_t n = 0;
    for (size_t i = 0; i < L->nst; i++)
        if (L->st[i].noise > 0)
            c->a[n++] = (pt){L->st[i].step, L->st[i].noise};
    snprintf(what, sizeof what, "gradient noise scale B_noise (%s)", unit(L));
    chart_begin(c, "noise", "Gradient noise scale", "the gradient noise scale estimate per step");
    y_linear(c, c->a, n, NULL, 0, 1, 1);
    series(c, "noise", "#8c564b", NULL, c->a, n);
    chart_end(c, n ? NULL : "no estimate: it is measured with --batch auto or adaptive", lg, 1);
}

/* The learning rate each step used (schedule, warm-up, rescaling as E
 * changed). */
static void chart_lr(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#d62728", NULL, "learning rate"}};
    size_t n = 0;
    for (size_t i = 0; i < L->nst; i++)
        if (L->st[i].lr > 0)
            c->a[n++] = (pt){L->st[i].step, L->st[i].lr};
    chart_begin(c, "lr", "Learning rate", "the learning rate each step used: schedule, warm-up and the rescaling "
                "that follows the effective batch");
    y_linear(c, c->a, n, NULL, 0, 1, 1);
    series(c, "lr", "#d62728", NULL, c->a, n);
    chart_end(c, n ? NULL : "no step logged its learning rate", lg, 1);
}

/* The global gradient norm, where the run computed it. */
static void chart_gnorm(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#7f7f7f", NULL, "gradient norm"}};
    size_t n = 0;
    for (size_t i = 0; i < L->nst; i++)
        if (L->st[i].gnorm >= 0)
            c->a[n++] = (pt){L->st[i].step, L->st[i].gnorm};
    chart_begin(c, "gnorm", "Gradient norm", "the L2 norm of each step's mean gradient (before clipping)");
    y_linear(c, c->a, n, NULL, 0, 1, 1);
    series(c, "gnorm", "#7f7f7f", NULL, c->a, n);
    chart_end(c, n ? NULL : "not computed in this run: it is when clipping (--clip), loss scaling, or an adaptive or "
              "auto batch needs it", lg, 1);
}

/* The monitor's samples: how busy the device was (a GPU's utilization; the
 * CPU's use by this process, in % of its threads). */
static void chart_busy(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#17becf", NULL, "busy: a GPU's kernel time, or this process's CPU use over its threads"}};
    size_t n = 0;
    for (size_t i = 0; i < L->nmon; i++)
        if (L->mon[i].busy >= 0)
            c->a[n++] = (pt){L->mon[i].step, L->mon[i].busy};
    chart_begin(c, "busy", "Device busy (%)", "how busy the device was at each monitor sample");
    y_linear(c, c->a, n, NULL, 0, 1, 1);
    series(c, "busy", "#17becf", NULL, c->a, n);
    if (n <= 200) /* a long run's samples are a line */
        dots(c, "busy", "#17becf", c->a, n, "busy", 1, "%");
    chart_end(c, n ? NULL : "no monitor events in this log (train --monitor)", lg, 1);
}

/* ... and whose memory the device held: this process's (a GPU's: what the
 * driver puts to it, the arena and the context; the CPU's: resident) and
 * the other processes' on a shared GPU, in GiB. */
static void chart_shared(chart *c)
{
    const rp_log *L = c->L;
    legend lg[] = {{"#9467bd", NULL, "this process"}, {"#e377c2", "5,3", "other processes (a shared GPU)"}};
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < L->nmon; i++) {
        if (L->mon[i].self >= 0)
            c->a[na++] = (pt){L->mon[i].step, L->mon[i].self / 1073741824.0};
        if (L->mon[i].others >= 0)
            c->b[nb++] = (pt){L->mon[i].step, L->mon[i].others / 1073741824.0};
    }
    chart_begin(c, "shared", "Memory held on the device (GiB)", "this process's and other processes' memory");
    y_linear(c, c->a, na, c->b, nb, 1, 1);
    series(c, "self", "#9467bd", NULL, c->a, na);
    series(c, "others", "#e377c2", "5,3", c->b, nb);
    chart_end(c, na || nb ? NULL : "no monitor events in this log (train --monitor)", lg, 2);
}

static int charts(FILE *f, const rp_log *L)
{
    chart c;
    size_t most = 2 * (L->nst > L->nev ? L->nst : L->nev) + 2; /* capacity: two points at a change */
    double xmax = 1;

    memset(&c, 0, sizeof c);
    c.f = f;
    c.L = L;
    for (size_t i = 0; i < L->nst; i++)
        xmax = fmax(xmax, L->st[i].step);
    for (size_t i = 0; i < L->nev; i++)
        xmax = fmax(xmax, L->ev[i].step);
    for (size_t i = 0; i < L->nmk; i++)
        xmax = fmax(xmax, L->mk[i].step);
    for (size_t i = 0; i < L->nmon; i++)
        xmax = fmax(xmax, L->mon[i].step);
    if (L->nmon + 2 > most)
        most = L->nmon + 2;
    c.x = (bfit_svg_axis){0, xmax, PL, PR};
    c.xstep = bfit_svg_nice_step(xmax, 5);
    c.a = malloc(most * sizeof *c.a);
    c.b = malloc(most * sizeof *c.b);
    if (!c.a || !c.b) {
        free(c.a);
        free(c.b);
        return bfit_fail(BFIT_ENOMEM, "out of host memory drawing the report");
    }
    fprintf(f, "<section class=\"charts\">\n");
    chart_loss(&c);
    chart_accuracy(&c);
    chart_lr(&c);
    chart_gnorm(&c);
    chart_batch(&c);
    chart_memory(&c);
    chart_throughput(&c);
    chart_data(&c);
    chart_noise(&c);
    chart_busy(&c);
    chart_shared(&c);
    fprintf(f, "</section>\n");
    free(c.a);
    free(c.b);
    return BFIT_OK;
}

/* ---- the text around the charts --------------------------------------------- */

static double jnum(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *jstr(const cJSON *o, const char *k, const char *dflt)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static void status(FILE *f, const rp_log *L)
{
    char b1[32], b2[32], b3[32], b4[32];
    if (L->error) {
        fprintf(f, "<p class=\"status fail\"><strong>Failed</strong> at step %.0f (epoch %.0f): ",
                jnum(L->error, "step", 0), jnum(L->error, "epoch", 0));
        bfit_xml_text(f, jstr(L->error, "code", "error"));
        fputs(": ", f);
        bfit_xml_text(f, jstr(L->error, "message", ""));
        fputs("</p>\n", f);
    } else if (L->end && jnum(L->end, "tokens", 0) > 0) { /* a token model: per token */
        double secs = jnum(L->end, "train_seconds", 0), tokens = jnum(L->end, "tokens", 0);
        fprintf(f, "<p class=\"status ok\"><strong>Finished</strong>: %s steps, %s tokens, test loss %.4f per token "
                   "(%s accuracy %.2f%%), %.1f s of training (%s tokens/s); peak memory %s; %.0f batch "
                   "change%s, %.0f out-of-memory recover%s.</p>\n",
                bfit_thousands(jnum(L->end, "steps", 0), b1, sizeof b1), bfit_thousands(tokens, b2, sizeof b2),
                jnum(L->end, "test_loss", 0), jstr(L->start, "token_accuracy", "next-token"),
                100 * jnum(L->end, "test_acc", 0), secs,
                bfit_thousands(secs > 0 ? tokens / secs : 0, b3, sizeof b3),
                bfit_format_size((uint64_t)jnum(L->end, "peak", 0), b4, sizeof b4), jnum(L->end, "batch_changes", 0),
                jnum(L->end, "batch_changes", 0) == 1 ? "" : "s", jnum(L->end, "ooms", 0),
                jnum(L->end, "ooms", 0) == 1 ? "y" : "ies");
    } else if (L->end) {
        double secs = jnum(L->end, "train_seconds", 0), samples = jnum(L->end, "samples", 0);
        fprintf(f, "<p class=\"status ok\"><strong>Finished</strong>: %s steps, %s samples, test accuracy %.2f%%, "
                   "%.1f s of training (%s samples/s); peak memory %s; %.0f batch change%s, %.0f out-of-memory "
                   "recover%s.</p>\n",
                bfit_thousands(jnum(L->end, "steps", 0), b1, sizeof b1), bfit_thousands(samples, b2, sizeof b2),
                100 * jnum(L->end, "test_acc", 0), secs, bfit_thousands(secs > 0 ? samples / secs : 0, b3, sizeof b3),
                bfit_format_size((uint64_t)jnum(L->end, "peak", 0), b4, sizeof b4), jnum(L->end, "batch_changes", 0),
                jnum(L->end, "batch_changes", 0) == 1 ? "" : "s", jnum(L->end, "ooms", 0),
                jnum(L->end, "ooms", 0) == 1 ? "y" : "ies");
    } else {
        fprintf(f, "<p class=\"status open\"><strong>Incomplete</strong>: the log ends without an end or error "
                   "event; the run was stopped, or is still running.</p>\n");
    }
    if (L->cut_last)
        fprintf(f, "<p class=\"status open\">The log's last line was cut short (its writer was killed, or the disk "
                   "was full): it is left out.</p>\n");
}

static void events_list(FILE *f, const rp_log *L)
{
    fprintf(f, "<section id=\"events\"><h2>Events</h2>\n");
    if (!L->nmk) {
        fprintf(f, "<p>No batch changes, memory changes, warnings or errors.</p></section>\n");
        return;
    }
    fprintf(f, "<p class=\"note\">Numbered as on the charts.</p><ol class=\"events\">\n");
    for (size_t i = 0; i < L->nmk; i++) {
        fprintf(f, "<li class=\"ev-%s\"><span class=\"kind\" style=\"color:%s\">%s</span> at step %.0f: ",
                L->mk[i].kind, mark_color(L->mk[i].kind), mark_name(L->mk[i].kind), L->mk[i].step);
        bfit_xml_text(f, L->mk[i].text);
        fputs("</li>\n", f);
    }
    fprintf(f, "</ol></section>\n");
}

/* A value of the start event as people read it. */
static void config_value(FILE *f, const cJSON *v)
{
    char b[64], s[32];
    if (cJSON_IsString(v)) {
        bfit_xml_text(f, v->valuestring);
    } else if (cJSON_IsNumber(v) && !strcmp(v->string, "time")) {
        time_t t = (time_t)v->valuedouble;
        struct tm tm;
        if (gmtime_r(&t, &tm) && strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm))
            fputs(b, f);
        else
            fprintf(f, "%.3f", v->valuedouble);
    } else if (cJSON_IsNumber(v) && !strcmp(v->string, "capacity")) {
        fprintf(f, "%s (%s)", bfit_format_size((uint64_t)v->valuedouble, s, sizeof s),
                bfit_thousands(v->valuedouble, b, sizeof b));
    } else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15) {
        fputs(bfit_thousands(v->valuedouble, b, sizeof b), f);
    } else if (cJSON_IsNumber(v)) {
        fprintf(f, "%g", v->valuedouble);
    } else if (cJSON_IsObject(v) && !strcmp(v->string, "options")) {
        const cJSON *o; /* the options given, as the command line spells them */
        fputs("<code>", f);
        cJSON_ArrayForEach(o, v) {
            fprintf(f, "%s--", o == v->child ? "" : " ");
            bfit_xml_text(f, o->string);
            if (cJSON_IsString(o) && o->valuestring[0]) {
                fputc(' ', f);
                bfit_xml_text(f, o->valuestring);
            }
        }
        fputs("</code>", f);
    } else {
        char *j = cJSON_PrintUnformatted(v);
        bfit_xml_text(f, j ? j : "?");
        cJSON_free(j);
    }
}

static void config_table(FILE *f, const rp_log *L)
{
    const cJSON *v;
    fprintf(f, "<section id=\"config\"><h2>Configuration</h2>\n");
    if (!L->start) {
        fprintf(f, "<p>The log has no start event: the run failed before its setup was done.</p></section>\n");
        return;
    }
    fprintf(f, "<div class=\"wrap\"><table><tbody>\n");
    cJSON_ArrayForEach(v, L->start) {
        if (!strcmp(v->string, "event") || !strcmp(v->string, "plan"))
            continue;
        fputs("<tr><th>", f);
        bfit_xml_text(f, v->string);
        fputs("</th><td>", f);
        config_value(f, v);
        fputs("</td></tr>\n", f);
    }
    fprintf(f, "</tbody></table></div></section>\n");
}

/* share: show the part of the peak (with a bar) */
static void plan_row(FILE *f, const char *name, double bytes, double peak, int share)
{
    char s[32], t[48];
    double pc = peak > 0 ? 100 * bytes / peak : 0;
    fprintf(f, "<tr><th>");
    bfit_xml_text(f, name);
    fprintf(f, "</th><td class=\"num\">%s</td><td class=\"num bytes\">%s</td>",
            bfit_format_size((uint64_t)bytes, s, sizeof s), bfit_thousands(bytes, t, sizeof t));
    if (share)
        fprintf(f, "<td class=\"num\">%.1f%%</td><td class=\"barcol\"><span class=\"bar\" style=\"width:%.1f%%\">"
                   "</span></td></tr>\n", pc, pc);
    else
        fprintf(f, "<td></td><td class=\"barcol\"></td></tr>\n");
}

static void plan_table(FILE *f, const rp_log *L)
{
    const cJSON *plan = L->start ? cJSON_GetObjectItemCaseSensitive(L->start, "plan") : NULL;
    const cJSON *bytes = plan ? cJSON_GetObjectItemCaseSensitive(plan, "bytes") : NULL, *v;
    double peak = jnum(plan, "peak", 0);

    fprintf(f, "<section id=\"plan\"><h2>Memory plan</h2>\n");
    if (!cJSON_IsObject(bytes)) {
        fprintf(f, "<p>The start event carries no plan (a log from an older batchfit?).</p></section>\n");
        return;
    }
    fprintf(f, "<p>What a training step reserves at the starting micro-batch m = %.0f, per category (the "
               "plan is the allocation); the budget is the memory less the margin.</p>\n", jnum(plan, "m", 0));
    fprintf(f, "<div class=\"wrap\"><table class=\"plan\"><thead><tr><th>category</th><th>size</th>"
               "<th class=\"bytes\">bytes</th><th>of the peak</th><th class=\"barcol\"></th></tr></thead><tbody>\n");
    cJSON_ArrayForEach(v, bytes)
        if (cJSON_IsNumber(v))
            plan_row(f, v->string, v->valuedouble, peak, 1);
    plan_row(f, "peak", peak, peak, 0);
    if (jnum(plan, "budget", 0) > 0)
        plan_row(f, "budget", jnum(plan, "budget", 0), peak, 0);
    fprintf(f, "</tbody></table></div></section>\n");
}

static const char *CSS =
    "*{box-sizing:border-box}"
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#222;"
    "line-height:1.4;margin:0 auto;max-width:1120px;padding:12px 16px}"
    "h1{font-size:1.35em;margin:.3em 0;overflow-wrap:anywhere}h2{font-size:1.1em;margin:1.4em 0 .4em}"
    ".sub,.note{color:#555;font-size:.9em;margin:.2em 0}"
    ".status{padding:8px 12px;border:1px solid;border-radius:6px}.ok{background:#eef8ee;border-color:#8c8}"
    ".fail{background:#fdeeee;border-color:#d88}.open{background:#fff7e0;border-color:#db5}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,470px),1fr));gap:14px}"
    "figure{margin:0;border:1px solid #ddd;border-radius:6px;padding:8px;break-inside:avoid}"
    "figcaption{font-weight:600;margin:0 0 4px}svg{display:block;width:100%;height:auto}"
    ".tick{fill:#555;font-size:13px}.axis{fill:#333;font-size:13px}.empty{fill:#777;font-size:14px}"
    ".evn{fill:#fff;font-size:11px;font-weight:bold}"
    ".legend{list-style:none;margin:4px 0 0;padding:0;font-size:.85em;color:#444;display:flex;flex-wrap:wrap;"
    "gap:2px 14px}.sw{display:inline-block;width:20px;border-top:3px solid;vertical-align:middle;margin-right:5px}"
    ".sw.dashed{border-top-style:dashed}"
    "ol.events li{margin:3px 0;overflow-wrap:anywhere}.kind{font-weight:600}"
    ".wrap{overflow-x:auto}table{border-collapse:collapse;font-size:.92em}"
    "th,td{text-align:left;padding:3px 12px 3px 0;border-bottom:1px solid #e6e6e6;vertical-align:top}"
    "th{white-space:nowrap}td{overflow-wrap:anywhere}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    ".barcol{width:30%;min-width:60px}.bar{display:inline-block;height:.8em;background:#1f77b4;"
    "-webkit-print-color-adjust:exact;print-color-adjust:exact}"
    "footer{color:#777;font-size:.8em;margin:2em 0 1em;overflow-wrap:anywhere}"
    /* a phone shows a chart at about 2/3 of its size: larger text keeps it legible */
    "@media (max-width:600px){body{padding:8px 10px}.tick,.axis{font-size:18px}.empty{font-size:19px}"
    ".evn{font-size:14px}.plan .bytes{display:none}.barcol{width:auto}}"
    "@media print{body{max-width:none;padding:0;font-size:10pt}.charts{grid-template-columns:1fr 1fr;gap:8px}"
    "figure{border-color:#bbb}h2{break-after:avoid}.wrap{overflow:visible}}"
    "@page{margin:12mm}";

static void head(FILE *f, const rp_log *L)
{
    const char *model = jstr(L->start, "model", NULL), *data = jstr(L->start, "data", NULL);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>batchfit run");
    if (model) {
        fputs(": ", f);
        bfit_xml_text(f, model);
    }
    fprintf(f, "</title>\n<style>%s</style></head>\n<body>\n<header><h1>batchfit run", CSS);
    if (model) {
        fputs(": ", f);
        bfit_xml_text(f, model);
        if (data) {
            fputs(" on ", f);
            bfit_xml_text(f, data);
        }
    }
    fprintf(f, "</h1>\n");
    status(f, L);
    fprintf(f, "<p class=\"sub\">%zu steps, %zu evaluations and %zu events (batch changes, memory changes, "
               "warnings, errors) in the log; markers on the charts are numbered as in the "
               "<a href=\"#events\">list of events</a>.</p></header>\n", L->nst, L->nev, L->nmk);
}

static int write_html(FILE *f, const rp_log *L)
{
    int rc;
    head(f, L);
    if ((rc = charts(f, L)) != BFIT_OK)
        return rc;
    events_list(f, L);
    config_table(f, L);
    plan_table(f, L);
    fprintf(f, "<footer>Written by batchfit report from ");
    bfit_xml_text(f, L->path);
    fprintf(f, ".</footer>\n</body></html>\n");
    return BFIT_OK;
}

int bfit_report_write(const char *log_path, const char *html_path)
{
    rp_log L;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem;
    bfit_atomic_file af;
    int rc;

    if (!log_path || !html_path)
        return bfit_fail(BFIT_EINVAL, "report: a log and an output path are needed");
    if ((rc = bfit_rp_log_read(log_path, &L)) != BFIT_OK)
        return rc;
    if (!(mem = open_memstream(&buf, &len))) {
        bfit_rp_log_free(&L);
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    }
    rc = write_html(mem, &L);
    bfit_rp_log_free(&L);
    if (fclose(mem) != 0 || !buf)
        rc = rc != BFIT_OK ? rc : bfit_fail(BFIT_ENOMEM, "out of host memory");
    if (rc == BFIT_OK)
        rc = bfit_atomic_open(&af, html_path);
    if (rc == BFIT_OK)
        rc = bfit_atomic_write(&af, buf, len);
    if (rc == BFIT_OK)
        rc = bfit_atomic_commit(&af);
    free(buf);
    return rc;
}
