/* generate_cmd.c — `shardnode generate`: continue a prompt with a trained
 * model, printing the prompt and then each new piece of text as it comes.
 *
 *   shardnode generate --model DIR [--adapter DIR] --prompt TEXT [--tokens N]
 *                      [--temperature T] [--seed S] [--threads N]
 *   shardnode generate --model DIR [--adapter DIR] --logits IDS --out FILE
 *
 * DIR is an HF model directory as `shardnode train`, `export` and `import`
 * write it: config.json, model.safetensors or shards with an index (F32,
 * F16, BF16, or bitsandbytes 4-bit dequantized) and tokenizer.json.
 * --adapter names a PEFT LoRA adapter directory (adapter_config.json,
 * adapter_model.safetensors), merged into the weights at load. Output ends
 * with a newline; generation stops after N tokens (default 100), at the
 * tokenizer's end-of-text token (not printed), or when the model's context
 * (max_position_embeddings) is full. --logits 5,17,2 instead pushes those
 * token ids one by one and writes the logits after each, [n, vocab_size]
 * F32 "logits" with the I32 "input_ids", into the safetensors FILE. */
#include "commands.h"
#include "node_base.h"
#include "runtime.h"

#include "import.h"

#include "kernels.h"
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Truncates long messages (paths) instead of failing; gcc cannot see
 * through va_list, so -Wformat-truncation leaves it alone. */
/* Length of the longest prefix of s that does not end inside a UTF-8
 * character: a token may end in the middle of one, and printing half of it
 * would put two broken characters on a terminal instead of one whole one.
 * Invalid bytes are passed through; only a lead byte still waiting for its
 * continuation bytes is held back. */
static size_t utf8_complete_prefix(const char *s, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = (unsigned char)s[len - back];
        if ((c & 0xC0) == 0x80) continue;   /* continuation byte: look further back */
        size_t need = c >= 0xF8 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

static int parse_temperature(const char *text, float *out, char *err, size_t errlen)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < 0 || v > 1e6) {
        node_errf(err, errlen, "--temperature \"%s\": expected a number in [0, 1e6] "
                 "(0 picks the most likely token)", text);
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* Puts "prefix: " before the message in err, for callees whose messages
 * do not name the file or flag at fault. */
static void prefix_err(char *err, size_t errlen, const char *prefix)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err);
    node_errf(err, errlen, "%s: %s", prefix, msg);
}

static int join_path(char *out, size_t outlen, const char *dir, const char *name, char *err,
                     size_t errlen)
{
    size_t n = strlen(dir);
    const char *sep = n && dir[n - 1] == '/' ? "" : "/";
    if ((size_t)snprintf(out, outlen, "%s%s%s", dir, sep, name) >= outlen) {
        node_errf(err, errlen, "--model \"%s\": path too long", dir);
        return -1;
    }
    return 0;
}

/* Prints the bytes of decode(gen) from *printed on, holding back an
 * unfinished UTF-8 character unless `final`. The whole list is decoded each
 * time rather than token by token, so the text is exactly what decoding
 * the finished sequence gives, whatever the decoder does across tokens. */
static int print_new_text(const tokenizer *tok, const char *tok_path, const int32_t *gen,
                          size_t n, size_t *printed, bool final, char *err, size_t errlen)
{
    char *text;
    size_t len;
    if (tokenizer_decode(tok, gen, n, &text, &len, err, errlen)) {
        prefix_err(err, errlen, tok_path);
        return -1;
    }
    size_t upto = final ? len : utf8_complete_prefix(text, len);
    if (upto > *printed) {
        fwrite(text + *printed, 1, upto - *printed, stdout);
        fflush(stdout);
        *printed = upto;
    }
    free(text);
    return 0;
}

/* The whole model of DIR (hf_open: one file or shards) in one stage, with
 * the adapter of ADAPTER (a PEFT directory, or NULL) merged in. B = T = 1
 * keeps the stage's activation arena small: the generator only reads its
 * weights. */
static int load_model(const llama_config *cfg, const char *model, const char *adapter,
                      stage **out, char *err, size_t errlen)
{
    char path[4096];
    hf_model *m = NULL;
    safetensors_file *af = NULL;
    stage_lora lora;
    stage *s = NULL;
    int rc = -1;
    if (adapter &&
        (join_path(path, sizeof path, adapter, "adapter_config.json", err, errlen) ||
         peft_config_read(path, &lora, err, errlen) ||
         join_path(path, sizeof path, adapter, "adapter_model.safetensors", err, errlen) ||
         safetensors_open(&af, path, err, errlen)))
        goto done;
    if (stage_create(&s, cfg, 0, cfg->num_hidden_layers, true, true, 1, 1, 1, err, errlen)) {
        prefix_err(err, errlen, model);
        goto done;
    }
    if (hf_open(&m, model, err, errlen) || hf_load_stage(m, s, err, errlen)) goto done;
    if (af && stage_merge_adapters(s, &lora, af, err, errlen)) goto done;
    *out = s;
    s = NULL;
    rc = 0;
done:
    hf_close(m);
    safetensors_close(af);
    stage_free(s);
    return rc;
}

/* --logits IDS --out FILE: the logits after each id, as safetensors. */
static int write_logits(const llama_config *cfg, const char *model, const char *adapter,
                        const char *ids_text, const char *out, char *err, size_t errlen)
{
    size_t n = 1;
    for (const char *p = ids_text; *p; p++) n += *p == ',';
    int32_t *ids = malloc(n * sizeof *ids);
    float *logits = NULL;
    stage *s = NULL;
    generator *g = NULL;
    int rc = -1;
    if (!ids) return node_errf(err, errlen, "--logits: out of memory");
    const char *p = ids_text;
    for (size_t i = 0; i < n; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end) || v < 0 || v >= cfg->vocab_size) {
            node_errf(err, errlen, "--logits \"%.200s\": entry %zu is not a token id in "
                      "[0, %d)", ids_text, i + 1, cfg->vocab_size);
            goto done;
        }
        ids[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n > (size_t)cfg->max_position_embeddings) {
        node_errf(err, errlen, "--logits: %zu ids, more than the model's context of %d", n,
                  cfg->max_position_embeddings);
        goto done;
    }
    size_t V = (size_t)cfg->vocab_size;
    if (!(logits = malloc(n * V * sizeof *logits))) {
        node_errf(err, errlen, "--logits: out of memory");
        goto done;
    }
    if (load_model(cfg, model, adapter, &s, err, errlen) ||
        generator_create(&g, cfg, s, (int)n, err, errlen))
        goto done;
    for (size_t i = 0; i < n; i++) {
        const float *l;
        if (generator_push(g, ids[i], &l, err, errlen)) goto done;
        memcpy(logits + i * V, l, V * sizeof *l);
    }
    safetensors_entry e[2] = {
        {"logits", SAFETENSORS_F32, 2, {(int64_t)n, (int64_t)V}, logits},
        {"input_ids", SAFETENSORS_I32, 1, {(int64_t)n}, ids}};
    if (safetensors_write(out, e, 2, err, errlen)) goto done;
    printf("generate: logits of %zu positions x %zu tokens into %s%s%s%s\n", n, V, out,
           adapter ? " (adapter " : "", adapter ? adapter : "", adapter ? " merged)" : "");
    rc = 0;
done:
    generator_free(g);
    stage_free(s);
    free(ids);
    free(logits);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *tokens = "100", *temperature = "0.8",
               *seed = "1", *threads = NULL, *adapter = NULL, *logits_ids = NULL,
               *logits_out = NULL;
    const args_option opts[] = {
        {"--model", &model, NULL},     {"--prompt", &prompt, NULL},
        {"--tokens", &tokens, NULL},   {"--temperature", &temperature, NULL},
        {"--seed", &seed, NULL},       {"--threads", &threads, NULL},
        {"--adapter", &adapter, NULL}, {"--logits", &logits_ids, NULL},
        {"--out", &logits_out, NULL},
    };
    const char *required[] = {"--model", NULL};
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    char err[1024], config_path[4096], tok_path[4096];
    llama_config cfg;
    stage *s = NULL;
    tokenizer *tok = NULL;
    generator *g = NULL;
    int32_t *prompt_ids = NULL, *gen = NULL;
    size_t nprompt = 0, ngen = 0, printed = 0;
    long ntokens, nthreads = 0, seed_value;
    float temp;
    int Vtok, max_len, rc = 1;
    int32_t eos;
    const float *logits = NULL;
    uint64_t rng;
    bool started_output = false, context_full = false;

    if (args_parse(argc, argv, 2, opts, nopts, err, sizeof err) ||
        args_require(opts, nopts, required, err, sizeof err))
        goto done;
    if (!prompt == !logits_ids || !logits_ids != !logits_out) {
        node_errf(err, sizeof err, "give --prompt TEXT, or --logits IDS with --out FILE");
        goto done;
    }
    if (args_int(tokens, "--tokens", 0, 1L << 24, &ntokens, err, sizeof err) ||
        parse_temperature(temperature, &temp, err, sizeof err) ||
        args_int(seed, "--seed", 0, 0x7fffffffffffffffL, &seed_value, err, sizeof err) ||
        (threads && args_int(threads, "--threads", 1, 1024, &nthreads, err, sizeof err)))
        goto done;
    if (nthreads) kernels_set_threads((int)nthreads);
    if (join_path(config_path, sizeof config_path, model, "config.json", err, sizeof err) ||
        join_path(tok_path, sizeof tok_path, model, "tokenizer.json", err, sizeof err))
        goto done;

    /* Messages of the loaders already start with the file they read. */
    if (llama_config_load(&cfg, config_path, err, sizeof err)) goto done;
    if (tokenizer_load(&tok, tok_path, err, sizeof err)) goto done;
    Vtok = tokenizer_vocab_size(tok);
    if (Vtok > cfg.vocab_size) {
        node_errf(err, sizeof err, "%s: tokenizer has %d tokens, more than vocab_size %d of %s",
                 tok_path, Vtok, cfg.vocab_size, config_path);
        goto done;
    }
    eos = tokenizer_eos_id(tok);
    if (logits_ids) {
        rc = write_logits(&cfg, model, adapter, logits_ids, logits_out, err, sizeof err)
                 ? 1
                 : 0;
        goto done;
    }

    /* Special tokens written in the prompt (e.g. "<|endoftext|>") become
     * their ids, as HF tokenizers encode by default: a prompt can then say
     * "a new document starts here" the way training data did. */
    if (tokenizer_encode(tok, prompt, strlen(prompt), true, &prompt_ids, &nprompt, err,
                         sizeof err)) {
        prefix_err(err, sizeof err, "--prompt");
        goto done;
    }
    if (nprompt == 0) {
        /* Logits need a context. Training joins documents with EOS, so EOS
         * is how the model has seen "a document begins here". */
        if (eos < 0) {
            node_errf(err, sizeof err, "--prompt: empty, and %s has no end-of-text token to "
                     "start a text from", tok_path);
            goto done;
        }
        free(prompt_ids);
        prompt_ids = malloc(sizeof *prompt_ids);
        if (!prompt_ids) {
            node_errf(err, sizeof err, "--prompt: out of memory");
            goto done;
        }
        prompt_ids[0] = eos;
        nprompt = 1;
    }
    if (nprompt > (size_t)cfg.max_position_embeddings) {
        node_errf(err, sizeof err, "--prompt: %zu tokens, more than the model's context of %d "
                 "(max_position_embeddings in %s)", nprompt, cfg.max_position_embeddings,
                 config_path);
        goto done;
    }
    /* The last sampled token is printed but never pushed. */
    size_t want = nprompt + (ntokens > 0 ? (size_t)ntokens - 1 : 0);
    max_len = want < (size_t)cfg.max_position_embeddings ? (int)want
                                                         : cfg.max_position_embeddings;

    if (load_model(&cfg, model, adapter, &s, err, sizeof err)) goto done;
    if (generator_create(&g, &cfg, s, max_len, err, sizeof err)) {
        prefix_err(err, sizeof err, model);
        goto done;
    }
    gen = malloc(((size_t)ntokens + 1) * sizeof *gen);
    if (!gen) {
        node_errf(err, sizeof err, "--tokens %ld: out of memory", ntokens);
        goto done;
    }

    /* Ids were range-checked against the tokenizer, whose vocabulary fits
     * the model's, so a push can only fail on an internal error. */
    for (size_t i = 0; i < nprompt; i++)
        if (generator_push(g, prompt_ids[i], &logits, err, sizeof err)) goto done;

    fputs(prompt, stdout);
    fflush(stdout);
    started_output = true;
    rng = (uint64_t)seed_value;
    for (long i = 0; i < ntokens; i++) {
        if (i > 0) {
            if (generator_length(g) >= max_len) {
                context_full = true;
                break;
            }
            if (generator_push(g, gen[ngen - 1], &logits, err, sizeof err)) goto done;
        }
        /* Only ids the tokenizer knows: a model's vocabulary may be padded
         * past the tokenizer's with rows that decode to nothing. */
        int32_t next = generator_sample(logits, Vtok, temp, &rng);
        if (next == eos) break;
        gen[ngen++] = next;
        if (print_new_text(tok, tok_path, gen, ngen, &printed, false, err, sizeof err))
            goto done;
    }
    if (print_new_text(tok, tok_path, gen, ngen, &printed, true, err, sizeof err)) goto done;
    fputc('\n', stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        node_errf(err, sizeof err, "stdout: write failed");
        started_output = false;   /* nothing more to finish on a broken stdout */
        goto done;
    }
    if (context_full)
        fprintf(stderr, "shardnode generate: note: stopped after %zu tokens: the model's "
                "context of %d positions (max_position_embeddings) is full\n",
                ngen, cfg.max_position_embeddings);
    rc = 0;
done:
    if (rc) {
        if (started_output) {   /* end the partial text so the error starts its own line */
            fputc('\n', stdout);
            fflush(stdout);
        }
        fprintf(stderr, "shardnode generate: %s\n", err);
    }
    generator_free(g);
    stage_free(s);
    if (tok) tokenizer_free(tok);
    free(prompt_ids);
    free(gen);
    return rc;
}
