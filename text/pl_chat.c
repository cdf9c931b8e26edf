/*
 * pl_chat: tokenizer_config.json's chat template on top of pl_jinja.
 *
 * The template may be a string or a list of named templates: then, as
 * transformers' apply_chat_template picks, the one named "tool_use"
 * renders a conversation given tools (Hermes 2 Pro's published config
 * has one, its "default" has no tool section) and the one named
 * "default" every other.  bos_token / eos_token may be strings or
 * AddedToken objects ({"content": ...}); they are passed to the template
 * (with unk_token and pad_token) as variables together with messages and
 * add_generation_prompt, as Hugging Face's apply_chat_template does.
 * The format of the tool calls is read once from the text of the
 * template that renders tools.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_chat.h"
#include "pl_jinja.h"

struct pl_chat_s {
    pl_jinja_t  *tpl;
    pl_jinja_t  *tool_tpl; /* "tool_use" of named templates, or NULL */
    json_t      *vars;     /* bos_token, eos_token, ... */
    pl_tools_format_t  tool_format;
};

static const char *
pl_chat_token(const json_t *cfg, const char *key)
{
    const json_t  *t = json_object_get(cfg, key);

    if (json_is_object(t)) {
        t = json_object_get(t, "content");
    }
    return json_string_value(t);
}

/* The template named name (a string template is "default"), or NULL. */
static const char *
pl_chat_template_of(const json_t *cfg, const char *name)
{
    const json_t  *t = json_object_get(cfg, "chat_template"), *item;
    size_t         i;

    if (json_is_string(t)) {
        return strcmp(name, "default") == 0 ? json_string_value(t) : NULL;
    }
    json_array_foreach(t, i, item) {
        if (json_is_string(json_object_get(item, "name"))
            && strcmp(json_string_value(json_object_get(item, "name")),
                      name) == 0)
        {
            return json_string_value(json_object_get(item, "template"));
        }
    }
    return NULL;
}

/* Named templates: their "tool_use" one, for conversations with tools,
   and the format of its calls. */
static int
pl_chat_tool_use(pl_chat_t *c, const char *src, char *err, size_t errlen)
{
    char  perr[256];

    c->tool_tpl = pl_jinja_parse(src, strlen(src), perr, sizeof(perr));
    if (c->tool_tpl == NULL) {
        snprintf(err, errlen, "chat_template tool_use: %s", perr);
        return -1;
    }
    c->tool_format = pl_tools_detect(src);
    return 0;
}

pl_chat_t *
pl_chat_new(const char *src, const char *bos, const char *eos, char *err,
    size_t errlen)
{
    pl_chat_t  *c = calloc(1, sizeof(pl_chat_t));
    char        perr[256];

    if (c == NULL || (c->vars = json_object()) == NULL) {
        free(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->tpl = pl_jinja_parse(src, strlen(src), perr, sizeof(perr));
    if (c->tpl == NULL) {
        snprintf(err, errlen, "chat_template: %s", perr);
        pl_chat_free(c);
        return NULL;
    }
    c->tool_format = pl_tools_detect(src);
    json_object_set_new(c->vars, "bos_token", json_string(bos ? bos : ""));
    json_object_set_new(c->vars, "eos_token", json_string(eos ? eos : ""));
    return c;
}

pl_chat_t *
pl_chat_load(const char *path, char *err, size_t errlen)
{
    json_error_t  jerr;
    json_t       *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &jerr);
    const char   *src, *tool_src;
    pl_chat_t    *c;

    if (cfg == NULL) {
        snprintf(err, errlen, "%s: %s (line %d)", path, jerr.text,
                 jerr.line);
        return NULL;
    }
    src = pl_chat_template_of(cfg, "default");
    tool_src = pl_chat_template_of(cfg, "tool_use");
    if (src == NULL) {
        snprintf(err, errlen, "%s: no chat_template", path);
        json_decref(cfg);
        return NULL;
    }
    c = pl_chat_new(src, pl_chat_token(cfg, "bos_token"),
                    pl_chat_token(cfg, "eos_token"), err, errlen);
    if (c != NULL && tool_src != NULL
        && pl_chat_tool_use(c, tool_src, err, errlen) != 0)
    {
        pl_chat_free(c);
        c = NULL;
    }
    if (c != NULL) {
        json_object_set_new(c->vars, "unk_token", json_string(
            pl_chat_token(cfg, "unk_token") ? pl_chat_token(cfg, "unk_token")
                                             : ""));
        json_object_set_new(c->vars, "pad_token", json_string(
            pl_chat_token(cfg, "pad_token") ? pl_chat_token(cfg, "pad_token")
                                             : ""));
    }
    json_decref(cfg);
    return c;
}

void
pl_chat_free(pl_chat_t *c)
{
    if (c != NULL) {
        pl_jinja_free(c->tpl);
        pl_jinja_free(c->tool_tpl);
        json_decref(c->vars);
        free(c);
    }
}

pl_tools_format_t
pl_chat_tool_format(const pl_chat_t *c)
{
    return c->tool_format;
}

char *
pl_chat_render(const pl_chat_t *c, const json_t *messages,
    int add_generation_prompt, const json_t *extra, char *err,
    size_t errlen)
{
    json_t      *vars, *tools;
    char        *out;
    size_t       len;
    pl_jinja_t  *tpl = c->tpl;

    if (!json_is_array(messages)) {
        snprintf(err, errlen, "messages must be an array");
        return NULL;
    }
    vars = json_copy(c->vars);
    if (vars == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (json_is_object(extra)) {
        json_object_update(vars, (json_t *) extra);
    }
    json_object_set(vars, "messages", (json_t *) messages);
    json_object_set_new(vars, "add_generation_prompt",
                        json_boolean(add_generation_prompt));
    tools = json_object_get(extra, "tools");
    if (c->tool_tpl != NULL && tools != NULL && !json_is_null(tools)) {
        tpl = c->tool_tpl;
    }
    out = pl_jinja_render(tpl, vars, &len, err, errlen);
    json_decref(vars);
    return out;
}
