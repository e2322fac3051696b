/* gguf_convert.c — a GGUF LLaMA written out as a Hugging Face model
 * directory: config.json, tokenizer.json, tokenizer_config.json and
 * model.safetensors (F32, HF names and layout).
 *
 * model.safetensors is streamed: its header is computed from the config's
 * shapes, then each tensor is dequantized, put in HF's layout and written
 * before the next one is read, so memory holds one tensor at a time (an
 * 8B model's largest is its embedding), not the model. */
#include "import.h"
#include "model_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Every tensor of the file must be one of the model's: anything else
 * (biases, a LoRA, another architecture's extras) would be dropped. */
static int check_known(const gguf_file *f, const llama_config *c, char *err, size_t errlen)
{
    for (int i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char hf[128];
        int ndim;
        int64_t shape[2];
        if (gguf_hf_name(t->name, hf, sizeof hf) || gguf_llama_shape(c, hf, &ndim, shape))
            return model_errf(err, errlen, "%s: byte %llu: tensor %s is not part of a LLaMA of "
                              "this config (only token_embd, blk.N.{attn_norm, attn_q, attn_k, "
                              "attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, "
                              "output_norm and output are)", gguf_path(f),
                              (unsigned long long)t->info_offset, t->name);
        if (!gguf_type_supported(t->type))
            return model_errf(err, errlen, "%s: byte %llu: tensor %s has type %s, which is not "
                              "supported (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q6_K are)",
                              gguf_path(f), (unsigned long long)t->info_offset, t->name,
                              gguf_type_name(t->type) ? gguf_type_name(t->type) : "?");
    }
    return 0;
}

/* The safetensors header for names (F32, back to back), padded with
 * spaces to a multiple of 8; *maxn gets the largest tensor's count. */
static char *header(const llama_config *c, char **names, int n, size_t *maxn)
{
    json_t *h = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
    uint64_t off = 0;
    *maxn = 0;
    for (int i = 0; h && i < n; i++) {
        int ndim;
        int64_t s[2];
        gguf_llama_shape(c, names[i], &ndim, s);
        size_t numel = (size_t)s[0] * (ndim == 2 ? (size_t)s[1] : 1);
        json_t *shape = ndim == 2 ? json_pack("[I,I]", (json_int_t)s[0], (json_int_t)s[1])
                                  : json_pack("[I]", (json_int_t)s[0]);
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + 4 * numel));
        if (!e || json_object_set_new(h, names[i], e)) {
            json_decref(h);
            return NULL;
        }
        off += 4 * numel;
        if (numel > *maxn) *maxn = numel;
    }
    char *text = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    if (!text) return NULL;
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char *p = realloc(text, padded + 1);
    if (!p) {
        free(text);
        return NULL;
    }
    memset(p + len, ' ', padded - len);
    p[padded] = 0;
    return p;
}

static int write_weights(const gguf_file *f, const llama_config *c, const char *path,
                         gguf_convert_info *info, char *err, size_t errlen)
{
    char **names = NULL;
    int n = 0, rc = -1;
    size_t maxn = 0;
    float *buf = NULL;
    char *hdr = NULL;
    atomic_file af;
    if (gguf_llama_names(c, &names, &n) || !(hdr = header(c, names, n, &maxn)) ||
        !(buf = malloc((maxn ? maxn : 1) * sizeof *buf))) {
        model_errf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (atomic_file_begin(&af, path, err, errlen)) goto out;
    size_t hlen = strlen(hdr);
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    atomic_file_write(&af, prefix, 8);
    atomic_file_write(&af, hdr, hlen);
    for (int i = 0; i < n; i++) {
        int ndim;
        int64_t s[2];
        char gname[128];
        gguf_llama_shape(c, names[i], &ndim, s);
        size_t numel = (size_t)s[0] * (ndim == 2 ? (size_t)s[1] : 1);
        if (gguf_llama_read(f, c, names[i], buf, numel, err, errlen)) {
            atomic_file_abort(&af);
            goto out;
        }
        atomic_file_write(&af, buf, numel * sizeof *buf);
        if (info && gguf_gguf_name(names[i], gname, sizeof gname) == 0) {
            const gguf_tensor *t = gguf_tensor_find(f, gname);
            info->tensors++;
            info->params += numel;
            if (t && t->type < 64) info->by_type[t->type]++;
        }
    }
    rc = atomic_file_commit(&af, err, errlen);
out:
    gguf_free_names(names, n);
    free(hdr);
    free(buf);
    return rc;
}

int gguf_convert_to_hf(const char *gguf_path_, const char *dir, gguf_convert_info *info,
                       char *err, size_t errlen)
{
    gguf_file *f = NULL;
    llama_config cfg;
    char path[4096];
    int rc = -1;
    if (info) memset(info, 0, sizeof *info);
    if (gguf_open(&f, gguf_path_, err, errlen) || gguf_llama_config(f, &cfg, err, errlen) ||
        check_known(f, &cfg, err, errlen))
        goto out;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        model_errf(err, errlen, "%s: cannot create: %s", dir, strerror(errno));
        goto out;
    }
    /* The tokenizer first: a model whose tokenizer shardnode cannot use is
     * refused before gigabytes of weights are written. */
#define OUT(name) (snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path ? path : NULL)
    const char *p;
    if (!(p = OUT("tokenizer.json"))) {
        model_errf(err, errlen, "%s: path too long", dir);
        goto out;
    }
    if (gguf_tokenizer_write(f, p, err, errlen) ||
        gguf_tokenizer_config_write(f, OUT("tokenizer_config.json"), err, errlen) ||
        llama_config_save(&cfg, OUT("config.json"), err, errlen) ||
        write_weights(f, &cfg, OUT("model.safetensors"), info, err, errlen))
        goto out;
#undef OUT
    rc = 0;
out:
    gguf_close(f);
    return rc;
}
