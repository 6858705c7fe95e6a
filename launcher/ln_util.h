/*
 * ln_util — small helpers the launcher's files (and the executor, which
 * links the launcher) share.
 */
#ifndef LN_UTIL_H
#define LN_UTIL_H

#include <stddef.h>

/* Write all `n` bytes of `p` to `fd`, retrying after EINTR and partial
 * writes. 0, or -1 with errno set. */
int ln_write_all(int fd, const char *p, size_t n);

/* vasprintf into a new string (caller frees), or NULL when out of memory. */
char *ln_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
