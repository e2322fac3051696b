/* test_pool_job.c — a job as the mesh carries it: the bundle made from real
 * files (stable id, absolute paths, config inline), refused when altered or
 * too large, and each member's comparison of the bundle's files with its own
 * (same files, a missing one, a changed byte, a file found through node.json
 * "paths"), with the job written under DIR/jobs/ID loading with job_load; a
 * job on a relative base model, its files in the bundle and on a member. */
#include "runtime.h"
#include "pool_job.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char root[512];

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) {
        printf("FAIL: cannot write %s\n", p);
        failures++;
        return;
    }
    fputs(text, f);
    fclose(f);
}

static void remove_tree(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
}

static const char *config_text =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, "
    "\"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"vocab_size\": 300, \"max_position_embeddings\": 64, "
    "\"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": false}\n";

/* A job in SUB/ of root with a tokenizer and two data files; the job uses
 * relative paths, the data a subfolder. */
static void make_job(const char *sub, const char *a_text)
{
    char dir[1024], data[1100];
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    snprintf(data, sizeof data, "%s/corpus", dir);
    mkdir(dir, 0755);
    mkdir(data, 0755);
    write_file(dir, "config.json", config_text);
    write_file(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n");
    write_file(data, "a.txt", a_text);
    write_file(data, "b.txt", "the second file of the corpus\n");
    write_file(dir, "job.json",
               "{\"config\": \"config.json\", \"tokenizer\": \"tokenizer.json\",\n"
               " \"data\": {\"files\": [\"corpus/a.txt\", \"corpus/b.txt\"]},\n"
               " \"seq_len\": 16, \"batch\": 4, \"micro_batch\": 2, \"steps\": 10,\n"
               " \"lr\": 0.0003, \"out_dir\": \"out\"}\n");
}

static json_t *bundle_of(const char *sub, char *err, size_t errlen)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/job.json", root, sub);
    return pool_bundle_make(p, "alpha", 1700000000, err, errlen);
}

static const char *id_of(json_t *b) { return json_string_value(json_object_get(b, "id")); }

static const pool_lack *lack_of(const pool_lacks *lacks, const char *path_end)
{
    for (int i = 0; i < lacks->n; i++) {
        const char *p = lacks->l[i].path;
        size_t n = strlen(p), m = strlen(path_end);
        if (n >= m && strcmp(p + n - m, path_end) == 0) return &lacks->l[i];
    }
    return NULL;
}

/* pool_bundle_check of a bundle as it arrives (JSON): read first, as the
 * node reads it; one that does not read is refused and nothing written. */
static int check_bundle(json_t *b, const char *state, json_t *paths, pool_lacks *lacks,
                        char *err, size_t errlen)
{
    pool_bundle t;
    memset(lacks, 0, sizeof *lacks);
    if (pool_bundle_from_json(b, &t, err, errlen) != 0) return -1;
    int rc = pool_bundle_check(&t, state, paths, lacks, err, errlen);
    pool_bundle_free(&t);
    return rc;
}

static void test_make(void)
{
    char err[512] = "";
    make_job("job1", "in the beginning\n");
    json_t *b = bundle_of("job1", err, sizeof err);
    CHECK(b != NULL, "bundle: %s", err);
    if (!b) return;
    CHECK(pool_bundle_valid(b, err, sizeof err) == 0, "own bundle invalid: %s", err);
    CHECK(strlen(id_of(b)) == POOL_JOB_ID_LEN, "id \"%s\"", id_of(b));
    json_t *job = json_object_get(b, "job");
    const char *tok = json_string_value(json_object_get(job, "tokenizer"));
    const char *a = json_string_value(json_array_get(
        json_object_get(json_object_get(job, "data"), "files"), 0));
    CHECK(tok && tok[0] == '/' && strstr(tok, "/job1/tokenizer.json"), "tokenizer path %s", tok);
    CHECK(a && a[0] == '/' && strstr(a, "/job1/corpus/a.txt"), "data path %s", a);
    CHECK(json_integer_value(json_object_get(json_object_get(b, "config"), "hidden_size")) == 32,
          "config inline");
    json_t *files = json_object_get(b, "files");
    CHECK(json_array_size(files) == 3, "files: %zu", json_array_size(files));
    json_t *f1 = json_array_get(files, 1);
    CHECK(strcmp(json_string_value(json_object_get(f1, "role")), "data") == 0 &&
              json_integer_value(json_object_get(f1, "bytes")) == 17 &&
              strlen(json_string_value(json_object_get(f1, "sha256"))) == 64,
          "data file entry");
    /* stable: another call at the same time; another time is another
     * submission, so another job (the id covers submitted_at) */
    char p[1024];
    snprintf(p, sizeof p, "%s/job1/job.json", root);
    json_t *b2 = pool_bundle_make(p, "alpha", 1700000000, err, sizeof err);
    CHECK(b2 && strcmp(id_of(b2), id_of(b)) == 0, "id changes between calls: %s %s",
          b2 ? id_of(b2) : "-", id_of(b));
    json_decref(b2);
    b2 = pool_bundle_make(p, "alpha", 1800000000, err, sizeof err);
    CHECK(b2 && strcmp(id_of(b2), id_of(b)) != 0, "another submission time, the same id");
    json_decref(b2);
    /* a relative job path gives the same bundle */
    char cwd[1024];
    if (getcwd(cwd, sizeof cwd) && chdir(root) == 0) {
        b2 = pool_bundle_make("job1/job.json", "alpha", 1700000000, err, sizeof err);
        CHECK(b2 && strcmp(id_of(b2), id_of(b)) == 0, "relative job path: %s", err);
        json_decref(b2);
        CHECK(chdir(cwd) == 0, "chdir back");
    }
    /* one data byte changed: another id */
    make_job("job1", "in the beginninG\n");
    b2 = bundle_of("job1", err, sizeof err);
    CHECK(b2 && strcmp(id_of(b2), id_of(b)) != 0, "a changed data byte keeps the id");
    json_decref(b2);
    make_job("job1", "in the beginning\n");
    json_decref(b);
}

static void test_check(void)
{
    char err[512] = "", state[1024], p[1200];
    make_job("job2", "in the beginning\n");
    json_t *b = bundle_of("job2", err, sizeof err);
    CHECK(b != NULL, "bundle: %s", err);
    if (!b) return;
    snprintf(state, sizeof state, "%s/state-b", root);
    mkdir(state, 0700);
    /* the same files: no lacks; job.json loads and points at them */
    pool_lacks lacks;
    CHECK(check_bundle(b, state, NULL, &lacks, err, sizeof err) == 0 && lacks.n == 0,
          "same files: %s (%d lacks)", err, lacks.n);
    bool first, any;
    pool_lacks_roles(&lacks, &first, &any);
    CHECK(first && any, "same files: roles %d %d", first, any);
    pool_lacks_free(&lacks);
    snprintf(p, sizeof p, "%s/jobs/%s/job.json", state, id_of(b));
    job_spec js;
    CHECK(job_load(&js, p, err, sizeof err) == 0, "written job: %s", err);
    if (!err[0] || js.path) {
        char want[1200];
        snprintf(want, sizeof want, "%s/job2/corpus/b.txt", root);
        CHECK(js.ndata == 2 && strcmp(js.data_files[1], want) == 0, "data file %s",
              js.ndata == 2 ? js.data_files[1] : "-");
        snprintf(want, sizeof want, "%s/jobs/%s/config.json", state, id_of(b));
        CHECK(js.config && strcmp(js.config, want) == 0, "config %s", js.config);
        snprintf(want, sizeof want, "%s/jobs/%s/out", state, id_of(b));
        struct stat st;
        CHECK(js.out_dir && strcmp(js.out_dir, want) == 0 && stat(want, &st) == 0 &&
                  S_ISDIR(st.st_mode), "out_dir %s", js.out_dir);
        llama_config cfg;
        CHECK(js.config && llama_config_load(&cfg, js.config, err, sizeof err) == 0 &&
                  cfg.hidden_size == 32, "written config: %s", err);
        CHECK(js.seq_len == 16 && js.micro_batch == 2 && js.steps == 10, "settings");
        job_free(&js);
    }
    /* a data file deleted: "missing", naming it; not the first stage */
    snprintf(p, sizeof p, "%s/job2/corpus/b.txt", root);
    unlink(p);
    CHECK(check_bundle(b, state, NULL, &lacks, err, sizeof err) == 0 && lacks.n == 1,
          "deleted: %s", err);
    const pool_lack *l = lack_of(&lacks, "/job2/corpus/b.txt");
    CHECK(l && strcmp(l->why, "missing") == 0 && strcmp(l->role, "data") == 0, "deleted: lack");
    pool_lacks_roles(&lacks, &first, &any);
    CHECK(!first && any, "deleted: can_first %d can_any %d", first, any);
    pool_lacks_free(&lacks);
    snprintf(p, sizeof p, "%s/jobs/%s/job.json", state, id_of(b));
    CHECK(job_load(&js, p, err, sizeof err) == 0, "job with a lack: %s", err);
    if (js.path) {
        CHECK(js.ndata == 2 && strstr(js.data_files[1], "/job2/corpus/b.txt"),
              "a lacking file keeps the bundle's path");
        job_free(&js);
    }
    /* a byte changed (same size): "sha256 differs" */
    write_file(root, "job2/corpus/b.txt", "the second file of the corpuS\n");
    CHECK(check_bundle(b, state, NULL, &lacks, err, sizeof err) == 0, "%s", err);
    l = lack_of(&lacks, "/job2/corpus/b.txt");
    CHECK(lacks.n == 1 && l && strncmp(l->why, "sha256 differs (have ", 21) == 0,
          "changed byte: why \"%s\"", l ? l->why : "-");
    pool_lacks_free(&lacks);
    /* another size */
    write_file(root, "job2/corpus/b.txt", "short\n");
    CHECK(check_bundle(b, state, NULL, &lacks, err, sizeof err) == 0, "%s", err);
    l = lack_of(&lacks, "/job2/corpus/b.txt");
    CHECK(l && strstr(l->why, "sha256 differs") && strstr(l->why, "bytes"),
          "other size: why \"%s\"", l ? l->why : "-");
    pool_lacks_free(&lacks);
    /* the right file elsewhere, found through node.json "paths" */
    char copy[1200];
    snprintf(copy, sizeof copy, "%s/elsewhere", root);
    mkdir(copy, 0755);
    write_file(copy, "b.txt", "the second file of the corpus\n");
    snprintf(copy, sizeof copy, "%s/elsewhere/b.txt", root);
    json_t *paths = json_pack("{s:s}", "b.txt", copy);
    CHECK(check_bundle(b, state, paths, &lacks, err, sizeof err) == 0 && lacks.n == 0,
          "mapped: %s (%d lacks)", err, lacks.n);
    pool_lacks_free(&lacks);
    snprintf(p, sizeof p, "%s/jobs/%s/job.json", state, id_of(b));
    CHECK(job_load(&js, p, err, sizeof err) == 0, "mapped job: %s", err);
    if (js.path) {
        CHECK(js.ndata == 2 && strcmp(js.data_files[1], copy) == 0, "mapped path %s",
              js.ndata == 2 ? js.data_files[1] : "-");
        job_free(&js);
    }
    /* a mapping that is not a path is an error naming node.json's key */
    json_object_set_new(paths, "b.txt", json_integer(3));
    CHECK(check_bundle(b, state, paths, &lacks, err, sizeof err) != 0 && !lacks.n &&
              strstr(err, "node.json") && strstr(err, "\"b.txt\""),
          "bad mapping: \"%s\"", err);
    json_decref(paths);
    /* missing tokenizer: neither first; missing weights: no stage at all */
    pool_lacks fake = {0, NULL};
    pool_lacks_add(&fake, "tokenizer", "", "", "");
    pool_lacks_roles(&fake, &first, &any);
    CHECK(!first && any, "tokenizer lack");
    pool_lacks_add(&fake, "weights", "", "", "");
    pool_lacks_roles(&fake, &first, &any);
    CHECK(!first && !any, "weights lack");
    pool_lacks_free(&fake);
    /* the state folder cannot be written: an error naming it */
    snprintf(p, sizeof p, "%s/not-a-dir", root);
    write_file(root, "not-a-dir", "x");
    CHECK(check_bundle(b, p, NULL, &lacks, err, sizeof err) != 0 && !lacks.n &&
              strstr(err, "not-a-dir"),
          "unwritable state: \"%s\"", err);
    json_decref(b);
}

static void test_refusals(void)
{
    char err[512] = "";
    make_job("job3", "in the beginning\n");
    json_t *b = bundle_of("job3", err, sizeof err);
    CHECK(b != NULL, "bundle: %s", err);
    if (!b) return;
    /* a job value changed, the old id kept */
    json_t *t = json_deep_copy(b);
    json_object_set_new(json_object_get(t, "job"), "steps", json_integer(11));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "id does not match") &&
              strstr(err, id_of(b)),
          "tampered job: \"%s\"", err);
    json_decref(t);
    /* a file's hash changed */
    t = json_deep_copy(b);
    json_object_set_new(json_array_get(json_object_get(t, "files"), 1), "sha256",
                        json_string("0000000000000000000000000000000000000000000000000000000000000000"));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "id does not match"),
          "tampered hash: \"%s\"", err);
    /* pool_bundle_check refuses it too and writes nothing */
    pool_lacks lacks;
    char state[1024];
    snprintf(state, sizeof state, "%s/state-c", root);
    CHECK(check_bundle(t, state, NULL, &lacks, err, sizeof err) != 0 && !lacks.n,
          "check of a tampered bundle");
    json_decref(t);
    /* a file the job does not read slipped into the list */
    t = json_deep_copy(b);
    json_object_set_new(json_array_get(json_object_get(t, "files"), 2), "path",
                        json_string("/etc/passwd"));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "\"files\" entry 2"),
          "foreign file: \"%s\"", err);
    json_decref(t);
    /* a relative path in the job */
    t = json_deep_copy(b);
    json_object_set_new(json_object_get(t, "job"), "tokenizer", json_string("tok.json"));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "\"tokenizer\""),
          "relative path: \"%s\"", err);
    json_decref(t);
    /* an id that is no id, an unknown key, another version */
    t = json_deep_copy(b);
    json_object_set_new(t, "id", json_string("../../etc"));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "\"id\""), "bad id: \"%s\"", err);
    json_object_set_new(t, "id", json_string(id_of(b)));
    json_object_set_new(t, "extra", json_true());
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "\"extra\""),
          "unknown key: \"%s\"", err);
    json_object_del(t, "extra");
    json_object_set_new(t, "v", json_integer(2));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "\"v\""), "v 2: \"%s\"", err);
    json_decref(t);
    /* too large for a gossip record */
    t = json_deep_copy(b);
    char big[7000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    json_object_set_new(json_object_get(t, "config"), "padding", json_string(big));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "6000") &&
              strstr(err, "gossip record"),
          "large: \"%s\"", err);
    json_decref(t);
    /* the id covers the submitter and the submission time (the order of
     * jobs): neither changes without changing the job (issue 12, finding 8) */
    t = json_deep_copy(b);
    json_object_set_new(t, "submitted_at", json_integer(4102444800));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && strstr(err, "does not match"),
          "submitted_at changed: \"%s\"", err);
    json_decref(t);
    t = json_deep_copy(b);
    json_object_set_new(t, "submitted_by", json_string("mallory"));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0, "submitted_by changed");
    json_decref(t);
    /* a refusal is one line, whatever the bundle quotes */
    t = json_deep_copy(b);
    json_object_set_new(t, "submitted_by", json_string("a\nshardnode: forged log line"));
    json_object_set_new(t, "id", json_string("0123\n\r\x1b[2J"));
    CHECK(pool_bundle_valid(t, err, sizeof err) != 0 && !strpbrk(err, "\n\r\x1b"),
          "a refusal with control bytes: \"%s\"", err);
    json_decref(t);
    json_decref(b);
}

/* Issue 12, finding 8: a job from the far future does not override every
 * job after it; any two jobs are ordered the same way by every member. */
static pool_bundle order_bundle(const char *id, int64_t at)
{
    pool_bundle b;
    memset(&b, 0, sizeof b);
    snprintf(b.id, sizeof b.id, "%s", id);
    b.submitted_at = at;
    return b;
}

static void test_order(void)
{
    pool_bundle now = order_bundle("5555555555555555", 1700000000);
    pool_bundle later = order_bundle("1111111111111111", 1700000060);
    pool_bundle tie = order_bundle("9999999999999999", 1700000000);
    pool_bundle future = order_bundle("ffffffffffffffff", 4102444800);
    int64_t clock = 1700000100;
    CHECK(pool_bundle_later(&now, NULL, clock), "a first job is taken up");
    CHECK(pool_bundle_later(&later, &now, clock) && !pool_bundle_later(&now, &later, clock),
          "the later job wins");
    CHECK(pool_bundle_later(&tie, &now, clock) && !pool_bundle_later(&now, &tie, clock),
          "a tie goes to the larger id, the same on every member");
    CHECK(!pool_bundle_later(&future, &now, clock) && !pool_bundle_later(&future, NULL, clock),
          "a job from 2100 was taken up");
    CHECK(pool_bundle_later(&future, &now, 4102444800 - POOL_JOB_SKEW_S),
          "a job within the skew of the clock was refused");
    CHECK(pool_bundle_later(&later, &now, 1700000060 - POOL_JOB_SKEW_S) &&
              !pool_bundle_later(&later, &now, 1700000059 - POOL_JOB_SKEW_S),
          "the skew bound");
}

static void test_bad_input(void)
{
    char err[512] = "", p[1024];
    snprintf(p, sizeof p, "%s/nowhere/job.json", root);
    CHECK(pool_bundle_make(p, "alpha", 0, err, sizeof err) == NULL && strstr(err, p),
          "missing job: \"%s\"", err);
    make_job("job4", "in the beginning\n");
    snprintf(p, sizeof p, "%s/job4/corpus/a.txt", root);
    unlink(p);
    CHECK(bundle_of("job4", err, sizeof err) == NULL && strstr(err, p),
          "missing data file: \"%s\"", err);
    /* a data path that is a folder: unreadable as a file */
    mkdir(p, 0755);
    CHECK(bundle_of("job4", err, sizeof err) == NULL && strstr(err, p) &&
              strstr(err, "not a regular file"),
          "data folder: \"%s\"", err);
    rmdir(p);
    write_file(root, "job4/corpus/a.txt", "x");
    if (geteuid() != 0) {   /* root reads anything */
        chmod(p, 0);
        CHECK(bundle_of("job4", err, sizeof err) == NULL && strstr(err, p),
              "unreadable data file: \"%s\"", err);
        chmod(p, 0644);
    }
    /* a broken config names the config */
    write_file(root, "job4/config.json", "{\"hidden_size\": 32");
    snprintf(p, sizeof p, "%s/job4/config.json", root);
    CHECK(bundle_of("job4", err, sizeof err) == NULL && strstr(err, p), "bad config: \"%s\"", err);
    write_file(root, "job4/config.json", config_text);
    /* a bad submitter name */
    snprintf(p, sizeof p, "%s/job4/job.json", root);
    CHECK(pool_bundle_make(p, "no/slash", 0, err, sizeof err) == NULL && strstr(err, "submitter"),
          "bad submitter: \"%s\"", err);
    /* too many data files for a gossip record */
    char text[20000];
    size_t n = (size_t)snprintf(text, sizeof text,
                                "{\"config\": \"config.json\", \"tokenizer\": \"tokenizer.json\", "
                                "\"seq_len\": 16, \"batch\": 4, \"steps\": 10, \"out_dir\": \"out\", "
                                "\"data\": {\"files\": [");
    for (int i = 0; i < 80; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s\"corpus/b.txt\"", i ? ", " : "");
    snprintf(text + n, sizeof text - n, "]}}\n");
    write_file(root, "job4/big.json", text);
    snprintf(p, sizeof p, "%s/job4/big.json", root);
    CHECK(pool_bundle_make(p, "alpha", 0, err, sizeof err) == NULL && strstr(err, p) &&
              strstr(err, "gossip record"),
          "large job: \"%s\"", err);
}

/* A job whose "base": {"model"} is relative: the bundle names it absolute
 * (a member would otherwise resolve it against its own copy of the job,
 * DIR/jobs/ID/), lists the base model's config and weights with their
 * SHA-256, and a member finds them there or in the directory node.json
 * "paths" maps the base's name to. */
static void make_base_job(const char *sub, bool sharded)
{
    char dir[1024], base[1100], p[1200];
    make_job(sub, "in the beginning\n");
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    snprintf(base, sizeof base, "%s/models", dir);
    mkdir(base, 0755);
    snprintf(base, sizeof base, "%s/models/tiny", dir);
    mkdir(base, 0755);
    write_file(base, "config.json", config_text);
    if (sharded) {
        write_file(base, "model.safetensors.index.json",
                   "{\"metadata\": {}, \"weight_map\": {\"a\": \"s1.safetensors\", "
                   "\"b\": \"s2.safetensors\", \"c\": \"s1.safetensors\"}}\n");
        write_file(base, "s1.safetensors", "shard one\n");
        write_file(base, "s2.safetensors", "shard two, longer\n");
    } else {
        write_file(base, "model.safetensors", "not really weights\n");
    }
    snprintf(p, sizeof p, "%s/job.json", dir);
    write_file(dir, "job.json",
               "{\"base\": {\"model\": \"models/tiny/\"}, \"tokenizer\": \"tokenizer.json\",\n"
               " \"data\": {\"files\": [\"corpus/a.txt\", \"corpus/b.txt\"]},\n"
               " \"lora\": {\"r\": 4, \"alpha\": 8},\n"
               " \"seq_len\": 16, \"batch\": 4, \"micro_batch\": 2, \"steps\": 10,\n"
               " \"out_dir\": \"out\"}\n");
}

static const char *file_path(json_t *b, size_t i)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(b, "files"), i),
                                             "path"));
}

static void test_base_model(void)
{
    char err[512] = "", state[1024], p[1200], want[1200];
    make_base_job("job5", false);
    json_t *b = bundle_of("job5", err, sizeof err);
    CHECK(b != NULL, "base bundle: %s", err);
    if (!b) return;
    const char *base = json_string_value(
        json_object_get(json_object_get(json_object_get(b, "job"), "base"), "model"));
    struct stat st;
    snprintf(want, sizeof want, "%s/job5/models/tiny", root);   /* the job's "/" dropped */
    CHECK(base && base[0] == '/' && strcmp(base, want) == 0 && stat(base, &st) == 0 &&
              S_ISDIR(st.st_mode), "base.model \"%s\", want the existing %s", base, want);
    json_t *files = json_object_get(b, "files");
    CHECK(json_array_size(files) == 5, "files: %zu", json_array_size(files));
    const char *roles[] = {"tokenizer", "data", "data", "base", "base"};
    const char *ends[] = {"/tokenizer.json", "/a.txt", "/b.txt", "/models/tiny/config.json",
                          "/models/tiny/model.safetensors"};
    for (size_t i = 0; i < 5 && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        const char *path = file_path(b, i);
        CHECK(strcmp(json_string_value(json_object_get(f, "role")), roles[i]) == 0 && path &&
                  strlen(path) > strlen(ends[i]) &&
                  strcmp(path + strlen(path) - strlen(ends[i]), ends[i]) == 0,
              "file %zu: %s %s", i, json_string_value(json_object_get(f, "role")), path);
    }
    CHECK(json_integer_value(json_object_get(json_array_get(files, 4), "bytes")) == 19,
          "weights' bytes");
    /* a member with the same directory: no lacks, job.json names it */
    snprintf(state, sizeof state, "%s/state-base", root);
    mkdir(state, 0700);
    pool_lacks lacks;
    bool first, any;
    CHECK(check_bundle(b, state, NULL, &lacks, err, sizeof err) == 0 && lacks.n == 0,
          "same base: %s (%d lacks)", err, lacks.n);
    pool_lacks_free(&lacks);
    snprintf(p, sizeof p, "%s/jobs/%s/job.json", state, id_of(b));
    job_spec js;
    memset(&js, 0, sizeof js);
    CHECK(job_load(&js, p, err, sizeof err) == 0 && js.base_model &&
              strcmp(js.base_model, want) == 0, "member's base %s: %s", js.base_model, err);
    job_free(&js);
    /* the base elsewhere on this member: "paths" maps the directory's name */
    char mirror[1200];
    snprintf(mirror, sizeof mirror, "%s/mirror", root);
    mkdir(mirror, 0755);
    write_file(mirror, "config.json", config_text);
    write_file(mirror, "model.safetensors", "not really weights\n");
    json_t *paths = json_pack("{s:s}", "tiny", mirror);
    CHECK(check_bundle(b, state, paths, &lacks, err, sizeof err) == 0 && lacks.n == 0,
          "mapped base: %s (%d lacks)", err, lacks.n);
    pool_lacks_free(&lacks);
    memset(&js, 0, sizeof js);
    CHECK(job_load(&js, p, err, sizeof err) == 0 && js.base_model &&
              strcmp(js.base_model, mirror) == 0, "mapped base %s: %s", js.base_model, err);
    job_free(&js);
    /* other weights there: a lack of role "base", and no stage at all */
    write_file(mirror, "model.safetensors", "other weights, other size\n");
    CHECK(check_bundle(b, state, paths, &lacks, err, sizeof err) == 0 && lacks.n == 1 &&
              strcmp(lacks.l[0].role, "base") == 0 && strstr(lacks.l[0].why, "sha256 differs"),
          "changed base: %s (%d lacks)", err, lacks.n);
    pool_lacks_roles(&lacks, &first, &any);
    CHECK(!any, "a member lacking the base model's weights can hold no stage");
    pool_lacks_free(&lacks);
    json_decref(paths);
    /* refused on arrival: a base file outside the directory, none at all */
    json_t *bad = json_deep_copy(b);
    snprintf(p, sizeof p, "%s/job5/models/tiny/../../tokenizer.json", root);
    json_object_set_new(json_array_get(json_object_get(bad, "files"), 4), "path", json_string(p));
    pool_bundle t;
    CHECK(pool_bundle_from_json(bad, &t, err, sizeof err) != 0 &&
              strstr(err, "must be the base model's file"), "escaping base file: \"%s\"", err);
    json_array_remove(json_object_get(bad, "files"), 4);
    json_array_remove(json_object_get(bad, "files"), 3);
    CHECK(pool_bundle_from_json(bad, &t, err, sizeof err) != 0 &&
              strstr(err, "and its base model's config and weights"), "no base files: \"%s\"",
          err);
    json_object_set_new(json_object_get(json_object_get(bad, "job"), "base"), "model",
                        json_string("models/tiny"));
    CHECK(pool_bundle_from_json(bad, &t, err, sizeof err) != 0 &&
              strstr(err, "\"job\".\"base\".\"model\" must be an absolute path"),
          "relative base on arrival: \"%s\"", err);
    json_decref(bad);
    json_decref(b);

    /* sharded: the index and each shard once */
    make_base_job("job6", true);
    b = bundle_of("job6", err, sizeof err);
    CHECK(b && json_array_size(json_object_get(b, "files")) == 7, "sharded: %s", err);
    CHECK(b && strstr(file_path(b, 4), "/model.safetensors.index.json") &&
              strstr(file_path(b, 5), "/s1.safetensors") &&
              strstr(file_path(b, 6), "/s2.safetensors"), "sharded files");
    json_decref(b);
    /* a shard named outside the directory: refused when the bundle is made */
    snprintf(p, sizeof p, "%s/job6/models/tiny", root);
    write_file(p, "model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"../../tokenizer.json\"}}\n");
    b = bundle_of("job6", err, sizeof err);
    CHECK(!b && strstr(err, "weight_map.a must name a shard file"), "escaping shard: \"%s\"",
          err);
    json_decref(b);
}

int main(void)
{
    snprintf(root, sizeof root, "%s/test_pool_job_%d", SHARDNODE_TEST_TMP, (int)getpid());
    remove_tree(root);
    mkdir(root, 0755);
    test_make();
    test_check();
    test_refusals();
    test_order();
    test_bad_input();
    test_base_model();
    remove_tree(root);
    if (failures) printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
