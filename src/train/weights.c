/* weights.c - saving and loading a model's parameters as safetensors. */
#include "base/err.h"
#include "base/text.h"
#include "tensor/safetensors.h"
#include "train/weights.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef bfit_wparam named;

/* The parameters with their file names, in model order; a tied head's
 * weight is its embedding's table, in the file once under the table's name. */
static int list_params(const bfit_model *M, named **out, int *n)
{
    named *v = calloc((size_t)M->nparams + 1, sizeof *v);
    int k = 0;
    if (!v)
        return bfit_fail(BFIT_ENOMEM, "weights: out of host memory");
    for (int i = 0; i < M->n; i++)
        for (int j = 0; j < M->nodes[i].l->nparams; j++) {
            if (M->nodes[i].l->params[j].shared)
                continue;
            if (bfit_model_param_name(M, i, j)) /* a model file's (PyTorch's state_dict name) */
                snprintf(v[k].name, sizeof v[k].name, "%s", bfit_model_param_name(M, i, j));
            else
                snprintf(v[k].name, sizeof v[k].name, "%d.%s", M->nodes[i].id, M->nodes[i].l->params[j].name);
            v[k].p = &M->nodes[i].l->params[j];
            v[k].ndim = bfit_model_param_dims(M, i, j, v[k].dim);
            k++;
        }
    *out = v;
    *n = k;
    return BFIT_OK;
}

int bfit_weights_save(const bfit_model *M, const char *path, const char *const *meta_keys,
                      const char *const *meta_vals, int nmeta)
{
    bfit_st_write_opts o = {1, NULL, NULL};
    return bfit_weights_save_ex(M, path, NULL, 0, meta_keys, meta_vals, nmeta, &o);
}

int bfit_weights_save_ex(const bfit_model *M, const char *path, const bfit_st_tensor *extra, int nextra,
                         const char *const *meta_keys, const char *const *meta_vals, int nmeta,
                         const bfit_st_write_opts *o)
{
    named *v;
    bfit_st_tensor *t;
    char *host = NULL;
    uint64_t off = 0;
    int n, rc;

    rc = list_params(M, &v, &n);
    if (rc != BFIT_OK)
        return rc;
    t = calloc((size_t)n + (size_t)nextra + 1, sizeof *t);
    host = malloc(M->param_bytes ? (size_t)M->param_bytes : 1);
    if (!t || !host) {
        rc = bfit_fail(BFIT_ENOMEM, "weights: out of host memory");
        goto out;
    }
    /* the device's parameters come to the host, then go to the file */
    for (int i = 0; i < n && rc == BFIT_OK; i++) {
        t[i].name = v[i].name;
        t[i].dtype = "F32";
        t[i].ndim = v[i].ndim;
        for (int d = 0; d < v[i].ndim; d++)
            t[i].shape[d] = v[i].dim[d];
        t[i].data = host + off;
        t[i].nbytes = bfit_param_bytes(v[i].p);
        rc = bfit_device_download(M->dev, host + off, v[i].p->data, t[i].nbytes);
        off += BFIT_ALIGN_UP(t[i].nbytes);
    }
    for (int i = 0; i < nextra; i++)
        t[n + i] = extra[i];
    if (rc == BFIT_OK)
        rc = bfit_st_write_ex(path, t, n + nextra, meta_keys, meta_vals, nmeta, o);
out:
    free(host);
    free(t);
    free(v);
    return rc;
}

int bfit_weights_list(const bfit_model *M, bfit_wparam **out, int *n) { return list_params(M, out, n); }

int bfit_weights_ckpt_tensor(const char *name)
{
    return !strncmp(name, BFIT_OPTIM_PREFIX, strlen(BFIT_OPTIM_PREFIX)) ||
           !strncmp(name, BFIT_GRADPREV_PREFIX, strlen(BFIT_GRADPREV_PREFIX));
}

/* Every tensor to f32 on the host, each value checked finite, then all
 * uploaded: a bad file leaves the model as it was. */
static int convert_and_upload(bfit_model *M, const bfit_st_file *f, const char *path, const named *v, int n)
{
    float *host = malloc(M->param_bytes ? (size_t)M->param_bytes : 1);
    uint64_t off = 0;
    int rc = host ? BFIT_OK : bfit_fail(BFIT_ENOMEM, "weights: out of host memory");

    for (int i = 0; i < n && rc == BFIT_OK; i++) {
        int64_t cnt = bfit_param_numel(v[i].p);
        float *h = (float *)((char *)host + off);
        if ((rc = bfit_st_to_f32(bfit_st_find(f, v[i].name), h, cnt)) != BFIT_OK)
            rc = bfit_fail_prefix(rc, "%s: ", path);
        for (int64_t j = 0; rc == BFIT_OK && j < cnt; j++)
            if (!isfinite(h[j]))
                rc = bfit_fail(BFIT_EFORMAT, "%s: tensor '%s' holds %g at index %lld: the weights are not usable "
                                             "(a run that diverged?)", path, v[i].name, (double)h[j], (long long)j);
        off += BFIT_ALIGN_UP(bfit_param_bytes(v[i].p));
    }
    off = 0;
    for (int i = 0; i < n && rc == BFIT_OK; i++) {
        rc = bfit_device_upload(M->dev, v[i].p->data, (char *)host + off, bfit_param_bytes(v[i].p));
        off += BFIT_ALIGN_UP(bfit_param_bytes(v[i].p));
    }
    free(host);
    return rc == BFIT_OK ? bfit_model_refresh_copies(M) : rc;
}

int bfit_weights_load(bfit_model *M, const char *path)
{
    bfit_st_file *f = NULL;
    int rc = bfit_st_read(path, &f);
    if (rc == BFIT_OK)
        rc = bfit_weights_load_from(M, f, path);
    bfit_st_free(f);
    return rc;
}

/* Every parameter of v has its tensor in f, of its shape and a float type,
 * and f has no other parameters. */
static int check_tensors(const named *v, int n, const bfit_st_file *f, const char *path)
{
    int nfile = 0;

    for (int i = 0; i < n; i++) {
        const bfit_st_tensor *t = bfit_st_find(f, v[i].name);
        if (!t)
            return bfit_fail(BFIT_EFORMAT, "%s: tensor '%s' is missing: the weights are for another model", path,
                             v[i].name);
        if (t->ndim != v[i].ndim || bfit_st_numel(t) != bfit_param_numel(v[i].p)) {
            char a[96], b[96];
            return bfit_fail(BFIT_EFORMAT, "%s: tensor '%s' is %s, the model wants %s: the weights are for another "
                             "model", path, v[i].name, bfit_dims_str(t->shape, t->ndim, " x ", a, sizeof a),
                             bfit_dims_str(v[i].dim, v[i].ndim, " x ", b, sizeof b));
        }
        if (!bfit_st_is_float(t))
            return bfit_fail(BFIT_EFORMAT, "%s: tensor '%s' is %s, an integer type: a parameter's weights are "
                             "floating point (F32, F64, F16 or BF16)", path, v[i].name, t->dtype);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] != v[i].dim[d])
                return bfit_fail(BFIT_EFORMAT, "%s: tensor '%s' dimension %d is %lld, the model wants %lld: the "
                                 "weights are for another model", path, v[i].name, d, (long long)t->shape[d],
                                 (long long)v[i].dim[d]);
    }
    for (int i = 0; i < bfit_st_count(f); i++)
        nfile += !bfit_weights_ckpt_tensor(bfit_st_get(f, i)->name);
    if (nfile == n)
        return BFIT_OK;
    for (int i = 0; i < bfit_st_count(f); i++) {
        const char *name = bfit_st_get(f, i)->name;
        int found = bfit_weights_ckpt_tensor(name);
        for (int j = 0; j < n && !found; j++)
            found = strcmp(name, v[j].name) == 0;
        if (!found)
            return bfit_fail(BFIT_EFORMAT, "%s: tensor '%s' is not a parameter of this model", path, name);
    }
    return BFIT_OK;
}

int bfit_weights_check_from(const bfit_model *M, const bfit_st_file *f, const char *path)
{
    named *v = NULL;
    int n, rc = list_params(M, &v, &n);

    if (rc == BFIT_OK)
        rc = check_tensors(v, n, f, path);
    free(v);
    return rc;
}

int bfit_weights_load_from(bfit_model *M, const bfit_st_file *f, const char *path)
{
    named *v = NULL;
    int n, rc = list_params(M, &v, &n);

    /* check everything before touching the model */
    if (rc == BFIT_OK && (rc = check_tensors(v, n, f, path)) == BFIT_OK)
        rc = convert_and_upload(M, f, path, v, n);
    free(v);
    return rc;
}

int bfit_norm_to_text(const float *v, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf + used, len - used, "%s%.9g", i ? "," : "", (double)v[i]);
        if (w < 0 || (size_t)w >= len - used)
            return bfit_fail(BFIT_EINVAL, "normalisation statistics of %d channels do not fit the metadata", n);
        used += (size_t)w;
    }
    return BFIT_OK;
}

/* How many numbers a well-formed comma-separated list holds (-1: not one) */
static int count_floats(const char *text)
{
    int k = 0;
    for (const char *p = text;; p++) {
        char *end;
        (void)strtod(p, &end);
        if (end == p)
            return -1;
        k++;
        if (*end == '\0')
            return k;
        if (*end != ',')
            return -1;
        p = end;
    }
}

static int parse_floats(const char *path, const char *key, const char *text, int n, float *out)
{
    const char *p = text;
    int k = count_floats(text);
    if (k > 0 && k != n) /* whole, but for another input: the likeliest cause is another model's weights */
        return bfit_fail(BFIT_EFORMAT, "%s: its normalisation (metadata '%s') is for %d input channel%s, the model "
                         "takes %d: are the weights for another model?", path, key, k, k == 1 ? "" : "s", n);
    for (int i = 0; i < n; i++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || (i < n - 1 && *end != ',') || (i == n - 1 && *end != '\0'))
            return bfit_fail(BFIT_EFORMAT, "%s: metadata '%s' should hold %d comma-separated numbers: '%s'", path, key,
                             n, text);
        if (!isfinite(v) || !isfinite((float)v))
            return bfit_fail(BFIT_EFORMAT, "%s: metadata '%s' value %d is %.*s, not a finite float", path, key, i + 1,
                             (int)(end - p), p);
        out[i] = (float)v;
        p = end + 1;
    }
    return BFIT_OK;
}

int bfit_weights_read_norm(const char *path, int n, float *mean, float *std, int *found)
{
    bfit_st_file *f = NULL;
    const char *m, *s;
    int rc = bfit_st_read(path, &f);

    *found = 0;
    if (rc != BFIT_OK)
        return rc;
    if ((m = bfit_st_meta(f, "normalize")) && !strcmp(m, "none")) {
        *found = -1;
        bfit_st_free(f);
        return BFIT_OK;
    }
    m = bfit_st_meta(f, "normalize_mean");
    s = bfit_st_meta(f, "normalize_std");
    if (m && s) {
        rc = parse_floats(path, "normalize_mean", m, n, mean);
        if (rc == BFIT_OK)
            rc = parse_floats(path, "normalize_std", s, n, std);
        for (int i = 0; rc == BFIT_OK && i < n; i++)
            if (!(std[i] > 0))
                rc = bfit_fail(BFIT_EFORMAT, "%s: normalize_std[%d] is %g, not positive", path, i, (double)std[i]);
        *found = rc == BFIT_OK;
    }
    bfit_st_free(f);
    return rc;
}

/* The names into one allocation: the pointers, then the strings. */
static int copy_names(const cJSON *a, char ***names, int *n)
{
    const cJSON *it;
    size_t len = 0;
    int k = 0, count = cJSON_GetArraySize(a);
    char *p;

    cJSON_ArrayForEach(it, a)
        len += strlen(it->valuestring) + 1;
    if (!(*names = malloc(sizeof **names * (size_t)(count ? count : 1) + len)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory for class names");
    p = (char *)(*names + (count ? count : 1));
    cJSON_ArrayForEach(it, a) {
        (*names)[k++] = p;
        p = stpcpy(p, it->valuestring) + 1;
    }
    *n = count;
    return BFIT_OK;
}

int bfit_weights_read_classes(const char *path, char ***names, int *n)
{
    bfit_st_file *f = NULL;
    const char *m;
    cJSON *a = NULL, *it;
    int rc = bfit_st_read(path, &f);

    *names = NULL, *n = 0;
    if (rc != BFIT_OK || !(m = bfit_st_meta(f, "classes"))) {
        bfit_st_free(f);
        return rc;
    }
    a = cJSON_Parse(m);
    rc = cJSON_IsArray(a) ? BFIT_OK : BFIT_EFORMAT;
    if (rc == BFIT_OK)
        cJSON_ArrayForEach(it, a)
            rc = cJSON_IsString(it) ? rc : BFIT_EFORMAT;
    if (rc != BFIT_OK)
        rc = bfit_fail(BFIT_EFORMAT, "%s: metadata 'classes' should be a JSON array of class names: '%.80s'", path,
                       m);
    else
        rc = copy_names(a, names, n);
    cJSON_Delete(a);
    bfit_st_free(f);
    return rc;
}
