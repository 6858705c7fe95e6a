/*
 * ln_notebook — `nbfork launch [options] NOTEBOOK.ipynb [CALL]`: run a
 * notebook's code cells in order, headless, in an nbfork-executor (the
 * kernel's own cell engine, spoken to over common/nbf_wire.h: requests on
 * its fd 3, events on its fd 4; its stdout and stderr are ours).
 *
 * A `%launch` cell runs with the command line's settings in place of its
 * own options of the same names, and the config file's settings for the
 * options it does not give: command line > cell > config file. Each
 * value replaced, and each config value not used, is said on stderr. With CALL the notebook's
 * `%launch` cells are skipped and `%launch CALL OPTIONS` runs after the last cell, OPTIONS being
 * every launch setting in effect.
 */
#ifndef LN_NOTEBOOK_H
#define LN_NOTEBOOK_H

#include "ln_cli.h"

#include "nbf_buf.h"

/* The cell text to run for `source` (a code cell), or NULL to skip it;
 * caller frees. `opts` = ln_cli_launch_options text that replaces the
 * cell's options (LN_OPTS_FLAGS), `defaults` the text for the options
 * the cell does not give (LN_OPTS_CONFIG; may be NULL); call = CALL or
 * NULL. `notes` (may be NULL) gets one line per cell value replaced and
 * per config value not used. */
char *ln_notebook_cell(const char *source, const char *opts, const char *defaults, const char *call,
                       nbf_buf_t *notes);

/* Run the notebook; nextra = words after NOTEBOOK (CALL and any more:
 * more than one is a usage error). Returns an exit code (ln_cmd.h). */
int ln_notebook_launch(ln_cli_t *c, const char *path, const char *call, int nextra);

#endif
