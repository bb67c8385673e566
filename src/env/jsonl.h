/*
 * Private to src/env: problems from a JSONL file, one JSON object per line,
 *   {"prompt": "question text", "answer": "text" | number, ...other keys ignored}.
 * Used by env_init when env.prompts is set (src/env/env.c splits train/eval).
 */
#ifndef LIBRA_ENV_JSONL_H
#define LIBRA_ENV_JSONL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/env.h"

/* Parses one line (len bytes, no newline needed) into out->text and out->answer
 * (the other fields are zeroed). Returns 1 for a problem, 0 for a blank line, -1 with
 * a message (no file or line prefix) in what. */
int jsonl_parse_line(const char *line, size_t len, struct env_problem *out, char *what,
                     size_t whatlen);

/* Reads every line of path. Lines that cannot be used are skipped (report: each one
 * logged as a warning "path:line: what", the first JSONL_REPORT_MAX) while they are at
 * most max_bad_fraction of the non-blank lines; with max_bad_fraction 0 the first one
 * is the error. Returns 0 with *out (xmalloc'd, *n problems, in file order; free()
 * it) and *n_bad, or -1 with "path:line: what" (or "path: what") in err. */
#define JSONL_REPORT_MAX 20
int env_load_jsonl(const char *path, double max_bad_fraction, int report,
                   struct env_problem **out, int64_t *n, int64_t *n_bad, char *err,
                   size_t errlen);

#endif
