/* test_peft.c — a LoRA job's output (node/runtime/peft.c) and the merge of
 * adapters into their base (model/stage_merge.c), without Python
 * (reference.peft checks the same files against PEFT itself):
 *  - adapter_config.json: written and read back (r, alpha integral and
 *    not, target modules, rslora, base_model_name_or_path); what shardnode
 *    cannot merge refused naming the key (DoRA, fan_in_fan_out, bias, rank
 *    patterns, layers_to_transform, another peft_type, r 0, an unknown
 *    module, no target_modules);
 *  - stage_merge_delta equals W + scaling B A in double to 1e-6;
 *  - stage_merge_adapters on a whole ordinary stage changes exactly the
 *    targeted projections (by the delta) and names a missing adapter;
 *  - stage_lora_write_merged of a LoRA stage (fp32 and NF4 base): each
 *    targeted projection is the frozen matrix (dequantized) plus its delta,
 *    every other tensor the frozen one, in model order. */
#include "model.h"
#include "runtime.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#ifndef SHARDNODE_TEST_TMP
#define SHARDNODE_TEST_TMP "/tmp"
#endif

static const llama_config tiny = {32, 48, 2, 4, 2, 40, 16, 8, 1e-5f, 10000.0f, false, {0}, LLAMA_ARCH_LLAMA};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    static char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_config(void)
{
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/peft_adapter_config.json", SHARDNODE_TEST_TMP);
    job_spec j = {0};
    char base[] = "/models/base";
    j.has_lora = true;
    j.base_model = base;
    j.lora = (stage_lora){4, 8.5, true, 1u << STAGE_LORA_Q | 1u << STAGE_LORA_DOWN, false};
    CHECK(peft_config_write(path, &j, err, sizeof err) == 0, "write: %s", err);
    const char *text = read_text(path);
    CHECK(strstr(text, "\"lora_alpha\": 8.5") && strstr(text, "\"peft_type\": \"LORA\"") &&
              strstr(text, "\"task_type\": \"CAUSAL_LM\"") &&
              strstr(text, "\"base_model_name_or_path\": \"/models/base\"") &&
              strstr(text, "\"use_rslora\": true"),
          "adapter_config.json: %s", text);
    stage_lora l;
    CHECK(peft_config_read(path, &l, err, sizeof err) == 0 && l.r == 4 && l.alpha == 8.5 &&
              l.use_rslora && l.modules == j.lora.modules && !l.nf4,
          "read back: %s (r %d alpha %g modules %x)", err, l.r, l.alpha, l.modules);
    j.lora.alpha = 16;
    j.lora.use_rslora = false;
    CHECK(peft_config_write(path, &j, err, sizeof err) == 0, "write: %s", err);
    text = read_text(path);
    CHECK(strstr(text, "\"lora_alpha\": 16,") != NULL, "integral alpha: %s", text);

    static const struct { const char *json, *want; } bad[] = {
        {"{\"peft_type\": \"IA3\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}",
         "\"peft_type\" is \"IA3\""},
        {"{\"peft_type\": \"LORA\", \"r\": 0, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}",
         "\"r\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
         "\"use_dora\": true}", "\"use_dora\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
         "\"fan_in_fan_out\": true}", "\"fan_in_fan_out\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
         "\"bias\": \"all\"}", "\"bias\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
         "\"rank_pattern\": {\"q_proj\": 8}}", "\"rank_pattern\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], "
         "\"layers_to_transform\": [0]}", "\"layers_to_transform\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
         "[\"q_proj\", \"lm_head\"]}", "entry 1"},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8}", "\"target_modules\""},
        {"{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": -1, \"target_modules\": "
         "[\"q_proj\"]}", "alpha"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i].json);
        err[0] = 0;
        int rc = peft_config_read(path, &l, err, sizeof err);
        CHECK(rc != 0 && strstr(err, bad[i].want) && strstr(err, path),
              "refusal %zu: rc %d \"%s\", expected \"%s\"", i, rc, err, bad[i].want);
    }
}

static void test_delta(void)
{
    int out = 37, in = 29, r = 5;
    float *w = malloc(sizeof(float) * (size_t)(out * in)), *w0 = malloc(sizeof(float) * (size_t)(out * in));
    float *A = malloc(sizeof(float) * (size_t)(r * in)), *B = malloc(sizeof(float) * (size_t)(out * r));
    for (int i = 0; i < out * in; i++) w0[i] = w[i] = frand();
    for (int i = 0; i < r * in; i++) A[i] = frand();
    for (int i = 0; i < out * r; i++) B[i] = frand();
    char err[256];
    CHECK(stage_merge_delta(w, A, B, out, in, r, 0.75f, err, sizeof err) == 0, "%s", err);
    double worst = 0;
    for (int o = 0; o < out; o++)
        for (int i = 0; i < in; i++) {
            double d = 0;
            for (int k = 0; k < r; k++) d += (double)B[o * r + k] * A[k * in + i];
            worst = fmax(worst, fabs(w0[o * in + i] + 0.75 * d - w[o * in + i]));
        }
    CHECK(worst < 1e-6, "stage_merge_delta: %g from double", worst);
    free(w);
    free(w0);
    free(A);
    free(B);
}

/* A and B of every module in `modules` of both layers, random, in a file. */
static void write_adapters(const char *path, unsigned modules, int r, float **store, int *n)
{
    safetensors_entry e[2 * 2 * STAGE_LORA_MODULES];
    static char names[2 * 2 * STAGE_LORA_MODULES][96];
    *n = 0;
    for (int l = 0; l < tiny.num_hidden_layers; l++)
        for (int m = 0; m < STAGE_LORA_MODULES; m++) {
            if (!(modules & (1u << m))) continue;
            int o, in;
            stage_lora_module_shape(&tiny, m, &o, &in);
            for (int b = 0; b < 2; b++) {
                int k = (*n)++;
                stage_lora_adapter_name(names[k], sizeof names[k], l, m, b);
                int64_t rows = b ? o : r, cols = b ? r : in;
                store[k] = malloc(sizeof(float) * (size_t)(rows * cols));
                for (int64_t i = 0; i < rows * cols; i++) store[k][i] = frand() * 0.3f;
                e[k] = (safetensors_entry){names[k], SAFETENSORS_F32, 2, {rows, cols}, store[k]};
            }
        }
    char err[256];
    CHECK(safetensors_write(path, e, *n, err, sizeof err) == 0, "%s", err);
}

static void test_merge_adapters(void)
{
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/peft_adapters.safetensors", SHARDNODE_TEST_TMP);
    stage_lora lora = {3, 6, false, 1u << STAGE_LORA_K | 1u << STAGE_LORA_UP, false};
    float *store[4 * STAGE_LORA_MODULES];
    int n;
    write_adapters(path, lora.modules, lora.r, store, &n);
    stage *s = NULL;
    CHECK(stage_create(&s, &tiny, 0, 2, true, true, 1, 1, 1, err, sizeof err) == 0, "%s", err);
    if (!s) return;
    stage_init_weights(s, 5);
    size_t np = stage_num_params(s);
    float *before = malloc(np * sizeof *before);
    memcpy(before, stage_params(s), np * sizeof *before);
    safetensors_file *f = NULL;
    CHECK(safetensors_open(&f, path, err, sizeof err) == 0, "%s", err);
    CHECK(stage_merge_adapters(s, &lora, f, err, sizeof err) == 0, "merge: %s", err);
    /* every tensor: the targeted ones moved by their delta, the others not */
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        const float *now = stage_params(s) + p->offset, *was = before + p->offset;
        bool targeted = strstr(p->name, ".k_proj.") || strstr(p->name, ".up_proj.");
        float *want = malloc(p->numel * sizeof *want);
        memcpy(want, was, p->numel * sizeof *want);
        if (targeted) {
            int l = p->name[13] - '0', m = strstr(p->name, "k_proj") ? STAGE_LORA_K : STAGE_LORA_UP;
            /* written layer by layer, k_proj then up_proj, A then B */
            int k = (l * 2 + (m == STAGE_LORA_UP)) * 2;
            stage_merge_delta(want, store[k], store[k + 1], (int)p->shape[0], (int)p->shape[1],
                              lora.r, stage_lora_scaling(&lora), err, sizeof err);
        }
        double worst = 0, moved = 0;
        for (size_t j = 0; j < p->numel; j++) {
            worst = fmax(worst, fabs((double)now[j] - want[j]));
            moved = fmax(moved, fabs((double)now[j] - was[j]));
        }
        CHECK(worst == 0 && (moved > 0) == targeted, "%s: %g from the expected merge, moved %g",
              p->name, worst, moved);
        free(want);
    }
    /* an adapter missing from the file is named */
    lora.modules |= 1u << STAGE_LORA_O;
    CHECK(stage_merge_adapters(s, &lora, f, err, sizeof err) != 0 &&
              strstr(err, "model.layers.0.self_attn.o_proj.lora_A.weight"),
          "missing adapter: %s", err);
    safetensors_close(f);
    stage_free(s);
    free(before);
    for (int i = 0; i < n; i++) free(store[i]);
}

static void test_write_merged(bool nf4)
{
    char path[512], err[1024];
    snprintf(path, sizeof path, "%s/peft_merged_%d.safetensors", SHARDNODE_TEST_TMP, nf4);
    stage_lora lora = {2, 4, nf4, 1u << STAGE_LORA_Q | 1u << STAGE_LORA_DOWN, nf4};
    stage *s = NULL;
    CHECK(stage_create_lora(&s, &tiny, 0, 2, true, true, 1, 1, 1, &lora, err, sizeof err) == 0,
          "%s", err);
    if (!s) return;
    stage_init_weights(s, 9);
    float *params = stage_params(s);
    for (size_t i = 0; i < stage_num_params(s); i++) params[i] = frand() * 0.2f;
    uint64_t written = 0;
    CHECK(stage_lora_write_merged(s, path, &written, err, sizeof err) == 0, "%s", err);
    safetensors_file *f = NULL;
    CHECK(safetensors_open(&f, path, err, sizeof err) == 0, "%s", err);
    if (!f) {
        stage_free(s);
        return;
    }
    uint64_t total = 0;
    CHECK(safetensors_count(f) == stage_frozen_count(s), "%d tensors, %d frozen",
          safetensors_count(f), stage_frozen_count(s));
    for (int i = 0; i < stage_frozen_count(s); i++) {
        const stage_param *p = stage_frozen_at(s, i);
        float *want = malloc(p->numel * sizeof *want), *got = malloc(p->numel * sizeof *got);
        stage_frozen_read(s, i, want, p->numel, err, sizeof err);
        int l, m = -1;
        for (int k = 0; k < STAGE_LORA_MODULES; k++) {
            char hf[96];
            for (l = 0; l < 2; l++) {
                snprintf(hf, sizeof hf, "model.layers.%d.%s.%s.weight", l,
                         k <= STAGE_LORA_O ? "self_attn" : "mlp", stage_lora_module_name(k));
                if (strcmp(hf, p->name) == 0) break;
            }
            if (l < 2) {
                m = k;
                break;
            }
        }
        if (m >= 0 && (lora.modules & (1u << m))) {
            char an[96], bn[96];
            stage_lora_adapter_name(an, sizeof an, l, m, false);
            stage_lora_adapter_name(bn, sizeof bn, l, m, true);
            stage_merge_delta(want, stage_param_data(s, an), stage_param_data(s, bn),
                              (int)p->shape[0], (int)p->shape[1], lora.r,
                              stage_lora_scaling(&lora), err, sizeof err);
        }
        int rc = safetensors_read_f32(f, p->name, p->ndim, p->shape, got, err, sizeof err);
        CHECK(rc == 0 && memcmp(got, want, p->numel * sizeof *got) == 0,
              "nf4 %d: %s is not the frozen tensor plus its delta (%s)", nf4, p->name, err);
        total += p->numel;
        free(want);
        free(got);
    }
    CHECK(written == total, "%llu values written, %llu in the file",
          (unsigned long long)written, (unsigned long long)total);
    safetensors_close(f);
    stage_free(s);
}

int main(void)
{
    test_config();
    test_delta();
    test_merge_adapters();
    test_write_merged(false);
    test_write_merged(true);
    if (failures) printf("test_peft: %d failure(s)\n", failures);
    else printf("test_peft: ok\n");
    return failures != 0;
}
