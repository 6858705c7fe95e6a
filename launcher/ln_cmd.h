/*
 * ln_cmd — the subcommands of the `nbfork` binary (launcher/nbfork_main.c),
 * each `int ln_cmd_X(argc, argv)` with argv[0] the subcommand's name,
 * returning the process's exit code:
 *   0 success; 1 the run failed (a worker failed, a node was lost, the
 *   check failed); 2 bad input (unknown option or config key, missing
 *   program, invalid YAML, port in use, ...: one line on stderr, nothing
 *   started); 130 interrupted (SIGINT/SIGTERM: every worker stopped and
 *   reaped).
 */
#ifndef LN_CMD_H
#define LN_CMD_H

#include "ln_cli.h"

#define LN_EXIT_FAILED 1
#define LN_EXIT_USAGE 2
#define LN_EXIT_INTERRUPTED 130

int ln_cmd_launch(int argc, char **argv);
int ln_cmd_config(int argc, char **argv);
int ln_cmd_env(int argc, char **argv);
int ln_cmd_test(int argc, char **argv);
int ln_cmd_merge_weights(int argc, char **argv); /* ln_cmd_shard.c */
int ln_cmd_estimate_memory(int argc, char **argv);

/* The launch itself, shared by launch and test: settings parsed and
 * finished (ln_cli_finish), fn run in each forked worker; signals
 * handled, errors printed. Returns an exit code (above). */
int ln_cmd_run(const ln_cli_t *c, int (*fn)(void));

/* Parse and finish launch settings (argv as for ln_cli_parse); on
 * failure prints "nbfork CMD: error: ..." and returns -1. Else returns
 * the index of PROGRAM in argv. */
int ln_cmd_settings(const char *cmd, ln_cli_t *c, int argc, char **argv);

#endif
