/*
 * ex_query — answers for the front end's questions about code:
 * is_complete (jupyter console's multi-line input), complete and inspect.
 * Complete: `%` magics and `#include` headers by their line; C names through
 * libclang where built (ex_clang.h: members after `.`/`->`, locals and
 * parameters) together with the lexical list (names from earlier cells,
 * the nbfork API, libc, C keywords). Inspect: the declaration and doc
 * comment of what clang resolves under the cursor, else of the name found
 * lexically (earlier cells, then the runtime's headers, then libc's).
 * Offsets are in bytes; the kernel converts
 * Jupyter's code-point offsets.
 */
#ifndef EX_QUERY_H
#define EX_QUERY_H

#include <jansson.h>

#include "ex_cell.h"

/* Load the nbfork API names and docs from INCDIR's headers and set up
 * libclang (ex_clang_new) for cells that see INCDIR. */
void ex_query_init(const char *incdir);

/* Answer request `msg` ("is_complete", "complete", "inspect") with a
 * reply event. */
int ex_query_handle(const char *msg, json_t *req, const ex_cell_state_t *cells);

/* ex_query_help's answer for code that is not a help request. */
#define EX_QUERY_NOT_HELP (-2)

/* IPython's help syntax, a cell that is only `name?`, `?name`, `name??`
 * or `??name` (name: an identifier, `struct S`, or a magic `%timeit`):
 * answer the execute request with the text inspect gives (`??`: the
 * whole definition as its cell wrote it) as a pager payload, Jupyter's
 * {"source": "page", "data": {"text/plain": ..}, "start": 0} (messaging
 * spec "Payloads (DEPRECATED)", still what IPython sends); an unknown
 * name prints "Object `name` not found." as IPython does. Returns what
 * sending the reply returned, or EX_QUERY_NOT_HELP (nothing sent). */
int ex_query_help(const char *code, const ex_cell_state_t *cells);

#endif
