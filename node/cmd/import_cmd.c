/* import_cmd.c — `shardnode import`: pretrained checkpoints in.
 *
 *   import --gguf FILE --out DIR   a GGUF LLaMA (llama.cpp's format) written
 *                                  as an HF directory (model/gguf_convert.c)
 *   import --hf DIR --check        an HF directory validated (config, every
 *                                  tensor's shard, dtype and shape, the
 *                                  tokenizer) and its config summarised */
#include "commands.h"

#include "import.h"
#include "model.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define PREFIX "shardnode import: "

static void usage(FILE *out)
{
    fprintf(out,
            "usage: shardnode import --gguf FILE --out DIR\n"
            "       shardnode import --hf DIR --check\n"
            "\n"
            "--gguf  dequantize a GGUF LLaMA (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K) into an\n"
            "        HF directory: config.json, tokenizer.json, tokenizer_config.json and\n"
            "        model.safetensors (F32), as transformers loads it\n"
            "--hf    check an HF model directory (config.json, model.safetensors or shards\n"
            "        with model.safetensors.index.json, tokenizer.json) without loading it\n");
}

static void print_config(const llama_config *c)
{
    printf("  layers %d, hidden %d, heads %d (KV %d, head dim %d), feed-forward %d\n",
           c->num_hidden_layers, c->hidden_size, c->num_attention_heads,
           c->num_key_value_heads, c->head_dim, c->intermediate_size);
    printf("  vocabulary %d, context %d, rope theta %g, rms eps %g, %s embeddings\n",
           c->vocab_size, c->max_position_embeddings, (double)c->rope_theta,
           (double)c->rms_norm_eps, c->tie_word_embeddings ? "tied" : "untied");
}

static int import_gguf(const char *file, const char *dir)
{
    char err[1024];
    gguf_convert_info info;
    if (gguf_convert_to_hf(file, dir, &info, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        return 1;
    }
    printf("imported %s into %s: %d tensors, %llu parameters (", file, dir, info.tensors,
           (unsigned long long)info.params);
    const char *sep = "";
    for (int t = 0; t < 64; t++)
        if (info.by_type[t]) {
            printf("%s%d %s", sep, info.by_type[t], gguf_type_name((uint32_t)t));
            sep = ", ";
        }
    printf(")\n");
    return 0;
}

static int check_hf(const char *dir)
{
    char err[1024], path[4096];
    hf_model *m;
    struct stat st;
    if (hf_open(&m, dir, err, sizeof err) || hf_check(m, err, sizeof err)) {
        if (m) hf_close(m);
        fprintf(stderr, PREFIX "%s\n", err);
        return 1;
    }
    llama_config cfg = *hf_config(m);   /* outlives m */
    const llama_config *c = &cfg;
    int64_t params = (int64_t)c->vocab_size * c->hidden_size * (c->tie_word_embeddings ? 1 : 2) +
                     c->hidden_size +
                     (int64_t)c->num_hidden_layers *
                         (2LL * c->hidden_size +
                          (int64_t)c->hidden_size * c->head_dim *
                              (2LL * c->num_attention_heads + 2LL * c->num_key_value_heads) +
                          3LL * c->hidden_size * c->intermediate_size);
    printf("%s: a LLaMA of %lld parameters in %d safetensors file%s\n", dir, (long long)params,
           hf_shard_count(m), hf_shard_count(m) == 1 ? "" : "s");
    print_config(c);
    hf_close(m);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &st) != 0) {
        printf("  no tokenizer.json\n");
        return 0;
    }
    tokenizer *t;
    if (tokenizer_load(&t, path, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        return 1;
    }
    int v = tokenizer_vocab_size(t);
    tokenizer_free(t);
    if (v > c->vocab_size) {
        fprintf(stderr, PREFIX "%s: %d tokens, more than the config's vocab_size %d\n", path, v,
                c->vocab_size);
        return 1;
    }
    printf("  tokenizer.json: %d tokens\n", v);
    return 0;
}

int cmd_import(int argc, char **argv)
{
    const char *gguf = NULL, *out = NULL, *hf = NULL;
    bool check = false, help = false;
    char err[512];
    args_option opts[] = {{"--gguf", &gguf, NULL}, {"--out", &out, NULL}, {"--hf", &hf, NULL},
                          {"--check", NULL, &check}, {"--help", NULL, &help}};
    if (args_parse(argc, argv, 2, opts, 5, err, sizeof err)) {
        fprintf(stderr, PREFIX "%s\n", err);
        usage(stderr);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (gguf && out && !hf && !check) return import_gguf(gguf, out);
    if (hf && check && !gguf && !out) return check_hf(hf);
    fprintf(stderr, PREFIX "give --gguf FILE --out DIR, or --hf DIR --check\n");
    usage(stderr);
    return 2;
}
