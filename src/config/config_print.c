/*
 * Printing a configuration (include/libra/config.h): config_to_string writes the
 * resolved configuration as a libconfig file that config_load reads back to the
 * same struct; config_write_reference writes docs/config.md. Both walk
 * cfg_schema[]; only the plan schedule and sched.buckets are printed by hand. A
 * key the configuration does not use (its row's `when` condition fails) is printed
 * as a comment, since config_load would reject it.
 *
 * The reference must not depend on the machine (docs/config.md is committed and a
 * test compares it with fresh output), so it names no build paths.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_schema.h"
#include "libra/config.h"
#include "libra/log.h"

/* A growing string; p is NUL-terminated once anything was written. */
struct sbuf {
    char *p;
    size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    XGROW(b->p, b->cap, b->len + (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* s as a libconfig string literal: quotes, backslashes and control bytes escaped. */
static void quote(char *buf, size_t n, const char *s)
{
    size_t len = 0;
    if (n < 3) return;
    buf[len++] = '"';
    for (; *s && len + 6 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') len += (size_t)snprintf(buf + len, n - len, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) len += (size_t)snprintf(buf + len, n - len, "\\x%02x", ch);
        else buf[len++] = (char)ch;
    }
    buf[len++] = '"';
    buf[len] = '\0';
}

static void tp_text(const struct plan_spec *p, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < p->n_tp && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? ", " : "", p->rollout_tp[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

/* The value of row k in base (struct libra_config, or struct plan_spec for CFG_SPEC). */
static void value_text(const struct cfg_key *k, const void *base, char *buf, size_t n)
{
    const void *f = (const char *)base + k->offset;
    switch (k->type) {
    case CFG_INT: snprintf(buf, n, "%d", *(const int *)f); return;
    case CFG_INT64: {
        unsigned long long v = *(const uint64_t *)f;
        snprintf(buf, n, "%llu%s", v, v > INT32_MAX ? "L" : ""); /* L: libconfig 1.5 */
        return;
    }
    case CFG_FLOAT: cfg_format_double(*(const double *)f, buf, n); return;
    case CFG_STRING:
    case CFG_NAME:
    case CFG_ENUM:
    case CFG_PATH: quote(buf, n, (const char *)f); return;
    case CFG_TP_LIST: tp_text(base, buf, n); return;
    case CFG_SCHEDULE:
    case CFG_BUCKETS: snprintf(buf, n, "()"); return; /* printed by hand */
    }
    snprintf(buf, n, "?");
}

/* "  key = value;    # meaning [units]" */
static void print_key(struct sbuf *b, const struct cfg_key *k, const void *base)
{
    char val[4 * CFG_PATH_MAX + 8], line[4 * CFG_PATH_MAX + 80];
    value_text(k, base, val, sizeof val);
    snprintf(line, sizeof line, "%s = %s;", k->key, val);
    sb_printf(b, "  %-38s # %s", line, k->doc);
    if (k->units[0]) sb_printf(b, " [%s]", k->units);
    sb_printf(b, "\n");
}

static void print_schedule(struct sbuf *b, const struct cfg_key *k, const struct plan_config *plan)
{
    sb_printf(b, "  %-38s # %s\n", "schedule = (", k->doc);
    for (int i = 0; i < plan->n_schedule; i++) {
        const struct plan_spec *p = &plan->schedule[i];
        char tp[4 * CFG_MAX_TP + 8];
        tp_text(p, tp, sizeof tp);
        sb_printf(b, "    { n_train = %d; n_hybrid = %d; rollout_tp = %s; }%s  # %d workers\n",
                  p->n_train, p->n_hybrid, tp, i + 1 < plan->n_schedule ? "," : "",
                  plan_spec_workers(p));
    }
    sb_printf(b, "  );\n");
}

/* One bucket group as written in a config file. */
static void bucket_text(const struct sched_bucket_spec *bk, char *buf, size_t n)
{
    char name[80], tp[32];
    quote(name, sizeof name, bk->name);
    cfg_bucket_tp_text(bk, tp, sizeof tp);
    snprintf(buf, n, "{ name = %s; tp = %s; max_tokens = %d; }", name, tp, bk->max_tokens);
}

static void print_buckets(struct sbuf *b, const struct cfg_key *k, const struct sched_config *sc)
{
    sb_printf(b, "  %-38s # %s\n", "buckets = (", k->doc);
    for (int i = 0; i < sc->n_buckets; i++) {
        char text[160];
        bucket_text(&sc->buckets[i], text, sizeof text);
        sb_printf(b, "    %s%s  # bucket %d\n", text, i + 1 < sc->n_buckets ? "," : "", i);
    }
    sb_printf(b, "  );\n");
}

/* A key of any section but plan: as a comment when this configuration does not
 * use it. */
static void print_section_key(struct sbuf *b, const struct cfg_key *k,
                              const struct libra_config *cfg)
{
    if (!cfg_key_used(k, cfg))
        sb_printf(b, "  # %s: not used with %s = \"%s\"\n", k->key, k->when,
                  cfg_enum_value(cfg, k->section, k->when));
    else if (k->type == CFG_BUCKETS)
        print_buckets(b, k, &cfg->sched);
    else
        print_key(b, k, cfg);
}

/* The plan section: either the static plan keys or the schedule, never both
 * (config_load rejects the other set). */
static void print_plan_key(struct sbuf *b, const struct cfg_key *k, const struct libra_config *cfg)
{
    int sched = strcmp(cfg->plan.mode, "schedule") == 0;
    int fixed = strcmp(cfg->plan.mode, "static") == 0;
    if (k->type == CFG_SCHEDULE) {
        if (sched) print_schedule(b, k, &cfg->plan);
        else sb_printf(b, "  # schedule: not used with mode = \"%s\"\n", cfg->plan.mode);
    } else if (k->flags & CFG_SPEC) {
        if (fixed) print_key(b, k, &cfg->plan.fixed);
        else if (k->type == CFG_TP_LIST) /* once, at the last spec key */
            sb_printf(b, sched ? "  # n_train, n_hybrid, rollout_tp: per schedule group (mode = "
                                 "\"schedule\")\n"
                               : "  # n_train, n_hybrid, rollout_tp: chosen by the planner (mode "
                                 "= \"grp\")\n");
    } else {
        print_section_key(b, k, cfg);
    }
}

size_t config_identity(const struct libra_config *cfg, char *out, size_t cap)
{
    const struct env_config *e = &cfg->env;
    int n = snprintf(out, cap,
                     "run.seed = %llu\nmodel.checkpoint = %s\nmodel.profile = %s\n"
                     "model.tokenizer = %s\nmodel.chat_format = %s\nmodel.enable_thinking = %d\n"
                     "env.name = %s\nenv.prompts = %s\nenv.calc_min_steps = %d\n"
                     "env.calc_max_steps = %d\nenv.calc_distractors = %d\n"
                     "env.search_entities = %d\nenv.search_top_k = %d\nenv.search_max_hops = %d\n"
                     "rollout.n_samples = %d\ntrain.batch_size = %d\n",
                     (unsigned long long)cfg->run.seed, cfg->model.checkpoint, cfg->model.profile,
                     cfg->model.tokenizer, cfg->model.chat_format, cfg->model.enable_thinking,
                     e->name, e->prompts, e->calc_min_steps, e->calc_max_steps,
                     e->calc_distractors, e->search_entities, e->search_top_k,
                     e->search_max_hops, cfg->rollout.n_samples, cfg->train.batch_size);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* The value of key in an identity text into out ("" when absent). */
static void identity_value(const char *text, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    size_t kl = strlen(key);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > kl + 3 && strncmp(p, key, kl) == 0 && strncmp(p + kl, " = ", 3) == 0) {
            size_t vl = len - kl - 3 < cap - 1 ? len - kl - 3 : cap - 1;
            memcpy(out, p + kl + 3, vl);
            out[vl] = '\0';
            return;
        }
        p = nl ? nl + 1 : NULL;
    }
}

static int skipped(const char *key, const char *const *skip)
{
    for (int i = 0; skip && skip[i]; i++)
        if (strcmp(key, skip[i]) == 0) return 1;
    return 0;
}

int config_identity_diff(const char *checkpoint, const char *now, char *out, size_t cap)
{
    return config_diff(checkpoint, now, NULL, out, cap);
}

int config_diff(const char *checkpoint, const char *now, const char *const *skip, char *out,
                size_t cap)
{
    size_t used = 0;
    int n = 0;
    out[0] = '\0';
    for (const char *p = now; p && *p;) {
        const char *nl = strchr(p, '\n'), *eq = strstr(p, " = ");
        if (!eq || (nl && eq > nl)) break;
        char key[64], a[CFG_PATH_MAX], b[CFG_PATH_MAX];
        snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
        if (skipped(key, skip)) {
            p = nl ? nl + 1 : NULL;
            continue;
        }
        identity_value(checkpoint, key, a, sizeof a);
        identity_value(now, key, b, sizeof b);
        if (strcmp(a, b) != 0 && used < cap) {
            int w = snprintf(out + used, cap - used, "%s%s: \"%s\" (checkpoint) vs \"%s\" (now)",
                             n ? "; " : "", key, a, b);
            used += w > 0 ? (size_t)w : 0;
            n++;
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* A schedule or the bucket list on one line, as a config file would write it. */
static void list_text(const struct cfg_key *k, const struct libra_config *cfg, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "(");
    if (k->type == CFG_SCHEDULE) {
        for (int i = 0; i < cfg->plan.n_schedule && len < n; i++) {
            const struct plan_spec *p = &cfg->plan.schedule[i];
            char tp[4 * CFG_MAX_TP + 8];
            tp_text(p, tp, sizeof tp);
            len += (size_t)snprintf(buf + len, n - len, "%s{ n_train = %d; n_hybrid = %d; "
                                    "rollout_tp = %s; }", i ? ", " : "", p->n_train,
                                    p->n_hybrid, tp);
        }
    } else {
        for (int i = 0; i < cfg->sched.n_buckets && len < n; i++) {
            char text[160];
            bucket_text(&cfg->sched.buckets[i], text, sizeof text);
            len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", text);
        }
    }
    if (len < n) snprintf(buf + len, n - len, ")");
}

size_t config_flat(const struct libra_config *cfg, char *out, size_t cap)
{
    size_t used = 0;
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        char val[4 * CFG_PATH_MAX + 8];
        if (k->type == CFG_SCHEDULE || k->type == CFG_BUCKETS)
            list_text(k, cfg, val, sizeof val);
        else
            value_text(k, (k->flags & CFG_SPEC) ? (const void *)&cfg->plan.fixed : cfg, val,
                       sizeof val);
        int w = snprintf(out + used, cap - used, "%s.%s = %s\n", k->section, k->key, val);
        if (w < 0 || (size_t)w >= cap - used) return 0;
        used += (size_t)w;
    }
    return used;
}

char *config_to_string(const struct libra_config *cfg)
{
    struct sbuf b = {0};
    char src[4 * CFG_PATH_MAX + 8];
    quote(src, sizeof src, cfg->source[0] ? cfg->source : "(defaults)");
    sb_printf(&b, "# libra configuration: every key with the value in effect (defaults filled "
                  "in, paths resolved).\n# read from %s\n", src);
    for (const struct cfg_section *sec = cfg_sections; sec->name; sec++) {
        sb_printf(&b, "\n# %s\n%s = {\n", sec->doc, sec->name);
        for (const struct cfg_key *k = cfg_schema; k->section; k++) {
            if (strcmp(k->section, sec->name) != 0) continue;
            if (strcmp(sec->name, "plan") == 0) print_plan_key(&b, k, cfg);
            else print_section_key(&b, k, cfg);
        }
        sb_printf(&b, "};\n");
    }
    return b.p;
}

/* ---- the reference ------------------------------------------------------------ */

/* s with the characters Markdown tables and HTML care about escaped. */
static void md_cell(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", out);
        else if (*s == '<') fputs("&lt;", out);
        else if (*s == '>') fputs("&gt;", out);
        else fputc(*s, out);
    }
}

static void write_row(FILE *out, const struct cfg_key *k)
{
    char def[CFG_PATH_MAX + 8], range[160];
    cfg_default_text(k, def, sizeof def);
    cfg_range_text(k, range, sizeof range);
    fprintf(out, "| `%s.%s` | %s | `%s` | ", k->section, k->key, cfg_type_name(k->type), def);
    md_cell(out, range);
    fputs(" | ", out);
    md_cell(out, k->doc);
    if (k->units[0]) {
        fputs(" [", out);
        md_cell(out, k->units);
        fputs("]", out);
    }
    if (k->when) {
        char vals[160];
        cfg_list_quoted(k->when_in, vals, sizeof vals);
        fprintf(out, "; only with %s.%s = ", k->section, k->when);
        md_cell(out, vals);
    }
    fputs(" |\n", out);
}

static const char reference_intro[] =
    "# libra configuration reference\n"
    "\n"
    "<!-- Generated by config_write_reference (src/config/config_print.c) from the schema\n"
    "     table in src/config/config_schema.c: run `src/libra config-reference > docs/config.md`\n"
    "     after changing a key. tests/test_config checks that this file is up to date. -->\n"
    "\n"
    "A run is configured by one [libconfig](https://hyperrealm.github.io/libconfig/) file\n"
    "with the sections below (examples: `inputs/emu-*.cfg`). Every key is optional and\n"
    "takes its default when left out; an unknown section or key is an error, with the\n"
    "closest known name suggested. Errors read `file:line: section.key: what is wrong (hint)`.\n"
    "The program prints the resolved configuration (every key, defaults filled in) at\n"
    "start and stores it in the metrics file; that text loads again as a configuration.\n"
    "\n"
    "Types: an `int` key takes an integer (a float such as `20.0` is an error); a `float`\n"
    "key takes a float or an integer. libconfig 1.5 reads integers as 32-bit unless they\n"
    "carry an `L` suffix (`seed = 5000000000L;`); a wider literal without it is an error\n"
    "rather than a silently wrapped value. Strings are in double quotes; `name` strings\n"
    "go into file names; `path` keys name files (see *Paths*).\n";

static const char reference_plan[] =
    "\n"
    "## The plan and plan.schedule\n"
    "\n"
    "Rank 0 is the controller; ranks 1 .. N-1 are workers. A plan splits the workers into\n"
    "`n_train` training ranks, `n_hybrid` rollout-capable ranks lent to training as extra\n"
    "data-parallel replicas (the elastic hybrid pool), and one rollout instance per entry of\n"
    "`rollout_tp`, each entry the instance's tensor-parallel degree (1, 2, 4 or 8 ranks).\n"
    "A plan uses `n_train + n_hybrid + sum(rollout_tp)` workers, which must not exceed the\n"
    "job's world size minus one; this is checked at start, when the world size is known.\n"
    "\n"
    "With `mode = \"static\"` the plan-level keys `n_train`, `n_hybrid` and `rollout_tp` give\n"
    "the one plan used throughout, and `plan.schedule` is an error. With\n"
    "`mode = \"schedule\"`, `plan.schedule` is required: a non-empty list of groups, each with\n"
    "`n_train` (required), `n_hybrid` (default 0) and `rollout_tp` (required), with the\n"
    "ranges above and no other keys. Planning epoch `e` (every `plan.interval` steps) uses\n"
    "entry `e % n`. Plan-level `n_train`, `n_hybrid` or `rollout_tp` are then an error.\n"
    "\n"
    "```\n"
    "plan = {\n"
    "  mode = \"schedule\";\n"
    "  interval = 3;\n"
    "  schedule = (\n"
    "    { n_train = 4; rollout_tp = [2, 1, 1]; },\n"
    "    { n_train = 2; n_hybrid = 1; rollout_tp = [2, 2, 1]; }\n"
    "  );\n"
    "};\n"
    "```\n";

static const char reference_sched[] =
    "\n"
    "## The scheduler: sched.type and sched.buckets\n"
    "\n"
    "`sched.type` picks the turn router; `sched.balance` picks among the instances of one\n"
    "TP class; `sched.instance_queue` orders admission inside an instance. Several `sched`\n"
    "keys are used only with some values of these three (the *meaning* column above says\n"
    "which, e.g. `scout_timeout_s` only with `type = \"la_mlfq\"`): such a key set in the\n"
    "file when it is not used is an error, never silently ignored, and the printed\n"
    "configuration shows it as a comment.\n"
    "\n"
    "`sched.buckets` is a list of groups, one per bucket, in strictly ascending\n"
    "`max_tokens`. It replaces the default list as a whole, and every group gives all of\n"
    "these keys and no others:\n"
    "\n"
    "| key | type | range / allowed | meaning |\n"
    "|---|---|---|---|\n";

static const char reference_paths[] =
    "\n"
    "## Paths\n"
    "\n"
    "`device.hardware`, `model.profile` and `workload.preset` name files, and so do\n"
    "`model.checkpoint`, `env.prompts` and `sched.tree_in` unless left \"\" (none;\n"
    "`model.checkpoint` may also name a directory: a run checkpoint or a Hugging Face\n"
    "model, see docs/hf-models.md). An\n"
    "absolute path is used as it is. A relative path is tried first against the directory\n"
    "of the config file that names it, then against the inputs directory: `$LIBRA_INPUTS`\n"
    "if set; else, for an installed program, the installed inputs (`$(pkgdatadir)`, e.g.\n"
    "`/usr/local/share/libra`); else `inputs/` of the source tree the program was built\n"
    "from. The first that exists is stored as an absolute path (what the printed\n"
    "configuration shows); if none exists, the error lists the places tried. A config\n"
    "file named on the command line by a relative path that does not exist from the\n"
    "working directory is looked for in the inputs directory too, so an installed\n"
    "program runs a shipped example by its name (`libra --check-config emu-quick.cfg`).\n"
    "`output.dir` and `output.file` are not resolved: they are relative to the working\n"
    "directory of the run.\n";

/* The scheduler section: its prose, the keys of a bucket group, and the default
 * buckets as an example. */
static void write_reference_sched(FILE *out)
{
    fputs(reference_sched, out);
    for (const struct cfg_key *k = cfg_bucket_keys; k->section; k++) {
        char range[160];
        cfg_range_text(k, range, sizeof range);
        fprintf(out, "| `%s` | %s | ", k->key, cfg_type_name(k->type));
        md_cell(out, range);
        fputs(" | ", out);
        md_cell(out, k->doc);
        if (k->units[0]) fprintf(out, " [%s]", k->units);
        fputs(" |\n", out);
    }
    fputs("\nThe default, written out:\n\n```\nsched = {\n  type = \"cmlfq\";\n  buckets = (\n",
          out);
    for (int i = 0; i < cfg_n_default_buckets; i++) {
        char text[160];
        bucket_text(&cfg_default_buckets[i], text, sizeof text);
        fprintf(out, "    %s%s\n", text, i + 1 < cfg_n_default_buckets ? "," : "");
    }
    fputs("  );\n};\n```\n", out);
}

void config_write_reference(FILE *out)
{
    fputs(reference_intro, out);
    for (const struct cfg_section *sec = cfg_sections; sec->name; sec++) {
        fprintf(out, "\n## `%s`: %s\n\n", sec->name, sec->doc);
        fputs("| key | type | default | range / allowed | meaning |\n", out);
        fputs("|---|---|---|---|---|\n", out);
        for (const struct cfg_key *k = cfg_schema; k->section; k++)
            if (strcmp(k->section, sec->name) == 0) write_row(out, k);
    }
    fputs(reference_plan, out);
    write_reference_sched(out);
    fputs(reference_paths, out);
}
