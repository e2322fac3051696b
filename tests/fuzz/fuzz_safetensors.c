/* fuzz_safetensors.c — libFuzzer target for .safetensors files
 * (model/safetensors.c), which a node reads from wherever a job points:
 * initial weights, checkpoints, stage files fetched from other members.
 *
 * The input is the whole file. safetensors_open must refuse anything
 * malformed with a one-line message and never read outside the file; every
 * file it accepts must hold tensors that lie inside the file, with exactly
 * the bytes their shape needs, and every float or integer tensor must read
 * back (safetensors_read_f32 / _i32 with its own shape) without touching
 * anything else. Every __metadata__ value it reports is a string. */
#include "fuzz_util.h"
#include "model.h"

#define T "fuzz_safetensors"

static size_t dtype_size(safetensors_dtype d)
{
    switch (d) {
    case SAFETENSORS_F16:
    case SAFETENSORS_BF16: return 2;
    case SAFETENSORS_I64: return 8;
    default: return 4;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512], err[512];
    fuzz_write_file("model.safetensors", data, size, path, sizeof path);
    safetensors_file *f;
    memset(err, 'x', sizeof err);
    if (safetensors_open(&f, path, err, sizeof err) != 0) {
        fuzz_check_refusal(T, err, sizeof err);
        fuzz_require(strstr(err, path) != NULL || strstr(err, "memory") != NULL, T,
                     "refusal does not name the file", err);
        return 0;
    }
    fuzz_require(size >= 8, T, "accepted a file without a header length", NULL);
    size_t total = 0;
    for (int i = 0; i < safetensors_count(f); i++) {
        const safetensors_tensor *t = safetensors_at(f, i);
        fuzz_require(t->name != NULL && safetensors_find(f, t->name) == t, T,
                     "tensor not found by its name", t->name);
        fuzz_require(t->ndim >= 0 && t->ndim <= SAFETENSORS_MAX_DIMS, T, "dimensions", t->name);
        size_t numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            fuzz_require(t->shape[k] >= 0, T, "negative dimension", t->name);
            numel *= (size_t)t->shape[k];
        }
        fuzz_require(numel * dtype_size(t->dtype) == t->nbytes, T,
                     "byte count does not match the shape", t->name);
        total += t->nbytes;
        fuzz_require(total <= size, T, "tensors larger than the file", t->name);
        if (numel > ((size_t)1 << 20))
            continue;
        if (t->dtype == SAFETENSORS_I32 || t->dtype == SAFETENSORS_I64) {
            int32_t *dst = malloc(numel * sizeof *dst + 1);
            memset(err, 'x', sizeof err);
            if (safetensors_read_i32(f, t->name, t->ndim, t->shape, dst, err, sizeof err) != 0)
                fuzz_check_refusal(T, err, sizeof err);   /* an I64 out of int32 range */
            free(dst);
        } else {
            float *dst = malloc(numel * sizeof *dst + 1);
            fuzz_require(safetensors_read_f32(f, t->name, t->ndim, t->shape, dst, err,
                                              sizeof err) == 0,
                         T, "a float tensor it accepted does not read", err);
            free(dst);
        }
    }
    const char *fmt = safetensors_metadata(f, "format");
    if (fmt)
        fuzz_require(strlen(fmt) < size, T, "metadata longer than the file", fmt);
    safetensors_close(f);
    return 0;
}
