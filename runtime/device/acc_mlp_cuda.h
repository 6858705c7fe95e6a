/*
 * acc_mlp_cuda.h — the MLP toolkit on a CUDA device (acc_mlp_cuda.cu):
 * the device half of acc_mlp.c, used when the model's accelerator has a
 * device (acc_device >= 0) and the build has a CUDA compiler
 * (NBFORK_CUDA_KERNELS). Same layout as the host model: one flat f32
 * parameter buffer and one flat f32 gradient buffer, per layer W
 * (nout × nin, row-major) then b (nout).
 *
 * Products go through cublasGemmEx with f32 accumulation
 * (CUBLAS_COMPUTE_32F): f32 inputs with precision "no" (no TF32, so the
 * result matches the CPU's sgemm to rounding); fp16/bf16 inputs (tensor
 * cores) under mixed precision, from a half copy of the f32 master
 * parameters refreshed each forward. Bias, ReLU, the rounding of each
 * layer's output and gradient to the half type (the weight gradient
 * too, before it is added to the f32 buffer, as acc_mlp.c does), the softmax
 * cross-entropy (f32) and the bias gradient are small kernels. Inputs
 * and labels are staged host -> device through pinned buffers.
 *
 * A training step waits for nothing (issue 25): forward and backward
 * only enqueue work; the logits and the loss stay on the device until
 * acc_mlp_dev_logits / acc_mlp_dev_loss bring them back (one stream
 * synchronization each), and the labels are checked on the host. The
 * only host wait of a step is for the previous step's upload out of a
 * pinned staging buffer before it is refilled (an event, normally long
 * complete).
 *
 * Every call runs on `stream` (a cudaStream_t; NULL = the default
 * stream: the accelerator's acc_get_stream), so the gradient all-reduce
 * of acc_backward is ordered after it (nbfork.h's stream contract).
 * Calls return ACC_OK or ACC_ERR_BACKEND / ACC_ERR_NO_MEMORY /
 * ACC_ERR_INVALID_ARGUMENT with the text in err. Internal.
 */
#ifndef ACC_MLP_CUDA_H
#define ACC_MLP_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_mlp_dev acc_mlp_dev_t;

/* 1 when this build has the device kernels, else 0 (acc_device_stub.c:
 * every other call then returns ACC_ERR_UNSUPPORTED / NULL and models
 * stay on the host). */
int acc_mlp_dev_available(void);

/* ACC_OK when cuBLAS (libcublas.so.<major>, opened on first use) is
 * there, else ACC_ERR_BACKEND / ACC_ERR_UNSUPPORTED with the reason in
 * err (the library's name and dlerror's text): acc_mlp_new then fails
 * (a model on a device has no host fallback). */
acc_result_t acc_mlp_dev_blas(char *err, size_t errlen);
/* A device model of layer sizes sizes[0..nlayers] for up to max_batch
 * rows, its parameters copied from the host buffer `params` (nparams
 * floats), gradients zero. NULL with err filled on failure. */
acc_mlp_dev_t *acc_mlp_dev_new(const int *sizes, int nlayers, int max_batch, const float *params,
                               size_t nparams, char *err, size_t errlen);
/* Frees everything (after synchronizing the device); NULL-safe, clears
 * *d_p. */
void acc_mlp_dev_destroy(acc_mlp_dev_t **d_p);
/* The flat device buffers (nparams floats each), owned by the model;
 * NULL while freed (acc_mlp_dev_buffer). */
float *acc_mlp_dev_params(acc_mlp_dev_t *d);
float *acc_mlp_dev_grads(acc_mlp_dev_t *d);
/* grads = 0 (asynchronous on `stream`; nothing when freed). */
acc_result_t acc_mlp_dev_zero_grad(acc_mlp_dev_t *d, void *stream, char *err, size_t errlen);
/* The forward, layer by layer, so that the caller can run a sharded
 * model's unit hooks around each layer (acc_mlp.c): forward_begin stages
 * `batch` host rows x (batch × sizes[0] floats; the caller may reuse x on
 * return) for precision `prec` on `stream`; forward_layer(l), for l = 0
 * .. nlayers-1 in order, computes layer l from its parameters at `wb`
 * (device memory, W then b: sizes[l+1] × (sizes[l] + 1) floats; the
 * model's buffer at its offset or any other copy). The logits (batch ×
 * sizes[nlayers]) stay on the device. Asynchronous on `stream`. Under
 * mixed precision each layer's half copy is rounded from wb just before
 * its use (one layer's worth of half memory, allocated at the first
 * half-precision forward, with one layer's weight-gradient scratch). */
acc_result_t acc_mlp_dev_forward_begin(acc_mlp_dev_t *d, const float *x, int batch,
                                       acc_precision_t prec, void *stream, char *err,
                                       size_t errlen);
acc_result_t acc_mlp_dev_forward_layer(acc_mlp_dev_t *d, int l, const float *wb, char *err,
                                       size_t errlen);
/* The last forward's logits into the host buffer `logits` (batch ×
 * sizes[nlayers] floats). Synchronizes the forward's stream. */
acc_result_t acc_mlp_dev_logits(acc_mlp_dev_t *d, float *logits, char *err, size_t errlen);
/* The backward, layer by layer: backward_begin computes the softmax
 * cross-entropy of the last forward against host `labels` (batch int64),
 * its gradient multiplied by `scale` (GradScaler); the per-row losses
 * stay on the device (acc_mlp_dev_loss). A label outside
 * 0..sizes[nlayers]-1 (checked on the host, before anything is
 * enqueued): ACC_ERR_INVALID_ARGUMENT, *bad_row = its row. Then for l =
 * nlayers-1 down to 0: backward_input(l) computes the gradient of layer
 * l's input from its parameters at `wb` (nothing for l = 0), then
 * backward_weights(l) adds layer l's weight and bias gradients into
 * `gwb` (device memory, W then b, as wb). The two products are
 * independent: their values do not depend on which runs first, and wb
 * is not read after backward_input. Asynchronous on `stream`. */
acc_result_t acc_mlp_dev_backward_begin(acc_mlp_dev_t *d, const int64_t *labels, float scale,
                                        int *bad_row, void *stream, char *err, size_t errlen);
acc_result_t acc_mlp_dev_backward_input(acc_mlp_dev_t *d, int l, const float *wb, char *err,
                                        size_t errlen);
acc_result_t acc_mlp_dev_backward_weights(acc_mlp_dev_t *d, int l, float *gwb, char *err,
                                          size_t errlen);
/* *loss = the mean over the batch of the last backward's loss (summed
 * in double, as acc_mlp.c does). Synchronizes the backward's stream. */
acc_result_t acc_mlp_dev_loss(acc_mlp_dev_t *d, float *loss, char *err, size_t errlen);
/* Copy the device parameters (what = 0) or gradients (1) into a host
 * buffer of nparams floats (zeros from a freed buffer), or (to_device =
 * 1) the host buffer into them (a freed buffer allocated again first).
 * Synchronous. For checkpoints and tests. */
/* Free (keep 0; after the device's pending work) or allocate zeroed
 * (keep 1; synchronous; nothing when it exists) the full parameter (what
 * 0) or gradient (1) buffer: stage 3 of a sharded device model holds
 * only its shards and one gathered layer (acc_shard.c). While freed, the
 * layer calls must be given other buffers. The pointer may change. */
acc_result_t acc_mlp_dev_buffer(acc_mlp_dev_t *d, int what, int keep, char *err, size_t errlen);
acc_result_t acc_mlp_dev_copy(acc_mlp_dev_t *d, int what, float *host, int to_device, char *err,
                              size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* ACC_MLP_CUDA_H */
