/*
 * ln_display_view — the display events of a headless notebook run
 * (`nbfork launch NOTEBOOK.ipynb`) shown on a terminal or in a log, as
 * scripts/run_notebook.py shows them for scripts/demo.sh:
 *
 *   - display_data: its text/plain on a line of its own;
 *   - update_display_data (a progress bar redrawn by acc_progress_*):
 *     on a terminal the display's line is redrawn in place (cursor up one
 *     line, erase, the new text, newline: the cursor always ends at the
 *     start of a line, so the workers' own output lands on lines of its
 *     own); in a log or a pipe, a new line when the text changed and it
 *     is complete ("375/375") or `interval_ms` passed since that
 *     display's last line, so a bar does not flood the log;
 *   - the final state always: a display's last text not yet printed is
 *     printed before any other output of the view and when the cell ends
 *     (ln_display_view_end_cell), e.g. a bar stopped early at 120/375.
 *
 * Outputs without text/plain (charts: image/svg+xml) are not shown.
 * Events come as common/nbf_wire.h defines them (jansson objects).
 */
#ifndef LN_DISPLAY_VIEW_H
#define LN_DISPLAY_VIEW_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct ln_display_view ln_display_view_t;

/* A view writing to `out` (not owned), redrawing in place when `tty`,
 * else at most one line per display every `interval_ms` (2000 as
 * run_notebook.py). NULL when out of memory. */
ln_display_view_t *ln_display_view_new(FILE *out, int tty, int64_t interval_ms);
void ln_display_view_destroy(ln_display_view_t **v_p); /* NULL-safe */

/* Show event `e` at time now_ms (any monotonic clock). Returns 1 when it
 * was a display event (display_data, update_display_data; shown or not),
 * 0 for the caller to handle. */
int ln_display_view_event(ln_display_view_t *v, json_t *e, int64_t now_ms);

/* The cell ended (its reply came): print every display's last state not
 * yet printed. Call also before printing anything else on `out`. */
void ln_display_view_end_cell(ln_display_view_t *v);

#endif
