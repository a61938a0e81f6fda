/* cmd_info.c - `muse info`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse info: not implemented yet\n");
    return 1;
}
