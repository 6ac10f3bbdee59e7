/* ttok.h - a source of token sequences for tests (a bfit_source): n
 * sequences of seq ids; sequence i has len(i) = lo + (i * mul) % mod real
 * tokens (all seq with full) of the pattern (i + j) % vocab, each labelled
 * with the next id, then padding (id 0, label -1). The same every epoch. */
#ifndef BFIT_TTOK_H
#define BFIT_TTOK_H

#include "internal.h"

typedef struct ttok {
    int64_t n;               /* sequences */
    int seq, vocab;          /* ids per sequence (T), and the ids are below vocab */
    int lo, mul, mod;        /* the lengths */
    int full;                /* every sequence all seq long */
    int64_t next;            /* the cursor */
} ttok;

/* Real tokens of sequence i. */
int ttok_len(const ttok *s, int64_t i);
/* s as a bfit_source (s must outlive it). */
bfit_source ttok_source(ttok *s);

/* A small token model's spec: two pre-norm blocks and a tied head, every
 * kind of the token presets (embed, layernorm, linear, attention, gelu). */
extern const char *const ttok_tied_spec;

#endif
