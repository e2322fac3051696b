/* fuzz_gguf.c — libFuzzer target for GGUF files (model/gguf.c,
 * gguf_quant.c, gguf_llama.c, gguf_tokenizer.c), which `shardnode import
 * --gguf` reads from wherever a user downloaded them.
 *
 * The input is the whole file. gguf_open must refuse anything malformed
 * with a one-line message naming the file, and never read outside it;
 * every file it accepts holds tensors inside the file and aligned, each of
 * a supported type dequantizes, every string array element lies inside the
 * file, and the LLaMA config and tokenizer conversion either succeed or
 * refuse with a message. */
#include "fuzz_util.h"
#include "import.h"

#define T "fuzz_gguf"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512], out[512], err[512];
    fuzz_write_file("model.gguf", data, size, path, sizeof path);
    gguf_file *f;
    memset(err, 'x', sizeof err);
    if (gguf_open(&f, path, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
        fuzz_require(strstr(err, path) != NULL, T, "refusal does not name the file", err);
        return 0;
    }
    uint64_t data_off = gguf_data_offset(f);
    for (int i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        fuzz_require(gguf_tensor_find(f, t->name) == t, T, "tensor not found by name", t->name);
        fuzz_require(t->offset % gguf_alignment(f) == 0, T, "misaligned tensor", t->name);
        fuzz_require(data_off + t->offset + t->nbytes <= size, T, "tensor past the end", t->name);
        if (t->numel > (1 << 20) || !gguf_type_supported(t->type)) continue;
        float *dst = malloc((size_t)t->numel * sizeof *dst);
        fuzz_require(gguf_tensor_read_f32(f, t, dst, err, sizeof err) == 0, T,
                     "a supported tensor does not dequantize", err);
        free(dst);
    }
    for (int i = 0; i < gguf_kv_count(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        fuzz_require(gguf_kv_find(f, kv->key) == kv, T, "key not found by name", kv->key);
        if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING) continue;
        for (uint64_t k = 0; k < kv->count; k++) {
            const char *s;
            size_t len;
            gguf_array_string(kv, k, &s, &len);
            fuzz_require((const uint8_t *)s >= (const uint8_t *)kv->data && len <= size, T,
                         "array string outside the file", kv->key);
        }
    }
    llama_config cfg;
    memset(err, 'x', sizeof err);
    if (gguf_llama_config(f, &cfg, err, sizeof err) != 0) fuzz_check_refusal(T, err, sizeof err);
    snprintf(out, sizeof out, "%s/tokenizer.json", fuzz_dir());
    memset(err, 'x', sizeof err);
    if (gguf_tokenizer_write(f, out, err, sizeof err) != 0) fuzz_check_refusal(T, err, sizeof err);
    gguf_close(f);
    return 0;
}
