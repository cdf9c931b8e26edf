/*
 * pl_jinja: the subset of Jinja that Hugging Face chat templates use,
 * interpreted in C.
 *
 * A template is parsed once (pl_jinja_parse) into a read-only tree and
 * rendered any number of times with variables given as a jansson object.
 * Rendering follows Python's jinja2 as transformers' apply_chat_template
 * configures it, what models were trained with and the reference
 * t/31-chat-jinja2.t compares against: sandboxed (lists immutable),
 * lstrip_blocks and trim_blocks on, one trailing newline of the template
 * dropped, values printed as Python's str() prints them (True, False,
 * None, ['a', 1], {'k': 1.0}, (1, 2)), an undefined value as nothing and
 * looking into one an error, tojson without ASCII escaping.  Supported:
 * {{ }}, {% if/elif/else %}, {% for %} (tuple targets, "if" filter, else,
 * loop.*), {% set %} (names, namespace attributes, tuples, blocks),
 * {% macro %}, {% break %}, {% continue %}, whitespace control, comments;
 * expressions with literals, lists, tuples, dicts, attribute/index/slice
 * access, calls, filters, tests, arithmetic, comparisons, in, and/or/not,
 * conditional expressions; raise_exception, strftime_now, namespace, dict
 * and range; jinja2's builtin filters and tests but for those that are
 * random (random), wrap text (wordwrap, urlize) or make callables
 * (cycler, joiner, lipsum); string/list/dict methods that read.  Anything
 * else is refused with a message naming it.
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
