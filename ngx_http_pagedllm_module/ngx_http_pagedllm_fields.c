
/*
 * ngx_http_pagedllm_fields: the fields of a request body, a table per
 * endpoint and one for the fields both take, and the parser of each: the
 * prompt (text, or token ids checked against the vocabulary), the
 * conversation, sampling parameters, stop strings, logit_bias, vLLM's
 * extras.  A sampling parameter takes its type, range and default from its
 * row of PL_PARAMS (proto/pl_params.h), the one definition the engine
 * checks against too.  A field that means nothing here, or asks for what
 * is not here, is still checked for its documented JSON type, and only
 * the values that ask for nothing are accepted (ngx_http_pagedllm_typed_t).
 * POST /tokenize (a prompt or a conversation) and /detokenize (token ids)
 * have tables of their own and take none of the common fields.
 */


#include "ngx_http_pagedllm_module.h"
#include "ngx_http_pagedllm_request.h"
#include "ngx_http_pagedllm_guided.h"
#include "ngx_http_pagedllm_tools.h"

#include <jansson.h>
#include <math.h>


static ngx_int_t ngx_http_pagedllm_f_model(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_prompt(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_prompt_text(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_prompt_batch(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_prompt_ids(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_token_ids(ngx_http_pagedllm_parse_t *ps,
    json_t *v, const char *what, int32_t **out);
static ngx_int_t ngx_http_pagedllm_f_flag(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static void ngx_http_pagedllm_number_text(double d, u_char *buf,
    size_t len);
static ngx_int_t ngx_http_pagedllm_f_param(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_seed(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stream(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_early_stopping(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stream_options(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_typed(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_unsupported(ngx_http_pagedllm_parse_t *ps);
static ngx_int_t ngx_http_pagedllm_f_metadata(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_modalities(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_template_kwargs(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_truncate(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_skip_special(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_continue_final(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_keep_stop(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_echo(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_prompt_logprobs(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_logit_bias(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stop(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_stop_token_ids(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_messages(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_text(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_tokens(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_add_special(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_f_add_generation_prompt(
    ngx_http_pagedllm_parse_t *ps, json_t *v);
static ngx_int_t ngx_http_pagedllm_integral(json_t *v, json_int_t *out);


/* where each row of PL_PARAMS goes in the parameters */
#define NGX_HTTP_PAGEDLLM_OFFSET(name, ...)                                  \
    offsetof(ngx_http_pagedllm_params_t, name),

static size_t  ngx_http_pagedllm_param_offsets[] = {
    PL_PARAMS(NGX_HTTP_PAGEDLLM_OFFSET)
};

#define NGX_HTTP_PAGEDLLM_PARAM(name)                                        \
    ngx_http_pagedllm_f_param, PL_P_##name

static uint32_t  ngx_http_pagedllm_ignore_eos = PL_SUBMIT_IGNORE_EOS;
static uint32_t  ngx_http_pagedllm_want_logprobs = PL_SUBMIT_LOGPROBS;
static uint32_t  ngx_http_pagedllm_use_beam_search = PL_SUBMIT_BEAM_SEARCH;


/* Fields read for their JSON type only: what each must be, and the values
   that ask for nothing (any, where neutral is NULL). */
#define NGX_HTTP_PAGEDLLM_J(t)     (1u << (t))
#define NGX_HTTP_PAGEDLLM_J_BOOL                                             \
    (NGX_HTTP_PAGEDLLM_J(JSON_TRUE) | NGX_HTTP_PAGEDLLM_J(JSON_FALSE))

static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_any_bool =
    { NGX_HTTP_PAGEDLLM_J_BOOL, "a boolean", NULL, NULL };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_any_string =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING), "a string", NULL, NULL };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_any_object =
    { NGX_HTTP_PAGEDLLM_J(JSON_OBJECT), "an object", NULL, NULL };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_only_true =
    { NGX_HTTP_PAGEDLLM_J_BOOL, "a boolean", "[true]",
      "decoding leaves no spaces out between special tokens" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_empty_array =
    { NGX_HTTP_PAGEDLLM_J(JSON_ARRAY), "an array", "[[]]", NULL };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_empty_string =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING), "a string", "[\"\"]",
      "fill-in-the-middle is not implemented" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_no_choice =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING) | NGX_HTTP_PAGEDLLM_J(JSON_OBJECT),
      "a string or an object", "[\"none\"]", NULL };

/* what is refused, with the reason */
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_priority =
    { NGX_HTTP_PAGEDLLM_J(JSON_INTEGER), "an integer", "[0]",
      "requests are scheduled first come, first served" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_allowed_ids =
    { NGX_HTTP_PAGEDLLM_J(JSON_ARRAY), "an array", "[]",
      "the sampler takes no list of allowed tokens" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_bad_words =
    { NGX_HTTP_PAGEDLLM_J(JSON_ARRAY), "an array", "[[]]",
      "bad word lists are not implemented" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_processors =
    { NGX_HTTP_PAGEDLLM_J(JSON_ARRAY), "an array", "[[]]",
      "a request runs no code of its own" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_token_ids_out =
    { NGX_HTTP_PAGEDLLM_J_BOOL, "a boolean", "[false]",
      "the output is text" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_request_id =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING), "a string", "[]",
      "the server names each request (its id and X-Request-Id)" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_cache_salt =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING), "a string", "[]",
      "the prefix cache is not salted per request" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_kv_transfer =
    { NGX_HTTP_PAGEDLLM_J(JSON_OBJECT), "an object", "[]",
      "there is no disaggregated prefill" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_xargs =
    { NGX_HTTP_PAGEDLLM_J(JSON_OBJECT), "an object", "[{}]",
      "no extension reads extra arguments" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_prompt_embeds =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING) | NGX_HTTP_PAGEDLLM_J(JSON_ARRAY),
      "a string or an array", "[]",
      "prompts are text or token ids, not embeddings" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_chat_echo =
    { NGX_HTTP_PAGEDLLM_J_BOOL, "a boolean", "[false]",
      "chat does not echo the last message" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_documents =
    { NGX_HTTP_PAGEDLLM_J(JSON_ARRAY), "an array", "[[]]",
      "documents are not passed to the chat template" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_chat_template =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING), "a string", "[]",
      "the model's own chat template is the one rendered" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_mm_kwargs =
    { NGX_HTTP_PAGEDLLM_J(JSON_OBJECT), "an object", "[{}]",
      "the served models take text only" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_audio =
    { NGX_HTTP_PAGEDLLM_J(JSON_OBJECT), "an object", "[]",
      "the served models answer in text only" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_web_search =
    { NGX_HTTP_PAGEDLLM_J(JSON_OBJECT), "an object", "[]",
      "the server does not search the web" };
static ngx_http_pagedllm_typed_t  ngx_http_pagedllm_verbosity =
    { NGX_HTTP_PAGEDLLM_J(JSON_STRING), "a string", "[]",
      "the served models have no verbosity control" };

#define NGX_HTTP_PAGEDLLM_TYPED(t)                                           \
    ngx_http_pagedllm_f_typed, -1, &ngx_http_pagedllm_##t


/* The fields both endpoints take, after the endpoint's own. */
ngx_http_pagedllm_field_t  ngx_http_pagedllm_common_fields[] = {
    { "model", ngx_http_pagedllm_f_model, -1, NULL },
    { "max_tokens", NGX_HTTP_PAGEDLLM_PARAM(max_tokens), NULL },
    { "temperature", NGX_HTTP_PAGEDLLM_PARAM(temperature), NULL },
    { "top_p", NGX_HTTP_PAGEDLLM_PARAM(top_p), NULL },
    { "top_k", NGX_HTTP_PAGEDLLM_PARAM(top_k), NULL },
    { "seed", ngx_http_pagedllm_f_seed, -1, NULL },
    { "n", NGX_HTTP_PAGEDLLM_PARAM(n), NULL },
    { "stream", ngx_http_pagedllm_f_stream, -1, NULL },
    { "stream_options", ngx_http_pagedllm_f_stream_options, -1, NULL },
    { "ignore_eos", ngx_http_pagedllm_f_flag, -1,
      &ngx_http_pagedllm_ignore_eos },
    { "user", NGX_HTTP_PAGEDLLM_TYPED(any_string) },
    { "stop", ngx_http_pagedllm_f_stop, -1, NULL },
    { "logit_bias", ngx_http_pagedllm_f_logit_bias, -1, NULL },
    { "presence_penalty", NGX_HTTP_PAGEDLLM_PARAM(presence_penalty), NULL },
    { "frequency_penalty", NGX_HTTP_PAGEDLLM_PARAM(frequency_penalty),
      NULL },
    { "min_p", NGX_HTTP_PAGEDLLM_PARAM(min_p), NULL },
    { "repetition_penalty", NGX_HTTP_PAGEDLLM_PARAM(repetition_penalty),
      NULL },
    { "min_tokens", NGX_HTTP_PAGEDLLM_PARAM(min_tokens), NULL },
    { "stop_token_ids", ngx_http_pagedllm_f_stop_token_ids, -1, NULL },
    { "use_beam_search", ngx_http_pagedllm_f_flag, -1,
      &ngx_http_pagedllm_use_beam_search },
    { "length_penalty", NGX_HTTP_PAGEDLLM_PARAM(length_penalty), NULL },
    { "early_stopping", ngx_http_pagedllm_f_early_stopping, -1, NULL },
    { "truncate_prompt_tokens", ngx_http_pagedllm_f_truncate, -1, NULL },
    { "skip_special_tokens", ngx_http_pagedllm_f_skip_special, -1, NULL },
    { "spaces_between_special_tokens", NGX_HTTP_PAGEDLLM_TYPED(only_true) },
    { "include_stop_str_in_output", ngx_http_pagedllm_f_keep_stop, -1,
      NULL },
    { "response_format", ngx_http_pagedllm_guided_response_format, -1,
      NULL },
    { "guided_json", ngx_http_pagedllm_guided_field, -1, NULL },
    { "guided_regex", ngx_http_pagedllm_guided_field, -1, NULL },
    { "guided_choice", ngx_http_pagedllm_guided_field, -1, NULL },
    { "guided_grammar", ngx_http_pagedllm_guided_field, -1, NULL },
    { "add_special_tokens", ngx_http_pagedllm_f_add_special, -1, NULL },
    { "priority", NGX_HTTP_PAGEDLLM_TYPED(priority) },
    { "allowed_token_ids", NGX_HTTP_PAGEDLLM_TYPED(allowed_ids) },
    { "prompt_logprobs", ngx_http_pagedllm_f_prompt_logprobs, -1, NULL },
    { "bad_words", NGX_HTTP_PAGEDLLM_TYPED(bad_words) },
    { "logits_processors", NGX_HTTP_PAGEDLLM_TYPED(processors) },
    { "return_tokens_as_token_ids", NGX_HTTP_PAGEDLLM_TYPED(token_ids_out) },
    { "return_token_ids", NGX_HTTP_PAGEDLLM_TYPED(token_ids_out) },
    { "request_id", NGX_HTTP_PAGEDLLM_TYPED(request_id) },
    { "cache_salt", NGX_HTTP_PAGEDLLM_TYPED(cache_salt) },
    { "kv_transfer_params", NGX_HTTP_PAGEDLLM_TYPED(kv_transfer) },
    { "vllm_xargs", NGX_HTTP_PAGEDLLM_TYPED(xargs) },
    { NULL, NULL, -1, NULL }
};


/* /v1/completions: a prompt; logprobs is the number of top entries */
static ngx_http_pagedllm_field_t  ngx_http_pagedllm_completion_fields[] = {
    { "prompt", ngx_http_pagedllm_f_prompt, -1, NULL },
    { "best_of", NGX_HTTP_PAGEDLLM_PARAM(best_of), NULL },
    { "logprobs", NGX_HTTP_PAGEDLLM_PARAM(logprobs),
      &ngx_http_pagedllm_want_logprobs },
    { "echo", ngx_http_pagedllm_f_echo, -1, NULL },
    { "suffix", NGX_HTTP_PAGEDLLM_TYPED(empty_string) },
    { "prompt_embeds", NGX_HTTP_PAGEDLLM_TYPED(prompt_embeds) },
    { NULL, NULL, -1, NULL }
};


/* /v1/chat/completions: messages; logprobs a boolean and top_logprobs
   the number of top entries */
static ngx_http_pagedllm_field_t  ngx_http_pagedllm_chat_fields[] = {
    { "messages", ngx_http_pagedllm_f_messages, -1, NULL },
    { "max_completion_tokens", NGX_HTTP_PAGEDLLM_PARAM(max_tokens), NULL },
    { "logprobs", ngx_http_pagedllm_f_flag, -1,
      &ngx_http_pagedllm_want_logprobs },
    { "top_logprobs", NGX_HTTP_PAGEDLLM_PARAM(logprobs), NULL },
    { "tools", ngx_http_pagedllm_tools_field, -1, NULL },
    { "tool_choice", ngx_http_pagedllm_tools_field, -1, NULL },
    { "parallel_tool_calls", ngx_http_pagedllm_tools_field, -1, NULL },
    { "functions", NGX_HTTP_PAGEDLLM_TYPED(empty_array) },
    { "function_call", NGX_HTTP_PAGEDLLM_TYPED(no_choice) },
    { "modalities", ngx_http_pagedllm_f_modalities, -1, NULL },
    { "prediction", NGX_HTTP_PAGEDLLM_TYPED(any_object) },
    { "reasoning_effort", NGX_HTTP_PAGEDLLM_TYPED(any_string) },
    { "store", NGX_HTTP_PAGEDLLM_TYPED(any_bool) },
    { "metadata", ngx_http_pagedllm_f_metadata, -1, NULL },
    { "service_tier", NGX_HTTP_PAGEDLLM_TYPED(any_string) },
    { "safety_identifier", NGX_HTTP_PAGEDLLM_TYPED(any_string) },
    { "prompt_cache_key", NGX_HTTP_PAGEDLLM_TYPED(any_string) },
    { "add_generation_prompt", ngx_http_pagedllm_f_add_generation_prompt,
      -1, NULL },
    { "continue_final_message", ngx_http_pagedllm_f_continue_final, -1,
      NULL },
    { "chat_template_kwargs", ngx_http_pagedllm_f_template_kwargs, -1,
      NULL },
    { "echo", NGX_HTTP_PAGEDLLM_TYPED(chat_echo) },
    { "documents", NGX_HTTP_PAGEDLLM_TYPED(documents) },
    { "chat_template", NGX_HTTP_PAGEDLLM_TYPED(chat_template) },
    { "mm_processor_kwargs", NGX_HTTP_PAGEDLLM_TYPED(mm_kwargs) },
    { "audio", NGX_HTTP_PAGEDLLM_TYPED(audio) },
    { "web_search_options", NGX_HTTP_PAGEDLLM_TYPED(web_search) },
    { "verbosity", NGX_HTTP_PAGEDLLM_TYPED(verbosity) },
    { NULL, NULL, -1, NULL }
};


/* indexed by params.chat */
ngx_http_pagedllm_api_t  ngx_http_pagedllm_apis[] = {
    { ngx_http_pagedllm_completion_fields, "prompt", 0 },
    { ngx_http_pagedllm_chat_fields, "messages", 1 }
};


/* POST /tokenize, vLLM's two forms: a prompt (text only), or a
   conversation; then /detokenize */
ngx_http_pagedllm_field_t  ngx_http_pagedllm_tokenize_fields[] = {
    { "model", ngx_http_pagedllm_f_model, -1, NULL },
    { "prompt", ngx_http_pagedllm_f_text, -1, NULL },
    { "add_special_tokens", ngx_http_pagedllm_f_add_special, -1, NULL },
    { NULL, NULL, -1, NULL }
};

ngx_http_pagedllm_field_t  ngx_http_pagedllm_tokenize_chat_fields[] = {
    { "model", ngx_http_pagedllm_f_model, -1, NULL },
    { "messages", ngx_http_pagedllm_f_messages, -1, NULL },
    { "add_generation_prompt", ngx_http_pagedllm_f_add_generation_prompt,
      -1, NULL },
    { "add_special_tokens", ngx_http_pagedllm_f_add_special, -1, NULL },
    { NULL, NULL, -1, NULL }
};

ngx_http_pagedllm_field_t  ngx_http_pagedllm_detokenize_fields[] = {
    { "model", ngx_http_pagedllm_f_model, -1, NULL },
    { "tokens", ngx_http_pagedllm_f_tokens, -1, NULL },
    { NULL, NULL, -1, NULL }
};


static ngx_int_t
ngx_http_pagedllm_type_error(ngx_http_pagedllm_parse_t *ps, const char *what)
{
    ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                ps->field->name, "'%s' must be %s",
                                ps->field->name, what);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_pagedllm_f_model(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_engine_t  *engine = ps->engine;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_string(v)) {
        return ngx_http_pagedllm_type_error(ps, "a string");
    }

    if (json_string_length(v) != engine->model.len
        || ngx_strncmp(json_string_value(v), engine->model.data,
                       engine->model.len) != 0)
    {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_NOT_FOUND, "model",
                                    "The model `%s` does not exist",
                                    json_string_value(v));
        err->code = "model_not_found";
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_prompt(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_t                     *first;
    ngx_http_pagedllm_error_t  *err = ps->err;

    if (json_is_string(v)) {
        return ngx_http_pagedllm_prompt_text(ps, v);
    }

    if (!json_is_array(v) || json_array_size(v) == 0) {
        return ngx_http_pagedllm_type_error(ps,
                   "a string, an array of token ids, or an array of "
                   "either");
    }

    first = json_array_get(v, 0);

    if (json_is_number(first)) {
        return ngx_http_pagedllm_prompt_ids(ps, v);
    }

    if (json_array_size(v) > NGX_HTTP_PAGEDLLM_MAX_PROMPTS) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "prompt",
                                    "'prompt' holds %uz prompts, more than "
                                    "the %d a request may batch",
                                    json_array_size(v),
                                    NGX_HTTP_PAGEDLLM_MAX_PROMPTS);
        return NGX_ERROR;
    }

    if (json_array_size(v) > 1) {
        return ngx_http_pagedllm_prompt_batch(ps, v);
    }

    if (json_is_string(first)) {
        return ngx_http_pagedllm_prompt_text(ps, first);
    }

    if (json_is_array(first) && json_array_size(first) > 0) {
        return ngx_http_pagedllm_prompt_ids(ps, first);
    }

    return ngx_http_pagedllm_type_error(ps,
               "a string, an array of token ids, or an array of either");
}


/*
 * Batched prompts: every element a string, or every element a non-empty
 * array of token ids; each becomes a part, tokenized (a string) and run
 * as a request of its own.
 */
static ngx_int_t
ngx_http_pagedllm_prompt_batch(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t                       i;
    json_t                      *e;
    ngx_uint_t                   text;
    ngx_http_pagedllm_part_t    *part;
    ngx_http_pagedllm_params_t  *p = ps->params;

    p->n_parts = json_array_size(v);
    p->parts = ngx_pcalloc(ps->pool,
                           p->n_parts * sizeof(ngx_http_pagedllm_part_t));
    if (p->parts == NULL) {
        return NGX_ERROR;
    }

    text = json_is_string(json_array_get(v, 0));

    json_array_foreach(v, i, e) {
        part = &p->parts[i];

        if (text && json_is_string(e)) {
            if (ngx_http_pagedllm_prompt_text(ps, e) != NGX_OK) {
                return NGX_ERROR;
            }
            part->text = p->text;
            part->text_len = p->text_len;
            continue;
        }

        if (text || !json_is_array(e) || json_array_size(e) == 0) {
            return ngx_http_pagedllm_type_error(ps,
                       "a string, an array of token ids, or an array of "
                       "either (all strings or all arrays of token ids)");
        }

        if (ngx_http_pagedllm_prompt_ids(ps, e) != NGX_OK) {
            return NGX_ERROR;
        }
        part->ids = p->prompt;
        part->n_ids = p->n_prompt;
    }

    p->text = NULL;
    p->text_len = 0;
    p->prompt = NULL;
    p->n_prompt = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_prompt_text(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t       len;
    const char  *s;

    s = json_string_value(v);
    len = json_string_length(v);

    if (!pl_utf8_valid(s, len)) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, "prompt",
                                    "'prompt' is not valid UTF-8");
        return NGX_ERROR;
    }

    ps->params->text = (u_char *) s;
    ps->params->text_len = len;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_prompt_ids(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (ngx_http_pagedllm_token_ids(ps, v, "a string, an array of token ids, "
                                    "or a one-element array of either",
                                    &p->prompt)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p->n_prompt = json_array_size(v);

    return NGX_OK;
}


/* The ids of an array checked against the vocabulary; what: the field's
   type, for the error an element that is no integer gets. */
static ngx_int_t
ngx_http_pagedllm_token_ids(ngx_http_pagedllm_parse_t *ps, json_t *v,
    const char *what, int32_t **out)
{
    size_t       i;
    json_t      *e;
    int32_t     *ids;
    json_int_t   id;
    const char  *name;

    ids = ngx_palloc(ps->pool, json_array_size(v) * sizeof(int32_t) + 1);
    if (ids == NULL) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    name = ps->field->name;

    json_array_foreach(v, i, e) {
        if (ngx_http_pagedllm_integral(e, &id) != NGX_OK) {
            return ngx_http_pagedllm_type_error(ps, what);
        }

        if (id < 0 || id >= (json_int_t) ps->engine->vocab_size) {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, name,
                                        "Token id %L in '%s' is out of "
                                        "vocabulary (0..%uD)", (int64_t) id,
                                        name, ps->engine->vocab_size - 1);
            return NGX_ERROR;
        }

        ids[i] = (int32_t) id;
    }

    *out = ids;

    return NGX_OK;
}


/*
 * A sampling parameter: its type and range from its row of PL_PARAMS (an
 * integral number such as 2.0 is an integer).  A negative integer, top_k's
 * -1, is "off" and goes on as 0.  post: a PL_SUBMIT_* flag it sets too.
 */
static ngx_int_t
ngx_http_pagedllm_f_param(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    u_char             got[32];
    double             d, ctx, vocab;
    uint32_t          *flag;
    const char        *name;
    const pl_param_t  *row;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    row = pl_param(ps->field->param);
    name = ps->field->name;
    d = json_number_value(v);

    if (!json_is_number(v) || (row->type == PL_PARAM_INT && d != floor(d)))
    {
        return ngx_http_pagedllm_type_error(ps, row->type == PL_PARAM_INT
                                                ? "an integer" : "a number");
    }

    ctx = ps->engine->max_model_len;
    vocab = ps->engine->vocab_size;

    if (!pl_param_in_range(row, d, ctx, vocab)) {

        ngx_http_pagedllm_number_text(d, got, sizeof(got));

        if (row->type == PL_PARAM_INT) {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, name,
                                        "'%s' must be an integer from %L to "
                                        "%L, got %s", name,
                                        (int64_t) row->lo,
                                        (int64_t) pl_param_hi(row, ctx,
                                                              vocab), got);
        } else {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST, name,
                                        "'%s' must be in %s%.1f, %.1f], got "
                                        "%s", name,
                                        row->open_lo ? "(" : "[", row->lo,
                                        row->hi, got);
        }

        return NGX_ERROR;
    }

    ngx_http_pagedllm_param_set(ps->params, ps->field->param, d);

    flag = ps->field->post;

    if (flag) {
        ps->params->flags |= *flag;
    }

    return NGX_OK;
}


/* Parameter id set to v, in its type; negative integers are 0 ("off"). */
void
ngx_http_pagedllm_param_set(ngx_http_pagedllm_params_t *p, pl_param_id_t id,
    double v)
{
    u_char  *slot;

    slot = (u_char *) p + ngx_http_pagedllm_param_offsets[id];

    if (pl_param(id)->type == PL_PARAM_FLOAT) {
        *(float *) slot = (float) v;

    } else {
        *(uint32_t *) slot = v < 0 ? 0 : (uint32_t) v;
    }
}


static ngx_int_t
ngx_http_pagedllm_f_seed(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_int_t                   seed;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (ngx_http_pagedllm_integral(v, &seed) != NGX_OK) {
        return ngx_http_pagedllm_type_error(ps, "an integer");
    }

    p->seed = (uint64_t) seed;
    p->flags |= PL_SUBMIT_HAS_SEED;

    return NGX_OK;
}


/* v as an integer: a JSON integer, or a number with no fractional part
   (2.0 is 2) within an int64's range; NGX_ERROR for anything else. */
static ngx_int_t
ngx_http_pagedllm_integral(json_t *v, json_int_t *out)
{
    double  d;

    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return NGX_OK;
    }

    if (!json_is_real(v)) {
        return NGX_ERROR;
    }

    d = json_real_value(v);

    if (d != floor(d) || d < -0x1p63 || d >= 0x1p63) {
        return NGX_ERROR;
    }

    *out = (json_int_t) d;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_bool(ngx_http_pagedllm_parse_t *ps, json_t *v,
    ngx_uint_t *out)
{
    if (json_is_null(v)) {
        *out = 0;
        return NGX_OK;
    }

    if (!json_is_boolean(v)) {
        return ngx_http_pagedllm_type_error(ps, "a boolean");
    }

    *out = json_is_true(v);

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stream(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_uint_t                   b;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    p->stream = b;

    return NGX_OK;
}


/* early_stopping: true, false or "never" */
static ngx_int_t
ngx_http_pagedllm_f_early_stopping(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (json_is_string(v) && ngx_strcmp(json_string_value(v), "never") == 0)
    {
        p->early_stopping = PL_EARLY_STOPPING_NEVER;
        return NGX_OK;
    }

    if (!json_is_boolean(v) && !json_is_null(v)) {
        return ngx_http_pagedllm_type_error(ps, "true, false or \"never\"");
    }

    p->early_stopping = json_is_true(v) ? PL_EARLY_STOPPING_TRUE
                                        : PL_EARLY_STOPPING_FALSE;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stream_options(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_t                      *e;
    ngx_uint_t                   b;
    const char                  *key;
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return ngx_http_pagedllm_type_error(ps, "an object");
    }

    json_object_foreach(v, key, e) {
        if (ngx_strcmp(key, "include_usage") != 0) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "stream_options",
                                        "Unrecognized stream option: %s",
                                        key);
            return NGX_ERROR;
        }

        if (ngx_http_pagedllm_bool(ps, e, &b) != NGX_OK) {
            return NGX_ERROR;
        }

        p->include_usage = b;
    }

    return NGX_OK;
}


/* A boolean that, true, sets the PL_SUBMIT_* flag post points to. */
static ngx_int_t
ngx_http_pagedllm_f_flag(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    uint32_t                    *flag;
    ngx_uint_t                   b;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    flag = ps->field->post;

    if (b) {
        p->flags |= *flag;
    }

    return NGX_OK;
}


/*
 * A field read for its JSON type (ps->field->post: what it must be): null
 * or a value that asks for nothing is accepted; any other value of its
 * type asks for what is not here, and is refused by name.
 */
static ngx_int_t
ngx_http_pagedllm_f_typed(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t                      i;
    json_t                     *neutral, *e;
    ngx_http_pagedllm_typed_t  *t = ps->field->post;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!(t->types & NGX_HTTP_PAGEDLLM_J(json_typeof(v)))) {
        return ngx_http_pagedllm_type_error(ps, t->what);
    }

    if (t->neutral == NULL) {
        return NGX_OK;
    }

    neutral = ngx_http_pagedllm_json_pool(ps->pool,
                  json_loads(t->neutral, 0, NULL));
    if (neutral == NULL) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    json_array_foreach(neutral, i, e) {
        if (json_equal(v, e)) {
            return NGX_OK;
        }
    }

    if (t->why != NULL) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                    ps->field->name,
                                    "'%s' is not supported: %s",
                                    ps->field->name, t->why);
        return NGX_ERROR;
    }

    return ngx_http_pagedllm_unsupported(ps);
}


static ngx_int_t
ngx_http_pagedllm_unsupported(ngx_http_pagedllm_parse_t *ps)
{
    ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                ps->field->name, "'%s' is not supported",
                                ps->field->name);
    return NGX_ERROR;
}


/* OpenAI's stored-completion tags: an object of strings, kept nowhere */
static ngx_int_t
ngx_http_pagedllm_f_metadata(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_t      *e;
    const char  *key;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return ngx_http_pagedllm_type_error(ps, "an object of strings");
    }

    json_object_foreach(v, key, e) {
        if (!json_is_string(e)) {
            return ngx_http_pagedllm_type_error(ps, "an object of strings");
        }
    }

    return NGX_OK;
}


/* the output's kinds: text only */
static ngx_int_t
ngx_http_pagedllm_f_modalities(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t   i;
    json_t  *e;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_type_error(ps, "an array of strings");
    }

    json_array_foreach(v, i, e) {
        if (!json_is_string(e)) {
            return ngx_http_pagedllm_type_error(ps, "an array of strings");
        }

        if (ngx_strcmp(json_string_value(e), "text") != 0) {
            ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                        "modalities", "'modalities' may "
                                        "only ask for \"text\", not \"%s\"",
                                        json_string_value(e));
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* variables added to the chat template's context */
static ngx_int_t
ngx_http_pagedllm_f_template_kwargs(ngx_http_pagedllm_parse_t *ps,
    json_t *v)
{
    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return ngx_http_pagedllm_type_error(ps, "an object");
    }

    ps->params->template_kwargs = v;

    return NGX_OK;
}


/* vLLM's truncate_prompt_tokens: keep the prompt's last k tokens; -1 is
   the model's context */
static ngx_int_t
ngx_http_pagedllm_f_truncate(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_int_t  k;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (ngx_http_pagedllm_integral(v, &k) != NGX_OK || k == 0 || k < -1) {
        return ngx_http_pagedllm_type_error(ps, "a positive integer or -1");
    }

    ps->params->truncate_prompt = (k == -1 || k > ps->engine->max_model_len)
                                  ? ps->engine->max_model_len
                                  : (uint32_t) k;

    return NGX_OK;
}


/* vLLM's skip_special_tokens (default true): false keeps special tokens'
   text in the output */
static ngx_int_t
ngx_http_pagedllm_f_skip_special(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_boolean(v)) {
        return ngx_http_pagedllm_type_error(ps, "a boolean");
    }

    ps->params->keep_specials = json_is_false(v);

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_continue_final(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_uint_t  b;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    ps->params->continue_final = b;

    return NGX_OK;
}


/* vLLM's include_stop_str_in_output: the text ends after the stop string
   rather than before it */
static ngx_int_t
ngx_http_pagedllm_f_keep_stop(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_uint_t  b;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    ps->params->keep_stop = b;

    return NGX_OK;
}


/* echo: each choice's text begins with the prompt's */
static ngx_int_t
ngx_http_pagedllm_f_echo(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_uint_t  b;

    if (ngx_http_pagedllm_bool(ps, v, &b) != NGX_OK) {
        return NGX_ERROR;
    }

    ps->params->want_echo = b;

    return NGX_OK;
}


/*
 * What the engine computes of the prompt, once every field is read.  Echo
 * with logprobs makes the prompt's tokens each choice's first pieces, with
 * logprobs entries each (echo_lp), and, as in vLLM, also gives the
 * prompt_logprobs list, of that many entries when prompt_logprobs is not
 * given.  The engine is asked for the larger of the two counts.  As in
 * vLLM, a stream carries no prompt_logprobs list: above 0 it is refused,
 * 0 asks for nothing.
 */
ngx_int_t
ngx_http_pagedllm_prompt_logprobs(ngx_http_pagedllm_params_t *p,
    ngx_http_pagedllm_error_t *err)
{
    if (p->want_prompt_lp && p->stream) {
        if (p->prompt_top > 0) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "prompt_logprobs",
                                        "`prompt_logprobs` are not available "
                                        "when `stream=True`.");
            return NGX_ERROR;
        }

        p->want_prompt_lp = 0;
    }

    p->echo_lp = p->want_echo && (p->flags & PL_SUBMIT_LOGPROBS);

    if (p->echo_lp && !p->want_prompt_lp && !p->stream) {
        p->want_prompt_lp = 1;
        p->prompt_top = p->logprobs;
    }

    if (!p->echo_lp && !p->want_prompt_lp) {
        return NGX_OK;
    }

    p->flags |= PL_SUBMIT_PROMPT_LOGPROBS;
    p->prompt_logprobs = p->want_prompt_lp ? p->prompt_top : 0;

    if (p->echo_lp) {
        p->prompt_logprobs = ngx_max(p->prompt_logprobs, p->logprobs);
    }

    return NGX_OK;
}


/*
 * vLLM's prompt_logprobs: k >= 0 most likely ids (and the prompt's own)
 * at each prompt position.  k is capped as the engine caps logprobs
 * (PL_MAX_LOGPROBS, vLLM's default max_logprobs); -1, vLLM's whole
 * vocabulary, is past the cap.
 */
static ngx_int_t
ngx_http_pagedllm_f_prompt_logprobs(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    json_int_t                   k;
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (ngx_http_pagedllm_integral(v, &k) != NGX_OK) {
        return ngx_http_pagedllm_type_error(ps, "an integer");
    }

    if (k < -1) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                    "prompt_logprobs",
                                    "`prompt_logprobs` must be a positive "
                                    "value or -1.");
        return NGX_ERROR;
    }

    if (k == -1 || k > PL_MAX_LOGPROBS) {
        ngx_http_pagedllm_error_set(ps->err, NGX_HTTP_BAD_REQUEST,
                                    "prompt_logprobs",
                                    "Requested prompt logprobs of %L%s, "
                                    "which is greater than max allowed: %d",
                                    (int64_t) k,
                                    k == -1 ? " (the whole vocabulary)" : "",
                                    PL_MAX_LOGPROBS);
        return NGX_ERROR;
    }

    p->prompt_top = (uint32_t) k;
    p->want_prompt_lp = 1;

    return NGX_OK;
}


/* A token id written as a decimal string, as logit_bias keys are. */
static ngx_int_t
ngx_http_pagedllm_id_key(const char *key, ngx_http_pagedllm_engine_t *engine,
    int32_t *id)
{
    size_t     len;
    ngx_int_t  n;

    len = ngx_strlen(key);

    if (len == 0 || len > 10) {
        return NGX_ERROR;
    }

    n = ngx_atoi((u_char *) key, len);

    if (n == NGX_ERROR || (uint64_t) n >= engine->vocab_size) {
        return NGX_ERROR;
    }

    *id = (int32_t) n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_logit_bias(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    u_char                       got[32];
    double                       d;
    json_t                      *e;
    const char                  *key;
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_engine_t  *engine = ps->engine;
    ngx_pool_t                  *pool = ps->pool;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_object(v)) {
        return ngx_http_pagedllm_type_error(ps, "an object of token ids "
                                            "to numbers");
    }

    if (json_object_size(v) > PL_MAX_LOGIT_BIAS) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "logit_bias",
                                    "'logit_bias' may hold at most %d "
                                    "tokens", PL_MAX_LOGIT_BIAS);
        return NGX_ERROR;
    }

    p->bias = ngx_palloc(pool, json_object_size(v) * sizeof(pl_bias_pair_t)
                               + 1);
    if (p->bias == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    json_object_foreach(v, key, e) {
        if (ngx_http_pagedllm_id_key(key, engine, &p->bias[p->n_bias].id)
            != NGX_OK)
        {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "logit_bias",
                                        "'logit_bias' key \"%s\" is not a "
                                        "token id (0..%uD)", key,
                                        engine->vocab_size - 1);
            return NGX_ERROR;
        }

        if (!json_is_number(e)) {
            return ngx_http_pagedllm_type_error(ps, "an object of token ids "
                                                "to numbers");
        }

        d = json_number_value(e);

        if (d < PL_PARAM_BIAS_LO || d > PL_PARAM_BIAS_HI) {
            ngx_http_pagedllm_number_text(d, got, sizeof(got));
            ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                        "logit_bias",
                                        "'logit_bias' values must be in "
                                        "[%d, %d], got %s",
                                        PL_PARAM_BIAS_LO, PL_PARAM_BIAS_HI,
                                        got);
            return NGX_ERROR;
        }

        p->bias[p->n_bias++].bias = (float) d;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_stop_string(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_error_t   *err = ps->err;

    size_t  len;

    if (!json_is_string(v)) {
        return ngx_http_pagedllm_type_error(ps, "a string or an array of "
                                            "up to 4 strings");
    }

    len = json_string_length(v);

    if (len == 0 || len > NGX_HTTP_PAGEDLLM_STOP_LEN) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "stop",
                                    "each 'stop' string must be 1 to %d "
                                    "bytes long", NGX_HTTP_PAGEDLLM_STOP_LEN);
        return NGX_ERROR;
    }

    p->stop[p->n_stop].data = ngx_pnalloc(ps->pool, len);
    if (p->stop[p->n_stop].data == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    ngx_memcpy(p->stop[p->n_stop].data, json_string_value(v), len);
    p->stop[p->n_stop].len = len;
    p->n_stop++;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stop(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t                      i;
    json_t                     *e;
    ngx_http_pagedllm_error_t  *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_stop_string(ps, v);
    }

    if (json_array_size(v) > NGX_HTTP_PAGEDLLM_MAX_STOP) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, "stop",
                                    "'stop' may hold at most %d strings",
                                    NGX_HTTP_PAGEDLLM_MAX_STOP);
        return NGX_ERROR;
    }

    json_array_foreach(v, i, e) {
        if (ngx_http_pagedllm_stop_string(ps, e) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_stop_token_ids(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (json_is_null(v)) {
        return NGX_OK;
    }

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_type_error(ps, "an array of token ids");
    }

    if (json_array_size(v) > PL_MAX_STOP_IDS) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST,
                                    "stop_token_ids",
                                    "'stop_token_ids' may hold at most %d "
                                    "ids", PL_MAX_STOP_IDS);
        return NGX_ERROR;
    }

    if (ngx_http_pagedllm_token_ids(ps, v, "an array of token ids",
                                    &p->stop_ids)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p->n_stop_ids = json_array_size(v);

    return NGX_OK;
}


/* The conversation rendered by the model's chat template and tokenized;
   special tokens in the rendered text are the template's own. */
static ngx_int_t
ngx_http_pagedllm_f_messages(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    size_t                       i;
    json_t                      *msgs, *m, *one;
    ngx_http_pagedllm_params_t  *p = ps->params;
    ngx_http_pagedllm_engine_t  *engine = ps->engine;
    ngx_http_pagedllm_error_t   *err = ps->err;

    if (engine->tok->chat == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_BAD_REQUEST, NULL, "%s",
                                    engine->tok->chat_error);
        return NGX_ERROR;
    }

    if (!json_is_array(v) || json_array_size(v) == 0) {
        return ngx_http_pagedllm_type_error(ps, "a non-empty array of "
                                            "messages");
    }

    msgs = ngx_http_pagedllm_json_pool(ps->pool, json_array());
    if (msgs == NULL) {
        ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                    NULL, "out of memory");
        return NGX_ERROR;
    }

    json_array_foreach(v, i, m) {
        if (!json_is_object(m)) {
            return ngx_http_pagedllm_type_error(ps, "an array of objects");
        }

        one = ngx_http_pagedllm_message(m, ps->pool, err);
        if (one == NULL) {
            return NGX_ERROR;
        }

        if (json_array_append(msgs, one) != 0) {
            ngx_http_pagedllm_error_set(err, NGX_HTTP_INTERNAL_SERVER_ERROR,
                                        NULL, "out of memory");
            return NGX_ERROR;
        }

        p->text_len += json_string_length(json_object_get(one, "content"));
    }

    p->messages = msgs;

    return NGX_OK;
}


/* /tokenize's prompt: text only (token ids are tokens already) */
static ngx_int_t
ngx_http_pagedllm_f_text(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    if (!json_is_string(v)) {
        return ngx_http_pagedllm_type_error(ps, "a string");
    }

    return ngx_http_pagedllm_prompt_text(ps, v);
}


/* /detokenize's ids, checked against the vocabulary; [] decodes to "" */
static ngx_int_t
ngx_http_pagedllm_f_tokens(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    ngx_http_pagedllm_params_t  *p = ps->params;

    if (!json_is_array(v)) {
        return ngx_http_pagedllm_type_error(ps, "an array of token ids");
    }

    if (ngx_http_pagedllm_token_ids(ps, v, "an array of token ids",
                                    &p->prompt)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    p->n_prompt = json_array_size(v);

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_add_special(ngx_http_pagedllm_parse_t *ps, json_t *v)
{
    if (!json_is_boolean(v)) {
        return ngx_http_pagedllm_type_error(ps, "a boolean");
    }

    ps->params->add_special = json_is_true(v);

    return NGX_OK;
}


static ngx_int_t
ngx_http_pagedllm_f_add_generation_prompt(ngx_http_pagedllm_parse_t *ps,
    json_t *v)
{
    if (!json_is_boolean(v)) {
        return ngx_http_pagedllm_type_error(ps, "a boolean");
    }

    ps->params->add_generation_prompt = json_is_true(v);

    return NGX_OK;
}


/* d as text for an error message: nginx's %f converts through an integer
   and cannot take every double a request may send (1e300, say). */
static void
ngx_http_pagedllm_number_text(double d, u_char *buf, size_t len)
{
    snprintf((char *) buf, len, "%.15g", d);
}
