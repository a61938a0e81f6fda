/* cmd_synth.c - `muse synth`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_synth(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse synth: not implemented yet\n");
    return 1;
}
