/*
 * ex_magic — line magics at the top of a cell (`%cflags -O3`), and the
 * `%%cuda` cell magic. A cell may start with any number of line magics;
 * the C code after them runs, then `%launch` (if any) launches.
 * `%launch` may also follow code (comments, `#include`s, declarations,
 * statements): it must then be the cell's last line, since the cell's
 * code runs before the launch; code after it is refused (UsageError).
 *
 * | magic                  | effect                                             |
 * |------------------------|----------------------------------------------------|
 * | %launch CALL [k=v ...] | fork workers running CALL (see ln_options.h)       |
 * | %time STATEMENT        | run STATEMENT once, print CPU and wall time        |
 * | %timeit [-n N] [-r R]  | time STATEMENT as IPython does (ex_timeit.h)       |
 * |   STATEMENT            |                                                    |
 * | %cflags [FLAGS]        | set extra compiler flags for later cells (test-    |
 * |                        | compiled first: rejected flags are a UsageError);  |
 * |                        | show; `--clear` removes them                       |
 * | %ldflags [FLAGS]       | the same for linker flags (-lfoo)                  |
 * | %env [NAME[=VALUE]]    | show or set an environment variable (workers      |
 * |                        | inherit it)                                        |
 * | %who                   | list functions, globals, types, macros defined     |
 * | %lsmagic               | list the magics                                    |
 * | %%cuda                 | the cell is CUDA, compiled with nvcc               |
 * | %%timeit [-n N] [-r R] | time the cell's other lines; SETUP runs first      |
 * |   [SETUP]              |                                                    |
 * | %%writefile [-a] FILE  | write (-a: append) the cell's other lines to FILE; |
 * |                        | %%file is the same                                 |
 * Cell magics (%%) stand on the cell's first line. Bad arguments (an
 * unknown option, a missing value, arguments to %who) are a UsageError.
 */
#ifndef EX_MAGIC_H
#define EX_MAGIC_H

#include <stddef.h>

#include "ex_cell.h"
#include "ex_result.h"

typedef struct {
  char *cflags;  /* owned */
  char *ldflags; /* owned */
  /* Test-compiles a trivial unit with these flags (either may be NULL):
   * 0 when the compiler and linker accept them, else -1 with why in err.
   * NULL: flags are taken unchecked. */
  int (*check)(void *ctx, const char *cflags, const char *ldflags, char *err, size_t errlen);
  void *check_ctx;
} ex_flags_t;

typedef struct {
  int cuda;          /* %%cuda seen                                   */
  char *launch_call; /* `f(a, b)` of %launch, owned, or NULL          */
  char *launch_opts; /* the key=value text after it, owned            */
  char *timeit_stmt; /* the statement of %timeit, owned, or NULL      */
  long timeit_loops; /* -n: loops per run (0: chosen automatically)   */
  int timeit_repeat; /* -r: runs (7)                                  */
  int time_once;     /* %time: the statement runs once, timed as IPython's
                        %time (CPU and wall time), not %timeit          */
  int launch_line;   /* the %launch line's number in the cell (1-based) */
  int launch_col;    /* the column (bytes, 1-based) where its call starts */
  const char *code;  /* the cell's C code: src with its magic lines blanked
                        (kept as empty lines, so line numbers are the
                        cell's); points into code_buf */
  char *code_buf;    /* owned */
} ex_magic_result_t;

/* The name of line magic i (`%launch`), or NULL past the last one: for
 * completion (ex_query.c). */
const char *ex_magic_name(size_t i);

/* The usage text of magic `name` (`%timeit`, `%%writefile`), or NULL. */
const char *ex_magic_help(const char *name);

/* Run the magic lines at the top of `src`. Output of %who/%env/%lsmagic
 * goes to stdout. EX_OK; EX_ERR_USAGE, an unknown or malformed magic
 * (*ename "UsageError", or "LaunchError" for a %launch line; the message
 * in err); EX_ERR_NOMEM. Caller frees `out` (ex_magic_result_free)
 * whatever the result. */
ex_result_t ex_magic_run(const char *src, ex_flags_t *flags, const ex_cell_state_t *st,
                         ex_magic_result_t *out, const char **ename, char *err, size_t errlen);

void ex_magic_result_free(ex_magic_result_t *r);

#endif
