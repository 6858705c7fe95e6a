/*
 * ln_cli_parse — `nbfork launch [options] PROGRAM [ARGS...]`: the command
 * line, the config file and Slurm's allocation into the settings of
 * ln_cli.h (Accelerate's precedence: defaults < config file < command
 * line).
 */
#ifndef LN_CLI_PARSE_H
#define LN_CLI_PARSE_H

#include <stddef.h>

#include "ln_cli.h"

/* Parse `nbfork launch` arguments argv[0..argc-1] (after "launch"):
 * options first, then PROGRAM and its arguments, which are left alone.
 * Options take their value as the next word or after '='; flags
 * (--cpu, --debug, -q/--quiet, --same_network) take none. A config file
 * (--config_file, else $NBFORK_CONFIG_FILE, else the default path when
 * it exists) is loaded before the command line's settings are applied.
 * Returns the index of PROGRAM in argv, or -1 with a one-line message in
 * err (unknown option, missing value, no PROGRAM, bad config). */
int ln_cli_parse(ln_cli_t *c, int argc, char **argv, char *err, size_t errlen);

#endif
