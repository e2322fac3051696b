/* test_config.c — HF config.json loading, validation and saving.
 *
 * What a user relies on: a config.json from the Hub loads with HF's
 * defaults; a wrong one is refused with a message naming the file and the
 * key; what we save loads back identically (and is what HF expects). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char cfg_path[512];
static char *slurp(const char *path);

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fputs(text, fp) == EOF || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static int load_text(const char *text, llama_config *cfg, char *err, size_t errlen)
{
    write_text(cfg_path, text);
    return llama_config_load(cfg, cfg_path, err, errlen);
}

/* Loading `text` must fail with a message holding the path and `needle`. */
static void expect_fail(int line, const char *text, const char *needle)
{
    llama_config cfg;
    char err[512] = "";
    int rc = load_text(text, &cfg, err, sizeof err);
    if (rc == 0 || !strstr(err, cfg_path) || !strstr(err, needle)) {
        failures++;
        fprintf(stderr, "%s:%d: FAIL: expected an error naming %s and '%s'\n  config: %s\n"
                "  rc=%d message: %s\n", __FILE__, line, cfg_path, needle, text, rc, err);
    }
}
#define EXPECT_FAIL(text, needle) expect_fail(__LINE__, text, needle)

#define BASE "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2," \
             "\"vocab_size\":100"

static void test_minimal_gets_defaults(void)
{
    llama_config c;
    char err[512] = "";
    int rc = load_text("{" BASE ",\"num_attention_heads\":4}", &c, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    CHECK(c.hidden_size == 64 && c.intermediate_size == 128 && c.num_hidden_layers == 2 &&
          c.num_attention_heads == 4 && c.vocab_size == 100, "required values");
    CHECK(c.num_key_value_heads == 4, "kv heads default to heads, got %d",
          c.num_key_value_heads);
    CHECK(c.rms_norm_eps == 1e-6f, "eps default, got %g", (double)c.rms_norm_eps);
    CHECK(c.rope_theta == 10000.0f, "theta default, got %g", (double)c.rope_theta);
    CHECK(!c.tie_word_embeddings, "tie default");
    CHECK(c.max_position_embeddings == 2048, "max pos default, got %d",
          c.max_position_embeddings);
    CHECK(c.head_dim == 16, "head_dim, got %d", c.head_dim);

    /* HF writes null for "default". */
    rc = load_text("{" BASE ",\"num_attention_heads\":4,\"num_key_value_heads\":null,"
                   "\"rope_theta\":null}", &c, err, sizeof err);
    CHECK(rc == 0 && c.num_key_value_heads == 4 && c.rope_theta == 10000.0f, "%s", err);
}

/* A TinyLlama-style config.json with many keys we do not use. */
static void test_hub_config(void)
{
    llama_config c;
    char err[512] = "";
    int rc = load_text(
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": false,\n"
        "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"hidden_act\": \"silu\",\n"
        "  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
        "  \"intermediate_size\": 5632,\n  \"max_position_embeddings\": 4096,\n"
        "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n"
        "  \"num_hidden_layers\": 22,\n  \"num_key_value_heads\": 4,\n"
        "  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": null,\n"
        "  \"rope_theta\": 500000.0,\n  \"tie_word_embeddings\": true,\n"
        "  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.35.0\",\n"
        "  \"use_cache\": true,\n  \"vocab_size\": 32000,\n  \"head_dim\": 64\n}\n",
        &c, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    CHECK(c.hidden_size == 2048 && c.intermediate_size == 5632 && c.num_hidden_layers == 22 &&
          c.num_attention_heads == 32 && c.num_key_value_heads == 4 && c.vocab_size == 32000 &&
          c.max_position_embeddings == 4096 && c.head_dim == 64, "sizes");
    CHECK(c.rms_norm_eps == 1e-5f && c.rope_theta == 500000.0f && c.tie_word_embeddings,
          "eps %g theta %g", (double)c.rms_norm_eps, (double)c.rope_theta);

    /* Integral reals are integers; the architecture may be one of several. */
    rc = load_text("{\"hidden_size\":64.0,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                   "\"vocab_size\":100,\"num_attention_heads\":4,\"rope_theta\":10000,"
                   "\"architectures\":[\"Other\",\"LlamaForCausalLM\"]}", &c, err, sizeof err);
    CHECK(rc == 0 && c.hidden_size == 64 && c.rope_theta == 10000.0f, "%s", err);
}

static void test_missing_required(void)
{
    static const char *const keys[] = {"hidden_size", "intermediate_size",
                                       "num_hidden_layers", "num_attention_heads",
                                       "vocab_size"};
    static const char *const values[] = {"64", "128", "2", "4", "100"};
    for (int skip = 0; skip < 5; skip++) {
        char text[512], needle[128];
        size_t used = (size_t)snprintf(text, sizeof text, "{");
        for (int k = 0; k < 5; k++)
            if (k != skip)
                used += (size_t)snprintf(text + used, sizeof text - used, "%s\"%s\":%s",
                                         used > 1 ? "," : "", keys[k], values[k]);
        snprintf(text + used, sizeof text - used, "}");
        snprintf(needle, sizeof needle, "%s is missing", keys[skip]);
        EXPECT_FAIL(text, needle);
        /* null is not a value for a required key */
        snprintf(text + used, sizeof text - used, ",\"%s\":null}", keys[skip]);
        EXPECT_FAIL(text, needle);
    }
}

static void test_wrong_types(void)
{
    static const char *const int_keys[] = {"hidden_size", "intermediate_size",
                                           "num_hidden_layers", "vocab_size"};
    static const char *const bad[] = {"\"64\"", "7.5", "-64", "0", "2147483648", "true",
                                      "[64]", "-0.5", "1e300"};
    for (size_t k = 0; k < 4; k++) {
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            const char *v[4] = {"64", "128", "2", "100"};
            char text[512];
            v[k] = bad[b];
            snprintf(text, sizeof text, "{\"num_attention_heads\":4,\"hidden_size\":%s,"
                     "\"intermediate_size\":%s,\"num_hidden_layers\":%s,\"vocab_size\":%s}",
                     v[0], v[1], v[2], v[3]);
            EXPECT_FAIL(text, int_keys[k]);
        }
    }
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":\"4\"}", "num_attention_heads");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"num_key_value_heads\":0}",
                "num_key_value_heads");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"num_key_value_heads\":1.5}",
                "num_key_value_heads");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"max_position_embeddings\":0}",
                "max_position_embeddings");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"max_position_embeddings\":\"2k\"}",
                "max_position_embeddings");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":\"1e-6\"}",
                "rms_norm_eps");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":0}", "rms_norm_eps");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":-1e-6}", "rms_norm_eps");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":1e300}", "rms_norm_eps");
    /* underflows to 0 in float32 */
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rms_norm_eps\":1e-50}", "rms_norm_eps");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rope_theta\":0}", "rope_theta");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rope_theta\":-10000.0}", "rope_theta");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rope_theta\":\"1e4\"}", "rope_theta");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"tie_word_embeddings\":1}",
                "tie_word_embeddings");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"tie_word_embeddings\":\"true\"}",
                "tie_word_embeddings");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"architectures\":[\"GPT2LMHeadModel\"]}",
                "architectures");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"architectures\":\"LlamaForCausalLM\"}",
                "architectures");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"architectures\":[]}", "architectures");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"head_dim\":32}", "head_dim");
}

static void test_shape_rules(void)
{
    char needle[256];
    snprintf(needle, sizeof needle, "cfg.json: num_attention_heads (5) does not divide "
             "hidden_size (64)");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":5}", needle);
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"num_key_value_heads\":3}",
                "num_key_value_heads (3) does not divide num_attention_heads (4)");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"num_key_value_heads\":8}",
                "num_key_value_heads (8)");
    /* 60 / 4 = 15: RoPE rotates pairs */
    EXPECT_FAIL("{\"hidden_size\":60,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                "\"vocab_size\":100,\"num_attention_heads\":4}", "even");

    llama_config c = {0};
    char err[256] = "";
    CHECK(llama_config_validate(&c, "mem", err, sizeof err) != 0 &&
          strstr(err, "mem: hidden_size"), "%s", err);
    c = (llama_config){.hidden_size = 64, .intermediate_size = 128, .num_hidden_layers = 1,
                       .num_attention_heads = 8, .num_key_value_heads = 2, .vocab_size = 10,
                       .max_position_embeddings = 16, .rms_norm_eps = 1e-5f,
                       .rope_theta = 10000.0f};
    CHECK(llama_config_validate(&c, "mem", err, sizeof err) == 0 && c.head_dim == 8, "%s",
          err);
    c.rms_norm_eps = NAN;
    CHECK(llama_config_validate(&c, "mem", err, sizeof err) != 0 &&
          strstr(err, "rms_norm_eps"), "%s", err);
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = INFINITY;
    CHECK(llama_config_validate(&c, "mem", err, sizeof err) != 0 && strstr(err, "rope_theta"),
          "%s", err);
    /* A tiny buffer gets a truncated, terminated message. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    CHECK(llama_config_validate(&c, "mem", tiny, sizeof tiny) != 0 && tiny[7] == '\0',
          "truncation");
}

/* Keys that would silently change the network are refused, not ignored. */
static void test_unsupported_features(void)
{
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"attention_bias\":true}",
                "attention_bias must be false");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"mlp_bias\":true}", "mlp_bias must be false");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"hidden_act\":\"gelu\"}",
                "hidden_act must be \"silu\"");
    llama_config cfg;
    char err[512] = "";
    CHECK(load_text("{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":null,"
                    "\"attention_bias\":false,\"hidden_act\":\"silu\"}", &cfg, err,
                    sizeof err) == 0, "plain LLaMA keys refused: %s", err);
}

#define L3 "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0," \
           "\"original_max_position_embeddings\":64"
#define ROPE(body) "{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":{" body "}}"

/* Llama 3.1/3.2's rope_scaling loads with every field; anything else in it is
 * refused naming the field, other scalings by their type. */
static void test_rope_scaling(void)
{
    llama_config c;
    char err[512] = "";
    CHECK(load_text(ROPE("\"rope_type\":\"llama3\"," L3), &c, err, sizeof err) == 0, "%s", err);
    CHECK(c.rope_scaling.llama3 && c.rope_scaling.factor == 8.0 &&
          c.rope_scaling.low_freq_factor == 1.0 && c.rope_scaling.high_freq_factor == 4.0 &&
          c.rope_scaling.original_max_position_embeddings == 64, "llama3 fields not kept");
    /* the older spelling "type", both agreeing, integers for the factors */
    CHECK(load_text(ROPE("\"type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
                         "\"high_freq_factor\":4,\"original_max_position_embeddings\":64.0"),
                    &c, err, sizeof err) == 0 && c.rope_scaling.llama3 &&
          c.rope_scaling.factor == 8.0, "%s", err);
    CHECK(load_text(ROPE("\"type\":\"llama3\",\"rope_type\":\"llama3\"," L3), &c, err,
                    sizeof err) == 0, "%s", err);
    CHECK(load_text(ROPE("\"rope_type\":\"default\""), &c, err, sizeof err) == 0 &&
          !c.rope_scaling.llama3, "default: %s", err);

    EXPECT_FAIL(ROPE("\"rope_type\":\"linear\",\"factor\":2.0"), "\"linear\" is not supported");
    EXPECT_FAIL(ROPE("\"type\":\"dynamic\",\"factor\":2.0"), "\"dynamic\" is not supported");
    EXPECT_FAIL(ROPE("\"rope_type\":\"yarn\",\"factor\":4.0"), "\"yarn\" is not supported");
    EXPECT_FAIL(ROPE(L3), "rope_scaling has no rope_type");
    EXPECT_FAIL(ROPE("\"rope_type\":3," L3), "rope_scaling.rope_type must be a string");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"type\":\"linear\"," L3), "disagree");
    EXPECT_FAIL(ROPE("\"rope_type\":\"default\",\"factor\":2.0"),
                "rope_scaling.factor is not a key of rope_type \"default\"");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"beta_fast\":32," L3),
                "rope_scaling.beta_fast is not a key of rope_type \"llama3\"");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"rope_scaling\":\"llama3\"}",
                "rope_scaling must be an object or null");
    static const char *const fields[] = {"factor", "low_freq_factor", "high_freq_factor",
                                         "original_max_position_embeddings"};
    for (int i = 0; i < 4; i++) {
        /* each field missing, then of the wrong type */
        char text[600], needle[96];
        const char *vals[] = {"8.0", "1.0", "4.0", "64"};
        for (int bad = 0; bad < 2; bad++) {
            int n = snprintf(text, sizeof text, "{" BASE ",\"num_attention_heads\":4,"
                             "\"rope_scaling\":{\"rope_type\":\"llama3\"");
            for (int k = 0; k < 4; k++) {
                if (k == i && !bad) continue;
                n += snprintf(text + n, sizeof text - (size_t)n, ",\"%s\":%s", fields[k],
                              k == i ? "\"8\"" : vals[k]);
            }
            snprintf(text + n, sizeof text - (size_t)n, "}}");
            snprintf(needle, sizeof needle, "rope_scaling.%s %s", fields[i],
                     bad ? "must be a" : "is missing");
            EXPECT_FAIL(text, needle);
        }
    }
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"factor\":0.5,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64"),
                "rope_scaling.factor must be a finite number >= 1");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64"),
                "rope_scaling.low_freq_factor must be positive");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64"),
                "rope_scaling.high_freq_factor (4) must be finite and greater than "
                "low_freq_factor (4)");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":1e300,\"original_max_position_embeddings\":64"),
                "rope_scaling.high_freq_factor");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":0"),
                "rope_scaling.original_max_position_embeddings must be a positive integer");
    EXPECT_FAIL(ROPE("\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64.5"),
                "rope_scaling.original_max_position_embeddings must be a positive integer");

    /* The frequencies: a wavelength 2 pi / f under original / high is kept,
     * one over original / low is divided by factor, those between lie in
     * between; the scaled list still falls with i, as plain RoPE's does. */
    CHECK(load_text(ROPE("\"rope_type\":\"llama3\"," L3), &c, err, sizeof err) == 0, "%s", err);
    float plain[8], scaled[8];
    int kept = 0, divided = 0, between = 0;
    llama_config p = c;
    p.rope_scaling.llama3 = false;
    llama_rope_inv_freq(&p, plain);
    llama_rope_inv_freq(&c, scaled);
    for (int i = 0; i < 8; i++) {
        double wavelen = 2 * 3.141592653589793 / plain[i];
        if (wavelen < 64.0 / 4.0) {
            kept++;
            CHECK(scaled[i] == plain[i], "freq %d: %g changed to %g", i, (double)plain[i],
                  (double)scaled[i]);
        } else if (wavelen > 64.0 / 1.0) {
            divided++;
            CHECK(scaled[i] == plain[i] / 8.0f, "freq %d: %g not divided by 8: %g", i,
                  (double)plain[i], (double)scaled[i]);
        } else {
            between++;
            CHECK(scaled[i] < plain[i] && scaled[i] > plain[i] / 8.0f, "freq %d: %g -> %g", i,
                  (double)plain[i], (double)scaled[i]);
        }
        CHECK(i == 0 || scaled[i] < scaled[i - 1], "freq %d: %g after %g", i,
              (double)scaled[i], (double)scaled[i - 1]);
    }
    CHECK(kept && divided && between, "test config covers all three bands: %d %d %d", kept,
          divided, between);
    /* the tables the stages and the generator use rotate by those */
    float cs[4 * 8], sn[4 * 8];
    CHECK(llama_rope_tables(&c, cs, sn, 4) == 0, "tables");
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 8; i++)
            CHECK(cs[t * 8 + i] == (float)cos((double)t * scaled[i]) &&
                  sn[t * 8 + i] == (float)sin((double)t * scaled[i]), "table (%d, %d)", t, i);

    /* saved and loaded back the same; a plain config saves null */
    char path[600];
    llama_config back;
    snprintf(path, sizeof path, "%s.rope", cfg_path);
    CHECK(llama_config_save(&c, path, err, sizeof err) == 0, "%s", err);
    CHECK(llama_config_load(&back, path, err, sizeof err) == 0 &&
          memcmp(&back.rope_scaling, &c.rope_scaling, sizeof c.rope_scaling) == 0,
          "rope_scaling round trip: %s", err);
    CHECK(strstr(slurp(path), "\"rope_type\": \"llama3\""), "%s", slurp(path));
    CHECK(llama_config_save(&p, path, err, sizeof err) == 0 &&
          llama_config_load(&back, path, err, sizeof err) == 0 && !back.rope_scaling.llama3 &&
          strstr(slurp(path), "\"rope_scaling\": null"), "plain: %s", err);
    /* a factor config.json's 9 digits would change is refused, not rounded */
    c.rope_scaling.factor = 8.0000000001;
    CHECK(llama_config_save(&c, path, err, sizeof err) != 0 &&
          strstr(err, "rope_scaling.factor"), "%s", err);
    c.rope_scaling.factor = 0.5;
    CHECK(llama_config_validate(&c, "mem", err, sizeof err) != 0 &&
          strstr(err, "rope_scaling.factor"), "%s", err);
    unlink(path);
}

static void test_bad_files(void)
{
    llama_config c;
    char err[512] = "";
    int rc = load_text("{\n  \"hidden_size\": 64,\n  \"vocab_size\" 100\n}\n", &c, err,
                       sizeof err);
    CHECK(rc != 0 && strstr(err, cfg_path) && strstr(err, "line 3"), "%s", err);
    EXPECT_FAIL("[1, 2]", "object");
    EXPECT_FAIL("", "JSON");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"hidden_size\":64}", "duplicate");

    char missing[600];
    snprintf(missing, sizeof missing, "%s.does-not-exist", cfg_path);
    rc = llama_config_load(&c, missing, err, sizeof err);
    CHECK(rc != 0 && strstr(err, missing), "%s", err);
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    static char buf[8192];
    size_t n = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp)
        fclose(fp);
    buf[n] = '\0';
    return buf;
}

static void test_save_round_trip(void)
{
    char path[600], tmp[620], err[512] = "";
    llama_config c = {.hidden_size = 96, .intermediate_size = 256, .num_hidden_layers = 3,
                      .num_attention_heads = 6, .num_key_value_heads = 2, .vocab_size = 1000,
                      .max_position_embeddings = 512, .rms_norm_eps = 1e-5f,
                      .rope_theta = 500000.0f, .tie_word_embeddings = true};
    llama_config back;
    snprintf(path, sizeof path, "%s.saved", cfg_path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(llama_config_save(&c, path, err, sizeof err) == 0, "%s", err);
    CHECK(!file_exists(tmp), "temp file left behind");
    CHECK(llama_config_load(&back, path, err, sizeof err) == 0, "%s", err);
    CHECK(back.hidden_size == 96 && back.intermediate_size == 256 &&
          back.num_hidden_layers == 3 && back.num_attention_heads == 6 &&
          back.num_key_value_heads == 2 && back.vocab_size == 1000 &&
          back.max_position_embeddings == 512 && back.head_dim == 16 &&
          back.rms_norm_eps == 1e-5f && back.rope_theta == 500000.0f &&
          back.tie_word_embeddings, "round trip changed values");

    const char *text = slurp(path);
    CHECK(strstr(text, "\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]") ||
          strstr(text, "\"architectures\": [\"LlamaForCausalLM\"]"), "%s", text);
    CHECK(strstr(text, "\"model_type\": \"llama\""), "%s", text);
    CHECK(strstr(text, "\"torch_dtype\": \"float32\""), "%s", text);
    CHECK(strstr(text, "\"hidden_act\": \"silu\""), "%s", text);
    CHECK(strstr(text, "\"tie_word_embeddings\": true"), "%s", text);
    CHECK(!strstr(text, "9999"), "floats written in shortest form: %s", text);
    CHECK(text[0] == '{' && text[strlen(text) - 1] == '\n', "pretty, newline-terminated");

    /* An invalid config is not written, and an existing file survives. */
    llama_config bad = c;
    bad.num_attention_heads = 5;
    CHECK(llama_config_save(&bad, path, err, sizeof err) != 0 &&
          strstr(err, "num_attention_heads"), "%s", err);
    CHECK(llama_config_load(&back, path, err, sizeof err) == 0 && back.hidden_size == 96,
          "existing file damaged: %s", err);

    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s.no-such-dir/config.json", cfg_path);
    CHECK(llama_config_save(&c, nodir, err, sizeof err) != 0 && strstr(err, nodir), "%s",
          err);
    unlink(path);
}

/* Absurd sizes are refused before anything is allocated, with the figure
 * (a million layers; sequences of 65536 in micro-batches of 64). Without the
 * check, stage_create would calloc the million layers' tables and then fail
 * (or, under ASan, abort) on the activations. */
static void test_absurd_sizes_refused_with_figure(void)
{
    llama_config c = {.hidden_size = 4096, .intermediate_size = 11008,
                      .num_hidden_layers = 1000000, .num_attention_heads = 32,
                      .num_key_value_heads = 32, .vocab_size = 32000,
                      .max_position_embeddings = 65536, .rms_norm_eps = 1e-5f,
                      .rope_theta = 10000.0f};
    char err[512] = "";
    CHECK(llama_config_validate(&c, "big.json", err, sizeof err) == 0, "%s", err);
    double need = stage_memory_bytes(&c, 0, c.num_hidden_layers, true, true, 1, 64, 1);
    CHECK(need > 1e15, "a million 4096-wide layers need %g bytes?", need);
    stage *s = NULL;
    int rc = stage_create(&s, &c, 0, c.num_hidden_layers, true, true, 1, 64, 1, err, sizeof err);
    CHECK(rc != 0 && s == NULL && strstr(err, "needs") && strstr(err, "PiB") &&
              strstr(err, "[0, 1000000)") && strstr(err, "memory"),
          "a million layers: %s", err);

    llama_config t = {.hidden_size = 96, .intermediate_size = 260, .num_hidden_layers = 4,
                      .num_attention_heads = 6, .num_key_value_heads = 2, .vocab_size = 259,
                      .max_position_embeddings = 65536, .rms_norm_eps = 1e-5f,
                      .rope_theta = 10000.0f};
    CHECK(llama_config_validate(&t, "long.json", err, sizeof err) == 0, "%s", err);
    rc = stage_create(&s, &t, 0, 4, true, true, 64, 65536, 1, err, sizeof err);
    CHECK(rc != 0 && s == NULL && strstr(err, "micro-batch [64, 65536] needs") &&
              strstr(err, "TiB"),
          "sequence 65536 x batch 64: %s", err);

    /* the figure is what a real stage allocates, within the alignment slack */
    rc = stage_create(&s, &t, 0, 4, true, true, 2, 16, 1, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    double small = stage_memory_bytes(&t, 0, 4, true, true, 2, 16, 1);
    double params = (double)stage_num_params(s) * 4 * sizeof(float);
    CHECK(small > params && small < params * 1.5 + 4e6, "%g bytes for %g of weights and state",
          small, params);
    stage_free(s);
}

/* A file's text (a newline in a JSON string) never makes a message of
 * several lines: a config could otherwise forge lines in a log. */
static void test_one_line_messages(void)
{
    llama_config c;
    char err[512] = "";
    int rc = load_text("{\"hidden_size\": \"6\n4\"}", &c, err, sizeof err);
    CHECK(rc != 0 && !strchr(err, '\n') && strstr(err, cfg_path), "%s", err);
    /* jansson quotes the text near an error: here a backslash and a newline */
    rc = load_text("{\"hidden_size\": 64,\n \"x\": \"a\\\n\"}", &c, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "invalid escape") && !strchr(err, '\n') && strstr(err, "\\n"),
          "%s", err);
}

/* Mistral-style configs: MistralConfig's defaults, accepted only while the
 * sliding window cannot bind; saved back as a Mistral. */
#define MISTRAL "\"architectures\":[\"MistralForCausalLM\"],\"model_type\":\"mistral\""

static void test_mistral(void)
{
    llama_config c, back;
    char err[512] = "", path[600];
    int rc = load_text("{" BASE "," MISTRAL ",\"num_attention_heads\":4,"
                       "\"num_key_value_heads\":2,\"max_position_embeddings\":256,"
                       "\"sliding_window\":null,\"head_dim\":16}", &c, err, sizeof err);
    CHECK(rc == 0 && c.arch == LLAMA_ARCH_MISTRAL && c.head_dim == 16 &&
          c.num_key_value_heads == 2 && c.max_position_embeddings == 256, "%s", err);
    /* A window as long as the context never binds; longer neither. */
    rc = load_text("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"num_key_value_heads\":4,"
                   "\"max_position_embeddings\":256,\"sliding_window\":256}", &c, err,
                   sizeof err);
    CHECK(rc == 0 && c.arch == LLAMA_ARCH_MISTRAL, "%s", err);
    /* MistralConfig's defaults: 8 KV heads, 131072 positions, and (absent)
     * a window of 4096, which binds there. */
    EXPECT_FAIL("{" BASE "," MISTRAL ",\"num_attention_heads\":8}",
                "sliding_window 4096 (MistralConfig's default, the key is absent) < "
                "max_position_embeddings 131072: sliding-window attention is not supported");
    rc = load_text("{" BASE "," MISTRAL ",\"num_attention_heads\":8,\"sliding_window\":null}",
                   &c, err, sizeof err);
    CHECK(rc == 0 && c.num_key_value_heads == 8 && c.max_position_embeddings == 131072,
          "kv %d max pos %d: %s", c.num_key_value_heads, c.max_position_embeddings, err);
    /* null KV heads is "as many as the heads" in MistralConfig too. */
    rc = load_text("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"num_key_value_heads\":null,"
                   "\"sliding_window\":null}", &c, err, sizeof err);
    CHECK(rc == 0 && c.num_key_value_heads == 4, "kv %d: %s", c.num_key_value_heads, err);
    /* model_type alone makes it a Mistral; the architecture alone too. */
    rc = load_text("{" BASE ",\"model_type\":\"mistral\",\"num_attention_heads\":4,"
                   "\"num_key_value_heads\":4,\"sliding_window\":null}", &c, err, sizeof err);
    CHECK(rc == 0 && c.arch == LLAMA_ARCH_MISTRAL, "%s", err);
    rc = load_text("{" BASE ",\"architectures\":[\"MistralForCausalLM\"],\"num_attention_heads\":4,"
                   "\"num_key_value_heads\":4,\"sliding_window\":null}", &c, err, sizeof err);
    CHECK(rc == 0 && c.arch == LLAMA_ARCH_MISTRAL, "%s", err);
    /* A LLaMA ignores sliding_window (LlamaConfig has none). */
    rc = load_text("{" BASE ",\"num_attention_heads\":4,\"sliding_window\":16}", &c, err,
                   sizeof err);
    CHECK(rc == 0 && c.arch == LLAMA_ARCH_LLAMA, "%s", err);

    EXPECT_FAIL("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"max_position_embeddings\":256,"
                "\"sliding_window\":64}", "sliding_window 64 < max_position_embeddings 256: "
                "sliding-window attention is not supported");
    EXPECT_FAIL("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"sliding_window\":\"64\"}",
                "sliding_window must be a positive integer");
    EXPECT_FAIL("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"num_key_value_heads\":4,"
                "\"sliding_window\":null,\"head_dim\":32}",
                "head_dim (32) differs from hidden_size / num_attention_heads (16)");
    EXPECT_FAIL("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"num_key_value_heads\":4,"
                "\"sliding_window\":null,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}",
                "rope_scaling type \"llama3\" in a Mistral config is not supported");
    EXPECT_FAIL("{" BASE ",\"num_attention_heads\":4,\"model_type\":7}",
                "model_type must be a string");

    /* Saved as it was loaded: a Mistral with no window, which loads again. */
    rc = load_text("{" BASE "," MISTRAL ",\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                   "\"max_position_embeddings\":256,\"sliding_window\":1000}", &c, err,
                   sizeof err);
    CHECK(rc == 0, "%s", err);
    snprintf(path, sizeof path, "%s.mistral", cfg_path);
    CHECK(llama_config_save(&c, path, err, sizeof err) == 0, "%s", err);
    const char *text = slurp(path);
    CHECK(strstr(text, "\"MistralForCausalLM\"") && !strstr(text, "LlamaForCausalLM") &&
          strstr(text, "\"model_type\": \"mistral\"") &&
          strstr(text, "\"sliding_window\": null"), "%s", text);
    CHECK(llama_config_load(&back, path, err, sizeof err) == 0 &&
          back.arch == LLAMA_ARCH_MISTRAL && back.num_key_value_heads == 2 &&
          back.max_position_embeddings == 256, "%s", err);
    c.rope_scaling = (llama_rope_scaling){.llama3 = true, .factor = 8, .low_freq_factor = 1,
                                          .high_freq_factor = 4,
                                          .original_max_position_embeddings = 64};
    CHECK(llama_config_save(&c, path, err, sizeof err) != 0 && strstr(err, "Mistral"), "%s",
          err);
    unlink(path);
}

int main(void)
{
    snprintf(cfg_path, sizeof cfg_path, "%s/test_config_%d_cfg.json", SHARDNODE_TEST_TMP,
             (int)getpid());
    test_minimal_gets_defaults();
    test_hub_config();
    test_missing_required();
    test_wrong_types();
    test_shape_rules();
    test_unsupported_features();
    test_rope_scaling();
    test_bad_files();
    test_save_round_trip();
    test_mistral();
    test_absurd_sizes_refused_with_figure();
    test_one_line_messages();
    unlink(cfg_path);
    if (failures) {
        fprintf(stderr, "test_config: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_config: ok\n");
    return 0;
}
