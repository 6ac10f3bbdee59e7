/* svg.h - the pieces of a chart that every SVG report draws the same way:
 * a linear mapping from data to pixels, round tick steps, a unit that keeps
 * memory labels short, grid lines with labels, and the axis lines. Charts
 * on a log scale map log2 of their values and label the ticks themselves. */
#ifndef BFIT_SVG_H
#define BFIT_SVG_H

#include <stdint.h>
#include <stdio.h>

typedef struct bfit_svg_axis {
    double lo, hi;   /* data range */
    double px0, px1; /* pixels for lo, hi (px0 > px1 for a y axis) */
} bfit_svg_axis;

/* The pixel of value v. */
double bfit_svg_at(const bfit_svg_axis *a, double v);
/* A step of 1, 2 or 5 times a power of ten giving about n ticks over a
 * range of width span (> 0). */
double bfit_svg_nice_step(double span, int n);
/* The top of an axis from 0 that shows max: a whole number of nice steps
 * (about n); *step gets the step. */
double bfit_svg_nice_top(double max, int n, double *step);
/* KiB, MiB or GiB, whichever keeps labels of values up to max short. */
void bfit_svg_mem_unit(uint64_t max, double *div, const char **name);
/* Horizontal grid lines from x0 to x1 at the multiples of step within the
 * y axis, labelled at the left with v / div (decimals 0: with thousands
 * separators). */
void bfit_svg_y_grid(FILE *f, const bfit_svg_axis *y, double x0, double x1, double step, double div, int decimals);
/* Vertical grid lines from y0 (top) to y1 (bottom) at the multiples of step
 * within the x axis, labelled below y1 with whole numbers. */
void bfit_svg_x_grid(FILE *f, const bfit_svg_axis *x, double y0, double y1, double step);
/* The left and bottom axis lines of the plot area [x0, x1] x [y0, y1]. */
void bfit_svg_axes(FILE *f, double x0, double y0, double x1, double y1);

#endif
