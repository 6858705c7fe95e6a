/*
 * ln_notebook — `nbfork launch [options] NOTEBOOK.ipynb [CALL]`: run a
 * notebook's code cells in order, headless, in an nbfork-executor (the
 * kernel's own cell engine, spoken to over common/nbf_wire.h: requests on
 * its fd 3, events on its fd 4; its stdout and stderr are ours).
 *
 * A `%launch` cell runs with the command line's settings appended to its
 * options (later options win in ln_options_parse, so a given setting
 * replaces the cell's own). With CALL the notebook's `%launch` cells are
 * skipped and `%launch CALL OPTIONS` runs after the last cell, OPTIONS
 * being every launch setting in effect.
 */
#ifndef LN_NOTEBOOK_H
#define LN_NOTEBOOK_H

#include "ln_cli.h"

/* The cell text to run for `source` (a code cell), or NULL to skip it;
 * caller frees. `opts` = ln_cli_launch_options text; call = CALL or NULL. */
char *ln_notebook_cell(const char *source, const char *opts, const char *call);

/* Run the notebook; nextra = words after NOTEBOOK (CALL and any more:
 * more than one is a usage error). Returns an exit code (ln_cmd.h). */
int ln_notebook_launch(ln_cli_t *c, const char *path, const char *call, int nextra);

#endif
