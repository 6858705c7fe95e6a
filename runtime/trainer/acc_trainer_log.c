/*
 * acc_trainer_log.c — the Trainer's log lines and logger:
 *  - Trainer.log: a log entry gets the epoch (rounded to 2 places) and
 *    joins state.log_history; the main process prints it as Python prints
 *    the dict (ProgressCallback.on_log: str(logs)), e.g.
 *    {'loss': 0.4321, 'grad_norm': 1.2, 'learning_rate': 0.0499, 'epoch': 0.53};
 *  - the logger of `log_level` / `log_level_replica` (Python logging's
 *    levels), one "[LEVEL|trainer] text" line on stderr as transformers'
 *    logging handler writes them.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_callbacks.h"
#include "acc_trainer_internal.h"
#include "nbf_buf.h"

void tr_float_repr(double v, char *out, size_t len) {
  if (!out || len == 0)
    return;
  if (isnan(v)) {
    snprintf(out, len, "nan");
    return;
  }
  if (isinf(v)) {
    snprintf(out, len, v > 0 ? "inf" : "-inf");
    return;
  }
  /* repr(float): integral values below 1e16 print as "N.0" */
  if (v == floor(v) && fabs(v) < 1e16) {
    snprintf(out, len, "%.1f", v);
    return;
  }
  for (int p = 1; p <= 17; p++) {
    snprintf(out, len, "%.*g", p, v);
    if (strtod(out, NULL) == v)
      break;
  }
  /* Python switches to an exponent from 1e16 on; %g only when the
   * exponent reaches the precision (17 digits of 1.2345678901234568e16) */
  if (fabs(v) >= 1e16 && !strchr(out, 'e')) {
    int digits = 0;
    for (const char *c = out; *c; c++)
      digits += *c >= '0' && *c <= '9';
    snprintf(out, len, "%.*e", digits - 1, v);
  }
  /* C writes 1e-05 like Python; "1.5e+20" is Python's too. */
}

/* The stored form of a metric name: its first 47 bytes, cut before a
 * UTF-8 character that would not fit. trainer_state.json must be able to
 * write every stored name: a name cut inside a character is not UTF-8
 * (jansson drops the key), and two long names equal once cut were two
 * entries with one key; both made acc_trainer_save_checkpoint fail
 * (found by tests/fuzz/fuzz_trainer_state). */
static void metric_name(char out[48], const char *name) {
  size_t n = strlen(name);
  if (n > 47) {
    n = 47;
    while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
      n--; /* name[n] continues a character: cut before its first byte */
  }
  memcpy(out, name, n);
  out[n] = 0;
}

int acc_metrics_put(acc_metrics_t *m, const char *name, double value) {
  if ((unsigned char)name[0] == 0x01)
    return -1; /* trainer_state.json's placeholders (acc_trainer_json.c) */
  char key[48];
  metric_name(key, name);
  for (int i = 0; i < m->count; i++)
    if (!strcmp(m->name[i], key)) {
      m->value[i] = value;
      return 0;
    }
  if (m->count == ACC_METRICS_MAX)
    return -1;
  memcpy(m->name[m->count], key, sizeof key);
  m->value[m->count++] = value;
  return 0;
}

double acc_metrics_get(const acc_metrics_t *m, const char *name) {
  for (int i = 0; m && i < m->count; i++)
    if (!strcmp(m->name[i], name))
      return m->value[i];
  return NAN;
}

acc_result_t tr_log(acc_trainer_t *tr, acc_metrics_t *logs) {
  acc_trainer_state_t *st = &tr->state;
  acc_metrics_put(logs, "epoch", round(st->epoch * 100.0) / 100.0);
  acc_log_entry_t *h =
      realloc(st->log_history, (st->log_history_len + 1) * sizeof *st->log_history);
  if (!h)
    return acc__set_error(tr->acc, ACC_ERR_NO_MEMORY, "Trainer.log: no memory for log_history");
  st->log_history = h;
  h[st->log_history_len++] = (acc_log_entry_t){.values = *logs, .step = st->global_step};
  if (acc_is_main_process(tr->acc)) {
    nbf_buf_t b = {0};
    char num[40];
    nbf_buf_printf(&b, "{");
    for (int i = 0; i < logs->count; i++) {
      tr_float_repr(logs->value[i], num, sizeof num);
      nbf_buf_printf(&b, "%s'%s': %s", i ? ", " : "", logs->name[i], num);
    }
    nbf_buf_printf(&b, "}");
    if (b.data)
      acc_print(tr->acc, "%s\n", b.data);
    nbf_buf_free(&b);
  }
  TR_FIRE(tr, on_log, logs);
  return ACC_OK;
}

static const char *level_name(int level) {
  return level >= ACC_LOG_CRITICAL  ? "CRITICAL"
         : level >= ACC_LOG_ERROR   ? "ERROR"
         : level >= ACC_LOG_WARNING ? "WARNING"
         : level >= ACC_LOG_INFO    ? "INFO"
                                    : "DEBUG";
}

int acc_trainer_log(const acc_trainer_t *tr, int level, const char *fmt, ...) {
  if (!tr || !fmt || level < tr->log_level)
    return 0;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s|trainer] %s\n", level_name(level), msg);
  fflush(stderr);
  return 1;
}
