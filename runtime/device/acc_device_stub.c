/*
 * acc_device_stub.c — the device toolkit's calls in a build without a
 * CUDA compiler (no NBFORK_CUDA_KERNELS): acc_mlp_dev_available says 0,
 * so models and optimizers stay on the host; the rest cannot be reached
 * and returns ACC_ERR_UNSUPPORTED.
 */
#include <stdio.h>

#include "acc_mlp_cuda.h"
#include "acc_optim_cuda.h"

static acc_result_t unsupported(char *err, size_t errlen) {
  if (err && errlen)
    snprintf(err, errlen, "nbfork was built without a CUDA compiler: no device kernels");
  return ACC_ERR_UNSUPPORTED;
}

int acc_mlp_dev_available(void) {
  return 0;
}

acc_mlp_dev_t *acc_mlp_dev_new(const int *sizes, int nlayers, int max_batch, const float *params,
                               size_t nparams, char *err, size_t errlen) {
  (void)sizes, (void)nlayers, (void)max_batch, (void)params, (void)nparams;
  unsupported(err, errlen);
  return NULL;
}

void acc_mlp_dev_destroy(acc_mlp_dev_t **d_p) {
  if (d_p)
    *d_p = NULL;
}

float *acc_mlp_dev_params(acc_mlp_dev_t *d) {
  (void)d;
  return NULL;
}

float *acc_mlp_dev_grads(acc_mlp_dev_t *d) {
  (void)d;
  return NULL;
}

acc_result_t acc_mlp_dev_zero_grad(acc_mlp_dev_t *d, void *stream, char *err, size_t errlen) {
  (void)d, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_forward_begin(acc_mlp_dev_t *d, const float *x, int batch,
                                       acc_precision_t prec, void *stream, char *err,
                                       size_t errlen) {
  (void)d, (void)x, (void)batch, (void)prec, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_forward_layer(acc_mlp_dev_t *d, int l, const float *wb, char *err,
                                       size_t errlen) {
  (void)d, (void)l, (void)wb;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_logits(acc_mlp_dev_t *d, float *logits, char *err, size_t errlen) {
  (void)d, (void)logits;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_backward_begin(acc_mlp_dev_t *d, const int64_t *labels, float scale,
                                        int *bad_row, void *stream, char *err, size_t errlen) {
  (void)d, (void)labels, (void)scale, (void)bad_row, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_backward_input(acc_mlp_dev_t *d, int l, const float *wb, char *err,
                                        size_t errlen) {
  (void)d, (void)l, (void)wb;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_backward_weights(acc_mlp_dev_t *d, int l, float *gwb, char *err,
                                          size_t errlen) {
  (void)d, (void)l, (void)gwb;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_loss(acc_mlp_dev_t *d, float *loss, char *err, size_t errlen) {
  (void)d, (void)loss;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_buffer(acc_mlp_dev_t *d, int what, int keep, char *err, size_t errlen) {
  (void)d, (void)what, (void)keep;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_copy(acc_mlp_dev_t *d, int what, float *host, int to_device, char *err,
                              size_t errlen) {
  (void)d, (void)what, (void)host, (void)to_device;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_state(float **buf, size_t n, char *err, size_t errlen) {
  (void)buf, (void)n;
  return unsupported(err, errlen);
}

void acc_optim_cuda_free(float **buf) {
  (void)buf;
}

acc_result_t acc_optim_cuda_sgd(float *p, const float *g, float *buf, size_t n, float lr,
                                float momentum, float weight_decay, int first, void *stream,
                                char *err, size_t errlen) {
  (void)p, (void)g, (void)buf, (void)n, (void)lr, (void)momentum, (void)weight_decay, (void)first;
  (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay,
                                  float step_size, float inv_sqrt_bc2, void *stream, char *err,
                                  size_t errlen) {
  (void)p, (void)g, (void)m, (void)v, (void)n, (void)lr, (void)beta1, (void)beta2, (void)eps;
  (void)weight_decay, (void)step_size, (void)inv_sqrt_bc2, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_copy(float *host, float *dev, size_t n, int to_device, char *err,
                                 size_t errlen) {
  (void)host, (void)dev, (void)n, (void)to_device;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_accumulate(float *g, float *prev, size_t n, float inv, int prev_zero,
                                       int save, void *stream, char *err, size_t errlen) {
  (void)g, (void)prev, (void)n, (void)inv, (void)prev_zero, (void)save, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_clip_norm(float *g, size_t n, double max_norm, float *scratch,
                                      void *stream, double *norm, char *err, size_t errlen) {
  (void)g, (void)n, (void)max_norm, (void)scratch, (void)stream, (void)norm;
  return unsupported(err, errlen);
}

acc_result_t acc_mlp_dev_blas(char *err, size_t errlen) {
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_zero(float *buf, size_t n, void *stream, char *err, size_t errlen) {
  (void)buf, (void)n, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_sumsq(float *const *g, const size_t *n, int k, float *scratch,
                                  void *stream, double *ss, char *err, size_t errlen) {
  (void)g, (void)n, (void)k, (void)scratch, (void)stream, (void)ss;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_scale(float *g, size_t n, float coef, void *stream, char *err,
                                  size_t errlen) {
  (void)g, (void)n, (void)coef, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_copy_async(float *dst, const float *src, size_t n, void *stream,
                                       char *err, size_t errlen) {
  (void)dst, (void)src, (void)n, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_copy_host_async(float *dst, const float *src, size_t n, int to_device,
                                            void *stream, char *err, size_t errlen) {
  (void)dst, (void)src, (void)n, (void)to_device, (void)stream;
  return unsupported(err, errlen);
}

acc_result_t acc_optim_cuda_sync(void *stream, char *err, size_t errlen) {
  (void)stream;
  return unsupported(err, errlen);
}
