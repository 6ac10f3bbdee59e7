/* result.h - the public result object's insides: a JSON tree the command
 * fills, and the text for people it writes through a stream. */
#ifndef BFIT_RESULT_H
#define BFIT_RESULT_H

#include "batchfit.h"

#include <cjson/cJSON.h>
#include <stdio.h>

struct bfit_result {
    cJSON *root;     /* an object */
    char *json;      /* its one-line rendering, made when asked */
    char *text;      /* what the command line prints */
    size_t tlen;
    FILE *tf;        /* the stream text is written through, until closed */
};

/* A result with an empty object and an open text stream; NULL (message
 * set) if out of host memory. */
bfit_result *bfit_result_make(void);
/* The stream the text goes to (NULL if it could not be opened: the text is
 * then lost, the JSON kept). */
FILE *bfit_result_out(bfit_result *r);
/* Close the text stream (before handing the result out). */
void bfit_result_close(bfit_result *r);

#endif
