/*
 * acc_check.h — the two macros that pass an acc_result_t up (the error
 * discipline is in acc_internal.h). Apart from it so that C++ (the Gloo
 * shim, the CUDA files) can use them: acc_internal.h is C99 (restrict).
 *
 * ACC_CHECK(expr): evaluate `expr` (an acc_result_t) once; if it is not
 * ACC_OK, return it from the enclosing function unchanged. It adds no
 * text and prints nothing: the failing call already stored why, and a
 * second message would replace the more precise first one.
 *
 * ACC_CHECK_GOTO(expr, label): evaluate `expr` into the enclosing
 * function's local `acc_result_t r`; if it is not ACC_OK, jump to
 * `label` (the function's one cleanup label, which frees and returns r).
 */
#ifndef ACC_CHECK_H
#define ACC_CHECK_H

#define ACC_CHECK(expr)                                                                            \
  do {                                                                                             \
    acc_result_t acc_check_r_ = (expr);                                                            \
    if (acc_check_r_ != ACC_OK)                                                                    \
      return acc_check_r_;                                                                         \
  } while (0)

#define ACC_CHECK_GOTO(expr, label)                                                                \
  do {                                                                                             \
    r = (expr);                                                                                    \
    if (r != ACC_OK)                                                                               \
      goto label;                                                                                  \
  } while (0)

#endif
