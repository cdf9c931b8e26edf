/*
 * safetensors_fuzz: a libFuzzer target for the safetensors reader.  Each
 * input is a whole file: it goes into a memfd and through pl_st_open();
 * the reader must either refuse it with a message or hand out tensors
 * that all lie inside the file, and must never crash, leak or read out of
 * bounds (AddressSanitizer watches).
 *
 * Build and run it (t/fuzz/safetensors.options adds -max_len=4096, which
 * keeps inputs to the header and a little data, where the parsing is):
 *
 *     make fuzz-safetensors SECONDS=60
 *
 * The deterministic twin that CI runs is
 * t/unit/safetensors_fuzz.c.
 */

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "safetensors.h"

/* every tensor byte is read into it, so ASan sees a read outside the file */
static volatile uint8_t  fuzz_sink;


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char               path[64], err[512];
    pl_safetensors_t  *st;
    int                fd = fuzz_file(data, size, path, sizeof(path)), i;

    if (fd < 0) {
        return 0;
    }
    st = pl_st_open(path, err, sizeof(err));
    for (i = 0; st != NULL && i < pl_st_count(st); i++) {
        const pl_st_tensor_t  *t = pl_st_tensor(st, i);
        size_t                 j;

        for (j = 0; j < t->nbytes; j++) {
            fuzz_sink += ((const uint8_t *) t->data)[j];
        }
        if (pl_st_find(st, t->name) != t) {
            abort();
        }
    }
    pl_st_close(st);
    close(fd);
    return 0;
}
