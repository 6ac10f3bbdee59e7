/* auto.c - `--batch auto` from a C program with every other default left
 * to the library: the effective batch and the micro-batch are chosen, and
 * re-chosen while training, for goodput; the learning rate follows. The
 * batch changes arrive as events (each a line of JSON).
 *
 *   cc auto.c $(pkg-config --cflags --libs batchfit) -o auto
 *   ./auto [SAMPLES_PER_EPOCH]
 */
#include <batchfit.h>

#include <stdio.h>
#include <string.h>

/* Every event the run logs; this program shows the batch changes. */
static void on_event(void *ud, const char *json)
{
    (void)ud;
    if (strstr(json, "\"event\":\"batch_change\"") || strstr(json, "\"event\":\"start\""))
        printf("%.160s%s\n", json, strlen(json) > 160 ? " ..." : "");
}

int main(int argc, char **argv)
{
    bfit_config *c = bfit_config_new();
    bfit_result *res = NULL;

    if (!c || bfit_config_set(c, "model", "mlp") != BFIT_OK || bfit_config_set(c, "batch", "auto") != BFIT_OK ||
        (argc > 1 && bfit_config_set(c, "epoch-samples", argv[1]) != BFIT_OK)) {
        fprintf(stderr, "auto: %s\n", bfit_errmsg());
        return 1;
    }
    bfit_config_set_callbacks(c, NULL, NULL, NULL, on_event, NULL);
    if (bfit_train(c, &res) != BFIT_OK) {
        fprintf(stderr, "auto: %s\n", bfit_errmsg());
        bfit_result_free(res);
        bfit_config_free(c);
        return 1;
    }
    bfit_result_print(res, stdout); /* what `batchfit train` prints */
    printf("last batch %.0f, micro-batch %.0f, %.0f batch changes\n", bfit_result_number(res, "batch"),
           bfit_result_number(res, "micro_batch"), bfit_result_number(res, "batch_changes"));
    bfit_result_free(res);
    bfit_config_free(c);
    return 0;
}
