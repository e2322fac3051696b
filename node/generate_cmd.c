/* generate_cmd.c — scaffold, replaced by the real command. */
#include "node.h"

#include <stdio.h>

int cmd_generate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "shardnode generate: not built yet\n");
    return 1;
}
