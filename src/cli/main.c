/* main.c - placeholder until the CLI lands. */
#include "batchfit.h"
#include <stdio.h>
int main(void) { puts("batchfit"); return 0; }
