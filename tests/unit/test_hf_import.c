/* test_hf_import.c — HF model directories (model/hf_import.c): a sharded
 * checkpoint with model.safetensors.index.json, a middle stage loaded from
 * it without the shard it does not need, and refusals naming the tensor;
 * llama.cpp's tensor names (model/gguf_llama.c). */
#include "import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dir[512];

static const char *in_dir(const char *name)
{
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) CHECK(0, "cannot write %s", path);
}

static float value_of(int t, size_t i) { return (float)t + (float)(i % 97) * 0.001f; }

/* Writes the model's tensors into two shards: embedding and layer 0 in a,
 * the rest in b; and an index naming them. */
static void write_model(const llama_config *c, char **names, int n)
{
    safetensors_entry *ea = calloc((size_t)n, sizeof *ea), *eb = calloc((size_t)n, sizeof *eb);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    int na = 0, nb = 0;
    char err[512];
    size_t cap = 1 << 16, len = 0;
    char *index = malloc(cap);
    len += (size_t)snprintf(index, cap, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int t = 0; t < n; t++) {
        int ndim;
        int64_t shape[2];
        gguf_llama_shape(c, names[t], &ndim, shape);
        size_t numel = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
        bufs[t] = malloc(numel * sizeof(float));
        for (size_t i = 0; i < numel; i++) bufs[t][i] = value_of(t, i);
        bool in_a = strcmp(names[t], "model.embed_tokens.weight") == 0 ||
                    stage_tensor_layer(names[t]) == 0;
        safetensors_entry *e = in_a ? &ea[na++] : &eb[nb++];
        e->name = names[t];
        e->dtype = SAFETENSORS_F32;
        e->ndim = ndim;
        memcpy(e->shape, shape, sizeof shape);
        e->data = bufs[t];
        len += (size_t)snprintf(index + len, cap - len, "%s\"%s\": \"%s\"", t ? ", " : "",
                                names[t], in_a ? "a.safetensors" : "b.safetensors");
    }
    snprintf(index + len, cap - len, "}}\n");
    CHECK(safetensors_write(in_dir("a.safetensors"), ea, na, err, sizeof err) == 0, "%s", err);
    CHECK(safetensors_write(in_dir("b.safetensors"), eb, nb, err, sizeof err) == 0, "%s", err);
    write_text(in_dir("model.safetensors.index.json"), index);
    CHECK(llama_config_save(c, in_dir("config.json"), err, sizeof err) == 0, "%s", err);
    for (int t = 0; t < n; t++) free(bufs[t]);
    free(bufs);
    free(ea);
    free(eb);
    free(index);
}

static void test_sharded(void)
{
    llama_config c = {.hidden_size = 16, .intermediate_size = 24, .num_hidden_layers = 3,
                      .num_attention_heads = 4, .num_key_value_heads = 2, .vocab_size = 20,
                      .max_position_embeddings = 32, .rms_norm_eps = 1e-5f,
                      .rope_theta = 10000.0f};
    char err[512], **names;
    int n;
    CHECK(llama_config_validate(&c, "test", err, sizeof err) == 0, "%s", err);
    CHECK(gguf_llama_names(&c, &names, &n) == 0 && n == 3 + 9 * 3, "names: %d", n);
    write_model(&c, names, n);

    hf_model *m;
    CHECK(hf_open(&m, dir, err, sizeof err) == 0, "open: %s", err);
    if (!m) return;
    CHECK(hf_shard_count(m) == 2, "shards %d", hf_shard_count(m));
    CHECK(hf_check(m, err, sizeof err) == 0, "check: %s", err);
    CHECK(strcmp(hf_tensor_file(m, "model.layers.2.mlp.up_proj.weight"), "b.safetensors") == 0,
          "index");
    hf_close(m);

    /* A stage of layer 1 needs b only: it loads with a gone. */
    CHECK(rename(in_dir("a.safetensors"), in_dir("a.away")) == 0, "rename");
    stage *s;
    CHECK(stage_create(&s, &c, 1, 2, false, false, 1, 4, 1, err, sizeof err) == 0, "%s", err);
    CHECK(hf_open(&m, dir, err, sizeof err) == 0, "open: %s", err);
    CHECK(hf_load_stage(m, s, err, sizeof err) == 0, "load stage: %s", err);
    int checked = 0;
    for (int i = 0; i < stage_param_count(s); i++) {
        const stage_param *p = stage_param_at(s, i);
        int t = 0;
        while (t < n && strcmp(names[t], p->name)) t++;
        const float *got = stage_params(s) + p->offset;
        int same = t < n;
        for (size_t k = 0; same && k < p->numel; k++) same = got[k] == value_of(t, k);
        CHECK(same, "stage tensor %s differs", p->name);
        checked++;
    }
    CHECK(checked == 9, "stage holds %d tensors", checked);
    /* The embedding's shard is gone: reading it names the file. */
    float emb[20 * 16];
    CHECK(hf_read_f32(m, "model.embed_tokens.weight", emb, 20 * 16, err, sizeof err) == -1 &&
          strstr(err, "a.safetensors"), "missing shard: %s", err);
    CHECK(hf_read_f32(m, "model.layers.9.mlp.up_proj.weight", emb, 1, err, sizeof err) == -1 &&
          strstr(err, "model.layers.9.mlp.up_proj.weight"), "unknown tensor: %s", err);
    hf_close(m);
    stage_free(s);
    rename(in_dir("a.away"), in_dir("a.safetensors"));

    /* An index that forgets a tensor, or names a file outside the folder. */
    write_text(in_dir("model.safetensors.index.json"),
               "{\"weight_map\": {\"model.embed_tokens.weight\": \"a.safetensors\"}}");
    CHECK(hf_open(&m, dir, err, sizeof err) == 0, "open: %s", err);
    if (m) {
        CHECK(hf_check(m, err, sizeof err) == -1 && strstr(err, "model.layers.0.input_layernorm"),
              "missing from the index: %s", err);
        hf_close(m);
    }
    write_text(in_dir("model.safetensors.index.json"),
               "{\"weight_map\": {\"model.norm.weight\": \"../b.safetensors\"}}");
    CHECK(hf_open(&m, dir, err, sizeof err) == -1 && strstr(err, "model.norm.weight"),
          "shard outside: %s", err);
    gguf_free_names(names, n);
}

static void test_names(void)
{
    char b[128];
    CHECK(gguf_hf_name("blk.12.ffn_down.weight", b, sizeof b) == 0 &&
          strcmp(b, "model.layers.12.mlp.down_proj.weight") == 0, "ffn_down: %s", b);
    CHECK(gguf_hf_name("token_embd.weight", b, sizeof b) == 0 &&
          strcmp(b, "model.embed_tokens.weight") == 0, "token_embd");
    CHECK(gguf_gguf_name("model.layers.3.self_attn.k_proj.weight", b, sizeof b) == 0 &&
          strcmp(b, "blk.3.attn_k.weight") == 0, "k_proj: %s", b);
    CHECK(gguf_gguf_name("lm_head.weight", b, sizeof b) == 0 && strcmp(b, "output.weight") == 0,
          "lm_head");
    CHECK(gguf_hf_name("blk.01.attn_q.weight", b, sizeof b) == -1, "leading zero");
    CHECK(gguf_hf_name("blk.1.attn_q.bias", b, sizeof b) == -1, "bias");
    CHECK(gguf_hf_name("rope_freqs.weight", b, sizeof b) == -1, "rope_freqs");
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/hf_%d", SHARDNODE_TEST_TMP, (int)getpid());
    mkdir(dir, 0755);
    test_names();
    test_sharded();
    if (failures) printf("%d checks failed\n", failures);
    else printf("test_hf_import: all checks passed\n");
    return failures != 0;
}
