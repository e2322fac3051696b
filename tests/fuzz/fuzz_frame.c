/* fuzz_frame.c — libFuzzer target for what a node reads off a TCP
 * connection: a stream of frames, each a 4-byte little-endian length
 * (bounded, mesh_decode_length) and a payload (mesh_decode).
 *
 * The input is read the way the transport reads a connection: frame after
 * frame until one is refused (the connection would be dropped) or the rest
 * is incomplete (the transport would wait for more bytes). Each payload is
 * copied into a heap block of exactly its size, so ASan sees any read past
 * it even when more input follows.
 *
 * Beyond "no crash", every payload the decoder accepts must be a message the
 * encoder accepts, must survive encode → decode unchanged, and must encode to
 * the same bytes twice: the decoder never admits what a node could not send. */
#include "fuzz_util.h"
#include "mesh.h"

#define T "fuzz_frame"

/* Small enough that the fuzzer hits the bound, large enough for any input it
 * makes (libFuzzer's default -max_len is 4096). */
#define FUZZ_MAX_FRAME ((size_t)1 << 20)

static int same_msg(const mesh_msg *a, const mesh_msg *b)
{
    if (a->type != b->type || a->version != b->version || a->run_id != b->run_id ||
        a->epoch != b->epoch || a->step != b->step || a->micro != b->micro ||
        a->stage != b->stage || a->kept != b->kept ||
        memcmp(&a->value, &b->value, sizeof a->value) != 0 || a->flags != b->flags ||
        strcmp(a->name, b->name) != 0 || strcmp(a->text, b->text) != 0 ||
        a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes ||
        a->nlabels != b->nlabels)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    if (a->nbytes && memcmp(a->data, b->data, a->nbytes) != 0)
        return 0;
    if (a->nlabels && memcmp(a->labels, b->labels, a->nlabels * 4) != 0)
        return 0;
    return 1;
}

static void check_round_trip(const mesh_msg *m)
{
    char err[256] = "";
    uint8_t *head, *head2;
    size_t head_len, head2_len;
    fuzz_require(mesh_encode_head(m, &head, &head_len, err, sizeof err) == 0, T,
                 "decoded a message the encoder refuses", err);
    size_t len = head_len + m->nbytes;
    uint8_t *frame = malloc(len);
    memcpy(frame, head, head_len);
    if (m->nbytes)
        memcpy(frame + head_len, m->data, m->nbytes);
    size_t plen;
    fuzz_require(mesh_decode_length(frame, FUZZ_MAX_FRAME + 4096, &plen, err, sizeof err) == 0 &&
                     plen == len - 4,
                 T, "length prefix of a re-encoded frame", err);
    mesh_msg back;
    fuzz_require(mesh_decode(frame + 4, len - 4, &back, err, sizeof err) == 0, T,
                 "re-encoded frame refused", err);
    fuzz_require(same_msg(m, &back), T, "message changed in a round trip", NULL);
    fuzz_require(mesh_encode_head(&back, &head2, &head2_len, err, sizeof err) == 0 &&
                     head2_len == head_len && memcmp(head, head2, head_len) == 0,
                 T, "encoding is not deterministic", err);
    free(head2);
    free(frame);
    free(head);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (size - off >= 4) {
        char err[256];
        memset(err, 'x', sizeof err);
        size_t len;
        if (mesh_decode_length(data + off, FUZZ_MAX_FRAME, &len, err, sizeof err) != 0) {
            fuzz_check_message(T, err, sizeof err);
            return 0;
        }
        off += 4;
        if (len > size - off)
            return 0;
        uint8_t *payload = fuzz_copy(data + off, len);
        off += len;
        mesh_msg m;
        int rc = mesh_decode(payload, len, &m, err, sizeof err);
        if (rc == 0) {
            fuzz_require(m.version == MESH_PROTOCOL_VERSION, T, "accepted another version", NULL);
            check_round_trip(&m);
        } else {
            fuzz_check_message(T, err, sizeof err);
            static const mesh_msg zero;
            fuzz_require(memcmp(&m, &zero, sizeof m) == 0, T, "refused message left fields set",
                         NULL);
        }
        free(payload);
        if (rc != 0)
            return 0;
    }
    return 0;
}
