/*
 * model_config: config.json and generation_config.json of a Hugging Face
 * Llama folder.
 *
 * Required fields must be present and sane; optional ones take Hugging
 * Face's defaults.  Anything that would change the maths in a way the model
 * does not implement (a sliding window, biases, another activation, an
 * unknown RoPE scaling, quantization) is refused with the field's name
 * rather than silently ignored.  RoPE scaling of type "linear" and "llama3"
 * is kept in pl_rope_scaling_t and folded into the frequencies on the host.
 */

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model_config.h"

#define PL_CFG_MAX_DIM  (1 << 22)

typedef struct {
    json_t      *root;
    char         path[4096];
    char        *err;
    size_t       errlen;
} cfg_file_t;


static int
cfg_fail(cfg_file_t *f, const char *fmt, ...)
{
    va_list  ap;
    int      len;

    len = snprintf(f->err, f->errlen, "%s: ", f->path);
    if (len >= 0 && (size_t) len < f->errlen) {
        va_start(ap, fmt);
        vsnprintf(f->err + len, f->errlen - len, fmt, ap);
        va_end(ap);
    }
    return -1;
}


/* 1 loaded, 0 absent (only when optional), -1 error */
static int
cfg_open(cfg_file_t *f, const char *dir, const char *name, int optional)
{
    json_error_t  jerr;

    snprintf(f->path, sizeof(f->path), "%s/%s", dir, name);
    if (optional && access(f->path, F_OK) != 0 && errno == ENOENT) {
        return 0;
    }
    f->root = json_load_file(f->path, JSON_REJECT_DUPLICATES, &jerr);
    if (f->root == NULL) {
        return cfg_fail(f, "cannot read as JSON: %s (line %d)", jerr.text,
                        jerr.line);
    }
    if (!json_is_object(f->root)) {
        json_decref(f->root);
        f->root = NULL;
        return cfg_fail(f, "is not a JSON object");
    }
    return 1;
}


/* absent or null */
static int
cfg_absent(cfg_file_t *f, const char *key)
{
    json_t  *v = json_object_get(f->root, key);

    return v == NULL || json_is_null(v);
}


static int
cfg_int(cfg_file_t *f, const char *key, int required, int def, int min,
    int *out)
{
    json_t  *v = json_object_get(f->root, key);

    if (cfg_absent(f, key)) {
        if (required) {
            return cfg_fail(f, "required field '%s' is missing", key);
        }
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min
        || json_integer_value(v) > PL_CFG_MAX_DIM)
    {
        return cfg_fail(f, "field '%s' must be an integer from %d to %d", key,
                        min, PL_CFG_MAX_DIM);
    }
    *out = (int) json_integer_value(v);
    return 0;
}


static int
cfg_float(cfg_file_t *f, json_t *obj, const char *key, float def,
    float *out)
{
    json_t  *v = json_object_get(obj, key);

    if (v == NULL || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0)
        || !isfinite(json_number_value(v)))
    {
        return cfg_fail(f, "field '%s' must be a positive number", key);
    }
    *out = (float) json_number_value(v);
    return 0;
}


static int
cfg_bool(cfg_file_t *f, const char *key, int *out)
{
    json_t  *v = json_object_get(f->root, key);

    if (cfg_absent(f, key)) {
        *out = 0;
        return 0;
    }
    if (!json_is_boolean(v)) {
        return cfg_fail(f, "field '%s' must be true or false", key);
    }
    *out = json_is_true(v);
    return 0;
}


static int
read_arch(cfg_file_t *f, pl_model_config_t *cfg)
{
    json_t      *archs = json_object_get(f->root, "architectures");
    json_t      *mt = json_object_get(f->root, "model_type");
    const char  *arch = json_string_value(json_array_get(archs, 0));
    const char  *type = json_string_value(mt);

    if (arch != NULL && (strcmp(arch, "LlamaForCausalLM") == 0
                         || strcmp(arch, "MistralForCausalLM") == 0))
    {
        snprintf(cfg->arch, sizeof(cfg->arch), "%s",
                 arch[0] == 'L' ? "llama" : "mistral");
        return 0;
    }
    if (arch == NULL && type != NULL && (strcmp(type, "llama") == 0
                                         || strcmp(type, "mistral") == 0))
    {
        snprintf(cfg->arch, sizeof(cfg->arch), "%s", type);
        return 0;
    }
    return cfg_fail(f, "architecture '%s' (model_type '%s') is not "
                    "supported: 'architectures' must start with "
                    "LlamaForCausalLM", arch ? arch : "none",
                    type ? type : "none");
}


static int
read_sizes(cfg_file_t *f, pl_model_config_t *cfg)
{
    if (cfg_int(f, "vocab_size", 1, 0, 1, &cfg->vocab_size) != 0
        || cfg_int(f, "hidden_size", 1, 0, 1, &cfg->hidden_size) != 0
        || cfg_int(f, "intermediate_size", 1, 0, 1,
                   &cfg->intermediate_size) != 0
        || cfg_int(f, "num_hidden_layers", 1, 0, 1, &cfg->num_layers) != 0
        || cfg_int(f, "num_attention_heads", 1, 0, 1, &cfg->num_heads) != 0
        || cfg_int(f, "num_key_value_heads", 0, cfg->num_heads, 1,
                   &cfg->num_kv_heads) != 0
        || cfg_int(f, "head_dim", 0, cfg->hidden_size / cfg->num_heads, 1,
                   &cfg->head_dim) != 0
        || cfg_int(f, "max_position_embeddings", 0, 2048, 1,
                   &cfg->max_position_embeddings) != 0)
    {
        return -1;
    }
    if (cfg->num_heads % cfg->num_kv_heads != 0) {
        return cfg_fail(f, "num_attention_heads %d is not a multiple of "
                        "num_key_value_heads %d", cfg->num_heads,
                        cfg->num_kv_heads);
    }
    if (cfg->head_dim < 2 || cfg->head_dim % 2 != 0) {
        return cfg_fail(f, "head_dim %d must be even and positive for "
                        "rotary embeddings",
                        cfg->head_dim);
    }
    return 0;
}


static int
read_dtype(cfg_file_t *f, pl_model_config_t *cfg)
{
    const char  *s = json_string_value(json_object_get(f->root,
                                                       "torch_dtype"));

    cfg->dtype = PL_DT_BF16;
    if (cfg_absent(f, "torch_dtype")) {
        return 0;
    }
    if (s != NULL && strcmp(s, "float32") == 0) {
        cfg->dtype = PL_DT_F32;
    } else if (s != NULL && strcmp(s, "float16") == 0) {
        cfg->dtype = PL_DT_F16;
    } else if (s == NULL || strcmp(s, "bfloat16") != 0) {
        return cfg_fail(f, "torch_dtype '%s' is not supported (float32, "
                        "float16 and bfloat16 are)", s ? s : "non-string");
    }
    return 0;
}


/* Options that would change the maths: refused when set. */
static int
refuse_unsupported(cfg_file_t *f)
{
    static const char  *must_be_absent[] = {
        "sliding_window", "quantization_config"
    };
    static const char  *must_be_false[] = { "attention_bias", "mlp_bias" };
    const char         *act;
    size_t              i;
    int                 on;

    for (i = 0; i < sizeof(must_be_absent) / sizeof(must_be_absent[0]); i++)
    {
        if (!cfg_absent(f, must_be_absent[i])) {
            return cfg_fail(f, "field '%s' is set, which is not supported",
                            must_be_absent[i]);
        }
    }
    for (i = 0; i < sizeof(must_be_false) / sizeof(must_be_false[0]); i++) {
        if (cfg_bool(f, must_be_false[i], &on) != 0) {
            return -1;
        }
        if (on) {
            return cfg_fail(f, "field '%s' is true, which is not supported",
                            must_be_false[i]);
        }
    }
    act = json_string_value(json_object_get(f->root, "hidden_act"));
    if (!cfg_absent(f, "hidden_act") && (act == NULL
                                         || strcmp(act, "silu") != 0))
    {
        return cfg_fail(f, "field 'hidden_act' is '%s', only 'silu' is "
                        "supported", act ? act : "non-string");
    }
    return 0;
}


static int
read_rope_scaling(cfg_file_t *f, const pl_model_config_t *cfg,
    pl_rope_scaling_t *rope)
{
    json_t      *rs = json_object_get(f->root, "rope_scaling");
    const char  *type;
    json_t      *omax;

    memset(rope, 0, sizeof(*rope));
    rope->type = PL_ROPE_DEFAULT;
    if (cfg_absent(f, "rope_scaling")) {
        return 0;
    }
    if (!json_is_object(rs)) {
        return cfg_fail(f, "field 'rope_scaling' must be an object or null");
    }
    type = json_string_value(json_object_get(rs, "rope_type"));
    if (type == NULL) {
        type = json_string_value(json_object_get(rs, "type"));
    }
    if (type != NULL && strcmp(type, "default") == 0) {
        return 0;
    }
    if (type == NULL || (strcmp(type, "linear") != 0
                         && strcmp(type, "llama3") != 0))
    {
        return cfg_fail(f, "field 'rope_scaling' has type '%s', which is not "
                        "supported (linear and llama3 are)",
                        type ? type : "none");
    }
    if (json_object_get(rs, "factor") == NULL) {
        return cfg_fail(f, "field 'rope_scaling' has no 'factor'");
    }
    if (cfg_float(f, rs, "factor", 1.0f, &rope->factor) != 0) {
        return -1;
    }
    if (strcmp(type, "linear") == 0) {
        rope->type = PL_ROPE_LINEAR;
        return 0;
    }
    rope->type = PL_ROPE_LLAMA3;
    omax = json_object_get(rs, "original_max_position_embeddings");
    rope->original_max_position_embeddings = json_is_integer(omax)
        ? (int) json_integer_value(omax) : cfg->max_position_embeddings;
    if (cfg_float(f, rs, "low_freq_factor", 1.0f,
                  &rope->low_freq_factor) != 0
        || cfg_float(f, rs, "high_freq_factor", 4.0f,
                     &rope->high_freq_factor) != 0)
    {
        return -1;
    }
    if (rope->high_freq_factor <= rope->low_freq_factor
        || rope->original_max_position_embeddings <= 0)
    {
        return cfg_fail(f, "field 'rope_scaling' needs high_freq_factor > "
                        "low_freq_factor and a positive "
                        "original_max_position_embeddings");
    }
    return 0;
}


/* eos_token_id: an integer or an array of integers (null: keep *cfg's) */
static int
read_eos(cfg_file_t *f, pl_model_config_t *cfg)
{
    json_t  *v = json_object_get(f->root, "eos_token_id");
    json_t  *item;
    size_t   i;

    if (cfg_absent(f, "eos_token_id")) {
        return 0;
    }
    if (json_is_integer(v)) {
        v = json_pack("[O]", v);
    } else {
        json_incref(v);
    }
    if (!json_is_array(v) || json_array_size(v) == 0
        || json_array_size(v) > 8)
    {
        json_decref(v);
        return cfg_fail(f, "field 'eos_token_id' must be an integer or an "
                        "array of 1 to 8 integers");
    }
    json_array_foreach(v, i, item) {
        if (!json_is_integer(item) || json_integer_value(item) < 0
            || json_integer_value(item) >= cfg->vocab_size)
        {
            json_decref(v);
            return cfg_fail(f, "field 'eos_token_id' holds an id outside the "
                            "vocabulary (0..%d)", cfg->vocab_size - 1);
        }
        cfg->eos_token_ids[i] = (int) json_integer_value(item);
    }
    cfg->n_eos = (int) json_array_size(v);
    json_decref(v);
    return 0;
}


static int
read_bos(cfg_file_t *f, pl_model_config_t *cfg)
{
    json_t  *v = json_object_get(f->root, "bos_token_id");

    if (cfg_absent(f, "bos_token_id")) {
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0
        || json_integer_value(v) >= cfg->vocab_size)
    {
        return cfg_fail(f, "field 'bos_token_id' must be an id in the "
                        "vocabulary (0..%d)", cfg->vocab_size - 1);
    }
    cfg->bos_token_id = (int) json_integer_value(v);
    return 0;
}


static int
read_config(cfg_file_t *f, pl_model_config_t *cfg, pl_rope_scaling_t *rope)
{
    float  eps, theta;

    if (read_arch(f, cfg) != 0 || read_sizes(f, cfg) != 0
        || read_dtype(f, cfg) != 0 || refuse_unsupported(f) != 0
        || read_rope_scaling(f, cfg, rope) != 0
        || cfg_float(f, f->root, "rms_norm_eps", 1e-6f, &eps) != 0
        || cfg_float(f, f->root, "rope_theta", 10000.0f, &theta) != 0
        || cfg_bool(f, "tie_word_embeddings", &cfg->tie_word_embeddings) != 0
        || read_bos(f, cfg) != 0 || read_eos(f, cfg) != 0)
    {
        return -1;
    }
    cfg->rms_norm_eps = eps;
    cfg->rope_theta = theta;
    return 0;
}


int
pl_model_config_read(const char *dir, pl_model_config_t *cfg,
    pl_rope_scaling_t *rope, char *err, size_t errlen)
{
    cfg_file_t  f = { .err = err, .errlen = errlen };
    int         rc;

    memset(cfg, 0, sizeof(*cfg));
    cfg->bos_token_id = -1;
    if (cfg_open(&f, dir, "config.json", 0) < 0) {
        return -1;
    }
    rc = read_config(&f, cfg, rope);
    json_decref(f.root);
    if (rc != 0) {
        return -1;
    }

    f.root = NULL;
    rc = cfg_open(&f, dir, "generation_config.json", 1);
    if (rc <= 0) {
        return rc;
    }
    rc = (read_bos(&f, cfg) == 0 && read_eos(&f, cfg) == 0) ? 0 : -1;
    json_decref(f.root);
    return rc;
}


/* Llama 3.1's scaling: long wavelengths slowed by factor, short ones kept,
   a smooth blend between. */
static float
llama3_scale(float inv_freq, const pl_rope_scaling_t *r)
{
    double  old_ctx = r->original_max_position_embeddings;
    double  wavelen = 2.0 * M_PI / inv_freq;
    double  smooth;

    if (wavelen < old_ctx / r->high_freq_factor) {
        return inv_freq;
    }
    if (wavelen > old_ctx / r->low_freq_factor) {
        return inv_freq / r->factor;
    }
    smooth = (old_ctx / wavelen - r->low_freq_factor)
             / (r->high_freq_factor - r->low_freq_factor);
    return (float) ((1.0 - smooth) * inv_freq / r->factor
                    + smooth * inv_freq);
}


void
pl_rope_inv_freq(const pl_model_config_t *cfg,
    const pl_rope_scaling_t *rope, float *inv_freq)
{
    int  i;

    for (i = 0; i < cfg->head_dim / 2; i++) {
        float  f = (float) (1.0 / pow(cfg->rope_theta,
                                      (double) (2 * i) / cfg->head_dim));

        switch (rope->type) {
        case PL_ROPE_LINEAR:
            f /= rope->factor;
            break;
        case PL_ROPE_LLAMA3:
            f = llama3_scale(f, rope);
            break;
        case PL_ROPE_DEFAULT:
            break;
        }
        inv_freq[i] = f;
    }
}
