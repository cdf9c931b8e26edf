/*
 * golden_beam: the engine's beam search against Hugging Face transformers.
 * t/fixtures/golden/<model>/beam.json (tools/golden/make_golden.py beam)
 * holds, for each golden model, transformers' generate(num_beams = 2, 4
 * and 6, num_return_sequences, length_penalty, early_stopping,
 * do_sample=False, max_new_tokens) over one prompt per setting, with
 * extra stop tokens besides the model's eos (transformers' eos_token_id
 * was the case's eos_token_ids plus stop_token_ids; the engine gets the
 * ones that are not its own eos as stop ids, so both stop on the same
 * set): the returned beams' tokens, sequences_scores and cumulative
 * log-probabilities.
 *
 * Each case goes to the real pagedllm-engine serving that fixture folder
 * (through a folder of links to its files plus the tiny model's
 * tokenizer.json, which the engine publishes but nothing here uses: ids
 * go in and out as they are; a fake worker, fake_worker.h) as a beam
 * search of width num_beams with the stop tokens as stop ids: every
 * returned beam must equal transformers' token for token, in order, and
 * its cumulative
 * log-probability and score (cum / length ** length_penalty) must be
 * within the golden tolerance, 1e-3 + 1e-4 |ref| (t/unit/golden.c says
 * why).  Every case was kept by the generator only when noise of 3e-4 on
 * every log-probability leaves its result unchanged, so float32
 * summation order does not decide it.
 *
 * Compiled with GB_DEVICE "cuda" (t/gpu/golden_beam.c) the engine runs on
 * the GPU, whose activations are bf16 or fp16: there token equality is
 * required of the cases the generator found stable under noise of
 * GB_STABLE (stable_noise in the fixture), and of the others that the
 * best beam's score be close to transformers' best; scores there are held
 * to bf16's tolerance (GB_ATOL, GB_RTOL).
 */

#include <dirent.h>
#include <sys/stat.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>

#include "beam_client.h"

#ifndef GB_DEVICE
#define GB_DEVICE      "cpu"
#define GB_STABLE      0.0
#define GB_ATOL        1e-3
#define GB_RTOL        1e-4
#endif

#define GB_FIXTURES    "t/fixtures/golden"

static const char *const  models[] = {
    "llama3_gqa", "llama_tied", "mistral", "opt_post_ln", "opt_pre_ln",
    "qwen2_bias"
};

static fw_t      worker;
static uint64_t  next_id = 1;


static int
near(double got, double want)
{
    return fabs(got - want) <= GB_ATOL + GB_RTOL * fabs(want);
}


static int
int_array(json_t *a, int32_t *out, int cap)
{
    size_t   i;
    json_t  *v;

    if (!json_is_array(a) || (int) json_array_size(a) > cap) {
        return -1;
    }
    json_array_foreach(a, i, v) {
        out[i] = (int32_t) json_integer_value(v);
    }

    return (int) json_array_size(a);
}


static int
is_engine_eos(int32_t t)
{
    uint32_t  i;

    for (i = 0; i < worker.hdr->n_eos; i++) {
        if (worker.hdr->eos_ids[i] == t) {
            return 1;
        }
    }

    return 0;
}


/*
 * The stop ids that make the engine's stop set (its eos plus them) the
 * case's: transformers' eos_token_id list was eos_token_ids plus
 * stop_token_ids.  Their count, or -1 when the engine's eos is not all in
 * that list.
 */
static int
stop_ids(json_t *c, int32_t *stops, int cap)
{
    int32_t   all[64], t;
    int       n_eos, n_stop, i, n = 0, found;
    uint32_t  j;

    n_eos = int_array(json_object_get(c, "eos_token_ids"), all, 32);
    n_stop = int_array(json_object_get(c, "stop_token_ids"), all + 32, 32);
    if (n_eos < 0 || n_stop < 0) {
        return -1;
    }
    for (j = 0; j < worker.hdr->n_eos; j++) {
        for (found = 0, i = 0; i < n_eos; i++) {
            found |= all[i] == worker.hdr->eos_ids[j];
        }
        if (!found) {
            return -1;
        }
    }
    for (i = 0; i < n_eos + n_stop; i++) {
        t = all[i < n_eos ? i : 32 + i - n_eos];
        if (!is_engine_eos(t) && n < cap) {
            stops[n++] = t;
        }
    }

    return n;
}


static int
early_stopping(json_t *v)
{
    if (json_is_string(v)) {
        return PL_EARLY_STOPPING_NEVER;
    }

    return json_is_true(v) ? PL_EARLY_STOPPING_TRUE : PL_EARLY_STOPPING_FALSE;
}


/* Case c of model name, run and compared. */
static void
run_case(const char *name, int k, json_t *c)
{
    int32_t          prompt[64], stops[64], want[BC_TOK];
    int              n_prompt, n_stops, i, n, n_want, width, same = 1;
    int              close = 1, cums = 1;
    double           lp, score, stable;
    uint64_t         id = next_id++;
    json_t          *beams = json_object_get(c, "beams");
    json_t          *scores = json_object_get(c, "scores");
    json_t          *cum = json_object_get(c, "cum_logprobs");
    pl_rec_submit_t  r;
    bc_result_t     *res = &bc_res[id];

    n_prompt = int_array(json_object_get(c, "prompt"), prompt, 64);
    n_stops = stop_ids(c, stops, 64);
    width = (int) json_integer_value(json_object_get(c, "num_beams"));
    n = (int) json_integer_value(json_object_get(c, "num_return_sequences"));
    lp = json_number_value(json_object_get(c, "length_penalty"));
    stable = json_number_value(json_object_get(c, "stable_noise"));

    r = bc_beam(id, n_prompt, (int) json_integer_value(
                    json_object_get(c, "max_new_tokens")),
                width, n, (float) lp,
                early_stopping(json_object_get(c, "early_stopping")));
    r.n_stop_ids = (uint32_t) n_stops;

    if (!ok(n_prompt > 0 && n_stops >= 0 && n >= 1
            && (int) json_array_size(beams) == n
            && bc_submit(&worker, &r, prompt, stops) == 0
            && bc_wait(&worker, (int) id, (int) id + 1) == 0
            && res->fail_reason == 0 && res->finishes == n,
            "%s case %d (width %d, n %d, length_penalty %g): the engine "
            "returns %d beams", name, k, width, n, lp, n))
    {
        diag("error %u: %s", res->err_status, res->err);
        return;
    }

    for (i = 0; i < n; i++) {
        n_want = int_array(json_array_get(beams, i), want, BC_TOK);
        same &= res->c[i].n == n_want
                && memcmp(res->c[i].toks, want, n_want * 4) == 0;
        score = res->c[i].cum / pow(res->c[i].n, lp);
        close &= near(score, json_number_value(json_array_get(scores, i)));
        cums &= near(res->c[i].cum, json_number_value(json_array_get(cum,
                                                                     i)));
        if (!same || !close || !cums) {
            diag("beam %d: %d tokens score %.6f cum %.6f; transformers %d "
                 "tokens score %.6f", i, res->c[i].n, score, res->c[i].cum,
                 n_want, json_number_value(json_array_get(scores, i)));
        }
    }

    if (GB_STABLE > 0 && stable < GB_STABLE) {
        score = res->c[0].cum / pow(res->c[0].n, lp);
        ok(near(score, json_number_value(json_array_get(scores, 0))),
           "%s case %d (stable only to %g): the best beam's score is "
           "within %g + %g of transformers' best", name, k, stable, GB_ATOL,
           GB_RTOL);
        return;
    }

    ok(same, "%s case %d: the beams equal transformers' token for token",
       name, k);
    ok(close && cums, "%s case %d: their scores and cumulative logprobs "
       "within the golden tolerance", name, k);
}


/* Link every file of the fixture folder src, and build's tiny
   tokenizer.json, into a new folder dst; 0 or -1. */
static int
link_model(const char *build, const char *src, const char *dst)
{
    char            real[PATH_MAX], from[PATH_MAX + 512], to[1024];
    DIR            *d;
    struct dirent  *e;
    int             rc = 0;

    if (mkdir(dst, 0700) != 0 || realpath(src, real) == NULL
        || (d = opendir(src)) == NULL)
    {
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(from, sizeof(from), "%s/%s", real, e->d_name);
        snprintf(to, sizeof(to), "%s/%s", dst, e->d_name);
        rc |= symlink(from, to);
    }
    closedir(d);

    if (realpath(build, real) == NULL) {
        return -1;
    }
    snprintf(from, sizeof(from), "%s/models/tiny/tokenizer.json", real);
    snprintf(to, sizeof(to), "%s/tokenizer.json", dst);

    return rc | symlink(from, to);
}


static void
unlink_model(const char *dst)
{
    char            path[1024];
    DIR            *d = opendir(dst);
    struct dirent  *e;

    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dst, e->d_name);
            unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    rmdir(dst);
}


static void
run_model(const char *build, const char *name)
{
    char          dir[256], path[300], served[512];
    const char   *args[] = { "--device", GB_DEVICE, "--num-blocks", "512",
                             "--max-num-seqs", "64", NULL };
    json_error_t  jerr;
    json_t       *root, *cases, *c;
    size_t        k;

    snprintf(dir, sizeof(dir), "%s/%s", GB_FIXTURES, name);
    snprintf(path, sizeof(path), "%s/beam.json", dir);

    root = json_load_file(path, 0, &jerr);
    cases = json_object_get(root, "cases");
    if (!ok(json_is_array(cases) && json_array_size(cases) > 0,
            "%s: beam.json reads (%s)", name, root ? "ok" : jerr.text))
    {
        json_decref(root);
        return;
    }

    snprintf(served, sizeof(served), "%s/%s", fw_dir, name);
    if (ok(link_model(build, dir, served) == 0
           && fw_engine_start_model(build, served, args, NULL) == 0
           && fw_attach(&worker, bc_take) == 0,
           "%s: the engine serves it on %s", name, GB_DEVICE))
    {
        json_array_foreach(cases, k, c) {
            run_case(name, (int) k, c);
        }
        is_int((int) fw_blocks_used(&worker), 0, "%s: every block is free "
               "after", name);
        ok(fw_engine_stop() == 0, "%s: the engine stops cleanly", name);
        if (tap_failed) {
            fw_show_log();
        }
        fw_detach(&worker);
        unlink(fw_log);
    }

    unlink_model(served);
    json_decref(root);
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");
    size_t       i;

    if (build == NULL) {
        build = "build";
    }

    if (fw_setup("golden-beam") != 0) {
        ok(0, "temporary folder");
        return done_testing();
    }

    for (i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        run_model(build, models[i]);
    }

    fw_cleanup();

    return done_testing();
}
