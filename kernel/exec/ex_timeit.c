/*
 * ex_timeit.c — see ex_timeit.h.
 */
#include "ex_timeit.h"

#include <math.h>
#include <stdio.h>
#include <sys/resource.h>

#include "nbf_util.h"

static double time_loops(void (*loop)(long), long n) {
  double t0 = nbf_now_s();
  loop(n);
  return nbf_now_s() - t0;
}

ex_result_t ex_timeit_run(void (*loop)(long), long loops, int repeat,
                          volatile sig_atomic_t *interrupted, ex_timeit_result_t *r) {
  r->mean_s = r->stdev_s = 0;
  r->runs = 0;
  if (repeat < 1)
    repeat = 7;
  if (loops <= 0) { /* IPython's autorange: 1, 2, 5, 10, 20, 50, ... */
    static const long steps[] = {1, 2, 5};
    for (long scale = 1;; scale *= 10) {
      for (int i = 0; i < 3; i++) {
        loops = steps[i] * scale;
        if (time_loops(loop, loops) >= 0.2 || (interrupted && *interrupted) || loops >= 1000000000L)
          goto chosen;
      }
    }
  }
chosen:
  r->loops = loops;
  double sum = 0, sum2 = 0;
  for (int k = 0; k < repeat; k++) {
    if (interrupted && *interrupted)
      break;
    double per = time_loops(loop, loops) / (double)loops;
    sum += per;
    sum2 += per * per;
    r->runs++;
  }
  if (r->runs) {
    r->mean_s = sum / r->runs;
    double var = sum2 / r->runs - r->mean_s * r->mean_s;
    r->stdev_s = var > 0 ? sqrt(var) : 0;
  }
  return interrupted && *interrupted ? EX_ERR_INTERRUPTED : EX_OK;
}

/* IPython's _format_time: 3 significant digits in s, ms, µs or ns (0 is
 * "0 ns"); a minute or more as "1min 5s", "2h 3min". */
static void format_time(double s, char *buf, size_t n) {
  static const char *const units[] = {"s", "ms", "\xc2\xb5s", "ns"};
  if (s >= 60.0) {
    static const struct {
      const char *suffix;
      double len;
    } parts[] = {{"d", 86400}, {"h", 3600}, {"min", 60}, {"s", 1}};
    size_t o = 0;
    buf[0] = 0;
    double left = s;
    for (int i = 0; i < 4 && o < n; i++) {
      long v = (long)(left / parts[i].len);
      if (v > 0) {
        left = fmod(left, parts[i].len);
        o += (size_t)snprintf(buf + o, n - o, "%s%ld%s", o ? " " : "", v, parts[i].suffix);
      }
      if (left < 1)
        break;
    }
    return;
  }
  int u = s > 0 ? 0 : 3;
  if (s > 0)
    while (u < 3 && s < 1.0) {
      s *= 1000;
      u++;
    }
  if (s >= 999.5 && u > 0) { /* 999.7 ms would print as "1e+03 ms" */
    s /= 1000;
    u--;
  }
  snprintf(buf, n, "%.3g %s", s, units[u]);
}

static double tv_s(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

void ex_time_once(void (*loop)(long), ex_time_result_t *r) {
  struct rusage a, b;
  getrusage(RUSAGE_SELF, &a);
  double t0 = nbf_now_s();
  loop(1);
  r->wall_s = nbf_now_s() - t0;
  getrusage(RUSAGE_SELF, &b);
  r->user_s = tv_s(b.ru_utime) - tv_s(a.ru_utime);
  r->sys_s = tv_s(b.ru_stime) - tv_s(a.ru_stime);
}

void ex_time_format(const ex_time_result_t *r, char *buf, size_t n) {
  char user[48], sys[48], total[48], wall[48];
  format_time(r->user_s, user, sizeof user);
  format_time(r->sys_s, sys, sizeof sys);
  format_time(r->user_s + r->sys_s, total, sizeof total);
  format_time(r->wall_s, wall, sizeof wall);
  snprintf(buf, n, "CPU times: user %s, sys: %s, total: %s\nWall time: %s", user, sys, total,
           wall);
}

/* 1000000 -> "1,000,000" */
static void group_thousands(long v, char *buf, size_t n) {
  char digits[32];
  int len = snprintf(digits, sizeof digits, "%ld", v);
  size_t o = 0;
  for (int i = 0; i < len && o + 2 < n; i++) {
    if (i > 0 && (len - i) % 3 == 0)
      buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = 0;
}

void ex_timeit_format(const ex_timeit_result_t *r, char *buf, size_t n) {
  char mean[32], sd[32], loops[40];
  format_time(r->mean_s, mean, sizeof mean);
  format_time(r->stdev_s, sd, sizeof sd);
  group_thousands(r->loops, loops, sizeof loops);
  snprintf(buf, n, "%s \xc2\xb1 %s per loop (mean \xc2\xb1 std. dev. of %d run%s, %s loop%s each)",
           mean, sd, r->runs, r->runs == 1 ? "" : "s", loops, r->loops == 1 ? "" : "s");
}
