/*
 * cuda_backend: the CUDA implementation of pl_backend_t, and the memory
 * side of it (allocation, copies, weights, the batch description).
 *
 * One device, one stream, one cuBLAS handle.  Everything the model calls is
 * queued on that stream in order; download and download_f32 wait for it,
 * since the caller reads host memory next.  The batch description is
 * packed into one pinned buffer and sent with a single copy, so an
 * iteration costs one host-to-device transfer for all its index arrays.
 *
 * Decode iterations can instead replay CUDA graphs (graphs_run): one
 * recording per batch shape, whose arrays sit at addresses fixed by the
 * shape, so a replay is one copy and one cudaGraphLaunch.  cuBLAS gets a
 * workspace of its own at creation so nothing allocates under capture.
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_cuda.cuh"
#include "gemv.cuh"


pl_cuda_knobs_t  pl_cuda_knobs;

static pthread_once_t  knobs_once = PTHREAD_ONCE_INIT;


/* the integer in the environment variable name; dflt when unset or
   empty */
static int
knob_int(const char *name, int dflt)
{
    const char  *v = getenv(name);

    return v != NULL && *v != '\0' ? atoi(v) : dflt;
}

/* whether the environment variable name is set to value */
static int
knob_is(const char *name, const char *value)
{
    const char  *v = getenv(name);

    return v != NULL && strcmp(v, value) == 0;
}


extern "C" void
pl_cuda_knobs_reload(void)
{
    pl_cuda_knobs_t  *k = &pl_cuda_knobs;

    k->pdl = knob_int("PAGEDLLM_CUDA_PDL", 1) != 0;
    k->attn_split_min = knob_int("PAGEDLLM_CUDA_ATTN_SPLIT_MIN", 0);
    k->attn_split_min = k->attn_split_min > 0 ? k->attn_split_min : 0;
    k->attn_splits = knob_int("PAGEDLLM_CUDA_ATTN_SPLITS", 0);
    k->attn_splits = k->attn_splits > 0 ? k->attn_splits : 0;
    k->attn_cluster = knob_int("PAGEDLLM_CUDA_ATTN_CLUSTER", -1);
    k->attn_cluster = k->attn_cluster >= 2 && k->attn_cluster <= 8
                      ? k->attn_cluster : k->attn_cluster < 0 ? -1 : 0;
    k->attn_heads = knob_int("PAGEDLLM_CUDA_ATTN_HEADS", -1);
    k->attn_rows_first = knob_int("PAGEDLLM_CUDA_ATTN_ORDER", 1) == 0;
    k->prefill_mma = knob_is("PAGEDLLM_CUDA_PREFILL", "mma");
    k->prefill_cpasync = knob_is("PAGEDLLM_CUDA_PREFILL_LOADS", "cpasync");
}


void
pl_cuda_knobs_load(void)
{
    pthread_once(&knobs_once, pl_cuda_knobs_reload);
}


void
pl_cuda_fail(const char *what, const char *detail)
{
    fprintf(stderr, "pagedllm cuda: %s: %s\n", what, detail);
    abort();
}


void
pl_cuda_check(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        pl_cuda_fail(what, cudaGetErrorString(rc));
    }
}


extern "C" int
pl_cuda_available(void)
{
    int  count = 0;

    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count > 0;
}


extern "C" cudaStream_t
pl_cuda_stream(pl_backend_t *be)
{
    return pl_cuda(be)->stream;
}


static void *
cuda_alloc(pl_backend_t *be, size_t bytes)
{
    void  *p = NULL;

    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (cudaMemsetAsync(p, 0, bytes, pl_cuda(be)->stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    return p;
}


static void
cuda_free(pl_backend_t *be, void *p)
{
    if (p != NULL) {
        pl_cuda_check(cudaStreamSynchronize(pl_cuda(be)->stream), "free");
        pl_cuda_check(cudaFree(p), "free");
    }
}


static void
cuda_upload(pl_backend_t *be, void *dst, const void *src, size_t bytes)
{
    pl_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                  pl_cuda(be)->stream), "upload");
}


static void
cuda_download(pl_backend_t *be, void *dst, const void *src, size_t bytes)
{
    pl_cuda_t  *cu = pl_cuda(be);

    pl_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                  cu->stream), "download");
    pl_cuda_check(cudaStreamSynchronize(cu->stream), "download");
}


static void
cuda_sync(pl_backend_t *be)
{
    pl_cuda_check(cudaStreamSynchronize(pl_cuda(be)->stream), "sync");
}


static int
cuda_mem_info(pl_backend_t *be, size_t *free_bytes, size_t *total_bytes)
{
    (void) be;
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}


/*
 * Matrices take the activation dtype, what the GEMMs multiply them with;
 * vectors become fp32 for the norms and biases.  The checkpoint's bytes go
 * up as they are and are converted on the device.
 */
static int
cuda_weight_load(pl_backend_t *be, pl_weight_t *w, const void *host)
{
    pl_dtype_t  want = w->rows == 1 ? PL_DT_F32 : be->act_dtype;
    int64_t     count = w->rows * w->cols;
    size_t      raw_bytes = (size_t) count * pl_dtype_size(w->dtype);
    void       *raw, *dst;

    if (count <= 0 || (w->dtype != PL_DT_F32 && w->dtype != PL_DT_F16
                       && w->dtype != PL_DT_BF16))
    {
        return -1;
    }
    dst = cuda_alloc(be, (size_t) count * pl_dtype_size(want));
    if (dst == NULL) {
        return -1;
    }
    raw = cuda_alloc(be, raw_bytes);
    if (raw == NULL) {
        cuda_free(be, dst);
        return -1;
    }
    cuda_upload(be, raw, host, raw_bytes);
    pl_cuda_convert(be, dst, want, raw, w->dtype, count);
    cuda_free(be, raw);
    w->data = dst;
    w->dtype = want;
    return 0;
}


static size_t
batch_array_bytes(int count)
{
    return ((size_t) count * sizeof(int32_t) + 255) & ~(size_t) 255;
}


static void
batch_reserve(pl_cuda_t *cu, size_t bytes)
{
    if (bytes <= cu->batch_cap) {
        return;
    }
    pl_cuda_check(cudaStreamSynchronize(cu->stream), "batch_upload");
    cudaFreeHost(cu->batch_host);
    cudaFree(cu->batch_dev);
    cu->batch_host = NULL;
    cu->batch_dev = NULL;
    cu->batch_cap = 0;
    bytes += bytes / 2;
    if (cudaMallocHost(&cu->batch_host, bytes) != cudaSuccess
        || cudaMalloc(&cu->batch_dev, bytes) != cudaSuccess)
    {
        pl_cuda_fail("batch_upload", "out of memory for the batch arrays");
    }
    cu->batch_cap = bytes;
}


/* Append count int32 of src to the staging buffer; return the device
   address they will have. */
static const int32_t *
batch_put(pl_cuda_t *cu, size_t *off, const int32_t *src, int count)
{
    const int32_t  *dev = (const int32_t *) ((char *) cu->batch_dev + *off);

    if (src == NULL || count <= 0) {
        return src == NULL ? NULL : dev;
    }
    memcpy((char *) cu->batch_host + *off, src, count * sizeof(int32_t));
    *off += batch_array_bytes(count);
    return dev;
}


static int
min_query_len(const pl_batch_t *host)
{
    int  s, least = host->num_tokens;

    for (s = 0; s < host->num_seqs && host->query_start != NULL; s++) {
        int  q = host->query_start[s + 1] - host->query_start[s];

        least = q < least ? q : least;
    }
    return least;
}


static const pl_batch_t *
cuda_batch_upload(pl_backend_t *be, const pl_batch_t *host)
{
    pl_cuda_t   *cu = pl_cuda(be);
    pl_batch_t  *b = &cu->batch;
    int          nt = host->num_tokens, ns = host->num_seqs;
    int          nl = pl_batch_logits(host);
    size_t       off = 0, bytes;

    bytes = 3 * batch_array_bytes(nt) + batch_array_bytes(ns + 1)
            + batch_array_bytes(ns) + batch_array_bytes(nl)
            + batch_array_bytes(ns * host->max_blocks_per_seq);
    batch_reserve(cu, bytes);
    pl_cuda_check(cudaEventSynchronize(cu->batch_copied), "batch_upload");

    *b = *host;
    cu->batch_min_qlen = min_query_len(host);
    b->token_ids = batch_put(cu, &off, host->token_ids, nt);
    b->positions = batch_put(cu, &off, host->positions, nt);
    b->slot_mapping = batch_put(cu, &off, host->slot_mapping, nt);
    b->query_start = batch_put(cu, &off, host->query_start, ns + 1);
    b->context_lens = batch_put(cu, &off, host->context_lens, ns);
    b->block_tables = batch_put(cu, &off, host->block_tables,
                                ns * host->max_blocks_per_seq);
    b->logits_rows = batch_put(cu, &off, host->logits_rows, nl);

    if (off > 0) {
        pl_cuda_check(cudaMemcpyAsync(cu->batch_dev, cu->batch_host, off,
                                      cudaMemcpyHostToDevice, cu->stream),
                      "batch_upload");
    }
    pl_cuda_check(cudaEventRecord(cu->batch_copied, cu->stream),
                  "batch_upload");
    return b;
}


/* ---- decode graphs ---- */


/*
 * A set's shapes share one device buffer (and one pinned staging buffer
 * of the same layout): a shape's arrays sit at offsets that depend only
 * on (num_seqs, max_blocks_per_seq), so a recording's pointers stay
 * right for every later batch of its shape.  Shapes may overlap in the
 * buffer because the copy before each replay and the replay itself run
 * in stream order.
 */
typedef struct {
    int              num_seqs;
    int              max_blocks;
    int              max_ctx;
    cudaGraphExec_t  exec;
    pl_batch_t       batch;          /* backend pointers of this shape */
} graph_shape_t;

#define GRAPH_ARRAYS  7

struct pl_graphs_s {
    int              max_seqs;
    int              max_blocks;
    void            *host;           /* pinned staging */
    void            *dev;
    graph_shape_t   *shapes;
    int              n_shapes;
    int              cap;
};


/* Offsets of the batch arrays of a shape, in the order token_ids,
   positions, slot_mapping, query_start, context_lens, block_tables,
   logits_rows; returns the bytes they span. */
static size_t
graph_layout(int num_seqs, int max_blocks, size_t *off)
{
    int     count[GRAPH_ARRAYS] = {
        num_seqs, num_seqs, num_seqs, num_seqs + 1, num_seqs,
        num_seqs * max_blocks, num_seqs
    };
    size_t  at = 0;
    int     i;

    for (i = 0; i < GRAPH_ARRAYS; i++) {
        off[i] = at;
        at += batch_array_bytes(count[i]);
    }
    return at;
}


static void
cuda_graphs_destroy(pl_backend_t *be, pl_graphs_t *g)
{
    int  i;

    if (g == NULL) {
        return;
    }
    pl_cuda_check(cudaStreamSynchronize(pl_cuda(be)->stream),
                  "graphs_destroy");
    for (i = 0; i < g->n_shapes; i++) {
        cudaGraphExecDestroy(g->shapes[i].exec);
    }
    free(g->shapes);
    cudaFreeHost(g->host);
    cudaFree(g->dev);
    free(g);
}


static pl_graphs_t *
cuda_graphs_create(pl_backend_t *be, int max_seqs, int max_blocks)
{
    pl_graphs_t  *g;
    size_t        off[GRAPH_ARRAYS], bytes;

    if (max_seqs < 1 || max_blocks < 1) {
        return NULL;
    }
    g = (pl_graphs_t *) calloc(1, sizeof(pl_graphs_t));
    if (g == NULL) {
        return NULL;
    }
    g->max_seqs = max_seqs;
    g->max_blocks = max_blocks;
    bytes = graph_layout(max_seqs, max_blocks, off);
    if (cudaMallocHost(&g->host, bytes) != cudaSuccess
        || cudaMalloc(&g->dev, bytes) != cudaSuccess)
    {
        cudaGetLastError();
        cuda_graphs_destroy(be, g);
        return NULL;
    }
    return g;
}


/* The set's entry for host's shape, added (without a recording) when it
   is new; NULL when out of memory. */
static graph_shape_t *
graph_shape(pl_graphs_t *g, const pl_batch_t *host)
{
    graph_shape_t  *sh, *grown;
    size_t          off[GRAPH_ARRAYS];
    const int32_t  *a[GRAPH_ARRAYS];
    int             i, cap;

    for (i = 0; i < g->n_shapes; i++) {
        sh = &g->shapes[i];
        if (sh->num_seqs == host->num_seqs
            && sh->max_blocks == host->max_blocks_per_seq
            && sh->max_ctx == host->max_context_len)
        {
            return sh;
        }
    }
    if (g->n_shapes == g->cap) {
        cap = g->cap ? 2 * g->cap : 16;
        grown = (graph_shape_t *) realloc(g->shapes,
                                          cap * sizeof(graph_shape_t));
        if (grown == NULL) {
            return NULL;
        }
        g->shapes = grown;
        g->cap = cap;
    }
    sh = &g->shapes[g->n_shapes++];
    sh->num_seqs = host->num_seqs;
    sh->max_blocks = host->max_blocks_per_seq;
    sh->max_ctx = host->max_context_len;
    sh->exec = NULL;
    graph_layout(sh->num_seqs, sh->max_blocks, off);
    for (i = 0; i < GRAPH_ARRAYS; i++) {
        a[i] = (const int32_t *) ((char *) g->dev + off[i]);
    }
    sh->batch = *host;
    sh->batch.token_ids = a[0];
    sh->batch.positions = a[1];
    sh->batch.slot_mapping = a[2];
    sh->batch.query_start = a[3];
    sh->batch.context_lens = a[4];
    sh->batch.block_tables = a[5];
    sh->batch.logits_rows = a[6];
    return sh;
}


/* host's arrays into the staging buffer at the shape's offsets, then one
   copy into place */
static void
graph_put_batch(pl_cuda_t *cu, pl_graphs_t *g, const pl_batch_t *host)
{
    int             ns = host->num_seqs;
    size_t          off[GRAPH_ARRAYS], bytes;
    const int32_t  *src[GRAPH_ARRAYS] = {
        host->token_ids, host->positions, host->slot_mapping,
        host->query_start, host->context_lens, host->block_tables,
        host->logits_rows
    };
    int             count[GRAPH_ARRAYS] = {
        ns, ns, ns, ns + 1, ns, ns * host->max_blocks_per_seq, ns
    };
    int             i;

    bytes = graph_layout(ns, host->max_blocks_per_seq, off);
    pl_cuda_check(cudaEventSynchronize(cu->batch_copied), "graphs_run");
    for (i = 0; i < GRAPH_ARRAYS; i++) {
        memcpy((char *) g->host + off[i], src[i],
               (size_t) count[i] * sizeof(int32_t));
    }
    pl_cuda_check(cudaMemcpyAsync(g->dev, g->host, bytes,
                                  cudaMemcpyHostToDevice, cu->stream),
                  "graphs_run");
    pl_cuda_check(cudaEventRecord(cu->batch_copied, cu->stream),
                  "graphs_run");
}


/*
 * A shape's first batch runs eagerly (which also makes every lazily
 * loaded kernel and cuBLAS's per-shape state exist before capture) and
 * is then captured; instantiating and uploading the graph now keeps that
 * cost out of the next iteration.
 */
static int
cuda_graphs_run(pl_backend_t *be, pl_graphs_t *g, const pl_batch_t *host,
    pl_graph_record_t record, void *arg)
{
    pl_cuda_t      *cu = pl_cuda(be);
    graph_shape_t  *sh;
    cudaGraph_t     graph;

    if (host->num_tokens != host->num_seqs || host->num_seqs < 1
        || host->num_seqs > g->max_seqs || host->max_blocks_per_seq < 1
        || host->max_blocks_per_seq > g->max_blocks
        || (sh = graph_shape(g, host)) == NULL)
    {
        return -1;
    }
    graph_put_batch(cu, g, host);
    if (sh->exec != NULL) {
        pl_cuda_check(cudaGraphLaunch(sh->exec, cu->stream), "graph launch");
        return 1;
    }
    record(arg, &sh->batch);
    pl_cuda_check(cudaStreamBeginCapture(cu->stream,
                                         cudaStreamCaptureModeThreadLocal),
                  "graph capture");
    record(arg, &sh->batch);
    pl_cuda_check(cudaStreamEndCapture(cu->stream, &graph), "graph capture");
    pl_cuda_check(cudaGraphInstantiate(&sh->exec, graph, 0),
                  "graph instantiate");
    cudaGraphDestroy(graph);
    pl_cuda_check(cudaGraphUpload(sh->exec, cu->stream), "graph upload");
    return 0;
}


static void
cuda_download_f32(pl_backend_t *be, float *dst, const void *src,
    size_t count)
{
    pl_cuda_t  *cu = pl_cuda(be);

    if (count == 0) {
        return;
    }
    if (count > cu->f32_cap) {
        pl_cuda_check(cudaStreamSynchronize(cu->stream), "download_f32");
        cudaFree(cu->f32_stage);
        cu->f32_stage = NULL;
        cu->f32_cap = 0;
        pl_cuda_check(cudaMalloc(&cu->f32_stage, count * sizeof(float)),
                      "download_f32");
        cu->f32_cap = count;
    }
    pl_cuda_convert(be, cu->f32_stage, PL_DT_F32, src, be->act_dtype,
                    (int64_t) count);
    cuda_download(be, dst, cu->f32_stage, count * sizeof(float));
}


/*
 * What fp16 activations lack, NULL when nothing: every kernel, the
 * tensor-core attention (decode_attention.cu, prefill_attention*.cu) and
 * the GEMV (gemv.cu) included, takes them, so --dtype float16 goes
 * through and --dtype auto runs fp16 checkpoints in fp16.  A kernel added
 * bf16-only would name itself here rather than let fp16 fall to a slow
 * path (model.c then falls back to bf16 for auto).
 */
static const char  *cuda_fp16_missing = NULL;


static int
cuda_set_act_dtype(pl_backend_t *be, pl_dtype_t dt, char *err,
    size_t errlen)
{
    if (dt == PL_DT_F16 && cuda_fp16_missing != NULL) {
        snprintf(err, errlen, "float16 activations on cuda: %s",
                 cuda_fp16_missing);
        return -1;
    }
    if (dt != PL_DT_BF16 && dt != PL_DT_F16) {
        snprintf(err, errlen, "the cuda backend runs bfloat16 or float16 "
                 "activations, not %s", pl_dtype_name(dt));
        return -1;
    }
    be->act_dtype = dt;
    return 0;
}


static void
cuda_destroy(pl_backend_t *be)
{
    pl_cuda_t  *cu;

    if (be == NULL) {
        return;
    }
    cu = pl_cuda(be);
    if (cu != NULL) {
        if (cu->stream != NULL) {
            cudaStreamSynchronize(cu->stream);
        }
        pl_cuda_moves_free(cu);
        cudaFree(cu->attn_scratch);
        cudaFree(cu->cublas_workspace);
        cudaFree(cu->f32_stage);
        pl_cuda_sample_free(cu);
        cudaFree(cu->batch_dev);
        cudaFreeHost(cu->batch_host);
        if (cu->batch_copied != NULL) {
            cudaEventDestroy(cu->batch_copied);
        }
        if (cu->cublas != NULL) {
            cublasDestroy(cu->cublas);
        }
        if (cu->stream != NULL) {
            cudaStreamDestroy(cu->stream);
        }
        free(cu);
    }
    free(be);
}


static void
cuda_wire(pl_backend_t *be)
{
    be->name = "cuda";
    be->act_dtype = PL_DT_BF16;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->sync = cuda_sync;
    be->destroy = cuda_destroy;
    be->mem_info = cuda_mem_info;
    be->weight_load = cuda_weight_load;
    be->set_act_dtype = cuda_set_act_dtype;
    be->batch_upload = cuda_batch_upload;
    be->embedding = pl_cuda_embedding;
    be->rmsnorm = pl_cuda_rmsnorm;
    be->add_rmsnorm = pl_cuda_add_rmsnorm;
    be->matmul = pl_cuda_matmul;
    be->qkv_rope_store = pl_cuda_qkv_rope_store;
    be->attention = pl_cuda_attention;
    be->silu_mul = pl_cuda_silu_mul;
    be->gather_rows = pl_cuda_gather_rows;
    be->sample = pl_cuda_sample;
    be->download_f32 = cuda_download_f32;
    be->layernorm = pl_cuda_layernorm;
    be->add = pl_cuda_add;
    be->relu = pl_cuda_relu;
    be->graphs_create = cuda_graphs_create;
    be->graphs_destroy = cuda_graphs_destroy;
    be->graphs_run = cuda_graphs_run;
    be->copy = pl_cuda_copy;
    be->copy_blocks = pl_cuda_copy_blocks;
    be->alloc_host = pl_cuda_alloc_host;
    be->free_host = pl_cuda_free_host;
    be->swap = pl_cuda_swap;
}


static const char *
cuda_open(pl_cuda_t *cu, int device)
{
    cudaDeviceProp  prop;
    int             count = 0;

    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();
        return "no CUDA device is visible";
    }
    if (device < 0 || device >= count) {
        return "no such CUDA device";
    }
    if (cudaSetDevice(device) != cudaSuccess
        || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    {
        return "cannot open the CUDA device";
    }
    if (prop.major < 8) {
        return "the CUDA backend needs compute capability 8.0 or newer";
    }
    cu->device = device;
    cu->num_sms = prop.multiProcessorCount;
    cu->cc = prop.major * 10 + prop.minor;
    pl_cuda_knobs_load();
    cu->pdl = prop.major >= 9 && pl_cuda_knobs.pdl;
    if (cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)
            != cudaSuccess
        || cudaEventCreateWithFlags(&cu->batch_copied,
                                    cudaEventDisableTiming) != cudaSuccess)
    {
        return "cannot create a CUDA stream";
    }
    /* the workspace after the stream: cublasSetStream resets it */
    if (cublasCreate(&cu->cublas) != CUBLAS_STATUS_SUCCESS
        || cublasSetStream(cu->cublas, cu->stream) != CUBLAS_STATUS_SUCCESS
        || cudaMalloc(&cu->cublas_workspace, PL_CUDA_CUBLAS_WORKSPACE)
           != cudaSuccess
        || cublasSetWorkspace(cu->cublas, cu->cublas_workspace,
                              PL_CUDA_CUBLAS_WORKSPACE)
           != CUBLAS_STATUS_SUCCESS)
    {
        return "cannot create a cuBLAS handle";
    }
    if (cudaMalloc(&cu->attn_scratch, PL_CUDA_ATTN_SCRATCH) != cudaSuccess
        || cudaMemset(cu->attn_scratch, 0, PL_CUDA_ATTN_SCRATCH)
           != cudaSuccess)
    {
        return "out of device memory for attention scratch";
    }
    return NULL;
}


extern "C" pl_backend_t *
pl_backend_cuda_create(int device, char *err, size_t errlen)
{
    pl_backend_t  *be = (pl_backend_t *) calloc(1, sizeof(pl_backend_t));
    pl_cuda_t     *cu = (pl_cuda_t *) calloc(1, sizeof(pl_cuda_t));
    const char    *why;

    if (be == NULL || cu == NULL) {
        free(be);
        free(cu);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    be->priv = cu;
    why = cuda_open(cu, device);
    if (why != NULL) {
        cudaGetLastError();
        snprintf(err, errlen, "cuda device %d: %s", device, why);
        cuda_destroy(be);
        return NULL;
    }
    cuda_wire(be);
    return be;
}
