/* test_cost_lora.c — the cost model of a LoRA job (scheduler/cost.c) against
 * the runtime it models:
 *  - cost_nf4_bytes and cost_nf4_scratch_floats equal kernels/' nf4_bytes
 *    and nf4_matmul_scratch_floats on every shape tried;
 *  - a stage's memory equals model/stage_lora.c's own figure
 *    (stage_lora_memory_bytes) for the 768 x 12 bench config and a
 *    2048-wide 22-layer one, tied and untied, fp32 and NF4 bases, several
 *    layer ranges, embedding- and head-only stages: what LoRA changes
 *    (frozen base, adapters with gradients and moments, saved x A^T, work
 *    rows, NF4 tile scratch) to the byte, once the two documented
 *    differences are accounted for; the whole stage within 1%;
 *  - a real stage's adapters (stage_num_params) and frozen base
 *    (stage_frozen_bytes) equal the model's counts;
 *  - a LoRA step's times from a full fine-tuning profile;
 *  - a job's "lora" and "base" reach the shape (pool_job_shape), and the
 *    LAN-party fleet refuses TinyLlama-1.1B in full fine-tuning and plans it
 *    with NF4 + LoRA (both kinds' memory per stage printed). */
#include "check.h"
#include "kernels.h"
#include "model.h"
#include "pool_job.h"
#include "runtime.h"
#include "scheduler.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* The repository's root, from this file's path. */
static void repo_path(char *buf, size_t len, const char *rel)
{
    const char *f = __FILE__, *end = strstr(f, "tests/unit/test_cost_lora.c");
    snprintf(buf, len, "%.*s%s", end ? (int)(end - f) : 0, f, rel);
}

static cost_shape shape_of(const llama_config *c, int T, const stage_lora *l)
{
    cost_shape s = fleet_shape(c, T);
    if (l) {
        s.lora_r = l->r;
        s.lora_modules = l->modules;
        s.nf4 = l->nf4;
    }
    return s;
}

/* model/stage.c's stage_threads: the scratch slots every stage allocates. */
static int threads(void)
{
    return omp_get_max_threads() > omp_get_num_procs() ? omp_get_max_threads()
                                                       : omp_get_num_procs();
}

static void test_enums_and_nf4(void)
{
    CHECK((int)COST_LORA_Q == (int)STAGE_LORA_Q && (int)COST_LORA_K == (int)STAGE_LORA_K &&
              (int)COST_LORA_V == (int)STAGE_LORA_V && (int)COST_LORA_O == (int)STAGE_LORA_O &&
              (int)COST_LORA_GATE == (int)STAGE_LORA_GATE &&
              (int)COST_LORA_UP == (int)STAGE_LORA_UP &&
              (int)COST_LORA_DOWN == (int)STAGE_LORA_DOWN &&
              (int)COST_LORA_MODULES == (int)STAGE_LORA_MODULES,
          "scheduler's modules are model's, in order");
    static const int64_t dims[] = {1, 2, 3, 63, 64, 65, 255, 256, 257, 768, 1000, 2048, 4096,
                                   5632, 16385};
    int n = (int)(sizeof dims / sizeof dims[0]), bad = 0, sbad = 0, tried = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            bad += cost_nf4_bytes(dims[i], dims[j]) != (int64_t)nf4_bytes(dims[i], dims[j]);
            for (int k = 0; k < n; k += 3, tried++)
                sbad += cost_nf4_scratch_floats(dims[k], dims[j], dims[i]) !=
                        (int64_t)nf4_matmul_scratch_floats((int)dims[k], (int)dims[j],
                                                           (int)dims[i]);
        }
    CHECK(bad == 0, "cost_nf4_bytes differs from nf4_bytes on %d of %d shapes", bad, n * n);
    CHECK(sbad == 0, "cost_nf4_scratch_floats differs on %d of %d shapes", sbad, tried);
    CHECK(cost_nf4_bytes(2048, 2048) == (int64_t)nf4_bytes(2048, 2048) &&
              cost_nf4_bytes(2048, 2048) * 1000 / (2048 * 2048) == 516,
          "0.516 bytes per value: %lld", (long long)cost_nf4_bytes(2048, 2048));
}

/* The stage kinds tried: [a, b), first, last. */
typedef struct {
    int a, b;
    bool first, last;
} range;

static int64_t saved_rounding(const stage_lora *l, int64_t N)
{
    /* stage_lora_memory_bytes counts N r + 16 floats per adapter's saved
     * x A^T; the stage carves N r rounded up to 16 (what the cost model
     * counts) */
    int64_t per = 0;
    for (int m = 0; m < STAGE_LORA_MODULES; m++)
        if (l->modules & (1u << m)) per += (N * l->r + 16 - ((N * l->r + 15) & ~(int64_t)15)) * 4;
    return per;
}

/* One config: every range, fp32 and NF4 base, two ranks and module sets,
 * two micro-batch shapes, 1-3 slots. Returns the bookkeeping bytes per
 * layer and module (the same for every case, or -1). */
static int64_t agree(const char *name, const llama_config *c, int64_t book)
{
    int L = c->num_hidden_layers;
    range rs[] = {{0, L, true, true}, {0, 0, true, false}, {L, L, false, true},
                  {0, 3, true, false}, {4, 8, false, false}, {L - 2, L, false, true},
                  {5, 6, false, false}};
    static const int shapes[2][2] = {{1, 64}, {2, 128}};
    unsigned mods[2] = {1u << STAGE_LORA_Q | 1u << STAGE_LORA_V, (1u << STAGE_LORA_MODULES) - 1};
    int th = threads(), cases = 0;
    double worst = 0;
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
        for (int q = 0; q < 2; q++)
            for (int mi = 0; mi < 2; mi++)
                for (int k = 0; k < 2; k++) {
                    range r = rs[i];
                    int B = shapes[k][0], T = shapes[k][1], slots = 1 + (int)(i + q + k) % 3;
                    stage_lora l = {mi ? 16 : 8, 16.0, false, mods[mi], q == 1};
                    cost_shape sf = shape_of(c, T, NULL), sl = shape_of(c, T, &l);
                    cost_bytes cf, cl;
                    char err[256];
                    if (cost_bytes_compute(&cf, &sf, B, 4, err, sizeof err) ||
                        cost_bytes_compute(&cl, &sl, B, 4, err, sizeof err)) {
                        CHECK(0, "%s: %s", name, err);
                        return -1;
                    }
                    int64_t nl = r.b - r.a;
                    int64_t mf = cost_stage_memory(&cf, sf.tied, th, r.first, nl, r.last, slots);
                    int64_t ml = cost_stage_memory(&cl, sl.tied, th, r.first, nl, r.last, slots);
                    double rf = stage_memory_bytes(c, r.a, r.b, r.first, r.last, B, T, slots);
                    double rl = stage_lora_memory_bytes(c, r.a, r.b, r.first, r.last, B, T,
                                                        slots, &l);
                    /* what LoRA changes, both ways; the full fine-tuning
                     * state is exact on both sides (test_cost), so the
                     * difference is the LoRA state and buffers alone */
                    int64_t drt = (int64_t)(rl - rf), dcm = ml - mf;
                    int64_t rest = drt - dcm - slots * nl * saved_rounding(&l, (int64_t)B * T);
                    int64_t per = nl ? rest / (nl * STAGE_LORA_MODULES) : 0;
                    CHECK(nl ? rest == per * nl * STAGE_LORA_MODULES : rest == 0,
                          "%s [%d, %d)%s%s nf4 %d: LoRA's bytes differ by %lld beyond the "
                          "bookkeeping", name, r.a, r.b, r.first ? " first" : "",
                          r.last ? " last" : "", l.nf4, (long long)rest);
                    if (nl && book < 0) book = per;
                    CHECK(!nl || per == book, "%s [%d, %d): %lld bookkeeping bytes per module, "
                          "elsewhere %lld", name, r.a, r.b, (long long)per, (long long)book);
                    double rel = ((double)ml - rl) / rl;
                    if (rel < 0) rel = -rel;
                    if (rel > worst) worst = rel;
                    CHECK(rel < 0.01, "%s [%d, %d)%s%s nf4 %d B %d T %d: model %lld, runtime "
                          "%.0f bytes (%.3f%%)", name, r.a, r.b, r.first ? " first" : "",
                          r.last ? " last" : "", l.nf4, B, T, (long long)ml, rl, 100 * rel);
                    cases++;
                }
    printf("%s: %d stages: LoRA's bytes equal the runtime's (plus %lld bytes of tables per "
           "layer and module); whole stage within %.3f%%\n", name, cases, (long long)book,
           100 * worst);
    return book;
}

/* Figures for the report: the cost model against the runtime on a whole
 * model and a middle stage, micro-batch 1 x 512, one slot. */
static void figures(const char *name, const llama_config *c)
{
    stage_lora l = {16, 32.0, false, (1u << STAGE_LORA_MODULES) - 1, true};
    int L = c->num_hidden_layers, T = 512;
    range rs[2] = {{0, L, true, true}, {4, 8, false, false}};
    for (int i = 0; i < 2; i++) {
        cost_shape sf = shape_of(c, T, NULL), sl = shape_of(c, T, &l);
        cost_bytes cf, cl;
        cost_bytes_compute(&cf, &sf, 1, 4, NULL, 0);
        cost_bytes_compute(&cl, &sl, 1, 4, NULL, 0);
        int64_t nl = rs[i].b - rs[i].a;
        int64_t mf = cost_stage_memory(&cf, sf.tied, threads(), rs[i].first, nl, rs[i].last, 1);
        int64_t ml = cost_stage_memory(&cl, sl.tied, threads(), rs[i].first, nl, rs[i].last, 1);
        double rf = stage_memory_bytes(c, rs[i].a, rs[i].b, rs[i].first, rs[i].last, 1, T, 1);
        double rl = stage_lora_memory_bytes(c, rs[i].a, rs[i].b, rs[i].first, rs[i].last, 1, T,
                                            1, &l);
        printf("%s layers [%d, %d)%s, 1 x %d tokens: full fine-tuning model %.1f / runtime %.1f "
               "MiB; NF4 + LoRA r16 all-linear model %.1f / runtime %.1f MiB (%.3fx)\n", name,
               rs[i].a, rs[i].b, rs[i].first ? " + embedding + head" : "", T,
               (double)mf / 1048576, rf / 1048576, (double)ml / 1048576, rl / 1048576,
               (double)ml / (double)mf);
    }
}

/* Real stages: the adapters and the frozen base as allocated. */
static void test_real_stage(const llama_config *c)
{
    stage_lora l = {8, 16.0, false, 1u << STAGE_LORA_Q | 1u << STAGE_LORA_V | 1u << STAGE_LORA_DOWN,
                    false};
    for (int q = 0; q < 2; q++) {
        l.nf4 = q == 1;
        range rs[3] = {{0, 2, true, false}, {3, 4, false, false}, {10, 12, false, true}};
        for (int i = 0; i < 3; i++) {
            stage *s = NULL;
            char err[256];
            if (stage_create_lora(&s, c, rs[i].a, rs[i].b, rs[i].first, rs[i].last, 1, 16, 1, &l,
                                  err, sizeof err)) {
                CHECK(0, "%s", err);
                continue;
            }
            cost_shape sh = shape_of(c, 16, &l);
            cost_bytes cb;
            cost_bytes_compute(&cb, &sh, 1, 4, NULL, 0);
            int64_t nl = rs[i].b - rs[i].a;
            int64_t frozen = nl * cb.frozen[COST_LAYER] + (rs[i].first ? cb.frozen[COST_EMBED] : 0) +
                             (rs[i].last ? cb.frozen[COST_HEAD] : 0);
            CHECK((int64_t)stage_num_params(s) == nl * cb.trainable[COST_LAYER],
                  "[%d, %d): %zu adapter parameters, model %lld", rs[i].a, rs[i].b,
                  stage_num_params(s), (long long)(nl * cb.trainable[COST_LAYER]));
            CHECK((int64_t)stage_frozen_bytes(s) == frozen, "[%d, %d) nf4 %d: frozen base %.0f "
                  "bytes, model %lld", rs[i].a, rs[i].b, q, stage_frozen_bytes(s),
                  (long long)frozen);
            stage_free(s);
        }
    }
}

static void test_times(void)
{
    llama_config c = {768, 2048, 12, 12, 4, 4096, 1024, 64, 1e-5f, 10000.0f, false, {0}, LLAMA_ARCH_LLAMA};
    cost_profile pf = {.micro_batch = 1, .fwd_ns = {100, 10000000, 3000000},
                       .bwd_ns = {200, 20000000, 6000000}, .opt_ns = {500, 7000000, 4000},
                       .memory_bytes = 1, .scratch_slots = 1};
    cost_profile out;
    cost_shape full = shape_of(&c, 256, NULL);
    cost_profile_for_shape(&out, &pf, &full);
    CHECK(memcmp(&out, &pf, sizeof pf) == 0, "full fine-tuning keeps the profile");
    stage_lora l = {16, 32.0, false, (1u << STAGE_LORA_MODULES) - 1, true};
    cost_shape sl = shape_of(&c, 256, &l);
    cost_profile_for_shape(&out, &pf, &sl);
    /* M = 2*768^2 + 2*256*768 + 3*2048*768, A = 16 * (7 in + 7 out), 4CT */
    int64_t M = 2 * 768 * 768 + 2 * 256 * 768 + 3 * 2048 * 768, C = 768, T = 256;
    int64_t A = 16 * ((768 + 768) + (768 + 256) + (768 + 256) + (768 + 768) + (768 + 2048) * 2 +
                      (2048 + 768));
    int64_t att = 4 * C * T;
    CHECK(out.fwd_ns[COST_LAYER] == 10000000 * (2 * M + att + 2 * A) / (2 * M + att),
          "layer forward %lld", (long long)out.fwd_ns[COST_LAYER]);
    CHECK(out.bwd_ns[COST_LAYER] == 20000000 * (2 * M + 2 * att + 4 * A) / (4 * M + 2 * att),
          "layer backward %lld", (long long)out.bwd_ns[COST_LAYER]);
    CHECK(out.opt_ns[COST_LAYER] == 7000000 * A / (M + 2 * C), "AdamW %lld",
          (long long)out.opt_ns[COST_LAYER]);
    CHECK(out.bwd_ns[COST_EMBED] == 0 && out.opt_ns[COST_EMBED] == 0 && out.opt_ns[COST_HEAD] == 0 &&
              out.bwd_ns[COST_HEAD] == 3000000 && out.fwd_ns[COST_HEAD] == 3000000 &&
              out.fwd_ns[COST_EMBED] == 100,
          "frozen embedding and head: no gradient, no update");
    printf("768x12 at 256 tokens, LoRA r16 all-linear: layer forward x%.3f, backward x%.3f, "
           "AdamW x%.4f of full fine-tuning's\n", (double)out.fwd_ns[COST_LAYER] / 1e7,
           (double)out.bwd_ns[COST_LAYER] / 2e7, (double)out.opt_ns[COST_LAYER] / 7e6);
    /* refusals */
    cost_bytes cb;
    char err[256];
    cost_shape bad = sl;
    bad.lora_modules = 0;
    CHECK(cost_bytes_compute(&cb, &bad, 1, 4, err, sizeof err) != 0 && strstr(err, "LoRA"),
          "no modules: %s", err);
    bad = full;
    bad.nf4 = true;
    CHECK(cost_bytes_compute(&cb, &bad, 1, 4, err, sizeof err) != 0 && strstr(err, "NF4"),
          "NF4 without LoRA: %s", err);
}

static void print_stages(const char *what, const plan *p, const fleet_file *ff,
                         const cost_bytes *cb, const cost_shape *sh)
{
    for (int s = 0; s < p->nstages; s++) {
        const plan_stage *st = &p->stage[s];
        const cost_profile *pf = &ff->fleet.nodes[st->node[0]].prof;
        int64_t m = cost_stage_memory(cb, sh->tied, pf->scratch_slots, st->embed,
                                      st->layer_end - st->layer_begin, st->head, st->in_flight);
        printf("  %-22s stage %d %-12s %s[%d, %d)%s, %lld in flight: %.2f GiB of %.2f GiB\n", what,
               s, ff->fleet.nodes[st->node[0]].name, st->embed ? "emb + " : "", st->layer_begin,
               st->layer_end, st->head ? " + head" : "", (long long)st->in_flight,
               (double)m / 1073741824.0, (double)st->memory_limit / 1073741824.0);
    }
}

/* The LAN-party fleet (configs/fleets/lan-party-8gb.json) and TinyLlama. */
static void test_lan_party(void)
{
    char cfgp[1024], fleetp[1024], err[1024];
    repo_path(cfgp, sizeof cfgp, "configs/fleets/models/tinyllama-1.1b.json");
    repo_path(fleetp, sizeof fleetp, "configs/fleets/lan-party-8gb.json");
    llama_config c;
    if (llama_config_load(&c, cfgp, err, sizeof err)) {
        CHECK(0, "%s", err);
        return;
    }
    char text[2048];
    snprintf(text, sizeof text, "{\"config\": \"%s\", \"tokenizer\": \"t.json\", \"data\": "
             "{\"files\": [\"d.txt\"], \"format\": \"text\"}, \"out_dir\": \"out\", \"seq_len\": "
             "512, \"batch\": 16, \"micro_batch\": 1, \"steps\": 10, \"base\": {\"quant\": \"nf4\"}, "
             "\"lora\": {\"r\": 16, \"alpha\": 32, \"target_modules\": \"all-linear\"}}", cfgp);
    job_spec js;
    if (job_parse(&js, "job.json", text, err, sizeof err)) {
        CHECK(0, "%s", err);
        return;
    }
    cost_shape q = pool_job_shape(&c, &js), f = fleet_shape(&c, 512);
    job_free(&js);
    CHECK(q.lora_r == 16 && q.lora_modules == (1u << STAGE_LORA_MODULES) - 1 && q.nf4 &&
              q.seq == 512 && f.lora_r == 0,
          "the job's lora and base reach the shape (r %lld, modules 0x%x, nf4 %d)",
          (long long)q.lora_r, q.lora_modules, q.nf4);
    fleet_file ff = {0};
    if (fleet_load(&ff, fleetp, NULL, &f, 1, err, sizeof err)) {
        CHECK(0, "%s", err);
        return;
    }
    plan_job job = {.shape = f, .batch = 16, .max_micro_batch = 1, .min_micro_batch = 1,
                    .wire_bytes = 4, .margin_permille = ff.margin_permille};
    plan *pl = calloc(1, sizeof *pl);
    CHECK(plan_compute(pl, &ff.fleet, &job, PLAN_AUTO, NULL, err, sizeof err) != 0 &&
              strstr(err, "cannot hold the model") && strstr(err, "missing"),
          "full fine-tuning is refused, naming what is missing: %s", err);
    printf("full fine-tuning on %s: %s\n", ff.name, err);
    job.shape = q;
    CHECK(plan_compute(pl, &ff.fleet, &job, PLAN_AUTO, NULL, err, sizeof err) == 0,
          "NF4 + LoRA plans: %s", err);
    if (pl->nstages > 0) {
        cost_bytes cf, cq;
        cost_bytes_compute(&cf, &f, 1, 4, NULL, 0);
        cost_bytes_compute(&cq, &q, 1, 4, NULL, 0);
        printf("NF4 + LoRA plan on %s (%d stages), each stage's memory both ways:\n", ff.name,
               pl->nstages);
        print_stages("NF4 + LoRA r16", pl, &ff, &cq, &q);
        print_stages("full fine-tuning", pl, &ff, &cf, &f);
        for (int s = 0; s < pl->nstages; s++)
            CHECK(pl->stage[s].memory_bytes <= pl->stage[s].memory_limit, "stage %d fits", s);
    }
    free(pl);
    fleet_free(&ff);
}

int main(void)
{
    test_enums_and_nf4();
    char path[1024], err[512];
    repo_path(path, sizeof path, "configs/bench-768/config.json");
    llama_config c768, c2048 = {2048, 5632, 22, 32, 4, 32000, 2048, 64, 1e-5f, 10000.0f, false, {0}, LLAMA_ARCH_LLAMA};
    if (llama_config_load(&c768, path, err, sizeof err)) {
        CHECK(0, "%s", err);
        return 1;
    }
    int64_t book = agree("768x12", &c768, -1);
    c768.tie_word_embeddings = true;
    book = agree("768x12 tied", &c768, book);
    c768.tie_word_embeddings = false;
    book = agree("2048x22", &c2048, book);
    c2048.tie_word_embeddings = true;
    book = agree("2048x22 tied", &c2048, book);
    c2048.tie_word_embeddings = false;
    CHECK(book >= (int64_t)(2 * sizeof(stage_param) + sizeof(int)) &&
              book <= (int64_t)(2 * sizeof(stage_param) + sizeof(int)) + 256,
          "bookkeeping of %lld bytes per module: two table entries, a module record, an int",
          (long long)book);
    figures("768x12", &c768);
    figures("2048x22", &c2048);
    test_real_stage(&c768);
    test_times();
    test_lan_party();
    if (failures) printf("test_cost_lora: %d failure(s)\n", failures);
    else printf("test_cost_lora: ok\n");
    return failures != 0;
}
