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

/* Reads every line of path. Returns 0 with *out (xmalloc'd, *n problems, in file
 * order; free() it) or -1 with "path:line: what" (or "path: what") in err. */
int env_load_jsonl(const char *path, struct env_problem **out, int64_t *n, char *err,
                   size_t errlen);

#endif
