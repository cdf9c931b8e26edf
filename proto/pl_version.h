/*
 * pl_version.h: pagedllm's version, the one place it is written.  Every
 * program's --version prints it (pl_cli.h) and the nginx module answers it
 * on GET /version.
 */
#ifndef PL_VERSION_H
#define PL_VERSION_H

#define PL_VERSION "0.1.0"

#endif
