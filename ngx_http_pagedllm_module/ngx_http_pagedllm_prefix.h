
/*
 * ngx_http_pagedllm_prefix.h: the prefix hash, one function shared by
 * the routes that send requests with the same prompt prefix to the same
 * engine: $pagedllm_prefix_hash for a front tier's
 * "hash $pagedllm_prefix_hash consistent", and prefix affinity among
 * the engines of one nginx.
 */


#ifndef _NGX_HTTP_PAGEDLLM_PREFIX_H_INCLUDED_
#define _NGX_HTTP_PAGEDLLM_PREFIX_H_INCLUDED_


#include <stddef.h>
#include <stdint.h>


/*
 * 64-bit FNV-1a over the first min(k, n_tokens) token ids, each taken
 * as 4 bytes, least significant first: the same value on every host,
 * build and byte order, so several nginx instances agree.  No tokens
 * (k or n_tokens 0) hash to FNV's offset basis, 0xcbf29ce484222325.
 */
uint64_t ngx_http_pagedllm_prefix_hash(const int32_t *tokens,
    size_t n_tokens, size_t k);

#endif /* _NGX_HTTP_PAGEDLLM_PREFIX_H_INCLUDED_ */
