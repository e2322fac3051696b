/* test_checkpoint_layers.c — a stage's part of another stage's checkpoint
 * (node/runtime/checkpoint.c, checkpoint_layer_ranges and
 * checkpoint_copy_layers; what `shardnode fetch --layers` moves in a planned
 * switch): a model held as [0, 2) | [2, 4) is saved; the parts a [0, 1) |
 * [1, 4) split needs are cut out of it, and the new split loads from them
 * every weight and both moments of every tensor, the same bits (untied and
 * tied embeddings); the byte ranges name exactly those tensors' bytes, and a
 * copy of the file holding only those ranges (the rest zeros: a sparse file
 * after a ranged fetch) gives the same part; ranges outside the model and
 * files that are no checkpoint are refused, naming them. */
#include "runtime.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config_fixture.h"

/* Seeded values in every buffer of every stage (weights and both moments). */
static void fill(chain *c, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < c->plan.nstages; i++) {
        stage *s = c->stages[i];
        float *b[3] = {stage_params(s), stage_moment1(s), stage_moment2(s)};
        for (int k = 0; k < 3; k++)
            for (size_t j = 0; j < stage_num_params(s); j++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                b[k][j] = (float)(x >> 40) / (float)(1 << 24) - 0.5f;
            }
    }
    /* a tied head's copy is the embedding */
    if (c->cfg.tie_word_embeddings && c->plan.nstages > 1) {
        char err[256];
        stage *first = c->stages[0], *last = c->stages[c->plan.nstages - 1];
        size_t n = (size_t)c->cfg.vocab_size * (size_t)c->cfg.hidden_size;
        float *t = malloc(n * sizeof *t);
        for (int k = 0; t && k < 3; k++)
            CHECK(stage_tensor_read(first, (stage_buffer)k, "model.embed_tokens.weight", t, n, err,
                                    sizeof err) == 0 &&
                      stage_tensor_write(last, (stage_buffer)k, "model.embed_tokens.weight", t, n,
                                         err, sizeof err) == 0,
                  "tied copy: %s", err);
        free(t);
    }
}

/* Every tensor of chain b holds the bits chain a holds under its name. */
static void same_bits(chain *a, chain *b, const char *what)
{
    char err[256];
    for (int i = 0; i < b->plan.nstages; i++)
        for (int k = 0; k < stage_param_count(b->stages[i]); k++) {
            const stage_param *p = stage_param_at(b->stages[i], k);
            float *x = malloc(p->numel * sizeof *x), *y = malloc(p->numel * sizeof *y);
            for (int buf = 0; x && y && buf < 3; buf++) {
                bool found = false;
                for (int j = 0; j < a->plan.nstages && !found; j++)
                    found = stage_tensor_read(a->stages[j], (stage_buffer)buf, p->name, x,
                                              p->numel, err, sizeof err) == 0;
                CHECK(found && stage_tensor_read(b->stages[i], (stage_buffer)buf, p->name, y,
                                                 p->numel, err, sizeof err) == 0 &&
                          memcmp(x, y, p->numel * sizeof *x) == 0,
                      "%s: %s (buffer %d) differs", what, p->name, buf);
            }
            free(x);
            free(y);
        }
}

/* The sum of a file's tensors' bytes, and whether it holds `name`. */
static int64_t file_bytes(const char *path, const char *name, bool *has)
{
    safetensors_file *f;
    char err[256];
    int64_t n = 0;
    *has = false;
    if (safetensors_open(&f, path, err, sizeof err)) {
        CHECK(0, "%s", err);
        return -1;
    }
    for (int i = 0; i < safetensors_count(f); i++) n += (int64_t)safetensors_at(f, i)->nbytes;
    *has = safetensors_find(f, name) != NULL;
    safetensors_close(f);
    return n;
}

/* dst: src with every byte outside the ranges zero (a ranged fetch's file). */
static void sparse_copy(const char *src, const char *dst, const uint64_t *r, int nr)
{
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n), *z = calloc((size_t)n, 1);
    CHECK(fread(b, 1, (size_t)n, f) == (size_t)n, "read %s", src);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    memcpy(z, b, 8 + hlen);
    for (int i = 0; i < nr; i++) memcpy(z + r[2 * i], b + r[2 * i], r[2 * i + 1] - r[2 * i]);
    f = fopen(dst, "wb");
    fwrite(z, 1, (size_t)n, f);
    fclose(f);
    free(b);
    free(z);
}

static void test_parts(bool tied, const char *dir)
{
    llama_config cfg = fixture_config(tied);
    char err[512], all[600], p0[600], p1[600], sp[600], q1[600];
    split_plan old, neu;
    chain a, b;
    snprintf(all, sizeof all, "%s/cl-all-%d.safetensors", dir, tied);
    snprintf(p0, sizeof p0, "%s/cl-L0-1-%d.safetensors", dir, tied);
    snprintf(p1, sizeof p1, "%s/cl-L1-4-%d.safetensors", dir, tied);
    snprintf(sp, sizeof sp, "%s/cl-sparse-%d.safetensors", dir, tied);
    snprintf(q1, sizeof q1, "%s/cl-L1-4-sparse-%d.safetensors", dir, tied);
    CHECK(split_parse(&old, "2", 4, "--split", err, sizeof err) == 0 &&
              split_parse(&neu, "1", 4, "--split", err, sizeof err) == 0,
          "split: %s", err);
    CHECK(chain_create(&a, &cfg, &old, 1, 4, err, sizeof err) == 0 &&
              chain_create(&b, &cfg, &neu, 1, 4, err, sizeof err) == 0,
          "chains: %s", err);
    fill(&a, tied ? 11 : 7);
    fill(&b, 99);   /* other bits everywhere: the load must overwrite them */
    CHECK(checkpoint_save(all, &a, 12, "", err, sizeof err) == 0, "save: %s", err);
    CHECK(checkpoint_copy_layers(all, p0, 0, 1, err, sizeof err) == 0 &&
              checkpoint_copy_layers(all, p1, 1, 4, err, sizeof err) == 0,
          "copy: %s", err);
    const char *files[] = {p0, p1};
    long step = 0;
    CHECK(checkpoint_load_files(files, 2, &b, NULL, &step, err, sizeof err) == 0 && step == 12,
          "load the parts: %s (step %ld)", err, step);
    same_bits(&a, &b, tied ? "tied" : "untied");
    /* what each part holds: the first no head, the last the embedding only
     * when tied */
    bool has;
    int64_t n0 = file_bytes(p0, "model.norm.weight", &has);
    CHECK(!has, "[0, 1) holds the final norm");
    int64_t n1 = file_bytes(p1, "model.embed_tokens.weight", &has);
    CHECK(has == tied, "[1, 4) %s the embedding (tied %d)", has ? "holds" : "lacks", tied);
    bool h2;
    int64_t nall = file_bytes(all, "", &h2);
    CHECK(n0 > 0 && n1 > 0 && n0 + n1 <= nall + (tied ? nall : 0) && n1 < nall,
          "bytes: [0, 1) %lld, [1, 4) %lld, all %lld", (long long)n0, (long long)n1,
          (long long)nall);
    /* the ranges: exactly [1, 4)'s bytes; a file holding only them gives
     * the same part */
    uint64_t *r = NULL;
    int64_t want = 0;
    int nr = checkpoint_layer_ranges(all, 1, 4, &r, &want, err, sizeof err);
    CHECK(nr > 0 && want == n1, "ranges of [1, 4): %d (%s), %lld bytes, the part holds %lld",
          nr, err, (long long)want, (long long)n1);
    for (int i = 1; i < nr; i++)
        CHECK(r[2 * i] > r[2 * i - 1], "ranges %d and %d touch or overlap", i - 1, i);
    if (nr > 0) {
        sparse_copy(all, sp, r, nr);
        CHECK(checkpoint_copy_layers(sp, q1, 1, 4, err, sizeof err) == 0, "copy sparse: %s", err);
        FILE *x = fopen(p1, "rb"), *y = fopen(q1, "rb");
        int cx = 0, cy = 0;
        while (x && y && (cx = fgetc(x)) == (cy = fgetc(y)) && cx != EOF) {
        }
        CHECK(x && y && cx == EOF && cy == EOF, "the part from the sparse file differs");
        if (x) fclose(x);
        if (y) fclose(y);
    }
    free(r);
    /* refusals that name what is wrong */
    CHECK(checkpoint_copy_layers(all, q1, 2, 5, err, sizeof err) != 0 && strstr(err, "2-5") &&
              strstr(err, "4"),
          "a range past the model: %s", err);
    CHECK(checkpoint_layer_ranges(all, 3, 3, &r, &want, err, sizeof err) < 0 && strstr(err, "3-3"),
          "an empty range: %s", err);
    CHECK(safetensors_write(sp, NULL, 0, err, sizeof err) == 0 &&
              checkpoint_copy_layers(sp, q1, 0, 1, err, sizeof err) != 0 &&
              strstr(err, "not a shardnode checkpoint") && strstr(err, sp),
          "a file that is no checkpoint: %s", err);
    CHECK(stage_tensor_needed("optim.exp_avg_sq.model.layers.2.mlp.up_proj.weight", 2, 3, 4,
                              false) &&
              !stage_tensor_needed("optim.exp_avg.model.layers.3.mlp.up_proj.weight", 2, 3, 4,
                                   false) &&
              stage_tensor_needed("model.embed_tokens.weight", 0, 1, 4, false) &&
              !stage_tensor_needed("model.embed_tokens.weight", 3, 4, 4, false) &&
              stage_tensor_needed("model.embed_tokens.weight", 3, 4, 4, true) &&
              !stage_tensor_needed("lm_head.weight", 0, 3, 4, false) &&
              stage_tensor_needed("optim.exp_avg.model.norm.weight", 3, 4, 4, false),
          "stage_tensor_needed");
    chain_free(&a);
    chain_free(&b);
    unlink(all);
    unlink(p0);
    unlink(p1);
    unlink(sp);
    unlink(q1);
}

int main(void)
{
    test_parts(false, SHARDNODE_TEST_TMP);
    test_parts(true, SHARDNODE_TEST_TMP);
    printf("%s\n", failures ? "FAILED" : "test_checkpoint_layers: ok");
    return failures != 0;
}
