/*
 * The activation dtype (the engine's --dtype): its spellings, the auto
 * rule (an fp16 checkpoint in fp16, bf16 in bf16, fp32 in bf16), how the
 * model applies it to a backend that has a choice (a stand-in for CUDA:
 * the CPU backend with a set_act_dtype that refuses fp16, as CUDA does
 * until its attention and GEMV kernels take it) and to one that has none
 * (the CPU), and the range check that keeps a bf16 or fp32 weight beyond
 * fp16's range out of an fp16 run.
 */

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture_model.h"
#include "pl_model.h"
#include "tap.h"

static pl_dtype_t  asked[8];            /* set_act_dtype's calls */
static int         n_asked;
static int         take_f16;            /* the stand-in accepts fp16 */


static int
standin_set_act_dtype(pl_backend_t *be, pl_dtype_t dt, char *err,
    size_t errlen)
{
    if (n_asked < 8) {
        asked[n_asked++] = dt;
    }
    if (dt == PL_DT_BF16 || (dt == PL_DT_F16 && take_f16)) {
        be->act_dtype = dt;
        return 0;
    }
    snprintf(err, errlen, "stand-in refuses %s", pl_dtype_name(dt));
    return -1;
}


static void
test_parse(void)
{
    static const struct {
        const char        *s;
        pl_model_dtype_t   want;
    } good[] = {
        { "auto", PL_MODEL_DTYPE_AUTO }, { "float16", PL_MODEL_DTYPE_F16 },
        { "half", PL_MODEL_DTYPE_F16 }, { "bfloat16", PL_MODEL_DTYPE_BF16 },
        { "float32", PL_MODEL_DTYPE_F32 }, { "float", PL_MODEL_DTYPE_F32 },
    };
    static const char *const  bad[] = {
        "", "fp16", "Float16", "bf16", "float64", "auto "
    };
    pl_model_dtype_t          d;
    size_t                    i;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        d = (pl_model_dtype_t) 99;
        ok(pl_model_dtype_parse(good[i].s, &d) == 0 && d == good[i].want,
           "--dtype %s is understood", good[i].s);
    }
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ok(pl_model_dtype_parse(bad[i], &d) == -1,
           "--dtype \"%s\" is refused", bad[i]);
    }
}


static void
test_auto_rule(void)
{
    static const pl_dtype_t  ckpts[] = { PL_DT_F32, PL_DT_F16, PL_DT_BF16 };
    size_t                   i;

    is_int(pl_model_dtype_wanted(PL_MODEL_DTYPE_AUTO, PL_DT_F16), PL_DT_F16,
           "auto: an fp16 checkpoint runs in fp16");
    is_int(pl_model_dtype_wanted(PL_MODEL_DTYPE_AUTO, PL_DT_BF16),
           PL_DT_BF16, "auto: a bf16 checkpoint runs in bf16");
    is_int(pl_model_dtype_wanted(PL_MODEL_DTYPE_AUTO, PL_DT_F32), PL_DT_BF16,
           "auto: an fp32 checkpoint runs in bf16");
    for (i = 0; i < 3; i++) {
        ok(pl_model_dtype_wanted(PL_MODEL_DTYPE_F16, ckpts[i]) == PL_DT_F16
           && pl_model_dtype_wanted(PL_MODEL_DTYPE_BF16, ckpts[i])
              == PL_DT_BF16
           && pl_model_dtype_wanted(PL_MODEL_DTYPE_F32, ckpts[i])
              == PL_DT_F32,
           "float16, bfloat16 and float32 hold whatever the checkpoint "
           "(%s)", pl_dtype_name(ckpts[i]));
    }
}


static void
test_f16_overflows(void)
{
    float     f[6] = { 65504.0f, 65519.99f, -65520.0f, 7e4f, INFINITY, NAN };
    uint16_t  b[4];
    float     worst = -1.0f;

    ok(pl_f32_to_f16(65519.99f) == 0x7bff && pl_f32_to_f16(65520.0f)
       == 0x7c00, "65520 is where fp16 rounding reaches infinity");
    is_int(pl_f16_overflows(f, PL_DT_F32, 2, &worst), 0,
           "fp32 up to 65519.99 fits fp16");
    ok(worst == 0.0f, "worst is 0 when nothing overflows");
    is_int(pl_f16_overflows(f, PL_DT_F32, 6, &worst), 2,
           "fp32 -65520 and 7e4 overflow; infinity and NaN are not counted");
    ok(worst == 7e4f, "worst is the largest overflowing magnitude (%g)",
       worst);

    b[0] = pl_f32_to_bf16(65280.0f);            /* the largest bf16 < 2^16 */
    b[1] = pl_f32_to_bf16(-1.5f);
    b[2] = pl_f32_to_bf16(65536.0f);
    b[3] = pl_f32_to_bf16(-3e38f);
    is_int(pl_f16_overflows(b, PL_DT_BF16, 2, NULL), 0,
           "bf16 65280 fits fp16");
    is_int(pl_f16_overflows(b, PL_DT_BF16, 4, &worst), 2,
           "bf16 65536 and -3e38 overflow fp16");
    is_int(pl_f16_overflows(b, PL_DT_F16, 4, NULL), 0,
           "fp16 data never overflows fp16");
}


/* ---- the model's choice, on folders of one tensor ---- */


static void
write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char   path[512];
    FILE  *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f != NULL) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}


/*
 * A Llama folder whose config.json names dtype (NULL: no dtype field)
 * and whose model.safetensors holds the embedding alone, [4][8] of
 * tensor_dt, every value v: enough for the dtype choice and for the
 * first weight load, after which the load stops at a missing tensor.
 */
static void
make_folder(const char *dir, const char *dtype, pl_dtype_t tensor_dt,
    float v)
{
    json_t    *c = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, "
                             "s:i, s:f, s:b}",
                             "architectures", "LlamaForCausalLM",
                             "model_type", "llama", "vocab_size", 4,
                             "hidden_size", 8, "intermediate_size", 16,
                             "num_hidden_layers", 1,
                             "num_attention_heads", 2,
                             "num_key_value_heads", 2,
                             "max_position_embeddings", 32,
                             "rms_norm_eps", 1e-5,
                             "tie_word_embeddings", 0);
    char      *text, hdr[256];
    uint8_t    file[8 + 256 + 32 * 4];
    size_t     es = pl_dtype_size(tensor_dt), hl, i;
    uint64_t   len;

    if (dtype != NULL) {
        json_object_set_new(c, "torch_dtype", json_string(dtype));
    }
    text = json_dumps(c, JSON_INDENT(1));
    write_file(dir, "config.json", text, strlen(text));
    free(text);
    json_decref(c);

    hl = (size_t) snprintf(hdr, sizeof(hdr),
                           "{\"model.embed_tokens.weight\":{\"dtype\":\"%s\","
                           "\"shape\":[4,8],\"data_offsets\":[0,%zu]}}",
                           pl_dtype_name(tensor_dt), 32 * es);
    while (hl % 8 != 0) {
        hdr[hl++] = ' ';
    }
    len = hl;
    memcpy(file, &len, 8);
    memcpy(file + 8, hdr, hl);
    for (i = 0; i < 32; i++) {
        uint8_t  *p = file + 8 + hl + i * es;

        if (tensor_dt == PL_DT_F32) {
            memcpy(p, &v, 4);
        } else {
            uint16_t  h = tensor_dt == PL_DT_BF16 ? pl_f32_to_bf16(v)
                                                  : pl_f32_to_f16(v);

            memcpy(p, &h, 2);
        }
    }
    write_file(dir, "model.safetensors", file, 8 + hl + 32 * es);
}


/* load dir with --dtype want on be; err receives the reason it stopped */
static void
load(const char *dir, pl_backend_t *be, pl_model_dtype_t want, char *err,
    size_t errlen)
{
    pl_model_options_t  o = { 1, want };
    pl_model_t         *m;

    n_asked = 0;
    err[0] = '\0';
    m = pl_model_load_opts(dir, be, &o, err, errlen);
    pl_model_free(m);
}


static void
test_choice(pl_backend_t *cpu, const char *dir)
{
    pl_backend_t  gpu = *cpu;
    char          err[512];

    gpu.set_act_dtype = standin_set_act_dtype;

    make_folder(dir, "float16", PL_DT_F16, 1.0f);
    load(dir, &gpu, PL_MODEL_DTYPE_AUTO, err, sizeof(err));
    ok(n_asked == 2 && asked[0] == PL_DT_F16 && asked[1] == PL_DT_BF16
       && gpu.act_dtype == PL_DT_BF16, "auto: an fp16 checkpoint asks for "
       "fp16, then takes bf16 while the backend refuses fp16");
    take_f16 = 1;
    load(dir, &gpu, PL_MODEL_DTYPE_AUTO, err, sizeof(err));
    ok(n_asked == 1 && gpu.act_dtype == PL_DT_F16,
       "auto: an fp16 checkpoint runs in fp16 once the backend takes it");
    take_f16 = 0;
    load(dir, &gpu, PL_MODEL_DTYPE_F16, err, sizeof(err));
    ok(n_asked == 1 && strstr(err, "--dtype float16: stand-in refuses F16")
       != NULL, "--dtype float16 refused with the backend's reason: %s",
       err);
    load(dir, &gpu, PL_MODEL_DTYPE_BF16, err, sizeof(err));
    ok(n_asked == 1 && asked[0] == PL_DT_BF16
       && gpu.act_dtype == PL_DT_BF16, "--dtype bfloat16 on an fp16 "
       "checkpoint");

    make_folder(dir, "bfloat16", PL_DT_BF16, 1.0f);
    load(dir, &gpu, PL_MODEL_DTYPE_AUTO, err, sizeof(err));
    ok(n_asked == 1 && asked[0] == PL_DT_BF16, "auto: bf16 checkpoint, bf16");
    make_folder(dir, "float32", PL_DT_F32, 1.0f);
    load(dir, &gpu, PL_MODEL_DTYPE_AUTO, err, sizeof(err));
    ok(n_asked == 1 && asked[0] == PL_DT_BF16,
       "auto: fp32 checkpoint, bf16");
    make_folder(dir, NULL, PL_DT_F16, 1.0f);
    take_f16 = 1;
    load(dir, &gpu, PL_MODEL_DTYPE_AUTO, err, sizeof(err));
    ok(n_asked == 1 && asked[0] == PL_DT_F16, "auto without a dtype in "
       "config.json follows the embedding's (F16)");

    make_folder(dir, "bfloat16", PL_DT_BF16, 70000.0f);
    load(dir, &gpu, PL_MODEL_DTYPE_F16, err, sizeof(err));
    ok(strstr(err, "'model.embed_tokens.weight' holds 32 values beyond "
              "float16's range") != NULL,
       "a bf16 weight beyond fp16's range stops an fp16 load, named: %s",
       err);
    make_folder(dir, "bfloat16", PL_DT_BF16, 60000.0f);
    load(dir, &gpu, PL_MODEL_DTYPE_F16, err, sizeof(err));
    ok(strstr(err, "float16's range") == NULL
       && strstr(err, "missing") != NULL,
       "one within it loads (and the load goes on to the next tensor: %s)",
       err);
    make_folder(dir, "bfloat16", PL_DT_BF16, 70000.0f);
    load(dir, &gpu, PL_MODEL_DTYPE_BF16, err, sizeof(err));
    ok(strstr(err, "float16's range") == NULL,
       "the same weight is no matter in bf16");
    take_f16 = 0;

    load(dir, cpu, PL_MODEL_DTYPE_AUTO, err, sizeof(err));
    ok(cpu->act_dtype == PL_DT_F32 && strstr(err, "missing") != NULL,
       "cpu: auto keeps fp32");
    load(dir, cpu, PL_MODEL_DTYPE_F32, err, sizeof(err));
    ok(strstr(err, "missing") != NULL, "cpu: float32 is its own");
    load(dir, cpu, PL_MODEL_DTYPE_F16, err, sizeof(err));
    ok(strstr(err, "--dtype float16: the cpu backend computes in float32 "
              "only") != NULL, "cpu: float16 refused: %s", err);
    load(dir, cpu, PL_MODEL_DTYPE_BF16, err, sizeof(err));
    ok(strstr(err, "--dtype bfloat16: the cpu backend computes in float32 "
              "only") != NULL, "cpu: bfloat16 refused");
}


int
main(void)
{
    char           dir[] = "/tmp/pl-dtype-XXXXXX", err[256];
    pl_backend_t  *cpu;

    test_parse();
    test_auto_rule();
    test_f16_overflows();

    cpu = pl_backend_cpu_create(1, err, sizeof(err));
    if (!ok(cpu != NULL && mkdtemp(dir) != NULL, "cpu backend and a folder"))
    {
        return done_testing();
    }
    test_choice(cpu, dir);
    fm_rmtree(dir);
    cpu->destroy(cpu);
    return done_testing();
}
