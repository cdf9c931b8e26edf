/*
 * fuzz_file.h: an input handed to a reader that takes a path (tokenizer.json,
 * safetensors): the bytes go into a memfd, which /proc/self/fd/N names.
 */

#ifndef PL_FUZZ_FILE_H
#define PL_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>


/* The memfd holding data (path[len] names it; close it after), or -1. */
static inline int
fuzz_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    int  fd = memfd_create("fuzz", MFD_CLOEXEC);

    if (fd < 0) {
        return -1;
    }
    if (write(fd, data, size) != (ssize_t) size) {
        close(fd);
        return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);

    return fd;
}

#endif /* PL_FUZZ_FILE_H */
