/*
 * fuzz_config — the launcher's config YAML loader (launcher/ln_config.c
 * ln_config_load: Accelerate's default_config.yaml keys into ln_cli_t),
 * from a file in a scratch directory.
 *
 * Input: the file's content. A refusal must say why, within the buffer.
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include "ln_cli.h"
#include "ln_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[600];
  if (!path[0])
    snprintf(path, sizeof path, "%s/config.yaml", fz_scratch());
  fz_write(path, data, size);
  ln_cli_t c;
  ln_cli_init(&c);
  char err[512];
  err[0] = 0;
  if (ln_config_load(&c, path, err, sizeof err) != 0 && (!err[0] || !memchr(err, 0, sizeof err)))
    abort();
  return 0;
}
