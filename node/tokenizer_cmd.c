/* tokenizer_cmd.c — scaffold, replaced by the real command. */
#include "node.h"

#include <stdio.h>

int cmd_tokenizer(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "shardnode tokenizer: not built yet\n");
    return 1;
}
