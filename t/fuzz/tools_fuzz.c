/*
 * tools_fuzz: a libFuzzer target for the tool-call reader (text/pl_tools.c),
 * which reads what a model wrote: the answer parsed into calls when
 * tool_choice is auto, the offset a stream holds its text back from, and
 * the calls of a forced answer as it is being written.  A model's output
 * is as arbitrary as a client's request, so the reader gets the same
 * treatment.  The first byte of an input picks the format (its low two
 * bits) and whether the text begins the answer (bit 2); the rest is the
 * model's text (seeds: answers in each format, well formed and cut).
 *
 * Beyond "no crash, no leak, no sanitizer report":
 *   - the hold offset lies inside the text;
 *   - parsed calls are an array of objects whose name is one of the
 *     functions offered and whose arguments are a string that decodes to
 *     a JSON object, with the content before them inside the text;
 *   - every span of a call being written lies inside the text, its
 *     arguments after its name.
 *
 *     make fuzz-tools SECONDS=60
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "pl_tools.h"

#define FT_MAX_SPANS  8

static json_t  *ft_names;


static void
ft_check_calls(json_t *calls, size_t len, size_t content_len)
{
    json_t  *call, *name, *args, *obj;
    size_t   i;

    if (!json_is_array(calls) || content_len > len) {
        abort();
    }
    json_array_foreach(calls, i, call) {
        name = json_object_get(call, "name");
        args = json_object_get(call, "arguments");
        if (!json_is_string(name) || !json_is_string(args)) {
            abort();
        }
        if (strcmp(json_string_value(name), "get_weather") != 0
            && strcmp(json_string_value(name), "get_time") != 0)
        {
            abort();
        }
        obj = json_loads(json_string_value(args), 0, NULL);
        if (!json_is_object(obj)) {
            abort();
        }
        json_decref(obj);
    }
}


static void
ft_check_spans(const pl_tools_span_t *spans, size_t n, size_t len)
{
    size_t  i;

    if (n > FT_MAX_SPANS) {
        abort();
    }
    for (i = 0; i < n; i++) {
        if (spans[i].name > len || spans[i].name_len > len - spans[i].name) {
            abort();
        }
        if (spans[i].args == 0) {
            continue;
        }
        if (spans[i].args < spans[i].name + spans[i].name_len
            || spans[i].args > len || spans[i].args_len > len - spans[i].args)
        {
            abort();
        }
    }
}


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;

    ft_names = json_pack("[ss]", "get_weather", "get_time");

    return ft_names ? 0 : -1;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const pl_tools_format_t  formats[] = {
        PL_TOOLS_JSON, PL_TOOLS_HERMES, PL_TOOLS_LLAMA, PL_TOOLS_MISTRAL
    };
    pl_tools_format_t   f;
    pl_tools_span_t     spans[FT_MAX_SPANS];
    const char         *text;
    json_t             *calls;
    size_t              len, hold, content_len = 0;

    if (size < 1) {
        return 0;
    }
    f = formats[data[0] & 3];
    text = (const char *) data + 1;
    len = size - 1;

    hold = pl_tools_hold(f, text, len, (data[0] >> 2) & 1);
    if (hold > len) {
        abort();
    }

    calls = pl_tools_parse(f, text, len, ft_names, &content_len);
    if (calls != NULL) {
        ft_check_calls(calls, len, content_len);
        json_decref(calls);
    }

    ft_check_spans(spans, pl_tools_progress(f, text, len, spans,
                                            FT_MAX_SPANS), len);

    return 0;
}
