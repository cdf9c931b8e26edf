/*
 * pagedllm-tokenize: the tokenizer and chat templates from the command
 * line, for tests and for people.
 *
 *   pagedllm-tokenize --tokenizer tokenizer.json [options] < input
 *
 * Each input line is one JSON value:
 *   (default)  a string to encode      -> a JSON array of ids
 *   --decode   an array of ids         -> the decoded JSON string
 *   --stream   an array of ids         -> a JSON array of the strings
 *              each incremental push (and the final flush) returned
 *   --chat F   a conversation (array of messages, or an object with
 *              "messages" and optional "add_generation_prompt") rendered
 *              with tokenizer_config.json F's chat template -> JSON string
 * Options: --no-special (no BOS/EOS template), --no-parse-special
 * (special tokens in the text are plain text), --skip-special (decode).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "pl_chat.h"
#include "pl_cli.h"
#include "pl_tokenizer.h"

#define TOK_NAME  "pagedllm-tokenize"

typedef struct {
    const char  *tokenizer;
    const char  *chat;
    int          decode;
    int          stream;
    int          add_special;
    int          parse_special;
    int          skip_special;
} pl_cli_opts_t;

static const char  usage_text[] =
"usage: pagedllm-tokenize --tokenizer FILE [options] < lines\n"
"       pagedllm-tokenize --chat CONFIG [--tokenizer FILE] < lines\n"
"\n"
"Each input line is one JSON value; each output line its answer.\n"
"\n"
"  --tokenizer FILE      tokenizer.json; a string in, its ids out\n"
"  --decode              an array of ids in, the decoded string out\n"
"  --stream              an array of ids in, the strings each\n"
"                        incremental step returned out\n"
"  --chat CONFIG         a conversation in, rendered with the chat\n"
"                        template of tokenizer_config.json CONFIG\n"
"  --no-special          no BOS/EOS added when encoding\n"
"  --no-parse-special    special tokens in the text are plain text\n"
"  --skip-special        special tokens left out when decoding\n"
"  --help                this text\n"
"  --version             the name and version\n";

static void
print_json(json_t *v)
{
    char  *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

    printf("%s\n", s ? s : "null");
    free(s);
    json_decref(v);
}

static int
encode_line(const pl_tokenizer_t *t, const pl_cli_opts_t *o, json_t *in)
{
    const char  *s = json_string_value(in);
    size_t       len = json_string_length(in), cap, i;
    int32_t     *ids;
    json_t      *arr;
    int          n;

    if (s == NULL) {
        fprintf(stderr, "pagedllm-tokenize: expected a JSON string\n");
        return -1;
    }
    cap = len + PL_TOKENIZER_EXTRA;
    ids = malloc(cap * sizeof(int32_t));
    if (ids == NULL) {
        return -1;
    }
    n = pl_tokenizer_encode(t, s, len, o->add_special, o->parse_special, ids,
                            cap);
    if (n < 0) {
        fprintf(stderr, "pagedllm-tokenize: encode failed (%d%s)\n", n,
                n == -1 ? ": invalid UTF-8" : "");
        free(ids);
        return -1;
    }
    arr = json_array();
    for (i = 0; i < (size_t) n; i++) {
        json_array_append_new(arr, json_integer(ids[i]));
    }
    free(ids);
    print_json(arr);
    return 0;
}

static int
ids_of(json_t *in, int32_t **ids, size_t *n)
{
    size_t  i;

    if (!json_is_array(in)) {
        fprintf(stderr, "pagedllm-tokenize: expected a JSON array of ids\n");
        return -1;
    }
    *n = json_array_size(in);
    *ids = malloc((*n + 1) * sizeof(int32_t));
    if (*ids == NULL) {
        return -1;
    }
    for (i = 0; i < *n; i++) {
        json_t  *v = json_array_get(in, i);

        if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN
            || json_integer_value(v) > INT32_MAX)
        {
            fprintf(stderr, "pagedllm-tokenize: ids must be integers\n");
            free(*ids);
            return -1;
        }
        (*ids)[i] = (int32_t) json_integer_value(v);
    }
    return 0;
}

static int
decode_line(const pl_tokenizer_t *t, const pl_cli_opts_t *o, json_t *in)
{
    int32_t  *ids;
    size_t    n, cap = 1024;
    char     *out = NULL;
    long      len = -1;

    if (ids_of(in, &ids, &n) != 0) {
        return -1;
    }
    while (len < 0) {
        free(out);
        cap *= 4;
        out = malloc(cap);
        if (out == NULL) {
            free(ids);
            return -1;
        }
        len = pl_tokenizer_decode(t, ids, n, o->skip_special, out, cap);
    }
    print_json(json_stringn(out, (size_t) len));
    free(out);
    free(ids);
    return 0;
}

static int
stream_line(const pl_tokenizer_t *t, const pl_cli_opts_t *o, json_t *in)
{
    pl_detok_t   d;
    int32_t     *ids;
    size_t       n, i;
    char         buf[4096];
    long         len;
    json_t      *arr;

    if (ids_of(in, &ids, &n) != 0) {
        return -1;
    }
    pl_detok_init(&d, t, o->skip_special);
    arr = json_array();
    for (i = 0; i <= n; i++) {
        len = (i < n) ? pl_detok_push(&d, ids[i], buf, sizeof(buf))
                      : pl_detok_flush(&d, buf, sizeof(buf));
        if (len < 0) {
            fprintf(stderr, "pagedllm-tokenize: piece too long\n");
            json_decref(arr);
            free(ids);
            return -1;
        }
        json_array_append_new(arr, json_stringn(buf, (size_t) len));
    }
    free(ids);
    print_json(arr);
    return 0;
}

static int
chat_line(const pl_chat_t *c, json_t *in)
{
    json_t  *msgs = json_is_object(in) ? json_object_get(in, "messages") : in;
    json_t  *extra = json_is_object(in) ? json_deep_copy(in) : NULL;
    int      gen = json_is_object(in)
                   && json_is_true(json_object_get(in,
                                                   "add_generation_prompt"));
    char     err[256];
    char    *out;

    if (extra != NULL) {
        json_object_del(extra, "messages");
        json_object_del(extra, "add_generation_prompt");
    }
    out = pl_chat_render(c, msgs, gen, extra, err, sizeof(err));
    json_decref(extra);
    if (out == NULL) {
        fprintf(stderr, "pagedllm-tokenize: %s\n", err);
        return -1;
    }
    print_json(json_string(out));
    free(out);
    return 0;
}

/* 0, or the exit status of an error it printed */
static int
parse_args(int argc, char **argv, pl_cli_opts_t *o)
{
    int  i;

    memset(o, 0, sizeof(*o));
    o->add_special = 1;
    o->parse_special = 1;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) {
            o->tokenizer = argv[++i];
        } else if (strcmp(argv[i], "--chat") == 0 && i + 1 < argc) {
            o->chat = argv[++i];
        } else if (strcmp(argv[i], "--decode") == 0) {
            o->decode = 1;
        } else if (strcmp(argv[i], "--stream") == 0) {
            o->stream = 1;
        } else if (strcmp(argv[i], "--no-special") == 0) {
            o->add_special = 0;
        } else if (strcmp(argv[i], "--no-parse-special") == 0) {
            o->parse_special = 0;
        } else if (strcmp(argv[i], "--skip-special") == 0) {
            o->skip_special = 1;
        } else if (strcmp(argv[i], "--tokenizer") == 0
                   || strcmp(argv[i], "--chat") == 0)
        {
            return pl_cli_error(TOK_NAME, "%s needs a value", argv[i]);
        } else if (argv[i][0] == '-') {
            return pl_cli_error(TOK_NAME, "unknown option '%s'", argv[i]);
        } else {
            return pl_cli_error(TOK_NAME, "unexpected argument '%s'",
                                argv[i]);
        }
    }
    if (o->tokenizer == NULL && o->chat == NULL) {
        return pl_cli_error(TOK_NAME, "--tokenizer FILE or --chat CONFIG "
                            "is required");
    }
    return 0;
}

int
main(int argc, char **argv)
{
    pl_cli_opts_t    o;
    pl_tokenizer_t  *t = NULL;
    pl_chat_t       *c = NULL;
    char             err[512], *line = NULL;
    size_t           lcap = 0;
    ssize_t          llen;
    json_error_t     jerr;
    int              rc = 0;

    pl_cli_standard(argc, argv, TOK_NAME, usage_text);
    if (parse_args(argc, argv, &o) != 0) {
        return PL_CLI_USAGE;
    }
    if (o.tokenizer && (t = pl_tokenizer_load(o.tokenizer, err,
                                              sizeof(err))) == NULL)
    {
        fprintf(stderr, "pagedllm-tokenize: %s\n", err);
        return 1;
    }
    if (o.chat && (c = pl_chat_load(o.chat, err, sizeof(err))) == NULL) {
        fprintf(stderr, "pagedllm-tokenize: %s\n", err);
        pl_tokenizer_free(t);
        return 1;
    }
    while ((llen = getline(&line, &lcap, stdin)) > 0) {
        json_t  *in = json_loadb(line, (size_t) llen,
                                 JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);

        if (in == NULL) {
            fprintf(stderr, "pagedllm-tokenize: bad JSON line: %s\n",
                    jerr.text);
            printf("null\n");
            rc = 1;
            continue;
        }
        if ((c ? chat_line(c, in)
             : (o.stream && t) ? stream_line(t, &o, in)
             : (o.decode && t) ? decode_line(t, &o, in)
             : t ? encode_line(t, &o, in) : -1) != 0)
        {
            rc = 1;
            printf("null\n");
        }
        fflush(stdout);
        json_decref(in);
    }
    free(line);
    pl_chat_free(c);
    pl_tokenizer_free(t);
    return rc;
}
