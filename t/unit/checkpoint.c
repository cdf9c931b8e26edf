/*
 * checkpoint: broken checkpoints refuse to load with a message naming the
 * file and the problem, and never crash.  Built from the golden fixtures:
 * the sharded Mistral (six shards and an index) and the single-file fp32
 * Llama 3, copied into a temp folder and damaged one way each: a missing
 * shard, an index and shards that disagree, a shard name that leaves the
 * folder, an index that is not JSON, a file truncated inside its header
 * and inside its data, a header whose offsets run past the file, and a
 * dtype or a shape that does not match config.json.
 */

#include <jansson.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture_model.h"

#define FIXTURES  "t/fixtures/golden"
#define SHARDS    6

static char  tmp[] = "/tmp/pl-ckpt-XXXXXX";


static void
write_file(const char *path, const void *buf, size_t len)
{
    FILE  *f = fopen(path, "wb");

    if (f == NULL || fwrite(buf, 1, len, f) != len) {
        diag("cannot write %s", path);
    }
    if (f != NULL) {
        fclose(f);
    }
}


/* fixture/name copied to dir/name, cut to keep bytes (0: all) */
static void
copy(const char *fixture, const char *dir, const char *name, size_t keep)
{
    char            from[320], to[320];
    size_t          len;
    unsigned char  *buf;

    snprintf(from, sizeof(from), FIXTURES "/%s/%s", fixture, name);
    snprintf(to, sizeof(to), "%s/%s", dir, name);
    buf = fm_read_file(from, &len);
    write_file(to, buf, keep != 0 && keep < len ? keep : len);
    free(buf);
}


/* a fresh folder tmp/name */
static const char *
folder(const char *name)
{
    static char  dir[256];

    snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
    mkdir(dir, 0700);
    return dir;
}


/* the sharded Mistral, without shard skip (0: all of them) */
static const char *
sharded(const char *name, int skip)
{
    const char  *dir = folder(name);
    char         shard[64];
    int          i;

    copy("mistral", dir, "config.json", 0);
    copy("mistral", dir, "model.safetensors.index.json", 0);
    for (i = 1; i <= SHARDS; i++) {
        snprintf(shard, sizeof(shard), "model-%05d-of-%05d.safetensors", i,
                 SHARDS);
        if (i != skip) {
            copy("mistral", dir, shard, 0);
        }
    }
    return dir;
}


/* dir's JSON file with weight_map[tensor] set to shard (NULL: removed) */
static void
remap(const char *dir, const char *tensor, const char *shard)
{
    char          path[320];
    json_t       *root, *map;
    json_error_t  jerr;

    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    root = json_load_file(path, 0, &jerr);
    map = json_object_get(root, "weight_map");
    if (shard != NULL) {
        json_object_set_new(map, tensor, json_string(shard));
    } else {
        json_object_del(map, tensor);
    }
    json_dump_file(root, path, 0);
    json_decref(root);
}


static void
refuse(const char *dir, const char *f1, const char *f2, const char *what)
{
    char           err[512] = "";
    pl_backend_t  *be = pl_backend_cpu_create(1, err, sizeof(err));
    pl_model_t    *m = pl_model_load(dir, be, err, sizeof(err));

    ok(m == NULL && strstr(err, f1) != NULL && strstr(err, f2) != NULL,
       "refuses %s", what);
    if (m != NULL || strstr(err, f1) == NULL || strstr(err, f2) == NULL) {
        diag("got \"%s\"", err);
    }
    pl_model_free(m);
    be->destroy(be);
}


static void
test_sharded(void)
{
    char           err[512] = "";
    pl_backend_t  *be = pl_backend_cpu_create(1, err, sizeof(err));
    pl_model_t    *m = pl_model_load(sharded("whole", 0), be, err,
                                     sizeof(err));
    const char    *dir;
    char           path[320];

    ok(m != NULL, "a sharded checkpoint with its index loads");
    pl_model_free(m);
    be->destroy(be);

    refuse(sharded("noshard", 3), "model.safetensors.index.json",
           "shard 'model-00003-of-00006.safetensors' is missing",
           "a missing shard");
    dir = sharded("moved", 0);
    remap(dir, "lm_head.weight", "model-00001-of-00006.safetensors");
    refuse(dir, "tensor 'lm_head.weight' is not in shard",
           "model-00001-of-00006.safetensors", "an index that puts a tensor "
           "in the wrong shard");
    dir = sharded("unlisted", 0);
    remap(dir, "model.norm.weight", NULL);
    refuse(dir, "holds tensor 'model.norm.weight'", "no shard",
           "a shard holding a tensor the index does not list");
    dir = sharded("escape", 0);
    remap(dir, "lm_head.weight", "../model-00006-of-00006.safetensors");
    refuse(dir, "'../model-00006-of-00006.safetensors'",
           "not a plain file name", "a shard name outside the folder");
    dir = sharded("badindex", 0);
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    write_file(path, "{\"weight_map\": {", 16);
    refuse(dir, "model.safetensors.index.json", "cannot read as JSON",
           "an index that is not JSON");
}


/* the fp32 Llama 3 with config.json patched by set and the weights cut to
   keep bytes (0: whole) */
static const char *
single(const char *name, const char *set, size_t keep)
{
    const char    *dir = folder(name);
    char           path[320];
    json_t        *cfg, *patch;
    json_error_t   jerr;

    copy("llama3_gqa", dir, "model.safetensors", keep);
    cfg = json_load_file(FIXTURES "/llama3_gqa/config.json", 0, &jerr);
    patch = set != NULL ? json_loads(set, 0, &jerr) : NULL;
    if (patch != NULL) {
        json_object_update(cfg, patch);
        json_decref(patch);
    }
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    return dir;
}


/* the Llama 3 weights with the tensor that ends last moved `by` bytes
   further, as its header says (the data stays where it was) */
static const char *
shifted_offsets(const char *name, uint64_t by)
{
    const char     *dir = single(name, NULL, 0);
    char            path[320], *text;
    unsigned char  *buf, len8[8];
    size_t          len, hlen = 0, i;
    json_t         *hdr, *val, *last = NULL;
    const char     *key;
    json_error_t    jerr;

    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    buf = fm_read_file(path, &len);
    for (i = 0; buf != NULL && i < 8; i++) {
        hlen |= (size_t) buf[i] << (8 * i);
    }
    hdr = buf != NULL ? json_loadb((char *) buf + 8, hlen, 0, &jerr) : NULL;
    json_object_foreach(hdr, key, val) {
        json_t  *end = json_array_get(json_object_get(val, "data_offsets"),
                                      1);

        if (end != NULL && (last == NULL || json_integer_value(end)
            > json_integer_value(json_array_get(json_object_get(last,
                                 "data_offsets"), 1))))
        {
            last = val;
        }
    }
    for (i = 0; last != NULL && i < 2; i++) {
        json_t  *offs = json_object_get(last, "data_offsets");

        json_array_set_new(offs, i, json_integer(
            json_integer_value(json_array_get(offs, i)) + (json_int_t) by));
    }
    text = json_dumps(hdr, JSON_COMPACT);
    for (i = 0; text != NULL && i < 8; i++) {
        len8[i] = (unsigned char) ((strlen(text) >> (8 * i)) & 0xff);
    }
    if (text != NULL) {
        FILE  *f = fopen(path, "wb");

        fwrite(len8, 1, 8, f);
        fwrite(text, 1, strlen(text), f);
        fwrite(buf + 8 + hlen, 1, len - 8 - hlen, f);
        fclose(f);
    }
    free(text);
    json_decref(hdr);
    free(buf);
    return dir;
}


static void
test_single_file(void)
{
    refuse(single("header", NULL, 100), "model.safetensors",
           "header length", "a file truncated inside its header");
    refuse(single("data", NULL, 400000), "model.safetensors",
           "past the end of the file", "a file truncated inside its data");
    refuse(shifted_offsets("offsets", 4096), "model.safetensors",
           "past the end of the file", "a header whose offsets run past "
           "the file");
    refuse(single("dtype", "{\"dtype\": \"bfloat16\"}", 0),
           "model.embed_tokens.weight", "is F32 but the checkpoint is BF16",
           "weights of another dtype than config.json's");
    refuse(single("shape", "{\"intermediate_size\": 96}", 0),
           "has shape [128, 64]", "config.json implies [96, 64]",
           "a tensor whose shape does not match config.json");
    refuse(single("heads", "{\"num_key_value_heads\": 4}", 0),
           "self_attn.k_proj.weight", "[64, 64]",
           "a KV head count that does not match the weights");
}


int
main(void)
{
    if (access(FIXTURES, R_OK) != 0 || mkdtemp(tmp) == NULL) {
        printf("Bail out! no %s (run from the repository root) or no temp "
               "folder\n", FIXTURES);
        return 1;
    }
    test_sharded();
    test_single_file();
    fm_rmtree(tmp);
    return done_testing();
}
