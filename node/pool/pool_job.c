/* pool_job.c — a job as the mesh carries it: the bundle a member makes of
 * its job file (the job with absolute paths, the model config inline, the
 * SHA-256 of every file the job reads), its checks on arrival, and each
 * member's comparison of the bundle's files with its own. See pool_job.h. */
#include "pool_job.h"

#include "node_base.h"
#include "runtime.h"

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

/* The base model's files (role "base"), as hf_open finds them: DIR/config.json,
 * then DIR/model.safetensors.index.json and every shard its weight_map names
 * (each once, in the order first named), or DIR/model.safetensors. Shards are
 * plain names inside DIR (a member maps the directory, not each file). */
static int add_base_files(json_t *files, const char *dir, char *err, size_t errlen)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (add_file(files, "base", path, err, errlen)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return add_file(files, "base", path, err, errlen);
    }
    if (add_file(files, "base", path, err, errlen)) return -1;
    json_t *index = node_load_json(path, err, errlen), *seen = json_object(), *v;
    json_t *map = json_object_get(index, "weight_map");
    const char *key;
    int rc = index && seen ? 0 : -1;
    if (!rc && !json_is_object(map))
        rc = node_errf(err, errlen, "%s: \"weight_map\" must be an object", path);
    json_object_foreach(map, key, v) {
        const char *shard = json_string_value(v);
        if (rc || (shard && json_object_get(seen, shard))) continue;
        if (!shard || !shard[0] || strchr(shard, '/') || strcmp(shard, "..") == 0) {
            rc = node_errf(err, errlen, "%s: weight_map.%.80s must name a shard file in %s", path,
                           key, dir);
            continue;
        }
        char spath[4400];
        snprintf(spath, sizeof spath, "%s/%s", dir, shard);
        rc = json_object_set_new(seen, shard, json_true()) ||
             add_file(files, "base", spath, err, errlen) ? -1 : 0;
    }
    json_decref(index);
    json_decref(seen);
    return rc;
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
    if (js->base_model && !bad)   /* a member would resolve it against its copy of the job */
        bad = json_object_set_new(json_object_get(job, "base"), "model",
                                  json_string(js->base_model));
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
    /* "models/tiny/": the directory's name is "tiny" */
    size_t bn = js.base_model ? strlen(js.base_model) : 0;
    while (bn > 1 && js.base_model[bn - 1] == '/') js.base_model[--bn] = '\0';
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
    if (js.base_model && add_base_files(files, js.base_model, err, errlen)) goto fail;
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
                  "%d a gossip record carries (fewer or shorter data file paths, a base model "
                  "in fewer shards, or a smaller config, would fit)", js.path, (long long)size, POOL_BUNDLE_MAX_BYTES);
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

/* ---- reading a bundle from a peer ------------------------------------------------ */

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

/* Entries from `first` on: role "base", each a plain file name inside the
 * base model's directory, config.json first, sha256 and bytes as any file's. */
static int check_base_files(json_t *files, size_t first, const char *base, const char *who,
                            char *err, size_t errlen)
{
    static const char *const file_keys[] = {"role", "path", "sha256", "bytes", NULL};
    size_t blen = strlen(base);
    for (size_t i = first; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        const char *role = json_string_value(json_object_get(f, "role"));
        const char *path = json_string_value(json_object_get(f, "path"));
        const char *sha = json_string_value(json_object_get(f, "sha256"));
        json_t *bytes = json_object_get(f, "bytes");
        const char *bad, *name = path && strncmp(path, base, blen) == 0 && path[blen] == '/'
                                     ? path + blen + 1 : NULL;
        if (!json_is_object(f) || !only_keys(f, file_keys, &bad) || !role ||
            strcmp(role, "base") != 0 || !name || !name[0] || strchr(name, '/') ||
            strcmp(name, "..") == 0 || strcmp(name, ".") == 0 ||
            (i == first && strcmp(name, "config.json") != 0))
            return node_errf(err, errlen, "%s: \"files\" entry %zu must be the base model's "
                             "%s in %s", who, i, i == first ? "config.json" : "file", base);
        if (!sha || !is_hex(sha, 64) || !json_is_integer(bytes) || json_integer_value(bytes) < 0)
            return node_errf(err, errlen, "%s: \"files\" entry %zu (%s): \"sha256\" must be 64 "
                             "lowercase hex digits and \"bytes\" a size", who, i, path);
    }
    return 0;
}

void pool_bundle_free(pool_bundle *b)
{
    if (!b) return;
    for (int i = 0; i < b->nfiles; i++) free(b->files[i].path);
    free(b->files);
    free(b->data);
    free(b->out_dir);
    json_decref(b->job);
    json_decref(b->config);
    memset(b, 0, sizeof *b);
}

/* Fills the typed part of b from a bundle whose keys and types are checked. */
static int bundle_fill(pool_bundle *b, json_t *j, const char *out_dir, json_t *data_files)
{
    json_t *files = json_object_get(j, "files");
    snprintf(b->id, sizeof b->id, "%s", json_string_value(json_object_get(j, "id")));
    snprintf(b->submitted_by, sizeof b->submitted_by, "%s",
             json_string_value(json_object_get(j, "submitted_by")));
    b->submitted_at = (int64_t)json_integer_value(json_object_get(j, "submitted_at"));
    b->job = json_incref(json_object_get(j, "job"));
    b->config = json_incref(json_object_get(j, "config"));
    b->out_dir = strdup(out_dir);
    b->nfiles = (int)json_array_size(files);
    b->files = calloc((size_t)b->nfiles + 1, sizeof *b->files);
    b->data = calloc(json_array_size(data_files) + 1, sizeof *b->data);
    if (!b->out_dir || !b->files || !b->data) return -1;
    for (int i = 0; i < b->nfiles; i++) {
        json_t *f = json_array_get(files, (size_t)i);
        pool_file *pf = &b->files[i];
        snprintf(pf->role, sizeof pf->role, "%s", json_string_value(json_object_get(f, "role")));
        snprintf(pf->sha256, sizeof pf->sha256, "%s",
                 json_string_value(json_object_get(f, "sha256")));
        pf->bytes = (int64_t)json_integer_value(json_object_get(f, "bytes"));
        if (!(pf->path = strdup(json_string_value(json_object_get(f, "path"))))) return -1;
        if (strcmp(pf->role, "data") == 0) b->data[b->ndata++] = pf->path;
    }
    return 0;
}

static int bundle_read(json_t *bundle, pool_bundle *out, char *err, size_t errlen)
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
    const char *p, *out_dir = NULL, *tok = NULL, *weights = NULL, *base = NULL;
    json_t *data_files = json_object_get(json_object_get(job, "data"), "files");
    json_t *base_obj = json_object_get(job, "base");
    rc = job_path_at(job, "config", true, &p, who, err, errlen) ||
         job_path_at(job, "out_dir", true, &out_dir, who, err, errlen) ||
         job_path_at(job, "tokenizer", true, &tok, who, err, errlen) ||
         job_path_at(job, "init_weights", false, &weights, who, err, errlen) ? -1 : 0;
    if (!rc && json_is_object(base_obj) && json_object_get(base_obj, "model")) {
        base = json_string_value(json_object_get(base_obj, "model"));
        if (!base || base[0] != '/')
            rc = node_errf(err, errlen, "%s: \"job\".\"base\".\"model\" must be an absolute "
                           "path", who);
    }
    for (size_t i = 0; !rc && i < json_array_size(data_files); i++) {
        const char *f = json_string_value(json_array_get(data_files, i));
        if (!f || f[0] != '/')
            rc = node_errf(err, errlen, "%s: \"job\".\"data\".\"files\" entry %zu must be an "
                           "absolute path", who, i);
    }
    job_free(&js);
    if (rc) return -1;
    /* the files: the job's, role by role, in order; then a base model's */
    size_t nfiles = 1 + (weights ? 1 : 0) + json_array_size(data_files);
    if (base ? json_array_size(files) < nfiles + 2 : json_array_size(files) != nfiles)
        return node_errf(err, errlen, "%s: \"files\" lists %zu files, the job reads %zu%s", who,
                         json_array_size(files), nfiles,
                         base ? " and its base model's config and weights" : "");
    if (base && check_base_files(files, nfiles, base, who, err, errlen)) return -1;
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
    if (bundle_fill(out, bundle, out_dir, data_files) != 0) {
        pool_bundle_free(out);
        return node_errf(err, errlen, "%s: out of memory", who);
    }
    return 0;
}

int pool_bundle_from_json(json_t *j, pool_bundle *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int rc = bundle_read(j, out, err, errlen);
    /* A refusal is one line of a log: whatever of the bundle it quotes (the
     * id, the submitter, a path), no control byte of a peer's making. */
    for (size_t i = 0; rc && err && i < errlen && err[i]; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) err[i] = '?';
    return rc;
}

json_t *pool_bundle_to_json(const pool_bundle *b)
{
    json_t *files = json_array();
    for (int i = 0; files && i < b->nfiles; i++)
        json_array_append_new(files, json_pack("{s:s,s:s,s:s,s:I}", "role", b->files[i].role,
                                               "path", b->files[i].path, "sha256",
                                               b->files[i].sha256, "bytes",
                                               (json_int_t)b->files[i].bytes));
    return json_pack("{s:i,s:s,s:O,s:O,s:o,s:s,s:I}", "v", 1, "id", b->id, "job", b->job,
                     "config", b->config, "files", files, "submitted_by", b->submitted_by,
                     "submitted_at", (json_int_t)b->submitted_at);
}

int pool_bundle_copy(pool_bundle *dst, const pool_bundle *src)
{
    memset(dst, 0, sizeof *dst);
    memcpy(dst->id, src->id, sizeof dst->id);
    memcpy(dst->submitted_by, src->submitted_by, sizeof dst->submitted_by);
    dst->submitted_at = src->submitted_at;
    dst->job = json_incref(src->job);        /* never changed once read: shared */
    dst->config = json_incref(src->config);
    dst->out_dir = src->out_dir ? strdup(src->out_dir) : NULL;
    dst->files = calloc((size_t)src->nfiles + 1, sizeof *dst->files);
    dst->data = calloc((size_t)src->ndata + 1, sizeof *dst->data);
    if ((src->out_dir && !dst->out_dir) || !dst->files || !dst->data) goto fail;
    for (int i = 0; i < src->nfiles; i++) {
        dst->files[i] = src->files[i];
        if (!(dst->files[i].path = strdup(src->files[i].path))) goto fail;
        dst->nfiles++;
        if (strcmp(dst->files[i].role, "data") == 0) dst->data[dst->ndata++] = dst->files[i].path;
    }
    return 0;
fail:
    pool_bundle_free(dst);
    return -1;
}

int pool_bundle_valid(json_t *bundle, char *err, size_t errlen)
{
    pool_bundle b;
    int rc = pool_bundle_from_json(bundle, &b, err, errlen);
    pool_bundle_free(&b);
    return rc;
}

bool pool_bundle_later(const pool_bundle *a, const pool_bundle *b, int64_t now_s)
{
    if (!a || !a->id[0] || a->submitted_at > now_s + POOL_JOB_SKEW_S) return false;
    if (!b) return true;
    if (a->submitted_at != b->submitted_at) return a->submitted_at > b->submitted_at;
    return !b->id[0] || strcmp(a->id, b->id) > 0;
}

bool pool_job_later(json_t *a, json_t *b, int64_t now_s)
{
    pool_bundle ta, tb;
    char err[256];
    bool later = false;
    if (pool_bundle_from_json(a, &ta, err, sizeof err) != 0) return false;
    if (!b) {
        later = pool_bundle_later(&ta, NULL, now_s);
    } else if (pool_bundle_from_json(b, &tb, err, sizeof err) == 0) {
        later = pool_bundle_later(&ta, &tb, now_s);
        pool_bundle_free(&tb);
    } else {
        later = pool_bundle_later(&ta, NULL, now_s);   /* an invalid b: none */
    }
    pool_bundle_free(&ta);
    return later;
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

/* Where this node keeps a base model file the bundle names base/NAME: in
 * the directory node.json's "paths" maps base's last component to, else in
 * base itself (the directory is mapped, not each file: its files keep their
 * names). `dir` gets that directory. */
static int local_base_path(json_t *node_paths, const char *state_dir, const char *base,
                           const char *path, char *dir, size_t dlen, char *out, size_t len,
                           char *err, size_t errlen)
{
    char trimmed[4096];
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/') n--;
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)n, base);
    if (local_path(node_paths, state_dir, trimmed, dir, dlen, err, errlen)) return -1;
    int m = snprintf(out, len, "%s/%s", dir, path + strlen(base) + 1);
    if (m < 0 || (size_t)m >= len)
        return node_errf(err, errlen, "%s: path too long", dir);
    return 0;
}

/* The job with this node's paths: tokenizer, init_weights, data files and
 * the base model's directory where they are found here (tok, weights,
 * data[i], base: NULL keeps the bundle's), config and out_dir under
 * DIR/jobs/ID. */
static json_t *local_job(const pool_bundle *b, const char *tok, const char *weights,
                         char *const *data, const char *base, const char *cfg_path,
                         const char *out_dir)
{
    json_t *job = json_deep_copy(b->job), *files = json_array(), *dobj = NULL;
    const char *key;
    json_t *v;
    /* the "data" object with its files replaced (the job is a valid one:
     * pool_bundle_from_json checked it) */
    json_object_foreach(job, key, v) if (strcmp(key, "data") == 0) dobj = v;
    int bad = !job || !files || !dobj;
    for (int i = 0; !bad && i < b->ndata; i++)
        bad = json_array_append_new(files, json_string(data[i] ? data[i] : b->data[i]));
    if (!bad)
        bad = json_object_set_new(dobj, "files", files) ||
              (tok && json_object_set_new(job, "tokenizer", json_string(tok))) ||
              (weights && json_object_set_new(job, "init_weights", json_string(weights))) ||
              (base && json_object_set_new(json_object_get(job, "base"), "model",
                                           json_string(base))) ||
              json_object_set_new(job, "config", json_string(cfg_path)) ||
              json_object_set_new(job, "out_dir", json_string(out_dir));
    else
        json_decref(files);
    if (bad) {
        json_decref(job);
        return NULL;
    }
    return job;
}

json_t *pool_node_paths(json_t *node)
{
    return json_object_get(node, "paths");
}

int pool_bundle_check(const pool_bundle *b, const char *state_dir, json_t *node_paths,
                      pool_lacks *lacks, char *err, size_t errlen)
{
    memset(lacks, 0, sizeof *lacks);
    if (node_paths && !json_is_object(node_paths))
        return node_errf(err, errlen, "%s/node.json: \"paths\" must be an object mapping file "
                         "names to local paths", state_dir);
    const char *id = b->id;
    pool_lacks out = {0, NULL};
    char dir[4096], cfg_path[4096], job_path[4096], out_dir[4096], base_dir[4096] = "";
    const char *base = json_string_value(json_object_get(json_object_get(b->job, "base"),
                                                         "model"));
    char **found = calloc((size_t)b->nfiles + 1, sizeof *found);
    char **data = calloc((size_t)b->ndata + 1, sizeof *data);
    const char *tok = NULL, *weights = NULL;
    json_t *job = NULL;
    int rc = -1;
    if (!found || !data) {
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
    int ndata = 0;
    for (int i = 0; i < b->nfiles; i++) {
        const pool_file *f = &b->files[i];
        char local[4096], hex[65], why[256], text[400];
        int64_t bytes;
        bool is_base = strcmp(f->role, "base") == 0;
        if (is_base && !base) {
            node_errf(err, errlen, "job %s: a base model file but no \"base\".\"model\"", id);
            goto done;
        }
        if (is_base ? local_base_path(node_paths, state_dir, base, f->path, base_dir,
                                               sizeof base_dir, local, sizeof local, err, errlen)
                    : local_path(node_paths, state_dir, f->path, local, sizeof local, err, errlen))
            goto done;
        hash_result h = sha256_file(local, f->bytes, hex, &bytes, why, sizeof why);
        const char *lacking = NULL;
        if (h == HASH_MISSING) {
            lacking = "missing";
        } else if (h == HASH_UNREADABLE) {
            snprintf(text, sizeof text, "unreadable (%s)", why);
            lacking = text;
        } else if (h == HASH_SIZE) {
            snprintf(text, sizeof text, "sha256 differs (have %lld bytes, job has %lld bytes)",
                     (long long)bytes, (long long)f->bytes);
            lacking = text;
        } else if (strcmp(hex, f->sha256) != 0) {
            snprintf(text, sizeof text, "sha256 differs (have %.12s..., job has %.12s...)", hex,
                     f->sha256);
            lacking = text;
        }
        if (lacking) {
            if (pool_lacks_add(&out, f->role, f->path, local, lacking)) {
                node_errf(err, errlen, "job %s: out of memory", id);
                goto done;
            }
        } else if (!(found[i] = strdup(local))) {
            node_errf(err, errlen, "job %s: out of memory", id);
            goto done;
        }
        if (strcmp(f->role, "tokenizer") == 0) tok = found[i];
        else if (strcmp(f->role, "weights") == 0) weights = found[i];
        else if (!is_base) data[ndata++] = found[i];
    }
    if (!(job = local_job(b, tok, weights, data, base_dir[0] ? base_dir : NULL, cfg_path,
                          out_dir))) {
        node_errf(err, errlen, "%s: out of memory (or a path that is not UTF-8)", dir);
        goto done;
    }
    char jobs[4096];
    snprintf(jobs, sizeof jobs, "%s/jobs", state_dir);
    if (make_dir(jobs, err, errlen) || make_dir(dir, err, errlen) ||
        make_dir(out_dir, err, errlen) ||
        node_write_json(cfg_path, b->config, 0644, err, errlen) ||
        node_write_json(job_path, job, 0644, err, errlen))
        goto done;
    job_spec js;   /* what train will read must load */
    if (job_load(&js, job_path, err, errlen)) goto done;
    job_free(&js);
    *lacks = out;
    memset(&out, 0, sizeof out);
    rc = 0;
done:
    for (int i = 0; found && i < b->nfiles; i++) free(found[i]);
    free(found);
    free(data);
    json_decref(job);
    pool_lacks_free(&out);
    return rc;
}

/* scheduler/ names the seven projections in model/'s order. */
_Static_assert((int)COST_LORA_Q == (int)STAGE_LORA_Q && (int)COST_LORA_O == (int)STAGE_LORA_O &&
                   (int)COST_LORA_DOWN == (int)STAGE_LORA_DOWN &&
                   (int)COST_LORA_MODULES == (int)STAGE_LORA_MODULES,
               "cost_shape's lora_modules bits are stage_lora's modules bits");

cost_shape pool_job_shape(const llama_config *cfg, const job_spec *js)
{
    cost_shape s = fleet_shape(cfg, js->seq_len);
    const stage_lora *l = job_lora(js);
    if (l) {
        s.lora_r = l->r;
        s.lora_modules = l->modules;
        s.nf4 = l->nf4;
    }
    return s;
}
