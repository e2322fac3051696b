/* import.h — pretrained checkpoints in: GGUF files (llama.cpp's format) and
 * Hugging Face model directories (config.json + safetensors, one file or
 * shards with model.safetensors.index.json).
 *
 * Same conventions as model.h: every function that can fail returns 0 or
 * -1 with a one-line message in err naming the file, the tensor or key and,
 * for GGUF, the byte offset where the file is wrong. */
#ifndef SHARDNODE_IMPORT_H
#define SHARDNODE_IMPORT_H

#include "kernels.h"
#include "model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================= GGUF reader (gguf.c) ============================ */

/* Metadata value types, as GGUF numbers them. */
typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3, GGUF_UINT32 = 4,
    GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9,
    GGUF_UINT64 = 10, GGUF_INT64 = 11, GGUF_FLOAT64 = 12,
} gguf_value_type;

/* ggml tensor types (the numbers llama.cpp writes); the ones dequantized. */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q8_0 = 8,
    GGML_Q4_K = 12, GGML_Q6_K = 14, GGML_BF16 = 30,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* One metadata entry. Strings point into the mapping (not NUL-terminated:
 * use len). Arrays hold `count` elements of elem_type starting at data;
 * string arrays are read with gguf_array_string. */
typedef struct {
    char *key;                  /* NUL-terminated copy */
    gguf_value_type type;
    gguf_value_type elem_type;  /* arrays */
    uint64_t count;             /* arrays: elements */
    union { uint64_t u; int64_t i; double f; bool b; } v; /* scalars */
    const unsigned char *data;  /* strings: bytes; arrays: first element */
    uint64_t len;               /* strings: bytes */
    uint64_t *str_at;           /* string arrays: each element's offset from data */
    uint64_t offset;            /* file offset of the entry (for messages) */
} gguf_kv;

typedef struct {
    char *name;
    uint32_t type;                /* ggml type */
    int ndim;
    int64_t ne[GGUF_MAX_DIMS];    /* ne[0] varies fastest: an HF [out, in] is ne {in, out} */
    int64_t numel;
    uint64_t offset;              /* from the data section's start */
    const unsigned char *data;    /* into the mapping */
    size_t nbytes;
    uint64_t info_offset;         /* file offset of its tensor info */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Memory-maps and validates the whole header: magic, version 2 or 3, counts
 * bounded by the file's size, every key and value (arrays of every type but
 * arrays), unique keys and tensor names, general.alignment (a power of two),
 * each tensor's dimensions (1 to 4, rows a whole number of blocks), known
 * type, aligned offset, data inside the file and no two tensors overlapping.
 * Nothing is read past the end of the file. */
int gguf_open(gguf_file **out, const char *path, char *err, size_t errlen);
void gguf_close(gguf_file *f);
const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
/* Start of the data section in the file. */
uint64_t gguf_data_offset(const gguf_file *f);
int gguf_kv_count(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, int i);
const gguf_kv *gguf_kv_find(const gguf_file *f, const char *key);
int gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i);
const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name);

/* Typed metadata. Any integer type converts when the value fits; floats
 * from FLOAT32 or FLOAT64. A missing key is an error when required, else
 * *out keeps its value and 1 is returned (0 when found). */
int gguf_get_int(const gguf_file *f, const char *key, bool required, int64_t *out, char *err,
                 size_t errlen);
int gguf_get_float(const gguf_file *f, const char *key, bool required, double *out, char *err,
                   size_t errlen);
/* A STRING value as a malloc'ed NUL-terminated copy (*out stays NULL when
 * absent and not required); a string holding a NUL byte is refused. */
int gguf_get_string(const gguf_file *f, const char *key, bool required, char **out, char *err,
                    size_t errlen);
/* Element i of a string array (bytes, not NUL-terminated). */
void gguf_array_string(const gguf_kv *kv, uint64_t i, const char **s, size_t *len);
/* Element i of an integer array, as int64. */
int64_t gguf_array_int(const gguf_kv *kv, uint64_t i);

/* ======================= ggml types (gguf_quant.c) ======================= */

/* "Q4_K", or NULL for a type number ggml does not define. */
const char *gguf_type_name(uint32_t type);
/* Elements and bytes of one block (1 and the element size for plain
 * types); -1 for an unknown type. */
int gguf_type_block(uint32_t type, int64_t *elems, size_t *bytes);
/* Whether gguf_dequantize reads this type: F32 F16 BF16 Q8_0 Q4_0 Q4_1
 * Q4_K Q6_K. */
bool gguf_type_supported(uint32_t type);
/* n values (a whole number of blocks) of type from src into dst, as ggml's
 * reference dequantization computes them (fp32, no fused multiply-add).
 * -1 for a type it does not read or n not a whole number of blocks. */
int gguf_dequantize(uint32_t type, const void *src, float *dst, int64_t n);
/* The whole tensor into dst (t->numel floats). */
int gguf_tensor_read_f32(const gguf_file *f, const gguf_tensor *t, float *dst, char *err,
                         size_t errlen);

/* ======================= GGUF LLaMA → HF (gguf_llama.c) ================== */

/* The model's config from general.architecture ("llama") and llama.*:
 * embedding_length, feed_forward_length, block_count, attention.head_count,
 * attention.head_count_kv, context_length, rope.freq_base,
 * attention.layer_norm_rms_epsilon, vocab size (llama.vocab_size, else
 * token_embd's rows); tied embeddings when there is no output.weight.
 * Refused: other architectures, experts, RoPE scaling (rope.scaling.type
 * other than none, rope_freqs.weight), key/value lengths other than the
 * head dimension. */
int gguf_llama_config(const gguf_file *f, llama_config *cfg, char *err, size_t errlen);
/* The HF name of a llama.cpp tensor name (token_embd.weight →
 * model.embed_tokens.weight, blk.3.attn_q.weight →
 * model.layers.3.self_attn.q_proj.weight, ...), into buf; -1 when the name
 * is not one of a LLaMA's. */
int gguf_hf_name(const char *gguf_name, char *buf, size_t len);
/* The reverse: the GGUF tensor of an HF name; -1 when there is none. */
int gguf_gguf_name(const char *hf_name, char *buf, size_t len);
/* HF tensor `hf_name` as fp32 in HF layout ([out, in] row-major), its
 * shape checked against cfg: dequantized, and q_proj/k_proj rows put back
 * from llama.cpp's RoPE order (convert_hf_to_gguf.py's permute) into HF's.
 * n must be its element count. */
int gguf_llama_read(const gguf_file *f, const llama_config *cfg, const char *hf_name,
                    float *dst, size_t n, char *err, size_t errlen);
/* Every HF tensor name of cfg in model order (embedding, layers, norm,
 * head unless tied); *names malloc'ed (each entry too); free with
 * gguf_free_names. */
int gguf_llama_names(const llama_config *cfg, char ***names, int *n);
void gguf_free_names(char **names, int n);
/* HF shape of a tensor of cfg by name; -1 for a name cfg has no tensor of. */
int gguf_llama_shape(const llama_config *cfg, const char *hf_name, int *ndim, int64_t shape[2]);

/* ======================= GGUF tokenizer → tokenizer.json (gguf_tokenizer.c) */

/* tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges, token_type,
 * pre-tokenizer from tokenizer.ggml.pre: default/gpt2, llama-bpe/llama3,
 * smollm) written as an HF tokenizer.json (atomic) that tokenizer_load
 * reads; control and user-defined tokens become added_tokens. "llama"
 * (SentencePiece) and every other model or pre-tokenizer are refused naming
 * the key and its value. */
int gguf_tokenizer_write(const gguf_file *f, const char *path, char *err, size_t errlen);
/* tokenizer_config.json beside it: bos/eos tokens, chat template when
 * tokenizer.chat_template is present. */
int gguf_tokenizer_config_write(const gguf_file *f, const char *path, char *err,
                                size_t errlen);

/* ======================= GGUF → HF directory (gguf_convert.c) ============ */

/* Writes dir/config.json, dir/tokenizer.json, dir/tokenizer_config.json and
 * dir/model.safetensors (F32, HF names, streamed one tensor at a time so
 * memory holds one tensor) from a GGUF LLaMA; dir is created if missing.
 * *info (if not NULL) gets the count of tensors written and of each type. */
typedef struct {
    int tensors;
    int by_type[64];     /* tensors read of each ggml type < 64 */
    uint64_t params;
} gguf_convert_info;
int gguf_convert_to_hf(const char *gguf_path, const char *dir, gguf_convert_info *info,
                       char *err, size_t errlen);

/* ======================= HF model directory (hf_import.c) ================ */

typedef struct hf_model hf_model;

/* Reads dir/config.json (llama_config_load) and finds the weights:
 * dir/model.safetensors.index.json (weight_map: tensor → shard file in
 * dir) or dir/model.safetensors. Shards are opened on first use and only
 * their headers are validated; a tensor's bytes are read when it is. */
int hf_open(hf_model **out, const char *dir, char *err, size_t errlen);
void hf_close(hf_model *m);
const llama_config *hf_config(const hf_model *m);
/* Number of shards named by the index (1 without one). */
int hf_shard_count(const hf_model *m);
/* The file that holds tensor `name` (the shard of the index), or NULL. */
const char *hf_tensor_file(const hf_model *m, const char *name);
/* Tensor `name` as fp32 (from F32, F16 or BF16) with the shape cfg gives it
 * (checked), into dst. */
int hf_read_f32(hf_model *m, const char *name, float *dst, size_t n, char *err, size_t errlen);
/* Every parameter of a stage (its layers, and the embedding, norm and head
 * it holds) from the directory: only the shards holding them are opened.
 * A stage with adapters (stage_create_lora) gets its frozen base: NF4
 * matrices kept as stored when the checkpoint is bitsandbytes 4-bit,
 * quantized (one matrix at a time in fp32) when it is not; the adapters
 * are not touched (stage_init_adapters). */
int hf_load_stage(hf_model *m, stage *s, char *err, size_t errlen);
/* Makes q (in buf, malloc'ed, now the stage's) frozen NF4 matrix i of a
 * stage with an NF4 base (stage_lora.c); -1 when entry i is not an NF4
 * matrix of that shape. */
int stage_frozen_adopt_nf4(stage *s, int i, const nf4_matrix *q, void *buf, char *err,
                           size_t errlen);
/* Every tensor cfg needs is present with its shape and a float dtype
 * (the headers only; no data read). */
int hf_check(hf_model *m, char *err, size_t errlen);

/* ======================= bitsandbytes 4-bit (bnb_import.c) =============== */

/* A safetensors file as bitsandbytes saves a 4-bit model: U8 tensors too
 * (model/safetensors.c refuses them). Validated as strictly as
 * safetensors_open (offsets, byte counts, the data tiled exactly). */
typedef struct bnb_file bnb_file;
typedef enum { BNB_F32, BNB_F16, BNB_BF16, BNB_I32, BNB_I64, BNB_U8 } bnb_dtype;
/* The quant_state JSON (X.weight.quant_state.bitsandbytes__nf4). */
typedef struct {
    int64_t rows, cols;   /* "shape" */
    int dtype;            /* "dtype": 0 float32, 1 float16, 2 bfloat16 */
    float offset;         /* "nested_offset" */
} bnb_quant_state;

int bnb_open(bnb_file **out, const char *path, char *err, size_t errlen);
void bnb_close(bnb_file *f);
const char *bnb_path(const bnb_file *f);
/* Whether any tensor of the file has a bitsandbytes quant_state. */
bool bnb_is_quantized_file(const bnb_file *f);
/* Whether tensor `name` is stored 4-bit (name.quant_state.bitsandbytes__*). */
bool bnb_is_quantized(const bnb_file *f, const char *name);
/* The JSON: exactly the keys QuantState.as_dict(packed=True) writes,
 * quant_type "nf4", blocksize 64, nested_blocksize 256, nested_dtype
 * float32, dtype float32/float16/bfloat16, shape [out, in], a finite fp32
 * nested_offset. `tensor` names it in messages. */
int bnb_parse_quant_state(const char *json, size_t len, const char *tensor,
                          bnb_quant_state *qs, char *err, size_t errlen);
/* A 4-bit tensor [rows, cols] into q, every part checked (dtypes, shapes
 * against the block counts, quant_map the NF4 table, finite scales); *buf
 * is the malloc'ed nf4_bytes() buffer q lives in (free it). */
int bnb_read_nf4(const bnb_file *f, const char *name, int64_t rows, int64_t cols,
                 nf4_matrix *q, void **buf, char *err, size_t errlen);
/* Tensor `name` with the expected shape as fp32: a 4-bit one dequantized
 * (nf4_dequantize: fp32 products, not rounded to the quant_state dtype),
 * F32/F16/BF16 converted. bnb_check: the same checks, no data read. */
int bnb_read_f32(const bnb_file *f, const char *name, int ndim, const int64_t *shape,
                 float *dst, char *err, size_t errlen);
int bnb_check(const bnb_file *f, const char *name, int ndim, const int64_t *shape, char *err,
              size_t errlen);
/* An HF directory's tensor in NF4 without dequantizing it (hf_import.c):
 * 0 and q filled (buf as bnb_read_nf4) when it is stored 4-bit, 1 when it
 * is stored as floats (read it with hf_read_f32), -1 on error. */
int hf_read_nf4(hf_model *m, const char *name, nf4_matrix *q, void **buf, char *err,
                size_t errlen);

#endif
