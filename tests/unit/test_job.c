/* test_job.c — the job spec: strict keys with positions, defaults, paths
 * relative to the job file, and the learning-rate schedule. */
#include "runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char path[512];

static int load(const char *text, job_spec *j, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return job_load(j, path, err, errlen);
}

#define VALID_HEAD                                                                    \
    "{\n  \"config\": \"cfg/config.json\",\n  \"tokenizer\": \"/abs/tok.json\",\n" \
    "  \"data\": {\"files\": [\"a.txt\", \"b.txt\"]},\n  \"seq_len\": 64,\n"        \
    "  \"batch\": 8,\n  \"steps\": 100,\n  \"out_dir\": \"out\""

static void expect_fail(int line, const char *text, const char *needle)
{
    job_spec j;
    char err[512] = "";
    if (load(text, &j, err, sizeof err) == 0 || !strstr(err, needle)) {
        printf("FAIL %s:%d: expected an error with \"%s\", got \"%s\"\n", __FILE__, line,
               needle, err);
        failures++;
    }
}

int main(void)
{
    snprintf(path, sizeof path, "%s/test_job_%d.json", SHARDNODE_TEST_TMP, (int)getpid());
    job_spec j;
    char err[512] = "";
    CHECK(load(VALID_HEAD "\n}\n", &j, err, sizeof err) == 0, "valid job: %s", err);
    /* relative to the job's folder, absolute kept */
    char want[1024];
    snprintf(want, sizeof want, "%s/cfg/config.json", SHARDNODE_TEST_TMP);
    CHECK(strcmp(j.config, want) == 0, "config resolved to %s, want %s", j.config, want);
    CHECK(strcmp(j.tokenizer, "/abs/tok.json") == 0, "absolute path changed: %s", j.tokenizer);
    CHECK(j.ndata == 2 && strstr(j.data_files[1], "/b.txt"), "data files");
    CHECK(j.micro_batch == 8 && j.seed == 1 && j.format == DATA_TEXT && j.grad_clip == 1.0 &&
              fabs(j.min_lr - j.lr * 0.1) < 1e-12 && j.replan_gain == 0.10 &&
              j.replan_min_steps == 20 && !j.bf16,
          "defaults");
    /* the schedule: warm-up, peak, cosine down to min_lr at the last step */
    j.lr = 1e-3;
    j.min_lr = 1e-4;
    j.warmup_steps = 10;
    j.steps = 110;
    CHECK(fabs(job_lr(&j, 0) - 1e-4) < 1e-12 && fabs(job_lr(&j, 9) - 1e-3) < 1e-12,
          "warm-up %g %g", job_lr(&j, 0), job_lr(&j, 9));
    CHECK(fabs(job_lr(&j, 10) - 1e-3) < 1e-12 && fabs(job_lr(&j, 109) - 1e-4) < 1e-12,
          "cosine ends %g %g", job_lr(&j, 10), job_lr(&j, 109));
    for (long s = 11; s < 110; s++)
        CHECK(job_lr(&j, s) <= job_lr(&j, s - 1), "lr rises at step %ld", s);
    job_free(&j);

    expect_fail(__LINE__, VALID_HEAD ",\n  \"lr_max\": 0.1\n}\n",
                ":9:3: \"lr_max\" is not a known key");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"steps_\": 1\n}\n", "\"steps_\" is not a known key");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"micro_batch\": \"4\"\n}\n",
                ":9:3: \"micro_batch\" must be an integer");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"micro_batch\": 3\n}\n",
                "\"batch\" (8) is not a multiple of \"micro_batch\" (3)");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"lr\": \"fast\"\n}\n", "\"lr\" must be a number");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"replan_gain\": 1.5\n}\n",
                "\"replan_gain\" is 1.5, must be in [0, 0.99]");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"precision\": \"fp16\"\n}\n",
                ":9:3: \"precision\" must be \"fp32\" or \"bf16\"");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"precision\": 16\n}\n",
                "\"precision\" must be a string");
    {
        job_spec b;
        CHECK(load(VALID_HEAD ",\n  \"precision\": \"bf16\"\n}\n", &b, err, sizeof err) == 0 &&
                  b.bf16,
              "precision bf16: %s", err);
        job_spec f;
        CHECK(load(VALID_HEAD ",\n  \"precision\": \"fp32\"\n}\n", &f, err, sizeof err) == 0 &&
                  !f.bf16,
              "precision fp32: %s", err);
        char what[128] = "";
        CHECK(job_compare(&b, &f, what, sizeof what) != 0 && strstr(what, "bf16"),
              "a resume across precisions is refused: '%s'", what);
        job_free(&b);
        job_free(&f);
    }
    expect_fail(__LINE__, VALID_HEAD ",\n  \"replan_min_steps\": -1\n}\n",
                "\"replan_min_steps\" is -1, must be in [0,");
    expect_fail(__LINE__, "{\"config\": \"c\"}", "is required");
    expect_fail(__LINE__,
                "{\"config\": \"c\", \"tokenizer\": \"t\", \"out_dir\": \"o\", \"seq_len\": 4, "
                "\"batch\": 1, \"steps\": 1, \"data\": {\"files\": [], \"x\": 1}}",
                "\"x\" is not a known key");
    expect_fail(__LINE__,
                "{\"config\": \"c\", \"tokenizer\": \"t\", \"out_dir\": \"o\", \"seq_len\": 4, "
                "\"batch\": 1, \"steps\": 1, \"data\": {\"files\": []}}",
                "\"files\" must be a non-empty list");
    expect_fail(__LINE__, VALID_HEAD ",\n  \"data\": 3\n}\n", "duplicate");
    expect_fail(__LINE__, "{\"config\": \"c\",\n \"batch\": }", ":2:");
    expect_fail(__LINE__,
                "{\"config\": \"c\", \"tokenizer\": \"t\", \"out_dir\": \"o\", \"seq_len\": -3, "
                "\"batch\": 1, \"steps\": 1, \"data\": {\"files\": [\"x\"]}}",
                "\"seq_len\" is -3, must be in [1,");
    /* a step of 2^20 x 2^20 tokens would overflow the trainer's counts */
    expect_fail(__LINE__,
                "{\"config\": \"c\", \"tokenizer\": \"t\", \"out_dir\": \"o\", "
                "\"seq_len\": 1048576, \"batch\": 1048576, \"steps\": 1, "
                "\"data\": {\"files\": [\"x\"]}}",
                "\"batch\" (1048576) x \"seq_len\" (1048576) is 1099511627776 tokens per step");
    /* a file's text never makes a message of several lines */
    {
        job_spec bad;
        char e[512] = "";
        CHECK(load("{\"config\": \"a\\\nb\"}", &bad, e, sizeof e) != 0 &&
                  strstr(e, "invalid escape") && strchr(e, '\n') == NULL && strstr(e, path),
              "a newline in the job's text reached the message: %s", e);
        CHECK(load("{\"con\tfig\n\": 1}", &bad, e, sizeof e) != 0 && strchr(e, '\n') == NULL &&
                  strchr(e, '\t') == NULL,
              "an unknown key's control characters reached the message: %s", e);
    }
    unlink(path);
    printf("%s\n", failures ? "FAILED" : "all job checks passed");
    return failures ? 1 : 0;
}
