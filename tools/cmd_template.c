/* cmd_template.c - `muse template`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_template(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse template: not implemented yet\n");
    return 1;
}
