/*
 * `libra bench-tokenizer TOKENIZER [CORPUS] [--repeat R] [--seconds S]` (also
 * --bench-tokenizer): the BPE tokenizer's throughput on one thread (include/libra/bpe.h).
 *
 * TOKENIZER is a tokenizer.json or a model directory. CORPUS is a JSON array of
 * strings (each encoded as one text, e.g. tests/golden/tokenizer/corpus.json, the
 * default) or any other file (encoded whole). Each repeat encodes the corpus over and
 * over for about S seconds (default 0.5) with added tokens matched (BPE_ADDED_ALL,
 * Hugging Face's encode(add_special_tokens=False)); the best of R repeats (default
 * 5) is reported in MB/s of input, and decoding the same ids likewise.
 * tools/bench-tokenizer runs this next to the transformers.js reference.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "libra/bpe.h"
#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/log.h"

struct corpus {
    char **text; /* (n) */
    size_t *len; /* (n) */
    size_t n, bytes;
};

static void corpus_add(struct corpus *c, const char *s, size_t len)
{
    c->text = xrealloc(c->text, (c->n + 1) * sizeof *c->text);
    c->len = xrealloc(c->len, (c->n + 1) * sizeof *c->len);
    c->text[c->n] = xmalloc(len + 1);
    memcpy(c->text[c->n], s, len);
    c->text[c->n][len] = '\0';
    c->len[c->n++] = len;
    c->bytes += len;
}

/* A JSON array of strings, or else the whole file as one text. */
static int corpus_read(const char *path, struct corpus *c)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        XGROW(buf, cap, len + 65536);
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) return free(buf), -1;
    json_t *j = json_loadb(buf, len, 0, NULL);
    int strings = json_is_array(j) && json_array_size(j) > 0;
    for (size_t i = 0; strings && i < json_array_size(j); i++) strings = json_is_string(json_array_get(j, i));
    if (strings)
        for (size_t i = 0; i < json_array_size(j); i++)
            corpus_add(c, json_string_value(json_array_get(j, i)), json_string_length(json_array_get(j, i)));
    else
        corpus_add(c, buf, len);
    json_decref(j);
    free(buf);
    return 0;
}

static void corpus_free(struct corpus *c)
{
    for (size_t i = 0; i < c->n; i++) free(c->text[i]);
    free(c->text);
    free(c->len);
}

/* One pass over the corpus: encode (ids[i] gets text i's ids) or decode them back. */
static size_t pass(const struct bpe *b, const struct corpus *c, int32_t **ids, size_t *n_ids, int decode,
                   char *buf, size_t buf_cap)
{
    size_t total = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (decode) total += bpe_decode(b, ids[i], n_ids[i], buf, buf_cap);
        else total += bpe_encode(b, c->text[i], c->len[i], BPE_ADDED_ALL, ids[i], n_ids[i]);
    }
    return total;
}

/* Best MB/s of input over `repeat` timed runs of `iters` passes each. */
static double best_rate(const struct bpe *b, const struct corpus *c, int32_t **ids, size_t *n_ids, int decode,
                        char *buf, size_t buf_cap, double seconds, int repeat)
{
    double t0 = wall_time();
    size_t iters = 0;
    while (wall_time() - t0 < 0.1 * seconds || iters == 0) { /* warm-up, sizes the runs */
        pass(b, c, ids, n_ids, decode, buf, buf_cap);
        iters++;
    }
    double per = (wall_time() - t0) / (double)iters;
    iters = (size_t)(seconds / (per > 0 ? per : 1e-9)) + 1;
    double best = 0;
    for (int r = 0; r < repeat; r++) {
        double t = wall_time();
        for (size_t k = 0; k < iters; k++) pass(b, c, ids, n_ids, decode, buf, buf_cap);
        double rate = (double)c->bytes * (double)iters / (wall_time() - t) / 1e6;
        if (rate > best) best = rate;
    }
    return best;
}

static const struct option bench_tok_opts[] = {
    {"repeat", required_argument, NULL, 'r'},
    {"seconds", required_argument, NULL, 's'},
    {0}};
static const struct cli_cmd bench_tok_cmd = {
    "libra bench-tokenizer",
    "libra bench-tokenizer TOKENIZER_DIR|tokenizer.json [CORPUS_FILE] [--repeat R]\n"
    "                             [--seconds S]",
    "The BPE tokenizer's encode and decode throughput on one thread, in MB/s of text.\n"
    "CORPUS_FILE: a JSON array of strings or any other file (default\n"
    "tests/golden/tokenizer/corpus.json).\n"
    "  --repeat R    repeats, the best reported, 1 .. 1000 (default 5)\n"
    "  --seconds S   seconds a repeat, (0, 3600] (default 0.5)\n",
    bench_tok_opts, "TOKENIZER_DIR|tokenizer.json", 1, 2, 0};

int cmd_bench_tokenizer(int argc, char **argv)
{
    int repeat = 5, ch;
    double seconds = 0.5;
    struct cli cli;
    cli_begin(&cli, &bench_tok_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0)
        if (ch == 'r' ? cli_int(&cli, 1, 1000, &repeat) : cli_double_open(&cli, 0, 3600, &seconds))
            return cli.rc;
    if (ch == CLI_EXIT) return cli.rc;
    const char *tok = cli.args[0], *corpus_path = cli.nargs > 1 ? cli.args[1] : NULL;
    if (!corpus_path) corpus_path = LIBRA_SRCDIR "/tests/golden/tokenizer/corpus.json";
    char err[1024];
    double t0 = wall_time();
    struct bpe *b = bpe_load(tok, err, sizeof err);
    if (!b) {
        fprintf(stderr, "libra --bench-tokenizer: %s\n", err);
        return 1;
    }
    double load_s = wall_time() - t0;
    struct corpus c = {0};
    if (corpus_read(corpus_path, &c) != 0 || c.bytes == 0) {
        fprintf(stderr, "libra --bench-tokenizer: %s: cannot read, or empty\n", corpus_path);
        corpus_free(&c);
        bpe_free(b);
        return 1;
    }
    int32_t **ids = xcalloc(c.n, sizeof *ids);
    size_t *n_ids = xcalloc(c.n, sizeof *n_ids), tokens = 0, longest = 0;
    for (size_t i = 0; i < c.n; i++) {
        n_ids[i] = bpe_encode(b, c.text[i], c.len[i], BPE_ADDED_ALL, NULL, 0);
        ids[i] = xmalloc((n_ids[i] + 1) * sizeof **ids);
        tokens += n_ids[i];
        if (c.len[i] > longest) longest = c.len[i];
    }
    size_t buf_cap = 4 * longest + 64; /* decoding never exceeds 3 bytes per input byte + ids */
    char *buf = xmalloc(buf_cap);
    double enc = best_rate(b, &c, ids, n_ids, 0, buf, buf_cap, seconds, repeat);
    double dec = best_rate(b, &c, ids, n_ids, 1, buf, buf_cap, seconds, repeat);
    printf("tokenizer: %s (vocabulary %d, loaded in %.2f s)\n", tok, (int)bpe_vocab_size(b), load_s);
    printf("corpus:    %s: %zu texts, %zu bytes, %zu tokens (%.2f bytes/token)\n", corpus_path, c.n, c.bytes,
           tokens, (double)c.bytes / (double)(tokens ? tokens : 1));
    printf("encode:    %.2f MB/s (best of %d, one thread)\n", enc, repeat);
    printf("decode:    %.2f MB/s\n", dec);
    for (size_t i = 0; i < c.n; i++) free(ids[i]);
    free(ids);
    free(n_ids);
    free(buf);
    corpus_free(&c);
    bpe_free(b);
    return 0;
}
