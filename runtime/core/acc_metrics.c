/*
 * acc_metrics.c — Accelerate's gather_for_metrics for int64 values
 * (accelerate/accelerator.py gather_for_metrics: on the last batch keep
 * only the first `len(dataset) % total_batch_size` gathered samples, the
 * rest being the padding duplicates the sampler added; see acc_sampler.c
 * for why they are exactly the tail).
 */
#include "acc_internal.h"

size_t acc_gather_for_metrics(acc_t *acc, const int64_t *values, size_t count, int64_t *out,
                              int is_last_batch, size_t dataset_size) {
  if (!acc || (count && (!values || !out)))
    return (size_t)-1;
  if (acc_all_gather(acc, values, out, count, ACC_I64) != ACC_OK)
    return (size_t)-1;
  size_t total = count * (size_t)acc->world;
  if (!is_last_batch || total == 0)
    return total;
  size_t rem = dataset_size % total;
  return rem ? rem : total;
}
