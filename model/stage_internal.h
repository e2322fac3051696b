/* stage_internal.h — the stage's struct, shared by stage.c and stage_lora.c
 * (the frozen base with LoRA adapters). Private to model/. */
#ifndef SHARDNODE_STAGE_INTERNAL_H
#define SHARDNODE_STAGE_INTERNAL_H

#include "model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float *ln1, *wqkv, *wo, *ln2, *wgu, *wdown;
} layer_weights;

typedef struct {
    float *res_in;     /* [N,C] layer input (the residual stream) */
    float *ln1;        /* [N,C] */
    float *rstd1;      /* [N] */
    float *qkv;        /* [N,QKV] after RoPE */
    float *att;        /* [B,NH,T,T] */
    float *atty;       /* [N,C] attention output before o_proj */
    float *mid;        /* [N,C] residual after attention */
    float *ln2;        /* [N,C] */
    float *rstd2;      /* [N] */
    float *gu;         /* [N,2F] */
    float *h;          /* [N,F] */
} layer_acts;

/* Everything one in-flight micro-batch keeps from its forward for its
 * backward. A pipeline stage has as many slots as its schedule keeps
 * micro-batches in flight (1F1B: p - s). */
typedef struct {
    layer_acts *acts;                  /* [nl] */
    float *out;                        /* [N,C] stage output (residual after last layer) */
    float *lnf_out, *rstdf, *logits, *losses;
    int32_t *ids, *labels;             /* copies for the backward */
} slot_acts;

struct stage {
    llama_config cfg;
    /* Where it computes: every buffer below is this device's memory (host
     * memory on the CPU device). On another device, h_* are the host
     * copies the accessors return: params/grads/moments after stage_pull,
     * a slot's output and losses after its forward, the input gradient
     * after a backward; on the CPU they alias the buffers themselves. */
    struct kdev *dev;
    bool host;
    float *h_params, *h_grads, *h_m, *h_v, *h_dres;
    float **h_out, **h_losses;         /* [nslots] */
    int l0, l1, nl, B, T, N, QKV;
    bool first, last;

    stage_param *table;
    int ntable;
    size_t nparams;
    float *params, *grads, *m, *v;
    layer_weights *w, *dw;             /* [nl] views into params / grads */
    float *wte, *dwte, *lnf, *dlnf, *head, *dhead;
    /* A stage holding both ends of a tied model accumulates the head's
     * gradient apart and adds it to the embedding's in stage_sum_tied_grads,
     * in the order a split chain does, so results do not depend on cuts. */
    float *dhead_apart;

    float *arena;                      /* every activation and scratch buffer */
    slot_acts *slots;                  /* [nslots]: micro-batches in flight */
    int nslots;
    float *dres, *dln, *dqkv, *datty, *dgu, *dh;
    float *att_scratch;
    int nscratch;
    float *rope_cos, *rope_sin;        /* [T, HD/2] */
    /* NULL: every tensor trains; else the frozen base and the adapters
     * (stage_lora.c), and params/grads/m/v hold the adapters alone. */
    struct stage_lora_state *lora;
};

/* The product groups of a layer: the fused [q|k|v], o, the fused [gate|up]
 * and down. */
enum { STAGE_G_QKV, STAGE_G_O, STAGE_G_GU, STAGE_G_DOWN };

/* stage.c */
void stage_table_add(stage *s, const char *name, int64_t d0, int64_t d1);
void stage_build_table(stage *s);
/* Normal(0, 0.02) from (seed, name), or ones for a 1-D tensor. */
void stage_fill_init(float *x, size_t numel, int ndim, const char *name, uint64_t seed);
uint64_t stage_splitmix64(uint64_t *x);
uint64_t stage_fnv1a(const char *str);
/* Everything but the parameter buffers: activations of every slot, the
 * slots' ids and labels, the table, scratch (bytes). */
double stage_act_bytes(const llama_config *cfg, int layer_begin, int layer_end, bool first,
                       bool last, int B, int T, int slots);
int stage_threads(void);
float *stage_alloc_floats(size_t n);

/* stage_lora.c: called by stage.c when s->lora is set */
int stage_lora_setup(stage *s, const stage_lora *l, char *err, size_t errlen);
void stage_lora_free(stage *s);
/* points the modules at the adapters once params and grads exist */
void stage_lora_bind(stage *s);
void stage_lora_zero(stage *s);
/* out (=|+=) inp W^T for group g of layer l, base and adapters (saving
 * what the backward needs in the slot) */
void stage_lora_forward(stage *s, int slot, int l, int g, float *out, const float *inp,
                        int accumulate);
/* dinp += dout W (base and adapters); adapters' gradients accumulate */
void stage_lora_backward(stage *s, int slot, int l, int g, float *dinp, const float *dout,
                         const float *inp);
int stage_lora_load(stage *s, const safetensors_file *f, char *err, size_t errlen);
void stage_lora_init(stage *s, uint64_t seed);

#endif
