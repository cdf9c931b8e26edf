/*
 * model_config: config.json and generation_config.json of a Hugging Face
 * folder holding a Llama, Mistral, Qwen2 or OPT model.
 *
 * Required fields must be present and sane; optional ones take Hugging
 * Face's defaults for that architecture.  Anything that would change the
 * maths in a way the model does not implement (a sliding window, extra
 * biases, another activation, an unknown RoPE scaling, quantization, OPT's
 * embedding projection) is refused with the field's name rather than
 * silently ignored.  Both spellings transformers has written are read:
 * "rope_scaling" + "rope_theta" (v4) and "rope_parameters" (v5), "dtype"
 * and "torch_dtype".  RoPE scaling of type "linear" and "llama3" is kept in
 * pl_rope_scaling_t and folded into the frequencies on the host.
 */

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model_config.h"
#include "model_internal.h"
#include "pl_params.h"

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
cfg_bool(cfg_file_t *f, const char *key, int def, int *out)
{
    json_t  *v = json_object_get(f->root, key);

    if (cfg_absent(f, key)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        return cfg_fail(f, "field '%s' must be true or false", key);
    }
    *out = json_is_true(v);
    return 0;
}


/* a string field that, when present, must equal want */
static int
cfg_require_string(cfg_file_t *f, const char *key, const char *want)
{
    const char  *s = json_string_value(json_object_get(f->root, key));

    if (!cfg_absent(f, key) && (s == NULL || strcmp(s, want) != 0)) {
        return cfg_fail(f, "field '%s' is '%s', only '%s' is supported", key,
                        s ? s : "non-string", want);
    }
    return 0;
}


/* a boolean field that, when present, must equal want */
static int
cfg_require_bool(cfg_file_t *f, const char *key, int want)
{
    int  on;

    if (cfg_bool(f, key, want, &on) != 0) {
        return -1;
    }
    if (on != want) {
        return cfg_fail(f, "field '%s' is %s, which is not supported", key,
                        on ? "true" : "false");
    }
    return 0;
}


static int read_llama(cfg_file_t *f, pl_model_config_t *cfg,
    pl_arch_t *arch);
static int read_opt(cfg_file_t *f, pl_model_config_t *cfg, pl_arch_t *arch);


/* The registry: one line per architecture, found by config.json's
   architectures[0] (else its model_type), naming the family that loads
   and runs it (model_internal.h) and the reader of its config fields. */
static const struct {
    const char          *class_name;
    const char          *model_type;
    const pl_family_t   *family;
    int                (*read)(cfg_file_t *f, pl_model_config_t *cfg,
                               pl_arch_t *arch);
} pl_archs[] = {
    { "LlamaForCausalLM",   "llama",   &pl_family_llama, read_llama },
    { "MistralForCausalLM", "mistral", &pl_family_llama, read_llama },
    { "Qwen2ForCausalLM",   "qwen2",   &pl_family_llama, read_llama },
    { "OPTForCausalLM",     "opt",     &pl_family_opt,   read_opt },
};


/* architectures[0] when given, else model_type */
static int
read_arch(cfg_file_t *f, pl_model_config_t *cfg, pl_arch_t *arch,
    int (**read)(cfg_file_t *, pl_model_config_t *, pl_arch_t *))
{
    json_t      *archs = json_object_get(f->root, "architectures");
    const char  *name = json_string_value(json_array_get(archs, 0));
    const char  *type = json_string_value(json_object_get(f->root,
                                                          "model_type"));
    size_t       i;

    for (i = 0; i < sizeof(pl_archs) / sizeof(pl_archs[0]); i++) {
        if (name != NULL ? strcmp(name, pl_archs[i].class_name) == 0
                         : type != NULL
                           && strcmp(type, pl_archs[i].model_type) == 0)
        {
            snprintf(cfg->arch, sizeof(cfg->arch), "%s",
                     pl_archs[i].model_type);
            arch->family = pl_archs[i].family;
            *read = pl_archs[i].read;
            arch->qkv_bias = strcmp(cfg->arch, "qwen2") == 0;
            return 0;
        }
    }
    return cfg_fail(f, "architecture '%s' (model_type '%s') is not "
                    "supported: 'architectures' must name LlamaForCausalLM, "
                    "MistralForCausalLM, Qwen2ForCausalLM or OPTForCausalLM",
                    name ? name : "none", type ? type : "none");
}


static int
check_heads(cfg_file_t *f, pl_model_config_t *cfg)
{
    if (cfg->num_heads % cfg->num_kv_heads != 0) {
        return cfg_fail(f, "num_attention_heads %d is not a multiple of "
                        "num_key_value_heads %d", cfg->num_heads,
                        cfg->num_kv_heads);
    }
    if (cfg->head_dim < 2 || cfg->head_dim % 2 != 0) {
        return cfg_fail(f, "head_dim %d must be even and positive",
                        cfg->head_dim);
    }
    return 0;
}


static int
read_sizes_llama(cfg_file_t *f, pl_model_config_t *cfg)
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
    return check_heads(f, cfg);
}


/* OPT's names; heads split hidden_size, and no projection is allowed
   between the embeddings and the decoder (word_embed_proj_dim) */
static int
read_sizes_opt(cfg_file_t *f, pl_model_config_t *cfg)
{
    int  proj;

    if (cfg_int(f, "vocab_size", 1, 0, 1, &cfg->vocab_size) != 0
        || cfg_int(f, "hidden_size", 1, 0, 1, &cfg->hidden_size) != 0
        || cfg_int(f, "ffn_dim", 1, 0, 1, &cfg->intermediate_size) != 0
        || cfg_int(f, "num_hidden_layers", 1, 0, 1, &cfg->num_layers) != 0
        || cfg_int(f, "num_attention_heads", 1, 0, 1, &cfg->num_heads) != 0
        || cfg_int(f, "max_position_embeddings", 0, 2048, 1,
                   &cfg->max_position_embeddings) != 0
        || cfg_int(f, "word_embed_proj_dim", 0, cfg->hidden_size, 1,
                   &proj) != 0)
    {
        return -1;
    }
    if (proj != cfg->hidden_size) {
        return cfg_fail(f, "field 'word_embed_proj_dim' is %d, not "
                        "hidden_size %d: the embedding projection "
                        "(project_in/project_out) is not supported", proj,
                        cfg->hidden_size);
    }
    if (cfg->hidden_size % cfg->num_heads != 0) {
        return cfg_fail(f, "hidden_size %d is not a multiple of "
                        "num_attention_heads %d", cfg->hidden_size,
                        cfg->num_heads);
    }
    cfg->num_kv_heads = cfg->num_heads;
    cfg->head_dim = cfg->hidden_size / cfg->num_heads;
    return check_heads(f, cfg);
}


/* "dtype" (transformers 5) or "torch_dtype" (4) */
static int
read_dtype(cfg_file_t *f, pl_model_config_t *cfg, pl_arch_t *arch)
{
    const char  *key = cfg_absent(f, "dtype") ? "torch_dtype" : "dtype";
    const char  *s = json_string_value(json_object_get(f->root, key));

    cfg->dtype = PL_DT_BF16;
    arch->dtype_given = !cfg_absent(f, key);
    if (!arch->dtype_given) {
        return 0;
    }
    if (s != NULL && strcmp(s, "float32") == 0) {
        cfg->dtype = PL_DT_F32;
    } else if (s != NULL && strcmp(s, "float16") == 0) {
        cfg->dtype = PL_DT_F16;
    } else if (s == NULL || strcmp(s, "bfloat16") != 0) {
        return cfg_fail(f, "field '%s' is '%s', which is not supported "
                        "(float32, float16 and bfloat16 are)", key,
                        s ? s : "non-string");
    }
    return 0;
}


/* every entry of layer_types (transformers 5) must be full attention */
static int
refuse_sliding_layers(cfg_file_t *f)
{
    json_t  *types = json_object_get(f->root, "layer_types");
    json_t  *t;
    size_t   i;

    if (cfg_absent(f, "layer_types")) {
        return 0;
    }
    if (!json_is_array(types)) {
        return cfg_fail(f, "field 'layer_types' must be an array");
    }
    json_array_foreach(types, i, t) {
        if (!json_is_string(t)
            || strcmp(json_string_value(t), "full_attention") != 0)
        {
            return cfg_fail(f, "field 'layer_types' has '%s' for layer %zu; "
                            "only 'full_attention' is supported",
                            json_is_string(t) ? json_string_value(t)
                                              : "non-string", i);
        }
    }
    return 0;
}


/* Options of the Llama family that would change the maths. */
static int
refuse_llama_options(cfg_file_t *f, const pl_model_config_t *cfg)
{
    int  qwen2 = strcmp(cfg->arch, "qwen2") == 0;

    if (qwen2) {
        if (cfg_require_bool(f, "use_sliding_window", 0) != 0) {
            return -1;
        }
    } else if (!cfg_absent(f, "sliding_window")) {
        return cfg_fail(f, "field 'sliding_window' is set, which is not "
                        "supported");
    }
    if (!qwen2 && (cfg_require_bool(f, "attention_bias", 0) != 0
                   || cfg_require_bool(f, "mlp_bias", 0) != 0))
    {
        return -1;
    }
    if (!cfg_absent(f, "partial_rotary_factor")) {
        return cfg_fail(f, "field 'partial_rotary_factor' is set, which is "
                        "not supported");
    }
    return cfg_require_string(f, "hidden_act", "silu") != 0
           ? -1 : refuse_sliding_layers(f);
}


static int
read_opt_options(cfg_file_t *f, pl_arch_t *arch)
{
    int  remove_final;

    if (cfg_require_string(f, "activation_function", "relu") != 0
        || cfg_require_bool(f, "enable_bias", 1) != 0
        || cfg_require_bool(f, "layer_norm_elementwise_affine", 1) != 0
        || cfg_bool(f, "do_layer_norm_before", 1, &arch->norm_before) != 0
        || cfg_bool(f, "_remove_final_layer_norm", 0, &remove_final) != 0)
    {
        return -1;
    }
    arch->final_norm = arch->norm_before && !remove_final;
    arch->layer_norm_eps = 1e-5f;       /* torch.nn.LayerNorm's default */
    return 0;
}


/* rope_parameters (v5) or rope_scaling (v4) into arch->rope */
static int
read_rope_scaling(cfg_file_t *f, const pl_model_config_t *cfg,
    pl_rope_scaling_t *rope)
{
    const char  *key = cfg_absent(f, "rope_parameters") ? "rope_scaling"
                                                        : "rope_parameters";
    json_t      *rs = json_object_get(f->root, key);
    const char  *type;
    json_t      *omax;

    memset(rope, 0, sizeof(*rope));
    rope->type = PL_ROPE_DEFAULT;
    if (cfg_absent(f, key)) {
        return 0;
    }
    if (!json_is_object(rs)) {
        return cfg_fail(f, "field '%s' must be an object or null", key);
    }
    if (json_object_get(rs, "partial_rotary_factor") != NULL) {
        return cfg_fail(f, "field '%s' sets partial_rotary_factor, which is "
                        "not supported", key);
    }
    type = json_string_value(json_object_get(rs, "rope_type"));
    if (type == NULL) {
        type = json_string_value(json_object_get(rs, "type"));
    }
    if (type == NULL && strcmp(key, "rope_parameters") == 0) {
        type = "default";
    }
    if (type != NULL && strcmp(type, "default") == 0) {
        return 0;
    }
    if (type == NULL || (strcmp(type, "linear") != 0
                         && strcmp(type, "llama3") != 0))
    {
        return cfg_fail(f, "field '%s' has type '%s', which is not "
                        "supported (default, linear and llama3 are)", key,
                        type ? type : "none");
    }
    if (json_object_get(rs, "factor") == NULL) {
        return cfg_fail(f, "field '%s' has no 'factor'", key);
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
        return cfg_fail(f, "field '%s' needs high_freq_factor > "
                        "low_freq_factor and a positive "
                        "original_max_position_embeddings", key);
    }
    return 0;
}


/* rope_parameters.rope_theta (v5), else rope_theta (v4), else 10000 */
static int
read_rope_theta(cfg_file_t *f, pl_model_config_t *cfg)
{
    json_t  *rp = json_object_get(f->root, "rope_parameters");

    if (json_is_object(rp) && json_object_get(rp, "rope_theta") != NULL) {
        return cfg_float(f, rp, "rope_theta", 10000.0f, &cfg->rope_theta);
    }
    return cfg_float(f, f->root, "rope_theta", 10000.0f, &cfg->rope_theta);
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


/* a number in [lo, hi] into *out, left alone when absent */
static int
cfg_range(cfg_file_t *f, const char *key, double lo, double hi, float *out)
{
    json_t  *v = json_object_get(f->root, key);

    if (cfg_absent(f, key)) {
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) >= lo)
        || !(json_number_value(v) <= hi))
    {
        return cfg_fail(f, "field '%s' must be a number from %g to %g", key,
                        lo, hi);
    }
    *out = (float) json_number_value(v);
    return 0;
}


/* temperature, top_p and top_k: the defaults a request may override,
   within the ranges a request has (pl_params.h) */
static int
read_sampling(cfg_file_t *f, pl_model_config_t *cfg)
{
    float              top_k = -1.0f;
    const pl_param_t  *t = pl_param(PL_P_temperature);
    const pl_param_t  *p = pl_param(PL_P_top_p);

    if (cfg_range(f, "temperature", t->lo, t->hi, &cfg->default_temperature)
        != 0
        || cfg_range(f, "top_p", p->lo, p->hi, &cfg->default_top_p) != 0
        || cfg_range(f, "top_k", 0.0, PL_CFG_MAX_DIM, &top_k) != 0)
    {
        return -1;
    }
    if (!cfg_absent(f, "top_k")
        && !json_is_integer(json_object_get(f->root, "top_k")))
    {
        return cfg_fail(f, "field 'top_k' must be an integer");
    }
    cfg->default_top_k = (int) top_k;
    return 0;
}


static int
read_llama(cfg_file_t *f, pl_model_config_t *cfg, pl_arch_t *arch)
{
    return read_sizes_llama(f, cfg) != 0
           || refuse_llama_options(f, cfg) != 0
           || read_rope_scaling(f, cfg, &arch->rope) != 0
           || read_rope_theta(f, cfg) != 0
           || cfg_float(f, f->root, "rms_norm_eps", 1e-6f,
                        &cfg->rms_norm_eps) != 0
           || cfg_bool(f, "tie_word_embeddings", 0,
                       &cfg->tie_word_embeddings) != 0 ? -1 : 0;
}


static int
read_opt(cfg_file_t *f, pl_model_config_t *cfg, pl_arch_t *arch)
{
    return read_sizes_opt(f, cfg) != 0 || read_opt_options(f, arch) != 0
           || cfg_bool(f, "tie_word_embeddings", 1,
                       &cfg->tie_word_embeddings) != 0 ? -1 : 0;
}


static int
read_config(cfg_file_t *f, pl_model_config_t *cfg, pl_arch_t *arch)
{
    int  (*read)(cfg_file_t *, pl_model_config_t *, pl_arch_t *) = NULL;

    if (read_arch(f, cfg, arch, &read) != 0
        || read_dtype(f, cfg, arch) != 0)
    {
        return -1;
    }
    if (!cfg_absent(f, "quantization_config")) {
        return cfg_fail(f, "field 'quantization_config' is set: quantized "
                        "checkpoints are not supported");
    }
    if (read(f, cfg, arch) != 0) {
        return -1;
    }
    return read_bos(f, cfg) != 0 || read_eos(f, cfg) != 0 ? -1 : 0;
}


int
pl_model_config_read(const char *dir, pl_model_config_t *cfg,
    pl_arch_t *arch, char *err, size_t errlen)
{
    cfg_file_t  f = { .err = err, .errlen = errlen };
    int         rc;

    memset(cfg, 0, sizeof(*cfg));
    memset(arch, 0, sizeof(*arch));
    cfg->bos_token_id = -1;
    cfg->default_temperature = -1.0f;
    cfg->default_top_p = -1.0f;
    cfg->default_top_k = -1;
    if (cfg_open(&f, dir, "config.json", 0) < 0) {
        return -1;
    }
    rc = read_config(&f, cfg, arch);
    json_decref(f.root);
    if (rc != 0) {
        return -1;
    }

    f.root = NULL;
    rc = cfg_open(&f, dir, "generation_config.json", 1);
    if (rc <= 0) {
        return rc;
    }
    rc = (read_bos(&f, cfg) == 0 && read_eos(&f, cfg) == 0
          && read_sampling(&f, cfg) == 0) ? 0 : -1;
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
