/* fuzz_state.c — libFuzzer target for the files a node reads back from its
 * own state and output folders, which anyone who can write there (a local
 * user, a disk error, an older or newer shardnode) may have left in any
 * shape: checkpoints (checkpoint_load, node/runtime/checkpoint.c), and the state
 * directory's node.json, mesh.json (the saved view) and invites.json
 * (daemon_open_state and daemon_invites_refresh, node/daemon/daemon_state.c).
 *
 * The first input byte picks the file (mod 4):
 *  - 0: a checkpoint. A valid one is written once (checkpoint_save of a
 *    two-layer model with a tied head, at step 7); the rest of the input is
 *    a list of patches (offset: 2 bytes LE, byte) applied to a copy of it,
 *    offset 0xffff truncating it to byte/256 of its length. checkpoint_load
 *    must refuse a damaged one with one line, or load it at a step >= 0.
 *  - 1: mesh.json, 2: node.json: the rest is the file, beside the other
 *    files of a state directory made once by state_create (as `shardnode
 *    init` does); daemon_open_state must refuse with one line or open it.
 *  - 3: invites.json, read by a node opened from that state directory
 *    (daemon_invites_refresh): at most DAEMON_MAX_INVITES invites, none
 *    expired, each with its overlay address.
 *  - 4 (mod 5 for this one: modes 4, 9, ...): a job's jobs/ID/state.json
 *    (the committed plan, the run and the vote a node keeps across
 *    restarts, node/daemon/pool.c), read when the node takes the job up: a node is
 *    opened as the daemon opens it (gossip, pool; no network) and a job
 *    made once from small files (pool_bundle_make) is submitted to it. */
#include "fuzz_node.h"

#include <event2/event.h>
#include <time.h>
#include "pool_job.h"
#include "runtime.h"

#define T "fuzz_state"

static const char JOB[] =
    "{\"config\": \"config.json\", \"tokenizer\": \"tokenizer.json\", \"data\": "
    "{\"files\": [\"corpus.txt\"]}, \"seq_len\": 8, \"batch\": 2, \"steps\": 10, \"seed\": 3, "
    "\"out_dir\": \"out\"}";

static chain ch;
static job_spec job;
static uint8_t *ckpt;
static size_t ckpt_len;
static fuzz_state_dir state;
static daemon_t *opened;

static void init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    char err[512], path[700];
    llama_config cfg = {16, 32, 2, 2, 1, 300, 16, 0, 1e-5f, 10000.0f, true, {0}, LLAMA_ARCH_LLAMA};
    fuzz_require(llama_config_validate(&cfg, "fixed", err, sizeof err) == 0, T, "config", err);
    split_plan plan;
    fuzz_require(split_parse(&plan, "1", 2, "--split", err, sizeof err) == 0, T, "split", err);
    fuzz_require(chain_create(&ch, &cfg, &plan, 1, 8, err, sizeof err) == 0, T, "chain", err);
    for (int i = 0; i < plan.nstages; i++)
        stage_init_weights(ch.stages[i], 5);
    fuzz_require(job_parse(&job, "/fuzz/job.json", JOB, err, sizeof err) == 0, T, "job", err);
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", fuzz_dir());
    fuzz_require(checkpoint_save(path, &ch, 7, JOB, err, sizeof err) == 0, T, "save", err);
    ckpt = fuzz_read_file(T, path, &ckpt_len);

    fuzz_state_make(&state, T);
    fuzz_require(daemon_open_state(&opened, state.dir, err, sizeof err) == 0, T,
                 "the state made by state_create does not open", err);
}

static void checkpoint(const uint8_t *data, size_t size)
{
    size_t len;
    uint8_t *bytes = fuzz_patch(ckpt, ckpt_len, data, size, &len);
    char path[512], err[512];
    fuzz_write_file("damaged.safetensors", bytes, len, path, sizeof path);
    free(bytes);
    long step = -1;
    memset(err, 'x', sizeof err);
    if (checkpoint_load(path, &ch, &job, &step, err, sizeof err) != 0)
        fuzz_check_refusal(T, err, sizeof err);
    else
        fuzz_require(step >= 0, T, "loaded at a negative step", NULL);
}

static void state_file(const char *name, const uint8_t *data, size_t size)
{
    char path[700], err[512];
    fuzz_state_restore(&state);
    snprintf(path, sizeof path, "state/%s", name);
    fuzz_write_file(path, data, size, err, sizeof err);
    daemon_t *d = NULL;
    memset(err, 'x', sizeof err);
    if (daemon_open_state(&d, state.dir, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
    } else {
        fuzz_require(node_name_valid(d->name) && d->listen_port >= 1 &&
                         d->listen_port <= 65535 && strchr(d->prefix, '/') != NULL,
                     T, "opened a state with a bad name, port or prefix", NULL);
    }
    if (d)
        daemon_free(d);
}

static json_t *bundle;
static char job_state[800];

/* A job of small files, made once, and its state.json path in the state. */
static void make_job(void)
{
    char err[512], path[700];
    static const char text[] = "In the beginning God created the heaven and the earth.\n\n"
                               "And the earth was without form, and void.\n";
    const char *texts[] = {text};
    size_t lens[] = {sizeof text - 1};
    const char *specials[] = {"<|endoftext|>"};
    tokenizer *tok;
    fuzz_require(tokenizer_train(&tok, texts, lens, 1, 270, specials, 1, err, sizeof err) == 0,
                 T, "tokenizer", err);
    fuzz_write_file("job/tokenizer.json", "", 0, path, sizeof path);
    fuzz_require(tokenizer_save(tok, path, err, sizeof err) == 0, T, "tokenizer", err);
    tokenizer_free(tok);
    llama_config cfg = {16, 32, 2, 2, 1, 300, 16, 0, 1e-5f, 10000.0f, true, {0}, LLAMA_ARCH_LLAMA};
    fuzz_write_file("job/config.json", "", 0, path, sizeof path);
    fuzz_require(llama_config_save(&cfg, path, err, sizeof err) == 0, T, "config", err);
    fuzz_write_file("job/corpus.txt", text, sizeof text - 1, path, sizeof path);
    fuzz_write_file("job/job.json", JOB, sizeof JOB - 1, path, sizeof path);
    bundle = pool_bundle_make(path, "fuzz", (int64_t)time(NULL) - 60, err, sizeof err);
    fuzz_require(bundle != NULL, T, "pool_bundle_make", err);
    const char *id = json_string_value(json_object_get(bundle, "id"));
    snprintf(path, sizeof path, "%s/jobs", state.dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/jobs/%s", state.dir, id);
    mkdir(path, 0755);
    snprintf(job_state, sizeof job_state, "state/jobs/%s/state.json", id);
}

static void pool_state(const uint8_t *data, size_t size)
{
    char path[900];
    if (!bundle) {
        snprintf(path, sizeof path, "%s/job", fuzz_dir());
        mkdir(path, 0700);
        make_job();
    }
    fuzz_state_restore(&state);
    fuzz_write_file(job_state, data, size, path, sizeof path);
    daemon_t *d = fuzz_state_open_node(&state, T);
    json_t *reply = pool_submit(d, bundle, NULL);
    fuzz_require(reply != NULL, T, "no answer to a submit", NULL);
    json_decref(reply);
    daemon_free(d);
}

static void invites(const uint8_t *data, size_t size)
{
    char path[700];
    fuzz_write_file("state/invites.json", data, size, path, sizeof path);
    daemon_invites_refresh(opened, true);
    fuzz_require(opened->ninvites <= DAEMON_MAX_INVITES, T, "too many invites", NULL);
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; i < opened->ninvites; i++)
        fuzz_require(opened->invites[i].expires > now - 5 && opened->invites[i].address[0], T,
                     "an expired invite, or one without an address", NULL);
    opened->npeers = 0;   /* each input starts from no invite peers */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    init();
    if (data[0] % 5 == 4) {
        pool_state(data + 1, size - 1);
        return 0;
    }
    switch (data[0] % 4) {
    case 0: checkpoint(data + 1, size - 1); break;
    case 1: state_file("mesh.json", data + 1, size - 1); break;
    case 2: state_file("node.json", data + 1, size - 1); break;
    default: invites(data + 1, size - 1); break;
    }
    return 0;
}
