/*
 * fuzz_trainer_state — the Trainer's `trainer_state.json` loader
 * (runtime/trainer/acc_trainer_ckpt.c tr_history_from_json after jansson's
 * json_loadb, as read_history does on resume), then the JSON writer of
 * acc_trainer_json.c on every value read back (Python's float repr,
 * NaN and infinities included).
 *
 * Input: the file's content.
 */
#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include <jansson.h>
#include <math.h>

#include "acc_trainer_internal.h"

static void write_back(const acc_trainer_state_t *st) {
  json_t *arr = json_array();
  tr_reals_t r = {0};
  for (size_t i = 0; i < st->log_history_len; i++) {
    const acc_log_entry_t *e = &st->log_history[i];
    if (e->values.count < 0 || e->values.count > ACC_METRICS_MAX)
      abort();
    json_t *o = json_object();
    for (int j = 0; j < e->values.count; j++)
      json_object_set_new(o, e->values.name[j], tr_json_real(&r, e->values.value[j]));
    json_object_set_new(o, "step", json_integer(e->step));
    json_array_append_new(arr, o);
  }
  char *text = tr_json_dumps(arr, &r);
  if (!text && st->log_history_len)
    abort();
  free(text);
  tr_reals_free(&r);
  json_decref(arr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t err;
  json_t *o = json_loadb((const char *)data, size, 0, &err);
  if (!o)
    return 0;
  acc_trainer_state_t st;
  memset(&st, 0, sizeof st);
  tr_history_from_json(&st, o);
  json_decref(o);
  write_back(&st);
  free(st.log_history);
  return 0;
}
