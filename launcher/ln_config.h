/*
 * ln_config — Accelerate's config file (default_config.yaml) for
 * `nbfork launch` and `nbfork config`, read and written with libyaml.
 *
 * Keys are Accelerate's (accelerate/commands/config/config_args.py), so
 * a file that `accelerate config` wrote works as it is. Keys for features
 * nbfork lacks (DeepSpeed, FSDP, Megatron-LM, TPU, dynamo, IPEX, FP8) are
 * accepted while they say "off" (false, 'no', NO, empty, {}), as
 * Accelerate writes them for a plain multi-GPU machine; turned on, they are
 * an error naming the feature. An unknown key is an error.
 */
#ifndef LN_CONFIG_H
#define LN_CONFIG_H

#include <stddef.h>

#include "ln_cli.h"

/* Apply the config file at `path` to c (ln_cli_set for each key).
 * Returns 0, or -1 with one line in err: "PATH:LINE:COLUMN: what" for YAML
 * syntax errors and bad keys or values (line and column from 1), or the
 * system error when the file cannot be read. */
int ln_config_load(ln_cli_t *c, const char *path, char *err, size_t errlen);

/* One key of a config to write; quoted = write the value as a quoted
 * string ('no' must not read back as a boolean). */
typedef struct {
  const char *key, *value;
  int quoted;
} ln_config_item_t;

/* Write items as one YAML mapping to path (parent directories created,
 * mode 0644, replaced atomically: a temporary file renamed over it).
 * Returns 0 or -1 with err. */
int ln_config_write(const char *path, const ln_config_item_t *items, int n, char *err,
                    size_t errlen);

#endif
