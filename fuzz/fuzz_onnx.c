/* fuzz_onnx.c - the ONNX reader and importer on any bytes: a file that
 * parses has every tensor converted (initializers and Constant values, the
 * sizes the reader checked), and a file that imports becomes a shape-only
 * model (every layer's shape inference) whose parameters are named. */
#include "fuzz_util.h"
#include "nn/model.h"
#include "nn/onnx.h"

static void convert_all(const bfit_onnx_model *m)
{
    for (int i = 0; i < m->ninit; i++) {
        const bfit_onnx_tensor *t = &m->init[i];
        float *f;
        int64_t *v;
        if (t->numel > (1 << 20))
            continue;
        f = malloc(sizeof *f * (size_t)(t->numel ? t->numel : 1));
        v = malloc(sizeof *v * (size_t)(t->numel ? t->numel : 1));
        if (f && v) {
            (void)bfit_onnx_tensor_f32(t, f);
            (void)bfit_onnx_tensor_i64(t, v);
        }
        free(f);
        free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    bfit_onnx_model *m = NULL;
    bfit_graph_desc g;
    bfit_model *M = NULL;

    if (bfit_onnx_parse(d, n, "fuzz.onnx", &m) == BFIT_OK)
        convert_all(m);
    bfit_onnx_model_free(m);
    /* a length for a symbolic T (an export's dynamic sequence); a fixed T keeps its own */
    if (bfit_onnx_load_buffer(d, n, "fuzz.onnx", 8, &g) != BFIT_OK)
        return 0;
    if (bfit_model_new(&g, NULL, NULL, &M) == BFIT_OK) {
        for (int i = 0; i < M->n; i++)
            for (int k = 0; k < M->nodes[i].l->nparams; k++)
                (void)bfit_model_param_name(M, i, k);
        bfit_model_free(M);
    }
    bfit_graph_fini(&g);
    return 0;
}
