/* result.c - the public result: a JSON object a command fills, read whole or
 * by path, and the text for people the command wrote beside it. */
#include "api/result.h"
#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bfit_result *bfit_result_make(void)
{
    bfit_result *r = calloc(1, sizeof *r);
    if (!r || !(r->root = cJSON_CreateObject())) {
        free(r);
        bfit_fail(BFIT_ENOMEM, "out of host memory for a result");
        return NULL;
    }
    r->tf = open_memstream(&r->text, &r->tlen);
    return r;
}

FILE *bfit_result_out(bfit_result *r) { return r ? r->tf : NULL; }

void bfit_result_close(bfit_result *r)
{
    if (r && r->tf) {
        fclose(r->tf);
        r->tf = NULL;
    }
}

void bfit_result_free(bfit_result *r)
{
    if (!r)
        return;
    bfit_result_close(r);
    cJSON_Delete(r->root);
    cJSON_free(r->json);
    free(r->text);
    free(r);
}

const char *bfit_result_json(const bfit_result *r)
{
    bfit_result *w = (bfit_result *)r; /* the rendering is a cache */
    if (!r)
        return NULL;
    if (!w->json)
        w->json = cJSON_PrintUnformatted(r->root);
    return w->json;
}

/* The item at a dotted path: object keys, and array indices as numbers. */
static const cJSON *at(const bfit_result *r, const char *path)
{
    char key[128];
    const cJSON *o = r ? r->root : NULL;
    const char *p = path;

    while (o && p && *p) {
        size_t n = strcspn(p, ".");
        if (n >= sizeof key)
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        if (cJSON_IsArray(o)) {
            char *end;
            long i = strtol(key, &end, 10);
            o = *end || n == 0 ? NULL : cJSON_GetArrayItem(o, (int)i);
        } else {
            o = cJSON_GetObjectItemCaseSensitive(o, key);
        }
        p += n + (p[n] == '.');
    }
    return o;
}

double bfit_result_number(const bfit_result *r, const char *path)
{
    const cJSON *o = at(r, path);
    if (cJSON_IsNumber(o))
        return o->valuedouble;
    if (cJSON_IsBool(o))
        return cJSON_IsTrue(o) ? 1.0 : 0.0;
    return NAN;
}

const char *bfit_result_string(const bfit_result *r, const char *path)
{
    const cJSON *o = at(r, path);
    return cJSON_IsString(o) ? o->valuestring : NULL;
}

int bfit_result_print(const bfit_result *r, FILE *f)
{
    if (!r || !f)
        return bfit_fail(BFIT_EINVAL, "bfit_result_print needs a result and a stream");
    if (r->tf)
        fflush(r->tf);
    if (r->text && r->tlen && fwrite(r->text, 1, r->tlen, f) != r->tlen)
        return bfit_fail(BFIT_EIO, "cannot write the result's text");
    return BFIT_OK;
}
