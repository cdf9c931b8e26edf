/*
 * tokenizer_chat.c: unit tests of the Jinja interpreter and pl_chat: the
 * language pieces chat templates rely on, and the refusals (syntax
 * errors, unsupported constructs, raise_exception, runtime type errors,
 * limits) that must come back as clear messages, never crashes.  The
 * byte-for-byte comparison with @huggingface/jinja is t/31-chat-ref.t.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pl_chat.h"
#include "pl_jinja.h"
#include "tap.h"

/* Renders src with vars (JSON text); the output, or "ERROR: message". */
static char *
render(const char *src, const char *vars_json)
{
    static char   buf[4096];
    char          err[256];
    json_error_t  jerr;
    json_t       *vars = json_loads(vars_json ? vars_json : "{}", 0, &jerr);
    pl_jinja_t   *t = pl_jinja_parse(src, strlen(src), err, sizeof(err));
    char         *out;
    size_t        len;

    if (t == NULL) {
        snprintf(buf, sizeof(buf), "PARSE ERROR: %s", err);
        json_decref(vars);
        return buf;
    }
    out = pl_jinja_render(t, vars, &len, err, sizeof(err));
    if (out == NULL) {
        snprintf(buf, sizeof(buf), "ERROR: %s", err);
    } else {
        snprintf(buf, sizeof(buf), "%s", out);
        ok(strlen(out) == len, "render reports the output length");
    }
    free(out);
    pl_jinja_free(t);
    json_decref(vars);
    return buf;
}

static void
check(const char *src, const char *vars, const char *want, const char *name)
{
    is_str(render(src, vars), want, "%s", name);
}

static void
check_error(const char *src, const char *vars, const char *word,
    const char *name)
{
    const char  *got = render(src, vars);

    ok(strstr(got, "ERROR") != NULL && strstr(got, word) != NULL, "%s: %s",
       name, got);
}

static void
test_language(void)
{
    const char  *msgs = "{\"messages\": [{\"role\": \"system\", \"content\": "
                        "\" sys \"}, {\"role\": \"user\", \"content\": "
                        "\"hi\"}]}";

    check("{% for m in messages %}{{ loop.index }}:{{ m.role }}"
          "{% if not loop.last %},{% endif %}{% endfor %}", msgs,
          "1:system,2:user", "for loop with loop.index and loop.last");
    check("{{ messages[0].content | trim }}|{{ messages[-1]['content'] }}",
          msgs, "sys|hi", "attribute, index and trim");
    check("{% set ns = namespace(n=0) %}{% for m in messages %}"
          "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", msgs, "2",
          "namespace survives the loop");
    check("{% set x = 1 %}{% for m in messages %}{% set x = 5 %}{% endfor %}"
          "{{ x }}", msgs, "1", "plain set inside a loop stays inside");
    check("{% macro tag(r, s='!') %}<{{ r }}{{ s }}>{% endmacro %}"
          "{{ tag('a') }}{{ tag('b', s='?') }}", NULL, "<a!><b?>",
          "macro with a default and a keyword argument");
    check("{% set t %}[{{ 1 + 2 }}]{% endset %}{{ t }}{{ t | length }}", NULL,
          "[3]3", "block set");
    check("a  {{- ' b ' -}}  c", NULL, "a b c", "whitespace control");
    check("  {% if true %}\n    x\n  {% endif %}\n", NULL, "    x\n",
          "lstrip_blocks, trim_blocks and the final newline");
    check("{# comment #}{{ 'x' }}", NULL, "x", "comments vanish");
    check("{{ 'a' if false else 'b' }}{{ 'c' if true }}{{ 'd' if false }}",
          NULL, "bc", "conditional expressions");
    check("{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 3 }} {{ 7 / 2 }} {{ 1 + 2 * 3 }}",
          NULL, "3 1 8 3.5 7", "arithmetic");
    check("{{ 'ab' ~ 1 }} {{ 'x' * 3 }} {{ [1] + [2] }}", NULL,
          "ab1 xxx [1, 2]", "concatenation");
    check("{{ 'a' in 'cat' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}",
          NULL, "True True True", "in and not in");
    check("{{ x is defined }} {{ none is none }} {{ 'a' is string }} "
          "{{ 2 is even }} {{ {} is mapping }}", NULL,
          "False True True True True", "tests");
    check("{{ 'Hello World'.lower() }} {{ 'a,b'.split(',') }} "
          "{{ 'xhix'.strip('x') }} {{ 'abc'.startswith('ab') }} "
          "{{ 'a-b'.replace('-', '+') }}", NULL,
          "hello world ['a', 'b'] hi True a+b", "string methods");
    check("{{ 'abc'[::-1] }} {{ [1, 2, 3][1:] }} {{ 'h\xc3\xa9llo'[1] }}",
          NULL, "cba [2, 3] \xc3\xa9", "slices and code point indexing");
    check("{{ {'a': [1, 'x', none, true]} | tojson }}", NULL,
          "{\"a\": [1, \"x\", null, true]}", "tojson");
    check("{{ [3, 1, 2] | sort | join('-') }} {{ ['a', 'b'] | first }}"
          "{{ ['a', 'b'] | last }} {{ [1, 2] | reverse | list }}", NULL,
          "1-2-3 ab [2, 1]", "list filters");
    check("{{ messages | selectattr('role', 'equalto', 'user') | list | "
          "length }} {{ messages | map(attribute='role') | join(',') }}", msgs,
          "1 system,user", "selectattr and map");
    check("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}"
          "{% endfor %}", NULL, "a1b2", "tuple unpacking over items()");
    check("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
          "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", NULL,
          "02", "break and continue");
    check("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty",
          "for-else");
    check("{{ none }}{{ undefined_thing }}|{{ true }}|{{ 1.0 }}", NULL,
          "None|True|1.0", "none prints None, undefined nothing (Python)");
}

static void
test_refusals(void)
{
    check_error("{{ raise_exception('Only user and assistant roles') }}",
                NULL, "Only user and assistant roles", "raise_exception");
    check_error("{% if x %}never closed", NULL, "endif", "missing endif");
    check_error("{{ 1 + }}", NULL, "unexpected", "broken expression");
    check_error("{{ x", NULL, "unterminated", "unterminated tag");
    check_error("{% call x() %}{% endcall %}", NULL, "unsupported statement",
                "unsupported statement");
    check_error("{{ 'x' | frobnicate }}", NULL, "unsupported filter",
                "unsupported filter");
    check_error("{{ 1 is frobnicated }}", NULL, "unsupported test",
                "unsupported test");
    check_error("{{ 'x'.frob() }}", NULL, "unsupported string method",
                "unsupported method");
    check_error("{{ nothing() }}", NULL, "cannot call", "calling undefined");
    check_error("{{ 1 / 0 }}", NULL, "division by zero", "division by zero");
    check_error("{{ 'a' - 1 }}", NULL, "unsupported operands",
                "type error in arithmetic");
    check_error("{% for i in range(1000000) %}{% endfor %}", NULL,
                "range() longer", "range limit");
    check_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", NULL,
                "nested too deeply", "unbounded macro recursion");
    check_error("{{ ((((((((((((((((((((((((((((((((((((((((((((((((((((((("
                "(((((((((((((((1 }}", NULL, "nested too deeply",
                "expression nesting limit");
    check_error("{% set x.y = 1 %}", NULL, "not a namespace",
                "attribute set on a non-namespace");
    check_error("{% for a, b in [1] %}{% endfor %}", NULL, "unpack",
                "unpacking a non-list");
    check_error("{% set l = [] %}{% set _ = l.append(1) %}{{ l }}", NULL,
                "sandboxed", "list.append refused, as jinja2's sandbox does");
    check_error("{{ x.y }}", NULL, "undefined",
                "an attribute of an undefined value is an error");
    check_error("{{ '%99999d' | format(1) }}", NULL, "above 999",
                "format: a width above 999 refused");
    check_error("{{ range(3) | slice(2000000) | list }}", NULL, "longer than",
                "slice: more slices than a list holds refused");
    check_error("{% set s = '' %}{% for i in range(100000) %}"
                "{% set s = s ~ 'xxxxxxxxxxxxxxxxxxxx' %}{% endfor %}", NULL,
                "more than 256 MB", "template memory is bounded");
    check_error("{% set l = [1] %}{% for i in range(40) %}{% set l = l + l %}"
                "{% endfor %}", NULL, "list longer", "list growth is bounded");
    check_error("{% for i in range(10000) %}{% for j in range(10000) %}"
                "{% endfor %}{% endfor %}", NULL, "loop iterations",
                "loop work is bounded");
}

/* path, written with json, loaded as a tokenizer_config.json */
static pl_chat_t *
load_config(const char *path, const char *json, char *err, size_t n)
{
    FILE  *f = fopen(path, "w");
    int    written;

    if (f == NULL) {
        snprintf(err, n, "cannot write %s", path);
        return NULL;
    }
    written = fputs(json, f) >= 0;
    if (fclose(f) != 0 || !written) {
        snprintf(err, n, "cannot write %s", path);
        return NULL;
    }

    return pl_chat_load(path, err, n);
}


static void
test_chat_api(void)
{
    char          err[256], dir[] = "/tmp/pl-chat-XXXXXX", path[300];
    pl_chat_t    *c;
    json_t       *msgs;
    char         *out;
    json_error_t  jerr;

    c = pl_chat_new("{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
                    "{{ m.content }}{% endfor %}{% if add_generation_prompt %}"
                    "[assistant]{% endif %}{{ extra }}", "<s>", "</s>", err,
                    sizeof(err));
    ok(c != NULL, "pl_chat_new");
    msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, &jerr);
    out = pl_chat_render(c, msgs, 1, NULL, err, sizeof(err));
    is_str(out, "<s>[user]hi[assistant]", "render with a generation prompt");
    free(out);
    {
        json_t  *extra = json_pack("{s:s}", "extra", "+x");

        out = pl_chat_render(c, msgs, 0, extra, err, sizeof(err));
        is_str(out, "<s>[user]hi+x", "extra variables reach the template");
        free(out);
        json_decref(extra);
    }
    out = pl_chat_render(c, json_object_get(msgs, "nope"), 0, NULL, err,
                         sizeof(err));
    ok(out == NULL && strstr(err, "messages must be an array"),
       "messages must be an array: %s", err);
    pl_chat_free(c);
    json_decref(msgs);

    if (mkdtemp(dir) == NULL) {
        ok(0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    c = load_config(path, "{\"bos_token\": {\"content\": \"<B>\"}, "
                    "\"chat_template\": [{\"name\": \"tool_use\", "
                    "\"template\": \"tools\"}, {\"name\": \"default\", "
                    "\"template\": \"{{ bos_token }}default\"}]}", err,
                    sizeof(err));
    msgs = json_array();
    out = c ? pl_chat_render(c, msgs, 0, NULL, err, sizeof(err)) : NULL;
    is_str(out, "<B>default",
           "named templates: default chosen; AddedToken bos_token");
    free(out);
    is_int(c ? (int) pl_chat_tool_format(c) : -1, PL_TOOLS_JSON,
           "named templates: the tool format of tool_use's text");
    {
        json_t  *tools = json_pack("{s:[]}", "tools");
        json_t  *none = json_pack("{s:n}", "tools");

        out = c ? pl_chat_render(c, msgs, 0, tools, err, sizeof(err)) : NULL;
        is_str(out, "tools", "named templates: tool_use with tools, as "
               "transformers picks");
        free(out);
        out = c ? pl_chat_render(c, msgs, 0, none, err, sizeof(err)) : NULL;
        is_str(out, "<B>default", "named templates: tools null, default");
        free(out);
        json_decref(tools);
        json_decref(none);
    }
    pl_chat_free(c);
    json_decref(msgs);

    c = load_config(path, "{\"chat_template\": [{\"name\": \"default\", "
                    "\"template\": \"d\"}, {\"name\": \"tool_use\", "
                    "\"template\": \"<tool_call>{{ tools }}\"}]}", err,
                    sizeof(err));
    is_int(c ? (int) pl_chat_tool_format(c) : -1, PL_TOOLS_HERMES,
           "named templates: tool_use writes <tool_call>: hermes, though "
           "default does not");
    pl_chat_free(c);

    c = load_config(path, "{\"chat_template\": [{\"name\": \"default\", "
                    "\"template\": \"d\"}, {\"name\": \"tool_use\", "
                    "\"template\": \"{% if %}\"}]}", err, sizeof(err));
    ok(c == NULL && strstr(err, "tool_use"), "a bad tool_use template: %s",
       err);

    c = load_config(path, "{\"bos_token\": \"<s>\"}", err, sizeof(err));
    ok(c == NULL && strstr(err, "no chat_template"), "no template: %s", err);
    unlink(path);
    rmdir(dir);
    c = pl_chat_load("/nonexistent/tokenizer_config.json", err, sizeof(err));
    ok(c == NULL && strstr(err, "/nonexistent"), "missing file: %s", err);
}

int
main(void)
{
    test_language();
    test_refusals();
    test_chat_api();
    return done_testing();
}
