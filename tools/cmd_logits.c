/* cmd_logits.c - `muse logits`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_logits(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse logits: not implemented yet\n");
    return 1;
}
