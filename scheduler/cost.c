/* cost.c — the cost model: bytes of a model as a stage holds them, times of
 * a device from its spec sheet, transfers over a link, and the predicted
 * step of a plan under 1F1B. Integers throughout (see scheduler.h). */
#include "scheduler.h"
#include "sched_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define COST_INF INT64_MAX

/* ---- exact integer helpers ------------------------------------------------ */

/* Saturating: a figure that overflows becomes COST_INF and stays there, so
 * one absurd input cannot wrap around into a small, attractive cost. */
static int64_t sat_add(int64_t a, int64_t b)
{
    return a > COST_INF - b ? COST_INF : a + b;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a == 0 || b == 0) return 0;
    return a > COST_INF / b ? COST_INF : a * b;
}

/* floor or ceil of a * b / c on 128 bits built from 32-bit limbs: C11 has
 * no 128-bit integer, and long double differs between architectures. */
static uint64_t muldiv_u64(uint64_t a, uint64_t b, uint64_t c, bool round_up)
{
    if (b == 0 || a <= UINT64_MAX / b) {   /* the common case: the product fits */
        uint64_t prod = a * b, q = prod / c;
        return round_up && q * c != prod ? q + 1 : q;
    }
    uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    uint64_t p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh;
    uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
    uint64_t lo = (p0 & 0xffffffffu) | (mid << 32);
    uint64_t hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
    if (hi >= c) return UINT64_MAX;
    uint64_t q = 0, r = hi;
    for (int i = 63; i >= 0; i--) {
        uint64_t top = r >> 63;
        r = (r << 1) | ((lo >> i) & 1u);
        q <<= 1;
        if (top || r >= c) {
            r -= c;
            q |= 1u;
        }
    }
    if (round_up && r && q != UINT64_MAX) q++;
    return q;
}

static int64_t muldiv(int64_t a, int64_t b, int64_t c, bool round_up)
{
    if (a < 0 || b < 0 || c <= 0) return COST_INF;
    uint64_t q = muldiv_u64((uint64_t)a, (uint64_t)b, (uint64_t)c, round_up);
    return q > (uint64_t)COST_INF ? COST_INF : (int64_t)q;
}

int64_t cost_muldiv(int64_t a, int64_t b, int64_t c)
{
    return muldiv(a, b, c, false);
}

int64_t cost_transfer_ns(const cost_link *l, int64_t bytes)
{
    if (bytes <= 0) return 0;
    return sat_add(l->latency_ns, muldiv(bytes, 1000000000, l->bandwidth, true));
}

int64_t cost_scale(int64_t ns, int64_t b, int64_t B)
{
    return b == B ? ns : muldiv(ns, b, B, false);
}

/* ---- bytes of a model shape ----------------------------------------------- */

/* Every activation buffer is carved from the arena rounded up to 16 floats
 * (model/stage.c, stage_layout): the same rounding is counted here. */
static int64_t carve(int64_t floats)
{
    if (floats >= COST_INF / 8) return COST_INF;
    return ((floats + 15) & ~(int64_t)15) * 4;
}

/* ---- NF4 and LoRA ------------------------------------------------------------ */

/* kernels/cpu/nf4.c's layout: quant_map[16] | nested_map[256] | nested
 * absmax (one per 256 blocks) | offset, as floats, then the codes (two per
 * byte) and one 8-bit absmax code per block of 64. */
int64_t cost_nf4_bytes(int64_t rows, int64_t cols)
{
    if (rows < 0 || cols < 0 || (cols && rows > COST_INF / 2 / cols)) return 0;
    int64_t n = rows * cols, blocks = (n + 63) / 64, nested = (blocks + 255) / 256;
    return (16 + 256 + nested + 1) * 4 + (n + 1) / 2 + blocks;
}

/* kernels/cpu/nf4_matmul.c's (and matmul.c's) output tiles for an M x N
 * product: 256 x 256, halved until there are 16 of them. */
static void nf4_tiles(int64_t M, int64_t N, int64_t *tm, int64_t *tn)
{
    int64_t TM = 256, TN = 256;
    while (((M + TM - 1) / TM) * ((N + TN - 1) / TN) < 16) {
        if (TN > 64 && (TN >= TM || TM <= 32))
            TN /= 2;
        else if (TM > 32)
            TM /= 2;
        else
            break;
    }
    *tm = TM;
    *tn = TN;
}

/* The forward dequantizes [tile columns of OC, IC], the input gradient
 * [OC, tile columns of IC]: the larger of the two per thread. */
int64_t cost_nf4_scratch_floats(int64_t N, int64_t IC, int64_t OC)
{
    int64_t tm, tf, tb;
    nf4_tiles(N, OC, &tm, &tf);
    nf4_tiles(N, IC, &tm, &tb);
    int64_t fwd = sat_mul(tf < OC ? tf : OC, IC), bwd = sat_mul(OC, tb < IC ? tb : IC);
    return fwd > bwd ? fwd : bwd;
}

/* [out, in] of every projection (model/stage_lora.c, module_shape), with
 * head_dim = hidden / heads. */
static void lora_modules(const cost_shape *s, int64_t out[COST_LORA_MODULES],
                         int64_t in[COST_LORA_MODULES])
{
    int64_t C = s->hidden, F = s->intermediate, KVD = s->kv_heads * (C / s->heads);
    const int64_t o[COST_LORA_MODULES] = {C, KVD, KVD, C, F, F, C};
    const int64_t i[COST_LORA_MODULES] = {C, C, C, C, C, C, F};
    for (int m = 0; m < COST_LORA_MODULES; m++) out[m] = o[m], in[m] = i[m];
}

/* The frozen base and the adapters (model/stage_lora.c): a layer's norms in
 * fp32, its seven matrices in fp32 or NF4, the adapters' A [r, in] and
 * B [out, r] with fp32 weights, gradients and two moments; the embedding and
 * the head frozen in fp32; per in-flight micro-batch the adapters' v =
 * scaling x A^T [N, r] (each carved to 16 floats); per stage the rows of
 * one module [N, max(C, F)], dv [N, r] and the norms' gradient sink [C],
 * and with NF4 one tile scratch per slot (the widest module's). */
static void lora_bytes(cost_bytes *out, const cost_shape *s, int64_t N)
{
    int64_t C = s->hidden, F = s->intermediate, V = s->vocab, r = s->lora_r;
    int64_t mo[COST_LORA_MODULES], mi[COST_LORA_MODULES];
    lora_modules(s, mo, mi);
    int64_t adapters = 0, base = 0, saved = 0, scratch = 0;
    for (int m = 0; m < COST_LORA_MODULES; m++) {
        if (s->nf4) {
            base = sat_add(base, cost_nf4_bytes(mo[m], mi[m]));
            int64_t sc = cost_nf4_scratch_floats(N, mi[m], mo[m]);
            if (sc > scratch) scratch = sc;
        } else {
            base = sat_add(base, mo[m] * mi[m] * 4);
        }
        if (s->lora_modules & (1u << m)) {
            adapters += r * (mi[m] + mo[m]);
            saved = sat_add(saved, carve(sat_mul(N, r)));
        }
    }
    out->frozen[COST_EMBED] = 4 * V * C;
    out->frozen[COST_LAYER] = sat_add(8 * C, base);
    out->frozen[COST_HEAD] = 4 * (C + V * C);
    for (int u = 0; u < COST_UNITS; u++) {
        out->trainable[u] = u == COST_LAYER ? adapters : 0;
        out->weight[u] = sat_add(out->frozen[u], 4 * out->trainable[u]);
        out->grad[u] = 4 * out->trainable[u];
        out->moments[u] = 8 * out->trainable[u];
    }
    out->head_state_tied_first = 4 * C;   /* the norm; the head is the frozen embedding */
    out->act[COST_LAYER] = sat_add(out->act[COST_LAYER], saved);
    int64_t rows = sat_mul(N, C > F ? C : F);
    out->stage = sat_add(out->stage, sat_mul(sat_add(sat_add(rows, sat_mul(N, r)), C), 4));
    out->stage_scratch = sat_mul(scratch, 4);
}

int cost_bytes_compute(cost_bytes *out, const cost_shape *s, int64_t b, int wire_bytes,
                       char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const int64_t lim = (int64_t)1 << 24;
    if (s->layers < 1 || s->layers > 100000 || s->hidden < 1 || s->hidden > lim ||
        s->intermediate < 1 || s->intermediate > lim || s->heads < 1 || s->heads > lim ||
        s->kv_heads < 1 || s->kv_heads > s->heads || s->vocab < 1 || s->vocab > lim ||
        s->seq < 1 || s->seq > lim || s->hidden % s->heads)
        return sched_errf(err, errlen, "model shape: sizes must be positive, at most 2^24, "
                    "heads must divide the hidden size and KV heads at most the heads");
    if (b < 1 || b > lim)
        return sched_errf(err, errlen, "micro-batch %lld: must be in [1, 2^24]", (long long)b);
    if (wire_bytes != 2 && wire_bytes != 4)
        return sched_errf(err, errlen, "wire dtype of %d bytes: must be 2 (bf16) or 4 (fp32)",
                    wire_bytes);
    if (s->lora_r < 0 || s->lora_r > 65536 ||
        (s->lora_r > 0 && ((s->lora_modules & ((1u << COST_LORA_MODULES) - 1)) == 0 ||
                           (s->lora_modules >> COST_LORA_MODULES) != 0)))
        return sched_errf(err, errlen, "LoRA settings: rank %lld must be in [1, 65536] (0: full "
                          "fine-tuning) and the target modules some of the seven projections "
                          "(mask 0x%x)", (long long)s->lora_r, s->lora_modules);
    if (s->nf4 && s->lora_r == 0)
        return sched_errf(err, errlen, "an NF4 base is frozen: it needs LoRA adapters to train "
                          "(lora rank 0)");
    int64_t C = s->hidden, F = s->intermediate, V = s->vocab, T = s->seq;
    int64_t HD = C / s->heads, KVD = s->kv_heads * HD, QKV = (s->heads + 2 * s->kv_heads) * HD;
    int64_t N = sat_mul(b, T);

    out->params[COST_EMBED] = V * C;
    out->params[COST_LAYER] = 2 * C + 2 * C * C + 2 * KVD * C + 3 * F * C;
    out->params[COST_HEAD] = C + V * C;   /* lm_head, or the tied copy on a last stage */
    for (int u = 0; u < COST_UNITS; u++) {
        out->trainable[u] = out->params[u];
        out->weight[u] = out->params[u] * 4;
        out->grad[u] = out->params[u] * 4;
        out->moments[u] = out->params[u] * 8;
    }
    /* One stage holding both ends of a tied model keeps only the norm, and
     * a gradient buffer for the head apart (stage_create's dhead_apart). */
    out->head_state_tied_first = 16 * C + 4 * V * C;

    int64_t NC = carve(sat_mul(N, C));
    int64_t att = carve(sat_mul(sat_mul(b, s->heads), sat_mul(T, T)));
    out->act[COST_LAYER] = sat_add(sat_add(5 * NC, 2 * carve(N)),
                                   sat_add(sat_add(carve(sat_mul(N, QKV)), att),
                                           sat_add(carve(sat_mul(N, 2 * F)),
                                                   carve(sat_mul(N, F)))));
    out->act[COST_HEAD] = sat_add(sat_add(NC, carve(N)),
                                  sat_add(carve(sat_mul(N, V)), carve(N)));
    out->act[COST_EMBED] = 0;
    out->slot = sat_add(NC, sat_mul(N, 8));   /* output; ids and labels (int32) */
    out->stage = sat_add(2 * NC, 2 * carve(T * HD / 2));
    out->layer_work = sat_add(sat_add(carve(sat_mul(N, QKV)), NC),
                              sat_add(carve(sat_mul(N, 2 * F)), carve(sat_mul(N, F))));
    out->att_scratch = carve(T * T);
    out->boundary = sat_mul(sat_mul(N, C), wire_bytes);
    if (s->lora_r > 0) lora_bytes(out, s, N);
    /* Keep every figure far below INT64_MAX: the planner multiplies them
     * by in-flight counts and layer counts. */
    const int64_t big = (int64_t)1 << 52;
    if (out->act[COST_LAYER] > big || out->act[COST_HEAD] > big || out->boundary > big ||
        out->params[COST_HEAD] > big / 16)
        return sched_errf(err, errlen, "model shape at micro-batch %lld x %lld tokens: more than "
                    "4 PiB per stage, beyond the cost model's range", (long long)b,
                    (long long)T);
    return 0;
}

int64_t cost_stage_memory(const cost_bytes *cb, bool tied, int scratch_slots, bool embed,
                          int64_t layers, bool head, int64_t in_flight)
{
    int64_t state = 0, act = cb->slot;
    /* NF4 products' scratch only where there are layers to multiply */
    int64_t fixed = sat_add(cb->stage, layers > 0 ? sat_mul(scratch_slots, cb->stage_scratch) : 0);
    if (embed) {
        state = cb->weight[COST_EMBED] + cb->grad[COST_EMBED] + cb->moments[COST_EMBED];
        act = sat_add(act, cb->act[COST_EMBED]);
    }
    int64_t per_layer = cb->weight[COST_LAYER] + cb->grad[COST_LAYER] + cb->moments[COST_LAYER];
    state = sat_add(state, sat_mul(layers, per_layer));
    act = sat_add(act, sat_mul(layers, cb->act[COST_LAYER]));
    if (head) {
        state = sat_add(state, embed && tied ? cb->head_state_tied_first
                                             : cb->weight[COST_HEAD] + cb->grad[COST_HEAD] +
                                                   cb->moments[COST_HEAD]);
        act = sat_add(act, cb->act[COST_HEAD]);
    }
    if (layers > 0)
        fixed = sat_add(fixed, sat_add(cb->layer_work, sat_mul(scratch_slots, cb->att_scratch)));
    return sat_add(sat_add(state, fixed), sat_mul(in_flight, act));
}

/* ---- spec sheets ------------------------------------------------------- */

static int64_t roofline_ns(const cost_spec *sp, int64_t flops, int64_t bytes)
{
    int64_t compute = muldiv(flops, 1000, sat_mul(sp->gflops, sp->mfu_permille), true);
    int64_t memory = muldiv(bytes, 1000000000, sp->mem_bandwidth, true);
    return sat_add(compute, memory);
}

int cost_profile_from_spec(cost_profile *out, const cost_spec *sp, const cost_shape *shape,
                           int64_t b, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (sp->gflops < 1 || sp->mfu_permille < 1 || sp->mfu_permille > 1000 ||
        sp->mem_bandwidth < 1 || sp->memory_bytes < 0 ||
        (sp->weight_bytes != 2 && sp->weight_bytes != 4) || sp->scratch_slots < 1)
        return sched_errf(err, errlen, "device spec: peak, efficiency in (0, 1], bandwidth and "
                    "scratch slots must be positive, memory not negative");
    cost_bytes cb;
    cost_shape full = *shape;   /* a profile times full fine-tuning */
    full.lora_r = 0;
    full.lora_modules = 0;
    full.nf4 = false;
    if (cost_bytes_compute(&cb, &full, b, 4, err, errlen)) return -1;
    int64_t C = shape->hidden, V = shape->vocab, T = shape->seq, N = b * T;
    int64_t HD = C / shape->heads;
    int64_t matrices = cb.params[COST_LAYER] - 2 * C;
    /* matrix products 2*N*params, attention scores and values 4*b*NH*T^2*HD
     * (the CPU kernel computes the full square) */
    int64_t layer_flops = sat_add(sat_mul(2 * N, matrices),
                                  sat_mul(sat_mul(4 * b, shape->heads), sat_mul(T * T, HD)));
    int64_t head_flops = sat_mul(2 * N, V * C);
    int64_t layer_bytes = sat_add(sat_mul(cb.params[COST_LAYER], sp->weight_bytes),
                                  cb.act[COST_LAYER]);
    int64_t head_bytes = sat_add(sat_mul(V * C, sp->weight_bytes), cb.act[COST_HEAD]);
    int64_t embed_bytes = sat_mul(N, C * 8);   /* rows gathered, then written */
    out->micro_batch = b;
    out->fwd_ns[COST_EMBED] = roofline_ns(sp, 0, embed_bytes);
    out->fwd_ns[COST_LAYER] = roofline_ns(sp, layer_flops, layer_bytes);
    out->fwd_ns[COST_HEAD] = roofline_ns(sp, head_flops, head_bytes);
    for (int u = 0; u < COST_UNITS; u++) {
        out->bwd_ns[u] = sat_mul(out->fwd_ns[u], 2);
        /* AdamW reads weight, gradient, both moments; writes weight and moments */
        out->opt_ns[u] = muldiv(sat_mul(cb.params[u], 28), 1000000000, sp->mem_bandwidth, true);
    }
    out->memory_bytes = sp->memory_bytes;
    out->scratch_slots = sp->scratch_slots;
    return 0;
}

void cost_profile_for_shape(cost_profile *out, const cost_profile *pf, const cost_shape *s)
{
    *out = *pf;
    if (s->lora_r <= 0 || s->heads < 1 || s->hidden % s->heads) return;
    int64_t C = s->hidden, KVD = s->kv_heads * (C / s->heads), F = s->intermediate;
    int64_t M = 2 * C * C + 2 * KVD * C + 3 * F * C, P = M + 2 * C, A = 0;
    int64_t mo[COST_LORA_MODULES], mi[COST_LORA_MODULES];
    lora_modules(s, mo, mi);
    for (int m = 0; m < COST_LORA_MODULES; m++)
        if (s->lora_modules & (1u << m)) A = sat_add(A, sat_mul(s->lora_r, mi[m] + mo[m]));
    int64_t att = sat_mul(4 * C, s->seq);   /* per token: scores and values, forward */
    int64_t fwd_full = sat_add(2 * M, att), bwd_full = sat_add(4 * M, 2 * att);
    int64_t fwd_lora = sat_add(fwd_full, sat_mul(2, A));
    int64_t bwd_lora = sat_add(sat_add(2 * M, 2 * att), sat_mul(4, A));
    out->fwd_ns[COST_LAYER] = muldiv(pf->fwd_ns[COST_LAYER], fwd_lora, fwd_full, false);
    out->bwd_ns[COST_LAYER] = muldiv(pf->bwd_ns[COST_LAYER], bwd_lora, bwd_full, false);
    out->opt_ns[COST_LAYER] = muldiv(pf->opt_ns[COST_LAYER], A, P, false);
    out->bwd_ns[COST_EMBED] = 0;
    out->bwd_ns[COST_HEAD] = pf->bwd_ns[COST_HEAD] / 2;
    out->opt_ns[COST_EMBED] = out->opt_ns[COST_HEAD] = 0;
}

/* ---- link measurement ---------------------------------------------------- */

static int64_t median_rtt(const cost_probe *pr, int n, int64_t bytes, int *count)
{
    int64_t v[64];
    int k = 0;
    for (int i = 0; i < n && k < 64; i++)
        if (pr[i].bytes == bytes) v[k++] = pr[i].rtt_ns;
    for (int i = 1; i < k; i++)   /* insertion sort: a handful of probes */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    *count = k;
    return k ? v[k / 2] : 0;
}

int cost_link_estimate(cost_link *out, const cost_probe *pr, int n, char *err, size_t errlen)
{
    if (n < 2) return sched_errf(err, errlen, "link probes: need probes of two sizes");
    int64_t small = COST_INF, large = 0;
    for (int i = 0; i < n; i++) {
        if (pr[i].bytes < 0 || pr[i].rtt_ns <= 0)
            return sched_errf(err, errlen, "link probe %d: bytes %lld, round trip %lld ns", i,
                        (long long)pr[i].bytes, (long long)pr[i].rtt_ns);
        if (pr[i].bytes < small) small = pr[i].bytes;
        if (pr[i].bytes > large) large = pr[i].bytes;
    }
    if (large == small) return sched_errf(err, errlen, "link probes: need probes of two sizes");
    int ns, nl;
    int64_t rs = median_rtt(pr, n, small, &ns), rl = median_rtt(pr, n, large, &nl);
    /* an echo carries the payload both ways: rtt = 2 latency + 2 bytes / bandwidth */
    if (rl <= rs)
        return sched_errf(err, errlen, "link probes: %lld-byte round trips (%lld ns) are not slower "
                    "than %lld-byte ones (%lld ns); send larger probes", (long long)large,
                    (long long)rl, (long long)small, (long long)rs);
    out->bandwidth = muldiv(2 * (large - small), 1000000000, rl - rs, false);
    if (out->bandwidth < 1) out->bandwidth = 1;
    int64_t small_xfer = muldiv(2 * small, 1000000000, out->bandwidth, false);
    out->latency_ns = rs > small_xfer ? (rs - small_xfer) / 2 : 0;
    return 0;
}

/* ---- predicted step of a plan -------------------------------------------- */

void cost_format_bytes(char *buf, size_t len, int64_t bytes)
{
    double v = (double)bytes;
    if (bytes >= ((int64_t)1 << 30))
        snprintf(buf, len, "%.2f GiB", v / (1 << 30));
    else if (bytes >= ((int64_t)1 << 20))
        snprintf(buf, len, "%.1f MiB", v / (1 << 20));
    else if (bytes >= ((int64_t)1 << 10))
        snprintf(buf, len, "%.1f KiB", v / (1 << 10));
    else
        snprintf(buf, len, "%lld bytes", (long long)bytes);
}

int cost_evaluate(plan *p, const plan_fleet *f, const plan_job *job, char *err, size_t errlen)
{
    int n = p->nstages, L = job->shape.layers;
    if (n < 1 || n > PLAN_MAX_STAGES)
        return sched_errf(err, errlen, "plan: %d stages, must be 1 to %d", n, PLAN_MAX_STAGES);
    if (p->micro_batch < 1 || p->micro_batches < 1 ||
        p->micro_batches > job->batch / p->micro_batch ||
        p->micro_batches * p->micro_batch != job->batch)
        return sched_errf(err, errlen, "plan: %lld micro-batches of %lld do not make the batch of %lld",
                    (long long)p->micro_batches, (long long)p->micro_batch,
                    (long long)job->batch);
    cost_bytes cb;
    if (cost_bytes_compute(&cb, &job->shape, p->micro_batch, job->wire_bytes, err, errlen))
        return -1;
    int64_t m = p->micro_batches, sum = 0, max = -1, opt = 0;
    for (int s = 0; s < n; s++) {
        plan_stage *st = &p->stage[s];
        if (st->ndevices != 1)
            return sched_errf(err, errlen, "plan: stage %d has %d devices; stages shared by several "
                        "devices (data parallel) are not modelled yet", s, st->ndevices);
        int i = st->node[0];
        if (i < 0 || i >= f->nnodes) return sched_errf(err, errlen, "plan: stage %d: no node %d", s, i);
        if (s == 0 && f->nodes[i].no_data)
            return sched_errf(err, errlen, "plan: node %s cannot be the first stage: it does not "
                              "hold the job's data (tokenizer and data files)", f->nodes[i].name);
        for (int r = 0; r < s; r++)
            if (p->stage[r].node[0] == i)
                return sched_errf(err, errlen, "plan: node %s holds stages %d and %d",
                            f->nodes[i].name, r, s);
        int a = st->layer_begin, e = st->layer_end;
        if (st->embed != (s == 0) || st->head != (s == n - 1) || a != (s ? p->stage[s - 1].layer_end : 0) ||
            e < a || e > L || (s == n - 1 && e != L) || (s > 0 && s < n - 1 && e == a) ||
            (n == 1 && e == a))
            return sched_errf(err, errlen, "plan: stage %d (layers [%d, %d)) does not continue a "
                        "chain over %d layers with the embedding first and the head last",
                        s, a, e, L);
        cost_profile adj;
        cost_profile_for_shape(&adj, &f->nodes[i].prof, &job->shape);
        const cost_profile *pf = &adj;
        int64_t k = e - a, B = pf->micro_batch, b = p->micro_batch;
        int64_t fw = sat_mul(k, cost_scale(pf->fwd_ns[COST_LAYER], b, B));
        int64_t bw = sat_mul(k, cost_scale(pf->bwd_ns[COST_LAYER], b, B));
        int64_t op = sat_mul(k, pf->opt_ns[COST_LAYER]);
        if (st->embed) {
            fw = sat_add(fw, cost_scale(pf->fwd_ns[COST_EMBED], b, B));
            bw = sat_add(bw, cost_scale(pf->bwd_ns[COST_EMBED], b, B));
            op = sat_add(op, pf->opt_ns[COST_EMBED]);
        }
        if (st->head) {
            fw = sat_add(fw, cost_scale(pf->fwd_ns[COST_HEAD], b, B));
            bw = sat_add(bw, cost_scale(pf->bwd_ns[COST_HEAD], b, B));
            op = sat_add(op, pf->opt_ns[COST_HEAD]);
        }
        st->fwd_ns = fw;
        st->bwd_ns = bw;
        st->send_ns = st->recv_ns = 0;
        if (s < n - 1) {
            int j = p->stage[s + 1].node[0];
            if (j >= 0 && j < f->nnodes) {
                st->send_ns = cost_transfer_ns(&f->links[(size_t)i * f->nnodes + j], cb.boundary);
                st->recv_ns = cost_transfer_ns(&f->links[(size_t)j * f->nnodes + i], cb.boundary);
            }
        }
        st->time_ns = sat_add(sat_add(fw, bw), sat_add(st->send_ns, st->recv_ns));
        st->opt_ns = op;
        st->in_flight = n - s < m ? n - s : m;
        st->memory_bytes = cost_stage_memory(&cb, job->shape.tied, pf->scratch_slots, st->embed,
                                             k, st->head, st->in_flight);
        st->memory_limit = pf->memory_bytes - muldiv(pf->memory_bytes, job->margin_permille,
                                                     1000, false);
        if (st->memory_bytes > st->memory_limit) {
            if (!err) return -1;   /* the search asks often; format only for people */
            char need[32], have[32], miss[32];
            cost_format_bytes(need, sizeof need, st->memory_bytes);
            cost_format_bytes(have, sizeof have, st->memory_limit);
            cost_format_bytes(miss, sizeof miss, st->memory_bytes - st->memory_limit);
            return sched_errf(err, errlen, "node %s (stage %d: %slayers [%d, %d)%s, %lld micro-batches "
                        "in flight) needs %s, has %s after the %d.%d%% margin: %s missing",
                        f->nodes[i].name, s, st->embed ? "embedding, " : "", a, e,
                        st->head ? ", head" : "", (long long)st->in_flight, need, have,
                        job->margin_permille / 10, job->margin_permille % 10, miss);
        }
        sum = sat_add(sum, st->time_ns);
        if (st->time_ns > max) {
            max = st->time_ns;
            p->bottleneck = s;
        }
        if (op > opt) opt = op;
    }
    p->pipeline_ns = sat_add(sat_mul(m - 1, max), sum);
    p->optimizer_ns = opt;
    p->step_ns = sat_add(p->pipeline_ns, opt);
    /* idle share: every stage is busy m * t_s of p * pipeline */
    int64_t total = sat_mul(n, p->pipeline_ns), busy = sat_mul(m, sum);
    p->bubble_ppm = total > 0 && total < COST_INF ? muldiv(total - busy, 1000000, total, false) : 0;
    if (p->step_ns >= COST_INF / 4)
        return sched_errf(err, errlen, "plan: step time beyond the cost model's range");
    return 0;
}
