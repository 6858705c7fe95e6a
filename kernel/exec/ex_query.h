/*
 * ex_query — answers for the front end's questions about code:
 * is_complete (jupyter console's multi-line input), complete (names from
 * earlier cells, the nbfork API, libc, C keywords) and inspect
 * (declaration and doc comment). Offsets are in bytes; the kernel converts
 * Jupyter's code-point offsets.
 */
#ifndef EX_QUERY_H
#define EX_QUERY_H

#include <jansson.h>

#include "ex_cell.h"

/* Load the nbfork API names and docs from INCDIR/nbfork.h. */
void ex_query_init(const char *incdir);

/* Answer request `msg` ("is_complete", "complete", "inspect") with a
 * reply event. */
int ex_query_handle(const char *msg, json_t *req, const ex_cell_state_t *cells);

#endif
