/* rand_fixture.h — seeded uniform floats in [-1, 1) for unit tests
 * (xorshift64; each test file has its own state and seed). */
#ifndef SHARDNODE_TEST_RAND_FIXTURE_H
#define SHARDNODE_TEST_RAND_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

/* n such floats in a new array (at least one element: n may be 0). */
static float *rnd(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

#endif
