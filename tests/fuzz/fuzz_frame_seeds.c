/* fuzz_frame_seeds.c — writes fuzz_frame's seed corpus: valid frames of every
 * message type made by our own encoder, one per file, and one stream of all
 * of them back to back. Generated at build time rather than checked in, so
 * the seeds follow the encoder when the protocol changes.
 *
 * usage: fuzz_frame_seeds DIR */
#include "mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float tensor[2 * 3] = {1.5f, -2.25f, 0.0f, 3e-38f, -0.0f, 65504.0f};
static int32_t labels[3] = {17, -100, 5};

static mesh_msg sample(mesh_msg_type t, int variant)
{
    mesh_msg m;
    memset(&m, 0, sizeof m);
    m.type = t;
    m.run_id = mesh_run_id("seed-run");
    m.epoch = 1, m.step = 300 * (uint32_t)variant, m.stage = 1;
    switch (t) {
    case MESH_MSG_HELLO:
        strcpy(m.name, variant ? "a-rather-long-node-name.example.org" : "n0");
        strcpy(m.text, "seed-run");
        break;
    case MESH_MSG_ACTIVATIONS:
    case MESH_MSG_GRADIENTS:
    case MESH_MSG_TIED_GRAD:
        m.micro = 2, m.kept = t == MESH_MSG_ACTIVATIONS ? 70000 : 0;
        m.dtype = variant ? MESH_BF16 : MESH_F32;
        m.ndim = 2, m.shape[0] = variant ? 3 : 2, m.shape[1] = variant ? 4 : 3;
        m.data = tensor, m.nbytes = variant ? 24 : sizeof tensor;
        if (t == MESH_MSG_ACTIVATIONS)
            m.labels = labels, m.nlabels = variant ? 0 : 3;
        break;
    case MESH_MSG_NORM:
        m.value = variant ? 1e30 : 0.25, m.flags = (uint32_t)variant;
        break;
    case MESH_MSG_COMMIT:
        m.value = 2.5;
        break;
    case MESH_MSG_ABORT:
        strcpy(m.text, "stage 1: out of memory");
        break;
    case MESH_MSG_PROBE:
        m.flags = (uint32_t)variant; /* a request, a reply */
        m.data = tensor, m.nbytes = variant ? 7 : sizeof tensor;
        break;
    }
    return m;
}

static int append_frame(FILE *fp, const mesh_msg *m)
{
    uint8_t *head;
    size_t head_len;
    char err[256];
    if (mesh_encode_head(m, &head, &head_len, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_frame_seeds: %s\n", err);
        return -1;
    }
    int ok = fwrite(head, 1, head_len, fp) == head_len &&
             (!m->nbytes || fwrite(m->data, 1, m->nbytes, fp) == m->nbytes);
    free(head);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_frame_seeds DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-stream", argv[1]);
    FILE *stream = fopen(path, "wb");
    int rc = stream ? 0 : -1;
    for (int t = MESH_MSG_HELLO; t <= MESH_MSG_PROBE && rc == 0; t++) {
        for (int variant = 0; variant < 2 && rc == 0; variant++) {
            mesh_msg m = sample((mesh_msg_type)t, variant);
            snprintf(path, sizeof path, "%s/seed-%d-%d", argv[1], t, variant);
            FILE *fp = fopen(path, "wb");
            rc = fp ? append_frame(fp, &m) : -1;
            if (fp && fclose(fp) != 0)
                rc = -1;
            if (rc == 0)
                rc = append_frame(stream, &m);
        }
    }
    if (stream && fclose(stream) != 0)
        rc = -1;
    if (rc != 0) {
        fprintf(stderr, "fuzz_frame_seeds: cannot write the corpus in %s\n", argv[1]);
        return 1;
    }
    return 0;
}
