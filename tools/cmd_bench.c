/* cmd_bench.c - `muse bench`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse bench: not implemented yet\n");
    return 1;
}
