/* cmd_run.c - `muse run`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse run: not implemented yet\n");
    return 1;
}
