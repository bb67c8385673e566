/*
 * The search environment's knowledge base (src/env/search_internal.h): a seeded,
 * synthetic world of people, cities, countries, companies and universities, with one
 * short passage per fact.
 *
 * For N people (KB_MIN_PEOPLE..KB_MAX_PEOPLE):
 *   cities       max(12, N/10)  "Kestrel Bay is a city in the country of Maronia."
 *   countries    max(4, cities/10)  "The capital of Maronia is Kestrel Bay."
 *   companies    max(8, N/10)   "Halvic Systems is headquartered in Kestrel Bay."
 *   universities max(4, N/20)   "University of Tessin is located in Kestrel Bay."
 *   people       N, four facts each: "Alda Voren was born in Kestrel Bay." / "... lives
 *                in ..." / "... works for Halvic Systems." / "... studied at ..."
 * so 4N + N/10 + N/100 + N/10 + N/20 passages (8520 for N = 2000).
 *
 * Names are made of generated syllables. Every name word ("Kestrel", "Voren") is a
 * root drawn once, distinct from every other root and from the passages' template
 * words; people combine a first and a last name from shared pools (so a query must
 * use both), other names one root, for most with a type word ("Bay", "Systems"). All
 * names are therefore distinct, also in lower case. Every country's capital is one of its
 * cities. The base is a pure function of (seed, N): one random stream, drawn in a
 * fixed order.
 */
#include "env/search_internal.h"

#include "libra/log.h"
#include "libra/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_KB 0x5ea4c0b1u
#define WORD_MAX 32  /* bytes of one generated word at most */
#define NAME_MAX 96  /* bytes of one entity name at most */

const struct kb_rel_info kb_rels[KB_N_RELS] = {
    [REL_BORN_IN] = {"", " was born in ", ".", "born", KB_PERSON, KB_CITY},
    [REL_LIVES_IN] = {"", " lives in ", ".", "lives", KB_PERSON, KB_CITY},
    [REL_WORKS_FOR] = {"", " works for ", ".", "works", KB_PERSON, KB_COMPANY},
    [REL_STUDIED_AT] = {"", " studied at ", ".", "studied", KB_PERSON, KB_UNIVERSITY},
    [REL_HQ_IN] = {"", " is headquartered in ", ".", "headquartered", KB_COMPANY, KB_CITY},
    [REL_UNIV_IN] = {"", " is located in ", ".", "located", KB_UNIVERSITY, KB_CITY},
    [REL_CITY_IN] = {"", " is a city in the country of ", ".", "country", KB_CITY, KB_COUNTRY},
    [REL_CAPITAL] = {"The capital of ", " is ", ".", "capital", KB_COUNTRY, KB_CITY},
};

/* The facts each entity type is the subject of, in passage order. */
static const int type_rels[KB_N_TYPES][4] = {
    [KB_PERSON] = {REL_BORN_IN, REL_LIVES_IN, REL_WORKS_FOR, REL_STUDIED_AT},
    [KB_CITY] = {REL_CITY_IN, -1, -1, -1},
    [KB_COUNTRY] = {REL_CAPITAL, -1, -1, -1},
    [KB_COMPANY] = {REL_HQ_IN, -1, -1, -1},
    [KB_UNIVERSITY] = {REL_UNIV_IN, -1, -1, -1},
};

/* Syllables: onset vowel coda; repeated entries weight the common choices. */
static const char *const onsets[] = {"",  "",  "b", "d", "f", "g", "h", "k", "l", "m", "n",
                                     "p", "r", "s", "t", "v", "z", "br", "dr", "st", "th", "tr"};
static const char *const vowels[] = {"a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou"};
static const char *const codas[] = {"", "", "", "", "", "n", "r", "l", "s", "th", "nd", "m"};
static const char *const city_suffixes[] = {"Bay",    "Falls", "Harbor",   "Hill",   "Ford",
                                            "Springs", "Port", "Crossing", "Valley", "Point"};
static const char *const country_suffixes[] = {"ia", "land", "ora", "istan", "ania", "mark"};
static const char *const company_suffixes[] = {"Systems", "Industries", "Labs",     "Foods",
                                               "Motors",  "Logistics",  "Textiles", "Media",
                                               "Energy",  "Pharma",     "Holdings", "Robotics"};
/* Words of the templates and type words: no generated root may equal one. */
static const char *const reserved[] = {
    "was", "born", "in", "lives", "works", "for", "studied", "at", "is", "headquartered",
    "located", "a", "an", "the", "city", "country", "of", "capital", "university",
    "institute", "technology", "college", "and", "where", "which", "what", "who"};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *pick(struct rng *r, const char *const *list, int n)
{
    return list[rng_below(r, (uint64_t)n)];
}

/* A capitalised word of n_syl syllables, 4..WORD_MAX-1 letters, or "" if too long. */
static void draw_word(struct rng *r, int n_syl, char *out)
{
    out[0] = '\0';
    size_t len = 0;
    for (int s = 0; s < n_syl; s++) {
        const char *parts[3] = {pick(r, onsets, N_OF(onsets)), pick(r, vowels, N_OF(vowels)),
                                pick(r, codas, N_OF(codas))};
        if (s > 0) parts[0] = pick(r, onsets + 2, N_OF(onsets) - 2); /* no vowel clusters */
        for (int k = 0; k < 3; k++) {
            size_t n = strlen(parts[k]);
            if (len + n >= WORD_MAX - 8) { /* room left for a country suffix */
                out[0] = '\0';
                return;
            }
            memcpy(out + len, parts[k], n);
            len += n;
        }
    }
    out[len] = '\0';
    if (len < 4) out[0] = '\0';
    if (out[0] >= 'a' && out[0] <= 'z') out[0] = (char)(out[0] - 'a' + 'A');
}

/* A root never drawn before (recorded, lower-cased, in words), with suffix appended to
 * the word itself (countries) or "". Tries longer words when short ones run out. */
static void draw_root(struct rng *r, struct strtab *words, const char *suffix, char *out)
{
    char lower[WORD_MAX];
    for (int attempt = 0;; attempt++) {
        int n_syl = 2 + (rng_below(r, 4) == 0) + attempt / 64;
        if (n_syl > 8) FATAL("search knowledge base: ran out of distinct name words");
        draw_word(r, n_syl, out);
        if (!out[0]) continue;
        strcat(out, suffix);
        size_t len = strlen(out);
        for (size_t i = 0; i <= len; i++)
            lower[i] = (char)(out[i] >= 'A' && out[i] <= 'Z' ? out[i] - 'A' + 'a' : out[i]);
        int added;
        strtab_intern(words, lower, len, &added);
        if (added) return;
    }
}

static void reserve_lower(struct strtab *words, const char *const *list, int n)
{
    char lower[WORD_MAX];
    for (int i = 0; i < n; i++) {
        size_t len = strlen(list[i]);
        for (size_t k = 0; k <= len; k++)
            lower[k] = (char)(list[i][k] >= 'A' && list[i][k] <= 'Z' ? list[i][k] - 'A' + 'a'
                                                                    : list[i][k]);
        strtab_intern(words, lower, len, NULL);
    }
}

static void reserve_words(struct strtab *words)
{
    reserve_lower(words, reserved, N_OF(reserved));
    reserve_lower(words, city_suffixes, N_OF(city_suffixes));
    reserve_lower(words, company_suffixes, N_OF(company_suffixes));
}

static int32_t add_name(struct kb *kb, const char *name)
{
    int added;
    int32_t id = strtab_intern(&kb->names, name, strlen(name), &added);
    if (!added || id != kb->n_entities) FATAL("search knowledge base: duplicate name '%s'", name);
    return kb->n_entities++;
}

static void name_entities(struct kb *kb, struct rng *r, int n_people)
{
    struct strtab words;
    strtab_init(&words);
    reserve_words(&words);
    char w[WORD_MAX], name[NAME_MAX];

    /* People: distinct (first, last) pairs from pools of N/6 and N/3 roots. */
    int n_first = n_people / 6 > 8 ? n_people / 6 : 8;
    int n_last = n_people / 3 > 12 ? n_people / 3 : 12;
    char(*first)[WORD_MAX] = xmalloc((size_t)n_first * sizeof *first);
    char(*last)[WORD_MAX] = xmalloc((size_t)n_last * sizeof *last);
    for (int i = 0; i < n_first; i++) draw_root(r, &words, "", first[i]);
    for (int i = 0; i < n_last; i++) draw_root(r, &words, "", last[i]);
    kb->first[KB_PERSON] = kb->n_entities;
    for (int p = 0; p < n_people; p++) {
        for (;;) {
            snprintf(name, sizeof name, "%s %s", first[rng_below(r, (uint64_t)n_first)],
                     last[rng_below(r, (uint64_t)n_last)]);
            if (strtab_find(&kb->names, name, strlen(name)) < 0) break;
        }
        add_name(kb, name);
    }
    kb->count[KB_PERSON] = n_people;
    free(first);
    free(last);

    int counts[KB_N_TYPES];
    counts[KB_CITY] = n_people / 10 > 12 ? n_people / 10 : 12;
    counts[KB_COUNTRY] = counts[KB_CITY] / 10 > 4 ? counts[KB_CITY] / 10 : 4;
    counts[KB_COMPANY] = n_people / 10 > 8 ? n_people / 10 : 8;
    counts[KB_UNIVERSITY] = n_people / 20 > 4 ? n_people / 20 : 4;
    for (int t = KB_CITY; t < KB_N_TYPES; t++) {
        kb->first[t] = kb->n_entities;
        kb->count[t] = counts[t];
        for (int i = 0; i < counts[t]; i++) {
            switch (t) {
            case KB_CITY:
                draw_root(r, &words, "", w);
                if (rng_below(r, 2))
                    snprintf(name, sizeof name, "%s %s", w,
                             pick(r, city_suffixes, N_OF(city_suffixes)));
                else
                    snprintf(name, sizeof name, "%s", w);
                break;
            case KB_COUNTRY:
                draw_root(r, &words, pick(r, country_suffixes, N_OF(country_suffixes)), w);
                snprintf(name, sizeof name, "%s", w);
                break;
            case KB_COMPANY:
                draw_root(r, &words, "", w);
                snprintf(name, sizeof name, "%s %s", w,
                         pick(r, company_suffixes, N_OF(company_suffixes)));
                break;
            default: { /* KB_UNIVERSITY */
                static const char *const forms[] = {"University of %s", "%s University",
                                                    "%s Institute", "%s College"};
                draw_root(r, &words, "", w);
                snprintf(name, sizeof name, forms[rng_below(r, 4)], w);
                break;
            }
            }
            add_name(kb, name);
        }
    }
    strtab_free(&words);
}

/* The object of relation rel for subject x (the world's structure). */
static int32_t draw_object(const struct kb *kb, struct rng *r, int rel, int32_t x)
{
    const int32_t *f = kb->first, *c = kb->count;
    switch (rel) {
    case REL_CITY_IN: { /* the first cities are the capitals, one per country */
        int32_t i = x - f[KB_CITY];
        if (i >= c[KB_COUNTRY]) i = (int32_t)rng_below(r, (uint64_t)c[KB_COUNTRY]);
        return f[KB_COUNTRY] + i;
    }
    case REL_CAPITAL: return f[KB_CITY] + (x - f[KB_COUNTRY]);
    default: {
        int t = kb_rels[rel].obj_type;
        return f[t] + (int32_t)rng_below(r, (uint64_t)c[t]);
    }
    }
}

static void append(char **text, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    XGROW(*text, *cap, *len + n + 1);
    memcpy(*text + *len, s, n + 1);
    *len += n;
}

void kb_build(struct kb *kb, uint64_t seed, int n_people)
{
    if (n_people < KB_MIN_PEOPLE || n_people > KB_MAX_PEOPLE)
        FATAL("kb_build: %d people (must be %d..%d)", n_people, KB_MIN_PEOPLE, KB_MAX_PEOPLE);
    memset(kb, 0, sizeof *kb);
    strtab_init(&kb->names);
    struct rng r;
    rng_init(&r, seed, KEY_KB, (uint64_t)n_people, 0);
    name_entities(kb, &r, n_people);

    size_t cap_facts = 0, len_text = 0, cap_text = 0, cap_off = 0;
    kb->fact_first = xmalloc(((size_t)kb->n_entities + 1) * sizeof *kb->fact_first);
    XGROW(kb->off, cap_off, 1);
    kb->off[0] = 0;
    for (int32_t x = 0; x < kb->n_entities; x++) {
        kb->fact_first[x] = kb->n_facts;
        const int *rels = type_rels[kb_type_of(kb, x)];
        for (int j = 0; j < 4 && rels[j] >= 0; j++) {
            const struct kb_rel_info *ri = &kb_rels[rels[j]];
            int32_t y = draw_object(kb, &r, rels[j], x);
            XGROW(kb->facts, cap_facts, (size_t)kb->n_facts + 1);
            kb->facts[kb->n_facts] = (struct kb_fact){x, y, rels[j]};
            append(&kb->text, &len_text, &cap_text, ri->pre);
            append(&kb->text, &len_text, &cap_text, kb_name(kb, x));
            append(&kb->text, &len_text, &cap_text, ri->mid);
            append(&kb->text, &len_text, &cap_text, kb_name(kb, y));
            append(&kb->text, &len_text, &cap_text, ri->post);
            len_text++; /* keep the NUL */
            kb->n_facts++;
            XGROW(kb->off, cap_off, (size_t)kb->n_facts + 1);
            kb->off[kb->n_facts] = (int64_t)len_text;
        }
    }
    kb->fact_first[kb->n_entities] = kb->n_facts;
}

void kb_free(struct kb *kb)
{
    if (!kb) return;
    strtab_free(&kb->names);
    free(kb->facts);
    free(kb->fact_first);
    free(kb->text);
    free(kb->off);
    memset(kb, 0, sizeof *kb);
}

const char *kb_name(const struct kb *kb, int32_t ent)
{
    return strtab_str(&kb->names, ent);
}

int kb_type_of(const struct kb *kb, int32_t ent)
{
    for (int t = 0; t < KB_N_TYPES; t++)
        if (ent >= kb->first[t] && ent < kb->first[t] + kb->count[t]) return t;
    return -1;
}

int32_t kb_fact_of(const struct kb *kb, int32_t subj, int rel)
{
    if (subj < 0 || subj >= kb->n_entities) return -1;
    for (int32_t f = kb->fact_first[subj]; f < kb->fact_first[subj + 1]; f++)
        if (kb->facts[f].rel == rel) return f;
    return -1;
}

const char *kb_passage(const struct kb *kb, int32_t fact)
{
    return kb->text + kb->off[fact];
}
