/*
 * pl_jinja: the subset of Jinja that Hugging Face chat templates use,
 * interpreted in C.
 *
 * A template is parsed once (pl_jinja_parse) into a read-only tree and
 * rendered any number of times with variables given as a jansson object.
 * Rendering follows @huggingface/jinja, the reference the tests compare
 * against: lstrip_blocks and trim_blocks on, one trailing newline of the
 * template dropped, none prints as nothing, booleans as true/false, lists
 * and dicts as JSON.  Supported: {{ }}, {% if/elif/else %}, {% for %}
 * (tuple targets, "if" filter, else, loop.*), {% set %} (names, namespace
 * attributes, tuples, blocks), {% macro %}, {% break %}, {% continue %},
 * whitespace control, comments; expressions with literals, lists, dicts,
 * attribute/index/slice access, calls, filters, tests, arithmetic,
 * comparisons, in, and/or/not, conditional expressions; raise_exception,
 * namespace and range; common filters and string/list/dict methods.
 * Anything else is refused with a message naming it.
 */

#ifndef PL_JINJA_H
#define PL_JINJA_H

#include <stddef.h>

#include <jansson.h>

typedef struct pl_jinja_s  pl_jinja_t;

/* NULL with a message (and the position) in err on a syntax error or an
   unsupported construct. */
pl_jinja_t *pl_jinja_parse(const char *src, size_t len, char *err,
    size_t errlen);
void pl_jinja_free(pl_jinja_t *tpl);

/*
 * Renders with the members of vars (a JSON object) as variables.  Returns
 * a malloc'ed NUL-terminated string (*outlen bytes), or NULL with a
 * message in err (raise_exception's message, a type error, a limit).
 */
char *pl_jinja_render(const pl_jinja_t *tpl, const json_t *vars,
    size_t *outlen, char *err, size_t errlen);

#endif /* PL_JINJA_H */
