/* Fuzz target: model output fed to tools -- the JSON tool calls of the Qwen3 and
 * Llama 3 chat formats (src/model/chat_call.c) and the calculator's expression
 * evaluator that runs their argument (src/env/calc_expr.c). */
#include <stdint.h>
#include <string.h>

#include "libra/chat.h"
#include "libra/env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    static char name[256], args[4096], err[512];
    for (int family = CHAT_QWEN3; family <= CHAT_LLAMA3; family++) {
        size_t from = 0, start, end;
        for (int k = 0; k < 64; k++) {
            if (!chat_next_tool_call(family, text, size, from, &start, &end)) break;
            if (start > end || end > size) __builtin_trap();
            chat_parse_tool_call(family, text + start, end - start, name, sizeof name, args,
                                 sizeof args, err, sizeof err);
            if (end <= from) break;
            from = end;
        }
        chat_parse_tool_call(family, text, size, name, sizeof name, args, sizeof args, err,
                             sizeof err);
    }
    double v;
    size_t pos = 0;
    calc_eval(text, size, &v, &pos);
    if (pos > size) __builtin_trap();
    return 0;
}
