/*
 * acc_reduce.h — element-wise reduction kernels for every dtype × op,
 * in the shape Gloo's AllreduceOptions::Func expects:
 *   fn(out, in1, in2, n): out[i] = in1[i] OP in2[i], i < n (out may alias
 *   in1 or in2). fp16/bf16 are reduced through float. AVG is SUM here; the
 * caller divides by the world size afterwards (acc_reduce_scale). Internal.
 */
#ifndef ACC_REDUCE_H
#define ACC_REDUCE_H

#include <stddef.h>

#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*acc_reduce_fn)(void *out, const void *in1, const void *in2, size_t n);

/* The kernel for (dtype, op), or NULL for an unknown dtype/op. */
acc_reduce_fn acc_reduce_get(acc_dtype_t dtype, acc_op_t op);

/* buf[i] /= world for `count` elements (AVG after a SUM); integers
 * truncate toward zero as C division does. */
void acc_reduce_divide(void *buf, size_t count, acc_dtype_t dtype, int world);

/* out[i] = in[0][i] OP in[1][i] OP ... OP in[n-1][i] for i < count,
 * folded in the order of `in` (the same on every rank that calls it with
 * the same inputs); then, when divide_by > 1, out[i] /= divide_by (AVG).
 * f16/bf16 are accumulated and divided in f32 and rounded once at the
 * end; other dtypes use acc_reduce_get's kernels. `out` may alias any
 * input (blocks are accumulated aside first). n >= 1. For the
 * shared-memory collectives (acc_shm.c). */
void acc_reduce_many(void *out, const void *const *in, int n, size_t count, acc_dtype_t dtype,
                     acc_op_t op, int divide_by);


#ifdef __cplusplus
}
#endif

#endif /* ACC_REDUCE_H */
