/*
 * jinja_fuzz: a libFuzzer target for the chat template interpreter
 * (text/pl_jinja*.c).  Each input is a template: pl_jinja_parse() must
 * refuse it with a message or return a tree, and pl_jinja_render() of that
 * tree with a conversation like the module's (system, user, assistant and
 * tool messages, tools, the special tokens, add_generation_prompt) must
 * return text or a message, within the interpreter's limits: no crash, no
 * out-of-bounds access, no leak, no hang (libFuzzer's -timeout).
 *
 *     make fuzz-jinja SECONDS=60
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pl_jinja.h"

static const char  fuzz_vars[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are terse.\"},"
    "{\"role\": \"user\", \"content\": \"Hi <b>there</b>\\n\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>hm</think>Hello!\","
    " \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]},"
    "{\"role\": \"tool\", \"content\": [{\"type\": \"text\","
    " \"text\": \"42\"}]},"
    "{\"role\": \"user\", \"content\": \"caf\\u00e9 \\ud83d\\ude00\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
    " \"parameters\": {\"type\": \"object\"}}}],"
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    "\"add_generation_prompt\": true, \"n\": 3, \"x\": null,"
    "\"f\": 1.5, \"l\": [1, \"a\", [2], {\"k\": false}]}";

static json_t  *vars;


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;

    vars = json_loads(fuzz_vars, 0, NULL);
    if (vars == NULL) {
        abort();
    }

    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char         err[512];
    char        *out;
    size_t       len;
    pl_jinja_t  *tpl;

    err[0] = '\0';
    tpl = pl_jinja_parse((const char *) data, size, err, sizeof(err));
    if (tpl == NULL) {
        if (err[0] == '\0') {
            abort();
        }
        return 0;
    }

    err[0] = '\0';
    out = pl_jinja_render(tpl, vars, &len, err, sizeof(err));
    if (out == NULL) {
        if (err[0] == '\0') {
            abort();
        }
    } else if (strlen(out) > len) {
        abort();
    }

    free(out);
    pl_jinja_free(tpl);

    return 0;
}
