/*
 * safetensors: the loader accepts a well-formed file and refuses each kind
 * of malformed one with a message naming the file and the problem.
 */

#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "safetensors.h"
#include "tap.h"

static char  dir[] = "/tmp/pl-st-XXXXXX";


/* a file of an 8-byte header length, the header text and data_len bytes
   of data (0, 1, 2, ...) */
static const char *
fixture(const char *name, uint64_t hlen, const char *header, size_t data_len)
{
    static char  path[256];
    FILE        *f;
    size_t       i;
    int          b;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    for (b = 0; b < 8; b++) {
        fputc((int) ((hlen >> (8 * b)) & 0xff), f);
    }
    fputs(header, f);
    for (i = 0; i < data_len; i++) {
        fputc((int) (i & 0xff), f);
    }
    fclose(f);
    return path;
}


static const char *
with_header(const char *name, const char *header, size_t data_len)
{
    return fixture(name, strlen(header), header, data_len);
}


/* opening path fails with a message holding the path and fragment */
static void
refused(const char *path, const char *fragment, const char *what)
{
    char               err[512] = "";
    pl_safetensors_t  *st = pl_st_open(path, err, sizeof(err));

    ok(st == NULL && strstr(err, fragment) != NULL
       && strstr(err, path) != NULL, "%s is refused", what);
    if (st != NULL || strstr(err, fragment) == NULL) {
        diag("got \"%s\", want \"%s\"", err, fragment);
    }
    pl_st_close(st);
}


static void
test_valid_file(void)
{
    const char            *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"c\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[32,32]}} ";
    const char            *path = with_header("valid.safetensors", hdr, 32);
    char                   err[512] = "";
    pl_safetensors_t      *st = pl_st_open(path, err, sizeof(err));
    const pl_st_tensor_t  *a, *b;

    if (!ok(st != NULL, "a valid file loads")) {
        diag("%s", err);
        return;
    }
    is_int(pl_st_count(st), 3, "the metadata is not counted as a tensor");
    a = pl_st_find(st, "a");
    b = pl_st_find(st, "b");
    ok(a != NULL && a->dtype == PL_DT_F32 && a->ndim == 2 && a->shape[0] == 2
       && a->shape[1] == 3 && a->nbytes == 24, "tensor a has its dtype and "
       "shape");
    ok(a != NULL && ((const uint8_t *) a->data)[0] == 0
       && ((const uint8_t *) a->data)[23] == 23, "tensor a points at bytes "
       "0..23 of the data area");
    ok(b != NULL && b->dtype == PL_DT_BF16 && b->ndim == 1
       && ((const uint8_t *) b->data)[0] == 24, "tensor b follows a");
    ok(pl_st_find(st, "missing") == NULL, "an absent name is not found");
    pl_st_close(st);
}


static void
test_unaligned_tensor_is_copied(void)
{
    /* padded to 64 bytes: the data area starts 8-aligned, x at +2 */
    const char            *hdr = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                                  "\"data_offsets\":[2,10]}}         ";
    const char            *path = with_header("unaligned.safetensors", hdr,
                                              10);
    char                   err[512] = "";
    pl_safetensors_t      *st = pl_st_open(path, err, sizeof(err));
    const pl_st_tensor_t  *x = st ? pl_st_find(st, "x") : NULL;

    ok(x != NULL && (uintptr_t) x->data % 4 == 0
       && ((const uint8_t *) x->data)[0] == 2
       && ((const uint8_t *) x->data)[7] == 9,
       "a tensor at an unaligned offset is served from an aligned copy");
    pl_st_close(st);
}


static void
test_malformed_files(void)
{
    char  path[256];
    int   fd;

    snprintf(path, sizeof(path), "%s/empty.safetensors", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    close(fd);
    refused(path, "too short", "an empty file");

    refused(fixture("short.safetensors", 1000, "{}", 0),
            "header length 1000 is past the end of the file",
            "a header length past the end of the file");

    refused(with_header("notjson.safetensors", "{\"a\": nope}", 0),
            "header is not valid JSON", "a header that is not JSON");

    refused(with_header("array.safetensors", "[1, 2]", 0),
            "header is not a JSON object", "a header that is not an object");

    refused(with_header("truncated.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],"
            "\"data_offsets\":[0,64]}}", 40),
            "tensor 'w': data_offsets end 64 is past the end of the file",
            "a file truncated inside a tensor");

    refused(with_header("mismatch.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
            "\"data_offsets\":[0,20]}}", 24),
            "tensor 'w': data_offsets [0, 20] hold 20 bytes but its shape "
            "and dtype F32 need 24", "offsets that do not match the shape");

    refused(with_header("dtype.safetensors",
            "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],"
            "\"data_offsets\":[0,8]}}", 8),
            "tensor 'w': dtype 'I64' is not supported", "an unknown dtype");

    refused(with_header("reversed.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],"
            "\"data_offsets\":[8,4]}}", 8),
            "tensor 'w': data_offsets begin 8 is after end 4",
            "offsets with begin after end");

    refused(with_header("negshape.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],"
            "\"data_offsets\":[0,4]}}", 4),
            "tensor 'w': shape[0] is not a sane non-negative integer",
            "a negative dimension");

    refused(with_header("noshape.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4),
            "tensor 'w': shape is not an array", "a missing shape");

    refused(with_header("nooffsets.safetensors",
            "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4),
            "tensor 'w': data_offsets is not an array",
            "missing data_offsets");

    refused(with_header("notobj.safetensors", "{\"w\": 3}", 4),
            "tensor 'w': description is not an object",
            "a tensor description that is not an object");

    refused(with_header("overlap.safetensors",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12), "tensors 'a' and 'b' overlap", "overlapping tensors");

    refused(with_header("dup.safetensors",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8), "header is not valid JSON", "a duplicated tensor name");

    refused(with_header("meta.safetensors", "{\"__metadata__\": 1}", 0),
            "__metadata__ is not an object", "metadata that is not an object");

    snprintf(path, sizeof(path), "%s/absent.safetensors", dir);
    refused(path, "cannot open", "a missing file");
}


static void
test_huge_header(void)
{
    const char  *path = fixture("huge.safetensors", 150u * 1024 * 1024, "{",
                                0);

    /* a sparse file long enough to hold the claimed header */
    if (truncate(path, 200u * 1024 * 1024) != 0) {
        ok(0, "sparse fixture created");
        return;
    }
    refused(path, "over the 100 MB limit", "a header over 100 MB");
    unlink(path);
}


int
main(void)
{
    char  cmd[300];

    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_valid_file();
    test_unaligned_tensor_is_copied();
    test_malformed_files();
    test_huge_header();

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        diag("could not remove %s", dir);
    }
    return done_testing();
}
