/* kdev_fake_backend.c — a shared object that calls itself a CUDA backend of
 * another ABI version, so test_kdev can check that a stale backend beside a
 * newer binary is refused by name instead of called through a wrong table. */
#include "kdev_backend.h"

__attribute__((visibility("default"))) const kdev_backend *shardnode_kdev_backend(void);

static const kdev_backend fake = {.abi = KDEV_ABI + 1000, .vendor = "cuda"};

const kdev_backend *shardnode_kdev_backend(void) { return &fake; }
