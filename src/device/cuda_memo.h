/* cuda_memo.h - a device's memory of the algorithms it chose for an op's
 * shapes. A plan asks the device for the same convolution again and again:
 * many of ResNet-50's 53 convolutions share a shape, and every
 * search for the largest micro-batch plans the same sizes for each way. On
 * a GPU each ask is cuDNN's heuristics and workspace queries: `plan --ways`
 * took 72-79 s on the H200 of run 4, making about 21,000 convolution ops
 * (counted on the CPU) of which 8,556 differ. Remembered, an ask is a
 * lookup. Fixed size, least recently used out, no allocation. */
#ifndef BFIT_CUDA_MEMO_H
#define BFIT_CUDA_MEMO_H

#include "device/device.h"

#include <stddef.h>
#include <stdint.h>

#define CUDA_MEMO 4096     /* entries, */
#define CUDA_MEMO_WAYS 8   /* in sets of this many */

typedef struct cuda_memo_key {
    int64_t v[16]; /* kind, dtype, then the op's sizes (cuda_memo_key_conv) */
} cuda_memo_key;

typedef struct cuda_memo {
    struct {
        cuda_memo_key key;
        uint64_t used; /* 0: empty */
        int algo;
        size_t ws;
    } e[CUDA_MEMO];
    uint64_t tick;
    uint64_t hits, misses;
} cuda_memo;

/* The key of a convolution: everything its algorithm can depend on. */
void cuda_memo_key_conv(const bfit_op_desc *d, cuda_memo_key *k);
/* 1 with *algo and *ws when k was put before, else 0. */
int cuda_memo_find(cuda_memo *m, const cuda_memo_key *k, int *algo, size_t *ws);
void cuda_memo_put(cuda_memo *m, const cuda_memo_key *k, int algo, size_t ws);

#endif
