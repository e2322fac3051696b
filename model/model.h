/* model.h — the LLaMA model: HF config, safetensors files, pipeline stages.
 *
 * Every function that can fail returns 0 on success or -1 with a message a
 * user can act on in err (at most errlen bytes, always NUL-terminated), e.g.
 * "w.safetensors: tensor model.norm.weight has shape [64], config says [96]".
 * model/ may include kernels/ and nothing else of the project.
 */
#ifndef SHARDNODE_MODEL_H
#define SHARDNODE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ======================= HF config.json (llama_config) =================== */

/* HF's rope_scaling {"rope_type": "llama3", ...} (Llama 3.1/3.2): the
 * inverse frequencies of plain RoPE rescaled as transformers'
 * _compute_llama3_parameters does. All zero (llama3 false) is plain RoPE. */
typedef struct {
    bool llama3;
    double factor;             /* >= 1: low frequencies are divided by it */
    double low_freq_factor;    /* > 0 */
    double high_freq_factor;   /* > low_freq_factor */
    int original_max_position_embeddings;
} llama_rope_scaling;

/* The HF class a config was read as. Both compute the same network here (a
 * Mistral config is accepted only when its sliding window never binds); the
 * family decides the defaults of absent keys and what llama_config_save
 * writes back, so an export of a Mistral base loads as a Mistral. */
typedef enum { LLAMA_ARCH_LLAMA = 0, LLAMA_ARCH_MISTRAL } llama_arch;

/* The most decoder layers a config may have (the largest published LLaMA
 * has 126; a million still gets its "needs N PiB" answer at once): the
 * planner and memory estimates walk the layers one by one, and fuzz.config's
 * 2e9 layers took 46 s in stage_layout under ASan. */
#define LLAMA_MAX_LAYERS 1000000

typedef struct {
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;   /* defaults to num_attention_heads */
    int vocab_size;
    int max_position_embeddings;
    int head_dim;              /* derived: hidden_size / num_attention_heads */
    float rms_norm_eps;        /* default 1e-6 */
    float rope_theta;          /* default 10000 */
    bool tie_word_embeddings;  /* default false */
    llama_rope_scaling rope_scaling;   /* default none */
    llama_arch arch;           /* default (zero) LLaMA; last, for positional initializers */
} llama_config;

/* Reads an HF config.json of a LlamaForCausalLM and validates it. Keys the
 * model needs are required (num_key_value_heads, rms_norm_eps, rope_theta,
 * tie_word_embeddings, max_position_embeddings have HF's defaults); other
 * HF keys are ignored; an "architectures" list, if present, must name
 * LlamaForCausalLM or MistralForCausalLM; rope_scaling may be null, "default"
 * or "llama3" (every field checked), other types are refused by name.
 * A Mistral config (model_type "mistral", or no model_type and architectures
 * naming MistralForCausalLM) takes MistralConfig's defaults (8 KV heads when
 * the key is absent, max_position_embeddings 131072, sliding_window 4096) and
 * is accepted only when sliding_window is null or >= max_position_embeddings
 * (the window never binds) and rope_scaling is null or "default". */
int llama_config_load(llama_config *cfg, const char *path, char *err, size_t errlen);
/* Checks sizes are positive and heads divide hidden size, KV heads divide
 * heads, head_dim even (RoPE), a llama3 rope_scaling's ranges (factor >= 1,
 * 0 < low_freq_factor < high_freq_factor, all finite). `src` names the
 * origin in messages. */
int llama_config_validate(llama_config *cfg, const char *src, char *err, size_t errlen);
/* The HD/2 RoPE inverse frequencies of cfg (head_dim set by validate):
 * theta^(-2i/HD) in float32, then rope_scaling's rescaling with
 * transformers' float32 operations in its order. */
void llama_rope_inv_freq(const llama_config *cfg, float *inv_freq);
/* cos/sin tables [T, head_dim/2] from those frequencies (rope_tables_freq);
 * -1 only when out of memory. */
int llama_rope_tables(const llama_config *cfg, float *cos_tab, float *sin_tab, int T);
/* Writes config.json as HF would (architectures, model_type, dtype): a
 * LlamaForCausalLM "llama", or for cfg->arch Mistral a MistralForCausalLM
 * "mistral" with sliding_window null (equivalent: the window never bound). */
int llama_config_save(const llama_config *cfg, const char *path, char *err, size_t errlen);

/* ======================= atomic files ==================================== */

/* Writes go to PATH.tmp; commit fsyncs and renames it over PATH, so a crash
 * or an error leaves the old file or the new one, never a torn one. A write
 * error is remembered and reported by commit; abort removes PATH.tmp. */
typedef struct {
    int fd;
    int error;          /* errno of the first failed write, 0 if none */
    char *tmp;
    const char *path;
} atomic_file;

int atomic_file_begin(atomic_file *f, const char *path, char *err, size_t errlen);
int atomic_file_write(atomic_file *f, const void *buf, size_t len);
int atomic_file_commit(atomic_file *f, char *err, size_t errlen);
void atomic_file_abort(atomic_file *f);

/* ======================= safetensors ===================================== */

typedef enum {
    SAFETENSORS_F32, SAFETENSORS_F16, SAFETENSORS_BF16, SAFETENSORS_I32, SAFETENSORS_I64,
} safetensors_dtype;

#define SAFETENSORS_MAX_DIMS 8

typedef struct {
    const char *name;
    safetensors_dtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const void *data;   /* into the mapping: may be unaligned */
    size_t nbytes;
} safetensors_tensor;

typedef struct safetensors_file safetensors_file;

/* Memory-maps and validates the whole file: header length, JSON, dtypes
 * (F32 F16 BF16 I32 I64; others refused by name), shapes, byte counts,
 * offsets inside the data, data covered exactly with no holes or overlaps,
 * duplicate names. */
int safetensors_open(safetensors_file **out, const char *path, char *err, size_t errlen);
void safetensors_close(safetensors_file *f);
int safetensors_count(const safetensors_file *f);
const safetensors_tensor *safetensors_at(const safetensors_file *f, int i);
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);
const char *safetensors_path(const safetensors_file *f);
/* Where a tensor's bytes start in the file (8 + the header + its data
 * offset): what a ranged read of another machine's file asks for. */
uint64_t safetensors_offset(const safetensors_file *f, const safetensors_tensor *t);
/* Copies tensor `name` into dst as fp32 (from F32, F16 or BF16), checking
 * it exists and has exactly the expected shape. On error dst may be partly
 * written. */
int safetensors_read_f32(const safetensors_file *f, const char *name, int ndim,
                         const int64_t *shape, float *dst, char *err, size_t errlen);
/* Same for integer tensors (I32, or I64 within int32 range) into int32. */
int safetensors_read_i32(const safetensors_file *f, const char *name, int ndim,
                         const int64_t *shape, int32_t *dst, char *err, size_t errlen);

typedef struct {
    const char *name;
    safetensors_dtype dtype;   /* writer supports F32 and I32 */
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    const void *data;
} safetensors_entry;

/* Writes an atomic_file: a crash never leaves a half-written file under the
 * final name. The header carries __metadata__ {"format": "pt"}. */
int safetensors_write(const char *path, const safetensors_entry *entries, int n,
                      char *err, size_t errlen);
/* Same, with extra __metadata__ strings: meta is key, value, key, value,
 * ..., NULL. */
int safetensors_write_meta(const char *path, const safetensors_entry *entries, int n,
                           const char *const *meta, char *err, size_t errlen);
/* A __metadata__ string of an open file, or NULL. */
const char *safetensors_metadata(const safetensors_file *f, const char *key);

/* ======================= tokenizer (byte-level BPE) ====================== */
/* BEGIN tokenizer section (owned by model/tokenizer*.c) */

typedef struct tokenizer tokenizer;

/* Reads an HF tokenizer.json whose model is BPE with a ByteLevel
 * pre-tokenizer/decoder (GPT-2 and Llama-3 style, including their split
 * regex, compiled with PCRE2) or shardnode's own. Anything else (WordPiece,
 * Unigram, SentencePiece-style BPE without byte level) is refused by name. */
int tokenizer_load(tokenizer **out, const char *path, char *err, size_t errlen);
/* Writes an HF tokenizer.json (atomic_file) that tokenizer_load reads back
 * identically and HF `tokenizers` loads. */
int tokenizer_save(const tokenizer *t, const char *path, char *err, size_t errlen);
/* Learns byte-level BPE merges from texts until the vocabulary (256 byte
 * tokens + merges + specials) reaches vocab_size. Specials (e.g.
 * "<|endoftext|>") get the last ids. Deterministic: ties broken by a total
 * order, so the same corpus gives the same file. */
int tokenizer_train(tokenizer **out, const char *const *texts, const size_t *lens, int ntexts,
                    int vocab_size, const char *const *specials, int nspecials, char *err,
                    size_t errlen);
void tokenizer_free(tokenizer *t);
int tokenizer_vocab_size(const tokenizer *t);
/* Id of a special token such as "<|endoftext|>", or -1. */
int32_t tokenizer_special_id(const tokenizer *t, const char *name);
/* Id of the end-of-text token the data pipeline puts between documents
 * and after examples, and where generation stops: the eos_token of the
 * tokenizer_config.json beside the loaded tokenizer.json when it names one,
 * else "<|endoftext|>", else "<|end_of_text|>", else "</s>", else -1. */
int32_t tokenizer_eos_id(const tokenizer *t);
/* Encodes len bytes (any bytes, not only UTF-8). With allow_special, special
 * tokens written in the text become their ids; otherwise they are plain text.
 * *ids is malloc'ed (caller frees), *n its length. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool allow_special,
                     int32_t **ids, size_t *n, char *err, size_t errlen);
/* The bytes that have no token in the vocabulary (at most 256 into bytes,
 * which may be NULL): encoding drops them, as HF tokenizers' BPE does
 * without byte_fallback or an unk_token. Returns how many. */
int tokenizer_missing_bytes(const tokenizer *t, unsigned char *bytes);
/* decode(encode(s)) == s for every byte string whose bytes all have a
 * token (tokenizer_missing_bytes), unless the pre-tokenizer
 * has ByteLevel's add_prefix_space (HF's default when the key is absent):
 * then, as in HF, a space goes before each piece of text that does not
 * start with one (the text, and each piece after an added token). Ids out
 * of range are an error. *text is malloc'ed and NUL-terminated, *len excludes the NUL. */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, char **text,
                     size_t *len, char *err, size_t errlen);

/* END tokenizer section */

/* ======================= data ============================================ */
/* BEGIN data section (owned by model/data.c) */

typedef enum { DATA_TEXT, DATA_JSONL } data_format;

typedef struct {
    const char *const *files;   /* corpus files */
    int nfiles;
    data_format format;
    /* DATA_TEXT: documents are separated by this string inside a file; NULL
     * or "" means each file is one document. */
    const char *separator;
    /* DATA_JSONL: the prompt template; "{instruction}", "{input}" are
     * replaced; for {"messages": [...]} each non-assistant turn becomes
     * "{role}: {content}\n" in the prompt, each assistant turn "assistant: "
     * in the prompt, then its content and EOS learned. NULL gives the default
     * "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
     * (the Input block left out when input is empty). */
    const char *prompt_template;
    double val_fraction;        /* share of documents/examples for validation */
    int seq_len;                /* T: each sample is T+1 tokens */
} data_spec;

typedef struct data_set data_set;

/* What data_open found, for the trainer to report. */
typedef struct {
    int64_t documents;       /* text documents / JSONL examples read */
    int64_t corpus_tokens;   /* text: the joined stream (EOS between documents);
                                JSONL: prompt + answer + EOS of every example */
    int64_t train_windows, val_windows;
    int64_t truncated;       /* JSONL examples cut to T+1 tokens */
    int64_t dropped;         /* JSONL examples whose prompt fills all T+1
                                tokens: nothing left to learn, left out */
    bool split_by_window;    /* text: too few documents to split by document,
                                so windows of the stream were split instead */
    bool from_cache;         /* read back from cache_path, nothing tokenized */
} data_info;

/* Tokenizes the corpus once into cache_path (rebuilt when the files, their
 * sizes/mtimes, the tokenizer or the spec change; written through
 * atomic_file) and maps it. Text documents are joined with the tokenizer's
 * EOS between them and cut into windows of T+1 tokens; each JSONL example is
 * one window (prompt tokens get label -100; padded with label -100,
 * truncated to T+1). Documents go to validation by a hash of their index
 * (see data.c for the rules when that leaves a side empty). Errors: missing
 * or empty corpus, fewer tokens than one sequence, a corpus too small for
 * both training and validation, malformed JSONL (file:line), a tokenizer
 * without EOS, an unwritable cache. */
int data_open(data_set **out, const data_spec *spec, const tokenizer *tok,
              const char *cache_path, char *err, size_t errlen);
void data_close(data_set *d);
const data_info *data_get_info(const data_set *d);
int64_t data_train_samples(const data_set *d);
int64_t data_val_samples(const data_set *d);
/* Input positions of one epoch that are not padding (text: windows * T). */
int64_t data_train_tokens(const data_set *d);
/* The training batch is a pure function of (seed, step, micro-batch): sample
 * number i = step * global_batch + micro * micro_batch + b is training
 * window data_train_window(d, seed, i): epoch e = i / n, window
 * data_permute(n, seed, e, i mod n), so every window is seen once per epoch
 * in an order that changes each epoch. Fills ids and labels
 * [micro_batch, T]; costs a memcpy per row. Safe from several threads. */
void data_train_batch(const data_set *d, uint64_t seed, int64_t step, int micro,
                      int micro_batch, int global_batch, int32_t *ids, int32_t *labels);
int64_t data_train_window(const data_set *d, uint64_t seed, int64_t sample);
/* A seeded bijection on [0, n) (Feistel network with cycle-walking), O(1)
 * time and no state: x -> its place in the permutation of epoch `epoch`. */
uint64_t data_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t x);
/* Validation windows in a fixed order: rows [first, first + rows), wrapping
 * around past the last window (EOS ids, labels -100 when there is none). */
void data_val_batch(const data_set *d, int64_t first, int rows, int32_t *ids, int32_t *labels);

/* END data section */

/* ======================= stage =========================================== */

/* A named parameter of a stage: an HF tensor and where it lives in the
 * stage's flat buffers (params, grads, each optimizer moment share layout). */
typedef struct {
    char name[80];
    int ndim;
    int64_t shape[2];
    size_t offset;     /* in floats */
    size_t numel;
    bool decay;        /* weight decay applies (matrices, not norms) */
    bool tied_copy;    /* the head's copy of a tied embedding, in a last
                          stage that does not hold the embedding itself */
} stage_param;

typedef struct stage stage;

/* A stage is [embedding] + layers [layer_begin, layer_end) + [final norm,
 * head, loss]: `first` stages hold the embedding (layer_begin must be 0),
 * `last` stages the head (layer_end must be num_hidden_layers); a stage
 * must hold something. With tied embeddings, a last stage
 * that is not also first holds its own copy of model.embed_tokens.weight
 * for the head; the copies' gradients must be summed by whoever drives the
 * stages (see stage_params). Buffers are sized once for micro-batches of
 * shape [B, T]; nothing is allocated after stage_create. */
int stage_create(stage **out, const llama_config *cfg, int layer_begin, int layer_end,
                 bool first, bool last, int B, int T, int slots, char *err, size_t errlen);
/* The bytes stage_create with the same arguments allocates (weights,
 * gradients, AdamW moments, activations of every slot, scratch), computed
 * without allocating, as a double so absurd sizes cannot overflow.
 * stage_create refuses a stage that needs more than the machine's physical
 * memory, with this figure, before allocating anything. */
double stage_memory_bytes(const llama_config *cfg, int layer_begin, int layer_end, bool first,
                          bool last, int B, int T, int slots);
/* Micro-batch slots: the activations of `slots` micro-batches can be held
 * between their forward and their backward (a pipeline schedule's in-flight
 * bound; 1 for a single process). */
int stage_slots(const stage *s);
void stage_free(stage *s);
bool stage_is_first(const stage *s);
bool stage_is_last(const stage *s);

/* Parameter table, in buffer order. */
int stage_param_count(const stage *s);
const stage_param *stage_param_at(const stage *s, int i);
float *stage_params(stage *s);
float *stage_grads(stage *s);
/* AdamW's first and second moments, same layout as the parameters. */
float *stage_moment1(stage *s);
float *stage_moment2(stage *s);
size_t stage_num_params(const stage *s);

/* Deterministic initialisation from a seed: normal(0, 0.02) for matrices and
 * embeddings, ones for norms. Each tensor's values depend only on (seed,
 * tensor name), so any split of the model initialises identically. With
 * adapters: the frozen base so (then quantized when NF4), and
 * stage_init_adapters. */
void stage_init_weights(stage *s, uint64_t seed);
/* Loads every parameter of the stage from f by its HF name; with adapters,
 * the frozen base (NF4 matrices quantized at load), not the adapters. */
int stage_load_weights(stage *s, const safetensors_file *f, char *err, size_t errlen);

/* Forward of one micro-batch into a slot (its activations stay there until
 * that slot's backward). The first stage reads ids [B*T]; others read
 * in_act [B*T*C]. The last stage needs labels [B*T] and returns the sum of
 * kept token losses in *loss_sum and their count in *kept; ids and labels
 * are range-checked (error names the position). Other stages leave their
 * output activations in stage_output(). */
int stage_forward(stage *s, int slot, const int32_t *ids, const float *in_act,
                  const int32_t *labels, double *loss_sum, int *kept, char *err, size_t errlen);
const float *stage_output(const stage *s, int slot);

/* Backward of the micro-batch last run forward. The last stage uses
 * loss_scale (1 / kept tokens of the whole batch, so micro-batches sum to
 * the mean); others take dout [B*T*C], the gradient of their output.
 * Parameter gradients accumulate into stage_grads (zero them per step with
 * stage_zero_grads); non-first stages leave the gradient of their input in
 * stage_input_grad(). */
void stage_backward(stage *s, int slot, const float *dout, float loss_scale);
const float *stage_input_grad(const stage *s);
void stage_zero_grads(stage *s);
/* A stage holding both the embedding and a tied head keeps the head's
 * gradient apart while micro-batches accumulate; this adds it to the
 * embedding's gradient (call once per step, before the norm and the
 * optimizer), in the same order as a chain that sums the copies of two
 * stages, so the numerics do not depend on where the model is cut. */
void stage_sum_tied_grads(stage *s);

/* Optimizer state and step: AdamW over the flat buffers (moments allocated
 * by stage_create). grad_scale multiplies gradients first (global-norm
 * clipping computed by the caller across stages from stage_grad_sumsq,
 * which leaves out a tied copy so the shared weight counts once). */
double stage_grad_sumsq(const stage *s);
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} stage_adamw;
void stage_adamw_step(stage *s, const stage_adamw *opt, int t, float grad_scale);

/* ---- a frozen base with LoRA adapters (stage_lora.c) ----------------------
 * With adapters, only they are parameters: the table, gradients and both
 * AdamW moments hold A [r, in] and B [out, r] of every targeted projection
 * of the stage's layers, named as PEFT saves them
 * (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight, ...).
 * The base (embedding, norms, head, every projection) is frozen: fp32, or
 * with nf4 its layer matrices in bitsandbytes' NF4 (products dequantize a
 * tile at a time); it has no gradient and no moments. A projection computes
 * y = x W0^T + scaling (x A^T) B^T, scaling = alpha / r (alpha / sqrt(r)
 * with use_rslora), as PEFT's LoRA Linear with dropout 0. */
enum { STAGE_LORA_Q, STAGE_LORA_K, STAGE_LORA_V, STAGE_LORA_O, STAGE_LORA_GATE,
       STAGE_LORA_UP, STAGE_LORA_DOWN, STAGE_LORA_MODULES };
typedef struct {
    int r;              /* rank, >= 1 */
    double alpha;       /* > 0 */
    bool use_rslora;
    unsigned modules;   /* bit m: module m (STAGE_LORA_Q...) has an adapter */
    bool nf4;           /* the base's layer matrices in NF4 */
} stage_lora;
/* [out, in] of module m's base matrix in a model of config c. */
void stage_lora_module_shape(const llama_config *c, int m, int *out, int *in);
/* "q_proj", ..., "down_proj"; NULL outside [0, STAGE_LORA_MODULES). */
const char *stage_lora_module_name(int m);
/* As PEFT: (float)(alpha / r), or (float)(alpha / sqrt(r)) with rslora. */
float stage_lora_scaling(const stage_lora *l);
/* r in [1, 65536], alpha finite and > 0, at least one module. */
int stage_lora_check(const stage_lora *l, char *err, size_t errlen);
/* stage_create with adapters (lora NULL: stage_create itself). */
int stage_create_lora(stage **out, const llama_config *cfg, int layer_begin, int layer_end,
                      bool first, bool last, int B, int T, int slots, const stage_lora *lora,
                      char *err, size_t errlen);
/* The same on a device (kernels.h: kdev_open "cpu", "cuda:N", "hip:N";
 * NULL is the CPU). On a device that is not the CPU the stage's buffers
 * live in its memory and the accessors below return host copies: a slot's
 * output and token losses after its forward, the input gradient after a
 * backward, and params / grads / moments after stage_pull (writes to them
 * reach the device with stage_push). stage_forward then also returns the
 * device's errors. A LoRA stage is refused on a device (CPU only for now). */
struct kdev;
int stage_create_on(stage **out, const llama_config *cfg, int layer_begin, int layer_end,
                    bool first, bool last, int B, int T, int slots, const stage_lora *lora,
                    struct kdev *dev, char *err, size_t errlen);
struct kdev *stage_device(const stage *s);
/* Both no-ops on the CPU; 0, or -1 with the device's error. */
int stage_pull(stage *s, char *err, size_t errlen);
int stage_push(stage *s, char *err, size_t errlen);
/* stage_memory_bytes of a stage with adapters (lora NULL: the same figure):
 * the frozen base (fp32, or NF4 matrices at nf4_bytes), the adapters with
 * gradients and both moments, activations and the adapters' scratch. */
double stage_lora_memory_bytes(const llama_config *cfg, int layer_begin, int layer_end,
                               bool first, bool last, int B, int T, int slots,
                               const stage_lora *lora);
/* The stage's adapter config, or NULL for a stage whose every tensor trains. */
const stage_lora *stage_lora_config(const stage *s);
/* A as torch.nn.init.kaiming_uniform_(A, a=sqrt(5)) does (uniform in
 * +-1/sqrt(in), PEFT's reset_lora_parameters), drawn from (seed, PEFT name)
 * alone, so any split initialises alike; B zero. */
void stage_init_adapters(stage *s, uint64_t seed);
/* Every adapter from f by its PEFT name (err names a missing one). */
int stage_load_adapters(stage *s, const safetensors_file *f, char *err, size_t errlen);
/* The frozen base's tensors (HF names, model order); numel 0 entries have
 * no fp32 data (NF4 matrices). The stage is not a LoRA stage: 0. */
int stage_frozen_count(const stage *s);
const stage_param *stage_frozen_at(const stage *s, int i);
bool stage_frozen_is_nf4(const stage *s, int i);
/* fp32 data of frozen tensor i, NULL for an NF4 one. */
float *stage_frozen_data(stage *s, int i);
/* Frozen tensor i as fp32 into dst (n = its numel): copied, or an NF4
 * matrix dequantized (nf4_dequantize: what the products compute with). */
int stage_frozen_read(stage *s, int i, float *dst, size_t n, char *err, size_t errlen);
/* Sets frozen tensor i from fp32 values (n of them): copied, or quantized
 * to NF4 (a scratch of its blocks is allocated for the call). */
int stage_frozen_write(stage *s, int i, const float *w, size_t n, char *err, size_t errlen);
/* Bytes the frozen base holds (fp32 tensors and NF4 buffers). */
double stage_frozen_bytes(const stage *s);

/* ---- adapters merged into the base (stage_merge.c) ------------------------
 * W = W0 + scaling B A, as PEFT's merge_and_unload computes it in fp32
 * (B A, then times scaling, then added); W0 of an NF4 base dequantized. */
/* PEFT's name of module m's adapter of layer l (lora_A or, with b, lora_B):
 * base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight, ... */
void stage_lora_adapter_name(char *buf, size_t len, int layer, int m, bool b);
/* Adds scaling B A to w [out, in] (A [r, in], B [out, r]). */
int stage_merge_delta(float *w, const float *A, const float *B, int out, int in, int r,
                      float scaling, char *err, size_t errlen);
/* A stage whose every tensor trains (stage_create; its layers' projections
 * under their HF names) gets the adapters of f (PEFT names) merged into
 * the projections that lora targets: the stage then computes what the
 * base with the adapters computes. err names a missing adapter. */
int stage_merge_adapters(stage *s, const stage_lora *lora, const safetensors_file *f,
                         char *err, size_t errlen);
/* The frozen base of a stage with adapters, each targeted projection with
 * its adapter merged in, written as model.safetensors (F32, HF names,
 * model order; streamed through atomic_file: memory holds one tensor
 * besides the stage). *params (if not NULL) gets the values written. */
int stage_lora_write_merged(stage *s, const char *path, uint64_t *params, char *err,
                            size_t errlen);

/* Pointer to the parameter `name` in the stage's buffer, or NULL. */
float *stage_param_data(stage *s, const char *name);

/* ---- a stage's tensors by HF name and layer range (stage_tensors.c) ----
 * What moving a range of layers from one stage to another needs: each
 * tensor's weights and both AdamW moments by HF name, and every tensor of
 * a range of decoder layers in one file. */
typedef enum { STAGE_WEIGHTS = 0, STAGE_MOMENT1 = 1, STAGE_MOMENT2 = 2 } stage_buffer;
/* The decoder layer of an HF tensor name (model.layers.L....) or of an
 * adapter's (base_model.model.model.layers.L....), or -1 (the embedding,
 * the final norm, the head). With adapters, the stage's tensors are the
 * adapters alone (the frozen base is not moved: every holder loads it). */
int stage_tensor_layer(const char *name);
/* Whether a stage of decoder layers [begin, end) of a model of `layers`
 * layers holds tensor `name` of a checkpoint (weights, or a moment:
 * optim.exp_avg.NAME, optim.exp_avg_sq.NAME): a decoder layer's when it is
 * in the range; the embedding's (any name with "embed_tokens") when the
 * stage is the first, or the last and `tied` (its head is the embedding);
 * the final norm's and the head's when it is the last. */
bool stage_tensor_needed(const char *name, int begin, int end, int layers, bool tied);
/* Copies the n floats of tensor `name` of buffer b out of the stage, or
 * into it. -1 (err names the tensor) when the stage does not hold it or n
 * is not its size. */
int stage_tensor_read(stage *s, stage_buffer b, const char *name, float *out, size_t n,
                      char *err, size_t errlen);
int stage_tensor_write(stage *s, stage_buffer b, const char *name, const float *in, size_t n,
                       char *err, size_t errlen);
/* Every tensor of decoder layers [begin, end) — the stage must hold them
 * all — with both moments, into a safetensors file (atomic_file; moments
 * named as checkpoints name them, optim.exp_avg.NAME and
 * optim.exp_avg_sq.NAME; metadata "layers": "BEGIN,END"); and back into a
 * stage that holds those layers, refusing a file of another range, a
 * missing tensor or another shape (err names it; the stage may then be
 * partly written). */
int stage_save_layers(stage *s, int begin, int end, const char *path, char *err,
                      size_t errlen);
int stage_load_layers(stage *s, int begin, int end, const char *path, char *err,
                      size_t errlen);
/* Per-token losses [B*T] of the last forward of a last stage (0 where the
 * label is ignored). */
const float *stage_token_losses(const stage *s, int slot);

/* ======================= generation ====================================== */
/* BEGIN generation section (owned by model/generate.c) */

/* Incremental decoding of one sequence with a KV cache, reading the weights
 * of a stage that holds the whole model (first and last) built from cfg (the
 * stage does not carry the heads, eps or RoPE theta). The weights are read
 * in place, not copied: the stage must outlive the generator, and changes
 * to its parameters show in the next push. Everything (KV cache for
 * max_len positions, 1 <= max_len <= max_position_embeddings, and scratch)
 * is allocated here; a push allocates nothing. */
typedef struct generator generator;

int generator_create(generator **out, const llama_config *cfg, stage *whole_model,
                     int max_len, char *err, size_t errlen);
void generator_free(generator *g);
/* Appends one token at the next position and leaves the logits [V] of the
 * next token in *logits (valid until the next push or reset). Fails, with
 * nothing changed, for a token outside [0, V) or past max_len. */
int generator_push(generator *g, int32_t token, const float **logits, char *err,
                   size_t errlen);
/* Number of tokens pushed since creation or the last reset. */
int generator_length(const generator *g);
/* Forgets the sequence (next push is position 0). */
void generator_reset(generator *g);
/* Picks the next token among ids [0, V): argmax at temperature <= 0 (lowest
 * id on ties), else a sample of softmax(logits / temperature) drawn with
 * *rng_state (splitmix64; the same state and logits give the same id). */
int32_t generator_sample(const float *logits, int V, float temperature, uint64_t *rng_state);

/* END generation section */

#endif
