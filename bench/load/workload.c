/*
 * workload.c: what pagedllm-load asks the server for.
 *
 * Before a run every conversation is drawn from the seed: its arrival
 * time (Poisson at the rate, or all at 0) and the lengths of its turns,
 * from a lognormal of the paper's means (dist.c), fixed, or a ShareGPT
 * file's (human, gpt) pairs.  So every rate, and every run with the same
 * seed, sends the same requests in the same order.  When a turn is sent
 * its body is built: token ids, or text from the file or from a list of
 * words for chat, behind the shared prefix if any; ignore_eos and
 * max_tokens so the output is as long as drawn; n or beam search; for
 * chat, the earlier turns with the replies the server gave, the oldest
 * dropped when they pass the input limit.
 */

#include "client.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOAD_PREFIX_SEED   0x70726566697800ull     /* any constant */


static const char  *load_words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with",
    "was", "on", "be", "at", "by", "this", "had", "not", "are", "but",
    "from", "or", "have", "an", "they", "which", "one", "you", "were",
    "her", "all", "she", "there", "would", "their", "we", "him", "been",
    "has", "when", "who", "will", "more", "no", "if", "out", "so", "said",
    "what", "up", "its", "about", "into", "than", "them", "can", "only",
    "other", "new", "some", "could", "time", "these", "two", "may", "then",
    "do", "first", "any", "my", "now", "such", "like", "our", "over", "man",
    "me", "even", "most", "made", "after", "also", "did", "many", "before",
    "must", "through", "back", "years", "where", "much", "your", "way",
    "well", "down", "should", "because", "each", "just", "those", "people"
};


/* ---- what a request asks for ------------------------------------------ */

/* about 4 bytes a token: English words from a fixed list */
static char *
words_text(load_rng_t *r, int tokens)
{
    size_t       len = 0, cap = 0, want = (size_t) tokens * 4;
    char        *s = NULL;
    const char  *w;
    size_t       nw = sizeof(load_words) / sizeof(load_words[0]);

    load_append(&s, &len, &cap, "", 0);

    while (len + 1 < want) {
        w = load_words[load_rng_next(r) % nw];
        if (len) {
            load_append(&s, &len, &cap, " ", 1);
        }
        load_append(&s, &len, &cap, w, strlen(w));
    }
    return s;
}


static json_t *
prompt_ids(const load_conf_t *cf, load_rng_t *r, int tokens)
{
    json_t      *a = json_array();
    load_rng_t   pr;
    int          i;

    load_rng_seed(&pr, LOAD_PREFIX_SEED);

    for (i = 0; i < cf->prefix; i++) {
        json_array_append_new(a, json_integer(load_rng_next(&pr)
                                              % (unsigned) cf->vocab));
    }
    for (i = 0; i < tokens; i++) {
        json_array_append_new(a, json_integer(load_rng_next(r)
                                              % (unsigned) cf->vocab));
    }
    return a;
}


static json_t *
prompt_text(const load_conf_t *cf, const char *text)
{
    load_rng_t   pr;
    char        *prefix, *s;
    json_t      *j;

    if (cf->prefix == 0) {
        return json_string(text);
    }

    load_rng_seed(&pr, LOAD_PREFIX_SEED);
    prefix = words_text(&pr, cf->prefix);
    s = load_xrealloc(NULL, strlen(prefix) + strlen(text) + 2);
    sprintf(s, "%s\n%s", prefix, text);
    j = json_string(s);
    free(prefix);
    free(s);
    return j;
}


static void
body_decoding(const load_conf_t *cf, json_t *b)
{
    json_object_set_new(b, "ignore_eos", json_true());
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options",
                        json_pack("{s:b}", "include_usage", 1));

    if (cf->beam) {
        json_object_set_new(b, "use_beam_search", json_true());
        json_object_set_new(b, "n", json_integer(cf->beam));
        json_object_set_new(b, "best_of", json_integer(cf->beam));
        json_object_set_new(b, "temperature", json_real(0));
        return;
    }

    json_object_set_new(b, "temperature", json_real(cf->temperature));
    if (cf->n > 1) {
        json_object_set_new(b, "n", json_integer(cf->n));
    }
}


/* chat: drop the oldest turns while the history and the new message
   (bytes / 4, and 8 tokens a message for the template) pass in_max */
static void
history_fit(const load_conf_t *cf, load_conv_t *cv, int new_tokens)
{
    size_t  i, n;
    long    sum;

    for ( ;; ) {
        n = json_array_size(cv->history);
        sum = new_tokens + 8;
        for (i = 0; i < n; i++) {
            sum += cv->hist_tokens[i] + 8;
        }
        if (sum <= cf->in_max || n < 2) {
            return;
        }
        json_array_remove(cv->history, 0);
        json_array_remove(cv->history, 0);
        memmove(cv->hist_tokens, cv->hist_tokens + 2,
                (n - 2) * sizeof(int));
    }
}


char *
load_turn_body(const load_conf_t *cf, load_conv_t *cv, const char **path)
{
    load_turn_t  *t = &cv->turns[cv->turn];
    load_rng_t    r;
    json_t       *b = json_object(), *msgs;
    char         *s;

    load_rng_seed(&r, cv->seed + cv->turn);
    json_object_set_new(b, "max_tokens", json_integer(t->out));

    if (cv->history == NULL) {
        *path = "/v1/completions";
        json_object_set_new(b, "prompt", t->text ? prompt_text(cf, t->text)
                                                 : prompt_ids(cf, &r, t->in));
    } else {
        *path = "/v1/chat/completions";
        free(cv->user);
        cv->user = t->text ? strdup(t->text) : words_text(&r, t->in);
        history_fit(cf, cv, t->in);
        msgs = json_copy(cv->history);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user",
                                              "content", cv->user));
        json_object_set_new(b, "messages", msgs);
    }

    body_decoding(cf, b);
    s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}


/* chat: the turn that ended goes into the history */
void
load_history_add(load_conv_t *cv, load_conn_t *c)
{
    size_t  n = json_array_size(cv->history);

    json_array_append_new(cv->history, json_pack("{s:s,s:s}", "role", "user",
                                                 "content", cv->user));
    json_array_append_new(cv->history,
                          json_pack("{s:s,s:s}", "role", "assistant",
                                    "content", c->reply ? c->reply : ""));
    cv->hist_tokens[n] = cv->turns[cv->turn].in;
    cv->hist_tokens[n + 1] = (int) (c->rec.output_tokens
                                    / (c->rec.seqs ? c->rec.seqs : 1));
}


/* ---- the conversations of a run --------------------------------------- */

static void
draw_turn(const load_conf_t *cf, load_rng_t *r, load_turn_t *t)
{
    t->text = NULL;

    if (cf->ds == NULL) {
        t->in = cf->fixed_in;
        t->out = cf->fixed_out;
        return;
    }
    t->in = load_lognormal_draw(&cf->in, r);
    t->out = load_lognormal_draw(&cf->out, r);
}


/* arrivals and lengths, all from the seed: every rate gets the same
   requests in the same order */
load_conv_t *
load_draw_convs(const load_conf_t *cf, double rate, long count,
    double duration, uint64_t seed, long *nconvs)
{
    load_rng_t      arr, len;
    load_conv_t    *cv = NULL;
    load_source_t  *src;
    long            i, cap = 0;
    double          t = 0;
    int             k, poisson = rate > 0 && !isinf(rate);
    int             timed = poisson && duration > 0;

    load_rng_seed(&arr, seed);
    load_rng_seed(&len, seed ^ 0x6c656e67746873ull);

    for (i = 0; timed || i < count; i++) {
        if (poisson) {
            t += load_rng_exp(&arr, rate);
        }
        if (timed && t > duration) {
            break;
        }
        if (i == cap) {
            cap = cap ? cap * 2 : 64;
            cv = load_xrealloc(cv, cap * sizeof(*cv));
        }

        memset(&cv[i], 0, sizeof(cv[i]));
        cv[i].arrival = t;
        cv[i].seed = seed * 1000003u + (uint64_t) i * 7919u + 1;
        cv[i].nturns = cf->chat_turns ? cf->chat_turns : 1;
        if (cf->chat_turns) {
            cv[i].history = json_array();
        }

        if (cf->sources) {
            src = &cf->sources[load_rng_next(&len) % cf->nsources];
            if (cv[i].nturns > src->nturns) {
                cv[i].nturns = src->nturns;
            }
            memcpy(cv[i].turns, src->turns,
                   cv[i].nturns * sizeof(load_turn_t));
            continue;
        }
        for (k = 0; k < cv[i].nturns; k++) {
            draw_turn(cf, &len, &cv[i].turns[k]);
        }
    }

    *nconvs = i;
    return cv;
}


/* ---- the lengths: a dataset file or the distributions ---------------- */

/* ShareGPT JSON: [{"conversations": [{"from": "human", "value": ...},
   {"from": "gpt", "value": ...}, ...]}, ...]; each (human, gpt) pair is a
   turn: the human text as the prompt, the reply's bytes / 4 as
   max_tokens.  Pairs whose prompt passes the context end a
   conversation. */
static void
load_dataset_file(load_conf_t *cf)
{
    json_error_t    err;
    json_t         *root, *conv, *h, *g, *human, *gpt;
    size_t          i, k, n;
    load_source_t  *src;
    load_turn_t    *t;
    int             in, out, room = cf->in_max - cf->prefix;

    root = json_load_file(cf->dataset_file, 0, &err);
    if (!json_is_array(root)) {
        fprintf(stderr, "pagedllm-load: %s: %s\n", cf->dataset_file,
                root ? "not a JSON list" : err.text);
        exit(2);
    }

    cf->sources = load_xrealloc(NULL, (json_array_size(root) + 1)
                                      * sizeof(load_source_t));
    human = json_string("human");
    gpt = json_string("gpt");

    for (i = 0; i < json_array_size(root); i++) {
        conv = json_object_get(json_array_get(root, i), "conversations");
        n = json_array_size(conv) / 2;
        src = &cf->sources[cf->nsources];
        src->turns = load_xrealloc(NULL, (n + 1) * sizeof(load_turn_t));
        src->nturns = 0;

        for (k = 0; k < n && k < LOAD_MAX_TURNS; k++) {
            h = json_array_get(conv, 2 * k);
            g = json_array_get(conv, 2 * k + 1);
            if (!json_is_string(json_object_get(h, "value"))
                || !json_is_string(json_object_get(g, "value"))
                || !json_equal(json_object_get(h, "from"), human)
                || !json_equal(json_object_get(g, "from"), gpt))
            {
                break;
            }
            in = (int) (json_string_length(json_object_get(h, "value")) / 4);
            out = (int) (json_string_length(json_object_get(g, "value")) / 4);
            if (in < 1 || in > room) {
                break;
            }
            t = &src->turns[src->nturns++];
            t->in = in;
            t->out = out < 1 ? 1 : out > cf->out_max ? cf->out_max : out;
            t->text = strdup(json_string_value(json_object_get(h, "value")));
        }

        if (src->nturns > 0) {
            cf->nsources++;
        } else {
            free(src->turns);
        }
    }
    json_decref(root);
    json_decref(human);
    json_decref(gpt);

    if (cf->nsources == 0) {
        load_die("%s: no conversation with a human turn and a reply that fit",
                 cf->dataset_file);
    }
}


void
load_setup_lengths(load_conf_t *cf)
{
    int  room;

    load_context_limits(cf->max_model_len, &cf->in_max, &cf->out_max);
    room = cf->in_max - cf->prefix;

    if (cf->dataset_file) {
        load_dataset_file(cf);
        return;
    }
    if (cf->ds == NULL) {
        return;
    }
    if (load_lognormal_init(&cf->in, cf->ds->in_mean, cf->ds->in_sigma, 1,
                            room) != 0
        || load_lognormal_init(&cf->out, cf->ds->out_mean,
                               cf->ds->out_sigma, 1, cf->out_max) != 0)
    {
        load_die("the model's context is too short for the %s lengths",
                 cf->ds->name);
    }
}
