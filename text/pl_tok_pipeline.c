/*
 * pl_tok_pipeline: loads the pipeline stages of a tokenizer.json around
 * its model: normalizer, pre-tokenizer, post-processor and decoder, each
 * flattened into the small list of steps pl_tok_internal.h declares.  A
 * component we do not implement fails the load with a message naming it.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl_tok_internal.h"
#include "pl_tok_json.h"

/* GPT-2's split pattern, used by ByteLevel with use_regex. */
static const char  pl_tok_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)|\\s+";

static const char  pl_tok_punct_re[] =
    "[^\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]+"
    "|[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]+";
/* ---- normalizers ---- */

static int
pl_tok_copy_str(pl_tok_loader_t *ld, const pl_json_t *v, char **out,
    size_t *len)
{
    if (pl_json_str(v) == NULL) {
        return pl_tok_fail(ld, "expected a string%s", NULL);
    }
    *out = malloc(v->n + 1);
    if (*out == NULL) {
        return pl_tok_fail(ld, "out of memory%s", NULL);
    }
    memcpy(*out, v->u.s, v->n + 1);
    *len = v->n;
    return 0;
}

/* {"String": s} or {"Regex": r}: copies s, or compiles r. */
static int
pl_tok_pattern(pl_tok_loader_t *ld, const pl_json_t *pat, const char *where,
    char **str, size_t *slen, pl_regex_t **re)
{
    const pl_json_t  *v;
    char              rerr[160];

    if ((v = pl_json_get(pat, "String")) != NULL) {
        if (pl_tok_copy_str(ld, v, str, slen) != 0) {
            return -1;
        }
        return *slen ? 0 : pl_tok_fail(ld, "%s: empty pattern", where);
    }
    if ((v = pl_json_get(pat, "Regex")) != NULL && pl_json_str(v) != NULL) {
        *re = pl_regex_compile(v->u.s, v->n, rerr, sizeof(rerr));
        if (*re == NULL) {
            snprintf(ld->err, ld->errlen, "%s: %s", where, rerr);
            return -1;
        }
        return 0;
    }
    return pl_tok_fail(ld, "%s: pattern must be String or Regex", where);
}

static pl_tok_norm_t *
pl_tok_new_norm(pl_tok_loader_t *ld, int type)
{
    pl_tokenizer_t  *t = ld->t;
    pl_tok_norm_t   *n = realloc(t->norms,
                                 (t->nnorms + 1) * sizeof(pl_tok_norm_t));

    if (n == NULL) {
        pl_tok_fail(ld, "out of memory%s", NULL);
        return NULL;
    }
    t->norms = n;
    n = &t->norms[t->nnorms++];
    memset(n, 0, sizeof(*n));
    n->type = type;
    return n;
}

int
pl_tok_load_normalizer(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    static const char  *forms[] = { "NFC", "NFD", "NFKC", "NFKD" };
    const char         *type = pl_json_str(pl_json_get(cfg, "type"));
    pl_tok_norm_t      *n;
    size_t              i;

    if (cfg == NULL || cfg->type == PL_JSON_NULL) {
        return 0;
    }
    if (type == NULL) {
        return pl_tok_fail(ld, "normalizer: missing type%s", NULL);
    }
    if (strcmp(type, "Sequence") == 0) {
        const pl_json_t  *list = pl_json_get(cfg, "normalizers");

        for (i = 0; list != NULL && i < list->n && list->type == PL_JSON_ARRAY;
             i++)
        {
            if (pl_tok_load_normalizer(ld, &list->u.kids[i]) != 0) {
                return -1;
            }
        }
        return 0;
    }
    for (i = 0; i < 4; i++) {
        if (strcmp(type, forms[i]) == 0) {
            n = pl_tok_new_norm(ld, PL_NORM_UNICODE);
            if (n == NULL) {
                return -1;
            }
            n->form = (int) i;
            return 0;
        }
    }
    if (strcmp(type, "Lowercase") == 0) {
        return pl_tok_new_norm(ld, PL_NORM_LOWERCASE) ? 0 : -1;
    }
    if (strcmp(type, "StripAccents") == 0) {
        return pl_tok_new_norm(ld, PL_NORM_STRIP_ACCENTS) ? 0 : -1;
    }
    if (strcmp(type, "Strip") == 0) {
        n = pl_tok_new_norm(ld, PL_NORM_STRIP);
        if (n == NULL) {
            return -1;
        }
        n->left = pl_json_bool(pl_json_get(cfg, "strip_left"), 1);
        n->right = pl_json_bool(pl_json_get(cfg, "strip_right"), 1);
        return 0;
    }
    if (strcmp(type, "Prepend") == 0) {
        n = pl_tok_new_norm(ld, PL_NORM_PREPEND);
        return n ? pl_tok_copy_str(ld, pl_json_get(cfg, "prepend"), &n->text,
                                   &n->textlen) : -1;
    }
    if (strcmp(type, "Replace") == 0) {
        n = pl_tok_new_norm(ld, PL_NORM_REPLACE);
        if (n == NULL || pl_tok_pattern(ld, pl_json_get(cfg, "pattern"),
                                        "normalizer Replace", &n->text,
                                        &n->textlen, &n->re) != 0)
        {
            return -1;
        }
        return pl_tok_copy_str(ld, pl_json_get(cfg, "content"), &n->content,
                               &n->contentlen);
    }
    return pl_tok_fail(ld, "normalizer %s is not supported", type);
}

/* ---- pre-tokenizers ---- */

static pl_tok_pre_t *
pl_tok_new_pre(pl_tok_loader_t *ld, int type)
{
    pl_tokenizer_t  *t = ld->t;
    pl_tok_pre_t    *p;

    if (t->byte_level) {
        pl_tok_fail(ld, "pre_tokenizer: ByteLevel must come last%s", NULL);
        return NULL;
    }
    p = realloc(t->pres, (t->npres + 1) * sizeof(pl_tok_pre_t));
    if (p == NULL) {
        pl_tok_fail(ld, "out of memory%s", NULL);
        return NULL;
    }
    t->pres = p;
    p = &t->pres[t->npres++];
    memset(p, 0, sizeof(*p));
    p->type = type;
    return p;
}

static int
pl_tok_regex_pre(pl_tok_loader_t *ld, const char *pattern, int invert)
{
    pl_tok_pre_t  *p = pl_tok_new_pre(ld, PL_PRE_SPLIT);
    char           rerr[160];

    if (p == NULL) {
        return -1;
    }
    p->invert = invert;
    p->behavior = invert ? PL_SPLIT_REMOVED : PL_SPLIT_ISOLATED;
    p->re = pl_regex_compile(pattern, strlen(pattern), rerr, sizeof(rerr));
    if (p->re == NULL) {
        return pl_tok_fail(ld, "pre_tokenizer: %s", rerr);
    }
    return 0;
}

static int
pl_tok_split_behavior(pl_tok_loader_t *ld, const char *b)
{
    static const char  *names[] = {
        "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
        "Contiguous"
    };
    int                 i;

    for (i = 0; b != NULL && i < 5; i++) {
        if (strcmp(b, names[i]) == 0) {
            return i;
        }
    }
    return pl_tok_fail(ld, "pre_tokenizer Split: behavior %s is not "
                       "supported", b ? b : "(missing)");
}

static int
pl_tok_load_metaspace(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    pl_tok_pre_t  *p = pl_tok_new_pre(ld, PL_PRE_METASPACE);
    const char    *scheme = pl_json_str(pl_json_get(cfg, "prepend_scheme"));
    const pl_json_t *rep = pl_json_get(cfg, "replacement");

    if (p == NULL) {
        return -1;
    }
    if (rep == NULL) {
        p->str = malloc(4);
        if (p->str != NULL) {
            memcpy(p->str, "\xe2\x96\x81", 4);
        }
        p->strlen = 3;
    } else if (pl_tok_copy_str(ld, rep, &p->str, &p->strlen) != 0) {
        return -1;
    }
    p->prepend_scheme = PL_PREPEND_ALWAYS;
    if (scheme == NULL) {
        p->prepend_scheme = pl_json_bool(pl_json_get(cfg, "add_prefix_space"),
                                         1) ? PL_PREPEND_ALWAYS
                                            : PL_PREPEND_NEVER;
    } else if (strcmp(scheme, "first") == 0) {
        p->prepend_scheme = PL_PREPEND_FIRST;
    } else if (strcmp(scheme, "never") == 0) {
        p->prepend_scheme = PL_PREPEND_NEVER;
    } else if (strcmp(scheme, "always") != 0) {
        return pl_tok_fail(ld, "pre_tokenizer Metaspace: prepend_scheme %s "
                           "is not supported", scheme);
    }
    p->split = pl_json_bool(pl_json_get(cfg, "split"), 1);
    return p->str && p->strlen ? 0 : pl_tok_fail(ld, "out of memory%s", NULL);
}

int
pl_tok_load_pre(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    const char    *type = pl_json_str(pl_json_get(cfg, "type"));
    pl_tok_pre_t  *p;
    size_t         i;

    if (cfg == NULL || cfg->type == PL_JSON_NULL) {
        return 0;
    }
    if (type == NULL) {
        return pl_tok_fail(ld, "pre_tokenizer: missing type%s", NULL);
    }
    if (strcmp(type, "Sequence") == 0) {
        const pl_json_t  *list = pl_json_get(cfg, "pretokenizers");

        for (i = 0; list != NULL && list->type == PL_JSON_ARRAY
                    && i < list->n; i++)
        {
            if (pl_tok_load_pre(ld, &list->u.kids[i]) != 0) {
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p = pl_tok_new_pre(ld, PL_PRE_BYTELEVEL);
        if (p == NULL) {
            return -1;
        }
        if (pl_json_bool(pl_json_get(cfg, "use_regex"), 1)) {
            p->re = pl_regex_compile(pl_tok_gpt2_re, strlen(pl_tok_gpt2_re),
                                     ld->err, ld->errlen);
            if (p->re == NULL) {
                return -1;
            }
        }
        p->add_prefix_space = pl_json_bool(
            pl_json_get(cfg, "add_prefix_space"), 1);
        ld->t->byte_level = 1;
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        p = pl_tok_new_pre(ld, PL_PRE_SPLIT);
        if (p == NULL
            || pl_tok_pattern(ld, pl_json_get(cfg, "pattern"),
                              "pre_tokenizer Split", &p->str, &p->strlen,
                              &p->re) != 0
            || (p->behavior = pl_tok_split_behavior(ld,
                    pl_json_str(pl_json_get(cfg, "behavior")))) < 0)
        {
            return -1;
        }
        p->invert = pl_json_bool(pl_json_get(cfg, "invert"), 0);
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        return pl_tok_load_metaspace(ld, cfg);
    }
    if (strcmp(type, "Digits") == 0) {
        return pl_tok_regex_pre(ld,
            pl_json_bool(pl_json_get(cfg, "individual_digits"), 0)
            ? "[^\\d]+|\\d" : "[^\\d]+|\\d+", 0);
    }
    if (strcmp(type, "Whitespace") == 0) {
        return pl_tok_regex_pre(ld, "\\w+|[^\\w\\s]+", 1);
    }
    if (strcmp(type, "Punctuation") == 0) {
        return pl_tok_regex_pre(ld, pl_tok_punct_re, 1);
    }
    if (strcmp(type, "WhitespaceSplit") == 0) {
        return pl_tok_new_pre(ld, PL_PRE_WSPLIT) ? 0 : -1;
    }
    return pl_tok_fail(ld, "pre_tokenizer %s is not supported", type);
}

/* ---- post-processors ---- */

static int
pl_tok_push_ids(pl_tok_loader_t *ld, int32_t **list, size_t *n,
    const int32_t *ids, size_t count)
{
    int32_t  *p = realloc(*list, (*n + count + 1) * sizeof(int32_t));

    if (p == NULL) {
        return pl_tok_fail(ld, "out of memory%s", NULL);
    }
    memcpy(p + *n, ids, count * sizeof(int32_t));
    *list = p;
    *n += count;
    return 0;
}

static int
pl_tok_special_ids(pl_tok_loader_t *ld, const pl_json_t *cfg,
    const pl_json_t *name, int seen_a)
{
    const pl_json_t  *sp = pl_json_get(pl_json_get(cfg, "special_tokens"),
                                       pl_json_str(name) ? name->u.s : "");
    const pl_json_t  *ids = pl_json_get(sp, "ids");
    int32_t           id;
    size_t            i;

    if (pl_json_str(name) == NULL) {
        return pl_tok_fail(ld, "post_processor: bad SpecialToken%s", NULL);
    }
    if (ids == NULL || ids->type != PL_JSON_ARRAY) {
        id = pl_tok_lookup(ld->t, name->u.s, name->n);
        if (id < 0) {
            return pl_tok_fail(ld, "post_processor: unknown special token %s",
                               name->u.s);
        }
        return seen_a ? pl_tok_push_ids(ld, &ld->t->suffix, &ld->t->nsuffix,
                                        &id, 1)
                      : pl_tok_push_ids(ld, &ld->t->prefix, &ld->t->nprefix,
                                        &id, 1);
    }
    for (i = 0; i < ids->n; i++) {
        if (pl_tok_id_of(ld, &ids->u.kids[i], "post_processor", &id) != 0
            || (uint32_t) id >= ld->t->nvocab
            || (seen_a ? pl_tok_push_ids(ld, &ld->t->suffix, &ld->t->nsuffix,
                                         &id, 1)
                       : pl_tok_push_ids(ld, &ld->t->prefix, &ld->t->nprefix,
                                         &id, 1)) != 0)
        {
            return pl_tok_fail(ld, "post_processor: bad id for %s",
                               name->u.s);
        }
    }
    return 0;
}

static int
pl_tok_load_template(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    const pl_json_t  *single = pl_json_get(cfg, "single");
    int               seen_a = 0;
    size_t            i;

    if (single == NULL || single->type != PL_JSON_ARRAY) {
        return pl_tok_fail(ld, "post_processor TemplateProcessing: single "
                           "must be an array%s", NULL);
    }
    if (ld->t->nprefix || ld->t->nsuffix) {
        return pl_tok_fail(ld, "post_processor: more than one template%s",
                           NULL);
    }
    for (i = 0; i < single->n; i++) {
        const pl_json_t  *it = &single->u.kids[i];
        const pl_json_t  *sp = pl_json_get(it, "SpecialToken");

        if (sp != NULL) {
            if (pl_tok_special_ids(ld, cfg, pl_json_get(sp, "id"), seen_a)
                != 0)
            {
                return -1;
            }
        } else if (pl_json_get(it, "Sequence") != NULL && !seen_a) {
            seen_a = 1;
        } else {
            return pl_tok_fail(ld, "post_processor TemplateProcessing: "
                               "unsupported item in single%s", NULL);
        }
    }
    return 0;
}

/* RobertaProcessing / BertProcessing: cls A sep. */
static int
pl_tok_load_clssep(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    const pl_json_t  *cls = pl_json_get(cfg, "cls");
    const pl_json_t  *sep = pl_json_get(cfg, "sep");
    int32_t           c, s;

    if (pl_tok_id_of(ld, pl_json_at(cls, 1), "post_processor cls", &c) != 0
        || pl_tok_id_of(ld, pl_json_at(sep, 1), "post_processor sep", &s)
           != 0
        || (uint32_t) c >= ld->t->nvocab || (uint32_t) s >= ld->t->nvocab)
    {
        return pl_tok_fail(ld, "post_processor: bad cls/sep%s", NULL);
    }
    return (pl_tok_push_ids(ld, &ld->t->prefix, &ld->t->nprefix, &c, 1) != 0
            || pl_tok_push_ids(ld, &ld->t->suffix, &ld->t->nsuffix, &s, 1)
               != 0) ? -1 : 0;
}

int
pl_tok_load_post(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    const char  *type = pl_json_str(pl_json_get(cfg, "type"));
    size_t       i;

    if (cfg == NULL || cfg->type == PL_JSON_NULL) {
        return 0;
    }
    if (type == NULL) {
        return pl_tok_fail(ld, "post_processor: missing type%s", NULL);
    }
    if (strcmp(type, "Sequence") == 0) {
        const pl_json_t  *list = pl_json_get(cfg, "processors");

        for (i = 0; list != NULL && list->type == PL_JSON_ARRAY
                    && i < list->n; i++)
        {
            if (pl_tok_load_post(ld, &list->u.kids[i]) != 0) {
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") == 0) {
        return pl_tok_load_template(ld, cfg);
    }
    if (strcmp(type, "RobertaProcessing") == 0
        || strcmp(type, "BertProcessing") == 0)
    {
        return pl_tok_load_clssep(ld, cfg);
    }
    return pl_tok_fail(ld, "post_processor %s is not supported", type);
}

/* ---- decoders ---- */

enum {
    PL_DEC_TOKENS, PL_DEC_FUSED
};

static int
pl_tok_dec_char(pl_tok_loader_t *ld, const pl_json_t *v, const char *dflt,
    char *out, size_t *len)
{
    const char  *s = v ? pl_json_str(v) : dflt;
    size_t       n = v ? (s ? v->n : 0) : strlen(dflt);

    if (s == NULL || n == 0 || n >= 8 || pl_utf8_seq_len((const uint8_t *) s,
                                                         n) != n)
    {
        return pl_tok_fail(ld, "decoder: expected one character%s", NULL);
    }
    memcpy(out, s, n);
    *len = n;
    return 0;
}

static int
pl_tok_dec_replace(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    pl_tok_decoder_t  *d = &ld->t->dec;
    pl_tok_replace_t  *r;
    pl_regex_t        *re = NULL;

    r = realloc(d->replaces, (d->nreplaces + 1) * sizeof(pl_tok_replace_t));
    if (r == NULL) {
        return pl_tok_fail(ld, "out of memory%s", NULL);
    }
    d->replaces = r;
    r = &d->replaces[d->nreplaces];
    memset(r, 0, sizeof(*r));
    if (pl_json_get(pl_json_get(cfg, "pattern"), "String") == NULL) {
        return pl_tok_fail(ld, "decoder Replace: only String patterns are "
                           "supported%s", NULL);
    }
    if (pl_tok_pattern(ld, pl_json_get(cfg, "pattern"), "decoder Replace",
                       &r->from, &r->fromlen, &re) != 0)
    {
        return -1;
    }
    d->nreplaces++;
    if (pl_tok_copy_str(ld, pl_json_get(cfg, "content"), &r->to, &r->tolen)
        != 0)
    {
        return -1;
    }
    return 0;
}

static int
pl_tok_dec_strip(pl_tok_loader_t *ld, const pl_json_t *cfg, int phase)
{
    pl_tok_decoder_t  *d = &ld->t->dec;
    const pl_json_t   *start = pl_json_get(cfg, "start");
    const pl_json_t   *stop = pl_json_get(cfg, "stop");

    if (phase != PL_DEC_FUSED || d->strip_len != 0) {
        return pl_tok_fail(ld, "decoder Strip is supported only once, after "
                           "Fuse%s", NULL);
    }
    if (stop != NULL && stop->type == PL_JSON_NUMBER && stop->u.num != 0) {
        return pl_tok_fail(ld, "decoder Strip with stop > 0 is not "
                           "supported%s", NULL);
    }
    if (pl_tok_dec_char(ld, pl_json_get(cfg, "content"), " ", d->strip_char,
                        &d->strip_len) != 0)
    {
        return -1;
    }
    if (start != NULL && (start->type != PL_JSON_NUMBER || start->u.num < 0
                          || start->u.num > 1000))
    {
        return pl_tok_fail(ld, "decoder Strip: bad start%s", NULL);
    }
    d->strip_start = start ? (int) start->u.num : 0;
    return 0;
}

static int
pl_tok_load_dec_step(pl_tok_loader_t *ld, const pl_json_t *cfg, int *phase)
{
    pl_tok_decoder_t  *d = &ld->t->dec;
    const char        *type = pl_json_str(pl_json_get(cfg, "type"));
    const char        *scheme;
    size_t             i;

    if (type == NULL) {
        return pl_tok_fail(ld, "decoder: missing type%s", NULL);
    }
    if (strcmp(type, "Sequence") == 0) {
        const pl_json_t  *list = pl_json_get(cfg, "decoders");

        for (i = 0; list != NULL && list->type == PL_JSON_ARRAY
                    && i < list->n; i++)
        {
            if (pl_tok_load_dec_step(ld, &list->u.kids[i], phase) != 0) {
                return -1;
            }
        }
        return 0;
    }
    if (strcmp(type, "Strip") == 0) {
        return pl_tok_dec_strip(ld, cfg, *phase);
    }
    if (*phase == PL_DEC_FUSED) {
        return pl_tok_fail(ld, "decoder %s after Fuse/ByteLevel is not "
                           "supported", type);
    }
    if (strcmp(type, "Fuse") == 0) {
        *phase = PL_DEC_FUSED;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0 && !d->byte_fallback
        && !d->metaspace && d->nreplaces == 0)
    {
        d->byte_level = 1;
        *phase = PL_DEC_FUSED;
        return 0;
    }
    if (strcmp(type, "ByteFallback") == 0) {
        d->byte_fallback = 1;
        return 0;
    }
    if (strcmp(type, "Replace") == 0 && !d->byte_fallback && !d->metaspace
        && d->nreplaces == 0)
    {
        return pl_tok_dec_replace(ld, cfg);
    }
    if (strcmp(type, "Metaspace") == 0 && !d->byte_fallback && !d->metaspace
        && d->nreplaces == 0)
    {
        d->metaspace = 1;
        scheme = pl_json_str(pl_json_get(cfg, "prepend_scheme"));
        d->meta_strip_first = scheme ? strcmp(scheme, "never") != 0
            : pl_json_bool(pl_json_get(cfg, "add_prefix_space"), 1);
        return pl_tok_dec_char(ld, pl_json_get(cfg, "replacement"),
                               "\xe2\x96\x81", d->meta_char, &d->meta_len);
    }
    return pl_tok_fail(ld, "decoder %s is not supported here", type);
}

int
pl_tok_load_decoder(pl_tok_loader_t *ld, const pl_json_t *cfg)
{
    int  phase = PL_DEC_TOKENS;

    if (cfg == NULL || cfg->type == PL_JSON_NULL) {
        return pl_tok_fail(ld, "decoder: missing (tokenizers without a "
                           "decoder are not supported)%s", NULL);
    }
    return pl_tok_load_dec_step(ld, cfg, &phase);
}
