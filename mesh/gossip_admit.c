/* gossip_admit.c — who and what the gossip view lets in (see gossip.c for
 * the SWIM state machine around it). A record enters only with an admission
 * that verifies against a member this node knows (the founder's own aside),
 * dated no earlier than its admitter's own; a name stays bound to the
 * identity that holds it; two members on one overlay address, or one name
 * admitted twice across a partition, are resolved for the older admission,
 * the same way on every node; a SUSPECT or DEAD claim counts only for the
 * incarnation of the record it accuses. Here too: admitting a JOIN's record
 * (gossip_admit, gossip_admit_check), merging a message's updates, and the
 * MAC check of frames and datagrams (gossip_frame_seal, gossip_frame_open,
 * the unauthenticated ones counted). */
#include "gossip_internal.h"

#include "keys.h"
#include "mesh_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t gossip_auth_drops(const gossip *g) { return g->auth_drops; }

/* The date of an admission this node signs: real time, but never before its
 * own admission (members refuse an admission dated more than
 * GOSSIP_ADMISSION_SKEW_MS before its admitter's, and a wall clock set back
 * must not make this node unable to admit). */
static int64_t admission_time(const gossip *g, int64_t now_ms)
{
    int64_t t = gossip_wall_now(g, now_ms), own = g->m[0]->sig.adm.at_ms;
    return t < own ? own : t;
}

/* Whether admission a (of member ka) is older than b (of kb): the earlier
 * admission time, then the lower WireGuard key. Every node decides the same. */
static bool adm_older(const gossip_admission *a, const uint8_t *ka, const gossip_admission *b,
                      const uint8_t *kb)
{
    if (a->at_ms != b->at_ms) return a->at_ms < b->at_ms;
    return memcmp(ka, kb, GOSSIP_KEY_LEN) < 0;
}

bool gossip_adm_same(const gossip_admission *a, const gossip_admission *b)
{
    return memcmp(a->by, b->by, GOSSIP_KEY_LEN) == 0 && a->at_ms == b->at_ms &&
           memcmp(a->sig, b->sig, GOSSIP_SIG_LEN) == 0;
}

#define ADMITTER_UNKNOWN (-2)

/* r's admission checks out in this view: the founder's own (the mesh id
 * derives from its identity), or signed by a member this node knows. 0, -1
 * (refused), or ADMITTER_UNKNOWN (refused for now: the admitter's record may
 * come later in the same message). */
static int check_admission(gossip *g, const gossip_record *r, const gossip_admission *a,
                           char *err, size_t errlen)
{
    if (gossip_admission_founder(r, a)) return 0;
    const gossip_member *by = NULL;
    for (size_t j = 0; j < g->n && !by; j++)
        if (!g->m[j]->displaced && memcmp(g->m[j]->rec.id_pub, a->by, GOSSIP_KEY_LEN) == 0)
            by = g->m[j];
    if (!by) {
        mesh_errf(err, errlen, "record of %s (%s): not admitted by any member this node knows "
                  "(members enter only through JOIN with an invite); dropped", r->name,
                  r->address);
        return ADMITTER_UNKNOWN;
    }
    if (!gossip_admission_verify(r, a))
        return mesh_errf(err, errlen, "record of %s (%s): its admission does not verify "
                         "(forged, or not for this name and keys); dropped", r->name,
                         r->address);
    /* Nobody admits before it was admitted itself (give or take the clocks'
     * skew): the older admission wins a collision, so a backdated one
     * could otherwise evict any member. */
    if (a->at_ms < by->sig.adm.at_ms - GOSSIP_ADMISSION_SKEW_MS)
        return mesh_errf(err, errlen, "record of %s (%s): admitted by %s at %lld ms, before %s "
                         "was admitted itself (%lld ms); dropped", r->name, r->address,
                         by->rec.name, (long long)a->at_ms, by->rec.name,
                         (long long)by->sig.adm.at_ms);
    return 0;
}

/* Whether member o still holds its name against another identity. */
static bool holds_name(const gossip_member *o, int64_t now_ms)
{
    if (o->displaced || o->state == GOSSIP_LEFT) return false;
    if (o->state == GOSSIP_DEAD) return now_ms - o->state_ms < GOSSIP_NAME_HOLD_MS;
    return true;
}

/* o loses its overlay address to an older admission: out of the view. */
static void displace(gossip *g, gossip_member *o, const gossip_record *winner,
                     const gossip_admission *wa)
{
    char by[9];
    for (int k = 0; k < 4; k++) snprintf(by + 2 * k, 3, "%02x", wa->by[k]);
    int before = (int)o->state;
    o->displaced = true;
    o->state = GOSSIP_LEFT;
    if (strcmp(o->rec.address, winner->address) == 0)
        gossip_log(g, "gossip: %s's overlay address %s is also %s's, admitted earlier (by identity "
                   "%s...): %s is out of the view (it must join again with a new WireGuard key)",
                   o->rec.name, o->rec.address, winner->name, by, o->rec.name);
    else
        gossip_log(g, "gossip: the name %s was also given to %s (%s), admitted earlier (by "
                   "identity %s...): %s (%s) is out of the view (it must join again under "
                   "another name)",
                   o->rec.name, winner->address, winner->name, by, o->rec.name, o->rec.address);
    gossip_notify(g, o, before);
}

/* A record's overlay address must be the one its WireGuard key gives. */
static int address_of_key(const gossip *g, const gossip_record *r, char *err, size_t errlen)
{
    char want[GOSSIP_ADDR_MAX];
    if (mesh_overlay_address(g->prefix, r->wg_pub, want, sizeof want, err, errlen) != 0)
        return -1;
    if (strcmp(want, r->address) != 0)
        return mesh_errf(err, errlen, "record of %s claims overlay address %s, but its key "
                         "gives %s", r->name, r->address, want);
    return 0;
}

/* A signed record (ALIVE or LEFT). Returns 0 when accepted or stale, -1
 * (or ADMITTER_UNKNOWN) when refused. */
static int apply_record(gossip *g, const gossip_signed *sig, int64_t now_ms, bool announce,
                        char *err, size_t errlen)
{
    gossip_record r;
    if (gossip_record_open(sig, &r, err, errlen) != 0) return -1;
    const gossip_member *s = self_of(g);
    if (memcmp(r.mesh_id, s->rec.mesh_id, GOSSIP_MESH_ID_LEN) != 0)
        return mesh_errf(err, errlen, "record of %s belongs to another mesh", r.name);
    if (address_of_key(g, &r, err, errlen) != 0) return -1;
    int i = gossip_find_key(g, r.wg_pub);
    if (i == 0) return 0; /* our own record relayed back: only we sign it */
    if (i > 0 && g->m[i]->displaced) return 0; /* its address belongs to an older admission */
    if (i > 0 && memcmp(g->m[i]->rec.id_pub, r.id_pub, GOSSIP_KEY_LEN) != 0)
        return mesh_errf(err, errlen, "record of %s is signed by another identity than the "
                         "member with its WireGuard key", r.name);
    /* A known member's admission, once checked, only needs checking again
     * when it changes (the name is part of what it signs). */
    if (i < 0 || !gossip_adm_same(&g->m[i]->sig.adm, &sig->adm) ||
        strcmp(g->m[i]->rec.name, r.name) != 0) {
        int rc = check_admission(g, &r, &sig->adm, err, errlen);
        if (rc != 0) return rc;
    }
    for (size_t j = 0; j < g->n; j++) {
        gossip_member *o = g->m[j];
        if ((int)j == i || o->displaced) continue;
        if (strcmp(o->rec.address, r.address) == 0) {
            bool older = adm_older(&sig->adm, r.wg_pub, &o->sig.adm, o->rec.wg_pub);
            if (j == 0) {
                if (older)
                    gossip_log(g, "gossip: this node's overlay address %s is also %s's, admitted "
                               "earlier: this node must join again with a new WireGuard key",
                               r.address, r.name);
                return mesh_errf(err, errlen, "record of %s: overlay address %s collides with "
                                 "this node's", r.name, r.address);
            }
            if (!older)
                return mesh_errf(err, errlen, "record of %s: overlay address %s collides with "
                                 "member %s's, admitted earlier; %s needs a new key", r.name,
                                 r.address, o->rec.name, r.name);
            displace(g, o, &r, &sig->adm);
            continue;
        }
        /* A name is claimed by a member's first record (or a new name); a
         * LEFT record claims nothing. */
        if (!r.left && (i < 0 || strcmp(g->m[i]->rec.name, r.name) != 0) &&
            strcmp(o->rec.name, r.name) == 0 &&
            memcmp(o->rec.id_pub, r.id_pub, GOSSIP_KEY_LEN) != 0 && holds_name(o, now_ms)) {
            /* Two admissions of one name (made on the two sides of a
             * partition): the older keeps it, everywhere alike. */
            if (j != 0 && !o->self &&
                adm_older(&sig->adm, r.wg_pub, &o->sig.adm, o->rec.wg_pub)) {
                displace(g, o, &r, &sig->adm);
                continue;
            }
            return mesh_errf(err, errlen, "record of %s: the name belongs to another member "
                             "(%s, %s)", r.name, o->rec.address, gossip_state_name(o->state));
        }
    }
    if (i < 0) {
        if (g->n >= GOSSIP_MAX_MEMBERS)
            return mesh_errf(err, errlen, "record of %s: the view is full (%d members)",
                             r.name, GOSSIP_MAX_MEMBERS);
        gossip_member *m = calloc(1, sizeof *m);
        if (!m) return mesh_errf(err, errlen, "record of %s: out of memory", r.name);
        if (gossip_mac_key(g->wg_priv, r.wg_pub, m->mac_key, err, errlen) != 0) {
            free(m);
            return -1;
        }
        m->rec = r;
        m->sig = *sig;
        m->rtt_ms = -1;
        m->state = r.left ? GOSSIP_LEFT : GOSSIP_ALIVE;
        m->state_inc = r.incarnation;
        m->state_ms = now_ms;
        g->m[g->n++] = m;
        gossip_log(g, "gossip: new member %s (%s), %s", r.name, r.address,
                   gossip_state_name(m->state));
        gossip_notify(g, m, -1);
        if (announce) gossip_broadcast(g, m);
        return 0;
    }
    gossip_member *m = g->m[i];
    if (m->state == GOSSIP_LEFT) return 0; /* leaving is for good */
    bool newer = r.incarnation > m->rec.incarnation;
    /* The same incarnation may still turn ALIVE into LEFT? No: leaving raises
     * the incarnation, so only newer records count. */
    if (!newer) return 0;
    m->rec = r;
    m->sig = *sig;
    gossip_state st = r.left ? GOSSIP_LEFT : GOSSIP_ALIVE;
    if (!r.left && (m->state == GOSSIP_SUSPECT || m->state == GOSSIP_DEAD) &&
        r.incarnation <= m->state_inc) {
        if (announce) gossip_broadcast(g, m);
        return 0; /* the claim is about this incarnation or a later one: it stands */
    }
    bool state_changes = st != m->state;
    if (state_changes || st == GOSSIP_ALIVE) {
        /* A newer record beats suspicion and death of older incarnations. */
        gossip_set_state(g, m, st, r.incarnation, now_ms);
    }
    if (announce) gossip_broadcast(g, m);
    return 0;
}

static void apply_claim(gossip *g, const gossip_update *u, int64_t now_ms)
{
    int i = gossip_find_key(g, u->wg_pub);
    if (i < 0) return; /* about someone we do not know: the sync brings the record */
    gossip_member *m = g->m[i];
    const char *what = u->state == GOSSIP_SUSPECT ? "suspect" : "dead";
    /* A claim names the incarnation of the accused's record the claimer
     * holds; it is unsigned, so it cannot say more than a record this node
     * has seen: a claim beyond the accused's latest known incarnation is
     * ignored (else one claim at 2^64-1 would outlast every refutation). */
    if (i == 0) {
        if (u->incarnation > m->rec.incarnation) {
            gossip_log(g, "gossip: %s says this node is %s at incarnation %llu, which it never "
                       "signed; ignored", u->from, what, (unsigned long long)u->incarnation);
            return;
        }
        gossip_refute(g, u->incarnation, now_ms, what, u->from);
        return;
    }
    if (m->displaced || m->state == GOSSIP_LEFT || u->incarnation != m->rec.incarnation)
        return;
    if (u->state == GOSSIP_SUSPECT) {
        if (m->state == GOSSIP_ALIVE) {
            gossip_set_state(g, m, GOSSIP_SUSPECT, u->incarnation, now_ms);
            snprintf(m->suspectors[0], MESH_NAME_MAX, "%s", u->from);
            gossip_broadcast(g, m);
        } else if (m->state == GOSSIP_SUSPECT && m->state_inc == u->incarnation) {
            for (int k = 0; k < 4; k++) {
                if (strcmp(m->suspectors[k], u->from) == 0) return;
                if (!m->suspectors[k][0]) {
                    snprintf(m->suspectors[k], MESH_NAME_MAX, "%s", u->from);
                    if (k > 0) m->confirmations++;
                    return;
                }
            }
        }
    } else if (u->state == GOSSIP_DEAD && m->state != GOSSIP_DEAD) {
        gossip_set_state(g, m, GOSSIP_DEAD, u->incarnation, now_ms);
        gossip_broadcast(g, m);
    }
}

/* Returns -1 with err when the update was refused. */
int gossip_apply_update(gossip *g, const gossip_update *u, int64_t now_ms, char *err,
                        size_t errlen)
{
    if (u->state == GOSSIP_ALIVE || u->state == GOSSIP_LEFT)
        return apply_record(g, &u->rec, now_ms, true, err, errlen);
    apply_claim(g, u, now_ms);
    return 0;
}

int gossip_merge(gossip *g, const gossip_msg *m, int64_t now_ms)
{
    int refused = 0, nlater = 0;
    char err[512];
    const char *via = g->via; /* a sync hook may merge into g while g merges */
    int *later = m->nupdates ? malloc((size_t)m->nupdates * sizeof *later) : NULL;
    g->via = m->from;
    for (int i = 0; i < m->nupdates; i++) {
        int rc = gossip_apply_update(g, &m->updates[i], now_ms, err, sizeof err);
        if (rc == ADMITTER_UNKNOWN && later) {
            later[nlater++] = i; /* its admitter may be further on */
        } else if (rc != 0) {
            gossip_log(g, "gossip: from %s: %s", m->from, err);
            refused++;
        }
    }
    /* Records whose admitter came later in the message: again, while that
     * lets more in. */
    for (bool progress = true; progress && nlater;) {
        progress = false;
        int w = 0;
        for (int k = 0; k < nlater; k++) {
            int rc = gossip_apply_update(g, &m->updates[later[k]], now_ms, err, sizeof err);
            if (rc == ADMITTER_UNKNOWN) later[w++] = later[k];
            else progress = true;
            if (rc != 0 && rc != ADMITTER_UNKNOWN) {
                gossip_log(g, "gossip: from %s: %s", m->from, err);
                refused++;
            }
        }
        nlater = w;
    }
    for (int k = 0; k < nlater; k++) {
        gossip_apply_update(g, &m->updates[later[k]], now_ms, err, sizeof err);
        gossip_log(g, "gossip: from %s: %s", m->from, err);
        refused++;
    }
    free(later);
    g->via = via;
    return refused;
}

int gossip_add_known(gossip *g, const gossip_signed *s, int64_t now_ms, char *err,
                     size_t errlen)
{
    return apply_record(g, s, now_ms, false, err, errlen) == 0 ? 0 : -1;
}

int gossip_admit_check(gossip *g, const gossip_signed *s, int64_t now_ms, char *err,
                       size_t errlen)
{
    gossip_record r;
    if (gossip_record_open(s, &r, err, errlen) != 0) return -1;
    if (self_of(g)->rec.left)
        return mesh_errf(err, errlen, "this node left the mesh; it admits nobody");
    if (memcmp(r.mesh_id, self_of(g)->rec.mesh_id, GOSSIP_MESH_ID_LEN) != 0)
        return mesh_errf(err, errlen, "record of %s belongs to another mesh", r.name);
    if (gossip_find_key(g, r.wg_pub) >= 0)
        return mesh_errf(err, errlen, "%s's WireGuard key is already a member's", r.name);
    if (address_of_key(g, &r, err, errlen) != 0) return -1;
    /* Every address the view knows, dead and left members' included: an
     * address is never handed out twice. */
    for (size_t j = 0; j < g->n; j++) {
        const gossip_member *o = g->m[j];
        if (o->displaced) continue;
        if (strcmp(o->rec.address, r.address) == 0)
            return mesh_errf(err, errlen, GOSSIP_ADDRESS_TAKEN " overlay address %s is "
                             "already %s's; the joiner draws a new WireGuard key and asks again",
                             r.address, o->rec.name);
        if (strcmp(o->rec.name, r.name) == 0 &&
            memcmp(o->rec.id_pub, r.id_pub, GOSSIP_KEY_LEN) != 0 && holds_name(o, now_ms))
            return mesh_errf(err, errlen, "record of %s: the name belongs to another member "
                             "(%s, %s); join with another --name", r.name, o->rec.address,
                             gossip_state_name(o->state));
    }
    return 0;
}

int gossip_admit(gossip *g, const gossip_signed *s, int64_t now_ms, char *err, size_t errlen)
{
    gossip_record r;
    if (gossip_admit_check(g, s, now_ms, err, errlen) != 0 ||
        gossip_record_open(s, &r, err, errlen) != 0)
        return -1;
    gossip_signed *c = malloc(sizeof *c);
    if (!c) return mesh_errf(err, errlen, "out of memory");
    *c = *s;
    int rc = gossip_admission_sign(&r, g->id_priv, admission_time(g, now_ms), &c->adm, err,
                                   errlen);
    if (rc == 0) rc = apply_record(g, c, now_ms, true, err, errlen) == 0 ? 0 : -1;
    free(c);
    return rc;
}

void gossip_auth_drop(gossip *g, int64_t now_ms, const char *fmt, ...)
{
    g->auth_drops++;
    if (g->auth_log_ms && now_ms - g->auth_log_ms < 1000) return; /* once a second at most */
    g->auth_log_ms = now_ms;
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    gossip_log(g, "gossip: %s (%llu unauthenticated so far)", line,
               (unsigned long long)g->auth_drops);
}

int gossip_frame_seal(gossip *g, const char *addr, const void *buf, size_t len,
                      uint8_t mac[GOSSIP_MAC_LEN])
{
    const gossip_member *m = gossip_peer_at(g, addr);
    if (!m) return -1;
    gossip_mac(m->mac_key, buf, len, mac);
    return 0;
}

const gossip_member *gossip_frame_open(gossip *g, const char *addr, const void *buf, size_t len,
                                       int64_t now_ms)
{
    const gossip_member *m = gossip_peer_at(g, addr);
    if (!m) {
        gossip_auth_drop(g, now_ms, "dropped a frame from %s, not a member's address", addr);
        return NULL;
    }
    if (!gossip_mac_check(m->mac_key, buf, len)) {
        gossip_auth_drop(g, now_ms, "dropped a frame from %s: its MAC does not verify with "
                         "%s's key", addr, m->rec.name);
        return NULL;
    }
    return m;
}
