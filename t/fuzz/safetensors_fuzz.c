/*
 * safetensors_fuzz: a libFuzzer target for the safetensors reader.  Each
 * input is a whole file: it goes into a memfd and through pl_st_open();
 * the reader must either refuse it with a message or hand out tensors
 * that all lie inside the file, and must never crash, leak or read out of
 * bounds (AddressSanitizer watches).
 *
 * Build and run (clang, from the repository root):
 *
 *     clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 \
 *         -D_GNU_SOURCE -Iproto -Itext -Ikernels -Iengine \
 *         t/fuzz/safetensors_fuzz.c engine/safetensors.c kernels/dtype.c \
 *         -ljansson -o /tmp/safetensors_fuzz
 *     mkdir -p /tmp/st-corpus
 *     cp t/fixtures/golden/llama_tied/model.safetensors /tmp/st-corpus/
 *     /tmp/safetensors_fuzz -max_len=4096 /tmp/st-corpus
 *
 * (-max_len keeps inputs to the header and a little data, where the
 * parsing is.)  The deterministic twin that CI runs is
 * t/unit/safetensors_fuzz.c.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char               path[64], err[512];
    pl_safetensors_t  *st;
    int                fd = memfd_create("st-fuzz", MFD_CLOEXEC), i;

    if (fd < 0) {
        return 0;
    }
    if (write(fd, data, size) != (ssize_t) size) {
        close(fd);
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    st = pl_st_open(path, err, sizeof(err));
    for (i = 0; st != NULL && i < pl_st_count(st); i++) {
        const pl_st_tensor_t  *t = pl_st_tensor(st, i);
        volatile uint8_t       sum = 0;
        size_t                 j;

        for (j = 0; j < t->nbytes; j++) {
            sum += ((const uint8_t *) t->data)[j];
        }
        if (pl_st_find(st, t->name) != t) {
            abort();
        }
    }
    pl_st_close(st);
    close(fd);
    return 0;
}
