/*
 * pl_chat: chat templates for /v1/chat/completions.  Loads the
 * chat_template of a model's tokenizer_config.json (with its bos_token and
 * eos_token) once, then renders conversations to the prompt text that is
 * tokenized.  Read-only after loading: one pl_chat_t serves every request
 * of a worker.
 */

#ifndef PL_CHAT_H
#define PL_CHAT_H

#include <stddef.h>

#include <jansson.h>

#include "pl_tools.h"

typedef struct pl_chat_s  pl_chat_t;

/* NULL with a message in err when the file is unreadable, has no
   chat_template, or the template uses something we do not support. */
pl_chat_t *pl_chat_load(const char *tokenizer_config_path, char *err,
    size_t errlen);

/* The same from a template string (bos / eos may be NULL). */
pl_chat_t *pl_chat_new(const char *template_src, const char *bos,
    const char *eos, char *err, size_t errlen);

void pl_chat_free(pl_chat_t *c);

/*
 * Renders messages (a JSON array of {"role", "content", ...} objects)
 * into a malloc'ed NUL-terminated prompt.  extra (an object, or NULL)
 * adds variables such as "tools" or "enable_thinking".  NULL with a
 * message in err on a template error (raise_exception included).
 */
char *pl_chat_render(const pl_chat_t *c, const json_t *messages,
    int add_generation_prompt, const json_t *extra, char *err,
    size_t errlen);

/* The format the template's tool calls are written in. */
pl_tools_format_t pl_chat_tool_format(const pl_chat_t *c);

#endif /* PL_CHAT_H */
