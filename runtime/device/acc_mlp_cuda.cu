/*
 * acc_mlp_cuda.cu — the MLP toolkit on a CUDA device (see
 * acc_mlp_cuda.h): cuBLAS products, small kernels for the rest, the same
 * arithmetic as acc_mlp.c (nn.Linear + ReLU, softmax cross-entropy,
 * torch.autocast-style rounding under mixed precision).
 *
 * Row-major products through column-major cuBLAS: a row-major R × C
 * matrix is a column-major C × R one, so row-major Y = A · B is
 * column-major Y^T = B^T · A^T — every call below names its row-major
 * product in a comment and passes the operands in swapped order.
 */
#include "acc_mlp_cuda.h"

#include <cstdio>
#include <cstring>
#include <new>

#include <dlfcn.h>
#include <pthread.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "acc_check.h"
#include "acc_cuda_kernels.cuh"

struct acc_mlp_dev {
  int nlayers, max_batch, batch, widest;
  int *sizes;
  size_t lmax, wmax; /* the largest layer's elements (W and b), its weight's */
  size_t nparams, *w_off, *b_off;
  acc_precision_t prec; /* of the last forward */
  cublasHandle_t blas;
  float *params, *grads; /* the flat buffers; NULL while freed (acc_mlp_dev_buffer) */
  float *x;              /* input, max_batch × sizes[0] */
  float **act;           /* act[l], l = 1..nlayers (post-ReLU; logits last) */
  float *dz_a, *dz_b;    /* backward, max_batch × widest */
  int dz_b_cur;          /* the backward's current dz is dz_b (else dz_a) */
  /* mixed precision, allocated at the first half-precision forward: one
   * layer's weight gradient before rounding (wmax floats) and one layer's
   * half parameters (lmax; refreshed before each use of a layer, so a
   * layer may be read from any buffer: the unit views of acc_mlp.c) */
  float *gtmp;
  void *wh;
  /* the half copies (2 bytes per element) of the input and activations */
  void *xh, **acth, *dzh_a, *dzh_b;
  int64_t *labels;
  float *row_loss; /* max_batch: the last backward's per-row loss */
  /* pinned host staging; x_staged / labels_staged are recorded after
   * each upload from h_x / h_labels, which the next upload waits for
   * before it overwrites them (the copy is asynchronous: no step waits
   * for the device otherwise) */
  float *h_x, *h_logits, *h_loss;
  int64_t *h_labels;
  cudaEvent_t x_staged, labels_staged;
  int x_pending, labels_pending;
  cudaStream_t fwd_stream, bwd_stream; /* of the last forward / backward */
  int loss_batch;                      /* rows of row_loss (the last backward's batch) */
};

namespace {

/* x rounded to the half type of prec (identity with "no"), and stored. */
__device__ float round_half(float x, int prec) {
  if (prec == ACC_PRECISION_FP16)
    return __half2float(__float2half_rn(x));
  if (prec == ACC_PRECISION_BF16)
    return __bfloat162float(__float2bfloat16_rn(x));
  return x;
}
__device__ void store_half(void *h, size_t i, float x, int prec) {
  if (prec == ACC_PRECISION_FP16)
    static_cast<__half *>(h)[i] = __float2half_rn(x);
  else if (prec == ACC_PRECISION_BF16)
    static_cast<__nv_bfloat16 *>(h)[i] = __float2bfloat16_rn(x);
}

__global__ void k_to_half(void *dst, const float *src, size_t n, int prec) {
  FOR_EACH_ELEMENT(i, n) {
    store_half(dst, i, src[i], prec);
  }
}

/* out (B × nout) += bias (rounded like the half parameters), then the
 * output rounded to the half type, ReLU except on the last layer, and its
 * half copy for the next product. */
__global__ void k_bias_act(float *out, const float *b, size_t rows, int nout, int relu, int prec,
                           void *outh) {
  FOR_EACH_ELEMENT(i, rows * (size_t)nout) {
    float v = round_half(out[i] + round_half(b[i % nout], prec), prec);
    if (relu)
      v = v > 0.0f ? v : 0.0f;
    out[i] = v;
    store_half(outh, i, v, prec);
  }
}

/* One thread per row: dz = scale (softmax(z) - onehot(y)) / B, rounded
 * to the half type, and the row's loss (f32, autocast's fp32 list). The
 * labels were checked on the host; a label out of range all the same
 * leaves its row's dz and loss zero rather than read outside z. */
__global__ void k_xent(const float *z, const int64_t *y, int B, int C, float scale, int prec,
                       float *dz, void *dzh, float *row_loss) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= B)
    return;
  const float *zr = z + (size_t)r * C;
  float *d = dz + (size_t)r * C;
  const int64_t label = y[r];
  if (label < 0 || label >= C) {
    for (int c = 0; c < C; c++)
      d[c] = 0.0f;
    row_loss[r] = 0.0f;
    return;
  }
  float mx = zr[0];
  for (int c = 1; c < C; c++)
    mx = zr[c] > mx ? zr[c] : mx;
  float s = 0.0f;
  for (int c = 0; c < C; c++)
    s += expf(zr[c] - mx);
  row_loss[r] = logf(s) + mx - zr[label];
  const float invB = 1.0f / (float)B, inv = invB / s;
  for (int c = 0; c < C; c++) {
    float v = expf(zr[c] - mx) * inv - (c == label ? invB : 0.0f);
    v = round_half(v * scale, prec);
    d[c] = v;
    store_half(dzh, (size_t)r * C + c, v, prec);
  }
}

/* gb[c] += column sums of dz (B × nout), rounded to the half type. */
__global__ void k_bias_grad(const float *dz, int B, int nout, int prec, float *gb) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= nout)
    return;
  float s = 0.0f;
  for (int r = 0; r < B; r++)
    s += dz[(size_t)r * nout + c];
  gb[c] += round_half(s, prec);
}

/* g += t rounded to the half type: the weight gradient of the half copy,
 * added to the f32 master gradient (the AccumulateGrad of a cast
 * parameter, acc_mlp.c's weight_grad_rows), so an fp16 overflow becomes
 * inf there as on the CPU and in PyTorch. */
__global__ void k_add_rounded(float *g, const float *t, size_t n, int prec) {
  FOR_EACH_ELEMENT(i, n) {
    g[i] += round_half(t[i], prec);
  }
}

/* dprev rounded to the half type and masked by ReLU' of the layer's
 * output (act > 0), and its half copy. */
__global__ void k_relu_back(float *dprev, const float *act, size_t n, int prec, void *dh) {
  FOR_EACH_ELEMENT(i, n) {
    float v = act[i] > 0.0f ? round_half(dprev[i], prec) : 0.0f;
    dprev[i] = v;
    store_half(dh, i, v, prec);
  }
}

void set_err(char *err, size_t errlen, const char *what, const char *detail) {
  if (err && errlen)
    std::snprintf(err, errlen, "%s: %s", what, detail);
}

/* cuBLAS is opened on the first device model, not linked: its libraries
 * (libcublasLt is about half a gigabyte) cost every process that loads
 * libnbfork some 80 ms of start-up, GPU or not (measured on the test VM:
 * an empty program linked with -lcublas starts in 77 ms, 1 ms without) —
 * the executor, every worker program, every `nbfork` command. Only the
 * five calls below are used. */
struct blas_api {
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void *, const void *, cudaDataType, int, const void *,
                            cudaDataType, int, const void *, void *, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t);
  const char *(*status_string)(cublasStatus_t);
};
blas_api g_blas;
char g_blas_error[512]; /* why it could not be opened; "" when it was */
pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

#define NBF_STR2(x) #x
#define NBF_STR(x) NBF_STR2(x)

void blas_open(void) {
  const char *lib = "libcublas.so." NBF_STR(CUBLAS_VER_MAJOR);
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    std::snprintf(g_blas_error, sizeof g_blas_error, "cannot open %s: %s", lib,
                  why ? why : "not found");
    return;
  }
  const char *names[] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                         "cublasGemmEx", "cublasGetStatusString"};
  void **slots[] = {(void **)&g_blas.create, (void **)&g_blas.destroy, (void **)&g_blas.set_stream,
                    (void **)&g_blas.gemm_ex, (void **)&g_blas.status_string};
  for (int i = 0; i < 5; i++)
    if (!(*slots[i] = dlsym(h, names[i]))) {
      std::snprintf(g_blas_error, sizeof g_blas_error, "%s has no %s", lib, names[i]);
      return;
    }
}

/* ACC_OK once cuBLAS is open, else ACC_ERR_BACKEND naming the library. */
acc_result_t blas_ready(char *err, size_t errlen) {
  pthread_once(&g_blas_once, blas_open);
  if (!g_blas_error[0])
    return ACC_OK;
  set_err(err, errlen, "cuBLAS", g_blas_error);
  return ACC_ERR_BACKEND;
}

acc_result_t blas_check(cublasStatus_t s, const char *what, char *err, size_t errlen) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return ACC_OK;
  set_err(err, errlen, what, g_blas.status_string ? g_blas.status_string(s) : "cuBLAS error");
  return s == CUBLAS_STATUS_ALLOC_FAILED ? ACC_ERR_NO_MEMORY : ACC_ERR_BACKEND;
}

cudaDataType_t gemm_type(acc_precision_t prec) {
  return prec == ACC_PRECISION_FP16   ? CUDA_R_16F
         : prec == ACC_PRECISION_BF16 ? CUDA_R_16BF
                                      : CUDA_R_32F;
}

/* Column-major C (m × n, f32) = alpha op(A) op(B) + beta C, A and B of
 * the model's product type, f32 accumulation. */
acc_result_t gemm(acc_mlp_dev_t *d, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                  const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc,
                  char *err, size_t errlen) {
  const float alpha = 1.0f;
  const cudaDataType_t t = gemm_type(d->prec);
  return blas_check(g_blas.gemm_ex(d->blas, ta, tb, m, n, k, &alpha, A, t, lda, B, t, ldb, &beta, C,
                                   CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx", err, errlen);
}

size_t half_bytes(size_t n) {
  return n * 2;
}

/* Everything allocated once for max_batch rows: a step allocates
 * nothing. */
acc_result_t alloc_all(acc_mlp_dev_t *d, char *err, size_t errlen) {
  const size_t B = (size_t)d->max_batch, wide = B * (size_t)d->widest;
  const size_t nx = B * (size_t)d->sizes[0], C = (size_t)d->sizes[d->nlayers];
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->params, d->nparams * sizeof(float)), "cudaMalloc", err,
                           errlen));
  ACC_CHECK(
      acc_cuda_check(cudaMalloc(&d->grads, d->nparams * sizeof(float)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->x, nx * sizeof(float)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->dz_a, wide * sizeof(float)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->dz_b, wide * sizeof(float)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->xh, half_bytes(nx)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->dzh_a, half_bytes(wide)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->dzh_b, half_bytes(wide)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->labels, B * sizeof(int64_t)), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMalloc(&d->row_loss, B * sizeof(float)), "cudaMalloc", err, errlen));
  for (int l = 1; l <= d->nlayers; l++) {
    ACC_CHECK(acc_cuda_check(cudaMalloc(&d->act[l], B * (size_t)d->sizes[l] * sizeof(float)),
                             "cudaMalloc", err, errlen));
    ACC_CHECK(acc_cuda_check(cudaMalloc(&d->acth[l], half_bytes(B * (size_t)d->sizes[l])),
                             "cudaMalloc", err, errlen));
  }
  ACC_CHECK(
      acc_cuda_check(cudaMallocHost(&d->h_x, nx * sizeof(float)), "cudaMallocHost", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMallocHost(&d->h_logits, B * C * sizeof(float)), "cudaMallocHost",
                           err, errlen));
  ACC_CHECK(
      acc_cuda_check(cudaMallocHost(&d->h_loss, B * sizeof(float)), "cudaMallocHost", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMallocHost(&d->h_labels, B * sizeof(int64_t)), "cudaMallocHost", err,
                           errlen));
  ACC_CHECK(acc_cuda_check(cudaEventCreateWithFlags(&d->x_staged, cudaEventDisableTiming),
                           "cudaEventCreate", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaEventCreateWithFlags(&d->labels_staged, cudaEventDisableTiming),
                           "cudaEventCreate", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMemset(d->grads, 0, d->nparams * sizeof(float)), "cudaMemset", err,
                           errlen));
  ACC_CHECK(blas_ready(err, errlen));
  return blas_check(g_blas.create(&d->blas), "cublasCreate", err, errlen);
}

} // namespace

extern "C" int acc_mlp_dev_available(void) {
  return 1;
}

extern "C" void acc_mlp_dev_destroy(acc_mlp_dev_t **d_p) {
  if (!d_p || !*d_p)
    return;
  acc_mlp_dev_t *d = *d_p;
  *d_p = nullptr;
  cudaDeviceSynchronize(); /* no kernel may still use what is freed */
  if (d->blas)
    g_blas.destroy(d->blas); /* a handle exists only if cuBLAS was opened */
  void *dev[] = {d->params, d->grads, d->x,     d->dz_a,  d->dz_b,   d->gtmp,
                 d->wh,     d->xh,    d->dzh_a, d->dzh_b, d->labels, d->row_loss};
  for (void *p : dev)
    cudaFree(p);
  if (d->act)
    for (int l = 1; l <= d->nlayers; l++)
      cudaFree(d->act[l]), cudaFree(d->acth[l]);
  void *pinned[] = {d->h_x, d->h_logits, d->h_loss, d->h_labels};
  for (void *p : pinned)
    cudaFreeHost(p);
  if (d->x_staged)
    cudaEventDestroy(d->x_staged);
  if (d->labels_staged)
    cudaEventDestroy(d->labels_staged);
  delete[] d->act;
  delete[] d->acth;
  delete[] d->sizes;
  delete[] d->w_off;
  delete[] d->b_off;
  delete d;
}

extern "C" acc_mlp_dev_t *acc_mlp_dev_new(const int *sizes, int nlayers, int max_batch,
                                          const float *params, size_t nparams, char *err,
                                          size_t errlen) {
  acc_mlp_dev_t *d = new (std::nothrow) acc_mlp_dev_t();
  if (!d) {
    set_err(err, errlen, "acc_mlp_new", "out of memory");
    return nullptr;
  }
  d->nlayers = nlayers;
  d->max_batch = max_batch;
  d->nparams = nparams;
  d->sizes = new (std::nothrow) int[nlayers + 1];
  d->w_off = new (std::nothrow) size_t[nlayers];
  d->b_off = new (std::nothrow) size_t[nlayers];
  d->act = new (std::nothrow) float *[nlayers + 1]();
  d->acth = new (std::nothrow) void *[nlayers + 1]();
  if (!d->sizes || !d->w_off || !d->b_off || !d->act || !d->acth) {
    set_err(err, errlen, "acc_mlp_new", "out of memory");
    acc_mlp_dev_destroy(&d);
    return nullptr;
  }
  std::memcpy(d->sizes, sizes, (size_t)(nlayers + 1) * sizeof(int));
  size_t off = 0;
  d->widest = 1;
  for (int l = 0; l < nlayers; l++) {
    d->w_off[l] = off;
    off += (size_t)sizes[l + 1] * (size_t)sizes[l];
    d->b_off[l] = off;
    off += (size_t)sizes[l + 1];
    d->widest = sizes[l + 1] > d->widest ? sizes[l + 1] : d->widest;
    const size_t w = (size_t)sizes[l + 1] * (size_t)sizes[l];
    d->wmax = w > d->wmax ? w : d->wmax;
    d->lmax = w + (size_t)sizes[l + 1] > d->lmax ? w + (size_t)sizes[l + 1] : d->lmax;
  }
  if (off != nparams) {
    set_err(err, errlen, "acc_mlp_new", "parameter count does not match the sizes");
    acc_mlp_dev_destroy(&d);
    return nullptr;
  }
  /* the zeroed gradients and the uploaded parameters (legacy stream,
   * pageable: the copy may return before its DMA ends) are complete for
   * any stream, a non-blocking one included, once the device is idle */
  if (alloc_all(d, err, errlen) != ACC_OK ||
      acc_cuda_check(cudaMemcpy(d->params, params, nparams * sizeof(float), cudaMemcpyHostToDevice),
                     "cudaMemcpy", err, errlen) != ACC_OK ||
      acc_cuda_check(cudaDeviceSynchronize(), "uploading the parameters", err, errlen) != ACC_OK) {
    acc_mlp_dev_destroy(&d);
    return nullptr;
  }
  return d;
}

extern "C" float *acc_mlp_dev_params(acc_mlp_dev_t *d) {
  return d ? d->params : nullptr;
}

extern "C" float *acc_mlp_dev_grads(acc_mlp_dev_t *d) {
  return d ? d->grads : nullptr;
}

extern "C" acc_result_t acc_mlp_dev_zero_grad(acc_mlp_dev_t *d, void *stream, char *err,
                                              size_t errlen) {
  if (!d->grads) /* freed while sharded: nothing holds gradients there */
    return ACC_OK;
  return acc_cuda_check(
      cudaMemsetAsync(d->grads, 0, d->nparams * sizeof(float), static_cast<cudaStream_t>(stream)),
      "cudaMemsetAsync", err, errlen);
}

/* Copy n bytes of host memory `src` to device `dst` on `st` through the
 * pinned staging buffer `stage`: first wait for the previous upload from
 * `stage` (recorded in `ev`; normally long done, since it started the
 * previous step), then copy and record. The caller's buffer is free
 * again on return; the device copy is asynchronous. */
static acc_result_t stage_upload(void *dst, void *stage, const void *src, size_t n, cudaEvent_t ev,
                                 int *pending, cudaStream_t st, const char *what, char *err,
                                 size_t errlen) {
  if (*pending)
    ACC_CHECK(acc_cuda_check(cudaEventSynchronize(ev), what, err, errlen));
  *pending = 0;
  std::memcpy(stage, src, n);
  ACC_CHECK(acc_cuda_check(cudaMemcpyAsync(dst, stage, n, cudaMemcpyHostToDevice, st), what, err,
                           errlen));
  ACC_CHECK(acc_cuda_check(cudaEventRecord(ev, st), what, err, errlen));
  *pending = 1;
  return ACC_OK;
}

/* The half-precision buffers of one layer, at the first half-precision
 * forward (a model trained in f32 never holds them). */
static acc_result_t half_buffers(acc_mlp_dev_t *d, char *err, size_t errlen) {
  if (!d->wh)
    ACC_CHECK(acc_cuda_check(cudaMalloc(&d->wh, half_bytes(d->lmax)), "cudaMalloc", err, errlen));
  if (!d->gtmp)
    ACC_CHECK(
        acc_cuda_check(cudaMalloc(&d->gtmp, d->wmax * sizeof(float)), "cudaMalloc", err, errlen));
  return ACC_OK;
}

/* Layer l's parameters at wb (W then b, f32) as the product's operand:
 * wb itself, or under mixed precision its half copy in wh (rounded from
 * wb now: elementwise, so a layer refreshed on its own equals the whole
 * buffer rounded at once). */
static const void *layer_operand(acc_mlp_dev_t *d, int l, const float *wb, cudaStream_t st) {
  if (d->prec == ACC_PRECISION_NO)
    return wb;
  const size_t n = (size_t)d->sizes[l + 1] * (size_t)(d->sizes[l] + 1);
  k_to_half<<<acc_blocks_for(n), 256, 0, st>>>(d->wh, wb, n, (int)d->prec);
  return d->wh;
}

extern "C" acc_result_t acc_mlp_dev_forward_begin(acc_mlp_dev_t *d, const float *x, int batch,
                                                  acc_precision_t prec, void *stream, char *err,
                                                  size_t errlen) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const size_t nx = (size_t)batch * (size_t)d->sizes[0];
  d->batch = batch;
  d->prec = prec;
  d->fwd_stream = st;
  ACC_CHECK(blas_check(g_blas.set_stream(d->blas, st), "cublasSetStream", err, errlen));
  /* pinned staging: the copy is a DMA, not a pageable bounce */
  ACC_CHECK(stage_upload(d->x, d->h_x, x, nx * sizeof(float), d->x_staged, &d->x_pending, st,
                         "staging the batch", err, errlen));
  if (prec != ACC_PRECISION_NO) {
    ACC_CHECK(half_buffers(d, err, errlen));
    k_to_half<<<acc_blocks_for(nx), 256, 0, st>>>(d->xh, d->x, nx, (int)prec);
  }
  return acc_cuda_check(cudaGetLastError(), "forward kernels", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_forward_layer(acc_mlp_dev_t *d, int l, const float *wb,
                                                  char *err, size_t errlen) {
  cudaStream_t st = d->fwd_stream;
  const int B = d->batch, nin = d->sizes[l], nout = d->sizes[l + 1], p = (int)d->prec;
  const bool half = d->prec != ACC_PRECISION_NO;
  const void *in = l == 0 ? (half ? d->xh : static_cast<const void *>(d->x))
                          : (half ? d->acth[l] : static_cast<const void *>(d->act[l]));
  const void *w = layer_operand(d, l, wb, st);
  /* out (B × nout) = in (B × nin) · W^T (W: nout × nin) */
  ACC_CHECK(gemm(d, CUBLAS_OP_T, CUBLAS_OP_N, nout, B, nin, w, nin, in, nin, 0.0f, d->act[l + 1],
                 nout, err, errlen));
  const size_t n = (size_t)B * (size_t)nout;
  k_bias_act<<<acc_blocks_for(n), 256, 0, st>>>(d->act[l + 1], wb + (size_t)nout * (size_t)nin,
                                                (size_t)B, nout, l < d->nlayers - 1, p,
                                                d->acth[l + 1]);
  return acc_cuda_check(cudaGetLastError(), "forward kernels", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_logits(acc_mlp_dev_t *d, float *logits, char *err,
                                           size_t errlen) {
  const size_t nl = (size_t)d->batch * (size_t)d->sizes[d->nlayers];
  ACC_CHECK(acc_cuda_check(cudaMemcpyAsync(d->h_logits, d->act[d->nlayers], nl * sizeof(float),
                                           cudaMemcpyDeviceToHost, d->fwd_stream),
                           "copying the logits", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaStreamSynchronize(d->fwd_stream), "forward", err, errlen));
  std::memcpy(logits, d->h_logits, nl * sizeof(float));
  return ACC_OK;
}

/* The loss gradient: labels staged, k_xent (per-row losses stay on the
 * device until acc_mlp_dev_loss). */
static acc_result_t loss_grad(acc_mlp_dev_t *d, const int64_t *labels, float scale, cudaStream_t st,
                              char *err, size_t errlen) {
  const int B = d->batch, C = d->sizes[d->nlayers];
  ACC_CHECK(stage_upload(d->labels, d->h_labels, labels, (size_t)B * sizeof(int64_t),
                         d->labels_staged, &d->labels_pending, st, "staging the labels", err,
                         errlen));
  k_xent<<<(B + 127) / 128, 128, 0, st>>>(d->act[d->nlayers], d->labels, B, C, scale, (int)d->prec,
                                          d->dz_a, d->dzh_a, d->row_loss);
  return acc_cuda_check(cudaGetLastError(), "cross-entropy kernel", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_backward_begin(acc_mlp_dev_t *d, const int64_t *labels,
                                                   float scale, int *bad_row, void *stream,
                                                   char *err, size_t errlen) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int B = d->batch, C = d->sizes[d->nlayers];
  /* the labels are host memory: checked here, so that no step reads a
   * flag back from the device */
  for (int r = 0; r < B; r++)
    if (labels[r] < 0 || labels[r] >= C) {
      *bad_row = r;
      set_err(err, errlen, "acc_mlp_backward_xent", "a label is not a class index");
      return ACC_ERR_INVALID_ARGUMENT;
    }
  d->bwd_stream = st;
  d->loss_batch = B;
  d->dz_b_cur = 0;
  ACC_CHECK(blas_check(g_blas.set_stream(d->blas, st), "cublasSetStream", err, errlen));
  return loss_grad(d, labels, scale, st, err, errlen);
}

/* The backward's current dz (f32 and half) and the other pair (dprev). */
static void dz_pair(acc_mlp_dev_t *d, float **dz, void **dzh, float **dprev, void **dprevh) {
  const int b = d->dz_b_cur;
  *dz = b ? d->dz_b : d->dz_a, *dzh = b ? d->dzh_b : d->dzh_a;
  *dprev = b ? d->dz_a : d->dz_b, *dprevh = b ? d->dzh_a : d->dzh_b;
}

extern "C" acc_result_t acc_mlp_dev_backward_input(acc_mlp_dev_t *d, int l, const float *wb,
                                                   char *err, size_t errlen) {
  if (l == 0)
    return ACC_OK; /* the input needs no gradient */
  cudaStream_t st = d->bwd_stream;
  const int B = d->batch, nin = d->sizes[l], nout = d->sizes[l + 1];
  const bool half = d->prec != ACC_PRECISION_NO;
  float *dz, *dprev;
  void *dzh, *dprevh;
  dz_pair(d, &dz, &dzh, &dprev, &dprevh);
  const void *dzo = half ? dzh : static_cast<const void *>(dz);
  const void *w = layer_operand(d, l, wb, st);
  /* dprev (B × nin) = dz (B × nout) · W (nout × nin) */
  ACC_CHECK(gemm(d, CUBLAS_OP_N, CUBLAS_OP_N, nin, B, nout, w, nin, dzo, nout, 0.0f, dprev, nin,
                 err, errlen));
  const size_t n = (size_t)B * (size_t)nin;
  k_relu_back<<<acc_blocks_for(n), 256, 0, st>>>(dprev, d->act[l], n, (int)d->prec, dprevh);
  return acc_cuda_check(cudaGetLastError(), "backward kernels", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_backward_weights(acc_mlp_dev_t *d, int l, float *gwb, char *err,
                                                     size_t errlen) {
  cudaStream_t st = d->bwd_stream;
  const int B = d->batch, nin = d->sizes[l], nout = d->sizes[l + 1], p = (int)d->prec;
  const bool half = d->prec != ACC_PRECISION_NO;
  float *dz, *dprev;
  void *dzh, *dprevh;
  dz_pair(d, &dz, &dzh, &dprev, &dprevh);
  const void *in = l == 0 ? (half ? d->xh : static_cast<const void *>(d->x))
                          : (half ? d->acth[l] : static_cast<const void *>(d->act[l]));
  const void *dzo = half ? dzh : static_cast<const void *>(dz);
  /* dW (nout × nin) += dz^T (nout × B) · in (B × nin); under mixed
   * precision the product is rounded to the half type before it is
   * added (as on the CPU) */
  ACC_CHECK(gemm(d, CUBLAS_OP_N, CUBLAS_OP_T, nin, nout, B, in, nin, dzo, nout, half ? 0.0f : 1.0f,
                 half ? d->gtmp : gwb, nin, err, errlen));
  const size_t nw = (size_t)nout * (size_t)nin;
  if (half)
    k_add_rounded<<<acc_blocks_for(nw), 256, 0, st>>>(gwb, d->gtmp, nw, p);
  k_bias_grad<<<(nout + 127) / 128, 128, 0, st>>>(dz, B, nout, p, gwb + nw);
  d->dz_b_cur ^= l > 0; /* layer l - 1's dz is the dprev just computed */
  return acc_cuda_check(cudaGetLastError(), "backward kernels", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_loss(acc_mlp_dev_t *d, float *loss, char *err, size_t errlen) {
  const int B = d->loss_batch;
  ACC_CHECK(acc_cuda_check(cudaMemcpyAsync(d->h_loss, d->row_loss, (size_t)B * sizeof(float),
                                           cudaMemcpyDeviceToHost, d->bwd_stream),
                           "copying the loss", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaStreamSynchronize(d->bwd_stream), "cross-entropy", err, errlen));
  double s = 0.0; /* the mean as the CPU model takes it: a double sum */
  for (int r = 0; r < B; r++)
    s += d->h_loss[r];
  *loss = (float)(s / B);
  return ACC_OK;
}

extern "C" acc_result_t acc_mlp_dev_buffer(acc_mlp_dev_t *d, int what, int keep, char *err,
                                           size_t errlen) {
  float **buf = what ? &d->grads : &d->params;
  if (!keep) {
    /* no kernel may still read or write it */
    ACC_CHECK(acc_cuda_check(cudaDeviceSynchronize(), "synchronizing", err, errlen));
    cudaFree(*buf);
    *buf = nullptr;
    return ACC_OK;
  }
  if (*buf)
    return ACC_OK;
  const size_t bytes = d->nparams * sizeof(float);
  ACC_CHECK(acc_cuda_check(cudaMalloc(buf, bytes), "cudaMalloc", err, errlen));
  ACC_CHECK(acc_cuda_check(cudaMemset(*buf, 0, bytes), "cudaMemset", err, errlen));
  /* cudaMemset may return before it is done, and the legacy stream does
   * not order a non-blocking one: the zeros are there for any stream */
  return acc_cuda_check(cudaDeviceSynchronize(), "cudaMemset", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_copy(acc_mlp_dev_t *d, int what, float *host, int to_device,
                                         char *err, size_t errlen) {
  const size_t bytes = d->nparams * sizeof(float);
  if (to_device) /* a freed buffer is allocated again to take the copy */
    ACC_CHECK(acc_mlp_dev_buffer(d, what, 1, err, errlen));
  float *dev = what ? d->grads : d->params;
  ACC_CHECK(acc_cuda_check(cudaDeviceSynchronize(), "synchronizing", err, errlen));
  if (!dev) { /* freed (a sharded model's): its elements read as zeros */
    std::memset(host, 0, bytes);
    return ACC_OK;
  }
  ACC_CHECK(acc_cuda_check(to_device ? cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)
                                     : cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost),
                           "cudaMemcpy", err, errlen));
  /* a pageable upload may return before its DMA ends, and the legacy
   * stream does not order a non-blocking one: a forward right after
   * acc_load_state must read the whole upload */
  return acc_cuda_check(cudaDeviceSynchronize(), "cudaMemcpy", err, errlen);
}

extern "C" acc_result_t acc_mlp_dev_blas(char *err, size_t errlen) {
  return blas_ready(err, errlen);
}
