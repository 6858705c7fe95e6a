/*
 * ex_ranks — interactive ranks in the executor: the `%ranks` line magic
 * (start, stop, restart, status, pull, push), `%%ranks` cells and
 * `%autoranks` (README "Interactive ranks"). The workers and their
 * control channels are the launcher's (ln_ranks.h).
 *
 * | magic                                   | effect                                  |
 * |-----------------------------------------|-----------------------------------------|
 * | %ranks start num_processes=N [opts]     | fork N rank workers (%launch's options) |
 * | %ranks stop / restart / status          | end them / fork again / one line a rank |
 * | %ranks pull NAME [from=R]               | a rank's global or acc_keep block into  |
 * |                                         | the kernel's                            |
 * | %ranks push NAME [to=RANKS]             | the kernel's into the ranks'            |
 * | %%ranks [all|0|1,3|0-2] [--group]       | the cell runs on those ranks            |
 * | %autoranks [on|off]                     | every later cell is a %%ranks all cell  |
 *
 * Where code and values live: a cell's object is loaded in the kernel's
 * executor AND on every live rank, whichever kind the cell is; its
 * statements run only where the cell was sent (the executor for an
 * ordinary cell, the targeted ranks for a %%ranks cell). So functions,
 * types and macros of every cell are usable everywhere; a global exists
 * everywhere, each process with its own value (pull/push copy them).
 */
#ifndef EX_RANKS_H
#define EX_RANKS_H

#include "ex_run.h"

/* If `code` is a ranks cell (`%ranks ...`, `%%ranks ...`, `%autoranks`,
 * or any cell while %autoranks is on), run it, send its reply and return
 * 1 with *rc = what sending returned; else return 0 (an ordinary cell). */
int ex_ranks_handle(ex_t *ex, const char *code, int count, int *rc);

/* The next four are what ex_run.c calls through ex_t.ranks_hooks
 * (ex_run.h), registered with the ranks' state: the runner is below
 * this file and does not include it. */

/* Whether the cell being compiled is a %%ranks cell (ex_run.c runs it
 * through ex_ranks_run_loaded instead of here). */
int ex_ranks_cell_active(const ex_t *ex);

/* Run the loaded %%ranks cell whose run function is `run` on its ranks;
 * sends the reply and returns what sending returned. */
int ex_ranks_run_loaded(ex_t *ex, int count, void (*run)(void));

/* An ordinary cell's object was loaded (its run function `run`): load it
 * on the live ranks too, so later %%ranks cells may use what it defines.
 * Nothing when no ranks run or for a %%ranks cell. */
void ex_ranks_loaded(ex_t *ex, void (*run)(void));

/* Whether rank workers are running (then %launch is refused). */
int ex_ranks_running(const ex_t *ex);

/* Stop the ranks (the executor ends). */
void ex_ranks_shutdown(ex_t *ex);

#endif
