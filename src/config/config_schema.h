/*
 * The configuration schema, private to src/config/: one row per key (section, key,
 * type, where the value lives, default, range or allowed values, units, meaning).
 * The loader (config.c), the printer and the reference generator (config_print.c)
 * all walk cfg_schema[]; no other place describes a key.
 *
 * Rows flagged CFG_SPEC are the keys of one plan (n_train, n_hybrid, rollout_tp):
 * their offset is into struct plan_spec, and they are read both at plan level (the
 * static plan, cfg->plan.fixed) and inside every plan.schedule group.
 *
 * A row with `when` set is used only when the enum key `when` of the same section
 * holds one of `when_in` (sched.scout_timeout_s: when "type", when_in "la_mlfq").
 * Setting such a key in a file where it is not used is an error, and the printer
 * leaves it out, so every key given is honoured or rejected, never ignored.
 *
 * The keys inside one sched.buckets group live in their own table,
 * cfg_bucket_keys[], with offsets into struct sched_bucket_spec.
 */
#ifndef LIBRA_CONFIG_SCHEMA_H
#define LIBRA_CONFIG_SCHEMA_H

#include <stddef.h>

#include "libra/config.h"

enum cfg_type {
    CFG_INT,      /* int; min..max */
    CFG_INT64,    /* uint64_t holding a libconfig integer >= 0; min..max */
    CFG_FLOAT,    /* double; an integer literal is accepted; min..max */
    CFG_STRING,   /* char[size]; length min..max */
    CFG_NAME,     /* a CFG_STRING limited to [A-Za-z0-9_.-] (it goes into file names) */
    CFG_ENUM,     /* char[size]; one of allowed */
    CFG_PATH,     /* char[size]; an existing file, stored resolved (see config.c) */
    CFG_TP_LIST,  /* plan_spec.n_tp + rollout_tp[]; min..max entries, each in allowed */
    CFG_SCHEDULE, /* plan.schedule: a list of plan groups, read by dedicated code */
    CFG_BUCKETS,  /* sched.buckets: a list of bucket groups (cfg_bucket_keys[]); min..max */
};

#define CFG_SPEC 0x1u           /* offset is into struct plan_spec (see above) */
#define CFG_GROUP_REQUIRED 0x2u /* a CFG_SPEC key every plan.schedule group must give */
#define CFG_DIR_OK 0x4u         /* a CFG_PATH that may also name a directory */

struct cfg_key {
    const char *section;
    const char *key;
    enum cfg_type type;
    unsigned flags;
    size_t offset;     /* into struct libra_config, or struct plan_spec with CFG_SPEC */
    size_t size;       /* bytes of the field; strings: the buffer, NUL included */
    double def;        /* default of numeric keys */
    const char *def_s; /* default of the other keys, as written in a config file */
    double min, max;   /* numbers: value range; strings: length; lists: entries */
    const char *allowed; /* ENUM, TP_LIST entries: "a, b, c" (comma + space separated) */
    const char *units;   /* "" when the value has none */
    const char *doc;     /* one line */
    const char *when;    /* NULL, or the enum key of this section that decides use */
    const char *when_in; /* with when: the values it is used with ("a, b, c") */
};

struct cfg_section {
    const char *name;
    const char *doc;
};

/* Both tables end with a row whose first member is NULL; keys are grouped by
 * section, in the order of cfg_sections. */
extern const struct cfg_section cfg_sections[];
extern const struct cfg_key cfg_schema[];
/* The keys of one sched.buckets group (all required), ending with a NULL row. */
extern const struct cfg_key cfg_bucket_keys[];
/* The default sched.buckets. */
extern const struct sched_bucket_spec cfg_default_buckets[];
extern const int cfg_n_default_buckets;

/* The row of section.key, or NULL. */
const struct cfg_key *cfg_schema_find(const char *section, const char *key);
/* Short type name for messages and the reference ("int", "float", "path", ...). */
const char *cfg_type_name(enum cfg_type type);
/* Whether value is one of list ("a, b, c"). */
int cfg_list_has(const char *list, const char *value);
/* Whether value is one of k->allowed. */
int cfg_allowed_has(const struct cfg_key *k, const char *value);
/* The value of the enum key section.name in cfg ("" if there is no such row). */
const char *cfg_enum_value(const struct libra_config *cfg, const char *section,
                           const char *name);
/* Whether row k is used by cfg (its `when` condition holds, or it has none). */
int cfg_key_used(const struct cfg_key *k, const struct libra_config *cfg);
/* The values of list quoted, in words: "a"; "a" or "b"; "a", "b" or "c". */
void cfg_list_quoted(const char *list, char *buf, size_t n);
/* "[1, 2]" of the TP degrees of b. */
void cfg_bucket_tp_text(const struct sched_bucket_spec *b, char *buf, size_t n);
/* v in the shortest form that reads back exactly, always with '.' or an exponent
 * (so libconfig reads a float, not an int). */
void cfg_format_double(double v, char *buf, size_t n);
/* The allowed range / values of k in words ("1 .. 1024", "one of emu, cpu, cuda"). */
void cfg_range_text(const struct cfg_key *k, char *buf, size_t n);
/* The default of k as written in a config file. */
void cfg_default_text(const struct cfg_key *k, char *buf, size_t n);

#endif
