/*
 * Private interface of the search environment, shared by src/env/search.c (the
 * environment), src/env/search_kb.c (the generated knowledge base) and src/env/bm25.c
 * (the string table and the BM25 index), and read by tests/test_env_search.c.
 *
 * Word tokens (index and queries alike): maximal runs of ASCII letters and digits,
 * lower-cased; every other byte (punctuation, spaces, NUL, bytes >= 0x80) separates.
 */
#ifndef LIBRA_SEARCH_INTERNAL_H
#define LIBRA_SEARCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/env.h"

/* ---- string table (bm25.c): byte strings interned with dense ids 0, 1, 2, ... ---- */

struct strtab {
    char *bytes;        /* the strings back to back, each NUL-terminated */
    size_t n_bytes, cap_bytes;
    int64_t *off;       /* (n + 1) offsets into bytes: string i is bytes + off[i] */
    size_t cap_off;
    int32_t n;          /* strings held */
    int32_t *slots;     /* (n_slots) open addressing: id + 1, 0 = empty; power of two */
    size_t n_slots;
};

void strtab_init(struct strtab *t);
void strtab_free(struct strtab *t);
/* The id of the len bytes at s, or -1 if absent. */
int32_t strtab_find(const struct strtab *t, const char *s, size_t len);
/* The id of the len bytes at s, adding them if absent (*added = 1 then, else 0). */
int32_t strtab_intern(struct strtab *t, const char *s, size_t len, int *added);
/* The NUL-terminated string of id (0 <= id < n). */
const char *strtab_str(const struct strtab *t, int32_t id);

/* ---- BM25 index (bm25.c) ---- */

#define BM25_K1 1.2
#define BM25_B 0.75
/* Postings scored between two looks at the deadline. */
#define BM25_DEADLINE_EVERY 2048

/* Position of the next word token in s[*pos .. len): its start and length, lower case
 * not applied. Returns 0 (and advances *pos past it) or -1 when there is none. */
int bm25_next_word(const char *s, size_t len, size_t *pos, size_t *start, size_t *wlen);

struct bm25 {
    int32_t n_docs;
    double avgdl;        /* mean word tokens per document */
    double *doc_norm;    /* (n_docs) k1 * (1 - b + b * len / avgdl) */
    struct strtab terms; /* term id -> lower-case word */
    double *idf;         /* (n_terms) ln(1 + (N - df + 0.5) / (df + 0.5)), always > 0 */
    int64_t *post_off;   /* (n_terms + 1) postings of term t: [post_off[t], post_off[t+1]) */
    int32_t *post_doc;   /* (n_postings) document ids, ascending within a term */
    int32_t *post_tf;    /* (n_postings) occurrences of the term in that document */
};

struct bm25_hit {
    int32_t doc;
    double score;
};

enum bm25_status { BM25_OK = 0, BM25_NO_TERMS, BM25_NO_MATCH, BM25_TIMEOUT };

/* Indexes n_docs documents: document i is text[off[i] .. off[i+1]) (any bytes). */
void bm25_build(struct bm25 *ix, const char *text, const int64_t *off, int32_t n_docs);
void bm25_free(struct bm25 *ix);
/* The best min(k, matches) documents for the query's distinct words (each counted
 * once), best first; equal scores in ascending document id. hits holds k entries.
 * deadline: wall_time() seconds, 0 = none; checked before scoring and every
 * BM25_DEADLINE_EVERY postings. Returns enum bm25_status (*n_hits = 0 unless OK).
 * Thread-safe on a built index (scratch is allocated per call). */
int bm25_query(const struct bm25 *ix, const char *q, size_t len, int k, double deadline,
               struct bm25_hit *hits, int *n_hits);

/* ---- knowledge base (search_kb.c) ---- */

enum kb_type { KB_PERSON = 0, KB_CITY, KB_COUNTRY, KB_COMPANY, KB_UNIVERSITY, KB_N_TYPES };

enum kb_rel {
    REL_BORN_IN = 0, /* person -> city */
    REL_LIVES_IN,    /* person -> city */
    REL_WORKS_FOR,   /* person -> company */
    REL_STUDIED_AT,  /* person -> university */
    REL_HQ_IN,       /* company -> city */
    REL_UNIV_IN,     /* university -> city */
    REL_CITY_IN,     /* city -> country */
    REL_CAPITAL,     /* country -> city */
    KB_N_RELS
};

/* A relation's passage is pre SUBJECT mid OBJECT post; keyword is a word of mid (or
 * pre) that no other relation's passages contain, what a good query adds to a name. */
struct kb_rel_info {
    const char *pre, *mid, *post;
    const char *keyword;
    int subj_type, obj_type; /* enum kb_type */
};
extern const struct kb_rel_info kb_rels[KB_N_RELS];

struct kb_fact {
    int32_t subj, obj; /* entity ids */
    int32_t rel;       /* enum kb_rel */
};

/* Entities have ids 0 .. n_entities-1, grouped by type; fact i is passage i. */
struct kb {
    int32_t n_entities;
    int32_t first[KB_N_TYPES], count[KB_N_TYPES]; /* type t: ids [first, first + count) */
    struct strtab names;  /* entity id -> name (all distinct, also in lower case) */
    int32_t n_facts;
    struct kb_fact *facts; /* (n_facts) grouped by subject, in entity order */
    int32_t *fact_first;   /* (n_entities + 1) facts of entity x: [fact_first[x], ..[x+1]) */
    char *text;            /* passages back to back, each NUL-terminated */
    int64_t *off;          /* (n_facts + 1) passage i: text + off[i], off[i+1]-off[i]-1 bytes */
};

#define KB_MIN_PEOPLE 10 /* at least one held-out person (index 9) */
#define KB_MAX_PEOPLE 1000000

/* Generates the knowledge base of n_people people (KB_MIN_PEOPLE..KB_MAX_PEOPLE) from
 * seed: a pure function of (seed, n_people). */
void kb_build(struct kb *kb, uint64_t seed, int n_people);
void kb_free(struct kb *kb);
const char *kb_name(const struct kb *kb, int32_t ent);
int kb_type_of(const struct kb *kb, int32_t ent);
/* The fact (passage id) of relation rel with subject subj, or -1. */
int32_t kb_fact_of(const struct kb *kb, int32_t subj, int rel);
const char *kb_passage(const struct kb *kb, int32_t fact);

/* ---- the environment (search.c) ---- */

struct env_search {
    struct kb kb;
    struct bm25 index;
};

#define SEARCH_MAX_HOPS 3
#define SEARCH_TOP_K_MAX 64

/* A generated question: a chain of relations from a person. */
struct search_question {
    int32_t person;           /* entity id */
    int hops;                 /* 1 .. SEARCH_MAX_HOPS */
    int rel[SEARCH_MAX_HOPS]; /* enum kb_rel, hop by hop */
    int32_t chain[SEARCH_MAX_HOPS + 1]; /* entity ids: chain[0] = person, chain[hops] = answer */
    int template_id;
};

/* The question of (split, i) that env_search_problem renders. Persons with
 * (person index % 10 == 9) are asked about only in ENV_EVAL, the others only in
 * ENV_TRAIN. */
void search_question(const struct env *e, int split, int64_t i, struct search_question *q);

#endif
