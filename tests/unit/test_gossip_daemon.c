/* test_gossip_daemon.c — the daemon's side of gossip that needs no sockets:
 * the clocks it gives gossip (node/daemon/daemon.c). Every timer runs on
 * daemon_now_ms, which must be CLOCK_MONOTONIC (a wall clock set back or
 * forward must neither hold a timer back nor fire it early; unit.test_gossip's
 * scenario 19 shows the state machine on such a clock); what is signed or
 * shown uses daemon_wall_ms, real time. And the rule that withdraws an
 * invite's WireGuard peer (daemon_invite_withdrawn). */
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

/* When an invite's WireGuard peer goes (issue 12, point 6): at its expiry,
 * or DAEMON_INVITE_GRACE_S (10 s) after it was redeemed, whichever comes
 * first; both in Unix seconds as invites.json holds them. */
static void test_invite_withdrawal(void)
{
    const int64_t T = 1760000000, G = DAEMON_INVITE_GRACE_S;
    CHECK(G == 10, "the grace is %lld s; PROTOCOL.md (\"Joining\") says 10 s", (long long)G);
    daemon_invite iv = {.expires = T + 3600};
    /* Unused: kept up to the second before its expiry. */
    CHECK(!daemon_invite_withdrawn(&iv, T), "an unused invite 1 h before expiry is withdrawn");
    CHECK(!daemon_invite_withdrawn(&iv, T + 3599), "an unused invite 1 s before expiry is "
          "withdrawn");
    CHECK(daemon_invite_withdrawn(&iv, T + 3600), "an unused invite is kept at its expiry");
    CHECK(daemon_invite_withdrawn(&iv, T + 3601), "an unused invite is kept after its expiry");
    /* Redeemed at T: the JOIN_REPLY has 10 s to get out, not one more. */
    iv.used = true;
    iv.used_at = T;
    CHECK(!daemon_invite_withdrawn(&iv, T), "an invite is withdrawn the second it is redeemed "
          "(the JOIN_REPLY could not reach the joiner)");
    CHECK(!daemon_invite_withdrawn(&iv, T + G - 1), "an invite is withdrawn %lld s after it was "
          "redeemed (grace %lld s)", (long long)(G - 1), (long long)G);
    CHECK(daemon_invite_withdrawn(&iv, T + G), "a redeemed invite is kept at the end of its "
          "grace (its holder would reach this node's services)");
    CHECK(daemon_invite_withdrawn(&iv, T + G + 1), "a redeemed invite is kept after its grace");
    CHECK(daemon_invite_withdrawn(&iv, T + 3599), "a redeemed invite is kept until its expiry");
    /* Expiry inside the grace: expiry wins. */
    iv.expires = T + 5;
    CHECK(!daemon_invite_withdrawn(&iv, T + 4), "a redeemed invite 1 s before its expiry (inside "
          "the grace) is withdrawn");
    CHECK(daemon_invite_withdrawn(&iv, T + 5), "a redeemed invite is kept past its expiry "
          "because the grace had not ended");
    /* The wall clock set back after the redemption: withdrawn at once, not
     * kept until the clock catches up (an hour later here). */
    iv.expires = T + 86400;
    CHECK(daemon_invite_withdrawn(&iv, T - 1), "a redeemed invite is kept when the clock reads "
          "before its used_at (set back)");
    CHECK(daemon_invite_withdrawn(&iv, T - 3600), "a redeemed invite is kept for the hour the "
          "clock was set back");
    /* Used, with no time recorded (used_at 0): gone. */
    iv.used_at = 0;
    CHECK(daemon_invite_withdrawn(&iv, T), "a used invite without used_at is kept");
    printf("invites: an unused invite goes at its expiry; a redeemed one %lld s after "
           "redemption or at expiry, whichever is first, and at once when the clock reads "
           "before its redemption\n", (long long)G);
}

int main(void)
{
    test_clocks();
    test_invite_withdrawal();
    fflush(stdout);
    if (failures) {
        fprintf(stderr, "test_gossip_daemon: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_gossip_daemon: ok\n");
    return 0;
}
