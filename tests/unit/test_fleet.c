/* test_fleet.c — the example fleets of configs/fleets planned as `shardnode
 * plan` plans them: the cost model agrees with the 1F1B simulator within 2%,
 * memory limits hold, the homelab plan beats the uniform split, the plan
 * does not depend on the order nodes are listed in; and fleet files with
 * unknown devices, negative bandwidths, duplicate names or too little
 * memory are refused naming the entry. */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char root[512];   /* the repository, from this file's path */

static int load(fleet_file *ff, const char *fleet, const char *model, int64_t seq,
                int64_t micro, plan_job *job, char *err, size_t errlen)
{
    char fp[1024], mp[1024];
    llama_config cfg;
    bool in_repo = fleet[0] != '/';   /* the examples; else a file this test wrote */
    snprintf(fp, sizeof fp, "%s%s%s", in_repo ? root : "", in_repo ? "/" : "", fleet);
    snprintf(mp, sizeof mp, "%s/configs/fleets/models/%s", root, model);
    if (llama_config_load(&cfg, mp, err, errlen)) return -1;
    cost_shape shape = fleet_shape(&cfg, seq);
    char dev[1024];
    snprintf(dev, sizeof dev, "%s/configs/devices.json", root);
    if (fleet_load(ff, fp, in_repo ? NULL : dev, &shape, micro, err, errlen)) return -1;
    memset(job, 0, sizeof *job);
    job->shape = shape;
    job->max_micro_batch = micro;
    job->wire_bytes = 4;
    job->margin_permille = ff->margin_permille;
    return 0;
}

/* The example fleets with the figures bench/plan_bench.sh and the docs
 * quote: enough micro-batches per step for the stages each plan uses. */
static const struct {
    const char *fleet, *model;
    int64_t seq, batch;
} examples[] = {
    {"configs/fleets/homelab.json", "llama-3b.json", 512, 64},
    {"configs/fleets/internet.json", "llama-3b.json", 1024, 64},
    {"configs/fleets/datacenter.json", "llama-13b.json", 1024, 64},
    {"configs/fleets/longtail-64.json", "llama-80l.json", 1024, 512},
    {"configs/fleets/longtail-256.json", "llama-80l.json", 1024, 512},
};

static void test_examples(void)
{
    plan *p = malloc(sizeof *p), *u = malloc(sizeof *u);
    for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++) {
        fleet_file ff;
        plan_job job;
        char err[1024] = "";
        if (load(&ff, examples[e].fleet, examples[e].model, examples[e].seq, 1, &job, err,
                 sizeof err)) {
            CHECK(0, "%s: %s", examples[e].fleet, err);
            continue;
        }
        job.batch = examples[e].batch;
        CHECK(plan_compute(p, &ff.fleet, &job, PLAN_AUTO, NULL, err, sizeof err) == 0, "%s: %s",
              examples[e].fleet, err);
        sim_result sim;
        CHECK(sim_run(&sim, p, err, sizeof err) == 0, "%s", err);
        double d = (double)(p->step_ns - sim.step_ns) / (double)sim.step_ns;
        printf("%-36s %2d stages, %4lld micro-batches: cost model %+.2f%% from the simulator\n",
               examples[e].fleet, p->nstages, (long long)p->micro_batches, 100 * d);
        CHECK(d < 0.02 && d > -0.02, "%s: cost model %lld ns, simulator %lld ns", examples[e].fleet,
              (long long)p->step_ns, (long long)sim.step_ns);
        for (int s = 0; s < p->nstages; s++)
            CHECK(p->stage[s].memory_bytes <= p->stage[s].memory_limit, "%s: stage %d over memory",
                  examples[e].fleet, s);
        if (e == 0) {   /* homelab: the plan beats the uniform split over every node */
            int order[16];
            for (int i = 0; i < ff.fleet.nnodes; i++) order[i] = i;
            CHECK(plan_uniform(u, &ff.fleet, &job, order, ff.fleet.nnodes, err, sizeof err) == 0,
                  "homelab uniform: %s", err);
            CHECK(p->step_ns < u->step_ns, "homelab: plan %lld ns, uniform %lld ns",
                  (long long)p->step_ns, (long long)u->step_ns);
        }
        fleet_free(&ff);
    }
    free(p);
    free(u);
}

static const char *write_file(const char *name, const char *text)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s-%d.json", SHARDNODE_TEST_TMP, name, (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_fail(int line, const char *text, const char *model, const char *needle1,
                        const char *needle2)
{
    fleet_file ff;
    plan_job job;
    char err[1024] = "";
    const char *path = write_file("fleet", text);
    int rc = load(&ff, path, model, 512, 1, &job, err, sizeof err);
    if (rc == 0) {
        job.batch = 8;
        plan *p = malloc(sizeof *p);
        rc = plan_compute(p, &ff.fleet, &job, PLAN_AUTO, NULL, err, sizeof err);
        free(p);
        fleet_free(&ff);
    }
    if (rc == 0 || !strstr(err, needle1) || (needle2 && !strstr(err, needle2))) {
        printf("FAIL %s:%d: expected an error with \"%s\"%s%s, got \"%s\"\n", __FILE__, line,
               needle1, needle2 ? " and " : "", needle2 ? needle2 : "", err);
        failures++;
    }
    unlink(path);
}

#define NODES2 "\"nodes\": [{\"name\": \"a\", \"device\": \"RTX 4090\"}, {\"name\": \"b\", \"device\": \"RTX 3090\"}]"

static void test_errors(void)
{
    expect_fail(__LINE__, "{\"nodes\": [{\"name\": \"a\", \"device\": \"RTX 4090\"}, {\"name\": "
                "\"gpu-7\", \"device\": \"GTX 9090\"}], \"default_link\": {\"latency_ms\": 1, "
                "\"bandwidth_gbps\": 1}}", "llama-3b.json", "nodes[1] (gpu-7): unknown device \"GTX 9090\"",
                "RTX 4090");
    expect_fail(__LINE__, "{" NODES2 ", \"links\": [{\"between\": [\"a\", \"b\"], \"latency_ms\": 1, "
                "\"bandwidth_mbps\": -5}]}", "llama-3b.json", "links[0]: \"bandwidth_mbps\" is -5",
                "positive");
    expect_fail(__LINE__, "{\"nodes\": [{\"name\": \"a\", \"device\": \"RTX 4090\"}, {\"name\": \"a\", "
                "\"device\": \"T4\"}], \"default_link\": {\"latency_ms\": 1, \"bandwidth_gbps\": 1}}",
                "llama-3b.json", "nodes[1] (a): node name \"a\" appears twice", NULL);
    expect_fail(__LINE__, "{" NODES2 "}", "llama-3b.json", "no link between nodes a and b", NULL);
    expect_fail(__LINE__, "{" NODES2 ", \"default_link\": {\"latency_ms\": 1, \"bandwith_gbps\": 1}}",
                "llama-3b.json", "default_link: \"bandwith_gbps\" is not a known key", NULL);
    expect_fail(__LINE__, "{\"nodes\": [{\"name\": \"a\", \"device\": \"T4\", \"site\": \"nowhere\"}]}",
                "llama-3b.json", "nodes[0] (a): \"site\" must name an entry", NULL);
    /* a fleet that cannot hold the model says how much is missing, and where */
    expect_fail(__LINE__, "{" NODES2 ", \"default_link\": {\"latency_ms\": 1, \"bandwidth_gbps\": 1}}",
                "llama-70b.json", "missing", "layers");
    expect_fail(__LINE__, "{\"nodes\": [{\"name\": \"tiny\", \"device\": \"T4\", \"memory_gib\": 2}]}",
                "llama-3b.json", "the closest node, tiny", "missing there");
    /* a node or a device that is not an object is refused with a message */
    expect_fail(__LINE__, "{\"nodes\": [0]}", "llama-3b.json", "nodes[0]: a node is an object",
                NULL);
    /* a newline in a key or a name stays out of the one-line message */
    expect_fail(__LINE__, "{" NODES2 ", \"default_\\nlink\": 1}", "llama-3b.json",
                "\"default_?link\" is not a known key", NULL);
    expect_fail(__LINE__, "{\"nodes\": [{\"name\": \"x\\ny\", \"device\": \"GTX 9090\"}]}",
                "llama-3b.json", "nodes[0] (x?y): unknown device", NULL);
}

/* A measured profile in a fleet file, and the same fleet listed backwards:
 * the same plan, the same hash. */
static void test_profiles_and_order(void)
{
    char prof[2048];
    snprintf(prof, sizeof prof,
             "{\"format\": \"shardnode-profile\", \"version\": 1, \"device\": \"cpu\", "
             "\"device_name\": \"test cpu\", \"model\": {\"hidden_size\": 3072, "
             "\"intermediate_size\": 8192, \"num_hidden_layers\": 28, \"num_attention_heads\": 24, "
             "\"num_key_value_heads\": 8, \"vocab_size\": 128256, \"tie_word_embeddings\": true}, "
             "\"micro_batch\": 1, \"seq\": 512, \"memory_bytes\": 68719476736, \"scratch_slots\": 4, "
             "\"embedding\": {\"forward_ns\": 1000000, \"backward_ns\": 2000000, \"optimizer_ns\": 9000000}, "
             "\"layer\": {\"forward_ns\": 90000000, \"backward_ns\": 180000000, \"optimizer_ns\": 2000000}, "
             "\"head\": {\"forward_ns\": 400000000, \"backward_ns\": 800000000, \"optimizer_ns\": 9000000}}");
    const char *pp = write_file("profile", prof);
    char ppath[1024];
    snprintf(ppath, sizeof ppath, "%s", pp);
    const char *nodes[4] = {"{\"name\": \"gpu\", \"device\": \"RTX 4090\", \"site\": \"s\"}",
                            "{\"name\": \"box\", \"profile\": \"%s\", \"site\": \"s\"}",
                            "{\"name\": \"old\", \"device\": \"V100\", \"site\": \"s\"}",
                            "{\"name\": \"big\", \"device\": \"A100\", \"site\": \"s\"}"};
    uint64_t hash[2] = {0, 0};
    for (int pass = 0; pass < 2; pass++) {
        char text[4096], one[1024];
        size_t used = (size_t)snprintf(text, sizeof text, "{\"sites\": {\"s\": {\"latency_ms\": 0.1, "
                                       "\"bandwidth_gbps\": 10}}, \"nodes\": [");
        for (int k = 0; k < 4; k++) {
            snprintf(one, sizeof one, nodes[pass ? 3 - k : k], ppath);
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", k ? ", " : "", one);
        }
        snprintf(text + used, sizeof text - used, "]}");
        const char *fp = write_file("fleet-order", text);
        fleet_file ff;
        plan_job job;
        char err[1024] = "";
        CHECK(load(&ff, fp, "llama-3b.json", 512, 1, &job, err, sizeof err) == 0, "%s", err);
        if (ff.fleet.nnodes == 4) {
            job.batch = 16;
            int box = pass ? 2 : 1;
            CHECK(ff.fleet.nodes[box].prof.fwd_ns[COST_LAYER] == 90000000 &&
                      ff.fleet.nodes[box].prof.memory_bytes == (int64_t)64 << 30,
                  "profile read");
            plan *p = malloc(sizeof *p);
            CHECK(plan_compute(p, &ff.fleet, &job, PLAN_AUTO, NULL, err, sizeof err) == 0, "%s", err);
            hash[pass] = plan_hash(p, &ff.fleet);
            free(p);
            fleet_free(&ff);
        }
        unlink(fp);
    }
    CHECK(hash[0] == hash[1] && hash[0] != 0, "listing order changes the plan hash");
    /* a profile of another model is refused */
    fleet_file ff;
    plan_job job;
    char err[1024] = "", text[2048];
    snprintf(text, sizeof text, "{\"nodes\": [{\"name\": \"box\", \"profile\": \"%s\"}]}", ppath);
    const char *fp = write_file("fleet-other", text);
    CHECK(load(&ff, fp, "llama-13b.json", 512, 1, &job, err, sizeof err) != 0 &&
              strstr(err, "nodes[0] (box)") && strstr(err, "another model"),
          "other model: %s", err);
    unlink(fp);
    unlink(ppath);
}

/* Cluster files: layers that do not fit an int are refused, not cut
 * (4294967296 would become layer 0), and a key or name with a newline in
 * it does not make a message of several lines. */
static void test_cluster_files(void)
{
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/test_fleet_cluster_%d.json", SHARDNODE_TEST_TMP,
             (int)getpid());
    cluster_spec *c = calloc(1, sizeof *c);
    static const struct { const char *text, *needle; } bad[] = {
        {"{\"nodes\": [{\"name\": \"a\", \"host\": \"h\", \"port\": 1, "
         "\"layers\": [4294967296, 4294967297]}]}", "[4294967296, 4294967297)"},
        {"{\"nodes\": [{\"name\": \"a\", \"host\": \"h\", \"port\": 1, "
         "\"layers\": [0, -4294967295]}]}", "outside"},
        {"{\"nodes\": [], \"sch\\nedule\": 1}", "is not a known key"},
        {"{\"nodes\": [{\"name\": \"a\\nb\", \"host\": 1, \"port\": 1}]}", "\"host\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i].text, f);
        fclose(f);
        err[0] = 0;
        int rc = cluster_load(c, path, 1, err, sizeof err);
        CHECK(rc != 0 && strstr(err, bad[i].needle) && strstr(err, path) && !strchr(err, '\n'),
              "cluster %zu: %s", i, err);
    }
    FILE *f = fopen(path, "w");
    fputs("{\"nodes\": [{\"name\": \"a\", \"host\": \"h\", \"port\": 1, \"layers\": [0, 1]}]}",
          f);
    fclose(f);
    CHECK(cluster_load(c, path, 1, err, sizeof err) == 0 && c->nnodes == 1 &&
              c->nodes[0].end == 1,
          "a valid cluster: %s", err);
    unlink(path);
    free(c);
}

int main(void)
{
    snprintf(root, sizeof root, "%s", __FILE__);
    char *cut = strstr(root, "/tests/unit/");
    if (!cut) {
        printf("cannot find the repository from %s\n", __FILE__);
        return 1;
    }
    *cut = 0;
    test_errors();
    test_cluster_files();
    test_profiles_and_order();
    test_examples();
    if (failures) printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
