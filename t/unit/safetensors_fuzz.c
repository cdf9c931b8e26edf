/*
 * safetensors_fuzz: a deterministic fuzz loop over the safetensors reader,
 * small enough for every CI run.  Starting from a real file (the bf16
 * golden Llama's model.safetensors), each round applies one to four
 * seeded mutations, aimed mostly at the JSON header where the parsing is:
 * random bytes, JSON punctuation, huge or negative numbers, a changed
 * header length, bytes cut out or repeated, the file truncated.  Every
 * mutant must either be refused with a message or load with tensors whose
 * bytes can all be read, whose size matches shape and dtype, and which
 * lookup finds again.  Reaching the end without a crash is the point; run
 * it under AddressSanitizer for out-of-bounds reads too
 * (make CFLAGS='-O1 -g -fsanitize=address' ...).  The coverage-guided
 * libFuzzer target is t/fuzz/safetensors_fuzz.c.
 */

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "safetensors.h"
#include "tap.h"

#define SOURCE  "t/fixtures/golden/llama_tied/model.safetensors"
#define ROUNDS  3000

static uint64_t  rng = 0x5afe7e45012345ULL;


static uint32_t
next(void)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t) (rng >> 33);
}


static uint8_t *
read_source(size_t *len)
{
    FILE     *f = fopen(SOURCE, "rb");
    uint8_t  *buf = NULL;
    long      size;

    if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 8
        && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc(size)) != NULL
        && fread(buf, 1, size, f) == (size_t) size)
    {
        *len = (size_t) size;
    } else {
        free(buf);
        buf = NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    return buf;
}


/* a position in the header (8-byte length + JSON), now and then anywhere */
static size_t
header_pos(size_t hend, size_t len)
{
    return next() % 8 == 0 ? next() % len : next() % hend;
}


/* One mutation of buf[*len] (capacity cap) in place. */
static void
mutate(uint8_t *buf, size_t *len, size_t cap, size_t hend)
{
    static const char  punct[] = "{}[]\":,-.eE0123456789 \\u";
    static const char *numbers[] = {
        "99999999999999999999", "-1", "18446744073709551615", "1e300",
        "0", "4294967296", "9223372036854775807"
    };
    size_t             at = header_pos(hend, *len), n;
    const char        *num;

    switch (next() % 7) {
    case 0:
        buf[at] = (uint8_t) next();
        break;
    case 1:
        buf[at] = (uint8_t) punct[next() % (sizeof(punct) - 1)];
        break;
    case 2:
        num = numbers[next() % 7];
        n = strlen(num);
        if (at + n < *len) {
            memcpy(buf + at, num, n);
        }
        break;
    case 3:
        buf[next() % 8] = (uint8_t) next();
        break;
    case 4:
        n = next() % 64;
        if (at + n < *len) {
            memmove(buf + at, buf + at + n, *len - at - n);
            *len -= n;
        }
        break;
    case 5:
        n = next() % 64;
        if (*len + n <= cap && at + n < *len) {
            memmove(buf + at + n, buf + at, *len - at);
            *len += n;
        }
        break;
    default:
        *len = next() % (*len + 1);
        break;
    }
}


/* the file in a memfd, opened by its /proc path; 1 loaded, 0 refused with
   a message, -1 loaded but inconsistent or refused silently */
static int
try_open(const uint8_t *buf, size_t len)
{
    char               path[64], err[512] = "";
    int                fd = memfd_create("st-fuzz", MFD_CLOEXEC), i, rc = 1;
    pl_safetensors_t  *st;

    if (fd < 0 || write(fd, buf, len) != (ssize_t) len) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    st = pl_st_open(path, err, sizeof(err));
    for (i = 0; st != NULL && i < pl_st_count(st); i++) {
        const pl_st_tensor_t  *t = pl_st_tensor(st, i);
        uint64_t               elems = 1, sum = 0;
        size_t                 j;
        int                    d;

        for (d = 0; d < t->ndim; d++) {
            elems *= (uint64_t) t->shape[d];
        }
        for (j = 0; j < t->nbytes; j++) {
            sum += ((const uint8_t *) t->data)[j];
        }
        if (elems * pl_dtype_size(t->dtype) != t->nbytes
            || pl_st_find(st, t->name) != t || sum == UINT64_MAX)
        {
            rc = -1;
        }
    }
    if (st == NULL) {
        rc = err[0] != '\0' ? 0 : -1;
    }
    pl_st_close(st);
    close(fd);
    return rc;
}


int
main(void)
{
    size_t    len, cap, n, hend;
    uint8_t  *src = read_source(&len), *buf;
    int       round, k, loaded = 0, refused = 0, bad = 0;

    if (src == NULL) {
        printf("Bail out! cannot read %s (run from the repository root)\n",
               SOURCE);
        return 1;
    }
    hend = 8;
    for (k = 0; k < 8; k++) {
        hend += (size_t) src[k] << (8 * k);
    }
    cap = len + 4096;
    buf = malloc(cap);
    ok(try_open(src, len) == 1, "the unmutated file loads");
    for (round = 0; round < ROUNDS; round++) {
        n = len;
        memcpy(buf, src, len);
        for (k = 1 + next() % 4; k > 0; k--) {
            mutate(buf, &n, cap, hend < n ? hend : n);
        }
        switch (try_open(buf, n)) {
        case 1:
            loaded++;
            break;
        case 0:
            refused++;
            break;
        default:
            bad++;
            break;
        }
    }
    ok(bad == 0, "%d mutants: each loads consistently or is refused with a "
       "message (%d loaded, %d refused, %d neither)", ROUNDS, loaded,
       refused, bad);
    ok(loaded > 0 && refused > ROUNDS / 2, "the mutations reach both "
       "outcomes");
    free(buf);
    free(src);
    return done_testing();
}
