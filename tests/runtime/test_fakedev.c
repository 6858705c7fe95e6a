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
 * Built only with CUDA (NBFORK_WITH_CUDA); runs with or without a GPU.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include "nbf_trainer.h"
#include "nbfork.h"
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

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr) {
  memset(a, 0, sizeof *a);
  const char *p = ptr;
  a->type = g_dev && p >= g_dev && p < g_dev + g_dev_bytes ? cudaMemoryTypeDevice
                                                           : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  (void)bytes;
  *p = NULL;
  return cudaErrorMemoryAllocation;
}

/* An accelerator on the fake device 0. */
static acc_t *fake_acc(const char *precision) {
  if (!g_dev) {
    g_dev = mmap(NULL, g_dev_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_TRUE(g_dev != MAP_FAILED);
  }
  unsetenv("ACCELERATE_USE_CPU");
  acc_config_t cfg = ACC_CONFIG_INIT;
  cfg.mixed_precision = precision;
  acc_t *acc = acc_new(&cfg);
  ASSERT_NOT_NULL(acc);
  ASSERT_EQ(acc_device(acc), 0);
  return acc;
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

NBF_TEST_MAIN()
