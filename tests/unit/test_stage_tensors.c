/* test_stage_tensors.c — a stage's tensors by HF name and layer range
 * (model/stage_tensors.c): a model split [0, 2) | [2, 4) is re-split
 * [0, 1) | [1, 4) by moving layer 1 with stage_save_layers and
 * stage_load_layers and the embedding, norm and head by name, and every
 * weight and both AdamW moments of every tensor are the same bits in the
 * new stages; untied and tied embeddings; wrong ranges and names refused
 * naming them. */
#include "model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config_fixture.h"

/* Seeded values in both moments (the weights come from stage_init_weights). */
static void fill_moments(stage *s, uint64_t seed)
{
    float *m[2] = {stage_moment1(s), stage_moment2(s)};
    uint64_t x = seed;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < stage_num_params(s); i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            m[k][i] = (float)(x >> 40) / (float)(1 << 24) - (k ? 0.0f : 0.5f);
        }
}

static const stage_param *entry(const stage *s, const char *name, bool tied_copy)
{
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        if (p->tied_copy == tied_copy && strcmp(p->name, name) == 0) return p;
    }
    return NULL;
}

/* Copies a tensor that is not a layer's from one stage to another by name,
 * every buffer. */
static void move_by_name(stage *from, stage *to, const char *name)
{
    char err[256];
    const stage_param *p = NULL;
    for (int i = 0; !p && i < stage_param_count(to); i++)
        if (strcmp(stage_param_at(to, i)->name, name) == 0) p = stage_param_at(to, i);
    float *buf = p ? malloc(p->numel * sizeof *buf) : NULL;
    for (int b = 0; buf && b < 3; b++)
        CHECK(stage_tensor_read(from, (stage_buffer)b, name, buf, p->numel, err, sizeof err) == 0 &&
                  stage_tensor_write(to, (stage_buffer)b, name, buf, p->numel, err,
                                     sizeof err) == 0,
              "%s by name: %s", name, err);
    free(buf);
}

/* Every tensor of the new stage holds the bits the old split held. */
static void same_bits(stage *new_stage, stage *old_a, stage *old_b, int cut)
{
    for (int i = 0; i < stage_param_count(new_stage); i++) {
        const stage_param *p = stage_param_at(new_stage, i);
        int l = stage_tensor_layer(p->name);
        stage *old = l >= 0 ? (l < cut ? old_a : old_b)
                            : strstr(p->name, "embed") && !p->tied_copy ? old_a : old_b;
        const stage_param *q = entry(old, p->name, p->tied_copy);
        CHECK(q && q->numel == p->numel, "%s: not in the old split", p->name);
        if (!q) continue;
        float *nb[3] = {stage_params(new_stage), stage_moment1(new_stage), stage_moment2(new_stage)};
        float *ob[3] = {stage_params(old), stage_moment1(old), stage_moment2(old)};
        for (int b = 0; b < 3; b++)
            CHECK(memcmp(nb[b] + p->offset, ob[b] + q->offset, p->numel * sizeof(float)) == 0,
                  "%s (buffer %d) differs after the move", p->name, b);
    }
}

static void test_move(bool tied, const char *dir)
{
    llama_config cfg = fixture_config(tied);
    char err[512], f1[1024] = "", f2[1024] = "", f0[1024] = "";
    stage *a = NULL, *b = NULL, *a2 = NULL, *b2 = NULL;
    CHECK(stage_create(&a, &cfg, 0, 2, true, false, 1, 4, 1, err, sizeof err) == 0 &&
              stage_create(&b, &cfg, 2, 4, false, true, 1, 4, 1, err, sizeof err) == 0 &&
              stage_create(&a2, &cfg, 0, 1, true, false, 1, 4, 1, err, sizeof err) == 0 &&
              stage_create(&b2, &cfg, 1, 4, false, true, 1, 4, 1, err, sizeof err) == 0,
          "stages: %s", err);
    if (!a || !b || !a2 || !b2) goto out;
    stage_init_weights(a, 5);
    stage_init_weights(b, 5);
    stage_init_weights(a2, 99);   /* other bits everywhere: the move must overwrite them */
    stage_init_weights(b2, 99);
    fill_moments(a, 1);
    fill_moments(b, 2);
    fill_moments(a2, 3);
    fill_moments(b2, 4);
    snprintf(f0, sizeof f0, "%s/layers-0-1.safetensors", dir);
    snprintf(f1, sizeof f1, "%s/layers-1-2.safetensors", dir);
    snprintf(f2, sizeof f2, "%s/layers-2-4.safetensors", dir);
    CHECK(stage_save_layers(a, 0, 1, f0, err, sizeof err) == 0 &&
              stage_save_layers(a, 1, 2, f1, err, sizeof err) == 0 &&
              stage_save_layers(b, 2, 4, f2, err, sizeof err) == 0,
          "save: %s", err);
    CHECK(stage_load_layers(a2, 0, 1, f0, err, sizeof err) == 0 &&
              stage_load_layers(b2, 1, 2, f1, err, sizeof err) == 0 &&
              stage_load_layers(b2, 2, 4, f2, err, sizeof err) == 0,
          "load: %s", err);
    move_by_name(a, a2, "model.embed_tokens.weight");
    move_by_name(b, b2, "model.norm.weight");
    move_by_name(b, b2, tied ? "model.embed_tokens.weight" : "lm_head.weight");
    same_bits(a2, a, b, 2);
    same_bits(b2, a, b, 2);
    /* refusals that name what is wrong */
    CHECK(stage_load_layers(b2, 1, 3, f1, err, sizeof err) != 0 && strstr(err, "1,2"),
          "a file of another range: %s", err);
    CHECK(stage_save_layers(a, 1, 3, f1, err, sizeof err) != 0 && strstr(err, "[0, 2)"),
          "a range the stage does not hold: %s", err);
    float x[4];
    CHECK(stage_tensor_read(a2, STAGE_WEIGHTS, "model.layers.3.mlp.up_proj.weight", x, 4, err,
                            sizeof err) != 0 && strstr(err, "model.layers.3.mlp.up_proj.weight"),
          "a tensor the stage does not hold: %s", err);
    CHECK(stage_tensor_read(a2, STAGE_WEIGHTS, "model.norm.weight", x, 4, err, sizeof err) != 0,
          "the norm of a stage without the head was read");
    CHECK(stage_tensor_read(b2, STAGE_MOMENT1, "model.norm.weight", x, 4, err, sizeof err) != 0 &&
              strstr(err, "24"),
          "a read of the wrong size: %s", err);
    CHECK(stage_tensor_layer("model.layers.12.self_attn.q_proj.weight") == 12 &&
              stage_tensor_layer("model.embed_tokens.weight") == -1 &&
              stage_tensor_layer("model.layers.x.foo") == -1,
          "stage_tensor_layer");
out:
    stage_free(a);
    stage_free(b);
    stage_free(a2);
    stage_free(b2);
    if (f0[0]) unlink(f0);
    if (f1[0]) unlink(f1);
    if (f2[0]) unlink(f2);
}

int main(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", SHARDNODE_TEST_TMP);
    test_move(false, dir);
    test_move(true, dir);
    printf("%s\n", failures ? "FAILED" : "test_stage_tensors: ok");
    return failures != 0;
}
