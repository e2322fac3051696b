/* fuzz_config.c — libFuzzer target for an HF config.json
 * (model/config.c), which a user writes or downloads and a job names.
 *
 * The input is the whole file. llama_config_load must refuse anything
 * malformed with a one-line message naming the file; every config it
 * accepts must validate again unchanged, save, and load back to the same
 * config (the writer and the reader agree), and the memory a stage of it
 * needs must be computable without allocating it (stage_memory_bytes), so
 * absurd sizes are refused with a figure rather than by running out. */
#include "fuzz_util.h"
#include "model.h"

#include <math.h>

#define T "fuzz_config"

static int same(const llama_config *a, const llama_config *b)
{
    return a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size &&
           a->num_hidden_layers == b->num_hidden_layers &&
           a->num_attention_heads == b->num_attention_heads &&
           a->num_key_value_heads == b->num_key_value_heads && a->vocab_size == b->vocab_size &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->head_dim == b->head_dim && a->rms_norm_eps == b->rms_norm_eps &&
           a->rope_theta == b->rope_theta && a->tie_word_embeddings == b->tie_word_embeddings &&
           a->arch == b->arch;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512], again[512], err[512];
    fuzz_write_file("config.json", data, size, path, sizeof path);
    llama_config cfg;
    memset(err, 'x', sizeof err);
    if (llama_config_load(&cfg, path, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
        fuzz_require(strstr(err, path) != NULL, T, "refusal does not name the file", err);
        return 0;
    }
    llama_config copy = cfg;
    fuzz_require(llama_config_validate(&copy, path, err, sizeof err) == 0 && same(&copy, &cfg),
                 T, "an accepted config does not validate again", err);
    fuzz_write_file("saved.json", "", 0, again, sizeof again);
    fuzz_require(llama_config_save(&cfg, again, err, sizeof err) == 0, T,
                 "an accepted config does not save", err);
    llama_config back;
    fuzz_require(llama_config_load(&back, again, err, sizeof err) == 0, T,
                 "a saved config does not load", err);
    fuzz_require(same(&back, &cfg), T, "a config changed in a save and load", NULL);
    int t = cfg.max_position_embeddings < 4096 ? cfg.max_position_embeddings : 4096;
    double need = stage_memory_bytes(&cfg, 0, cfg.num_hidden_layers, true, true, 1, t, 1);
    fuzz_require(need > 0 && isfinite(need), T, "a stage's memory is not a positive figure",
                 NULL);
    return 0;
}
