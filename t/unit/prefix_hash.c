/*
 * The prefix hash (ngx_http_pagedllm_prefix.c) against published 64-bit
 * FNV-1a vectors: token ids are hashed as 4 little-endian bytes each,
 * so ids that spell "abcd" and "efgh" hash as the string "abcdefgh".
 * The function is plain C, compiled here from the module's source.
 */

#include <stdint.h>

#include "tap.h"

#include "../../ngx_http_pagedllm_module/ngx_http_pagedllm_prefix.c"


int
main(void)
{
    /* "abcd", "efgh" read as little-endian 32-bit words */
    int32_t   abcdefgh[] = { 0x64636261, 0x68676665 };
    int32_t   shared[] = { 1, 2, 3, 4, 50, 60 };
    int32_t   other[] = { 1, 2, 3, 4, 70 };
    int32_t   high[] = { -1 };

    ok(ngx_http_pagedllm_prefix_hash(abcdefgh, 2, 2)
       == 0x25da8c1836a8d66dULL, "two tokens hash as FNV-1a(\"abcdefgh\")");
    ok(ngx_http_pagedllm_prefix_hash(abcdefgh, 2, 1)
       == 0xfc179f83ee0724ddULL, "k = 1 hashes only the first: \"abcd\"");
    ok(ngx_http_pagedllm_prefix_hash(abcdefgh, 1, 64)
       == 0xfc179f83ee0724ddULL, "k past the prompt hashes the whole prompt");
    ok(ngx_http_pagedllm_prefix_hash(abcdefgh, 2, 0)
       == 0xcbf29ce484222325ULL, "k = 0 is the offset basis");
    ok(ngx_http_pagedllm_prefix_hash(NULL, 0, 16)
       == 0xcbf29ce484222325ULL, "no tokens are the offset basis");

    ok(ngx_http_pagedllm_prefix_hash(shared, 6, 4)
       == ngx_http_pagedllm_prefix_hash(other, 5, 4),
       "prompts that share their first k tokens hash the same");
    ok(ngx_http_pagedllm_prefix_hash(shared, 6, 5)
       != ngx_http_pagedllm_prefix_hash(other, 5, 5),
       "prompts that differ within k tokens hash apart");
    ok(ngx_http_pagedllm_prefix_hash(shared, 4, 4)
       != ngx_http_pagedllm_prefix_hash(shared, 3, 4),
       "a shorter prompt hashes apart from its extension");

    ok(ngx_http_pagedllm_prefix_hash(high, 1, 1) == 0x994f76653e2a3951ULL,
       "a negative id hashes as its 32-bit pattern, FNV-1a(ff ff ff ff)");

    return done_testing();
}
