/*
 * acc_callbacks.h — firing the Trainer's events (acc_callbacks.c, after
 * Transformers' CallbackHandler), for the files that produce them: the
 * loop, evaluation, checkpoints and logging. Not installed.
 */
#ifndef ACC_CALLBACKS_H
#define ACC_CALLBACKS_H

#include <stddef.h>

#include "nbfork.h"

/* Call `which` (an offset into acc_trainer_callback_t) of every callback
 * of tr in order, with logs (may be NULL). */
void tr_fire(acc_trainer_t *tr, size_t which, const acc_metrics_t *logs);
#define TR_FIRE(tr, event, logs) tr_fire((tr), offsetof(acc_trainer_callback_t, event), (logs))

#endif
