/* train.c — scaffold, replaced by the real command. */
#include "node.h"

#include <stdio.h>

int cmd_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "shardnode train: not built yet\n");
    return 1;
}
