/* find_int.h - `find` inside the library: its renderings (find_text.c). */
#ifndef BFIT_FIND_INT_H
#define BFIT_FIND_INT_H

#include "batch/probe.h"

#include <cjson/cJSON.h>
#include <stdio.h>

void bfit_find_text(const bfit_find_cfg *fc, const bfit_probe_result *r, FILE *f);
int bfit_find_json(const bfit_find_cfg *fc, const bfit_probe_result *r, cJSON *root);

#endif
