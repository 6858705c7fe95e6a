/*
 * nbf_util.h — the small system helpers every process of nbfork needs
 * once: the monotonic clock, writing a whole buffer, the path of the
 * running binary, thread-safe error text and formatted allocation.
 *
 * Part of the static library nbfork_common (hidden symbols), linked into
 * the kernel, the executor, the launcher and libnbfork. Not installed.
 * Error discipline: 0 on success, -1 with errno set on failure.
 */
#ifndef NBF_UTIL_H
#define NBF_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* CLOCK_MONOTONIC in nanoseconds, milliseconds and seconds. */
int64_t nbf_now_ns(void);
int64_t nbf_now_ms(void);
double nbf_now_s(void);

/* Write all `n` bytes of `p` to `fd`, retrying after EINTR and partial
 * writes; on a full non-blocking fd it waits (poll) for room. 0, or -1
 * with errno set. */
int nbf_write_all(int fd, const void *p, size_t n);

/* The absolute path of the running binary (/proc/self/exe) into
 * out[size], NUL-terminated. 0, or -1 with errno set (ENAMETOOLONG when
 * it does not fit). */
int nbf_self_exe(char *out, size_t size);

/* strerror_r into `buf` (thread-safe, unlike strerror); returns the text,
 * which may be a static string rather than `buf`. Never NULL. */
const char *nbf_strerror(int err, char *buf, size_t size);
#define NBF_ERRBUF 128
/* The text of `err` in a buffer that lives to the end of the enclosing
 * block: printf("%s", NBF_STRERROR(errno)). */
#define NBF_STRERROR(err) nbf_strerror((err), (char[NBF_ERRBUF]){0}, NBF_ERRBUF)

/* Remove the file or directory tree at path (rm -rf, symbolic links not
 * followed). 0 once nothing is left there (also when there was nothing),
 * or -1 with errno set (the first removal that failed). */
int nbf_rmtree(const char *path);

/* CZMQ's destroy convention, x_destroy(x_t **self_p): the object in the
 * caller's handle, taken out of it (*self_p is left NULL, so the caller
 * cannot use it again); NULL when self_p or *self_p is NULL. NBF_TAKE
 * accepts only a pointer to an object pointer (the sizeof checks it at
 * compile time, evaluating nothing). memcpy, not a void ** cast: the
 * handle is read as the pointer type it was written as. */
static inline void *nbf_take(void *self_p) {
  void *obj = NULL;
  if (self_p) {
    memcpy(&obj, self_p, sizeof obj);
    memset(self_p, 0, sizeof obj);
  }
  return obj;
}
#define NBF_TAKE(self_p) ((void)sizeof(*(self_p) == NULL), nbf_take(self_p))

/* FNV-1a (Fowler, Noll, Vo; 64-bit) of the string s mixed into h: start
 * from NBF_FNV_OFFSET; chain calls to hash several strings. For hash
 * tables and cache keys, not for security. */
#define NBF_FNV_OFFSET 14695981039346656037ULL
#define NBF_FNV_PRIME 1099511628211ULL
static inline uint64_t nbf_fnv1a(const char *s, uint64_t h) {
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * NBF_FNV_PRIME;
  return h;
}

/* vasprintf into a new string (caller frees), or NULL when out of memory. */
char *nbf_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
