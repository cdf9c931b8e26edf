
/*
 * ngx_http_pagedllm_prefix: the prefix hash of a prompt's first K tokens
 * (ngx_http_pagedllm_prefix.h).  FNV-1a because it is a few lines, needs
 * no table or seed, and anyone can compute it again from a prompt's
 * token ids; its consumers either hash its text again (nginx's
 * consistent hash takes a CRC32 of the variable's value) or need only
 * equal prefixes to give equal values.  It is no defence against chosen
 * collisions: a client that makes two prefixes collide only picks which
 * engine serves it.
 */


#include "ngx_http_pagedllm_prefix.h"


#define NGX_HTTP_PAGEDLLM_FNV_BASIS  0xcbf29ce484222325ULL
#define NGX_HTTP_PAGEDLLM_FNV_PRIME  0x00000100000001b3ULL


uint64_t
ngx_http_pagedllm_prefix_hash(const int32_t *tokens, size_t n_tokens,
    size_t k)
{
    size_t    i, n;
    uint32_t  id;
    uint64_t  h;
    unsigned  b;

    n = n_tokens < k ? n_tokens : k;
    h = NGX_HTTP_PAGEDLLM_FNV_BASIS;

    for (i = 0; i < n; i++) {
        id = (uint32_t) tokens[i];

        for (b = 0; b < 4; b++) {
            h ^= (id >> (8 * b)) & 0xff;
            h *= NGX_HTTP_PAGEDLLM_FNV_PRIME;
        }
    }

    return h;
}
