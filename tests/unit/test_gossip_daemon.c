/* test_gossip_daemon.c — the daemon's side of gossip that needs no sockets:
 * the clocks it gives gossip (node/daemon.c). Every timer runs on
 * daemon_now_ms, which must be CLOCK_MONOTONIC (a wall clock set back or
 * forward must neither hold a timer back nor fire it early; unit.test_gossip's
 * scenario 19 shows the state machine on such a clock); what is signed or
 * shown uses daemon_wall_ms, real time. */
#include "daemon_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"

static int64_t clock_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t dist(int64_t a, int64_t b)
{
    return a > b ? a - b : b - a;
}

static void test_clocks(void)
{
    /* Read the reference clocks around each daemon clock: a busy machine
     * may pause between the reads, never make them disagree by seconds. */
    int64_t m0 = clock_ms(CLOCK_MONOTONIC), now = daemon_now_ms(),
            m1 = clock_ms(CLOCK_MONOTONIC);
    int64_t w0 = clock_ms(CLOCK_REALTIME), wall = daemon_wall_ms(),
            w1 = clock_ms(CLOCK_REALTIME);
    CHECK(now >= m0 && now <= m1,
          "daemon_now_ms() = %lld is not CLOCK_MONOTONIC (%lld..%lld ms): the daemon's timers "
          "would follow a wall clock that is set back or forward",
          (long long)now, (long long)m0, (long long)m1);
    CHECK(wall >= w0 && wall <= w1, "daemon_wall_ms() = %lld is not CLOCK_REALTIME (%lld..%lld)",
          (long long)wall, (long long)w0, (long long)w1);
    /* The two clocks differ here by the time since boot's epoch: unless
     * this machine's wall clock reads 1970, a mix-up shows. */
    CHECK(dist(wall, now) > 1000, "the daemon's monotonic and wall clocks agree (%lld ms)",
          (long long)now);
    printf("clocks: daemon_now_ms is CLOCK_MONOTONIC (%lld ms), daemon_wall_ms is "
           "CLOCK_REALTIME (%lld ms)\n", (long long)now, (long long)wall);
}

int main(void)
{
    test_clocks();
    fflush(stdout);
    if (failures) {
        fprintf(stderr, "test_gossip_daemon: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_daemon: ok\n");
    return 0;
}
