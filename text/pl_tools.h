/*
 * pl_tools: the tool-call formats of chat templates.  A model trained on
 * a template with a tool section writes its calls in that template's
 * format; the format is read from the template text once
 * (pl_tools_detect), and then serves three purposes: the grammar that
 * forces a call (tool_choice "required" or a named function) is the
 * format around a JSON Schema of the call, the text of an "auto" answer
 * is parsed back into calls, and a stream holds back the text from where
 * a call may begin.
 *
 *   PL_TOOLS_HERMES   <tool_call>\n{"name": N, "arguments": {...}}\n
 *                     </tool_call>, one block per call, after optional
 *                     text (Hermes 2 Pro, Qwen2.5, Qwen3): templates
 *                     whose text has "<tool_call>"
 *   PL_TOOLS_LLAMA    {"name": N, "parameters": {...}}, calls separated
 *                     by ";" (Llama 3.1, 3.2 JSON tool calling):
 *                     templates with "<|python_tag|>" or "Environment:
 *                     ipython"
 *   PL_TOOLS_MISTRAL  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *                     (Mistral): templates with "[TOOL_CALLS]".  The
 *                     marker is a special token, which a grammar never
 *                     produces and decoding drops: the forced form is the
 *                     array alone, and the parser takes the array with or
 *                     without the marker.
 *   PL_TOOLS_JSON     [{"name": N, "arguments": {...}}, ...], the
 *                     default for every other template (OpenAI-like).
 *
 * The parser is strict: the whole text after the content must be calls
 * of the format, each naming one of the request's functions with an
 * object of arguments; anything else is not a call, and the text stays
 * content.  "arguments" and "parameters" are both accepted as the key of
 * the arguments in every format, and a call's arguments are given as the
 * model wrote them.  Two more keys are taken where the real models write
 * them: a Mistral call's "id" (the v0.3 template writes one into each
 * call of the history) and a Llama call's "type": "function" (Llama 3
 * models copy it from the tools they are shown).  The forced form, which
 * the grammar guarantees, is also read while it is being written
 * (pl_tools_progress), so that a stream can send each call's name and
 * arguments as they come.
 */

#ifndef PL_TOOLS_H
#define PL_TOOLS_H

#include <stddef.h>

#include <jansson.h>

typedef enum {
    PL_TOOLS_JSON = 0,
    PL_TOOLS_HERMES,
    PL_TOOLS_LLAMA,
    PL_TOOLS_MISTRAL
} pl_tools_format_t;

/* The format of a chat template's tool calls. */
pl_tools_format_t pl_tools_detect(const char *template_src);

/* "json", "hermes", "llama" or "mistral" */
const char *pl_tools_format_name(pl_tools_format_t f);

/*
 * The JSON Schema of one call: an object {name, arguments} (or
 * {name, parameters} for PL_TOOLS_LLAMA) for any of functions, an array
 * of {"name": string, "parameters": schema or absent}.  Each function's
 * local $refs are rewritten to point into its place in the result.  A new
 * reference; NULL when out of memory.
 */
json_t *pl_tools_call_schema(pl_tools_format_t f, const json_t *functions);

/*
 * The grammar of the forced output: the EBNF of the call schema (whose
 * start rule, "root ::=", comes first, as the schema translator writes
 * it) renamed "call" and wrapped in the format, one call or (parallel)
 * one or more.  malloc()ed, NUL-terminated, its length in *out_len; NULL
 * when call_ebnf does not start with its root rule or out of memory.
 */
char *pl_tools_grammar(pl_tools_format_t f, int parallel,
    const char *call_ebnf, size_t len, size_t *out_len);

/*
 * Where a call may begin in text[0..len) (the offset a stream holds its
 * text back from; len when nowhere).  at_start: text begins the answer,
 * so the formats that are the whole answer may begin there.
 */
size_t pl_tools_hold(pl_tools_format_t f, const char *text, size_t len,
    int at_start);

/*
 * The calls in text[0..len): a new array of {"name": string, "arguments":
 * string (the arguments' JSON, compact)}, with *content_len set to the
 * bytes of content before them; NULL when the text is not calls of the
 * format to functions named in names (an array of strings).
 */
json_t *pl_tools_parse(pl_tools_format_t f, const char *text, size_t len,
    const json_t *names, size_t *content_len);

/* A call of a forced output being written: its name, and its arguments
   so far (args 0: not begun). */
typedef struct {
    size_t  name;
    size_t  name_len;
    size_t  args;
    size_t  args_len;
    int     done;          /* the arguments are complete */
} pl_tools_span_t;

/*
 * The calls of forced output text[0..len) (the grammar's form for f) whose
 * names are complete, up to max of them into spans; their number.
 */
size_t pl_tools_progress(pl_tools_format_t f, const char *text, size_t len,
    pl_tools_span_t *spans, size_t max);

#endif /* PL_TOOLS_H */
