/*
 * ln_debug — ACCELERATE_DEBUG_MODE's test launch.
 *
 * Before the real launch, fork the same number of workers; each
 * initializes CUDA (when GPUs are used), selects its device (LOCAL_RANK)
 * and runs one all-reduce across all ranks through the runtime. A failure
 * is reported with the rank, the step and the reason, e.g.
 * "rank 1, step cuInit: initialization error (CUDA_ERROR_NOT_INITIALIZED):
 * CUDA was initialized in the kernel process by cell [3] before the fork".
 * Accelerate's debug mode instead wraps the real launch in a barrier
 * check; a separate test launch finds the fault before any training code
 * runs.
 */
#ifndef LN_DEBUG_H
#define LN_DEBUG_H

#include "ln_launch.h"

/* Returns 0 when every rank passed, else -1 with *diag (caller frees). */
int ln_debug_check(const ln_options_t *o, ln_context_t *ctx, int use_gpu, char **diag);

#endif
