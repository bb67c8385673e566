/* Error messages through (err, errlen) pairs (include/libra/errmsg.h). */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "libra/errmsg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void errmsg_set(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void errmsg_add(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    size_t used = strnlen(err, errlen);
    if (used + 1 >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + used, errlen - used, fmt, ap);
    va_end(ap);
}
