/* cmd_chat.c - `muse chat`. (placeholder until its issue lands) */
#include <stdio.h>

#include "cli.h"

int cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "muse chat: not implemented yet\n");
    return 1;
}
