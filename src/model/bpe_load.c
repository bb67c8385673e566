/*
 * bpe_load: a Hugging Face tokenizer.json (and the tokenizer_config.json beside it)
 * into a struct bpe (bpe_internal.h). Only the byte-level BPE features that Qwen2/
 * Qwen3 and Llama 3 use are accepted (docs/tokenizer.md); anything else is an error
 * that names the file and the field, never a crash and never a silent difference.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bpe_internal.h"
#include "libra/log.h"

enum { BPE_MAX_ID = 1 << 26 }; /* ids beyond this are taken for a corrupt file */

/* What the loader passes around: the tokenizer, the file for messages, err. */
struct ld {
    struct bpe *b;
    const char *file;
    char *err;
    size_t errlen;
};

#define LD_FAIL(ld, ...) bpe_err((ld)->err, (ld)->errlen, __VA_ARGS__)

/* A boolean member: absent or null gives def; anything but a boolean is an error. */
static int get_bool(struct ld *ld, json_t *obj, const char *where, const char *key, int def, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return *out = def, 0;
    if (!json_is_boolean(v))
        return LD_FAIL(ld, "%s: %s.%s: expected true or false", ld->file, where, key);
    return *out = json_is_true(v), 0;
}

/* The "type" member of a component, or NULL (message) when missing. */
static const char *get_type(struct ld *ld, json_t *obj, const char *where)
{
    const char *t = json_is_object(obj) ? json_string_value(json_object_get(obj, "type")) : NULL;
    if (!t) LD_FAIL(ld, "%s: %s: expected an object with a string \"type\"", ld->file, where);
    return t;
}

/* An id member: an integer in [0, BPE_MAX_ID). */
static int get_id(struct ld *ld, json_t *v, const char *where, int32_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= BPE_MAX_ID)
        return LD_FAIL(ld, "%s: %s: expected an id, an integer in [0, %d)", ld->file, where, BPE_MAX_ID);
    return *out = (int32_t)json_integer_value(v), 0;
}

/* ---- model: vocab, merges, options ---- */

static int vocab_pass1(struct ld *ld, json_t *vocab, int32_t *max_id, size_t *bytes)
{
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        int32_t id;
        char where[96];
        snprintf(where, sizeof where, "model.vocab[\"%.40s\"]", key);
        if (get_id(ld, v, where, &id)) return -1;
        if (id > *max_id) *max_id = id;
        *bytes += strlen(key);
    }
    return 0;
}

static int vocab_pass2(struct ld *ld, json_t *vocab)
{
    struct bpe *b = ld->b;
    const char *key;
    json_t *v;
    char *raw = NULL;
    size_t cap = 0;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t n = strlen(key);
        if (b->toks[id].flags & BPE_TOK_VOCAB) {
            free(raw);
            return LD_FAIL(ld, "%s: model.vocab[\"%.40s\"]: id %d is also another entry's", ld->file, key,
                           (int)id);
        }
        XGROW(raw, cap, n + 1);
        long m = bpe_spelling_bytes(key, n, raw);
        if (m >= 0) bpe_vocab_set(b, id, raw, (size_t)m, BPE_TOK_VOCAB);
        else bpe_vocab_set(b, id, key, n, BPE_TOK_VOCAB | BPE_TOK_ODD);
    }
    free(raw);
    if (bpe_vocab_index(b, ld->err, ld->errlen)) return -1;
    for (int x = 0; x < 256; x++) {
        char c = (char)x;
        b->byte_id[x] = bpe_vocab_find(b, &c, 1);
        if (b->byte_id[x] < 0)
            return LD_FAIL(ld, "%s: model.vocab: no entry for byte 0x%02X (U+%04X): not a byte-level "
                           "vocabulary", ld->file, x, (unsigned)bpe_byte_char((uint8_t)x));
    }
    return 0;
}

/* The vocabulary id of a byte-level spelling s[0, n), or -1. */
static int32_t spelling_id(const struct bpe *b, const char *s, size_t n, char *raw)
{
    long m = bpe_spelling_bytes(s, n, raw);
    return m < 0 ? -1 : bpe_vocab_find(b, raw, (size_t)m);
}

static int load_merges(struct ld *ld, json_t *merges)
{
    struct bpe *b = ld->b;
    if (!json_is_array(merges))
        return LD_FAIL(ld, "%s: model.merges: missing or not an array", ld->file);
    size_t n = json_array_size(merges);
    if (n >= (size_t)INT32_MAX) return LD_FAIL(ld, "%s: model.merges: too many (%zu)", ld->file, n);
    bpe_merges_init(b, (int64_t)n);
    char *raw = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(merges, i);
        const char *l = NULL, *r = NULL;
        size_t ln = 0, rn = 0;
        if (json_is_string(e)) { /* "left right" */
            const char *s = json_string_value(e);
            size_t len = json_string_length(e);
            const char *sp = memchr(s, ' ', len);
            if (sp && !memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)) && sp > s && sp + 1 < s + len)
                l = s, ln = (size_t)(sp - s), r = sp + 1, rn = len - ln - 1;
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) { /* ["left", "right"] */
            l = json_string_value(json_array_get(e, 0));
            ln = json_string_length(json_array_get(e, 0));
            r = json_string_value(json_array_get(e, 1));
            rn = json_string_length(json_array_get(e, 1));
        }
        if (!l) {
            free(raw);
            return LD_FAIL(ld, "%s: model.merges[%zu]: expected \"left right\" (one space) or "
                           "[\"left\", \"right\"]", ld->file, i);
        }
        XGROW(raw, cap, ln + rn + 1);
        int32_t li = spelling_id(b, l, ln, raw), ri = spelling_id(b, r, rn, raw), mi = -1;
        if (li < 0 || ri < 0) {
            const char *bad = li < 0 ? l : r;
            int badn = (int)(li < 0 ? ln : rn);
            free(raw);
            return LD_FAIL(ld, "%s: model.merges[%zu] (\"%.*s\" \"%.*s\"): \"%.*s\" is not a token of "
                           "model.vocab", ld->file, i, (int)(ln > 40 ? 40 : ln), l, (int)(rn > 40 ? 40 : rn),
                           r, badn > 40 ? 40 : badn, bad);
        }
        const struct bpe_tok *lt = &b->toks[li], *rt = &b->toks[ri];
        memcpy(raw, b->pool + lt->off, lt->len);
        memcpy(raw + lt->len, b->pool + rt->off, rt->len);
        mi = bpe_vocab_find(b, raw, lt->len + rt->len);
        if (mi < 0) {
            free(raw);
            return LD_FAIL(ld, "%s: model.merges[%zu] (\"%.*s\" \"%.*s\"): the merged token is not in "
                           "model.vocab", ld->file, i, (int)(ln > 40 ? 40 : ln), l, (int)(rn > 40 ? 40 : rn), r);
        }
        bpe_merge_add(b, li, ri, (int32_t)i, mi);
    }
    free(raw);
    return 0;
}

/* The BPE options: only what byte-level GPT-2-style models use. */
static int model_options(struct ld *ld, json_t *model)
{
    json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v))
        return LD_FAIL(ld, "%s: model.dropout: not supported (expected null)", ld->file);
    int fallback;
    if (get_bool(ld, model, "model", "byte_fallback", 0, &fallback)) return -1;
    if (fallback) return LD_FAIL(ld, "%s: model.byte_fallback: true is not supported", ld->file);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return LD_FAIL(ld, "%s: model.%s: not supported (expected null or \"\")", ld->file, affixes[i]);
    }
    return get_bool(ld, model, "model", "ignore_merges", 0, &ld->b->ignore_merges);
}

/* ---- added tokens ---- */

static int added_pass1(struct ld *ld, json_t *added, int32_t *max_id)
{
    if (!added || json_is_null(added)) return 0;
    if (!json_is_array(added)) return LD_FAIL(ld, "%s: added_tokens: expected an array", ld->file);
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *e = json_array_get(added, i);
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu].id", i);
        int32_t id;
        if (!json_is_object(e)) return LD_FAIL(ld, "%s: added_tokens[%zu]: expected an object", ld->file, i);
        if (get_id(ld, json_object_get(e, "id"), where, &id)) return -1;
        json_t *c = json_object_get(e, "content");
        if (!json_is_string(c) || json_string_length(c) == 0 || strlen(json_string_value(c)) != json_string_length(c))
            return LD_FAIL(ld, "%s: added_tokens[%zu].content: expected a non-empty string", ld->file, i);
        if (id > *max_id) *max_id = id;
    }
    return 0;
}

static int added_pass2(struct ld *ld, json_t *added)
{
    struct bpe *b = ld->b;
    size_t n = added && json_is_array(added) ? json_array_size(added) : 0;
    b->added = xcalloc(n ? n : 1, sizeof *b->added);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(added, i);
        struct bpe_added *a = &b->added[b->n_added];
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        a->id = (int32_t)json_integer_value(json_object_get(e, "id"));
        if (get_bool(ld, e, where, "special", 0, &a->special) || get_bool(ld, e, where, "lstrip", 0, &a->lstrip) ||
            get_bool(ld, e, where, "rstrip", 0, &a->rstrip) ||
            get_bool(ld, e, where, "single_word", 0, &a->single_word))
            return -1;
        struct bpe_tok *t = &b->toks[a->id];
        if (t->added >= 0)
            return LD_FAIL(ld, "%s: %s: id %d is already added_tokens' \"%s\"", ld->file, where, (int)a->id,
                           b->added[t->added].content);
        a->content = xstrdup(json_string_value(json_object_get(e, "content")));
        a->len = strlen(a->content);
        t->added = b->n_added++;
        t->flags |= BPE_TOK_ADDED | (a->special ? BPE_TOK_SPECIAL : 0);
    }
    b->cache_mode_free = 1;
    for (int i = 0; i < b->n_added; i++)
        if (b->toks[b->added[i].id].flags & BPE_TOK_VOCAB) b->cache_mode_free = 0;
    bpe_trie_build(b);
    return 0;
}

/* ---- normalizer, pre-tokenizer, decoder ---- */

static int load_normalizer(struct ld *ld, json_t *n)
{
    if (!n || json_is_null(n)) return 0;
    const char *t = get_type(ld, n, "normalizer");
    if (!t) return -1;
    if (strcmp(t, "NFC") != 0)
        return LD_FAIL(ld, "%s: normalizer.type \"%s\": not supported (null or NFC)", ld->file, t);
    ld->b->nfc = 1;
    ld->b->nfc_unstable = bpe_nfc_table();
    return 0;
}

static int add_regex(struct ld *ld, const char *pattern, const char *where)
{
    struct bpe *b = ld->b;
    if (b->n_re == BPE_MAX_REGEX)
        return LD_FAIL(ld, "%s: %s: more than %d split steps", ld->file, where, BPE_MAX_REGEX);
    char msg[300];
    b->re[b->n_re] = bpe_regex_compile(pattern, msg, sizeof msg);
    if (!b->re[b->n_re]) return LD_FAIL(ld, "%s: %s: bad regex: %s", ld->file, where, msg);
    b->n_re++;
    return 0;
}

static int load_split(struct ld *ld, json_t *s, const char *where)
{
    json_t *pat = json_object_get(s, "pattern");
    const char *re = json_is_object(pat) ? json_string_value(json_object_get(pat, "Regex")) : NULL;
    if (!re) {
        if (json_is_object(pat) && json_object_get(pat, "String"))
            return LD_FAIL(ld, "%s: %s.pattern.String: not supported (a \"Regex\" pattern)", ld->file, where);
        return LD_FAIL(ld, "%s: %s.pattern: expected {\"Regex\": \"...\"}", ld->file, where);
    }
    const char *beh = json_string_value(json_object_get(s, "behavior"));
    if (!beh || strcmp(beh, "Isolated") != 0)
        return LD_FAIL(ld, "%s: %s.behavior \"%s\": not supported (Isolated)", ld->file, where, beh ? beh : "?");
    int invert;
    if (get_bool(ld, s, where, "invert", 0, &invert)) return -1;
    if (invert) return LD_FAIL(ld, "%s: %s.invert: true is not supported", ld->file, where);
    char w[128];
    snprintf(w, sizeof w, "%s.pattern.Regex", where);
    return add_regex(ld, re, w);
}

static int load_bytelevel(struct ld *ld, json_t *s, const char *where)
{
    int prefix, use_regex;
    if (get_bool(ld, s, where, "add_prefix_space", 1, &prefix) ||
        get_bool(ld, s, where, "use_regex", 1, &use_regex))
        return -1;
    if (prefix) return LD_FAIL(ld, "%s: %s.add_prefix_space: true is not supported", ld->file, where);
    if (!use_regex) return 0;
    char w[128];
    snprintf(w, sizeof w, "%s (use_regex)", where);
    return add_regex(ld, bpe_gpt2_pattern, w);
}

static int load_pretokenizer(struct ld *ld, json_t *p)
{
    if (!p || json_is_null(p))
        return LD_FAIL(ld, "%s: pre_tokenizer: null is not supported (byte-level BPE needs ByteLevel)", ld->file);
    const char *t = get_type(ld, p, "pre_tokenizer");
    if (!t) return -1;
    if (strcmp(t, "ByteLevel") == 0) return load_bytelevel(ld, p, "pre_tokenizer");
    if (strcmp(t, "Sequence") != 0)
        return LD_FAIL(ld, "%s: pre_tokenizer.type \"%s\": not supported (ByteLevel, or a Sequence of "
                       "Split and ByteLevel)", ld->file, t);
    json_t *list = json_object_get(p, "pretokenizers");
    size_t n = json_is_array(list) ? json_array_size(list) : 0;
    if (n == 0) return LD_FAIL(ld, "%s: pre_tokenizer.pretokenizers: expected a non-empty array", ld->file);
    for (size_t i = 0; i < n; i++) {
        char where[64];
        snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        json_t *e = json_array_get(list, i);
        const char *et = get_type(ld, e, where);
        if (!et) return -1;
        int last = i + 1 == n;
        if (strcmp(et, "Split") == 0 && !last) {
            if (load_split(ld, e, where)) return -1;
        } else if (strcmp(et, "ByteLevel") == 0 && last) {
            if (load_bytelevel(ld, e, where)) return -1;
        } else {
            return LD_FAIL(ld, "%s: %s.type \"%s\": not supported here (Split steps, then one ByteLevel "
                           "last)", ld->file, where, et);
        }
    }
    return 0;
}

static int load_decoder(struct ld *ld, json_t *d)
{
    if (!d || json_is_null(d)) return 0;
    const char *t = get_type(ld, d, "decoder");
    if (!t) return -1;
    if (strcmp(t, "ByteLevel") != 0)
        return LD_FAIL(ld, "%s: decoder.type \"%s\": not supported (ByteLevel or null)", ld->file, t);
    return 0;
}

/* ---- the files ---- */

static int load_tokenizer(struct ld *ld, json_t *root)
{
    struct bpe *b = ld->b;
    if (!json_is_object(root)) return LD_FAIL(ld, "%s: expected a JSON object at the top", ld->file);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return LD_FAIL(ld, "%s: model: missing or not an object", ld->file);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type) return LD_FAIL(ld, "%s: model.type: missing (expected \"BPE\")", ld->file);
    if (strcmp(type, "BPE") != 0)
        return LD_FAIL(ld, "%s: model.type \"%s\": not supported (only \"BPE\")", ld->file, type);
    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) return LD_FAIL(ld, "%s: model.vocab: missing or not an object", ld->file);
    int32_t max_id = -1;
    size_t bytes = 0;
    if (vocab_pass1(ld, vocab, &max_id, &bytes) || added_pass1(ld, added, &max_id)) return -1;
    bpe_toks_init(b, max_id + 1, bytes);
    if (vocab_pass2(ld, vocab) || load_merges(ld, json_object_get(model, "merges")) ||
        model_options(ld, model) || added_pass2(ld, added))
        return -1;
    if (load_normalizer(ld, json_object_get(root, "normalizer")) ||
        load_pretokenizer(ld, json_object_get(root, "pre_tokenizer")) ||
        load_decoder(ld, json_object_get(root, "decoder")))
        return -1;
    bpe_cache_init(b);
    return 0;
}

/* bos_token / eos_token / pad_token of tokenizer_config.json: a string, null, or an
 * object with "content". */
static int config_token(struct ld *ld, json_t *cfg, const char *key, int32_t *out)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) return 0;
    const char *name = json_is_string(v)   ? json_string_value(v)
                       : json_is_object(v) ? json_string_value(json_object_get(v, "content"))
                                           : NULL;
    if (!name)
        return LD_FAIL(ld, "%s: %s: expected a string, null or an object with \"content\"", ld->file, key);
    *out = bpe_token_id(ld->b, name);
    if (*out < 0)
        return LD_FAIL(ld, "%s: %s \"%.60s\": no such token in %s", ld->file, key, name, ld->b->file);
    return 0;
}

/* flags: JSON_DECODE_INT_AS_REAL for tokenizer_config.json, whose integers (Llama 3's
 * model_max_length is 1e30) need not fit 64 bits and are not read. */
static json_t *read_json(struct ld *ld, size_t flags)
{
    json_error_t je;
    json_t *root = json_load_file(ld->file, flags, &je);
    if (!root) {
        if (je.line <= 0) LD_FAIL(ld, "%s: %s", ld->file, je.text);
        else LD_FAIL(ld, "%s: not valid JSON: line %d, column %d: %s", ld->file, je.line, je.column, je.text);
    }
    return root;
}

static char *path_join(const char *dir, size_t dlen, const char *name)
{
    size_t n = strlen(name);
    char *p = xmalloc(dlen + 1 + n + 1);
    memcpy(p, dir, dlen);
    p[dlen] = '/';
    memcpy(p + dlen + 1, name, n + 1);
    return p;
}

struct bpe *bpe_load(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        bpe_err(err, errlen, "%s: %s (expected a tokenizer.json or a model directory)", path, strerror(errno));
        return NULL;
    }
    char *file, *cfg;
    if (S_ISDIR(st.st_mode)) {
        file = path_join(path, strlen(path), "tokenizer.json");
        cfg = path_join(path, strlen(path), "tokenizer_config.json");
    } else {
        const char *slash = strrchr(path, '/');
        file = xstrdup(path);
        cfg = slash ? path_join(path, (size_t)(slash - path), "tokenizer_config.json")
                    : xstrdup("tokenizer_config.json");
    }
    struct bpe *b = xcalloc(1, sizeof *b);
    b->file = file;
    b->bos = b->eos = b->pad = -1;
    struct ld ld = {.b = b, .file = file, .err = err, .errlen = errlen};
    json_t *root = read_json(&ld, 0), *croot = NULL;
    if (!root || load_tokenizer(&ld, root)) goto fail;
    json_decref(root);
    root = NULL;
    if (stat(cfg, &st) == 0) {
        ld.file = cfg;
        if (!(croot = read_json(&ld, JSON_DECODE_INT_AS_REAL))) goto fail;
        if (!json_is_object(croot)) {
            LD_FAIL(&ld, "%s: expected a JSON object at the top", cfg);
            goto fail;
        }
        if (config_token(&ld, croot, "bos_token", &b->bos) || config_token(&ld, croot, "eos_token", &b->eos) ||
            config_token(&ld, croot, "pad_token", &b->pad))
            goto fail;
        json_decref(croot);
    }
    free(cfg);
    return b;
fail:
    json_decref(root);
    json_decref(croot);
    free(cfg);
    bpe_free(b);
    return NULL;
}
