/*
 * fuzz_options — the `%launch` option parser (launcher/ln_options.c):
 * ln_options_parse of the text after `%launch FUNC(...)`, and
 * ln_options_prefix of the template it accepted.
 *
 * Input: a byte choosing the error buffer's size (1..256: messages are
 * cut, never overflow), then the option text. Accepted options must hold
 * what validation promises (num_processes >= 1, node_rank < num_nodes,
 * a port in 1..65535, NUL-terminated texts).
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include "ln_options.h"

static void check(const ln_options_t *o) {
  if (o->num_processes < 1 || o->num_nodes < 1 || o->node_rank < 0 ||
      o->node_rank >= o->num_nodes || o->use_port < 1 || o->use_port > 65535 ||
      o->rdzv_timeout_s < 1 || o->max_restarts < 0 || !(o->monitor_interval_s > 0))
    abort();
  if (!memchr(o->master_addr, 0, sizeof o->master_addr) ||
      !memchr(o->rdzv_endpoint, 0, sizeof o->rdzv_endpoint) ||
      !memchr(o->rdzv_id, 0, sizeof o->rdzv_id) ||
      !memchr(o->rdzv_secret, 0, sizeof o->rdzv_secret) ||
      !memchr(o->log_line_prefix_template, 0, sizeof o->log_line_prefix_template) ||
      !memchr(o->mixed_precision, 0, sizeof o->mixed_precision))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  char *text = fz_cstr(data + 1, size - 1);
  char err[256];
  size_t errlen = 1 + data[0];
  ln_options_t o;
  ln_options_init(&o);
  if (ln_options_parse(text, &o, err, errlen) == 0) {
    check(&o);
    char prefix[64];
    ln_options_prefix(&o, 2147483647, data[0], prefix, 1 + data[0] % sizeof prefix);
    ln_options_prefix(&o, 0, 0, prefix, sizeof prefix);
  } else if (!memchr(err, 0, errlen)) {
    abort(); /* the message is terminated within its buffer */
  }
  free(text);
  return 0;
}
