/* Fuzz target: one line of a JSONL problems file (env.prompts; src/env/jsonl.c). */
#include <stdint.h>
#include <string.h>

#include "env/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct env_problem pr;
    char what[512];
    int rc = jsonl_parse_line((const char *)data, size, &pr, what, sizeof what);
    if (rc == 1 && (!memchr(pr.text, '\0', sizeof pr.text) || !pr.text[0] ||
                    !memchr(pr.answer, '\0', sizeof pr.answer) || !pr.answer[0]))
        __builtin_trap(); /* a problem must carry a terminated, non-empty prompt and answer */
    if (rc < 0 && !memchr(what, '\0', sizeof what)) __builtin_trap();
    return 0;
}
