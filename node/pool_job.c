/* pool_job.c — a job as the mesh carries it: the bundle a member makes of
 * its job file (the job with absolute paths, the model config inline, the
 * SHA-256 of every file the job reads), its checks on arrival, and each
 * member's comparison of the bundle's files with its own. See pool_job.h. */
#include "pool_job.h"

#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HASH_CHUNK (1 << 20)

/* ---- hashing ---------------------------------------------------------------- */

static void hex_of(const unsigned char *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int sha256_buf(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32) return -1;
    hex_of(md, 32, hex);
    return 0;
}

typedef enum { HASH_OK = 0, HASH_MISSING, HASH_UNREADABLE, HASH_SIZE } hash_result;

/* Streams a regular file through SHA-256. With want_bytes >= 0 a file of
 * another size is answered HASH_SIZE without reading it. why: strerror or
 * what is wrong, for messages. Never blocks on a FIFO or a device. */
static hash_result sha256_file(const char *path, int64_t want_bytes, char hex[65], int64_t *bytes,
                               char *why, size_t whylen)
{
    *bytes = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return errno == ENOENT || errno == ENOTDIR ? HASH_MISSING : HASH_UNREADABLE;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "not a regular file");
        close(fd);
        return HASH_UNREADABLE;
    }
    *bytes = (int64_t)st.st_size;
    if (want_bytes >= 0 && *bytes != want_bytes) {
        close(fd);
        return HASH_SIZE;
    }
    unsigned char *buf = malloc(HASH_CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    hash_result rc = HASH_UNREADABLE;
    int64_t total = 0;
    if (!buf || !ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    for (;;) {
        ssize_t got = read(fd, buf, HASH_CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(why, whylen, "%s", strerror(errno));
            goto out;
        }
        if (got == 0) break;
        if (!EVP_DigestUpdate(ctx, buf, (size_t)got)) {
            snprintf(why, whylen, "SHA-256 failed");
            goto out;
        }
        total += got;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != 32) {
        snprintf(why, whylen, "SHA-256 failed");
        goto out;
    }
    hex_of(md, 32, hex);
    *bytes = total;
    rc = HASH_OK;
out:
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    return rc;
}

/* ---- the id and the size ------------------------------------------------------- */

/* The first POOL_JOB_ID_LEN hex digits of the SHA-256 of the compact,
 * key-sorted JSON of the bundle without "id". */
static int bundle_id(json_t *bundle, char id[POOL_JOB_ID_LEN + 1])
{
    json_t *c = json_copy(bundle);
    if (!c) return -1;
    json_object_del(c, "id");
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(c);
    if (!text) return -1;
    char hex[65];
    int rc = sha256_buf(text, strlen(text), hex);
    free(text);
    if (rc) return -1;
    memcpy(id, hex, POOL_JOB_ID_LEN);
    id[POOL_JOB_ID_LEN] = '\0';
    return 0;
}

static int64_t compact_size(json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    if (!text) return -1;
    int64_t n = (int64_t)strlen(text);
    free(text);
    return n;
}

/* ---- making a bundle ------------------------------------------------------------ */

static char *absolute(const char *path, char *err, size_t errlen)
{
    if (path[0] == '/') {
        char *s = strdup(path);
        if (!s) node_errf(err, errlen, "%s: out of memory", path);
        return s;
    }
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) {
        node_errf(err, errlen, "%s: cannot make the path absolute: %s", path, strerror(errno));
        return NULL;
    }
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *s = malloc(n);
    if (!s) {
        node_errf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    snprintf(s, n, "%s/%s", cwd, path);
    return s;
}

static int add_file(json_t *files, const char *role, const char *path, char *err, size_t errlen)
{
    char hex[65], why[256];
    int64_t bytes;
    if (sha256_file(path, -1, hex, &bytes, why, sizeof why) != HASH_OK)
        return node_errf(err, errlen, "%s: cannot read the job's %s file: %s", path, role, why);
    json_t *f = json_pack("{s:s, s:s, s:s, s:I}", "role", role, "path", path, "sha256", hex,
                          "bytes", (json_int_t)bytes);
    if (!f || json_array_append_new(files, f))
        return node_errf(err, errlen, "%s: out of memory", path);
    return 0;
}

/* The job object with every path as job_load resolved it (absolute, since
 * the job file's path is). */
static int absolute_paths(json_t *job, const job_spec *js, char *err, size_t errlen)
{
    json_t *data = json_object_get(job, "data");
    json_t *files = json_object_get(data, "files");
    int bad = json_object_set_new(job, "config", json_string(js->config)) ||
              json_object_set_new(job, "tokenizer", json_string(js->tokenizer)) ||
              json_object_set_new(job, "out_dir", json_string(js->out_dir)) ||
              (js->init_weights &&
               json_object_set_new(job, "init_weights", json_string(js->init_weights)));
    for (int i = 0; i < js->ndata && !bad; i++)
        bad = json_array_set_new(files, (size_t)i, json_string(js->data_files[i]));
    return bad ? node_errf(err, errlen, "%s: out of memory (or a path that is not UTF-8)", js->path)
               : 0;
}

json_t *pool_bundle_make(const char *job_path, const char *submitter, int64_t now_s, char *err,
                         size_t errlen)
{
    if (!submitter || !node_name_valid(submitter)) {
        node_errf(err, errlen, "%s: submitter \"%s\" is not a node name", job_path,
                  submitter ? submitter : "");
        return NULL;
    }
    char *abs = absolute(job_path, err, errlen);
    if (!abs) return NULL;
    job_spec js;
    json_t *bundle = NULL, *job = NULL, *config = NULL, *files = NULL;
    if (job_load(&js, abs, err, errlen)) {
        free(abs);
        return NULL;
    }
    free(abs);
    json_error_t je;
    job = json_loads(js.text, JSON_REJECT_DUPLICATES, &je);
    if (!job) {
        node_errf(err, errlen, "%s:%d:%d: %s", js.path, je.line, je.column, je.text);
        goto fail;
    }
    if (absolute_paths(job, &js, err, errlen)) goto fail;
    llama_config cfg;
    if (llama_config_load(&cfg, js.config, err, errlen)) goto fail;
    if (!(config = node_load_json(js.config, err, errlen))) goto fail;
    if (!(files = json_array())) {
        node_errf(err, errlen, "%s: out of memory", js.path);
        goto fail;
    }
    if (add_file(files, "tokenizer", js.tokenizer, err, errlen)) goto fail;
    if (js.init_weights && add_file(files, "weights", js.init_weights, err, errlen)) goto fail;
    for (int i = 0; i < js.ndata; i++)
        if (add_file(files, "data", js.data_files[i], err, errlen)) goto fail;
    bundle = json_pack("{s:i, s:o, s:o, s:o, s:s, s:I}", "v", 1, "job", job, "config", config,
                       "files", files, "submitted_by", submitter, "submitted_at",
                       (json_int_t)now_s);
    job = config = files = NULL;   /* json_pack's "o" took them, even on failure */
    char id[POOL_JOB_ID_LEN + 1];
    if (!bundle || bundle_id(bundle, id) || json_object_set_new(bundle, "id", json_string(id))) {
        node_errf(err, errlen, "%s: out of memory", js.path);
        goto fail;
    }
    int64_t size = compact_size(bundle);
    if (size > POOL_BUNDLE_MAX_BYTES) {
        node_errf(err, errlen, "%s: the job's bundle is %lld bytes as compact JSON, more than the "
                  "%d a gossip record carries (fewer or shorter data file paths, or a smaller "
                  "config, would fit)", js.path, (long long)size, POOL_BUNDLE_MAX_BYTES);
        goto fail;
    }
    job_free(&js);
    return bundle;
fail:
    json_decref(bundle);
    json_decref(job);
    json_decref(config);
    json_decref(files);
    job_free(&js);
    return NULL;
}

/* ---- checking a bundle from a peer ----------------------------------------------- */

static bool is_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

static bool only_keys(json_t *obj, const char *const *known, const char **bad)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const char *const *k = known;
        while (*k && strcmp(*k, key) != 0) k++;
        if (!*k) {
            *bad = key;
            return false;
        }
    }
    return true;
}

/* The job's path at key, which must be an absolute path (NULL: absent). */
static int job_path_at(json_t *obj, const char *key, bool required, const char **out,
                       const char *who, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return required ? node_errf(err, errlen, "%s: \"job\".\"%s\" is missing", who, key) : 0;
    if (!json_is_string(v) || json_string_value(v)[0] != '/')
        return node_errf(err, errlen, "%s: \"job\".\"%s\" must be an absolute path", who, key);
    *out = json_string_value(v);
    return 0;
}

static int bundle_valid(json_t *bundle, char *err, size_t errlen);

int pool_bundle_valid(json_t *bundle, char *err, size_t errlen)
{
    int rc = bundle_valid(bundle, err, errlen);
    /* A refusal is one line of a log: whatever of the bundle it quotes (the
     * id, the submitter, a path), no control byte of a peer's making. */
    for (size_t i = 0; rc && err && i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
    return rc;
}

static int bundle_valid(json_t *bundle, char *err, size_t errlen)
{
    static const char *const known[] = {"v", "id", "job", "config", "files", "submitted_by",
                                        "submitted_at", NULL};
    static const char *const file_keys[] = {"role", "path", "sha256", "bytes", NULL};
    if (!json_is_object(bundle)) return node_errf(err, errlen, "job bundle: not a JSON object");
    const char *idv = json_string_value(json_object_get(bundle, "id"));
    const char *by = json_string_value(json_object_get(bundle, "submitted_by"));
    char who[160];
    snprintf(who, sizeof who, "job bundle %.*s from %.*s", POOL_JOB_ID_LEN + 4,
             idv ? idv : "(no id)", MESH_NAME_MAX, by ? by : "(unknown)");
    int64_t size = compact_size(bundle);
    if (size < 0) return node_errf(err, errlen, "%s: out of memory", who);
    if (size > POOL_BUNDLE_MAX_BYTES)
        return node_errf(err, errlen, "%s: %lld bytes as compact JSON, more than the %d a gossip "
                         "record carries: refused", who, (long long)size, POOL_BUNDLE_MAX_BYTES);
    const char *bad;
    if (!only_keys(bundle, known, &bad))
        return node_errf(err, errlen, "%s: \"%s\" is not a known key", who, bad);
    json_t *v = json_object_get(bundle, "v");
    if (!json_is_integer(v) || json_integer_value(v) != 1)
        return node_errf(err, errlen, "%s: \"v\" must be 1 (a bundle of another version)", who);
    if (!idv || !is_hex(idv, POOL_JOB_ID_LEN))
        return node_errf(err, errlen, "%s: \"id\" must be %d lowercase hex digits", who,
                         POOL_JOB_ID_LEN);
    if (!by || !node_name_valid(by))
        return node_errf(err, errlen, "%s: \"submitted_by\" must be a node name", who);
    json_t *at = json_object_get(bundle, "submitted_at");
    if (!json_is_integer(at) || json_integer_value(at) < 0)
        return node_errf(err, errlen, "%s: \"submitted_at\" must be unix seconds", who);
    json_t *job = json_object_get(bundle, "job"), *config = json_object_get(bundle, "config");
    json_t *files = json_object_get(bundle, "files");
    if (!json_is_object(job)) return node_errf(err, errlen, "%s: \"job\" must be an object", who);
    if (!json_is_object(config))
        return node_errf(err, errlen, "%s: \"config\" must be an object", who);
    if (!json_is_array(files)) return node_errf(err, errlen, "%s: \"files\" must be a list", who);
    /* the job itself: valid, every path absolute */
    char *text = json_dumps(job, JSON_COMPACT);
    if (!text) return node_errf(err, errlen, "%s: out of memory", who);
    job_spec js;
    char jerr[512];
    int rc = job_parse(&js, who, text, jerr, sizeof jerr);
    free(text);
    if (rc) return node_errf(err, errlen, "%s: its job is not valid: %s", who, jerr);
    const char *p, *tok = NULL, *weights = NULL;
    json_t *data_files = json_object_get(json_object_get(job, "data"), "files");
    rc = job_path_at(job, "config", true, &p, who, err, errlen) ||
         job_path_at(job, "out_dir", true, &p, who, err, errlen) ||
         job_path_at(job, "tokenizer", true, &tok, who, err, errlen) ||
         job_path_at(job, "init_weights", false, &weights, who, err, errlen) ? -1 : 0;
    for (size_t i = 0; !rc && i < json_array_size(data_files); i++) {
        const char *f = json_string_value(json_array_get(data_files, i));
        if (!f || f[0] != '/')
            rc = node_errf(err, errlen, "%s: \"job\".\"data\".\"files\" entry %zu must be an "
                           "absolute path", who, i);
    }
    job_free(&js);
    if (rc) return -1;
    /* the files: the job's, role by role, in order */
    size_t nfiles = 1 + (weights ? 1 : 0) + json_array_size(data_files);
    if (json_array_size(files) != nfiles)
        return node_errf(err, errlen, "%s: \"files\" lists %zu files, the job reads %zu", who,
                         json_array_size(files), nfiles);
    for (size_t i = 0; i < nfiles; i++) {
        json_t *f = json_array_get(files, i);
        const char *want_role = i == 0 ? "tokenizer" : (weights && i == 1) ? "weights" : "data";
        const char *want_path = i == 0 ? tok : (weights && i == 1) ? weights
                                : json_string_value(json_array_get(data_files,
                                                                   i - 1 - (weights ? 1 : 0)));
        if (!json_is_object(f) || !only_keys(f, file_keys, &bad))
            return node_errf(err, errlen, "%s: \"files\" entry %zu must be an object of role, "
                             "path, sha256 and bytes", who, i);
        const char *role = json_string_value(json_object_get(f, "role"));
        const char *path = json_string_value(json_object_get(f, "path"));
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        json_t *bytes = json_object_get(f, "bytes");
        if (!role || !path || strcmp(role, want_role) != 0 || strcmp(path, want_path) != 0)
            return node_errf(err, errlen, "%s: \"files\" entry %zu must be the job's %s file %s",
                             who, i, want_role, want_path);
        if (!sha || !is_hex(sha, 64))
            return node_errf(err, errlen, "%s: \"files\" entry %zu (%s): \"sha256\" must be 64 "
                             "lowercase hex digits", who, i, path);
        if (!json_is_integer(bytes) || json_integer_value(bytes) < 0)
            return node_errf(err, errlen, "%s: \"files\" entry %zu (%s): \"bytes\" must be a "
                             "size", who, i, path);
    }
    char id[POOL_JOB_ID_LEN + 1];
    if (bundle_id(bundle, id)) return node_errf(err, errlen, "%s: out of memory", who);
    if (strcmp(id, idv) != 0)
        return node_errf(err, errlen, "%s: the id does not match the content (which hashes to %s): "
                         "altered after it was made", who, id);
    return 0;
}

bool pool_job_later(json_t *a, json_t *b, int64_t now_s)
{
    int64_t at = json_integer_value(json_object_get(a, "submitted_at"));
    const char *ida = json_string_value(json_object_get(a, "id"));
    if (!ida || at > now_s + POOL_JOB_SKEW_S) return false;
    if (!b) return true;
    int64_t bt = json_integer_value(json_object_get(b, "submitted_at"));
    const char *idb = json_string_value(json_object_get(b, "id"));
    if (at != bt) return at > bt;
    return !idb || strcmp(ida, idb) > 0;
}

/* ---- on this node ------------------------------------------------------------------- */

static int make_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0700) == 0) return 0;
    struct stat st;
    if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
    return node_errf(err, errlen, "%s: cannot create the folder: %s", path,
                     errno == EEXIST ? "a file of that name is in the way" : strerror(errno));
}

static int lack(json_t *lacks, const char *role, const char *path, const char *local,
                const char *why)
{
    json_t *l = json_pack("{s:s, s:s, s:s, s:s}", "role", role, "path", path, "why", why, "local",
                          local);
    return !l || json_array_append_new(lacks, l) ? -1 : 0;
}

/* Where this node keeps the file the bundle names `path`: node.json's
 * "paths" entry for its base name, else the same path. */
static int local_path(json_t *node_paths, const char *state_dir, const char *path, char *out,
                      size_t len, char *err, size_t errlen)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    json_t *m = node_paths ? json_object_get(node_paths, base) : NULL;
    const char *use = path;
    int n;
    if (m) {
        if (!json_is_string(m) || !json_string_value(m)[0])
            return node_errf(err, errlen, "%s/node.json: \"paths\".\"%s\" must be a path",
                             state_dir, base);
        use = json_string_value(m);
    }
    if (use[0] == '/')
        n = snprintf(out, len, "%s", use);
    else
        n = snprintf(out, len, "%s/%s", state_dir, use);
    if (n < 0 || (size_t)n >= len)
        return node_errf(err, errlen, "%s/node.json: \"paths\".\"%s\": path too long", state_dir,
                         base);
    return 0;
}

int pool_bundle_check(json_t *bundle, const char *state_dir, json_t *node_paths, json_t **lacks,
                      char *err, size_t errlen)
{
    *lacks = NULL;
    if (pool_bundle_valid(bundle, err, errlen)) return -1;
    if (node_paths && !json_is_object(node_paths))
        return node_errf(err, errlen, "%s/node.json: \"paths\" must be an object mapping file "
                         "names to local paths", state_dir);
    const char *id = json_string_value(json_object_get(bundle, "id"));
    json_t *job = json_deep_copy(json_object_get(bundle, "job"));
    json_t *out = json_array();
    char dir[4096], cfg_path[4096], job_path[4096], out_dir[4096];
    int rc = -1;
    if (!job || !out) {
        node_errf(err, errlen, "job %s: out of memory", id);
        goto done;
    }
    int n1 = snprintf(dir, sizeof dir, "%s/jobs/%s", state_dir, id);
    int n2 = snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    int n3 = snprintf(job_path, sizeof job_path, "%s/job.json", dir);
    int n4 = snprintf(out_dir, sizeof out_dir, "%s/out", dir);
    if (n1 < 0 || n2 < 0 || n3 < 0 || n4 < 0 || (size_t)n2 >= sizeof cfg_path ||
        (size_t)n3 >= sizeof job_path || (size_t)n4 >= sizeof out_dir) {
        node_errf(err, errlen, "%s: state folder path too long", state_dir);
        goto done;
    }
    json_t *files = json_object_get(bundle, "files");
    json_t *data_files = json_object_get(json_object_get(job, "data"), "files");
    size_t ndata = 0;
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        const char *role = json_string_value(json_object_get(f, "role"));
        const char *path = json_string_value(json_object_get(f, "path"));
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        int64_t want = (int64_t)json_integer_value(json_object_get(f, "bytes"));
        char local[4096], hex[65], why[256], text[400];
        int64_t bytes;
        if (local_path(node_paths, state_dir, path, local, sizeof local, err, errlen)) goto done;
        hash_result h = sha256_file(local, want, hex, &bytes, why, sizeof why);
        const char *lacking = NULL;
        if (h == HASH_MISSING) {
            lacking = "missing";
        } else if (h == HASH_UNREADABLE) {
            snprintf(text, sizeof text, "unreadable (%s)", why);
            lacking = text;
        } else if (h == HASH_SIZE) {
            snprintf(text, sizeof text, "sha256 differs (have %lld bytes, job has %lld bytes)",
                     (long long)bytes, (long long)want);
            lacking = text;
        } else if (strcmp(hex, sha) != 0) {
            snprintf(text, sizeof text, "sha256 differs (have %.12s..., job has %.12s...)", hex, sha);
            lacking = text;
        }
        if (lacking) {
            if (lack(out, role, path, local, lacking)) {
                node_errf(err, errlen, "job %s: out of memory", id);
                goto done;
            }
        } else {
            json_t *s = json_string(local);
            int bad = strcmp(role, "tokenizer") == 0 ? json_object_set_new(job, "tokenizer", s)
                      : strcmp(role, "weights") == 0 ? json_object_set_new(job, "init_weights", s)
                                                     : json_array_set_new(data_files, ndata, s);
            if (bad) {
                node_errf(err, errlen, "%s: a local path that is not UTF-8", local);
                goto done;
            }
        }
        if (strcmp(role, "data") == 0) ndata++;
    }
    if (json_object_set_new(job, "config", json_string(cfg_path)) ||
        json_object_set_new(job, "out_dir", json_string(out_dir))) {
        node_errf(err, errlen, "%s: a path that is not UTF-8", dir);
        goto done;
    }
    char jobs[4096];
    snprintf(jobs, sizeof jobs, "%s/jobs", state_dir);
    if (make_dir(jobs, err, errlen) || make_dir(dir, err, errlen) ||
        make_dir(out_dir, err, errlen) ||
        node_write_json(cfg_path, json_object_get(bundle, "config"), 0644, err, errlen) ||
        node_write_json(job_path, job, 0644, err, errlen))
        goto done;
    job_spec js;   /* what train will read must load */
    if (job_load(&js, job_path, err, errlen)) goto done;
    job_free(&js);
    *lacks = out;
    out = NULL;
    rc = 0;
done:
    json_decref(job);
    json_decref(out);
    return rc;
}

void pool_lacks_roles(json_t *lacks, bool *can_first, bool *can_any)
{
    bool first = true, any = true;
    size_t i;
    json_t *l;
    json_array_foreach(lacks, i, l) {
        const char *role = json_string_value(json_object_get(l, "role"));
        if (!role) continue;
        if (strcmp(role, "weights") == 0) any = false;
        else first = false;   /* tokenizer, data */
    }
    *can_first = first && any;
    *can_any = any;
}
