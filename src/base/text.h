/* text.h - small formatting helpers shared by reports: numbers for people,
 * and text made safe for XML/HTML and JSON. */
#ifndef BFIT_TEXT_H
#define BFIT_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* 1863690 -> "1,863,690" (rounded to a whole number). Returns buf. */
const char *bfit_thousands(double v, char *buf, size_t n);
/* "850 us", "12.34 ms", "1.50 s". Returns buf. */
const char *bfit_format_secs(double s, char *buf, size_t n);
/* A duration for people: "45 s", "3 min 05 s", "1 h 02 min". */
const char *bfit_format_duration(double s, char *buf, size_t n);
/* Write s with &, <, >, " escaped. */
void bfit_xml_text(FILE *f, const char *s);
/* s as the inside of a JSON string into buf (truncated to fit). Returns buf. */
const char *bfit_json_escape(const char *s, char *buf, size_t n);
/* Length of the well-formed UTF-8 sequence at u, before end (1 for ASCII;
 * no overlongs, surrogates or code points past U+10FFFF), 0 if there is
 * none; *cp gets the code point. */
int bfit_utf8_len(const unsigned char *u, const unsigned char *end, unsigned *cp);
/* A shape for a message, its n dimensions joined by sep: "[2,3]", "[2 x 3]".
 * Returns buf. */
const char *bfit_dims_str(const int64_t *d, int n, const char *sep, char *buf, size_t len);

#endif
