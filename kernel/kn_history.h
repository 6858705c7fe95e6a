/*
 * kn_history.h — the cells executed in this kernel session, in memory,
 * answering history_request (messaging spec "History"). Entries are
 * [session, line, input] or, with output, [session, line, [input,
 * output]] where output is the execute_result's text/plain or null.
 * Session numbers: this kernel's session is 1; a request's session <= 0
 * is relative to it (0 = this one), like IPython's history manager.
 */
#ifndef KN_HISTORY_H
#define KN_HISTORY_H

#include <jansson.h>
#include <stdbool.h>

#include "kn_result.h"

#define KN_HISTORY_SESSION 1

typedef struct kn_history kn_history_t;

/* New empty history; NULL on allocation failure. Caller owns it. */
kn_history_t *kn_history_new(void);
/* Free *self_p and clear it. NULL-safe. */
void kn_history_destroy(kn_history_t **self_p);

/* Record cell `line` (the execution count) with its input (copied). */
kn_result_t kn_history_add(kn_history_t *h, int line, const char *input);
/* Attach an output text (copied) to cell `line` (no-op if unknown). */
kn_result_t kn_history_set_output(kn_history_t *h, int line, const char *output);

/* Number of entries. */

/* New JSON arrays of entries (caller owns; NULL on allocation failure):
 * tail: the last n entries (n <= 0: none), oldest first.
 * range: entries of `session` with start <= line < stop (stop <= 0:
 *        to the end); another session than this one gives [].
 * search: entries whose input matches the glob `pattern` (fnmatch,
 *        case-sensitive, '*' spans newlines), the last n (n <= 0: all),
 *        with unique dropping earlier duplicates of the same input. */
json_t *kn_history_tail(const kn_history_t *h, int n, bool output);
json_t *kn_history_range(const kn_history_t *h, int session, int start, int stop, bool output);
json_t *kn_history_search(const kn_history_t *h, const char *pattern, int n, bool unique,
                          bool output);

#endif
