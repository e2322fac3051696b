/* fuzz_gossip.c — libFuzzer target for what a node reads on its gossip port:
 * one UDP datagram, or one TCP frame's payload, decoded with gossip_decode
 * (mesh/gossip_wire.c). Anyone who reaches the overlay can send these.
 *
 * The input is copied into a heap block of exactly its size, so ASan sees
 * any read past it, and freed before the decoded message is used, so a
 * message that pointed into it would be a use after free.
 *
 * Beyond "no crash, no leak, refusals with a message and an all-zero
 * message": every message the decoder accepts must be one the encoder
 * accepts, must decode back to the same message and encode to the same
 * bytes twice. Every ALIVE/LEFT record it carries is opened (it usually
 * fails the signature, which is fine). A record whose bytes parse is then
 * signed by a fixed key (RFC 8032 test 1's; the seed records name it as
 * their "id"), so the checks behind the signature are reached too: a record
 * that opens must re-sign with our encoder and open to the same record. The
 * input is also tried as a record on its own, which fuzzes the record
 * decoder directly (the seed corpus has bare records too). The checks cover
 * every field: the record's job text, FETCH's path and offset, and
 * FETCH_REPLY's offset, total and data (a block of its own, within
 * GOSSIP_FETCH_CHUNK and within total). */
#include "fuzz_util.h"
#include "keys.h"
#include "mesh.h"

#define T "fuzz_gossip"

/* RFC 8032 test 1's secret key. */
static const uint8_t SIGNER_PRIV[32] = FUZZ_RFC8032_TEST1_PRIV;

static int is_zero(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static int same_update(const gossip_update *a, const gossip_update *b)
{
    if (a->state != b->state)
        return 0;
    if (a->state == GOSSIP_ALIVE || a->state == GOSSIP_LEFT)
        return a->rec.len == b->rec.len && memcmp(a->rec.bytes, b->rec.bytes, a->rec.len) == 0 &&
               memcmp(a->rec.sig, b->rec.sig, GOSSIP_SIG_LEN) == 0 &&
               memcmp(a->rec.adm.by, b->rec.adm.by, GOSSIP_KEY_LEN) == 0 &&
               a->rec.adm.at_ms == b->rec.adm.at_ms &&
               memcmp(a->rec.adm.sig, b->rec.adm.sig, GOSSIP_SIG_LEN) == 0;
    return memcmp(a->wg_pub, b->wg_pub, GOSSIP_KEY_LEN) == 0 &&
           a->incarnation == b->incarnation && strcmp(a->from, b->from) == 0;
}

static int same_msg(const gossip_msg *a, const gossip_msg *b)
{
    int ok = a->type == b->type && a->version == b->version &&
             memcmp(a->mesh_id, b->mesh_id, GOSSIP_MESH_ID_LEN) == 0 &&
             strcmp(a->from, b->from) == 0 && a->seq == b->seq && a->flags == b->flags &&
             strcmp(a->target, b->target) == 0 && a->target_port == b->target_port &&
             strcmp(a->observed, b->observed) == 0 &&
             memcmp(a->secret, b->secret, GOSSIP_SECRET_LEN) == 0 && a->ok == b->ok &&
             strcmp(a->reason, b->reason) == 0 && a->nupdates == b->nupdates &&
             strcmp(a->path, b->path) == 0 && a->offset == b->offset && a->total == b->total &&
             a->data_len == b->data_len &&
             (!a->data_len || memcmp(a->data, b->data, a->data_len) == 0) &&
             memcmp(a->punch_from, b->punch_from, GOSSIP_KEY_LEN) == 0 &&
             memcmp(a->punch_to, b->punch_to, GOSSIP_KEY_LEN) == 0 && a->punch_n == b->punch_n &&
             memcmp(a->punch_mac, b->punch_mac, GOSSIP_PUNCH_MAC_LEN) == 0;
    for (int i = 0; ok && i < a->nupdates; i++)
        ok = same_update(&a->updates[i], &b->updates[i]);
    return ok;
}

static int same_record(const gossip_record *a, const gossip_record *b)
{
    int ok = memcmp(a->mesh_id, b->mesh_id, GOSSIP_MESH_ID_LEN) == 0 &&
             strcmp(a->name, b->name) == 0 && memcmp(a->wg_pub, b->wg_pub, GOSSIP_KEY_LEN) == 0 &&
             memcmp(a->id_pub, b->id_pub, GOSSIP_KEY_LEN) == 0 &&
             strcmp(a->address, b->address) == 0 && a->port == b->port &&
             a->incarnation == b->incarnation && a->left == b->left &&
             a->nendpoints == b->nendpoints && strcmp(a->software, b->software) == 0 &&
             a->protocol == b->protocol && a->mem_free == b->mem_free &&
             strcmp(a->devices, b->devices) == 0 && a->signed_ms == b->signed_ms &&
             a->nat == b->nat && strcmp(a->job, b->job) == 0;
    for (int i = 0; ok && i < a->nendpoints; i++)
        ok = strcmp(a->endpoints[i], b->endpoints[i]) == 0;
    return ok;
}

static void check_opened(const gossip_record *r)
{
    fuzz_require(r->left <= 1 && r->port != 0, T, "opened record out of bounds", r->name);
    fuzz_require(r->nendpoints >= 0 && r->nendpoints <= GOSSIP_MAX_ENDPOINTS, T,
                 "opened record with endpoint count", r->name);
    fuzz_require(memchr(r->job, 0, GOSSIP_JOB_MAX) != NULL, T,
                 "opened record's job text unterminated", r->name);
    uint8_t pub[KEYS_LEN];
    char err[256];
    fuzz_require(keys_ed25519_public(SIGNER_PRIV, pub, err, sizeof err) == 0, T, "signer key", err);
    if (memcmp(pub, r->id_pub, KEYS_LEN) != 0)
        return; /* someone else's genuine record: we cannot re-sign it */
    gossip_signed again;
    fuzz_require(gossip_record_sign(r, SIGNER_PRIV, &again, err, sizeof err) == 0, T,
                 "opened a record the encoder refuses", err);
    gossip_record back;
    fuzz_require(gossip_record_open(&again, &back, err, sizeof err) == 0, T,
                 "re-signed record does not open", err);
    fuzz_require(same_record(r, &back), T, "record changed in a re-sign", r->name);
}

static void check_record(const gossip_signed *s)
{
    gossip_record r;
    char err[256];
    memset(err, 'x', sizeof err);
    if (gossip_record_open(s, &r, err, sizeof err) == 0) {
        check_opened(&r);
        return;
    }
    fuzz_check_message(T, err, sizeof err);
    fuzz_require(is_zero(&r, sizeof r), T, "refused record left fields set", err);
    if (!strstr(err, "signature does not verify"))
        return;
    /* The bytes parse: sign them with the fixed key. */
    gossip_signed t = *s;
    fuzz_require(keys_sign(SIGNER_PRIV, t.bytes, t.len, t.sig, err, sizeof err) == 0, T, "sign",
                 err);
    memset(err, 'x', sizeof err);
    if (gossip_record_open(&t, &r, err, sizeof err) == 0) {
        check_opened(&r);
        return;
    }
    fuzz_check_message(T, err, sizeof err);
    fuzz_require(strstr(err, "signature does not verify") != NULL, T,
                 "record refused for another reason once signed", err);
}

static uint8_t scratch[2][GOSSIP_TCP_MAX];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The transport never hands over more than a TCP frame's payload. */
    if (size > GOSSIP_TCP_MAX)
        return 0;

    /* The input as a bare record. */
    if (size <= GOSSIP_RECORD_MAX) {
        gossip_signed s;
        memset(&s, 0, sizeof s);
        memcpy(s.bytes, data, size);
        s.len = size;
        check_record(&s);
    }

    uint8_t *copy = fuzz_copy(data, size);
    gossip_msg m;
    char err[256];
    memset(err, 'x', sizeof err);
    int rc = gossip_decode(copy, size, &m, err, sizeof err);
    free(copy);
    if (rc != 0) {
        fuzz_check_message(T, err, sizeof err);
        fuzz_require(is_zero(&m, sizeof m), T, "refused message left fields set", err);
        return 0;
    }
    fuzz_require(m.version == GOSSIP_PROTOCOL_VERSION, T, "accepted another version", NULL);
    fuzz_require(m.nupdates >= 0 && m.nupdates <= GOSSIP_MAX_UPDATES &&
                     (!m.nupdates) == (!m.updates),
                 T, "accepted update count", NULL);
    fuzz_require((m.data_len == 0) == (m.data == NULL) && m.data_len <= GOSSIP_FETCH_CHUNK, T,
                 "accepted data length", NULL);
    fuzz_require(m.type == GOSSIP_MSG_FETCH_REPLY || (!m.data_len && !m.total), T,
                 "data or total outside a FETCH_REPLY", NULL);
    fuzz_require(m.type != GOSSIP_MSG_FETCH_REPLY ||
                     (m.data_len <= m.total && m.offset <= m.total - m.data_len),
                 T, "accepted a part past the file's end", NULL);
    fuzz_require(m.type != GOSSIP_MSG_FETCH_REPLY || m.ok || (!m.data_len && !m.offset), T,
                 "accepted a refusal with data", NULL);
    fuzz_require(m.type == GOSSIP_MSG_FETCH || !m.path[0], T, "path outside a FETCH", NULL);
    fuzz_require(m.type != GOSSIP_MSG_FETCH || (m.path[0] && memchr(m.path, 0, GOSSIP_PATH_MAX)), T,
                 "accepted a FETCH without a path", NULL);
    if (m.data_len) {
        /* ASan: the block holds data_len bytes (the input is freed already). */
        volatile uint8_t edge = m.data[0] ^ m.data[m.data_len - 1];
        (void)edge;
    }

    size_t len = 0, len2 = 0;
    fuzz_require(gossip_encode(&m, scratch[0], sizeof scratch[0], &len, err, sizeof err) == 0, T,
                 "decoded a message the encoder refuses", err);
    fuzz_require(len <= size, T, "re-encoded message is longer than the input", NULL);
    gossip_msg back;
    fuzz_require(gossip_decode(scratch[0], len, &back, err, sizeof err) == 0, T,
                 "re-encoded message refused", err);
    fuzz_require(same_msg(&m, &back), T, "message changed in a round trip", NULL);
    fuzz_require(gossip_encode(&back, scratch[1], sizeof scratch[1], &len2, err, sizeof err) == 0 &&
                     len2 == len && memcmp(scratch[0], scratch[1], len) == 0,
                 T, "encoding is not deterministic", err);
    gossip_msg_free(&back);

    for (int i = 0; i < m.nupdates; i++)
        if (m.updates[i].state == GOSSIP_ALIVE || m.updates[i].state == GOSSIP_LEFT)
            check_record(&m.updates[i].rec);
    gossip_msg_free(&m);
    return 0;
}
