/*
 * test_fakedev.c — the runtime's decisions about device memory, on a
 * machine without a GPU: this executable defines the few CUDA runtime
 * calls that make a rank pick device 0 and classify pointers
 * (cudaGetDeviceCount, cudaSetDevice, cudaPointerGetAttributes), which
 * take precedence over libcudart's for libnbfork (the executable comes
 * first in symbol lookup). "Device memory" is an mmap'ed region with no
 * access at all: any host read or write of it is a SIGSEGV, exactly as a
 * real device pointer dereferenced on the host. cudaMalloc fails, so no
 * kernel is ever launched here: what is checked is that the runtime
 * never touches device memory on the host and reports errors as errors.
 *
 * Two cases (g_rw) go further and let the device MLP run its host code:
 * cudaMalloc then hands out a second, readable region (also "device"),
 * copies and memsets are memcpy/memset, kernel launches and cuBLAS
 * products are counted and do nothing (cuBLAS is "opened" by a dlopen
 * defined here, which returns this executable, whose cublas* functions
 * are the fakes, or fails as a machine without cuBLAS). Values are
 * meaningless there; what is checked is which calls the runtime makes:
 * how often a step waits for the device, and that no device memory is
 * allocated for a model that cannot run. A device-to-host copy can be
 * made to fail there (g_fail_d2h_at): acc_save_state's error path.
 *
 * NCCL's set-up is faked as well (ncclGetUniqueId, ncclCommInitRankConfig,
 * the stream it creates): two forked ranks on the fake device with the
 * real rendezvous store on 127.0.0.1 check what a failed set-up publishes.
 *
 * The sharding cases (g_rw = 2) make the device memory itself
 * inaccessible again while the runtime allocates, copies and launches:
 * cudaMalloc hands out a PROT_NONE region, copies and memsets touching it
 * are counted and do nothing to it (a copy back writes zeros to the host
 * buffer), and NCCL's set-up succeeds (g_nccl_ok) with collectives that
 * are counted and do nothing. A sharded device MLP then trains for real
 * on the host side (two forked ranks, Gloo for the host scalars) and any
 * host access of its device memory is a SIGSEGV.
 *
 * Built only with CUDA (NBFORK_WITH_CUDA); runs with or without a GPU.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <nccl.h>

#include "acc_internal.h"
#include "acc_store.h"
#include "nbf_trainer.h"
#include "nbfork.h"
#include "rt_spawn.h"
#include "rt_test.h"

enum { NPARAM = 4096, DIM = 4, NSAMPLE = 16 };
static char *g_dev;                        /* the fake device region */
static const size_t g_dev_bytes = 1 << 20; /* PROT_NONE */

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  (void)device;
  return cudaSuccess;
}

/* g_rw: the readable fake device (see the top of the file); the
 * counters of what the runtime asked of it. */
static int g_rw, g_cublas_ok;
static char *g_rw_dev;
static size_t g_rw_used;
static const size_t g_rw_bytes = 64 << 20; /* address space only: untouched */
static int g_allocs, g_syncs, g_event_waits, g_d2h, g_launches, g_gemms, g_cublas_opens;

static int in_rw(const void *p) {
  return g_rw_dev && (const char *)p >= g_rw_dev && (const char *)p < g_rw_dev + g_rw_bytes;
}

/* g_rw == 2: cudaMalloc's region has no host access (the sharding cases);
 * what was asked of it is counted. */
static int g_memsets, g_d2d, g_h2d;
static int in_na(const void *p) {
  return g_rw == 2 && in_rw(p);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr) {
  memset(a, 0, sizeof *a);
  const char *p = ptr;
  a->type = (g_dev && p >= g_dev && p < g_dev + g_dev_bytes) || in_rw(p)
                ? cudaMemoryTypeDevice
                : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}

/* The live device bytes (what cudaMalloc handed out and cudaFree did not
 * take back, as asked: before the 256-byte rounding) and their peak
 * since the last reset (the sharding memory case); the allocations as
 * (address, bytes), addresses never reused (a bump allocator). */
static size_t g_live, g_live_peak;
enum { MAX_ALLOCS = 4096 };
static struct {
  void *p;
  size_t bytes;
} g_alloc_tab[MAX_ALLOCS];

cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = NULL;
  if (!g_rw)
    return cudaErrorMemoryAllocation;
  if (!g_rw_dev) {
    g_rw_dev = mmap(NULL, g_rw_bytes, g_rw == 2 ? PROT_NONE : PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_TRUE(g_rw_dev != MAP_FAILED);
  }
  const size_t asked = bytes;
  bytes = (bytes + 255) & ~(size_t)255;
  if (g_rw_used + bytes > g_rw_bytes || g_allocs >= MAX_ALLOCS)
    return cudaErrorMemoryAllocation;
  *p = g_rw_dev + g_rw_used;
  g_rw_used += bytes;
  g_alloc_tab[g_allocs].p = *p, g_alloc_tab[g_allocs].bytes = asked;
  g_allocs++;
  g_live += asked;
  g_live_peak = g_live > g_live_peak ? g_live : g_live_peak;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  for (int i = 0; p && i < g_allocs; i++)
    if (g_alloc_tab[i].p == p) {
      g_live -= g_alloc_tab[i].bytes;
      g_alloc_tab[i].p = NULL; /* freed once */
      return cudaSuccess;
    }
  return p ? cudaErrorInvalidValue : cudaSuccess;
}

/* C++'s cudaMallocHost(T **, size) is cudaHostAlloc (cuda_runtime.h) */
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  *p = malloc(bytes ? bytes : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
  if (!in_rw(p))
    return cudaErrorInvalidValue;
  g_memsets++;
  if (!in_na(p))
    memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
  (void)st;
  return cudaMemset(p, v, n);
}

/* g_fail_d2h_at >= 0: device-to-host copies number g_fail_d2h_at (from 0)
 * and on fail, as a copy after a kernel's illegal address would. */
static int g_fail_d2h_at = -1;

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st) {
  (void)st;
  if (!g_rw)
    return cudaErrorInvalidValue;
  if (k == cudaMemcpyDeviceToHost && g_fail_d2h_at >= 0 && g_d2h >= g_fail_d2h_at) {
    g_d2h++;
    return cudaErrorIllegalAddress;
  }
  g_d2h += k == cudaMemcpyDeviceToHost;
  g_d2d += k == cudaMemcpyDeviceToDevice;
  g_h2d += k == cudaMemcpyHostToDevice;
  if (in_na(dst) && in_na(src)) /* within the inaccessible device */
    return cudaSuccess;
  if (in_na(src) && !in_rw(dst)) /* back to the host: zeros */
    memset(dst, 0, n);
  else if (!in_na(dst))
    memcpy(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) {
  g_syncs++; /* a blocking copy waits for the device */
  return cudaMemcpyAsync(dst, src, n, k, NULL);
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  (void)st;
  g_syncs++;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  g_syncs++;
  return cudaSuccess;
}

static int g_event;
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  *e = (cudaEvent_t)(void *)&g_event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
  (void)e, (void)st;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  g_event_waits++;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  return cudaSuccess;
}

/* What nvcc's kernel launch calls (crt/host_runtime.h, CUDA 12.x/13):
 * counted, nothing runs. */
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, struct CUstream_st *st) {
  (void)grid, (void)block, (void)shmem, (void)st;
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *st) {
  *grid = (dim3){1, 1, 1};
  *block = (dim3){1, 1, 1};
  *shmem = 0;
  *(cudaStream_t *)st = NULL;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *fn) {
  *k = (cudaKernel_t)(void *)fn;
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void **args, size_t shmem,
                               cudaStream_t st) {
  (void)k, (void)grid, (void)block, (void)args, (void)shmem, (void)st;
  g_launches++;
  return cudaSuccess;
}

/* cuBLAS as acc_mlp_cuda.cu opens it: libcublas.so.<major> through
 * dlopen. g_cublas_ok: this executable (its fakes below), else no
 * library, as on a machine without cuBLAS. */
void *dlopen(const char *file, int mode) {
  void *(*real)(const char *, int) = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  if (file && strstr(file, "libcublas")) {
    g_cublas_opens++;
    return g_cublas_ok ? real(NULL, mode) : NULL;
  }
  return real(file, mode);
}

static int g_blas_handle;
cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  *h = (cublasHandle_t)(void *)&g_blas_handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  (void)h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t st) {
  (void)h, (void)st;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo) {
  (void)h, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)at;
  (void)lda, (void)B, (void)bt, (void)ldb, (void)beta, (void)C, (void)ct, (void)ldc, (void)comp;
  (void)algo;
  g_gemms++;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
  (void)s;
  return "fake cuBLAS";
}

/* NCCL's set-up as acc_nccl.c runs it (ensure_comm), for the NCCL init
 * case below: every id ncclGetUniqueId makes is counted and is 128 bytes
 * of its number (1, 2...); g_fail_stream fails the next
 * cudaStreamCreateWithFlags once (a set-up failure after the id is
 * published); ncclCommInitRankConfig keeps the id it was given and fails
 * (no rank is ever joined here). */
static int g_ids, g_fail_stream, g_inits;
static ncclUniqueId g_init_id;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  g_ids++;
  memset(id->internal, g_ids, sizeof id->internal);
  return ncclSuccess;
}

static int g_stream;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags) {
  (void)flags;
  if (g_fail_stream) {
    g_fail_stream = 0;
    *st = NULL;
    return cudaErrorMemoryAllocation;
  }
  *st = (cudaStream_t)(void *)&g_stream;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t st) {
  (void)st;
  return cudaSuccess;
}

/* g_nccl_ok: the set-up succeeds and the collectives (counted) do
 * nothing to device memory, except alone (one rank) on the readable
 * device (g_rw 1), where they are what NCCL does there: the copy of send
 * into recv (f32 only, which is all the sharding sends). */
static int g_nccl_ok, g_nccl_ag, g_nccl_rs, g_nccl_ar, g_nccl_world;
static int g_comm;
/* Per communicator (index 0 the world's, 1 and 2 the first and second
 * ncclCommSplit: HYBRID_SHARD's node and replica groups): the
 * collectives each got ([0] all-gathers, [1] reduce-scatters, [2]
 * all-reduces), and each split's color and key. */
static int g_split_comm[2], g_splits, g_split_color[2], g_split_key[2];
static int g_by_comm[3][3];

static int comm_index(ncclComm_t c) {
  for (int i = 0; i < 2; i++)
    if ((void *)c == (void *)&g_split_comm[i])
      return i + 1;
  return 0;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *cfg) {
  (void)cfg;
  if (comm_index(comm) != 0 || g_splits >= 2)
    return ncclInvalidUsage;
  g_split_color[g_splits] = color, g_split_key[g_splits] = key;
  *newcomm = (ncclComm_t)(void *)&g_split_comm[g_splits++];
  return ncclSuccess;
}

static void nccl_alone(const void *s, void *r, size_t n) {
  if (g_rw == 1 && g_nccl_world == 1 && s != r)
    memmove(r, s, n * sizeof(float));
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *cfg) {
  (void)nranks, (void)rank, (void)cfg;
  g_inits++;
  g_init_id = id;
  g_nccl_world = nranks;
  *comm = g_nccl_ok ? (ncclComm_t)(void *)&g_comm : NULL;
  return g_nccl_ok ? ncclSuccess : ncclRemoteError;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *st) {
  (void)comm;
  *st = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t st) {
  (void)t, (void)st;
  g_by_comm[comm_index(c)][0]++;
  return g_nccl_ag++, nccl_alone(s, r, n), ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t st) {
  (void)t, (void)op, (void)st;
  g_by_comm[comm_index(c)][1]++;
  return g_nccl_rs++, nccl_alone(s, r, n), ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t st) {
  (void)t, (void)op, (void)st;
  g_by_comm[comm_index(c)][2]++;
  return g_nccl_ar++, nccl_alone(s, r, n), ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t st) {
  (void)st;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned flags) {
  (void)st, (void)e, (void)flags;
  return cudaSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}

/* An accelerator on the fake device 0 (gradient_accumulation_steps
 * accum). */
static acc_t *fake_acc_accum(const char *precision, int accum) {
  if (!g_dev) {
    g_dev = mmap(NULL, g_dev_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_TRUE(g_dev != MAP_FAILED);
  }
  unsetenv("ACCELERATE_USE_CPU");
  acc_t *acc = rt_acc_new(precision, accum);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_device(acc), 0);
  return acc;
}

static acc_t *fake_acc(const char *precision) {
  return fake_acc_accum(precision, 1);
}

static float dev_params_loss(void *self, const float *x, const int64_t *y, int b, int training) {
  (void)self, (void)x, (void)y, (void)b, (void)training;
  return 0.5f;
}
static int dev_params_backward(void *self) {
  (void)self;
  return 0; /* a device model's backward runs kernels: nothing on the host */
}
static void dev_params_predict(void *self, int64_t *pred) {
  (void)self, (void)pred;
}

static const acc_tensor_info_t TENSORS[1] = {{"layers.0.weight", 0, 64, 64}};

/* A user model whose params and grads are device memory. */
static acc_model_t device_model(void) {
  return (acc_model_t){.params = (float *)(void *)g_dev,
                       .grads = (float *)(void *)(g_dev + NPARAM * sizeof(float)),
                       .num_params = NPARAM,
                       .tensors = TENSORS,
                       .num_tensors = 1,
                       .input_dim = DIM,
                       .forward_loss = dev_params_loss,
                       .backward = dev_params_backward,
                       .predict = dev_params_predict};
}

static acc_dataset_t dataset(void) {
  static float x[NSAMPLE * DIM];
  static int64_t y[NSAMPLE];
  return (acc_dataset_t){.x = x, .y = y, .n = NSAMPLE, .dim = DIM};
}

/* Item 1 of issue 26: the optimizer step's clip_grad_norm read and wrote
 * the gradients on the host (SIGSEGV on device gradients, even with
 * max_grad_norm <= 0). Now it goes to the device, whose failure (no
 * scratch here) is an error of acc_trainer_train. */
NBF_TEST(trainer_never_reads_device_grads) {
  acc_t *acc = fake_acc("no");
  acc_training_args_t args;
  acc_training_args_init(&args);
  ASSERT_EQ(acc_training_args_set(&args, "save_strategy", "no"), ACC_OK);
  ASSERT_EQ(acc_training_args_set(&args, "max_steps", "2"), ACC_OK);
  ASSERT_EQ(acc_training_args_set(&args, "disable_tqdm", "true"), ACC_OK);
  acc_model_t m = device_model();
  acc_dataset_t ds = dataset();
  acc_trainer_t *tr = acc_trainer_new(acc, &args, &m, &ds, NULL);
  if (!tr)
    NBF_TEST_FAIL("acc_trainer_new: %s", acc_last_error(acc));
  acc_result_t r = acc_trainer_train(tr);
  ASSERT_TRUE(r != ACC_OK);
  printf("train: %d: %s\n", (int)r, acc_last_error(acc));
  ASSERT_TRUE(strstr(acc_last_error(acc), "device") != NULL);
  acc_trainer_destroy(&tr);
  acc_destroy(&acc);
}

/* A custom model's parameters are checkpointed as host bytes: with
 * device parameters and checkpoints on, the Trainer refuses up front. */
NBF_TEST(trainer_refuses_checkpoints_of_custom_device_model) {
  acc_t *acc = fake_acc("no");
  acc_training_args_t args;
  acc_training_args_init(&args);
  ASSERT_EQ(acc_training_args_set(&args, "save_strategy", "steps"), ACC_OK);
  acc_model_t m = device_model();
  acc_dataset_t ds = dataset();
  acc_trainer_t *tr = acc_trainer_new(acc, &args, &m, &ds, NULL);
  ASSERT_TRUE(tr == NULL);
  ASSERT_TRUE(strstr(acc_last_error(acc), "device memory is not supported") != NULL ||
              strstr(acc_last_error(acc), "device memory are not supported") != NULL);
  acc_destroy(&acc);
}

/* GaLore is host BLAS over the parameters: a device model is refused
 * (as LOMO refuses one), not projected on the host. */
NBF_TEST(galore_refuses_device_model) {
  acc_t *acc = fake_acc("no");
  acc_model_t m = device_model();
  acc_galore_t *g =
      acc_galore_new(acc, &m, "layers", 8, 200, 0.25f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f);
  ASSERT_TRUE(g == NULL);
  ASSERT_TRUE(strstr(acc_last_error(acc), "GaLore runs on the host only") != NULL);
  acc_destroy(&acc);
}

/* Item 3: a host/device pair went to the device kernel. */
NBF_TEST(conversion_refuses_host_device_pair) {
  acc_t *acc = fake_acc("no");
  float host[8] = {0};
  uint16_t hh[8];
  ASSERT_EQ(acc_to_f16(acc, (uint16_t *)(void *)g_dev, host, 8), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(acc_from_bf16(acc, host, (const uint16_t *)(void *)g_dev, 8), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(strstr(acc_last_error(acc), "both") != NULL);
  ASSERT_EQ(acc_to_f16(acc, hh, host, 8), ACC_OK); /* host pair: the host path */
  acc_destroy(&acc);
}

/* Item 11: all-gather and reduce-scatter sent a host/device pair to NCCL. */
NBF_TEST(collectives_refuse_host_device_pair) {
  acc_t *acc = fake_acc("no");
  float host[8] = {0};
  ASSERT_EQ(acc_all_gather(acc, g_dev, host, 8, ACC_F32), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(acc_reduce_scatter(acc, host, g_dev, 8, ACC_F32, ACC_SUM), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(strstr(acc_last_error(acc), "device") != NULL);
  acc_destroy(&acc);
}

/* Item 6: a failed unscale of device gradients was taken as an fp16
 * overflow: the step skipped and the scale halved, for ever. */
NBF_TEST(failed_unscale_is_an_error) {
  acc_t *acc = fake_acc("fp16");
  float *p = (float *)(void *)g_dev, *g = p + NPARAM;
  acc_optim_t *o = acc_sgd_new(p, g, NPARAM, 0.1f, 0.0f, 0.0f);
  ASSERT_NOT_NULL(o);
  const float scale = acc_loss_scale(acc);
  ASSERT_EQ(acc_optim_step(acc, o), -1);
  ASSERT_TRUE(acc_loss_scale(acc) == scale);
  ASSERT_EQ(acc_optimizer_step_was_skipped(acc), 0);
  ASSERT_EQ(acc_unscale_gradients(acc, g, NPARAM), -1);
  acc_optim_destroy(&o);
  acc_destroy(&acc);
}

static const int MLP_SIZES[3] = {8, 16, 4};
enum { MLP_BATCH = 4, MLP_STEPS = 5 };

/* Issue 26 item 11: cuBLAS that cannot be opened. acc_mlp_new did not
 * check it before it allocated the device model, and then failed with
 * "cuBLAS: cannot open ..." and no word of what to do. Now: no device
 * memory allocated, an error naming the library and the two ways out. */
NBF_TEST(device_model_without_cublas_is_an_error) {
  g_rw = 1, g_cublas_ok = 0;
  acc_t *acc = fake_acc("no");
  acc_mlp_t *m = acc_mlp_new(acc, MLP_SIZES, 2, MLP_BATCH);
  ASSERT_TRUE(m == NULL);
  const char *e = acc_last_error(acc);
  printf("acc_mlp_new: %s\n", e);
  ASSERT_EQ(g_cublas_opens, 1);
  ASSERT_TRUE(strstr(e, "libcublas.so.") != NULL);
  ASSERT_TRUE(strstr(e, "install cuBLAS") != NULL);
  ASSERT_TRUE(strstr(e, "ACCELERATE_USE_CPU=1") != NULL);
  ASSERT_EQ(g_allocs, 0);
  acc_destroy(&acc);
}

/* The MLP on the fake device with cuBLAS working (*acc its accelerator). */
static acc_mlp_t *device_mlp(acc_t **acc) {
  g_rw = 1, g_cublas_ok = 1;
  *acc = fake_acc("no");
  acc_mlp_t *m = acc_mlp_new(*acc, MLP_SIZES, 2, MLP_BATCH);
  if (!m)
    NBF_TEST_FAIL("acc_mlp_new: %s", acc_last_error(*acc));
  ASSERT_TRUE(in_rw(acc_mlp_params(m))); /* the device model */
  return m;
}

/* Issue 25 item 4: each step of the device MLP synchronized twice (the
 * logits copied back in forward, the loss in backward). Now a step of
 * acc_mlp_forward_async + acc_mlp_backward_xent_async enqueues its work
 * and waits for nothing but the previous step's uploads out of the two
 * pinned staging buffers (an event each); the loss and the logits come
 * back only when asked for, once each; the public acc_mlp_forward /
 * acc_mlp_backward_xent still synchronize once each, as before. */
NBF_TEST(mlp_step_waits_for_nothing) {
  acc_t *acc;
  acc_mlp_t *m = device_mlp(&acc);
  float x[MLP_BATCH * 8] = {0};
  int64_t y[MLP_BATCH] = {0, 1, 2, 3};
  g_syncs = g_event_waits = g_d2h = g_launches = g_gemms = 0;
  for (int step = 0; step < MLP_STEPS; step++) {
    acc_mlp_zero_grad(m);
    ASSERT_EQ(acc_mlp_forward_async(m, x, MLP_BATCH), ACC_OK);
    ASSERT_EQ(acc_mlp_backward_xent_async(m, y), ACC_OK);
  }
  printf("%d steps: %d synchronizations, %d staging waits, %d copies back, %d kernels, "
         "%d products\n",
         MLP_STEPS, g_syncs, g_event_waits, g_d2h, g_launches, g_gemms);
  ASSERT_EQ(g_syncs, 0);
  ASSERT_EQ(g_d2h, 0);
  ASSERT_EQ(g_event_waits, 2 * (MLP_STEPS - 1)); /* x and labels, from the second step on */
  ASSERT_EQ(g_gemms, MLP_STEPS * 5);             /* 2 layers: 2 forward, 3 backward */
  ASSERT_TRUE(g_launches >= MLP_STEPS * 5);
  /* the loss when logged: one copy, one synchronization, then cached */
  ASSERT_TRUE(acc_mlp_loss(m) == 0.0f); /* the fake device's row losses are zeros */
  ASSERT_TRUE(acc_mlp_loss(m) == 0.0f);
  ASSERT_EQ(g_syncs, 1);
  ASSERT_EQ(g_d2h, 1);
  ASSERT_NOT_NULL(acc_mlp_logits(m));
  ASSERT_NOT_NULL(acc_mlp_logits(m));
  int64_t pred[MLP_BATCH];
  acc_mlp_predict(m, pred); /* the host copy already there */
  ASSERT_EQ(g_syncs, 2);
  ASSERT_EQ(g_d2h, 2);
  /* the public calls keep their behaviour: one synchronization each */
  ASSERT_NOT_NULL(acc_mlp_forward(m, x, MLP_BATCH));
  ASSERT_EQ(g_syncs, 3);
  ASSERT_TRUE(!isnan(acc_mlp_backward_xent(m, y)));
  ASSERT_EQ(g_syncs, 4);
  /* a bad label is found on the host: nothing enqueued, nothing read */
  const int launches = g_launches;
  y[2] = 9;
  ASSERT_EQ(acc_mlp_backward_xent_async(m, y), ACC_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(strstr(acc_last_error(acc), "row 2") != NULL);
  ASSERT_TRUE(isnan(acc_mlp_loss(m)));
  ASSERT_EQ(g_launches, launches);
  ASSERT_EQ(g_syncs, 4);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
}

/* The files in `dir` (not . and ..), their names joined into `names`. */
static int dir_files(const char *dir, char *names, size_t len) {
  DIR *d = opendir(dir);
  ASSERT_NOT_NULL(d);
  int n = 0;
  names[0] = '\0';
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      n++;
      snprintf(names + strlen(names), len - strlen(names), "%s ", e->d_name);
    }
  closedir(d);
  return n;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  char path[512];
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
  rmdir(dir);
}

/* Issue 26 item 7: acc_save_state of a device model copies its gradients
 * (into the rank file), then its parameters (into the shared file) to the
 * host; a failed copy left acc__mlp_host's NULL to be memcpy'd into the
 * file (SIGSEGV). Now the failed copy is the error, named, and no file is
 * written that acc_load_state would take: the copy of the gradients (the
 * first device-to-host copy) failing writes nothing; the parameters' (the
 * second) failing writes the rank file but no shared file. */
static void save_with_failed_copy(int fail_at) {
  acc_t *acc;
  acc_mlp_t *m = device_mlp(&acc);
  char dir[] = "/tmp/nbfork_fakedev_ckpt_XXXXXX", names[512];
  ASSERT_NOT_NULL(mkdtemp(dir));
  g_d2h = 0;
  g_fail_d2h_at = fail_at;
  acc_result_t r = acc_save_state(acc, dir, m, NULL);
  g_fail_d2h_at = -1;
  const char *e = acc_last_error(acc);
  printf("acc_save_state, device-to-host copy %d failing: %d: %s\n", fail_at, (int)r, e);
  ASSERT_EQ(r, ACC_ERR_BACKEND);
  ASSERT_EQ(g_d2h, fail_at + 1); /* it stopped at the failed copy */
  ASSERT_TRUE(strstr(e, "copying the model from device 0") != NULL);
  ASSERT_TRUE(strstr(e, "cudaMemcpy") != NULL);
  const int n = dir_files(dir, names, sizeof names);
  printf("left in %s: %s\n", dir, n ? names : "nothing");
  if (fail_at == 0)
    ASSERT_EQ(n, 0);
  else
    ASSERT_TRUE(n == 1 && strstr(names, "nbfork_rank0.bin") != NULL);
  ASSERT_TRUE(acc_load_state(acc, dir, m, NULL) != ACC_OK);
  printf("acc_load_state: %s\n", acc_last_error(acc));
  ASSERT_TRUE(strstr(acc_last_error(acc), "nbfork_state.bin") != NULL);
  /* with the copies working again, the same call saves a checkpoint that loads */
  ASSERT_OK(acc, acc_save_state(acc, dir, m, NULL));
  ASSERT_OK(acc, acc_load_state(acc, dir, m, NULL));
  remove_dir(dir);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
}

NBF_TEST(save_state_with_failed_grads_copy_is_an_error) {
  save_with_failed_copy(0);
}

NBF_TEST(save_state_with_failed_params_copy_is_an_error) {
  save_with_failed_copy(1);
}

/* Whether `v` (len bytes) is the id ncclGetUniqueId made `nth`. */
static int is_id(const void *v, size_t len, int nth) {
  if (len != sizeof(ncclUniqueId))
    return 0;
  for (size_t i = 0; i < len; i++)
    if (((const unsigned char *)v)[i] != (unsigned char)nth)
      return 0;
  return 1;
}

/* Rank 0: its NCCL set-up fails after it published the id; the retry. */
static void nccl_retry_rank0(acc_t *acc) {
  g_fail_stream = 1;
  acc_result_t r = acc_all_reduce(acc, g_dev, 8, ACC_F32, ACC_SUM);
  printf("rank 0, first all-reduce: %d: %s\n", (int)r, acc_last_error(acc));
  ASSERT_EQ(r, ACC_ERR_BACKEND);
  ASSERT_TRUE(strstr(acc_last_error(acc), "cudaStreamCreate failed") != NULL);
  ASSERT_EQ(g_ids, 1);
  r = acc_all_reduce(acc, g_dev, 8, ACC_F32, ACC_SUM);
  printf("rank 0, retry: %d: %s; ids made: %d\n", (int)r, acc_last_error(acc), g_ids);
  /* rank 1 reads the store now, whatever the retry did; rank 0 hosts
   * the store: it stays until rank 1 has read it */
  void *v = NULL;
  size_t len = 0;
  ASSERT_EQ(acc_store_set(acc->store, "fakedev/retried", "1", 1), ACC_OK);
  ASSERT_EQ(acc_store_get(acc->store, "fakedev/checked", &v, &len), ACC_OK);
  free(v);
  ASSERT_EQ(g_ids, 1);        /* no second id made, so none published */
  ASSERT_EQ(g_inits, 0);      /* nor a communicator started on one */
  ASSERT_EQ(r, ACC_ERR_PEER); /* a call on a group an earlier failure broke */
  /* the error is the first failure's, not a new set-up's */
  ASSERT_TRUE(strstr(acc_last_error(acc), "cudaStreamCreate failed") != NULL);
}

/* Rank 1: takes the published id into its set-up (which fails: no NCCL
 * here), then reads the store's id again once rank 0 retried. */
static void nccl_retry_rank1(acc_t *acc) {
  ASSERT_TRUE(acc_all_reduce(acc, g_dev, 8, ACC_F32, ACC_SUM) != ACC_OK);
  printf("rank 1, all-reduce: %s\n", acc_last_error(acc));
  ASSERT_EQ(g_inits, 1);
  ASSERT_TRUE(is_id(&g_init_id, sizeof g_init_id, 1));
  void *v = NULL;
  size_t len = 0;
  ASSERT_EQ(acc_store_get(acc->store, "fakedev/retried", &v, &len), ACC_OK);
  free(v);
  char key[256];
  snprintf(key, sizeof key, "%snccl/id", acc->key_prefix);
  ASSERT_EQ(acc_store_get(acc->store, key, &v, &len), ACC_OK);
  const int first = is_id(v, len, 1), second = is_id(v, len, 2);
  free(v);
  const char *which = first ? "the first" : second ? "a second one" : "neither";
  printf("rank 1: the store's NCCL id after rank 0's retry: %s\n", which);
  ASSERT_EQ(acc_store_set(acc->store, "fakedev/checked", "1", 1), ACC_OK);
  ASSERT_TRUE(first);
}

static int nccl_retry_rank(int rank, int world, void *arg) {
  (void)world, (void)arg;
  acc_t *acc = fake_acc("no");
  ASSERT_NOT_NULL(acc->store);
  ASSERT_OK(acc, acc_set_errhandler(acc, ACC_ERRORS_RETURN));
  if (rank == 0)
    nccl_retry_rank0(acc);
  else
    nccl_retry_rank1(acc);
  acc_destroy(&acc);
  return 0;
}

/* Issue 26 item 11: rank 0's NCCL set-up failing after it published the
 * unique id (here cudaStreamCreate) returned an error and left the group
 * usable, so the next device collective made and published a second id
 * while rank 1 held the first (each side then waits for another
 * communicator until the timeout). Now the group is marked broken: the
 * retry is refused with the first failure's error, and the store keeps
 * the id rank 1 took. Two ranks (fork) on the fake device 0, the store on
 * 127.0.0.1; NCCL's set-up calls are the fakes above. */
NBF_TEST(nccl_init_retry_publishes_no_second_id) {
  setenv("NBFORK_SHARE_GPU", "1", 1); /* two ranks, one (fake) device */
  setenv("NBFORK_TEST_GPU", "1", 1);  /* rt_spawn: not forced on the CPU */
  rt_spawn_opts_t o = {.world = 2, .deadline_s = 60, .timeout_s = "20"};
  ASSERT_EQ(rt_spawn(&o, nccl_retry_rank, NULL, NULL), 0);
}

/* ---- sharding of a device model (issue 23: "Gloo on CPU, NCCL on GPU") */

/* The MLP of the sharding cases: layer 0 has 15·8 + 15 = 135 elements
 * (padded to 2·68 on two ranks: the staged gather and reduction), layer
 * 1 has 3·15 + 3 = 48 (unpadded: in place). */
static const int SH_SIZES[3] = {8, 15, 3};
enum { SH_BATCH = 4, SH_STEPS = 3 };

/* The sharding cases' MLP on the fake device and its acc_model_t. */
static acc_mlp_t *shard_mlp(acc_t *acc, acc_model_t *model) {
  acc_mlp_t *m = acc_mlp_new(acc, SH_SIZES, 2, SH_BATCH);
  if (!m)
    NBF_TEST_FAIL("acc_mlp_new: %s", acc_last_error(acc));
  ASSERT_TRUE(in_rw(acc_mlp_params(m)) && in_rw(acc_mlp_grads(m)));
  ASSERT_OK(acc, acc_mlp_model(m, model));
  return m;
}

typedef struct {
  int stage; /* 1..3, or -2: FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP from the environment */
  int accum; /* gradient_accumulation_steps */
  const char *precision;
  double max_norm; /* clipping (0: off) */
} shard_case_t;
/* The sharding cases run with HYBRID_SHARD on 4 ranks over 2 simulated
 * nodes (NODE_RANK = rank % 2). */
static int g_shard_hybrid;
static char g_hybrid_dir[64]; /* its SHARDED_STATE_DICT (made by the parent) */
/* ... offloaded (cfg.offload: the optimizer steps on the host) */
static int g_shard_offload;

/* What one optimizer step (accum micro-steps and acc_shard_step) asked
 * of the fake device and of NCCL. */
typedef struct {
  int ag, rs, ar, syncs, d2h, launches, stepped, h2d;
} shard_counts_t;

static shard_counts_t shard_counts(void) {
  return (shard_counts_t){g_nccl_ag, g_nccl_rs, g_nccl_ar, g_syncs, g_d2h, g_launches, 0, g_h2d};
}

static shard_counts_t shard_delta(shard_counts_t a, shard_counts_t b) {
  return (shard_counts_t){b.ag - a.ag,
                          b.rs - a.rs,
                          b.ar - a.ar,
                          b.syncs - a.syncs,
                          b.d2h - a.d2h,
                          b.launches - a.launches,
                          0,
                          b.h2d - a.h2d};
}

/* One optimizer step of the sharded device MLP: its counts. */
static shard_counts_t shard_step(acc_t *acc, acc_shard_t *sh, int accum) {
  float x[SH_BATCH * 8] = {0};
  int64_t y[SH_BATCH] = {0, 1, 2, 0};
  shard_counts_t c0 = shard_counts();
  int stepped = 0;
  for (int k = 0; k < accum; k++) {
    acc_accumulate_begin(acc, 0);
    ASSERT_TRUE(!isnan(acc_shard_forward_loss(sh, x, y, SH_BATCH, 1)));
    ASSERT_OK(acc, acc_shard_backward(sh));
    acc_accumulate_end(acc);
    ASSERT_EQ(acc_sync_gradients(acc), k == accum - 1);
    stepped = acc_shard_step(sh);
  }
  if (stepped < 0)
    NBF_TEST_FAIL("acc_shard_step: %s", acc_last_error(acc));
  shard_counts_t d = shard_delta(c0, shard_counts());
  d.stepped = stepped;
  return d;
}

/* HYBRID_SHARD on the device (2 nodes of 2): NCCL's node and replica
 * communicators split from the world's (color: the node, key: the
 * member; color: the member, key: the node), the gathers and the
 * reduce-scatters of the SH_STEPS steps (d: one step's) on the node's,
 * the units' all-reduces on the replicas', none on the world's but
 * stage 1's DDP all-reduce. */
static void check_hybrid_comms(int rank, int stage, int by0[3][3], shard_counts_t d) {
  ASSERT_EQ(g_splits, 2);
  ASSERT_EQ(g_split_color[0], rank % 2);
  ASSERT_EQ(g_split_key[0], rank / 2);
  ASSERT_EQ(g_split_color[1], rank / 2);
  ASSERT_EQ(g_split_key[1], rank % 2);
  int n[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      n[i][j] = g_by_comm[i][j] - by0[i][j];
  if (rank == 0)
    printf("HYBRID_SHARD, %d steps: world %d/%d/%d, node %d/%d/%d, replicas %d/%d/%d "
           "(all-gathers/reduce-scatters/all-reduces)\n",
           SH_STEPS, n[0][0], n[0][1], n[0][2], n[1][0], n[1][1], n[1][2], n[2][0], n[2][1],
           n[2][2]);
  ASSERT_EQ(n[0][0], 0);
  ASSERT_EQ(n[0][1], 0);
  ASSERT_EQ(n[0][2], stage == 1 ? SH_STEPS : 0);
  ASSERT_EQ(n[1][0], SH_STEPS * d.ag);
  ASSERT_EQ(n[1][1], SH_STEPS * d.rs);
  ASSERT_EQ(n[1][2], 0);
  ASSERT_EQ(n[2][0] + n[2][1], 0);
  ASSERT_EQ(n[2][2], stage >= 2 ? SH_STEPS * d.rs : 0); /* one per reduced unit */
}

static int shard_rank(int rank, int world, void *arg) {
  const shard_case_t *c = arg;
  g_rw = 2, g_cublas_ok = 1, g_nccl_ok = 1;
  if (g_shard_hybrid) {
    char node[16];
    snprintf(node, sizeof node, "%d", rank % 2);
    setenv("NODE_RANK", node, 1);
  }
  if (c->stage == -2) {
    setenv("ACCELERATE_USE_FSDP", "true", 1);
    setenv("FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP", 1);
  }
  acc_t *acc = fake_acc_accum(c->precision, c->accum);
  acc_model_t model;
  acc_mlp_t *m = shard_mlp(acc, &model);
  ASSERT_TRUE(in_na(acc_mlp_params(m)) && in_na(acc_mlp_grads(m)));
  /* what the model's own forward waits for and reads back (the logits) */
  float x[SH_BATCH * 8] = {0};
  shard_counts_t f0 = shard_counts();
  ASSERT_NOT_NULL(acc_mlp_forward(m, x, SH_BATCH));
  const shard_counts_t fwd = shard_delta(f0, shard_counts());
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = c->stage == -2 ? ACC_SHARD_FROM_ENV : c->stage;
  cfg.max_grad_norm = c->max_norm;
  cfg.hybrid = g_shard_hybrid;
  cfg.offload = g_shard_offload;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  if (!sh)
    NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
  const int stage = acc_shard_stage(sh);
  if (rank == 0)
    printf("%s\n", acc_shard_describe(sh));
  ASSERT_TRUE(strstr(acc_shard_describe(sh), "on the device (NCCL)") != NULL);
  ASSERT_TRUE(strstr(acc_shard_describe(sh), "prefetch: off") != NULL);
  /* device bytes (at stage 3 offloaded: the owned gradients and a layer) */
  const size_t np = acc_mlp_num_params(m); /* 183 */
  const size_t least = g_shard_offload && stage == 3 ? np / 4 : 2 * np;
  ASSERT_TRUE(acc_shard_state_bytes(sh, 0) >= least * sizeof(float));
  shard_counts_t d = {0};
  int by0[3][3];
  memcpy(by0, g_by_comm, sizeof by0);
  for (int step = 0; step < SH_STEPS; step++)
    d = shard_step(acc, sh, c->accum);
  if (rank == 0)
    printf("stage %d, accum %d, %s, max_norm %g: one step: %d all-gathers, %d reduce-scatters, "
           "%d all-reduces (NCCL), %d synchronizations, %d copies back, %d kernels\n",
           stage, c->accum, c->precision, c->max_norm, d.ag, d.rs, d.ar, d.syncs, d.d2h,
           d.launches);
  ASSERT_EQ(d.stepped, 1); /* zeros are finite: the fp16 step is taken */
  /* the collectives of each stage, per optimizer step, on the device */
  const int units = 2;
  /* stage 1: DDP's all-reduce; HYBRID_SHARD: the replicas' per unit */
  ASSERT_EQ(d.ar, stage == 1 ? 1 : g_shard_hybrid ? units : 0);
  ASSERT_EQ(d.rs, stage >= 2 ? units : 0); /* stages 2, 3: per unit, once */
  /* stage 3: each layer before its forward and its backward (the last
   * layer's kept from its forward: 2·units - 1 per micro-step; it was
   * units, the whole model before the forward, until the device MLP ran
   * under the layer hooks) */
  ASSERT_EQ(d.ag, stage == 3 ? (2 * units - 1) * c->accum : units);
  /* read back per step: what each forward of the model reads (its
   * logits), the unscale's inf flag (fp16), the norm's sum of squares
   * (always: acc_shard_grad_norm; clipping scales on the device);
   * nothing else waits for the device; offloaded, each unit's owned
   * gradients too, after one more synchronization */
  const int fp16 = !strcmp(c->precision, "fp16"), off = g_shard_offload;
  ASSERT_EQ(d.d2h, c->accum * fwd.d2h + fp16 + 1 + off * units);
  ASSERT_EQ(d.syncs, c->accum * fwd.syncs + fp16 + 1 + off);
  ASSERT_TRUE(d.launches > 0);
  ASSERT_TRUE(acc_shard_grad_norm(sh) == 0.0); /* the fake's sums of squares are zeros */
  if (g_shard_hybrid) {
    check_hybrid_comms(rank, stage, by0, d);
    /* one replica's shards, the other node's ranks their gradients
     * (host copies: the device memory faults here), and back */
    ASSERT_OK(acc, acc_shard_save_state(sh, g_hybrid_dir, ACC_SHARDED_STATE_DICT));
    ASSERT_OK(acc, acc_shard_load_state(sh, g_hybrid_dir));
  }
  (void)world;
  ASSERT_OK(acc, acc_shard_gather_params(sh));
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

/* fn(rank, world, arg) on `world` forked ranks sharing the fake device. */
static void spawn_ranks(int world, int (*fn)(int, int, void *), void *arg) {
  setenv("NBFORK_SHARE_GPU", "1", 1); /* the ranks, one (fake) device */
  setenv("NBFORK_TEST_GPU", "1", 1);  /* rt_spawn: not forced on the CPU */
  rt_spawn_opts_t o = {.world = world, .deadline_s = 90, .timeout_s = "30"};
  ASSERT_EQ(rt_spawn(&o, fn, arg, NULL), 0);
}

/* Two ranks; four (two nodes of two) with HYBRID_SHARD. */
static void run_shard_case(shard_case_t c) {
  spawn_ranks(g_shard_hybrid ? 4 : 2, shard_rank, &c);
}

/* Each stage of a device MLP on two ranks: the device memory is never
 * touched by the host (it faults here), every collective goes to NCCL
 * (the number each stage needs), and a step reads back only the values
 * it must. */
NBF_TEST(shard_stage1_device) {
  run_shard_case((shard_case_t){1, 1, "no", 0});
}

NBF_TEST(shard_stage2_device) {
  run_shard_case((shard_case_t){2, 1, "no", 0});
}

NBF_TEST(shard_stage3_device) {
  run_shard_case((shard_case_t){3, 1, "no", 0});
}

NBF_TEST(shard_grad_op_device) {
  run_shard_case((shard_case_t){-2, 1, "no", 0});
}

/* HYBRID_SHARD of a device MLP (FSDP's: shard within a node, replicate
 * across nodes) at each stage, with accumulation and fp16 clipping, and
 * offloaded (each branch of issue 23 refused the other's feature: the
 * merge runs both at once): the collectives on NCCL's node and replica
 * communicators, offloaded or not; its SHARDED_STATE_DICT saved and
 * loaded without a host access of device memory. */
NBF_TEST(shard_hybrid_device) {
  g_shard_hybrid = 1;
  for (int stage = 1; stage <= 3; stage++) {
    for (int v = 0; v < 4; v++) {
      snprintf(g_hybrid_dir, sizeof g_hybrid_dir, "/tmp/nbfork_fakedev_hybrid_XXXXXX");
      ASSERT_NOT_NULL(mkdtemp(g_hybrid_dir));
      g_shard_offload = v >= 2;
      run_shard_case(v % 2 ? (shard_case_t){stage, 2, "fp16", 1.0}
                           : (shard_case_t){stage, 1, "no", 0});
      remove_dir(g_hybrid_dir);
    }
  }
  g_shard_hybrid = g_shard_offload = 0;
}

/* Gradient accumulation, clipping by the global norm, fp16's unscale
 * and bf16 at each sharded stage. */
NBF_TEST(shard_accumulation_clipping_fp16_device) {
  for (int stage = 1; stage <= 3; stage++) {
    run_shard_case((shard_case_t){stage, 2, "no", 0});
    run_shard_case((shard_case_t){stage, 1, "no", 1.0});
    run_shard_case((shard_case_t){stage, 1, "fp16", 1.0});
    run_shard_case((shard_case_t){stage, 2, "bf16", 0});
  }
}

/* Stages 3 and 2 on the device (issue 23 item 1): a device MLP of 8
 * layers of 256 × 256 + 256 (L = 65,792 elements, Ψ = 8L) on two ranks,
 * AdamW, f32. Per rank the live device bytes (the fake cudaMalloc's,
 * everything the model, the shards, the unit buffer and the optimizer
 * hold, activations included) peak during training within 10% of the
 * estimate: stage 3 16Ψ/N + 4L, stage 2 4Ψ + 12Ψ/N + 4L. Keeping the
 * model's full buffers (stage 3: parameters and gradients, 8Ψ bytes;
 * stage 2: the gradients, 4Ψ(N - 1)/N more than their shard; what a
 * device model held before) would exceed it by more than the margin:
 * checked below, and by hand by turning acc__shard_whole's frees off
 * (stage 3's peak doubled; stage 2's +20%, the test failing). */
static const int MEM_SIZES[9] = {256, 256, 256, 256, 256, 256, 256, 256, 256};

static int shard_memory_rank(int rank, int world, void *arg) {
  const int stage = *(const int *)arg;
  g_rw = 2, g_cublas_ok = 1, g_nccl_ok = 1;
  acc_t *acc = fake_acc("no");
  acc_mlp_t *m = acc_mlp_new(acc, MEM_SIZES, 8, SH_BATCH);
  if (!m)
    NBF_TEST_FAIL("acc_mlp_new: %s", acc_last_error(acc));
  acc_model_t model;
  ASSERT_OK(acc, acc_mlp_model(m, &model));
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = stage;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  if (!sh)
    NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
  /* acc_shard_describe says how the layers run */
  ASSERT_TRUE(strstr(acc_shard_describe(sh), stage == 3 ? "each layer gathered before its use"
                                                        : "reduce-scattered from one unit buffer"));
  g_live_peak = g_live; /* training from here */
  static float x[SH_BATCH * 256];
  int64_t y[SH_BATCH] = {0, 1, 2, 3};
  for (int step = 0; step < SH_STEPS; step++) {
    ASSERT_TRUE(!isnan(acc_shard_forward_loss(sh, x, y, SH_BATCH, 1)));
    ASSERT_OK(acc, acc_shard_backward(sh));
    ASSERT_EQ(acc_shard_step(sh), 1);
  }
  const size_t np = acc_mlp_num_params(m), L = 256 * 257;
  const double est = acc_shard_estimate_bytes(np, L, world, stage, 1, 0);
  /* the full buffers kept: parameters and gradients (stage 3); stage 2's
   * gradients instead of their shard, 4Ψ(N - 1)/N (measured by hand with
   * the buffer kept, as before: +20% of the estimate) */
  const double whole = stage == 3 ? 8.0 * (double)np : 4.0 * (double)np * (world - 1) / world;
  if (rank == 0)
    printf("stage %d on the device, %zu parameters, 2 ranks: peak %zu live device bytes per rank "
           "(%+.1f%% of the estimate %.0f; the runtime's own count %zu); the full buffers "
           "kept would add %.0f (%+.0f%%)\n",
           stage, np, g_live_peak, 100.0 * ((double)g_live_peak / est - 1.0), est,
           acc_shard_state_bytes(sh, 1), whole, 100.0 * whole / est);
  ASSERT_TRUE((double)g_live_peak <= 1.10 * est && (double)g_live_peak >= 0.90 * est);
  ASSERT_TRUE(whole > 0.10 * est);  /* the buffers kept could not pass */
  ASSERT_TRUE(model.grads == NULL); /* freed while sharded; stage 2 keeps the parameters */
  ASSERT_TRUE(stage == 3 ? model.params == NULL : in_na(model.params));
  /* the runtime's own accounting of the model state agrees */
  ASSERT_TRUE((double)acc_shard_state_bytes(sh, 1) <= 1.10 * est);
  ASSERT_TRUE((double)acc_shard_state_bytes(sh, 1) >= 0.90 * est);
  /* destroy leaves the model whole again: the buffers are back */
  acc_shard_destroy(&sh);
  ASSERT_TRUE(in_na(model.params) && in_na(model.grads));
  ASSERT_TRUE(model.params == acc_mlp_params(m) && model.grads == acc_mlp_grads(m));
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return 0;
}

NBF_TEST(shard_stage3_device_memory) {
  int stage = 3;
  spawn_ranks(2, shard_memory_rank, &stage);
}

NBF_TEST(shard_stage2_device_memory) {
  int stage = 2;
  spawn_ranks(2, shard_memory_rank, &stage);
}

/* Offload of a device MLP (issue 23 item 2: offload_optimizer_device
 * cpu, fsdp_offload_params): two ranks on the inaccessible device train
 * each stage with and without offload. Offloaded, the device holds
 * neither the optimizer's moments (8 bytes per owned element, AdamW) nor,
 * at stage 3, the parameter shards (4 per shard element): the live device
 * bytes after the steps drop by exactly that; a step copies each unit's
 * owned gradients to the host (one copy back per unit, one more
 * synchronization) and its updated parameters back (stages 1, 2; at
 * stage 3 each gather copies the owned block up from the host instead);
 * the collectives are those of the stage. The host never touches device
 * memory (it faults). */
typedef struct {
  size_t live;      /* device bytes after SH_STEPS steps */
  shard_counts_t c; /* of the last step */
  size_t own, S;    /* owned elements, shard elements */
} offload_run_t;

static offload_run_t offload_run(int stage, int offload) {
  acc_t *acc = fake_acc("no");
  acc_model_t model;
  acc_mlp_t *m = shard_mlp(acc, &model);
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = stage;
  cfg.offload = offload;
  acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
  if (!sh)
    NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
  const char *d = acc_shard_describe(sh);
  ASSERT_EQ(strstr(d, "in host memory") != NULL, offload);
  ASSERT_EQ(strstr(d, "parameter shards in host memory") != NULL, offload && stage == 3);
  offload_run_t o = {0};
  for (int step = 0; step < SH_STEPS; step++)
    o.c = shard_step(acc, sh, 1);
  ASSERT_EQ(o.c.stepped, 1);
  o.live = g_live;
  const size_t n0 = 15 * 9, n1 = 3 * 16, s0 = (n0 + 1) / 2, s1 = (n1 + 1) / 2; /* 2 ranks */
  const int r = acc_rank(acc);
  o.S = s0 + s1;
  o.own = (n0 - (size_t)r * s0 < s0 ? n0 - (size_t)r * s0 : s0) + s1;
  if (offload && r == 0)
    printf("stage %d offloaded: %s\n", stage, d);
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
  return o;
}

static int shard_offload_rank(int rank, int world, void *arg) {
  (void)world, (void)arg;
  g_rw = 2, g_cublas_ok = 1, g_nccl_ok = 1;
  for (int stage = 1; stage <= 3; stage++) {
    const size_t base = g_live; /* the other runs' leftovers: none expected */
    offload_run_t on = offload_run(stage, 0);
    ASSERT_EQ(g_live, base); /* everything given back */
    offload_run_t off = offload_run(stage, 1);
    ASSERT_EQ(g_live, base);
    /* AdamW's two moments per owned element; stage 3's shards */
    const size_t drop = 2 * off.own * sizeof(float) + (stage == 3 ? off.S * sizeof(float) : 0);
    const int units = 2;
    if (rank == 0)
      printf("stage %d: device bytes %zu -> %zu offloaded (-%zu; moments %zu, parameter shards "
             "%zu); a step: %d -> %d copies back, %d -> %d copies up, %d -> %d synchronizations\n",
             stage, on.live, off.live, on.live - off.live, 2 * off.own * sizeof(float),
             stage == 3 ? off.S * sizeof(float) : 0, on.c.d2h, off.c.d2h, on.c.h2d, off.c.h2d,
             on.c.syncs, off.c.syncs);
    ASSERT_EQ(on.live - off.live, drop);
    ASSERT_EQ(off.c.d2h - on.c.d2h, units); /* the owned gradients */
    ASSERT_EQ(off.c.syncs - on.c.syncs, 1);
    /* the updated parameters up; at stage 3 each gather's owned block */
    ASSERT_EQ(off.c.h2d - on.c.h2d, stage == 3 ? 2 * units - 1 : units);
    ASSERT_TRUE(off.c.ag == on.c.ag && off.c.rs == on.c.rs && off.c.ar == on.c.ar);
  }
  return 0;
}

NBF_TEST(shard_offload_device) {
  spawn_ranks(2, shard_offload_rank, NULL);
}

/* A custom (not toolkit) model on the readable fake device, one rank:
 * two units ("a.weight" + "a.bias", "b.weight") of CU_N elements in all,
 * its backward writing step k's known gradients into its device
 * gradient buffer (host code may: the region is readable here), its
 * forward a constant. */
enum { CU_N = 300 };
static const acc_tensor_info_t CU_TENSORS[3] = {
    {"a.weight", 0, 10, 20}, {"a.bias", 200, 1, 20}, {"b.weight", 220, 8, 10}};
typedef struct {
  float *grads;
  int k; /* backward calls so far */
} custom_t;

static void custom_grads(int k, float *g) {
  for (int i = 0; i < CU_N; i++)
    g[i] = (float)((i * 7 + k * 13) % 29 - 14) * 0.01f;
}
static float custom_loss(void *self, const float *x, const int64_t *y, int b, int training) {
  (void)self, (void)x, (void)y, (void)b, (void)training;
  return 1.0f;
}
static int custom_backward(void *self) {
  custom_t *c = self;
  custom_grads(c->k++, c->grads);
  return 0;
}

/* seed 0: left uninitialized (the inaccessible device: the caller
 * replaces forward and backward by ones that touch nothing) */
static acc_model_t custom_model(custom_t *c, uint32_t seed) {
  float *p = NULL, *g = NULL;
  ASSERT_EQ(cudaMalloc((void **)&p, CU_N * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc((void **)&g, CU_N * sizeof(float)), cudaSuccess);
  for (int i = 0; seed && i < CU_N; i++)
    p[i] = (float)((i * 31u + seed * 17u) % 97u) * 0.01f - 0.5f, g[i] = 0.0f;
  *c = (custom_t){.grads = g};
  return (acc_model_t){.params = p,
                       .grads = g,
                       .num_params = CU_N,
                       .tensors = CU_TENSORS,
                       .num_tensors = 3,
                       .input_dim = DIM,
                       .self = c,
                       .forward_loss = custom_loss,
                       .backward = custom_backward,
                       .predict = dev_params_predict};
}

/* Each stage (0: NO_SHARD too) of the custom model, offloaded, ends with
 * the parameters of torch-semantics AdamW stepped on the host over the
 * same gradients (acc_adamw_new on host buffers: the update the CPU's
 * sharded path makes, which test_shard proves equal to DDP), bit for bit:
 * the master copy came from the device, the owned gradients went down,
 * the updates came back up (stage 3: the shards stayed on the host and
 * were gathered from there). The non-offloaded device step is a kernel
 * this fake does not run (runtime.shard_gpu compares it on a GPU). */
NBF_TEST(shard_offload_matches_host_adamw) {
  g_rw = 1, g_cublas_ok = 1, g_nccl_ok = 1;
  acc_t *acc = fake_acc("no");
  float x[SH_BATCH * DIM] = {0};
  int64_t y[SH_BATCH] = {0};
  for (int stage = 0; stage <= 3; stage++) {
    custom_t c;
    acc_model_t model = custom_model(&c, 1);
    static float want[CU_N], g[CU_N];
    memcpy(want, model.params, sizeof want);
    acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
    cfg.stage = stage;
    cfg.offload = 1;
    acc_optim_t *ref =
        acc_adamw_new(want, g, CU_N, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay);
    ASSERT_NOT_NULL(ref);
    acc_shard_t *sh = acc_shard_new(acc, &model, &cfg);
    if (!sh)
      NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
    for (int k = 0; k < SH_STEPS; k++) {
      ASSERT_TRUE(!isnan(acc_shard_forward_loss(sh, x, y, SH_BATCH, 1)));
      ASSERT_OK(acc, acc_shard_backward(sh));
      ASSERT_EQ(acc_shard_step(sh), 1);
      custom_grads(k, g);
      ASSERT_EQ(acc_optim_step(acc, ref), 1);
    }
    ASSERT_OK(acc, acc_shard_gather_params(sh));
    const int same = !memcmp(model.params, want, sizeof want);
    printf("stage %d offloaded, %d steps: the parameters %s host AdamW's\n", stage, SH_STEPS,
           same ? "equal" : "DIFFER FROM");
    ASSERT_TRUE(same);
    acc_shard_destroy(&sh);
    acc_optim_destroy(&ref);
    cudaFree(model.params), cudaFree(model.grads);
  }
  acc_destroy(&acc);
}

/* Checkpoints of a custom (not toolkit) device model (issue 23 item 3;
 * they were refused): each stage (0: NO_SHARD too), offloaded or not,
 * SHARDED and FULL. A run at seed 1 takes two steps, saves (the type),
 * takes a third and saves a SHARDED one; a run at seed 2 loads the first
 * checkpoint, takes the same third step and saves a SHARDED one: the two
 * shard files are equal byte for byte (parameters, moments, gradients and
 * step count came back through the host copies; offloaded, the host
 * master copy was refreshed from the loaded parameters before the third
 * step, which the host optimizer computes for real here). */
/* Rank 0's shard files of checkpoints b and c are equal byte for byte
 * (and longer than `least` bytes); `what` names the case. */
static void same_shard_files(const char *b, const char *c, size_t least, const char *what) {
  char pb[128], pc[128];
  snprintf(pb, sizeof pb, "%s/nbfork_shard0.bin", b);
  snprintf(pc, sizeof pc, "%s/nbfork_shard0.bin", c);
  static unsigned char fb[1 << 16], fc[1 << 16];
  size_t nb = rt_read_file(pb, fb, sizeof fb), nc = rt_read_file(pc, fc, sizeof fc);
  printf("%s: the resumed run's shard file: %zu bytes, %s\n", what, nc,
         nb == nc && !memcmp(fb, fc, nb) ? "equal" : "DIFFERENT");
  ASSERT_TRUE(nb > least && nb == nc);
  ASSERT_EQ(memcmp(fb, fc, nb), 0);
}

static acc_shard_t *custom_shard(acc_t *acc, acc_model_t *model, int stage, int offload) {
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = stage;
  cfg.offload = offload;
  acc_shard_t *sh = acc_shard_new(acc, model, &cfg);
  if (!sh)
    NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
  return sh;
}

static void custom_step(acc_t *acc, acc_shard_t *sh) {
  float x[SH_BATCH * DIM] = {0};
  int64_t y[SH_BATCH] = {0};
  ASSERT_TRUE(!isnan(acc_shard_forward_loss(sh, x, y, SH_BATCH, 1)));
  ASSERT_OK(acc, acc_shard_backward(sh));
  ASSERT_EQ(acc_shard_step(sh), 1);
}

static void custom_checkpoint_case(acc_t *acc, int stage, int offload, int full) {
  char a[] = "/tmp/nbfork_fakedev_cu_XXXXXX", b[] = "/tmp/nbfork_fakedev_cu_XXXXXX",
       c[] = "/tmp/nbfork_fakedev_cu_XXXXXX";
  ASSERT_TRUE(mkdtemp(a) && mkdtemp(b) && mkdtemp(c));
  custom_t c1, c2;
  acc_model_t m1 = custom_model(&c1, 1), m2 = custom_model(&c2, 2);
  acc_shard_t *one = custom_shard(acc, &m1, stage, offload);
  custom_step(acc, one), custom_step(acc, one);
  ASSERT_OK(acc, acc_shard_save_state(one, a, full ? ACC_FULL_STATE_DICT : ACC_SHARDED_STATE_DICT));
  custom_step(acc, one);
  ASSERT_OK(acc, acc_shard_save_state(one, b, ACC_SHARDED_STATE_DICT));
  acc_shard_t *two = custom_shard(acc, &m2, stage, offload);
  ASSERT_OK(acc, acc_shard_load_state(two, a));
  c2.k = 2; /* the third step's gradients */
  custom_step(acc, two);
  ASSERT_OK(acc, acc_shard_save_state(two, c, ACC_SHARDED_STATE_DICT));
  char what[96];
  snprintf(what, sizeof what, "stage %d%s, %s, after one more step", stage,
           offload ? " offloaded" : "", full ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT");
  same_shard_files(b, c, CU_N * sizeof(float), what);
  acc_shard_destroy(&two);
  acc_shard_destroy(&one);
  cudaFree(m1.params), cudaFree(m1.grads), cudaFree(m2.params), cudaFree(m2.grads);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s %s %s", a, b, c);
  ASSERT_EQ(system(cmd), 0);
}

NBF_TEST(shard_custom_device_checkpoints) {
  g_rw = 1, g_cublas_ok = 1, g_nccl_ok = 1;
  acc_t *acc = fake_acc("no");
  for (int stage = 0; stage <= 3; stage++)
    for (int offload = 0; offload <= 1; offload++)
      for (int full = 0; full <= 1; full++)
        custom_checkpoint_case(acc, stage, offload, full);
  acc_destroy(&acc);
}

/* The Trainer with --fsdp full_shard saves a custom device model's
 * checkpoints (without sharding it still refuses them, as
 * trainer_refuses_checkpoints_of_custom_device_model checks), the host
 * never touching its device memory (inaccessible here). */
NBF_TEST(trainer_fsdp_custom_device_checkpoints) {
  g_rw = 2, g_cublas_ok = 1, g_nccl_ok = 1;
  acc_t *acc = fake_acc("no");
  custom_t c;
  acc_model_t m = custom_model(&c, 0);
  m.forward_loss = dev_params_loss, m.backward = dev_params_backward;
  acc_dataset_t ds = dataset();
  acc_training_args_t args;
  acc_training_args_init(&args);
  char dir[] = "/tmp/nbfork_fakedev_cfsdp_XXXXXX", sub[256];
  ASSERT_NOT_NULL(mkdtemp(dir));
  const char *kv[][2] = {{"save_strategy", "steps"}, {"save_steps", "1"},    {"max_steps", "2"},
                         {"disable_tqdm", "true"},   {"fsdp", "full_shard"}, {"output_dir", dir}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    ASSERT_EQ(acc_training_args_set(&args, kv[i][0], kv[i][1]), ACC_OK);
  acc_trainer_t *tr = acc_trainer_new(acc, &args, &m, &ds, NULL);
  if (!tr)
    NBF_TEST_FAIL("acc_trainer_new: %s", acc_last_error(acc));
  ASSERT_OK(acc, acc_trainer_train(tr));
  snprintf(sub, sizeof sub, "%s/checkpoint-2/nbfork_state.bin", dir);
  ASSERT_EQ(access(sub, R_OK), 0);
  acc_trainer_destroy(&tr);
  snprintf(sub, sizeof sub, "rm -rf %s", dir);
  ASSERT_EQ(system(sub), 0);
  cudaFree(m.params), cudaFree(m.grads);
  acc_destroy(&acc);
}

/* What a device model cannot have yet is refused by name, before any
 * host access: parameters and gradients on different sides. (HYBRID_SHARD,
 * offload and a custom model's checkpoints were refused until
 * shard_hybrid_device, shard_offload_device and
 * shard_custom_device_checkpoints.) */
NBF_TEST(shard_device_refusals) {
  g_rw = 2, g_cublas_ok = 1;
  acc_t *acc = fake_acc("no");
  acc_model_t model;
  acc_mlp_t *m = shard_mlp(acc, &model);
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = 3;
  acc_model_t mixed = model;
  static float host_grads[256];
  mixed.grads = host_grads;
  ASSERT_TRUE(acc_shard_new(acc, &mixed, &cfg) == NULL);
  ASSERT_TRUE(strstr(acc_last_error(acc), "both on device 0 or both on the host") != NULL);
  /* a custom device model's checkpoints (refused until
   * shard_custom_device_checkpoints): through host copies, the host never
   * touching its device memory (it faults here) */
  g_nccl_ok = 1; /* stage 3 gathers the whole model for FULL */
  acc_model_t custom = model;
  custom.mlp = NULL;
  acc_shard_t *sh = acc_shard_new(acc, &custom, &cfg);
  if (!sh)
    NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
  char dir[] = "/tmp/nbfork_fakedev_shard_XXXXXX", names[512];
  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_OK(acc, acc_shard_save_state(sh, dir, ACC_SHARDED_STATE_DICT));
  ASSERT_OK(acc, acc_shard_load_state(sh, dir));
  ASSERT_OK(acc, acc_shard_save_state(sh, dir, ACC_FULL_STATE_DICT));
  ASSERT_OK(acc, acc_shard_load_state(sh, dir));
  ASSERT_TRUE(dir_files(dir, names, sizeof names) > 0);
  remove_dir(dir);
  acc_shard_destroy(&sh);
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
}

/* The Trainer's --fsdp full_shard on a device MLP (it was refused):
 * trains through acc_shard_* on the device, the host never touching its
 * memory, and saves its checkpoints (FULL_STATE_DICT, the Trainer's
 * default) through host copies. */
NBF_TEST(trainer_fsdp_device) {
  g_rw = 2, g_cublas_ok = 1, g_nccl_ok = 1;
  acc_t *acc = fake_acc("no");
  acc_model_t model;
  acc_mlp_t *m = shard_mlp(acc, &model);
  static float x[NSAMPLE * 8];
  static int64_t y[NSAMPLE];
  acc_dataset_t ds = {.x = x, .y = y, .n = NSAMPLE, .dim = 8};
  for (int save = 0; save <= 1; save++) {
    acc_training_args_t args;
    acc_training_args_init(&args);
    ASSERT_EQ(acc_training_args_set(&args, "save_strategy", save ? "steps" : "no"), ACC_OK);
    ASSERT_EQ(acc_training_args_set(&args, "save_steps", "1"), ACC_OK);
    ASSERT_EQ(acc_training_args_set(&args, "max_steps", "2"), ACC_OK);
    ASSERT_EQ(acc_training_args_set(&args, "per_device_train_batch_size", "4"), ACC_OK);
    ASSERT_EQ(acc_training_args_set(&args, "per_device_eval_batch_size", "4"), ACC_OK);
    ASSERT_EQ(acc_training_args_set(&args, "disable_tqdm", "true"), ACC_OK);
    ASSERT_EQ(acc_training_args_set(&args, "fsdp", "full_shard"), ACC_OK);
    char dir[] = "/tmp/nbfork_fakedev_fsdp_XXXXXX";
    ASSERT_NOT_NULL(mkdtemp(dir));
    ASSERT_EQ(acc_training_args_set(&args, "output_dir", dir), ACC_OK);
    acc_trainer_t *tr = acc_trainer_new(acc, &args, &model, &ds, NULL);
    if (!tr)
      NBF_TEST_FAIL("acc_trainer_new: %s", acc_last_error(acc));
    const int ag = g_nccl_ag, rs = g_nccl_rs;
    ASSERT_OK(acc, acc_trainer_train(tr));
    char names[512], sub[256];
    const int n = dir_files(dir, names, sizeof names);
    printf("save_strategy %s: %d all-gathers, %d reduce-scatters; in the output folder: %s\n",
           save ? "steps" : "no", g_nccl_ag - ag, g_nccl_rs - rs, n ? names : "nothing");
    ASSERT_TRUE(g_nccl_ag - ag >= 2 * 2 && g_nccl_rs - rs == 2 * 2); /* 2 steps, 2 layers */
    snprintf(sub, sizeof sub, "%s/checkpoint-2/nbfork_state.bin", dir);
    ASSERT_EQ(access(sub, R_OK) == 0, save);
    acc_trainer_destroy(&tr);
    snprintf(sub, sizeof sub, "rm -rf %s", dir);
    ASSERT_EQ(system(sub), 0);
  }
  acc_model_release(&model);
  acc_mlp_destroy(&m);
  acc_destroy(&acc);
}

/* A sharded device MLP (the readable fake device, one rank: copies and
 * NCCL's copies are real, kernels do nothing) at seed `seed`. */
typedef struct {
  acc_mlp_t *m;
  acc_model_t model;
  acc_shard_t *sh;
} dev_shard_t;

static void dev_shard(dev_shard_t *d, acc_t *acc, int stage, int offload, int seed) {
  acc_set_seed(acc, (uint64_t)seed, 0);
  d->m = shard_mlp(acc, &d->model);
  acc_shard_config_t cfg = ACC_SHARD_CONFIG_INIT;
  cfg.stage = stage;
  cfg.offload = offload;
  if (!(d->sh = acc_shard_new(acc, &d->model, &cfg))) /* keeps &d->model */
    NBF_TEST_FAIL("acc_shard_new: %s", acc_last_error(acc));
}

static void dev_shard_free(dev_shard_t *d) {
  acc_shard_destroy(&d->sh);
  acc_model_release(&d->model);
  acc_mlp_destroy(&d->m);
}

/* Each stage's (0: NO_SHARD too) SHARDED and FULL checkpoints of a
 * device MLP, offloaded or not: a run at seed 1 (two steps) saves; a run at seed 2 loads it
 * and saves a SHARDED one again; its shard file equals the first run's
 * own SHARDED save byte for byte (the owned parameters, moments,
 * gradients and step count came back through the host copies; seed 2's
 * parameters differ). */
NBF_TEST(shard_device_checkpoints) {
  g_rw = 1, g_cublas_ok = 1, g_nccl_ok = 1;
  acc_t *acc = fake_acc("no");
  float x[SH_BATCH * 8] = {0};
  int64_t y[SH_BATCH] = {0, 1, 2, 0};
  for (int stage = 0; stage <= 3; stage++)
    for (int k = 0; k < 4; k++) {
      const int full = k & 1, offload = k >> 1;
      char a[] = "/tmp/nbfork_fakedev_ck_XXXXXX", b[] = "/tmp/nbfork_fakedev_ck_XXXXXX",
           c[] = "/tmp/nbfork_fakedev_ck_XXXXXX";
      ASSERT_TRUE(mkdtemp(a) && mkdtemp(b) && mkdtemp(c));
      dev_shard_t one, two;
      dev_shard(&one, acc, stage, offload, 1);
      for (int k = 0; k < 2; k++) {
        ASSERT_TRUE(!isnan(acc_shard_forward_loss(one.sh, x, y, SH_BATCH, 1)));
        ASSERT_OK(acc, acc_shard_backward(one.sh));
        ASSERT_EQ(acc_shard_step(one.sh), 1);
      }
      const int type = full ? ACC_FULL_STATE_DICT : ACC_SHARDED_STATE_DICT;
      ASSERT_OK(acc, acc_shard_save_state(one.sh, a, type));
      ASSERT_OK(acc, acc_shard_save_state(one.sh, b, ACC_SHARDED_STATE_DICT));
      dev_shard(&two, acc, stage, offload, 2);
      ASSERT_OK(acc, acc_shard_load_state(two.sh, a));
      ASSERT_OK(acc, acc_shard_save_state(two.sh, c, ACC_SHARDED_STATE_DICT));
      char what[96];
      snprintf(what, sizeof what, "stage %d%s, %s", stage, offload ? " offloaded" : "",
               full ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT");
      same_shard_files(b, c, 1000, what);
      dev_shard_free(&two);
      dev_shard_free(&one);
      char cmd[256];
      snprintf(cmd, sizeof cmd, "rm -rf %s %s %s", a, b, c);
      ASSERT_EQ(system(cmd), 0);
    }
  acc_destroy(&acc);
}

NBF_TEST_MAIN()
