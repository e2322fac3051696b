/* fuzz_job.c — libFuzzer target for jobs: the job file a user writes
 * (job_parse, node/runtime/job.c) and the job bundle another member gossips
 * (pool_bundle_valid, node/pool/pool_job.c).
 *
 * The first input byte picks the decoder: even, the rest is a job file's
 * text; odd, the rest is a bundle's JSON text. A refusal must be one line;
 * an accepted job must compare equal to itself and to a second parse of the
 * same text, keep every size and rate inside the documented ranges, and
 * give a learning rate inside [0, lr] at every step. An accepted bundle
 * must hold a job that parses on its own. */
#include "fuzz_util.h"
#include "runtime.h"
#include "pool_job.h"

#include <math.h>

#define T "fuzz_job"

static void check_job(const job_spec *j, const char *text)
{
    char what[256], err[512];
    fuzz_require(j->seq_len >= 1 && j->batch >= 1 && j->micro_batch >= 1 &&
                     j->batch % j->micro_batch == 0 && j->steps >= 1 && j->ndata >= 1,
                 T, "accepted sizes out of range", text);
    fuzz_require((double)j->seq_len * j->batch <= 1073741824.0, T,
                 "accepted a step of more than 2^30 tokens", text);
    fuzz_require(j->config && j->tokenizer && j->out_dir, T, "a required path is missing", text);
    fuzz_require(job_compare(j, j, what, sizeof what) == 0, T, "a job differs from itself",
                 what);
    job_spec again;
    fuzz_require(job_parse(&again, j->path, text, err, sizeof err) == 0, T,
                 "a job parses once only", err);
    fuzz_require(job_compare(j, &again, what, sizeof what) == 0, T,
                 "two parses of one text differ", what);
    job_free(&again);
    long steps[] = {0, j->warmup_steps, j->steps / 2, j->steps - 1, j->steps};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        double lr = job_lr(j, steps[i]);
        fuzz_require(lr >= 0 && lr <= j->lr * (1 + 1e-12) && !isnan(lr), T,
                     "learning rate outside [0, lr]", text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = fuzz_text(data + 1, size - 1);
    char err[512];
    memset(err, 'x', sizeof err);
    if ((data[0] & 1) == 0) {
        job_spec j;
        if (job_parse(&j, "/fuzz/jobs/job.json", text, err, sizeof err) == 0) {
            check_job(&j, text);
            job_free(&j);
        } else {
            fuzz_check_refusal(T, err, sizeof err);
        }
        free(text);
        return 0;
    }
    json_error_t je;
    json_t *bundle = json_loads(text, 0, &je);
    if (bundle) {
        if (pool_bundle_valid(bundle, err, sizeof err) == 0) {
            json_t *job = json_object_get(bundle, "job");
            char *jt = json_dumps(job, JSON_COMPACT);
            fuzz_require(jt != NULL, T, "an accepted bundle has no job", NULL);
            job_spec j;
            fuzz_require(job_parse(&j, "/fuzz/bundle/job.json", jt, err, sizeof err) == 0, T,
                         "an accepted bundle's job does not parse", err);
            job_free(&j);
            free(jt);
        } else {
            fuzz_check_refusal(T, err, sizeof err);
        }
        json_decref(bundle);
    }
    free(text);
    return 0;
}
