/* config_fixture.h — the small LLaMA shape the stage, checkpoint and
 * layer-moving tests build their stages of (4 layers of 24 wide, GQA 6/2,
 * a vocabulary of 29), untied or tied. Include after model.h. */
#ifndef CONFIG_FIXTURE_H
#define CONFIG_FIXTURE_H

#include <stdio.h>

static inline llama_config fixture_config(bool tied)
{
    llama_config c = {0};
    c.hidden_size = 24;
    c.intermediate_size = 37;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.vocab_size = 29;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.tie_word_embeddings = tied;
    char err[256];
    if (llama_config_validate(&c, "test", err, sizeof err)) printf("config: %s\n", err);
    return c;
}

#endif
