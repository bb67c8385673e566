/*
 * Error messages returned through (char *err, size_t errlen) pairs, the convention of
 * every library function that returns 0 / -1 (STYLE 6). Both do nothing when err is
 * NULL or errlen is 0, and truncate rather than overflow.
 */
#ifndef LIBRA_ERRMSG_H
#define LIBRA_ERRMSG_H

#include <stddef.h>

/* err = the formatted message. */
__attribute__((format(printf, 3, 4))) void errmsg_set(char *err, size_t errlen,
                                                      const char *fmt, ...);
/* Appends the formatted text to the message already in err. */
__attribute__((format(printf, 3, 4))) void errmsg_add(char *err, size_t errlen,
                                                      const char *fmt, ...);

#endif
