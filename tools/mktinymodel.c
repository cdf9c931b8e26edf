/*
 * mktinymodel: writes the bundled tiny Llama model, a complete Hugging Face
 * folder, deterministically (the same bytes on every run and machine).
 *
 *     mktinymodel [--vocab-size N] OUTDIR
 *
 * --vocab-size pads the model's vocabulary (config.json, embedding and
 * lm_head rows) beyond the tokenizer's 512 ids, as real checkpoints do.
 * OUTDIR receives config.json, generation_config.json, tokenizer.json,
 * tokenizer_config.json and model.safetensors (bf16).  The weights are
 * random (splitmix64 and a sum of uniforms, no libm, so every machine draws
 * the same numbers), scaled so that logits are far from flat.  The
 * tokenizer is a GPT-2-style byte-level BPE: ids 0..255 are the bytes,
 * 256..509 merges learned here by a small BPE training run over an embedded
 * paragraph, 510 and 511 the special <|begin_of_text|> and <|end_of_text|>.
 * The model is small enough to run many integration tests on two cores.
 */

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pl_cli.h"
#include "pl_ops.h"

#define VOCAB       512
#define HIDDEN      64
#define INTER       192
#define LAYERS      2
#define HEADS       4
#define KV_HEADS    2
#define HEAD_DIM    16
#define N_BYTES     256
#define N_MERGES    254
#define BOS_ID      510
#define EOS_ID      511
#define BOS         "<|begin_of_text|>"
#define EOS         "<|end_of_text|>"
#define MAX_WORDS   4096
#define MAX_WORD    64
#define MAX_VOCAB   65536

static int  vocab_size = VOCAB;

static const char  corpus[] =
    "The quick brown fox jumps over the lazy dog, and then the dog "
    "wakes up and chases the fox around the garden. Every morning the "
    "server starts, reads its configuration, and listens for requests on "
    "the local port. A request carries a prompt; the engine turns the "
    "prompt into tokens, runs the model over them, and streams the answer "
    "back one token at a time. Memory for the attention keys and values "
    "is split into small blocks, so that many conversations can share the "
    "same pool without wasting space. When the pool runs low, the newest "
    "request waits while the older ones finish. "
    "int main(int argc, char **argv) { for (int i = 0; i < argc; i++) { "
    "printf(\"%s\\n\", argv[i]); } return 0; } "
    "def generate(model, prompt, max_tokens=16): tokens = "
    "tokenize(prompt); for step in range(max_tokens): logits = "
    "model(tokens); tokens.append(argmax(logits)); return "
    "detokenize(tokens) "
    "Hello, world! How are you today? I am fine, thank you. What is the "
    "weather like in the mountains this week? It will be sunny on Monday, "
    "cloudy on Tuesday and raining on Wednesday. The numbers one, two, "
    "three, 1234, 5678 and 2048 appear in this text as well as the words "
    "there, these, those, then, than, that, this, with, within, without, "
    "together, another, other, mother, brother, weather, whether. "
    "Paged attention stores the cache in blocks; the block table maps "
    "each logical block of a sequence to a physical block in memory. "
    "Scheduling, batching, sampling, streaming, tokenizing and decoding "
    "are the main stages of serving a language model.";


/* ---- deterministic random numbers ---- */

static uint64_t  rng_state = 0x70616765646c6c6dULL;


static uint64_t
splitmix64(void)
{
    uint64_t  z = (rng_state += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}


/* approximately N(0, 1): the sum of 12 uniforms minus 6, exact in IEEE
   arithmetic everywhere, unlike Box-Muller's log and cos */
static double
normal(void)
{
    double  sum = 0.0;
    int     i;

    for (i = 0; i < 12; i++) {
        sum += (double) (splitmix64() >> 11) * 0x1p-53;
    }
    return sum - 6.0;
}


/* ---- files ---- */

static void
die(const char *what, const char *detail)
{
    fprintf(stderr, "mktinymodel: %s: %s\n", what, detail);
    exit(1);
}


static void
make_dirs(const char *dir)
{
    char    path[4096];
    size_t  i;

    if (strlen(dir) >= sizeof(path)) {
        die(dir, "path too long");
    }
    strcpy(path, dir);
    for (i = 1; path[i] != '\0'; i++) {
        if (path[i] == '/') {
            path[i] = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                die(path, strerror(errno));
            }
            path[i] = '/';
        }
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        die(path, strerror(errno));
    }
}


/* Write through a temporary name, so readers never see half a file. */
static void
write_file(const char *dir, const char *name, const void *a, size_t alen,
    const void *b, size_t blen)
{
    char   path[4200], tmp[4300];
    FILE  *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (f == NULL) {
        die(tmp, strerror(errno));
    }
    if (fwrite(a, 1, alen, f) != alen || fwrite(b, 1, blen, f) != blen
        || fclose(f) != 0)
    {
        die(tmp, "write failed");
    }
    if (rename(tmp, path) != 0) {
        die(path, strerror(errno));
    }
}


static void
write_json(const char *dir, const char *name, json_t *doc)
{
    char  *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(9));

    if (text == NULL) {
        die(name, "cannot encode JSON");
    }
    write_file(dir, name, text, strlen(text), "\n", 1);
    free(text);
    json_decref(doc);
}


/* ---- weights ---- */

typedef struct {
    uint8_t  *data;
    size_t    len;
    size_t    cap;
    json_t   *header;
} st_writer_t;


static void
add_tensor(st_writer_t *w, const char *name, int rows, int cols, double std,
    double mean)
{
    size_t     n = (size_t) (rows ? rows : 1) * cols, i;
    size_t     begin = w->len;
    uint16_t   v;
    json_t    *shape = rows ? json_pack("[ii]", rows, cols)
                            : json_pack("[i]", cols);

    if (w->len + 2 * n > w->cap) {
        w->cap = (w->len + 2 * n) * 2;
        w->data = realloc(w->data, w->cap);
        if (w->data == NULL) {
            die(name, "out of memory");
        }
    }
    for (i = 0; i < n; i++) {
        v = pl_f32_to_bf16((float) (mean + std * normal()));
        w->data[w->len++] = (uint8_t) (v & 0xff);
        w->data[w->len++] = (uint8_t) (v >> 8);
    }
    json_object_set_new(w->header, name,
                        json_pack("{s:s, s:o, s:[II]}", "dtype", "BF16",
                                  "shape", shape, "data_offsets",
                                  (json_int_t) begin, (json_int_t) w->len));
}


static void
add_layer(st_writer_t *w, int l)
{
    static const struct {
        const char  *name;
        int          rows, cols;
    } mats[] = {
        { "self_attn.q_proj.weight", HEADS * HEAD_DIM, HIDDEN },
        { "self_attn.k_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN },
        { "self_attn.v_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN },
        { "self_attn.o_proj.weight", HIDDEN, HEADS * HEAD_DIM },
        { "mlp.gate_proj.weight", INTER, HIDDEN },
        { "mlp.up_proj.weight", INTER, HIDDEN },
        { "mlp.down_proj.weight", HIDDEN, INTER },
    };
    char    name[128];
    size_t  i;

    snprintf(name, sizeof(name), "model.layers.%d.input_layernorm.weight", l);
    add_tensor(w, name, 0, HIDDEN, 0.1, 1.0);
    for (i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
        snprintf(name, sizeof(name), "model.layers.%d.%s", l, mats[i].name);
        /* 1/sqrt(fan_in): activations keep unit scale through the block */
        add_tensor(w, name, mats[i].rows, mats[i].cols,
                   mats[i].cols == INTER ? 0.0722 : 0.125, 0.0);
    }
    snprintf(name, sizeof(name),
             "model.layers.%d.post_attention_layernorm.weight", l);
    add_tensor(w, name, 0, HIDDEN, 0.1, 1.0);
}


static void
write_weights(const char *dir)
{
    st_writer_t  w = { .header = json_object() };
    char        *hdr, *padded;
    size_t       hlen, plen;
    uint8_t      len8[8];
    int          l, i;

    json_object_set_new(w.header, "__metadata__",
                        json_pack("{s:s}", "format", "pt"));
    add_tensor(&w, "model.embed_tokens.weight", vocab_size, HIDDEN, 1.0,
               0.0);
    for (l = 0; l < LAYERS; l++) {
        add_layer(&w, l);
    }
    add_tensor(&w, "model.norm.weight", 0, HIDDEN, 0.1, 1.0);
    /* logits with a standard deviation of about 2 */
    add_tensor(&w, "lm_head.weight", vocab_size, HIDDEN, 0.25, 0.0);

    hdr = json_dumps(w.header, JSON_COMPACT);
    hlen = strlen(hdr);
    plen = (8 + hlen + 7) / 8 * 8 - 8;      /* data starts 8-aligned */
    padded = malloc(8 + plen);
    if (hdr == NULL || padded == NULL) {
        die("model.safetensors", "out of memory");
    }
    memset(padded + 8, ' ', plen);
    memcpy(padded + 8, hdr, hlen);
    for (i = 0; i < 8; i++) {
        len8[i] = (uint8_t) ((uint64_t) plen >> (8 * i));
    }
    memcpy(padded, len8, 8);
    write_file(dir, "model.safetensors", padded, 8 + plen, w.data, w.len);
    free(padded);
    free(hdr);
    free(w.data);
    json_decref(w.header);
}


/* ---- tokenizer: byte-level BPE trained on the corpus ---- */

typedef struct {
    char    *tok[N_BYTES + N_MERGES];       /* UTF-8 text of each id */
    int      n_tok;
    int      merge_a[N_MERGES], merge_b[N_MERGES];
    int      word[MAX_WORDS][MAX_WORD];     /* ids of each distinct word */
    int      word_len[MAX_WORDS];
    int      word_count[MAX_WORDS];
    int      n_words;
} bpe_t;


/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
   others for code points 256 upwards, in byte order */
static void
byte_tokens(bpe_t *b)
{
    int  byte, next = 256;

    for (byte = 0; byte < N_BYTES; byte++) {
        int   printable = (byte >= '!' && byte <= '~')
                          || (byte >= 0xa1 && byte <= 0xac)
                          || (byte >= 0xae && byte <= 0xff);
        int   cp = printable ? byte : next++;
        char  *s = calloc(1, 3);

        if (cp < 0x80) {
            s[0] = (char) cp;
        } else {
            s[0] = (char) (0xc0 | (cp >> 6));
            s[1] = (char) (0x80 | (cp & 0x3f));
        }
        b->tok[byte] = s;
    }
    b->n_tok = N_BYTES;
}


static int
char_class(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        return 1;
    }
    if (c >= '0' && c <= '9') {
        return 2;
    }
    return c == ' ' ? 0 : 3;
}


static void
add_word(bpe_t *b, const unsigned char *s, int len)
{
    int  i;

    for (i = 0; i < b->n_words; i++) {
        if (b->word_len[i] == len) {
            int  j = 0;

            while (j < len && b->word[i][j] == s[j]) {
                j++;
            }
            if (j == len) {
                b->word_count[i]++;
                return;
            }
        }
    }
    if (b->n_words == MAX_WORDS || len > MAX_WORD) {
        die("tokenizer", "corpus word table overflow");
    }
    for (i = 0; i < len; i++) {
        b->word[b->n_words][i] = s[i];
    }
    b->word_len[b->n_words] = len;
    b->word_count[b->n_words++] = 1;
}


/* Pre-split like GPT-2, simply: an optional space and a run of letters,
   of digits, or of other symbols; lone spaces stay words of their own. */
static void
split_words(bpe_t *b)
{
    const unsigned char  *s = (const unsigned char *) corpus;
    size_t                i = 0, n = strlen(corpus), start;

    while (i < n) {
        start = i;
        if (s[i] == ' ' && i + 1 < n && s[i + 1] != ' ') {
            i++;
        }
        if (char_class(s[i]) == 0) {
            i++;
        } else {
            int  cls = char_class(s[i]);

            while (i < n && char_class(s[i]) == cls) {
                i++;
            }
        }
        add_word(b, s + start, (int) (i - start));
    }
}


static int
tok_exists(const bpe_t *b, const char *s)
{
    int  i;

    for (i = 0; i < b->n_tok; i++) {
        if (strcmp(b->tok[i], s) == 0) {
            return 1;
        }
    }
    return 0;
}


static char *
concat(const char *a, const char *c)
{
    char  *s = malloc(strlen(a) + strlen(c) + 1);

    if (s == NULL) {
        die("tokenizer", "out of memory");
    }
    strcpy(s, a);
    strcat(s, c);
    return s;
}


/* The most frequent adjacent pair whose merge would be a new token; ties
   go to the smallest (left, right) ids.  0 when none is left. */
static int
best_pair(const bpe_t *b, int *left, int *right)
{
    static int  count[N_BYTES + N_MERGES][N_BYTES + N_MERGES];
    int         best = 0, w, i, l, r;

    memset(count, 0, sizeof(count));
    for (w = 0; w < b->n_words; w++) {
        for (i = 0; i + 1 < b->word_len[w]; i++) {
            count[b->word[w][i]][b->word[w][i + 1]] += b->word_count[w];
        }
    }
    for (l = 0; l < b->n_tok; l++) {
        for (r = 0; r < b->n_tok; r++) {
            if (count[l][r] > best) {
                char  *s = concat(b->tok[l], b->tok[r]);

                if (!tok_exists(b, s)) {
                    best = count[l][r];
                    *left = l;
                    *right = r;
                }
                free(s);
            }
        }
    }
    return best > 0;
}


static void
apply_merge(bpe_t *b, int left, int right, int id)
{
    int  w, i, j;

    for (w = 0; w < b->n_words; w++) {
        for (i = 0, j = 0; i < b->word_len[w]; i++, j++) {
            if (i + 1 < b->word_len[w] && b->word[w][i] == left
                && b->word[w][i + 1] == right)
            {
                b->word[w][j] = id;
                i++;
            } else {
                b->word[w][j] = b->word[w][i];
            }
        }
        b->word_len[w] = j;
    }
}


static void
train(bpe_t *b)
{
    int  m, left = 0, right = 0;

    byte_tokens(b);
    split_words(b);
    for (m = 0; m < N_MERGES; m++) {
        if (!best_pair(b, &left, &right)) {
            die("tokenizer", "the corpus has too few pairs for the merges");
        }
        b->tok[b->n_tok] = concat(b->tok[left], b->tok[right]);
        b->merge_a[m] = left;
        b->merge_b[m] = right;
        apply_merge(b, left, right, b->n_tok);
        b->n_tok++;
    }
}


static json_t *
added_token(int id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id,
                     "content", content, "single_word", 0, "lstrip", 0,
                     "rstrip", 0, "normalized", 0, "special", 1);
}


static json_t *
byte_level(int add_prefix_space)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel",
                     "add_prefix_space", add_prefix_space, "trim_offsets", 1,
                     "use_regex", 1);
}


/* <|begin_of_text|> before each sequence, as Llama 3 does */
static json_t *
post_processor(void)
{
    return json_pack(
        "{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}],"
        " s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}},"
        " {s:{s:s, s:i}}],"
        " s:{s:{s:s, s:[i], s:[s]}}}",
        "type", "TemplateProcessing",
        "single",
        "SpecialToken", "id", BOS, "type_id", 0,
        "Sequence", "id", "A", "type_id", 0,
        "pair",
        "SpecialToken", "id", BOS, "type_id", 0,
        "Sequence", "id", "A", "type_id", 0,
        "SpecialToken", "id", BOS, "type_id", 1,
        "Sequence", "id", "B", "type_id", 1,
        "special_tokens",
        BOS, "id", BOS, "ids", BOS_ID, "tokens", BOS);
}


static json_t *
bpe_model(const bpe_t *b)
{
    json_t  *vocab = json_object(), *merges = json_array();
    char    *pair;
    int      i;

    for (i = 0; i < b->n_tok; i++) {
        json_object_set_new(vocab, b->tok[i], json_integer(i));
    }
    for (i = 0; i < N_MERGES; i++) {
        pair = malloc(strlen(b->tok[b->merge_a[i]])
                      + strlen(b->tok[b->merge_b[i]]) + 2);
        sprintf(pair, "%s %s", b->tok[b->merge_a[i]], b->tok[b->merge_b[i]]);
        json_array_append_new(merges, json_string(pair));
        free(pair);
    }
    return json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:o, s:o}",
                     "type", "BPE", "dropout", "unk_token",
                     "continuing_subword_prefix", "end_of_word_suffix",
                     "fuse_unk", 0, "byte_fallback", 0,
                     "vocab", vocab, "merges", merges);
}


static void
write_tokenizer(const char *dir)
{
    static bpe_t  b;
    json_t       *doc;
    int           i;

    train(&b);
    doc = json_pack("{s:s, s:n, s:n, s:[o, o], s:n, s:o, s:o, s:o, s:o}",
                    "version", "1.0", "truncation", "padding",
                    "added_tokens", added_token(BOS_ID, BOS),
                    added_token(EOS_ID, EOS),
                    "normalizer", "pre_tokenizer", byte_level(0),
                    "post_processor", post_processor(),
                    "decoder", byte_level(1), "model", bpe_model(&b));
    if (doc == NULL) {
        die("tokenizer.json", "cannot build the document");
    }
    write_json(dir, "tokenizer.json", doc);
    for (i = 0; i < b.n_tok; i++) {
        free(b.tok[i]);
    }
}


/* Llama 3's shape, with plain-text role headers: the vocabulary has no
   header tokens. */
static const char  chat_template[] =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<' + message['role'] + '>\\n' + message['content'] | trim"
    " + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<assistant>\\n' }}{%- endif %}";


static void
write_tokenizer_config(const char *dir)
{
    json_t  *decoder = json_pack("{s:o, s:o}",
                                 "510", added_token(BOS_ID, BOS),
                                 "511", added_token(EOS_ID, EOS));

    json_object_del(json_object_get(decoder, "510"), "id");
    json_object_del(json_object_get(decoder, "511"), "id");
    write_json(dir, "tokenizer_config.json",
               json_pack("{s:b, s:b, s:o, s:s, s:s, s:s, s:b, s:i, s:s}",
                         "add_bos_token", 1, "add_eos_token", 0,
                         "added_tokens_decoder", decoder,
                         "bos_token", BOS, "eos_token", EOS,
                         "chat_template", chat_template,
                         "clean_up_tokenization_spaces", 0,
                         "model_max_length", 2048,
                         "tokenizer_class", "PreTrainedTokenizerFast"));
}


static void
write_configs(const char *dir)
{
    write_json(dir, "config.json",
               json_pack("{s:[s], s:b, s:i, s:i, s:s, s:i, s:f, s:i, s:i,"
                         " s:i, s:s, s:i, s:i, s:i, s:f, s:n, s:f, s:b,"
                         " s:s, s:i}",
                         "architectures", "LlamaForCausalLM",
                         "attention_bias", 0, "bos_token_id", BOS_ID,
                         "eos_token_id", EOS_ID, "hidden_act", "silu",
                         "hidden_size", HIDDEN, "initializer_range", 0.02,
                         "intermediate_size", INTER,
                         "max_position_embeddings", 2048,
                         "head_dim", HEAD_DIM, "model_type", "llama",
                         "num_attention_heads", HEADS,
                         "num_hidden_layers", LAYERS,
                         "num_key_value_heads", KV_HEADS,
                         "rms_norm_eps", 1e-5, "rope_scaling",
                         "rope_theta", 10000.0,
                         "tie_word_embeddings", 0,
                         "torch_dtype", "bfloat16", "vocab_size", vocab_size));
    write_json(dir, "generation_config.json",
               json_pack("{s:b, s:i, s:i}", "_from_model_config", 1,
                         "bos_token_id", BOS_ID, "eos_token_id", EOS_ID));
}


static const char  usage_text[] =
"usage: mktinymodel [--vocab-size N] OUTDIR\n"
"\n"
"Writes a tiny Llama model with random weights (config.json,\n"
"model.safetensors, tokenizer.json, tokenizer_config.json,\n"
"generation_config.json) into OUTDIR, for tests.\n"
"\n"
"  --vocab-size N    embedding rows, 512..65536 (default 512: as many\n"
"                    as the tokenizer has tokens)\n"
"  --help            this text\n"
"  --version         the name and version\n";


int
main(int argc, char **argv)
{
    const char  *dir = argv[argc - 1];
    char        *end;
    long         n;

    pl_cli_standard(argc, argv, "mktinymodel", usage_text);

    if (argc == 4 && strcmp(argv[1], "--vocab-size") == 0) {
        n = strtol(argv[2], &end, 10);
        if (*end != '\0' || n < VOCAB || n > MAX_VOCAB) {
            return pl_cli_error("mktinymodel", "--vocab-size must be "
                                "%d..%d", VOCAB, MAX_VOCAB);
        }
        vocab_size = (int) n;
    } else if (argc == 2 && argv[1][0] == '-') {
        return pl_cli_error("mktinymodel", "unknown option '%s'", argv[1]);
    } else if (argc != 2) {
        return pl_cli_error("mktinymodel", "one OUTDIR expected, "
                            "optionally after --vocab-size N");
    }
    make_dirs(dir);
    write_configs(dir);
    write_tokenizer(dir);
    write_tokenizer_config(dir);
    write_weights(dir);
    return 0;
}
