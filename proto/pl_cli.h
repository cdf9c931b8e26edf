/*
 * pl_cli.h: the command-line conventions every pagedllm program shares,
 * written once so that they all answer alike:
 *
 *   NAME --help       the usage on stdout, exit status 0
 *   NAME --version    "NAME VERSION" on stdout, exit status 0
 *   a bad flag, value or argument
 *                     one line on stderr ending in a hint,
 *                     "NAME: unknown option '--x'; try 'NAME --help'",
 *                     exit status 2
 *
 * --help and --version are honoured wherever they stand before "--", so a
 * program answers them before it checks anything else.
 */
#ifndef PL_CLI_H
#define PL_CLI_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_version.h"

#define PL_CLI_USAGE 2       /* the exit status of a command-line error */


/* Answers --help or --version, if argv holds one, and exits. */
static inline void
pl_cli_standard(int argc, char **argv, const char *name, const char *usage)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            exit(0);
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s %s\n", name, PL_VERSION);
            exit(0);
        }
    }
}


/* Prints "NAME: message; try 'NAME --help'" on stderr; PL_CLI_USAGE. */
static inline int __attribute__((format(printf, 2, 3)))
pl_cli_error(const char *name, const char *fmt, ...)
{
    va_list  ap;

    fprintf(stderr, "%s: ", name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; try '%s --help'\n", name);

    return PL_CLI_USAGE;
}

#endif
