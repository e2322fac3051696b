/* test_lora.c — LoRA stages on a frozen base (model/stage_lora.c) and the
 * job keys that ask for them (node/runtime/job.c):
 *  - "base" and "lora" refused naming the key: unknown keys, r < 1,
 *    alpha <= 0, dropout other than 0, unknown or repeated modules, an
 *    empty list, quant other than nf4/none, nf4 without lora, base.model
 *    with init_weights; a valid job parsed (PEFT defaults, config from the
 *    base model, all-linear) and job_compare naming a changed LoRA key;
 *  - the frozen base costs no gradient or moment: a LoRA stage's parameter
 *    table, gradients and moments are the adapters alone (PEFT names), the
 *    base is in the frozen table; NF4 holds 0.52 bytes a value;
 *  - an NF4 stage loaded from an HF directory (hf_load_stage, a middle
 *    stage) computes the same bits as one loaded from the same file with
 *    stage_load_weights, and job_init_stage with "base" equals both;
 *  - stage_lora_memory_bytes against stage_memory_bytes for a 768-wide
 *    12-layer and a 2048-wide 22-layer model (printed; NF4 + LoRA <= 0.35x
 *    of full fine-tuning). */
#include "import.h"
#include "model.h"
#include "runtime.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#ifndef SHARDNODE_TEST_TMP
#define SHARDNODE_TEST_TMP "/tmp"
#endif

static const char *job_head =
    "{\"config\": \"c.json\", \"tokenizer\": \"t.json\", \"out_dir\": \"out\", "
    "\"data\": {\"files\": [\"d.txt\"]}, \"seq_len\": 8, \"batch\": 2, \"steps\": 3";

/* Parses job_head + tail + "}"; returns job_parse's result, err its message. */
static int parse(job_spec *j, const char *tail, char *err, size_t errlen)
{
    char text[2048];
    snprintf(text, sizeof text, "%s%s}", job_head, tail);
    return job_parse(j, "/jobs/job.json", text, err, errlen);
}

static void refused(const char *tail, const char *want)
{
    job_spec j;
    char err[512] = "";
    int rc = parse(&j, tail, err, sizeof err);
    CHECK(rc != 0 && strstr(err, want), "job tail %s: rc %d, message \"%s\", expected \"%s\"",
          tail, rc, err, want);
    if (rc == 0) job_free(&j);
}

static void test_job_keys(void)
{
    refused(", \"lora\": {\"r\": 4, \"rank\": 8}", "\"rank\" is not a known key");
    refused(", \"lora\": {\"r\": 0}", "\"r\" is 0");
    refused(", \"lora\": {\"r\": 4, \"alpha\": 0}", "\"alpha\" must be > 0");
    refused(", \"lora\": {\"r\": 4, \"alpha\": -2}", "\"alpha\" is -2");
    refused(", \"lora\": {\"r\": 4, \"dropout\": 0.05}", "\"dropout\" is 0.05: only 0");
    refused(", \"lora\": {\"target_modules\": [\"q_proj\", \"qkv\"]}", "entry 1 \"qkv\" is not");
    refused(", \"lora\": {\"target_modules\": [\"v_proj\", \"v_proj\"]}", "names v_proj twice");
    refused(", \"lora\": {\"target_modules\": []}", "\"target_modules\" must be a non-empty");
    refused(", \"lora\": {\"target_modules\": \"q_proj\"}", "\"target_modules\" must be");
    refused(", \"lora\": {\"use_rslora\": 1}", "\"use_rslora\" must be true or false");
    refused(", \"lora\": [4]", "\"lora\" must be an object");
    refused(", \"base\": {\"quant\": \"nf8\"}", "\"quant\" must be \"nf4\" or \"none\"");
    refused(", \"base\": {\"quant\": \"nf4\"}", "\"nf4\" needs \"lora\"");
    refused(", \"base\": {\"model\": \"m\", \"dtype\": \"bf16\"}, \"lora\": {}",
            "\"dtype\" is not a known key");
    refused(", \"base\": {\"model\": \"m\"}, \"init_weights\": \"w.safetensors\"",
            "both name starting weights");

    job_spec a, b;
    char err[512] = "", what[256] = "";
    int rc = parse(&a, ", \"lora\": {}", err, sizeof err);
    CHECK(rc == 0, "lora {}: %s", err);
    if (rc == 0) {
        CHECK(a.has_lora && a.lora.r == 8 && a.lora.alpha == 8 && !a.lora.use_rslora &&
                  a.lora.modules == (1u << STAGE_LORA_Q | 1u << STAGE_LORA_V) && !a.lora.nf4 &&
                  job_lora(&a) == &a.lora,
              "lora {}: PEFT's defaults (r 8, alpha 8, q_proj and v_proj)");
        job_free(&a);
    }
    /* "config" comes from the base model's directory */
    char text[1024];
    snprintf(text, sizeof text,
             "{\"tokenizer\": \"t.json\", \"out_dir\": \"out\", \"data\": {\"files\": "
             "[\"d.txt\"]}, \"seq_len\": 8, \"batch\": 2, \"steps\": 3, \"base\": {\"model\": "
             "\"hf\", \"quant\": \"nf4\"}, \"lora\": {\"r\": 16, \"alpha\": 32, \"use_rslora\": "
             "true, \"dropout\": 0, \"target_modules\": \"all-linear\"}}");
    rc = job_parse(&a, "/jobs/job.json", text, err, sizeof err);
    CHECK(rc == 0, "base + lora: %s", err);
    if (rc == 0) {
        CHECK(strcmp(a.config, "/jobs/hf/config.json") == 0 && a.base_model &&
                  strcmp(a.base_model, "/jobs/hf") == 0 && a.base_nf4 && a.lora.nf4 &&
                  a.lora.r == 16 && a.lora.alpha == 32 && a.lora.use_rslora &&
                  a.lora.modules == (1u << STAGE_LORA_MODULES) - 1,
              "base + lora parsed: config %s, base %s", a.config,
              a.base_model ? a.base_model : "(none)");
        CHECK(fabsf(stage_lora_scaling(&a.lora) - 8.0f) == 0, "rslora scaling 32/sqrt(16)");
        char text2[1024];
        snprintf(text2, sizeof text2, "%s", text);
        char *r = strstr(text2, "\"r\": 16");
        if (r) r[6] = '2';   /* r 12 */
        rc = job_parse(&b, "/jobs/job.json", text2, err, sizeof err);
        CHECK(rc == 0, "r 12: %s", err);
        if (rc == 0) {
            CHECK(job_compare(&a, &b, what, sizeof what) != 0 && strstr(what, "lora.r"),
                  "job_compare names lora.r: \"%s\"", what);
            job_free(&b);
        }
        CHECK(job_compare(&a, &a, what, sizeof what) == 0, "a job equals itself");
        job_free(&a);
    }
}

static llama_config small_config(void)
{
    llama_config c = {0};
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.vocab_size = 61;
    c.max_position_embeddings = 32;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    char err[256];
    if (llama_config_validate(&c, "test", err, sizeof err)) printf("config: %s\n", err);
    return c;
}

static void test_frozen_memory(void)
{
    llama_config c = small_config();
    stage_lora l = {4, 8.0, false, 1u << STAGE_LORA_Q | 1u << STAGE_LORA_DOWN, false};
    stage *full = NULL, *s = NULL, *q = NULL;
    char err[256];
    CHECK(stage_create(&full, &c, 0, 3, true, true, 2, 8, 1, err, sizeof err) == 0, "%s", err);
    CHECK(stage_create_lora(&s, &c, 0, 3, true, true, 2, 8, 1, &l, err, sizeof err) == 0, "%s",
          err);
    l.nf4 = true;
    CHECK(stage_create_lora(&q, &c, 0, 3, true, true, 2, 8, 1, &l, err, sizeof err) == 0, "%s",
          err);
    if (!full || !s || !q) goto out;
    /* per layer: q A [4,64] B [64,4], down A [4,96] B [64,4] */
    size_t want = 3 * (4 * 64 + 64 * 4 + 4 * 96 + 64 * 4);
    CHECK(stage_num_params(s) == want && stage_num_params(q) == want,
          "a LoRA stage's parameters (gradients, moments) are the adapters: %zu, want %zu",
          stage_num_params(s), want);
    CHECK(stage_param_count(s) == 12, "12 adapter tensors, not %d", stage_param_count(s));
    for (int i = 0; i < stage_param_count(s); i++)
        CHECK(strncmp(stage_param_at(s, i)->name, "base_model.model.model.layers.", 30) == 0 &&
                  strstr(stage_param_at(s, i)->name, ".lora_"),
              "%s is not an adapter", stage_param_at(s, i)->name);
    CHECK(strcmp(stage_param_at(s, 0)->name,
                 "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") == 0 &&
              strcmp(stage_param_at(s, 3)->name,
                     "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight") == 0 &&
              stage_tensor_layer(stage_param_at(s, 11)->name) == 2,
          "PEFT names in order");
    CHECK(stage_frozen_count(s) == stage_param_count(full) && stage_frozen_count(full) == 0,
          "the frozen table is the whole base (%d, %d)", stage_frozen_count(s),
          stage_param_count(full));
    double f32 = stage_frozen_bytes(s), nf4 = stage_frozen_bytes(q);
    double mats = 3.0 * (64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 96 * 64);
    CHECK(f32 == 4.0 * (double)stage_num_params(full) && nf4 <= f32 - 4 * mats + 0.52 * mats + 21 * 1100,
          "frozen bytes: fp32 %.0f (want %.0f), nf4 %.0f", f32,
          4.0 * (double)stage_num_params(full), nf4);
    int nnf4 = 0;
    for (int i = 0; i < stage_frozen_count(q); i++)
        nnf4 += stage_frozen_is_nf4(q, i) && !stage_frozen_data(q, i);
    CHECK(nnf4 == 21, "21 NF4 matrices without fp32 data, not %d", nnf4);
    double mf = stage_memory_bytes(&c, 0, 3, true, true, 2, 8, 1);
    double ml = stage_lora_memory_bytes(&c, 0, 3, true, true, 2, 8, 1, &l);
    CHECK(ml < mf && stage_lora_memory_bytes(&c, 0, 3, true, true, 2, 8, 1, NULL) == mf,
          "memory: LoRA %.0f, full %.0f", ml, mf);
out:
    stage_free(full);
    stage_free(s);
    stage_free(q);
}

/* Stages of no layers, which the planner may choose (the embedding alone,
 * the head alone), with an NF4 base: created (they once read past the
 * module table sizing NF4 scratch they do not have), with no adapters. */
static void test_no_layers(void)
{
    llama_config c = small_config();
    stage_lora l = {4, 8.0, false, 1u << STAGE_LORA_Q | 1u << STAGE_LORA_DOWN, true};
    char err[256];
    for (int k = 0; k < 2; k++) {
        stage *s = NULL;
        int at = k == 0 ? 0 : c.num_hidden_layers;
        int rc = stage_create_lora(&s, &c, at, at, k == 0, k == 1, 2, 8, 1, &l, err, sizeof err);
        CHECK(rc == 0 && s, "an NF4 LoRA stage of layers [%d, %d) (%s alone): %s", at, at,
              k == 0 ? "embedding" : "head", rc ? err : "");
        if (s)
            CHECK(stage_num_params(s) == 0 && stage_param_count(s) == 0,
                  "a stage of no layers has no adapters (%zu parameters)", stage_num_params(s));
        stage_free(s);
    }
}

/* A middle stage with an NF4 base: from an HF directory (hf_load_stage),
 * from the same file (stage_load_weights) and through job_init_stage with
 * "base": the same output bits. */
static void test_hf_nf4(void)
{
    llama_config c = small_config();
    char dir[512], path[600], err[512];
    snprintf(dir, sizeof dir, "%s/test_lora_hf", SHARDNODE_TEST_TMP);
    mkdir(dir, 0755);
    stage *whole = NULL, *a = NULL, *b = NULL, *j = NULL;
    safetensors_file *f = NULL;
    hf_model *m = NULL;
    job_spec job = {0};
    CHECK(stage_create(&whole, &c, 0, 3, true, true, 1, 8, 1, err, sizeof err) == 0, "%s", err);
    if (!whole) return;
    stage_init_weights(whole, 11);
    chain ch = {0};
    ch.cfg = c;
    ch.plan.nstages = 1;
    ch.stages[0] = whole;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(checkpoint_export(path, &ch, err, sizeof err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(llama_config_save(&c, path, err, sizeof err) == 0, "%s", err);
    stage_lora l = {2, 4.0, false, (1u << STAGE_LORA_MODULES) - 1, true};
    int B = 1, T = 8, N = B * T;
    if (stage_create_lora(&a, &c, 1, 2, false, false, B, T, 1, &l, err, sizeof err) ||
        stage_create_lora(&b, &c, 1, 2, false, false, B, T, 1, &l, err, sizeof err) ||
        stage_create_lora(&j, &c, 1, 2, false, false, B, T, 1, &l, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto out;
    }
    CHECK(hf_open(&m, dir, err, sizeof err) == 0 && hf_load_stage(m, a, err, sizeof err) == 0,
          "hf_load_stage: %s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(safetensors_open(&f, path, err, sizeof err) == 0 &&
              stage_load_weights(b, f, err, sizeof err) == 0,
          "stage_load_weights: %s", err);
    char text[1024];
    snprintf(text, sizeof text,
             "%s, \"base\": {\"model\": \"%s\", \"quant\": \"nf4\"}, \"lora\": {\"r\": 2, "
             "\"alpha\": 4, \"target_modules\": \"all-linear\"}}",
             "{\"tokenizer\": \"t.json\", \"out_dir\": \"out\", \"data\": {\"files\": "
             "[\"d.txt\"]}, \"seq_len\": 8, \"batch\": 1, \"steps\": 3, \"seed\": 5",
             dir);
    CHECK(job_parse(&job, "/jobs/job.json", text, err, sizeof err) == 0 &&
              job_init_stage(&job, &c, j, err, sizeof err) == 0,
          "job_init_stage: %s", err);
    stage_init_adapters(a, 5);
    stage_init_adapters(b, 5);
    /* B non-zero, so the adapters take part */
    stage *st[3] = {a, b, j};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < stage_param_count(st[k]); i++) {
            const stage_param *p = stage_param_at(st[k], i);
            if (strstr(p->name, "lora_B"))
                for (size_t e = 0; e < p->numel; e++)
                    stage_params(st[k])[p->offset + e] = 0.01f * (float)((e * 7 + i) % 13) - 0.06f;
        }
    float *x = malloc((size_t)N * c.hidden_size * sizeof *x);
    for (int i = 0; x && i < N * c.hidden_size; i++) x[i] = sinf(0.37f * (float)i);
    int ok = x != NULL;
    for (int k = 0; ok && k < 3; k++)
        ok = stage_forward(st[k], 0, NULL, x, NULL, NULL, NULL, err, sizeof err) == 0;
    CHECK(ok, "forward: %s", err);
    size_t bytes = (size_t)N * c.hidden_size * sizeof(float);
    CHECK(ok && memcmp(stage_output(a, 0), stage_output(b, 0), bytes) == 0 &&
              memcmp(stage_output(a, 0), stage_output(j, 0), bytes) == 0,
          "an NF4 stage from the HF directory, from the file and from job_init_stage: same bits");
    free(x);
out:
    job_free(&job);
    hf_close(m);
    safetensors_close(f);
    stage_free(whole);
    stage_free(a);
    stage_free(b);
    stage_free(j);
}

/* NF4 matrices adopted as stored (what hf_load_stage does with a
 * bitsandbytes checkpoint) compute what quantizing at load computes; a
 * matrix of another shape is refused naming the tensor. */
static void test_adopt(void)
{
    llama_config c = small_config();
    stage_lora l = {2, 4.0, false, 1u << STAGE_LORA_K | 1u << STAGE_LORA_UP, true};
    stage *w = NULL, *a = NULL, *b = NULL;
    char err[256];
    if (stage_create(&w, &c, 1, 2, false, false, 1, 8, 1, err, sizeof err) ||
        stage_create_lora(&a, &c, 1, 2, false, false, 1, 8, 1, &l, err, sizeof err) ||
        stage_create_lora(&b, &c, 1, 2, false, false, 1, 8, 1, &l, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto out;
    }
    stage_init_weights(w, 9);
    int adopted = 0;
    for (int i = 0; i < stage_frozen_count(a); i++) {
        const stage_param *p = stage_frozen_at(a, i);
        const float *src = stage_param_data(w, p->name);
        CHECK(stage_frozen_write(a, i, src, p->numel, err, sizeof err) == 0, "%s", err);
        if (!stage_frozen_is_nf4(b, i)) {
            CHECK(stage_frozen_write(b, i, src, p->numel, err, sizeof err) == 0, "%s", err);
            continue;
        }
        void *buf = malloc(nf4_bytes(p->shape[0], p->shape[1]));
        float *absmax = malloc((size_t)nf4_blocks(p->shape[0], p->shape[1]) * sizeof *absmax);
        nf4_matrix q;
        nf4_init(&q, p->shape[0], p->shape[1], buf);
        nf4_quantize(&q, src, absmax);
        free(absmax);
        nf4_matrix wrong = q;
        wrong.rows++;
        CHECK(stage_frozen_adopt_nf4(b, i, &wrong, buf, err, sizeof err) != 0 &&
                  strstr(err, p->name),
              "a matrix of another shape refused naming %s: %s", p->name, err);
        CHECK(stage_frozen_adopt_nf4(b, i, &q, buf, err, sizeof err) == 0, "%s", err);
        adopted++;
    }
    CHECK(adopted == 7, "7 NF4 matrices adopted, not %d", adopted);
    stage_init_adapters(a, 2);
    stage_init_adapters(b, 2);
    int N = 8, C = c.hidden_size;
    float x[8 * 64];
    for (int i = 0; i < N * C; i++) x[i] = cosf(0.11f * (float)i);
    CHECK(stage_forward(a, 0, NULL, x, NULL, NULL, NULL, err, sizeof err) == 0 &&
              stage_forward(b, 0, NULL, x, NULL, NULL, NULL, err, sizeof err) == 0 &&
              memcmp(stage_output(a, 0), stage_output(b, 0), sizeof x) == 0,
          "adopted NF4 and NF4 quantized at load: the same output bits");
out:
    stage_free(w);
    stage_free(a);
    stage_free(b);
}

/* Full fine-tuning against NF4 base + LoRA (r 16, every projection) for the
 * whole model and a middle stage of 4 layers: the model's state alone
 * (micro-batch [1, 1]: weights, gradients, moments, scratch) must be at most
 * 0.35x; with activations (the same in both: LoRA saves none of them) the
 * figures are printed for the report. */
static void memory_figures(const char *name, const llama_config *c)
{
    stage_lora l = {16, 32.0, false, (1u << STAGE_LORA_MODULES) - 1, true};
    int L = c->num_hidden_layers;
    static const int shapes[3][2] = {{1, 1}, {1, 512}, {4, 1024}};
    struct { const char *what; int a, b; bool first, last; } st[] = {
        {"whole model", 0, L, true, true}, {"4 middle layers", 4, 8, false, false}};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) {
            int B = shapes[k][0], T = shapes[k][1];
            double full = stage_memory_bytes(c, st[i].a, st[i].b, st[i].first, st[i].last, B, T, 1);
            double q = stage_lora_memory_bytes(c, st[i].a, st[i].b, st[i].first, st[i].last, B, T,
                                               1, &l);
            l.nf4 = false;
            double f = stage_lora_memory_bytes(c, st[i].a, st[i].b, st[i].first, st[i].last, B, T,
                                               1, &l);
            l.nf4 = true;
            printf("memory %s, %s, micro-batch [%d, %d]: full fine-tuning %.1f MiB, fp32 base + "
                   "LoRA %.1f MiB (%.3fx), NF4 + LoRA r16 %.1f MiB (%.3fx)\n",
                   name, st[i].what, B, T, full / 1048576, f / 1048576, f / full, q / 1048576,
                   q / full);
            if (k == 0) CHECK(q <= 0.35 * full, "NF4 + LoRA state %.3fx of full", q / full);
        }
}

int main(void)
{
    test_job_keys();
    test_frozen_memory();
    test_no_layers();
    test_hf_nf4();
    test_adopt();
    llama_config c768 = {768, 2048, 12, 12, 4, 4096, 1024, 64, 1e-5f, 10000.0f, false, {0}, LLAMA_ARCH_LLAMA};
    llama_config c2048 = {2048, 5632, 22, 32, 4, 32000, 2048, 64, 1e-5f, 10000.0f, false, {0}, LLAMA_ARCH_LLAMA};
    memory_figures("768x12", &c768);
    memory_figures("2048x22", &c2048);
    if (failures) printf("test_lora: %d failure(s)\n", failures);
    else printf("test_lora: ok\n");
    return failures != 0;
}
