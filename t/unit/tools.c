/*
 * tools: the tool-call formats of chat templates (text/pl_tools.c).  The
 * format read from each family's template text; recorded answers in each
 * format parsed into calls (content before them kept, several calls,
 * numbers kept as written), and malformed ones (unknown function, bad
 * JSON, a missing closing tag, text after the calls, arguments that are
 * not an object, an empty list) left as content; where a stream holds
 * its text back; and the forced grammar of each format compiled from the
 * functions' schemas ($ref included): the outputs it accepts parse into
 * calls, and calls to other names or with arguments off the schema are
 * outside it.  The forced form read while it is written, at every
 * prefix: names once complete, arguments growing as prefixes of the final
 * ones, as a stream sends them.  Then mutated answers: whatever the parser
 * takes for calls is calls (known names, arguments that are a JSON
 * object), and every span it reads lies inside the text.
 */

#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "pl_tools.h"
#include "tap.h"

static json_t  *names;


/* the calls of text as "name(args);..." or "-" when it is content; the
   content's length in *content */
static char *
calls_of(pl_tools_format_t f, const char *text, size_t *content)
{
    static char  buf[1024];
    json_t      *calls, *c;
    size_t       i, n = 0;

    *content = (size_t) -1;
    calls = pl_tools_parse(f, text, strlen(text), names, content);
    if (calls == NULL) {
        return "-";
    }
    buf[0] = '\0';
    json_array_foreach(calls, i, c) {
        n += snprintf(buf + n, sizeof(buf) - n, "%s(%s);",
                      json_string_value(json_object_get(c, "name")),
                      json_string_value(json_object_get(c, "arguments")));
    }
    json_decref(calls);
    return buf;
}


static void
parse_is(pl_tools_format_t f, const char *text, const char *want,
    size_t want_content, const char *name)
{
    size_t  content;
    char   *got = calls_of(f, text, &content);

    if (!ok(strcmp(got, want) == 0
            && (strcmp(want, "-") == 0 || content == want_content),
            "%s %s: %s", pl_tools_format_name(f), name, want))
    {
        diag("got %s, content %zu", got, content);
    }
}


static void
test_detect(void)
{
    is_int(pl_tools_detect("{%- if tools %}<tool_call>\n{{ x }}"),
           PL_TOOLS_HERMES, "a template with <tool_call>: hermes");
    is_int(pl_tools_detect("{{- \"Environment: ipython\\n\" }}"),
           PL_TOOLS_LLAMA, "Environment: ipython: llama");
    is_int(pl_tools_detect("{{- \"<|python_tag|>\" + x }}"),
           PL_TOOLS_LLAMA, "<|python_tag|>: llama");
    is_int(pl_tools_detect("{{- '[TOOL_CALLS] [' }}"), PL_TOOLS_MISTRAL,
           "[TOOL_CALLS]: mistral");
    is_int(pl_tools_detect("{% for m in messages %}{{ m.content }}"
                           "{% endfor %}"),
           PL_TOOLS_JSON, "any other template: json");
}


static void
test_parse(void)
{
    pl_tools_format_t  H = PL_TOOLS_HERMES, L = PL_TOOLS_LLAMA,
                       M = PL_TOOLS_MISTRAL, J = PL_TOOLS_JSON;

    /* hermes (Qwen2.5, Qwen3) */
    parse_is(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
             "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
             "get_weather({\"city\": \"Paris\", \"days\": 3});", 0,
             "one call, its arguments as written");
    parse_is(H, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", "
             "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
             "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
             "</tool_call>\n",
             "get_weather({\"city\": \"Oslo\"});get_time({});", 13,
             "text, then two calls");
    parse_is(H, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
             "{\"t\": 0.1, \"big\": 12345678901234567}}\n</tool_call>",
             "get_weather({\"t\": 0.1, \"big\": 12345678901234567});", 0,
             "numbers as written");
    parse_is(H, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n"
             "</tool_call>", "-", 0, "an unknown function: content");
    parse_is(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}\n"
             "</tool_call>", "-", 0, "bad JSON: content");
    parse_is(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}",
             "-", 0, "no closing tag: content");
    parse_is(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
             "</tool_call> and more", "-", 0, "text after: content");
    parse_is(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
             "\"{}\"}\n</tool_call>", "-", 0,
             "arguments a string: content");
    parse_is(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}, "
             "\"x\": 1}\n</tool_call>", "-", 0, "an extra key: content");
    parse_is(H, "<tool_call>\n{\"arguments\": {}, \"name\": \"get_time\"}"
             "\n</tool_call>", "get_time({});", 0,
             "arguments first, as Hermes 2 Pro was trained to write them");
    parse_is(H, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}, "
             "\"id\": \"abcDEF123\"}\n</tool_call>", "-", 0,
             "an id, not Hermes': content");
    parse_is(H, "Just text, no calls.", "-", 0, "plain text: content");
    parse_is(H, "", "-", 0, "empty: content");
    parse_is(H, "<tool_call>\n{\"name\": \"get_weather\", \"argu\\u006dents\""
             ": {\"city\": \"}{\\\"\"}}\n</tool_call>",
             "get_weather({\"city\": \"}{\\\"\"});", 0,
             "an escaped key, brackets and quotes in a string");

    /* llama 3.1 / 3.2 JSON */
    parse_is(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
             "\"Rome\"}}", "get_weather({\"city\": \"Rome\"});", 0,
             "one call");
    parse_is(L, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": "
             "{}}; {\"name\": \"get_weather\", \"parameters\": "
             "{\"city\": \"Rome\"}}",
             "get_time({});get_weather({\"city\": \"Rome\"});", 0,
             "python tag, two calls separated by ;");
    parse_is(L, "  {\"name\": \"get_time\", \"arguments\": {}}\n",
             "get_time({});", 0, "arguments as the key, spaces around");
    parse_is(L, "Sure: {\"name\": \"get_time\", \"parameters\": {}}", "-", 0,
             "text before the object: content");
    parse_is(L, "{\"name\": \"get_time\", \"parameters\": {}} ok", "-", 0,
             "text after: content");
    parse_is(L, "{\"name\": \"get_time\", \"parameters\": {}};", "-", 0,
             "a dangling separator: content");
    parse_is(L, "{\"name\": \"get_time\"}", "-", 0,
             "no arguments: content");
    parse_is(L, "{\"type\": \"function\", \"name\": \"get_weather\", "
             "\"parameters\": {\"city\": \"Rome\"}}",
             "get_weather({\"city\": \"Rome\"});", 0,
             "\"type\": \"function\" first, as Llama 3 models write it");
    parse_is(L, "{\"type\": \"tool\", \"name\": \"get_time\", "
             "\"parameters\": {}}", "-", 0, "another type: content");
    parse_is(L, "{\"name\": \"get_time\", \"parameters\": {}, \"id\": "
             "\"abcDEF123\"}", "-", 0, "an id, not Llama's: content");

    /* mistral */
    parse_is(M, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
             "{\"city\": \"Nice\"}}, {\"name\": \"get_time\", "
             "\"arguments\": {}}]",
             "get_weather({\"city\": \"Nice\"});get_time({});", 0,
             "two calls after the marker");
    parse_is(M, "Checking.[TOOL_CALLS][{\"name\": \"get_time\", "
             "\"arguments\": {}}]", "get_time({});", 9,
             "text, then the marker");
    parse_is(M, "[{\"name\": \"get_time\", \"arguments\": {}}]",
             "get_time({});", 0, "the marker dropped by decoding");
    parse_is(M, " [{\"name\": \"get_weather\", \"arguments\": "
             "{\"city\": \"Nice\"}, \"id\": \"abcDEF123\"}]",
             "get_weather({\"city\": \"Nice\"});", 0,
             "an id, as v0.3's history writes it, after the dropped marker");
    parse_is(M, "[{\"name\": \"get_time\", \"arguments\": {}, \"id\": 9}]",
             "-", 0, "an id not a string: content");
    parse_is(M, "[{\"name\": \"get_time\", \"arguments\": {}, "
             "\"type\": \"function\"}]", "-", 0,
             "a type, not Mistral's: content");
    parse_is(M, "[TOOL_CALLS] []", "-", 0, "an empty list: content");
    parse_is(M, "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}",
             "-", 0, "an unclosed list: content");
    parse_is(M, "[1, 2, 3]", "-", 0, "a list of numbers: content");
    parse_is(M, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
             "\"get_time\", \"arguments\": {}}]", "-", 0,
             "a repeated key: content (found by t/fuzz/tools_fuzz.c)");

    /* json (unknown templates) */
    parse_is(J, "[{\"name\": \"get_time\", \"arguments\": {}}]",
             "get_time({});", 0, "one call");
    parse_is(J, "{\"name\": \"get_time\", \"arguments\": {}}", "-", 0,
             "an object, not a list: content");
    parse_is(J, "[{\"name\": \"get_time\", \"arguments\": {}}] done", "-", 0,
             "text after: content");
}


static void
test_hold(void)
{
    const char  *t;

    t = "Let me check <tool";
    is_int(pl_tools_hold(PL_TOOLS_HERMES, t, strlen(t), 1), 13,
           "hermes: a tail that may become <tool_call> is held");
    t = "Hi <tool_call>\n{\"na";
    is_int(pl_tools_hold(PL_TOOLS_HERMES, t, strlen(t), 0), 3,
           "hermes: everything from <tool_call> is held");
    t = "Hello there";
    is_int(pl_tools_hold(PL_TOOLS_HERMES, t, strlen(t), 1), strlen(t),
           "hermes: plain text is not held");
    t = "  {\"name";
    is_int(pl_tools_hold(PL_TOOLS_LLAMA, t, strlen(t), 1), 0,
           "llama: an answer that opens an object is held");
    is_int(pl_tools_hold(PL_TOOLS_LLAMA, t, strlen(t), 0), strlen(t),
           "llama: not at the answer's start, not held");
    t = "<|pyth";
    is_int(pl_tools_hold(PL_TOOLS_LLAMA, t, strlen(t), 1), 0,
           "llama: a python tag's beginning is held");
    t = "\n ";
    is_int(pl_tools_hold(PL_TOOLS_JSON, t, strlen(t), 1), 0,
           "json: blanks at the start are held");
    t = "[{";
    is_int(pl_tools_hold(PL_TOOLS_MISTRAL, t, strlen(t), 1), 0,
           "mistral: a list at the start is held");
    t = "ok [TOOL_CA";
    is_int(pl_tools_hold(PL_TOOLS_MISTRAL, t, strlen(t), 1), 3,
           "mistral: the marker's beginning is held");
}


/* the forced grammar of format f over the test's functions */
static pl_grammar_t *
forced(pl_tools_format_t f, int parallel, const json_t *fns)
{
    json_t        *schema;
    pl_gtext_t     t = { 0 };
    pl_grammar_t  *g;
    char          *s, *ebnf, err[256];
    size_t         len;

    schema = pl_tools_call_schema(f, fns);
    s = json_dumps(schema, JSON_COMPACT);
    if (pl_grammar_from_schema_text(s, strlen(s), &t, err, sizeof(err))
        != 0)
    {
        diag("schema: %s", err);
        return NULL;
    }
    ebnf = pl_tools_grammar(f, parallel, t.data, t.len, &len);
    g = ebnf ? pl_grammar_compile(ebnf, len, err, sizeof(err)) : NULL;
    if (g == NULL) {
        diag("grammar: %s", ebnf ? err : "not made");
    }
    free(ebnf);
    free(s);
    pl_gtext_free(&t);
    json_decref(schema);
    return g;
}


static int
accepts(pl_grammar_t *g, const char *s)
{
    int32_t  st = pl_grammar_walk(g, pl_grammar_start(g), s, strlen(s));

    return st >= 0 && pl_grammar_accepts(g, st);
}


static void
test_grammar(void)
{
    json_t             *fns;
    pl_grammar_t       *g;
    pl_tools_format_t   f;
    size_t              i, content;
    static const char  *good[4][2] = {
        { "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\","
          "\"unit\":{\"c\":true}}}]",
          "[{\"name\":\"get_time\",\"arguments\":{}},{\"name\":"
          "\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}]" },
        { "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":"
          "\"Oslo\"}}\n</tool_call>",
          "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n"
          "</tool_call>\n<tool_call>\n{\"name\":\"get_time\","
          "\"arguments\":{}}\n</tool_call>" },
        { "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}",
          "{\"name\":\"get_time\",\"parameters\":{}}; {\"name\":"
          "\"get_time\",\"parameters\":{}}" },
        { "[{\"name\":\"get_time\",\"arguments\":{}}]",
          "[{\"name\":\"get_time\",\"arguments\":{}},{\"name\":\"get_time\","
          "\"arguments\":{}}]" },
    };

    fns = json_loads("[{\"name\": \"get_weather\", \"parameters\": "
                     "{\"type\": \"object\", \"properties\": {\"city\": "
                     "{\"type\": \"string\", \"maxLength\": 20}, \"unit\": "
                     "{\"$ref\": \"#/$defs/unit\"}}, \"required\": "
                     "[\"city\"], \"$defs\": {\"unit\": {\"type\": "
                     "\"object\", \"properties\": {\"c\": {\"type\": "
                     "\"boolean\"}}, \"required\": [\"c\"]}}}}, "
                     "{\"name\": \"get_time\"}]", 0, NULL);

    for (f = PL_TOOLS_JSON; f <= PL_TOOLS_MISTRAL; f++) {
        g = forced(f, 0, fns);
        ok(g != NULL, "%s: the forced grammar compiles ($ref included)",
           pl_tools_format_name(f));
        if (g == NULL) {
            continue;
        }
        ok(accepts(g, good[f][0]), "%s: one call is in it",
           pl_tools_format_name(f));
        ok(!accepts(g, good[f][1]), "%s: two calls are not (parallel off)",
           pl_tools_format_name(f));
        ok(strcmp(calls_of(f, good[f][0], &content), "-") != 0,
           "%s: what it forces parses into a call",
           pl_tools_format_name(f));
        pl_grammar_free(g);

        g = forced(f, 1, fns);
        ok(g != NULL && accepts(g, good[f][0]) && accepts(g, good[f][1]),
           "%s parallel: one or two calls are in it",
           pl_tools_format_name(f));
        ok(strcmp(calls_of(f, good[f][1], &content), "-") != 0,
           "%s parallel: two calls parse", pl_tools_format_name(f));
        pl_grammar_free(g);
    }

    g = forced(PL_TOOLS_JSON, 1, fns);
    for (i = 0; g && i < 5; i++) {
        static const char  *bad[] = {
            "[{\"name\":\"rm\",\"arguments\":{}}]",
            "[{\"name\":\"get_weather\",\"arguments\":{}}]",
            "[{\"name\":\"get_weather\",\"arguments\":{\"city\":7}}]",
            "[{\"name\":\"get_time\",\"arguments\":{\"x\":1}}]",
            "[]",
        };
        ok(!accepts(g, bad[i]), "json: %s is outside the grammar", bad[i]);
    }
    pl_grammar_free(g);
    json_decref(fns);
}


/* every prefix of a forced output of two calls read as it is written */
static void
test_progress(void)
{
    static const char  *forced[4] = {
        "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"O}\\\"\"}},"
        "{\"name\":\"get_time\",\"arguments\":{}}]",
        "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"a\":[1,"
        "{\"b\":2}]}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\","
        "\"arguments\":{}}\n</tool_call>",
        "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}; "
        "{\"name\":\"get_time\",\"parameters\":{}}",
        "[{\"name\":\"get_weather\",\"arguments\":{\"n\":-1.5e3}},"
        "{\"name\":\"get_time\",\"arguments\":{}}]",
    };
    pl_tools_span_t     sp[4], last[4];
    pl_tools_format_t   f;
    json_t             *calls;
    size_t              len, k, n, c, prev, content, bad;
    const char         *t, *a;

    for (f = PL_TOOLS_JSON; f <= PL_TOOLS_MISTRAL; f++) {
        t = forced[f];
        len = strlen(t);
        prev = 0;
        bad = 0;
        calls = pl_tools_parse(f, t, len, names, &content);

        for (k = 0; k <= len; k++) {
            n = pl_tools_progress(f, t, k, sp, 4);
            bad += n < prev || n > 2;
            for (c = 0; c < n && calls; c++) {
                a = json_string_value(json_object_get(
                        json_array_get(calls, c), "arguments"));
                bad += strncmp(t + sp[c].name, json_string_value(
                           json_object_get(json_array_get(calls, c), "name")),
                           sp[c].name_len) != 0;
                bad += sp[c].args && strncmp(t + sp[c].args, a,
                                             sp[c].args_len) != 0;
                bad += sp[c].done && sp[c].args_len != strlen(a);
            }
            prev = n;
            memcpy(last, sp, sizeof(sp));
        }

        ok(calls != NULL && bad == 0 && prev == 2 && last[0].done
           && last[1].done,
           "%s: every prefix of two forced calls read as written so far",
           pl_tools_format_name(f));
        json_decref(calls);
    }
}


/* one mutated answer through the parser and the progress reader */
static size_t
check_mutant(pl_tools_format_t f, const char *t, size_t len)
{
    pl_tools_span_t   sp[8];
    json_t           *calls, *c, *args;
    size_t            i, n, content, bad = 0;

    calls = pl_tools_parse(f, t, len, names, &content);
    json_array_foreach(calls, i, c) {
        args = json_loads(json_string_value(json_object_get(c, "arguments")),
                          0, NULL);
        bad += !json_is_object(args) || content > len
               || !json_is_string(json_object_get(c, "name"));
        json_decref(args);
    }
    json_decref(calls);

    n = pl_tools_progress(f, t, len, sp, 8);
    for (i = 0; i < n; i++) {
        bad += sp[i].name + sp[i].name_len > len
               || sp[i].args + sp[i].args_len > len;
    }
    return bad;
}


static void
test_mutants(void)
{
    static const char  *seeds[] = {
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"a\": "
        "[1, \"x\\\"}\"]}}\n</tool_call>",
        "[{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}},"
        "{\"name\":\"get_time\",\"arguments\":{}}]",
        "{\"name\":\"get_time\",\"parameters\":{}}; {\"name\":"
        "\"get_time\",\"parameters\":{\"k\":null}}",
        "ok[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
    };
    char               buf[256];
    size_t             len, k, bad = 0, runs = 0;
    unsigned           seed = 12345, r;
    pl_tools_format_t  f;

    for (k = 0; k < 40000; k++) {
        len = strlen(seeds[k % 4]);
        memcpy(buf, seeds[k % 4], len);
        for (r = 0; r < 1 + k % 4; r++) {
            seed = seed * 1103515245 + 12345;
            switch ((seed >> 16) % 3) {
            case 0:
                buf[(seed >> 8) % len] = (char) (seed >> 24);
                break;
            case 1:
                len = len > 1 ? len - 1 - (seed >> 8) % 2 : len;
                break;
            default:
                if (len < sizeof(buf) - 1) {
                    buf[len++] = "{}[]\",: \\"[(seed >> 8) % 9];
                }
            }
        }
        for (f = PL_TOOLS_JSON; f <= PL_TOOLS_MISTRAL; f++) {
            bad += check_mutant(f, buf, len);
            runs++;
        }
    }

    ok(bad == 0, "%zu mutated answers: what parses is calls, every span "
       "inside the text", runs);
}


int
main(void)
{
    names = json_pack("[s,s]", "get_weather", "get_time");

    test_detect();
    test_parse();
    test_hold();
    test_grammar();
    test_progress();
    test_mutants();

    json_decref(names);
    return done_testing();
}
