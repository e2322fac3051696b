/* job.c — the job spec: what to train, on what, how long, where to write.
 * Strict: unknown keys and wrong types are refused with line and column, so
 * a typo never trains the wrong thing silently. Relative paths are resolved
 * against the job file's folder, so a job works from any working directory. */
#include "node_base.h"
#include "runtime.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens of one optimizer step (batch x seq_len): 2^30 keeps every count the
 * trainer makes of them inside an int. */
#define JOB_MAX_STEP_TOKENS (1L << 30)

/* Line and column of the first `"key"` followed by ':' in the text: jansson
 * keeps no positions for parsed keys. */
static void key_position(const char *text, const char *key, int *line, int *col)
{
    size_t klen = strlen(key);
    *line = 1;
    *col = 1;
    const char *line_start = text;
    for (const char *p = text; *p; p++) {
        if (*p == '\n') {
            (*line)++;
            line_start = p + 1;
            continue;
        }
        if (*p == '"' && strncmp(p + 1, key, klen) == 0 && p[klen + 1] == '"') {
            const char *q = p + klen + 2;
            while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n') q++;
            if (*q == ':') {
                *col = (int)(p - line_start) + 1;
                return;
            }
        }
    }
    *line = *col = 0;
}

typedef struct {
    const job_spec *job;
    char *err;
    size_t errlen;
} ctx;

static int key_error(ctx *c, const char *key, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line, col;
    key_position(c->job->text, key, &line, &col);
    if (line)
        return node_errf(c->err, c->errlen, "%s:%d:%d: \"%s\" %s", c->job->path, line, col, key, what);
    return node_errf(c->err, c->errlen, "%s: \"%s\" %s", c->job->path, key, what);
}

static int check_keys(ctx *c, json_t *obj, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const char *const *k = known;
        while (*k && strcmp(*k, key) != 0) k++;
        if (!*k) return key_error(c, key, "is not a known key");
    }
    return 0;
}

/* Resolves path against the job file's folder unless it is absolute. */
static char *resolve(const job_spec *j, const char *path)
{
    const char *slash = strrchr(j->path, '/');
    if (path[0] == '/' || !slash) return strdup(path);
    size_t dlen = (size_t)(slash - j->path) + 1, plen = strlen(path);
    char *out = malloc(dlen + plen + 1);
    if (!out) return NULL;
    memcpy(out, j->path, dlen);
    memcpy(out + dlen, path, plen + 1);
    return out;
}

static int get_string(ctx *c, json_t *obj, const char *key, bool required, bool is_path,
                      char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) return required ? node_errf(c->err, c->errlen, "%s: \"%s\" is required",
                                                      c->job->path, key)
                                               : 0;
    if (!json_is_string(v)) return key_error(c, key, "must be a string");
    const char *s = json_string_value(v);
    if (is_path && !*s) return key_error(c, key, "must not be empty");
    *out = is_path ? resolve(c->job, s) : strdup(s);
    return *out ? 0 : node_errf(c->err, c->errlen, "out of memory");
}

static int get_int(ctx *c, json_t *obj, const char *key, bool required, long min, long max,
                   long *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return required ? node_errf(c->err, c->errlen, "%s: \"%s\" is required", c->job->path, key)
                        : 0;
    if (!json_is_integer(v)) return key_error(c, key, "must be an integer");
    json_int_t x = json_integer_value(v);
    if (x < min || x > max) return key_error(c, key, "is %lld, must be in [%ld, %ld]",
                                             (long long)x, min, max);
    *out = (long)x;
    return 0;
}

static int get_number(ctx *c, json_t *obj, const char *key, double min, double max,
                      double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return key_error(c, key, "must be a number");
    double x = json_number_value(v);
    if (!(x >= min && x <= max)) return key_error(c, key, "is %g, must be in [%g, %g]", x, min, max);
    *out = x;
    return 0;
}

static int parse_data(ctx *c, job_spec *j, json_t *data)
{
    static const char *const known[] = {"files", "format", "separator", "prompt_template",
                                        "val_fraction", NULL};
    if (!data) return node_errf(c->err, c->errlen, "%s: \"data\" is required", j->path);
    if (!json_is_object(data)) return key_error(c, "data", "must be an object");
    if (check_keys(c, data, known)) return -1;
    json_t *files = json_object_get(data, "files");
    if (!files) return key_error(c, "data", "needs \"files\", a list of corpus files");
    if (!json_is_array(files) || json_array_size(files) == 0)
        return key_error(c, "files", "must be a non-empty list of file names");
    j->ndata = (int)json_array_size(files);
    j->data_files = calloc((size_t)j->ndata, sizeof *j->data_files);
    if (!j->data_files) return node_errf(c->err, c->errlen, "out of memory");
    for (int i = 0; i < j->ndata; i++) {
        json_t *f = json_array_get(files, (size_t)i);
        if (!json_is_string(f) || !*json_string_value(f))
            return key_error(c, "files", "entry %d must be a file name", i);
        if (!(j->data_files[i] = resolve(j, json_string_value(f))))
            return node_errf(c->err, c->errlen, "out of memory");
    }
    char *format = NULL;
    if (get_string(c, data, "format", false, false, &format)) return -1;
    j->format = DATA_TEXT;
    if (format && strcmp(format, "jsonl") == 0) j->format = DATA_JSONL;
    else if (format && strcmp(format, "text") != 0) {
        free(format);
        return key_error(c, "format", "must be \"text\" or \"jsonl\"");
    }
    free(format);
    if (get_string(c, data, "separator", false, false, &j->separator) ||
        get_string(c, data, "prompt_template", false, false, &j->prompt_template))
        return -1;
    j->val_fraction = 0.01;
    return get_number(c, data, "val_fraction", 0.0, 0.5, &j->val_fraction);
}

/* "base": {"model": DIR, "quant": "nf4" | "none"} */
static int parse_base(ctx *c, job_spec *j, json_t *base)
{
    static const char *const known[] = {"model", "quant", NULL};
    if (!base || json_is_null(base)) return 0;
    if (!json_is_object(base)) return key_error(c, "base", "must be an object");
    if (check_keys(c, base, known) || get_string(c, base, "model", false, true, &j->base_model))
        return -1;
    char *quant = NULL;
    if (get_string(c, base, "quant", false, false, &quant)) return -1;
    if (quant && strcmp(quant, "nf4") == 0) {
        j->base_nf4 = true;
    } else if (quant && strcmp(quant, "none") != 0) {
        free(quant);
        return key_error(c, "quant", "must be \"nf4\" or \"none\"");
    }
    free(quant);
    return 0;
}

/* "lora": PEFT's LoraConfig keys, strictly. */
static int parse_lora(ctx *c, job_spec *j, json_t *lora)
{
    static const char *const known[] = {"r", "alpha", "dropout", "target_modules", "use_rslora",
                                        NULL};
    if (!lora || json_is_null(lora)) return 0;
    if (!json_is_object(lora)) return key_error(c, "lora", "must be an object");
    if (check_keys(c, lora, known)) return -1;
    long r = 8;
    j->lora.alpha = 8;   /* PEFT's LoraConfig defaults: r 8, lora_alpha 8 */
    if (get_int(c, lora, "r", false, 1, 65536, &r) ||
        get_number(c, lora, "alpha", 0.0, 1e9, &j->lora.alpha) ||
        get_number(c, lora, "dropout", 0.0, 1.0, &j->lora_dropout))
        return -1;
    if (!(j->lora.alpha > 0)) return key_error(c, "alpha", "must be > 0");
    if (j->lora_dropout != 0)
        return key_error(c, "dropout", "is %g: only 0 is supported (LoRA dropout is not "
                         "implemented yet)", j->lora_dropout);
    json_t *rs = json_object_get(lora, "use_rslora");
    if (rs && !json_is_boolean(rs)) return key_error(c, "use_rslora", "must be true or false");
    j->lora.use_rslora = rs && json_is_true(rs);
    j->lora.r = (int)r;
    json_t *tm = json_object_get(lora, "target_modules");
    if (!tm) { /* PEFT's default for LLaMA */
        j->lora.modules = 1u << STAGE_LORA_Q | 1u << STAGE_LORA_V;
    } else if (json_is_string(tm) && strcmp(json_string_value(tm), "all-linear") == 0) {
        j->lora.modules = (1u << STAGE_LORA_MODULES) - 1;
    } else {
        if (!json_is_array(tm) || json_array_size(tm) == 0)
            return key_error(c, "target_modules", "must be a non-empty list of q_proj, k_proj, "
                             "v_proj, o_proj, gate_proj, up_proj, down_proj (or \"all-linear\")");
        for (size_t i = 0; i < json_array_size(tm); i++) {
            json_t *e = json_array_get(tm, i);
            const char *name = json_is_string(e) ? json_string_value(e) : NULL;
            int m = 0;
            while (name && m < STAGE_LORA_MODULES && strcmp(stage_lora_module_name(m), name) != 0)
                m++;
            if (!name || m == STAGE_LORA_MODULES)
                return key_error(c, "target_modules", "entry %zu%s%.40s%s is not one of q_proj, "
                                 "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", i,
                                 name ? " \"" : "", name ? name : "", name ? "\"" : "");
            if (j->lora.modules & (1u << m))
                return key_error(c, "target_modules", "names %s twice", name);
            j->lora.modules |= 1u << m;
        }
    }
    j->has_lora = true;
    return 0;
}

static int parse_job(ctx *c, job_spec *j, json_t *root)
{
    static const char *const known[] = {
        "config", "init_weights", "tokenizer", "data", "seq_len", "batch", "micro_batch",
        "steps", "lr", "min_lr", "warmup_steps", "weight_decay", "beta1", "beta2", "eps",
        "grad_clip", "seed", "val_interval", "val_batches", "checkpoint_interval",
        "log_interval", "out_dir", "threads", "base", "lora", "snapshot_every", "checkpoint_every",
        "replan_gain", "replan_min_steps", "precision", NULL};
    if (check_keys(c, root, known)) return -1;
    char *precision = NULL;
    if (get_string(c, root, "precision", false, false, &precision)) return -1;
    bool bad_precision = precision && strcmp(precision, "fp32") != 0 &&
                         strcmp(precision, "bf16") != 0;
    j->bf16 = precision && strcmp(precision, "bf16") == 0;
    free(precision);
    if (bad_precision) return key_error(c, "precision", "must be \"fp32\" or \"bf16\"");
    long seq = 0, batch = 0, micro = 0, steps = 0, seed = 1, warmup = 0, val_interval = 0,
         val_batches = 8, ckpt = 0, log = 10, threads = 0, snap = 0, pool_ckpt = 0,
         replan_min = 20;
    if (parse_base(c, j, json_object_get(root, "base")) ||
        parse_lora(c, j, json_object_get(root, "lora")))
        return -1;
    if (j->base_nf4 && !j->has_lora)
        return key_error(c, "quant", "\"nf4\" needs \"lora\": a 4-bit base is frozen, so "
                         "only adapters can train");
    j->lora.nf4 = j->base_nf4;
    if (j->base_model && json_object_get(root, "init_weights"))
        return key_error(c, "init_weights", "and \"base\": {\"model\"} both name starting "
                         "weights; give one");
    if (get_string(c, root, "config", !j->base_model, true, &j->config) ||
        get_string(c, root, "init_weights", false, true, &j->init_weights) ||
        get_string(c, root, "tokenizer", true, true, &j->tokenizer) ||
        get_string(c, root, "out_dir", true, true, &j->out_dir) ||
        parse_data(c, j, json_object_get(root, "data")) ||
        get_int(c, root, "seq_len", true, 1, 1 << 20, &seq) ||
        get_int(c, root, "batch", true, 1, 1 << 20, &batch) ||
        get_int(c, root, "micro_batch", false, 1, 1 << 20, &micro) ||
        get_int(c, root, "steps", true, 1, 1L << 40, &steps) ||
        get_int(c, root, "seed", false, 0, 1L << 53, &seed) ||
        get_int(c, root, "warmup_steps", false, 0, 1L << 40, &warmup) ||
        get_int(c, root, "val_interval", false, 0, 1L << 40, &val_interval) ||
        get_int(c, root, "val_batches", false, 1, 1 << 20, &val_batches) ||
        get_int(c, root, "checkpoint_interval", false, 0, 1L << 40, &ckpt) ||
        get_int(c, root, "log_interval", false, 1, 1L << 40, &log) ||
        get_int(c, root, "threads", false, 0, 1024, &threads) ||
        get_int(c, root, "snapshot_every", false, 0, 1L << 40, &snap) ||
        get_int(c, root, "checkpoint_every", false, 0, 1L << 40, &pool_ckpt) ||
        get_int(c, root, "replan_min_steps", false, 0, 1L << 40, &replan_min))
        return -1;
    j->lr = 3e-4;
    j->weight_decay = 0.1;
    j->beta1 = 0.9;
    j->beta2 = 0.95;
    j->eps = 1e-8;
    j->grad_clip = 1.0;
    if (get_number(c, root, "lr", 0.0, 10.0, &j->lr)) return -1;
    j->min_lr = j->lr * 0.1;
    if (get_number(c, root, "min_lr", 0.0, j->lr, &j->min_lr) ||
        get_number(c, root, "weight_decay", 0.0, 10.0, &j->weight_decay) ||
        get_number(c, root, "beta1", 0.0, 0.999999, &j->beta1) ||
        get_number(c, root, "beta2", 0.0, 0.999999999, &j->beta2) ||
        get_number(c, root, "eps", 0.0, 1.0, &j->eps) ||
        get_number(c, root, "grad_clip", 0.0, 1e30, &j->grad_clip))
        return -1;
    j->replan_gain = 0.10;
    if (get_number(c, root, "replan_gain", 0.0, 0.99, &j->replan_gain)) return -1;
    if (!micro) micro = batch;
    if (batch % micro)
        return key_error(c, "batch", "(%ld) is not a multiple of \"micro_batch\" (%ld)", batch,
                         micro);
    /* Token counts per step are ints in the trainer; a model's memory is
     * checked against the machine when its stages are made. */
    if ((double)batch * seq > JOB_MAX_STEP_TOKENS)
        return key_error(c, "batch", "(%ld) x \"seq_len\" (%ld) is %.0f tokens per step, more "
                         "than the %ld a step may hold", batch, seq, (double)batch * seq,
                         (long)JOB_MAX_STEP_TOKENS);
    if (!j->config) {   /* the base model's own config */
        size_t n = strlen(j->base_model) + sizeof "/config.json";
        if (!(j->config = malloc(n))) return node_errf(c->err, c->errlen, "out of memory");
        snprintf(j->config, n, "%s/config.json", j->base_model);
    }
    j->seq_len = (int)seq;
    j->batch = (int)batch;
    j->micro_batch = (int)micro;
    j->steps = steps;
    j->seed = (uint64_t)seed;
    j->warmup_steps = warmup;
    j->val_interval = val_interval;
    j->val_batches = (int)val_batches;
    j->checkpoint_interval = ckpt;
    j->snapshot_every = snap;
    j->checkpoint_every = pool_ckpt;
    j->replan_min_steps = replan_min;
    j->log_interval = log;
    j->threads = (int)threads;
    return 0;
}

/* A message on one line: a control character the job's text put in it (a
 * newline inside a string jansson quotes, an unknown key) becomes '?', so a
 * file cannot forge lines in a log. */
static int one_line(char *err, size_t errlen)
{
    for (size_t i = 0; err && i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
    return -1;
}

int job_parse(job_spec *j, const char *path, const char *text, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    j->text = strdup(text);
    j->path = strdup(path);
    if (!j->text || !j->path) {
        job_free(j);
        return node_errf(err, errlen, "%s: out of memory", path);
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        node_errf(err, errlen, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        job_free(j);
        return one_line(err, errlen);
    }
    ctx c = {j, err, errlen};
    int rc = json_is_object(root) ? parse_job(&c, j, root)
                                  : node_errf(err, errlen, "%s: a job is a JSON object", path);
    json_decref(root);
    if (rc) {
        job_free(j);
        one_line(err, errlen);
    }
    return rc;
}

int job_load(job_spec *j, const char *path, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    FILE *f = fopen(path, "rb");
    if (!f) return node_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char buf[65536];
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = (len + got + 1) * 2;
            char *t = realloc(text, cap);
            if (!t) {   /* never parse a truncated job */
                free(text);
                fclose(f);
                return node_errf(err, errlen, "%s: out of memory reading it", path);
            }
            text = t;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    int bad = ferror(f) || !text;
    fclose(f);
    if (bad) {
        free(text);
        return node_errf(err, errlen, "%s: cannot read (empty or unreadable)", path);
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return node_errf(err, errlen, "%s: contains a NUL byte; a job is JSON text", path);
    }
    int rc = job_parse(j, path, text, err, errlen);
    free(text);
    return rc;
}

/* The settings that decide which numbers a step computes: a resumed run must
 * use the same ones or it silently becomes another run. Paths are not
 * compared (a job may move); the data's shape is. */
int job_compare(const job_spec *a, const job_spec *b, char *what, size_t len)
{
#define SAME_INT(k)                                                                \
    if (a->k != b->k) {                                                            \
        snprintf(what, len, "\"%s\" was %lld, now %lld", #k, (long long)a->k,        \
                 (long long)b->k);                                                 \
        return -1;                                                                 \
    }
#define SAME_NUM(k)                                                                \
    if (a->k != b->k) {                                                            \
        snprintf(what, len, "\"%s\" was %g, now %g", #k, a->k, b->k);               \
        return -1;                                                                 \
    }
    SAME_INT(seed) SAME_INT(seq_len) SAME_INT(batch) SAME_INT(steps) SAME_INT(warmup_steps)
    SAME_INT(ndata) SAME_INT(format) SAME_INT(bf16)
    SAME_NUM(lr) SAME_NUM(min_lr) SAME_NUM(weight_decay) SAME_NUM(beta1) SAME_NUM(beta2)
    SAME_NUM(eps) SAME_NUM(grad_clip) SAME_NUM(val_fraction)
    if (a->has_lora != b->has_lora || (a->base_model != NULL) != (b->base_model != NULL)) {
        snprintf(what, len, "%s", a->has_lora != b->has_lora ? "\"lora\" was added or removed"
                                                              : "\"base\": {\"model\"} was added "
                                                                "or removed");
        return -1;
    }
    SAME_INT(base_nf4) SAME_INT(lora.r) SAME_NUM(lora.alpha) SAME_INT(lora.use_rslora)
    SAME_INT(lora.modules) SAME_NUM(lora_dropout)
#undef SAME_INT
#undef SAME_NUM
    const char *sa = a->separator ? a->separator : "", *sb = b->separator ? b->separator : "";
    if (strcmp(sa, sb) != 0) {
        snprintf(what, len, "\"separator\" changed");
        return -1;
    }
    return 0;
}

void job_free(job_spec *j)
{
    free(j->path);
    free(j->text);
    free(j->config);
    free(j->init_weights);
    free(j->tokenizer);
    free(j->out_dir);
    for (int i = 0; i < j->ndata; i++) free(j->data_files[i]);
    free(j->data_files);
    free(j->separator);
    free(j->prompt_template);
    free(j->base_model);
    memset(j, 0, sizeof *j);
}

const stage_lora *job_lora(const job_spec *j)
{
    return j->has_lora ? &j->lora : NULL;
}

double job_lr(const job_spec *j, long step)
{
    if (step < j->warmup_steps) return j->lr * (double)(step + 1) / (double)j->warmup_steps;
    long span = j->steps - j->warmup_steps;
    double progress = span > 1 ? (double)(step - j->warmup_steps) / (double)(span - 1) : 1.0;
    if (progress > 1.0) progress = 1.0;
    return j->min_lr + 0.5 * (j->lr - j->min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}
