/* cmd_tokenize.c - `muse tokenize`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse tokenize: not implemented yet\n");
    return 1;
}
