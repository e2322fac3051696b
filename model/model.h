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
} llama_config;

/* Reads an HF config.json of a LlamaForCausalLM and validates it. Keys the
 * model needs are required (num_key_value_heads, rms_norm_eps, rope_theta,
 * tie_word_embeddings, max_position_embeddings have HF's defaults); other
 * HF keys are ignored; an "architectures" list, if present, must name
 * LlamaForCausalLM. */
int llama_config_load(llama_config *cfg, const char *path, char *err, size_t errlen);
/* Checks sizes are positive and heads divide hidden size, KV heads divide
 * heads, head_dim even (RoPE). `src` names the origin in messages. */
int llama_config_validate(llama_config *cfg, const char *src, char *err, size_t errlen);
/* Writes config.json as HF would (architectures, model_type "llama", dtype). */
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
                 bool first, bool last, int B, int T, char *err, size_t errlen);
void stage_free(stage *s);
bool stage_is_first(const stage *s);
bool stage_is_last(const stage *s);

/* Parameter table, in buffer order. */
int stage_param_count(const stage *s);
const stage_param *stage_param_at(const stage *s, int i);
float *stage_params(stage *s);
float *stage_grads(stage *s);
size_t stage_num_params(const stage *s);

/* Deterministic initialisation from a seed: normal(0, 0.02) for matrices and
 * embeddings, ones for norms. Each tensor's values depend only on (seed,
 * tensor name), so any split of the model initialises identically. */
void stage_init_weights(stage *s, uint64_t seed);
/* Loads every parameter of the stage from f by its HF name. */
int stage_load_weights(stage *s, const safetensors_file *f, char *err, size_t errlen);

/* Forward of one micro-batch. The first stage reads ids [B*T]; others read
 * in_act [B*T*C]. The last stage needs labels [B*T] and returns the sum of
 * kept token losses in *loss_sum and their count in *kept; ids and labels
 * are range-checked (error names the position). Other stages leave their
 * output activations in stage_output(). */
int stage_forward(stage *s, const int32_t *ids, const float *in_act, const int32_t *labels,
                  double *loss_sum, int *kept, char *err, size_t errlen);
const float *stage_output(const stage *s);

/* Backward of the micro-batch last run forward. The last stage uses
 * loss_scale (1 / kept tokens of the whole batch, so micro-batches sum to
 * the mean); others take dout [B*T*C], the gradient of their output.
 * Parameter gradients accumulate into stage_grads (zero them per step with
 * stage_zero_grads); non-first stages leave the gradient of their input in
 * stage_input_grad(). */
void stage_backward(stage *s, const float *dout, float loss_scale);
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

#endif
