/*
 * acc_trainer_ckpt.c — the Trainer's checkpoints, as Trainer._save_checkpoint,
 * _rotate_checkpoints, get_last_checkpoint and _load_from_checkpoint do:
 *   output_dir/checkpoint-<global_step>/
 *     nbfork_state.bin      model, optimizer (moments, step count, lr),
 *                           fp16 loss scaler, the Trainer's loop state
 *                           (position, scheduler step, loss sums, early
 *                           stopping counter, best metric) — acc_save_state
 *     nbfork_rank<R>.bin    each rank's RNG and accumulation state
 *     trainer_state.json    TrainerState with Transformers' field names
 * The binary files are written atomically by acc_save_state; the JSON by
 * the main process (temporary file, fsync, rename). Rotation keeps the
 * best checkpoint (moved next to the newest before the oldest are
 * deleted, as Transformers does).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acc_callbacks.h"
#include "acc_trainer_internal.h"
#include "nbf_util.h"

#define MAX_CKPTS 4096

/* Step numbers of the checkpoint-N folders in `dir`, ascending; count or -1. */
static int list_checkpoints(const char *dir, long *steps, int cap) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    char *end;
    if (strncmp(e->d_name, "checkpoint-", 11) || !e->d_name[11])
      continue;
    long s = strtol(e->d_name + 11, &end, 10);
    if (*end == 0 && s >= 0)
      steps[n++] = s;
  }
  closedir(d);
  for (int i = 1; i < n; i++) /* insertion sort: few folders */
    for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
      long t = steps[j];
      steps[j] = steps[j - 1];
      steps[j - 1] = t;
    }
  return n;
}

int acc_trainer_last_checkpoint(const char *dir, char *out, size_t outlen) {
  static long steps[MAX_CKPTS];
  int n = dir ? list_checkpoints(dir, steps, MAX_CKPTS) : -1;
  if (n <= 0)
    return -1;
  snprintf(out, outlen, "%s/checkpoint-%ld", dir, steps[n - 1]);
  return 0;
}

static json_t *metrics_json(const acc_metrics_t *m, tr_reals_t *r) {
  json_t *o = json_object();
  for (int i = 0; o && i < m->count; i++)
    json_object_set_new(o, m->name[i], tr_json_real(r, m->value[i]));
  return o;
}

/* TrainerState.stateful_callbacks: ExportableState.state() of the
 * EarlyStoppingCallback (when there is one) and of TrainerControl. */
static json_t *stateful_callbacks_json(const acc_trainer_t *tr, tr_reals_t *r) {
  const acc_trainer_control_t *c = &tr->control;
  json_t *o = json_pack("{s:{s:{s:b,s:b,s:b,s:b,s:b},s:{}}}", "TrainerControl", "args",
                        "should_training_stop", c->should_training_stop, "should_epoch_stop",
                        c->should_epoch_stop, "should_save", c->should_save, "should_evaluate",
                        c->should_evaluate, "should_log", c->should_log, "attributes");
  if (o && tr->args.early_stopping_patience > 0)
    json_object_set_new(o, "EarlyStoppingCallback",
                        json_pack("{s:{s:i,s:o},s:{s:I}}", "args", "early_stopping_patience",
                                  tr->args.early_stopping_patience, "early_stopping_threshold",
                                  tr_json_real(r, tr->args.early_stopping_threshold), "attributes",
                                  "early_stopping_patience_counter",
                                  (json_int_t)tr->loop.es_counter));
  return o;
}

/* TrainerState.save_to_json's fields. */
static json_t *state_json(const acc_trainer_t *tr, tr_reals_t *r) {
  const acc_trainer_state_t *st = &tr->state;
  json_t *hist = json_array();
  for (size_t i = 0; hist && i < st->log_history_len; i++) {
    json_t *e = metrics_json(&st->log_history[i].values, r);
    json_object_set_new(e, "step", json_integer(st->log_history[i].step));
    json_array_append_new(hist, e);
  }
  return json_pack(
      "{s:o,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:o,s:o,s:o,s:o,s:b,s:b,s:o}", "epoch",
      tr_json_real(r, st->epoch), "global_step", (json_int_t)st->global_step, "max_steps",
      (json_int_t)st->max_steps, "logging_steps", (json_int_t)st->logging_steps, "eval_steps",
      (json_int_t)st->eval_steps, "save_steps", (json_int_t)st->save_steps, "train_batch_size",
      st->train_batch_size, "num_train_epochs", st->num_train_epochs, "log_history", hist,
      "best_metric", st->has_best_metric ? tr_json_real(r, st->best_metric) : json_null(),
      "best_global_step", st->best_global_step ? json_integer(st->best_global_step) : json_null(),
      "best_model_checkpoint",
      st->best_model_checkpoint[0] ? json_string(st->best_model_checkpoint) : json_null(),
      "is_local_process_zero", st->is_local_process_zero, "is_world_process_zero",
      st->is_world_process_zero, "stateful_callbacks", stateful_callbacks_json(tr, r));
}

/* Write trainer_state.json into `dir` atomically. */
static acc_result_t write_json(acc_trainer_t *tr, const char *dir) {
  char path[PATH_MAX + 32], tmp[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/trainer_state.json", dir);
  snprintf(tmp, sizeof tmp, "%s/.trainer_state.json.tmp", dir);
  tr_reals_t reals = {0};
  json_t *o = state_json(tr, &reals);
  char *text = o ? tr_json_dumps(o, &reals) : NULL;
  json_decref(o);
  tr_reals_free(&reals);
  if (!text)
    return acc__set_error(tr->acc, ACC_ERR_NO_MEMORY, "trainer_state.json: no memory");
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int bad = fd < 0 || nbf_write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0;
  int e = errno;
  free(text);
  if (fd >= 0 && close(fd) != 0 && !bad)
    bad = 1, e = errno;
  if (bad || rename(tmp, path) != 0) {
    e = bad ? e : errno;
    unlink(tmp);
    return acc__set_error(tr->acc, ACC_ERR_IO, "cannot write %s: %s", path, NBF_STRERROR(e));
  }
  return ACC_OK;
}

/* The optimizer a checkpoint was saved with (--optim), in OPTIM_FILE
 * beside trainer_state.json, so a resume with another one names both
 * (acc_save_state alone only knows "no optimizer state"). */
#define OPTIM_FILE "nbfork_optim.txt"

static acc_result_t write_optim(acc_trainer_t *tr, const char *dir) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/" OPTIM_FILE, dir);
  FILE *f = fopen(path, "w");
  int bad = !f || fprintf(f, "%s\n", tr->args.optim) < 0;
  if (f && fclose(f) != 0)
    bad = 1;
  return bad ? acc__set_error(tr->acc, ACC_ERR_IO, "cannot write %s", path) : ACC_OK;
}

/* Every rank agrees whether the checkpoint's optimizer is this run's:
 * a mismatch seen by any rank (the main process reads the file; others
 * may not see it) fails all, before acc_load_state's collectives. */
static acc_result_t check_optim(acc_trainer_t *tr, const char *dir) {
  char path[PATH_MAX + 32], saved[64] = "";
  snprintf(path, sizeof path, "%s/" OPTIM_FILE, dir);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(saved, sizeof saved, f))
      saved[0] = 0;
    fclose(f);
    saved[strcspn(saved, "\r\n")] = 0;
  }
  int64_t bad = saved[0] && strcmp(saved, tr->args.optim) != 0;
  ACC_CHECK(acc_all_reduce(tr->acc, &bad, 1, ACC_I64, ACC_MAX));
  if (!bad)
    return ACC_OK;
  return acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                        "%s was saved with --optim %s; this run has --optim %s: resume with "
                        "--optim %s, or start without --resume_from_checkpoint",
                        dir, saved[0] ? saved : "(another, see the main process)", tr->args.optim,
                        saved[0] ? saved : "as saved");
}

/* _rotate_checkpoints: delete the oldest beyond save_total_limit, never
 * the best one. */
static acc_result_t rotate(acc_trainer_t *tr) {
  int limit = tr->args.save_total_limit;
  if (limit <= 0)
    return ACC_OK;
  static long steps[MAX_CKPTS];
  int n = list_checkpoints(tr->args.output_dir, steps, MAX_CKPTS);
  long best = tr->state.best_model_checkpoint[0] ? tr->state.best_global_step : -1;
  for (int i = 0; i < n - 2; i++) /* move the best to the second newest place */
    if (steps[i] == best) {
      steps[i] = steps[i + 1];
      steps[i + 1] = best;
    }
  if (limit == 1 && tr->args.load_best_model_at_end && n > 0 && steps[n - 1] != best && best >= 0)
    limit = 2;
  for (int i = 0; i < n - limit; i++) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/checkpoint-%ld", tr->args.output_dir, steps[i]);
    acc_trainer_log(tr, ACC_LOG_INFO, "Deleting older checkpoint [%s] due to args.save_total_limit",
                    p);
    if (nbf_rmtree(p) != 0)
      return acc__set_error(tr->acc, ACC_ERR_IO, "cannot delete %s: %s", p, NBF_STRERROR(errno));
  }
  return ACC_OK;
}

static void state_to_loop(acc_trainer_t *tr) {
  tr->loop.best_metric = tr->state.best_metric;
  tr->loop.has_best_metric = tr->state.has_best_metric;
  tr->loop.best_global_step = tr->state.best_global_step;
}

static void loop_to_state(acc_trainer_t *tr, const char *dir_of_best) {
  acc_trainer_state_t *st = &tr->state;
  st->best_metric = tr->loop.best_metric;
  st->has_best_metric = (int)tr->loop.has_best_metric;
  st->best_global_step = (long)tr->loop.best_global_step;
  st->global_step = (long)tr->loop.global_step;
  st->epoch = (double)tr->loop.epoch_index +
              (tr->train_batches ? (double)tr->loop.batch_in_epoch / (double)tr->train_batches : 0);
  if (st->best_global_step > 0)
    snprintf(st->best_model_checkpoint, sizeof st->best_model_checkpoint, "%s/checkpoint-%ld",
             dir_of_best, st->best_global_step);
}

acc_result_t acc_trainer_save_checkpoint(acc_trainer_t *tr) {
  if (!tr)
    return acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_trainer_save_checkpoint: NULL");
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/checkpoint-%ld", tr->args.output_dir, tr->state.global_step);
  state_to_loop(tr);
  /* the loss sums are used only averaged over ranks, and the checkpoint
   * keeps the main process's loop state: store the averages */
  double sums[2] = {tr->loop.tr_loss, tr->loop.total_loss};
  ACC_CHECK(acc_all_reduce(tr->acc, sums, 2, ACC_F64, ACC_AVG));
  tr->loop.tr_loss = sums[0];
  tr->loop.total_loss = sums[1];
  ACC_CHECK(acc_save_state(tr->acc, dir, tr->model->mlp, tr->opt));
  if (tr->state.best_global_step > 0) /* the best one is on disk: saved now or earlier */
    snprintf(tr->state.best_model_checkpoint, sizeof tr->state.best_model_checkpoint,
             "%s/checkpoint-%ld", tr->args.output_dir, tr->state.best_global_step);
  acc_result_t r = ACC_OK;
  if (acc_is_main_process(tr->acc)) {
    r = write_json(tr, dir);
    if (r == ACC_OK)
      r = write_optim(tr, dir);
    if (r == ACC_OK)
      r = rotate(tr);
  }
  /* every rank learns the main process's result */
  int64_t bad = r != ACC_OK;
  ACC_CHECK(acc_all_reduce(tr->acc, &bad, 1, ACC_I64, ACC_MAX));
  if (bad)
    return r != ACC_OK
               ? r
               : acc__set_error(tr->acc, ACC_ERR_IO,
                                "the main process failed to write %s/trainer_state.json", dir);
  acc_trainer_log(tr, ACC_LOG_INFO, "Saving model checkpoint to %s", dir);
  TR_FIRE(tr, on_save, NULL);
  return ACC_OK;
}

void tr_history_from_json(acc_trainer_state_t *st, const json_t *o) {
  json_t *h = json_object_get(o, "log_history"), *e;
  size_t i;
  free(st->log_history);
  st->log_history = calloc(json_array_size(h) + 1, sizeof *st->log_history);
  st->log_history_len = 0;
  json_array_foreach(h, i, e) {
    acc_log_entry_t *le = &st->log_history[st->log_history_len++];
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
      if (!strcmp(k, "step"))
        le->step = (long)json_integer_value(v);
      else
        acc_metrics_put(&le->values, k, json_is_null(v) ? NAN : json_number_value(v));
    }
  }
}

/* log_history from trainer_state.json (the main process's file; other
 * ranks without it keep an empty history: only the main process prints). */
static acc_result_t read_history(acc_trainer_t *tr, const char *dir) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/trainer_state.json", dir);
  json_error_t err;
  json_t *o = json_load_file(path, 0, &err);
  if (!o)
    return acc_is_main_process(tr->acc)
               ? acc__set_error(tr->acc, ACC_ERR_IO, "%s: line %d: %s", path, err.line, err.text)
               : ACC_OK;
  tr_history_from_json(&tr->state, o);
  json_decref(o);
  return ACC_OK;
}

acc_result_t tr_resume(acc_trainer_t *tr, const char *spec) {
  char dir[PATH_MAX];
  /* "false" is None (no resume) for a program that sets the field itself;
   * acc_training_args_set already stores it as "" */
  if (!strcasecmp(spec, "false") || !strcmp(spec, "0") || !strcasecmp(spec, "no"))
    return ACC_OK;
  if (!strcasecmp(spec, "true") || !strcmp(spec, "1")) {
    if (acc_trainer_last_checkpoint(tr->args.output_dir, dir, sizeof dir) != 0)
      return acc__set_error(tr->acc, ACC_ERR_INVALID_ARGUMENT,
                            "--resume_from_checkpoint true: no valid checkpoint found in "
                            "output directory (%s)",
                            tr->args.output_dir);
  } else {
    snprintf(dir, sizeof dir, "%s", spec);
  }
  ACC_CHECK(check_optim(tr, dir));
  ACC_CHECK(acc_load_state(tr->acc, dir, tr->model->mlp, tr->opt));
  loop_to_state(tr, tr->args.output_dir);
  acc_trainer_log(tr, ACC_LOG_INFO, "Continuing training from checkpoint %s (global step %ld)", dir,
                  tr->state.global_step);
  return read_history(tr, dir);
}

acc_result_t tr_load_best(acc_trainer_t *tr) {
  tr_loop_t keep = tr->loop;
  acc_trainer_log(tr, ACC_LOG_INFO, "Loading best model from %s (score: %g).",
                  tr->state.best_model_checkpoint, tr->state.best_metric);
  acc_result_t r = acc_load_state(tr->acc, tr->state.best_model_checkpoint, tr->model->mlp, NULL);
  tr->loop = keep; /* the parameters change, not where the loop is */
  return r;
}
