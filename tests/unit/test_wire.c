/* test_wire.c — the frame codec (mesh_encode_head, mesh_decode): what a
 * node relies on is that every message it sends arrives with every field and
 * every tensor byte intact, and that damaged input (truncated at any byte,
 * randomly mutated) is refused, never read out of bounds, never a crash.
 * Every decode reads from a heap block of exactly the payload's size, so
 * under ASan a read one byte too far is a failure. test_wire_refusals.c has
 * other encoders' frames and every refusal by name. */
#include "wire_fixture.h"

static void test_round_trip_every_type(void)
{
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        round_trip(&m, __LINE__);
    }

    /* Extremes: the longest strings, empty strings, the largest ids. */
    mesh_msg h = sample(MESH_MSG_HELLO);
    memset(h.name, 'n', MESH_NAME_MAX - 1);
    h.name[MESH_NAME_MAX - 1] = 0;
    memset(h.text, 't', MESH_TEXT_MAX - 1);
    h.text[MESH_TEXT_MAX - 1] = 0;
    h.run_id = UINT64_MAX;
    round_trip(&h, __LINE__);
    h.name[0] = 0, h.text[0] = 0, h.run_id = 0;
    round_trip(&h, __LINE__);

    /* Values are carried bit for bit: NaN, -0, infinity, a denormal. */
    double values[] = {NAN, -0.0, INFINITY, -INFINITY, 4.9e-324, 0.1};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        mesh_msg n = sample(MESH_MSG_NORM);
        n.value = values[i];
        n.flags = UINT32_MAX;
        round_trip(&n, __LINE__);
    }

    /* Empty tensors, no labels, a scalar (0 dims: one element), 4 dims. */
    mesh_msg a = sample(MESH_MSG_ACTIVATIONS);
    a.ndim = 2, a.shape[0] = 0, a.shape[1] = 4096, a.data = NULL, a.nbytes = 0;
    a.labels = NULL, a.nlabels = 0, a.kept = 1;
    round_trip(&a, __LINE__);
    a.ndim = 0, a.data = tensor_f32, a.nbytes = 4;
    round_trip(&a, __LINE__);
    a.ndim = 4, a.shape[0] = 1, a.shape[1] = 2, a.shape[2] = 1, a.shape[3] = 3;
    a.nbytes = sizeof tensor_f32;
    round_trip(&a, __LINE__);
    /* A zero dim makes the tensor empty however large the others are. */
    a.shape[0] = INT64_MAX, a.shape[1] = INT64_MAX, a.shape[2] = 0, a.nbytes = 0;
    round_trip(&a, __LINE__);

    /* A tensor large enough that its bin is a bin32. */
    size_t big = 70000 * sizeof(float);
    float *t = calloc(70000, sizeof(float));
    for (int i = 0; i < 70000; i++)
        t[i] = (float)i * 0.5f;
    mesh_msg g = sample(MESH_MSG_GRADIENTS);
    g.dtype = MESH_F32, g.ndim = 2, g.shape[0] = 7, g.shape[1] = 10000, g.data = t,
    g.nbytes = big;
    round_trip(&g, __LINE__);
    free(t);
}

static void test_head_layout(void)
{
    /* The head ends with the bin header of "data", and the length prefix
     * counts the tensor the caller appends. */
    mesh_msg m = sample(MESH_MSG_ACTIVATIONS);
    uint8_t *head;
    size_t head_len;
    char err[256];
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) == 0, "%s", err);
    CHECK(le32(head) == head_len - 4 + m.nbytes, "prefix %u", (unsigned)le32(head));
    CHECK(head[head_len - 2] == 0xc4 && head[head_len - 1] == m.nbytes, "bin8 header %02x %02x",
          head[head_len - 2], head[head_len - 1]);
    /* The key just before it is "data". */
    CHECK(memcmp(head + head_len - 7, "\xa4" "data", 5) == 0, "data is not the last key");
    free(head);

    /* The example in docs/PROTOCOL.md, byte for byte: the wire format is a
     * promise to other implementations, not whatever the encoder does. */
    static const uint8_t commit[] = {
        0x33, 0x00, 0x00, 0x00, 0x88, 0xa1, 0x76, 0x02, 0xa1, 0x74, 0x06, 0xa3, 0x72,
        0x75, 0x6e, 0xcf, 0xd3, 0xe6, 0xda, 0xd8, 0x5d, 0x52, 0x6c, 0x71, 0xa2, 0x65,
        0x70, 0x09, 0xa4, 0x73, 0x74, 0x65, 0x70, 0x2b, 0xa2, 0x73, 0x74, 0x04, 0xa3,
        0x76, 0x61, 0x6c, 0xcb, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa2,
        0x66, 0x6c, 0x00,
    };
    mesh_msg c;
    memset(&c, 0, sizeof c);
    c.type = MESH_MSG_COMMIT, c.run_id = mesh_run_id("wiki-7b");
    c.epoch = 9, c.step = 43, c.stage = 4, c.value = 2.5;
    CHECK(mesh_encode_head(&c, &head, &head_len, err, sizeof err) == 0 &&
              head_len == sizeof commit && memcmp(head, commit, sizeof commit) == 0,
          "COMMIT differs from docs/PROTOCOL.md (%zu bytes) %s", head_len, err);
    free(head);

    /* The encoder ignores m->version: it always speaks its own. */
    m.version = 7;
    size_t len;
    uint8_t *frame = encode_frame(&m, &len);
    mesh_msg back;
    CHECK(frame && decode_exact(frame + 4, len - 4, &back, err, sizeof err) == 0 &&
              back.version == MESH_PROTOCOL_VERSION,
          "%s", err);
    free(frame);
}

/* -------------------------------------------------- truncation and noise */

static void test_truncation(void)
{
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        size_t len;
        uint8_t *frame = encode_frame(&m, &len);
        if (!frame)
            continue;
        /* Every proper prefix of the payload is refused; decode_exact puts it
         * in a block of exactly that size, so ASan catches any over-read. */
        for (size_t cut = 0; cut < len - 4; cut++) {
            mesh_msg back;
            char err[256] = "";
            int rc = decode_exact(frame + 4, cut, &back, err, sizeof err);
            CHECK(rc != 0 && (strstr(err, "payload ends inside") || strstr(err, "empty payload")),
                  "%s cut at %zu of %zu: rc=%d '%s'", type_names[t], cut, len - 4, rc, err);
        }
        free(frame);
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* Random damage never crashes the decoder, and whatever it still accepts is
 * a message the encoder accepts too and that survives a round trip. */
static void test_random_damage(void)
{
    int accepted = 0, tried = 0;
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        size_t len;
        uint8_t *frame = encode_frame(&m, &len);
        if (!frame)
            continue;
        size_t plen = len - 4;
        uint8_t *p = malloc(plen);
        for (int iter = 0; iter < 20000; iter++) {
            memcpy(p, frame + 4, plen);
            int flips = 1 + (int)(rng() % 4);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)(rng() % plen);
                if (rng() % 4 == 0)
                    p[at] = (uint8_t)rng(); /* a whole byte */
                else
                    p[at] ^= (uint8_t)(1u << (rng() % 8));
            }
            size_t use = rng() % 8 == 0 ? (size_t)(rng() % (plen + 1)) : plen;
            mesh_msg back;
            char err[256] = "";
            tried++;
            if (decode_exact(p, use, &back, err, sizeof err) != 0) {
                CHECK(err[0] != 0, "refused without a message");
                continue;
            }
            accepted++;
            uint8_t *again_frame;
            size_t again_len;
            again_frame = encode_frame(&back, &again_len);
            if (!again_frame)
                continue;
            mesh_msg again;
            if (decode_exact(again_frame + 4, again_len - 4, &again, err, sizeof err) != 0) {
                CHECK(0, "re-encoded frame refused: %s", err);
            } else {
                msg_equal(&back, &again, __LINE__);
            }
            free(again_frame);
        }
        free(p);
        free(frame);
    }
    /* Some damage is harmless (a flipped tensor bit): the round trip above
     * was actually exercised. */
    CHECK(accepted > 0 && accepted < tried, "%d of %d accepted", accepted, tried);
}

/* PROBE: raw bytes without dt or shape, bounded by MESH_PROBE_MAX. */
static size_t base_probe(field *f, const void *data, size_t len)
{
    size_t n = 0;
    f[n++] = U("v", MESH_PROTOCOL_VERSION);
    f[n++] = U("t", MESH_MSG_PROBE);
    f[n++] = U("run", 7);
    f[n++] = I("step", 12);
    f[n++] = U("fl", 0);
    f[n++] = B("data", data, len);
    return n;
}

static void test_probe(void)
{
    /* Round trips: a request, a reply, no bytes, bytes of odd count. */
    mesh_msg m = sample(MESH_MSG_PROBE);
    round_trip(&m, __LINE__);
    m.flags = 0, m.data = NULL, m.nbytes = 0, m.step = 0;
    round_trip(&m, __LINE__);
    size_t big = 300000;
    uint8_t *bytes = malloc(big);
    for (size_t i = 0; i < big; i++)
        bytes[i] = (uint8_t)(i * 7);
    m.data = bytes, m.nbytes = big, m.step = INT64_MAX;
    round_trip(&m, __LINE__);

    /* Decoded: no dtype or shape, data points at the bytes. */
    field f[MAXF];
    mesh_msg d;
    char err[512] = "";
    size_t n = base_probe(f, bytes, 33);
    CHECK(decode_fields(f, n, &d, err, sizeof err) == 0 && d.type == MESH_MSG_PROBE &&
              d.step == 12 && d.flags == 0 && d.nbytes == 33 && d.ndim == 0 &&
              memcmp(d.data, bytes, 33) == 0,
          "probe decode: %s", err);

    /* Refusals. */
    n = base_probe(f, bytes, 8), n = set(f, n, U("dt", MESH_I32));
    EXPECT_REFUSED(f, n, "key \"dt\" is not allowed in PROBE");
    n = base_probe(f, bytes, 8),
    n = set(f, n, (field){.key = "shape", .kind = F_SHAPE, .ndim = 1, .dims = {2}});
    EXPECT_REFUSED(f, n, "key \"shape\" is not allowed in PROBE");
    n = base_probe(f, bytes, 8), n = drop(f, n, "fl");
    EXPECT_REFUSED(f, n, "PROBE is missing key \"fl\"");
    n = base_probe(f, bytes, 8), n = drop(f, n, "data");
    EXPECT_REFUSED(f, n, "PROBE is missing key \"data\"");
    n = base_probe(f, bytes, 8), n = drop(f, n, "step");
    EXPECT_REFUSED(f, n, "PROBE is missing key \"step\"");
    n = base_probe(f, bytes, 8), n = set(f, n, I("step", -1));
    EXPECT_REFUSED(f, n, "\"step\" is negative (-1)");
    n = base_probe(f, bytes, 8), n = set(f, n, S("data", "abc"));
    EXPECT_REFUSED(f, n, "\"data\" must be a bin, got a string");
    uint8_t *huge = calloc(1, MESH_PROBE_MAX + 1);
    n = base_probe(f, huge, MESH_PROBE_MAX + 1);
    EXPECT_REFUSED(f, n, "PROBE: \"data\" has 67108865 bytes, at most 67108864");
    n = base_probe(f, huge, MESH_PROBE_MAX);
    CHECK(decode_fields(f, n, &d, err, sizeof err) == 0 && d.nbytes == MESH_PROBE_MAX,
          "probe of the largest size: %s", err);

    /* The encoder refuses the same. */
    uint8_t *head = NULL;
    size_t head_len = 0;
    m = sample(MESH_MSG_PROBE), m.data = huge, m.nbytes = MESH_PROBE_MAX + 1;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) != 0 &&
              strstr(err, "PROBE: \"data\" has 67108865 bytes, at most 67108864") && !head,
          "encode huge probe: %s", err);
    m = sample(MESH_MSG_PROBE), m.data = NULL, m.nbytes = 4;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) != 0 &&
              strstr(err, "PROBE: \"data\" is NULL with 4 bytes") && !head,
          "encode probe without data: %s", err);
    m = sample(MESH_MSG_PROBE), m.step = -5;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) != 0 &&
              strstr(err, "\"step\" is negative (-5)") && !head,
          "encode probe with a negative step: %s", err);
    /* dtype and shape a caller leaves set are not part of a PROBE. */
    m = sample(MESH_MSG_PROBE), m.dtype = MESH_F32, m.ndim = 2, m.shape[0] = 99;
    CHECK(mesh_encode_head(&m, &head, &head_len, err, sizeof err) == 0, "%s", err);
    free(head);
    free(huge);
    free(bytes);
    release_held();
}

/* MESH_HEAD_MAX bounds everything of a frame but its tensor and labels,
 * for every type with its longest strings and widest integers: a receiver
 * that allows a peer MESH_HEAD_MAX + the tensor it expects never refuses an
 * honest frame (node/runtime/engine.c bounds each peer's frames so). */
static void test_head_bound(void)
{
    static const uint8_t dummy[1];
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE; t++) {
        mesh_msg m = sample((mesh_msg_type)t);
        m.run_id = UINT64_MAX, m.epoch = UINT32_MAX, m.step = INT64_MAX;
        m.micro = INT32_MAX, m.stage = INT32_MAX, m.kept = INT64_MAX, m.flags = UINT32_MAX;
        m.value = 1.0 / 3.0;
        memset(m.name, 'n', sizeof m.name - 1);
        memset(m.text, 't', sizeof m.text - 1);
        if (m.ndim > 0) {
            /* four dims of 5-byte integers, within a 32-bit frame */
            m.dtype = MESH_BF16, m.ndim = 4;
            m.shape[0] = 70000, m.shape[1] = 7000, m.shape[2] = 1, m.shape[3] = 1;
            m.nbytes = (size_t)70000 * 7000 * 2;
            m.data = dummy;
        }
        uint8_t *head = NULL;
        size_t len = 0;
        char err[256];
        CHECK(mesh_encode_head(&m, &head, &len, err, sizeof err) == 0, "%s: %s", type_names[t], err);
        size_t rest = len - 4 - m.nlabels * 4;
        CHECK(rest <= MESH_HEAD_MAX, "%s: %zu bytes besides the tensor and labels, over "
              "MESH_HEAD_MAX (%d)", type_names[t], rest, MESH_HEAD_MAX);
        free(head);
    }
}

int main(void)
{
    memset(str_fill, 'x', sizeof str_fill);
    test_round_trip_every_type();
    test_head_layout();
    test_truncation();
    test_random_damage();
    test_probe();
    test_head_bound();
    release_held();
    if (failures) {
        fprintf(stderr, "test_wire: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_wire: ok\n");
    return 0;
}
