/*
 * acc_print.c — Accelerate's accelerator.print: printf on the main
 * process only, flushed at once so the line reaches the notebook.
 */
#include <stdarg.h>
#include <stdio.h>

#include "acc_internal.h"

int acc_print(const acc_t *acc, const char *fmt, ...) {
  if (!fmt || (acc && acc->rank != 0))
    return 0;
  va_list ap;
  va_start(ap, fmt);
  int n = vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);
  return n;
}
