/*
 * pagedllm-grammar: the grammar engine from the command line, for users
 * checking a constraint and for the tests that hold the automaton to an
 * independent matcher (t/61-structured.t, node's RegExp and ajv).
 *
 *   pagedllm-grammar (--schema FILE | --regex RE | --ebnf FILE
 *                     | --json-object) [--print] [--match] [--sample N]
 *
 * --print writes the EBNF the constraint compiles from.  --match reads
 * lines of hex-encoded byte strings and answers one line each: M (the
 * whole string is in the language), P (a prefix of a string in it) or D
 * (neither).  --sample N writes N strings of the language, one per line
 * in hex, each made by random bytes from the start state (seed --seed,
 * at most --max-len bytes; a walk that reaches the limit is dropped).
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "pl_cli.h"

#define MAX_LINE  (1 << 20)


static char *
read_file(const char *path, size_t *len)
{
    FILE  *f = fopen(path, "rb");
    char  *buf;
    long   n;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0) {
        if (f) {
            fclose(f);
        }
        return NULL;
    }
    rewind(f);
    buf = malloc((size_t) n + 1);
    if (buf && fread(buf, 1, (size_t) n, f) != (size_t) n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t) n;
    }

    return buf;
}


static int
hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f'
           ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}


static void
match_lines(pl_grammar_t *g)
{
    static char  line[MAX_LINE];
    uint8_t     *bytes = malloc(MAX_LINE / 2);
    size_t       n, i;
    int32_t      s;

    while (bytes && fgets(line, sizeof(line), stdin)) {
        for (n = 0, i = 0; hexval(line[i]) >= 0 && hexval(line[i + 1]) >= 0;
             i += 2)
        {
            bytes[n++] = (uint8_t) (hexval(line[i]) * 16
                                    + hexval(line[i + 1]));
        }
        s = pl_grammar_walk(g, pl_grammar_start(g), bytes, n);
        puts(s < 0 ? "D" : pl_grammar_accepts(g, s) ? "M" : "P");
    }
    fflush(stdout);
    free(bytes);
}


static uint64_t
next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;

    return *x;
}


/* one walk: at each step a random next state (bytes to the same state
   count once, so a string's closing quote is as likely as its other
   characters together), a random byte to it; where the state accepts,
   stop with chance 1/4 (or when nothing follows) */
static void
sample(pl_grammar_t *g, uint64_t *rng, size_t max_len)
{
    uint8_t  out[4096], opts[256];
    int32_t  s = pl_grammar_start(g), to[256], pick;
    size_t   n = 0, i;
    int      k, b, n_to, j;

    for ( ;; ) {
        for (n_to = 0, b = 0; b < 256; b++) {
            to[b] = pl_grammar_step(g, s, (uint8_t) b);
            for (j = 0; to[b] >= 0 && j < b && to[j] != to[b]; j++) {
                /* void */
            }
            n_to += to[b] >= 0 && j == b;
        }
        if (pl_grammar_accepts(g, s)
            && (n_to == 0 || next_rand(rng) % 4 == 0))
        {
            break;
        }
        if (n_to == 0 || n == max_len || n == sizeof(out)) {
            return;
        }
        pick = -1;
        for (b = 0, j = (int) (next_rand(rng) % (uint64_t) n_to); b < 256;
             b++)
        {
            for (k = 0; to[b] >= 0 && k < b && to[k] != to[b]; k++) {
                /* void */
            }
            if (to[b] >= 0 && k == b && j-- == 0) {
                pick = to[b];
                break;
            }
        }
        for (k = 0, b = 0; b < 256; b++) {
            if (to[b] == pick) {
                opts[k++] = (uint8_t) b;
            }
        }
        out[n] = opts[next_rand(rng) % (uint64_t) k];
        s = pick;
        n++;
    }

    for (i = 0; i < n; i++) {
        printf("%02x", out[i]);
    }
    printf("\n");
}


#define GR_NAME  "pagedllm-grammar"

static const char  usage_text[] =
"usage: pagedllm-grammar (--schema FILE | --regex RE | --ebnf FILE\n"
"                         | --json-object) [--print] [--match]\n"
"                        [--sample N [--seed S] [--max-len L]]\n"
"  --schema FILE   a JSON Schema\n"
"  --regex RE      a regex the whole output matches\n"
"  --ebnf FILE     a grammar in the EBNF subset (README)\n"
"  --json-object   any JSON object\n"
"  --print         write the EBNF the constraint compiles from\n"
"  --match         read hex byte strings, one a line; answer M (in the\n"
"                  language), P (a prefix of one) or D (neither)\n"
"  --sample N      write N strings of the language in hex (--seed S,\n"
"                  at most --max-len L bytes, default 200)\n"
"  --help          this text\n"
"  --version       the version\n";


/* Whether flag is one of the options that take a value. */
static int
takes_value(const char *flag)
{
    static const char  *with[] = { "--schema", "--regex", "--ebnf",
                                   "--sample", "--seed", "--max-len" };
    size_t              i;

    for (i = 0; i < sizeof(with) / sizeof(with[0]); i++) {
        if (strcmp(flag, with[i]) == 0) {
            return 1;
        }
    }

    return 0;
}


int
main(int argc, char **argv)
{
    pl_gtext_t     text = { 0 };
    pl_grammar_t  *g;
    char           err[512], *src = NULL;
    size_t         len = 0, max_len = 200;
    long           samples = 0;
    uint64_t       rng = 88172645463325252ull;
    int            i, print = 0, match = 0, rc = 0;

    err[0] = '\0';
    pl_cli_standard(argc, argv, GR_NAME, usage_text);

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--print") == 0) {
            print = 1;
        } else if (strcmp(argv[i], "--match") == 0) {
            match = 1;
        } else if (strcmp(argv[i], "--json-object") == 0) {
            rc = pl_grammar_from_json_object(&text);
        } else if (!takes_value(argv[i])) {
            return argv[i][0] == '-'
                   ? pl_cli_error(GR_NAME, "unknown option '%s'", argv[i])
                   : pl_cli_error(GR_NAME, "unexpected argument '%s'",
                                  argv[i]);
        } else if (i + 1 >= argc) {
            return pl_cli_error(GR_NAME, "%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--schema") == 0) {
            src = read_file(argv[++i], &len);
            rc = src ? pl_grammar_from_schema_text(src, len, &text, err,
                                                   sizeof(err))
                     : -1;
            if (src == NULL) {
                snprintf(err, sizeof(err), "cannot read %s", argv[i]);
            }
        } else if (strcmp(argv[i], "--regex") == 0) {
            rc = pl_grammar_from_regex(argv[i + 1], strlen(argv[i + 1]),
                                       &text);
            if (rc != 0) {
                snprintf(err, sizeof(err), "the regex '%s' is not supported",
                         argv[i + 1]);
            }
            i++;
        } else if (strcmp(argv[i], "--ebnf") == 0) {
            src = read_file(argv[++i], &len);
            if (src == NULL) {
                fprintf(stderr, "pagedllm-grammar: cannot read %s\n",
                        argv[i]);
                return 1;
            }
            text.data = src;
            text.len = len;
            src = NULL;
        } else if (strcmp(argv[i], "--sample") == 0) {
            samples = atol(argv[++i]);
        } else if (strcmp(argv[i], "--seed") == 0) {
            rng ^= strtoull(argv[++i], NULL, 10) * 0x9e3779b97f4a7c15ull;
        } else {
            max_len = strtoul(argv[++i], NULL, 10);
        }
    }
    free(src);

    if (rc != 0) {
        fprintf(stderr, "pagedllm-grammar: %s\n", err);
        return 1;
    }
    if (text.data == NULL) {
        return pl_cli_error(GR_NAME, "one of --schema, --regex, --ebnf or "
                            "--json-object is needed");
    }
    if (print) {
        fwrite(text.data, 1, text.len, stdout);
    }

    g = pl_grammar_compile(text.data, text.len, err, sizeof(err));
    pl_gtext_free(&text);
    if (g == NULL) {
        fprintf(stderr, "pagedllm-grammar: %s\n", err);
        return 1;
    }

    if (match) {
        match_lines(g);
    }
    while (samples-- > 0) {
        sample(g, &rng, max_len);
    }
    pl_grammar_free(g);

    return 0;
}
