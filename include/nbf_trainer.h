/*
 * nbf_trainer.h — the Trainer of Hugging Face Transformers, in C, on
 * libnbfork's Accelerator (included by nbfork.h).
 *
 * Names are Transformers' own: TrainingArguments fields
 * (acc_training_args_t), TrainerState fields (acc_trainer_state_t),
 * TrainerControl flags (acc_trainer_control_t), TrainerCallback events
 * (acc_trainer_callback_t), EarlyStoppingCallback, `checkpoint-<step>`
 * folders with `trainer_state.json`, and the log lines Transformers
 * prints:
 *   {'loss': 0.4321, 'grad_norm': 1.2, 'learning_rate': 0.0499, 'epoch': 0.53}
 *
 * A training function (under %launch, `nbfork launch`, or alone):
 *
 *   acc_training_args_t args;
 *   acc_training_args_init(&args);                  // Transformers defaults
 *   if (acc_training_args_parse(&args, argc, argv)) // --learning_rate 0.1 ...
 *     fprintf(stderr, "%s\n", acc_last_error(NULL));
 *   acc_t *acc = acc_trainer_accelerator_new(&args); // precision, accumulation, seed
 *   acc_mlp_t *mlp = acc_mlp_new(acc, sizes, 2, args.per_device_train_batch_size);
 *   acc_model_t model;
 *   acc_mlp_model(mlp, &model);
 *   acc_trainer_t *tr = acc_trainer_new(acc, &args, &model, &train, &eval);
 *   acc_trainer_set_compute_metrics(tr, acc_accuracy_metric, NULL);
 *   if (!tr || acc_trainer_train(tr) != ACC_OK)      // stop the rank on an error
 *     fprintf(stderr, "%s\n", acc_last_error(acc));
 *   acc_trainer_destroy(&tr); acc_mlp_destroy(&mlp); acc_destroy(&acc);
 *
 * Errors follow nbfork.h: acc_result_t, the text in acc_last_error(acc)
 * (acc_last_error(NULL) for calls without an accelerator).
 */
#ifndef NBF_TRAINER_H
#define NBF_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "nbfork.h" /* acc_t, acc_result_t, acc_mlp_t (nbfork.h includes this file last) */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Embedding (nn.Embedding) with NEFTune                                */
/* ------------------------------------------------------------------ */

/* nn.Embedding(num_embeddings, embedding_dim) whose weight (num × dim f32,
 * row-major) and gradient live in the caller's buffers (a model's flat
 * buffers), initialized N(0, 1) from the accelerator's RNG as torch does.
 * max_tokens bounds the tokens of one forward. `acc` may be NULL. NULL on
 * bad sizes or no memory (the reason in acc_last_error(acc)). */
typedef struct acc_embedding acc_embedding_t;
ACC_API acc_embedding_t *acc_embedding_new(acc_t *acc, float *weight, float *grad,
                                           int num_embeddings, int embedding_dim, int max_tokens);
ACC_API void acc_embedding_destroy(acc_embedding_t **e_p);
/* The rows of `tokens` ids (int64, sequences of seq_len tokens each) into
 * an output of tokens × embedding_dim f32 owned by the layer (valid until
 * the next forward). With training != 0 and a NEFTune alpha > 0, uniform
 * noise in [-alpha/sqrt(seq_len × dim), +alpha/sqrt(seq_len × dim)] is
 * added (transformers' neftune_post_forward_hook; Jain et al. 2023) from
 * the accelerator's RNG. NULL on an id out of range or too many tokens. */
ACC_API const float *acc_embedding_forward(acc_embedding_t *e, const int64_t *ids, int tokens,
                                           int seq_len, int training);
/* ADD the gradient of the last forward's output (`dout`, tokens × dim)
 * into the weight gradient rows of its ids (the noise is additive: its
 * gradient is the identity). */
ACC_API void acc_embedding_backward(acc_embedding_t *e, const float *dout);
/* NEFTune's alpha (0 = off; negative ignored). The Trainer sets it from
 * neftune_noise_alpha on the model's input_embeddings while it trains. */
ACC_API void acc_embedding_set_neftune_noise_alpha(acc_embedding_t *e, double alpha);

/* ------------------------------------------------------------------ */
/* The model interface                                                  */
/* ------------------------------------------------------------------ */

/* One named parameter tensor, a view into the model's flat buffers:
 * elements [offset, offset + rows*cols) of `params` (and of `grads`),
 * row-major; a vector has cols == 1. Names follow PyTorch's
 * named_parameters ("layers.0.weight"). */
typedef struct {
  char name[64];
  size_t offset; /* elements */
  int rows, cols;
} acc_tensor_info_t;

/* What the Trainer drives. All parameters live in one flat f32 buffer
 * `params` of `num_params` elements, their gradients in `grads` (same
 * length, same layout), so one all-reduce and one optimizer cover the
 * model; `tensors` names the pieces (num_tensors entries, in order, not
 * overlapping). A user's model fills this struct in a cell; the toolkit's
 * MLP fills it with acc_mlp_model.
 *
 *  forward_loss(self, x, labels, batch, training): forward `batch` rows of
 *    x (batch × input_dim f32) and return the mean loss against labels
 *    (batch int64); NaN on failure (bad label). `training` is 1 in the
 *    training loop, 0 in evaluation (dropout, NEFTune noise: training
 *    only). Must keep what backward and predict need.
 *  backward(self): ADD d(loss)/d(params) of the last forward_loss into
 *    `grads` (with fp16, of the loss multiplied by acc_loss_scale, as
 *    GradScaler.scale(loss).backward()). Returns 0, or -1 on failure.
 *  predict(self, pred): argmax class of each row of the last forward into
 *    `pred` (batch int64).
 *  mlp: the toolkit MLP behind the model, or NULL: checkpoints then save
 *    it as acc_save_state does; a user model's parameters are saved as a
 *    registered object ("trainer.params"). */
typedef struct {
  void *self;
  float *params, *grads;
  size_t num_params;
  const acc_tensor_info_t *tensors;
  int num_tensors;
  int input_dim; /* f32 values per sample */
  float (*forward_loss)(void *self, const float *x, const int64_t *labels, int batch, int training);
  int (*backward)(void *self);
  void (*predict)(void *self, int64_t *pred);
  acc_mlp_t *mlp;
  /* get_input_embeddings(): the layer NEFTune adds noise to, or NULL */
  acc_embedding_t *input_embeddings;
  void *owned; /* what acc_mlp_model allocated (acc_model_release frees it); NULL for yours */
  /* rows forward_loss accepts at most (acc_mlp_new's max_batch); 0 = any.
   * acc_trainer_new refuses batch sizes above it, naming both. */
  int max_batch;
} acc_model_t;

/* Fill `out` with the model interface of `m` (softmax cross-entropy
 * loss; tensors "layers.<l>.weight" (out × in) and "layers.<l>.bias"
 * (out × 1)). Allocates the tensor table and the adapter: free them
 * with acc_model_release (after the Trainer is gone; `m` must outlive
 * `out`). Errors: INVALID_ARGUMENT (NULL), NO_MEMORY; the reason in
 * acc_last_error(NULL). */
ACC_API acc_result_t acc_mlp_model(acc_mlp_t *m, acc_model_t *out);
/* Free what acc_mlp_model allocated in `model` (`owned`); NULL-safe. */
ACC_API void acc_model_release(acc_model_t *model);

/* ------------------------------------------------------------------ */
/* GaLore (optim = "galore_adamw")                                      */
/* ------------------------------------------------------------------ */

/* GaLoreAdamW (Zhao et al. 2024; galore_torch, projector "std") over the
 * model's flat buffers: the 2-D tensors whose name contains one of the
 * comma-separated `target_modules` get gradients projected to rank
 * min(rank, rows, cols) by an SVD (LAPACK sgesvd) every update_proj_gap
 * steps, Adam moments in that space, the update projected back times
 * `scale`; the other parameters get the same Adam step unprojected;
 * weight decay p -= lr·weight_decay·p after the update (galore_torch).
 * With `acc`, the state (step, projectors, moments) is registered for
 * checkpointing. NULL on bad arguments, no target found, or no memory
 * (the reason in acc_last_error(acc)). */
typedef struct acc_galore acc_galore_t;
ACC_API acc_galore_t *acc_galore_new(acc_t *acc, const acc_model_t *model,
                                     const char *target_modules, int rank, int update_proj_gap,
                                     float scale, float lr, float beta1, float beta2, float eps,
                                     float weight_decay);
/* One step from the model's gradient buffer (already averaged and
 * unscaled). Errors: BACKEND (sgesvd failed). */
ACC_API acc_result_t acc_galore_step(acc_galore_t *g);
ACC_API void acc_galore_set_lr(acc_galore_t *g, float lr);
/* Bytes of optimizer state (projectors and moments). */
ACC_API size_t acc_galore_state_bytes(const acc_galore_t *g);
ACC_API void acc_galore_destroy(acc_galore_t **g_p);

/* ------------------------------------------------------------------ */
/* LOMO and AdaLomo (optim = "lomo" / "adalomo")                        */
/* ------------------------------------------------------------------ */

/* LOMO (Lv et al. 2023, "Full Parameter Fine-tuning for Large Language
 * Models with Limited Resources") or, with adaptive != 0, AdaLomo (Lv et
 * al. 2023, "AdaLomo: Low-memory Optimization with Adaptive Learning
 * Rate"), as lomo-optim's LOMO/AdaLomo: the update is fused into the
 * toolkit MLP's backward, layer by layer (last first); each layer's
 * gradient is all-reduced (average, blocking) when the world has several
 * ranks, applied to its parameters and zeroed before the next layer's is
 * computed. LOMO: p -= lr·g (no weight decay). AdaLomo: Adafactor's
 * factored second moments (row and column means of g² + 1e-30 for a
 * matrix, the full vector for a bias; beta2 = 1 - t^-0.8), grouped
 * update normalization (each tensor's update RMS capped at 1), step
 * lr·max(1e-3, RMS(p)), decoupled weight decay p *= 1 - that step ×
 * weight_decay. With max_grad_norm > 0, clipping by global norm takes two
 * backward passes (the first only measures the norm). `model` must be an
 * acc_mlp_model on the host (a device model is refused: UNSUPPORTED).
 * AdaLomo's state (step and moments, acc_lomo_state_bytes) is registered
 * for checkpointing with `acc`; LOMO keeps none. NULL on failure (the
 * reason in acc_last_error(acc)). */
typedef struct acc_lomo acc_lomo_t;
ACC_API acc_lomo_t *acc_lomo_new(acc_t *acc, acc_model_t *model, int adaptive, float lr,
                                 float max_grad_norm, float weight_decay);
/* After model->forward_loss: backward with the fused update (one or two
 * passes, see above). Collective with several ranks. Errors:
 * INVALID_ARGUMENT (backward failed: no forward, bad label), BACKEND (an
 * all-reduce failed); the step's parameters may then be half updated. */
ACC_API acc_result_t acc_lomo_backward(acc_lomo_t *o);
ACC_API void acc_lomo_set_lr(acc_lomo_t *o, float lr);
/* The global gradient norm of the last acc_lomo_backward (NaN without
 * clipping: LOMO never holds every gradient at once). */
ACC_API double acc_lomo_grad_norm(const acc_lomo_t *o);
/* Fused steps done (AdaLomo's t; checkpointed for AdaLomo only). */
ACC_API int64_t acc_lomo_num_steps(const acc_lomo_t *o);
/* Bytes of optimizer state (0 for LOMO). */
ACC_API size_t acc_lomo_state_bytes(const acc_lomo_t *o);
ACC_API void acc_lomo_destroy(acc_lomo_t **o_p);

/* ------------------------------------------------------------------ */
/* TrainingArguments                                                    */
/* ------------------------------------------------------------------ */

/* Transformers' TrainingArguments (field names and defaults as in
 * transformers 4.5x). Text fields are NUL-terminated arrays; set them with
 * acc_training_args_set so they are checked. "Unset" for Transformers'
 * None is said per field. */
typedef struct {
  char output_dir[512];             /* "trainer_output" */
  double learning_rate;             /* 5e-5 */
  int per_device_train_batch_size;  /* 8 */
  int per_device_eval_batch_size;   /* 8 */
  double num_train_epochs;          /* 3.0 */
  long max_steps;                   /* -1; > 0 overrides num_train_epochs */
  double weight_decay;              /* 0.0 (applied to every parameter, biases too) */
  double adam_beta1, adam_beta2;    /* 0.9, 0.999 */
  double adam_epsilon;              /* 1e-8 */
  double warmup_steps;              /* 0; an integer, or a ratio of max_steps below 1 */
  char lr_scheduler_type[32];       /* linear, cosine, cosine_with_min_lr,
                                     * constant, constant_with_warmup, inverse_sqrt */
  char lr_scheduler_kwargs[128];    /* "min_lr_rate=0.1" or "min_lr=1e-6" (cosine_with_min_lr),
                                     * "timescale=N" (inverse_sqrt); "" */
  char eval_strategy[16];           /* no | steps | epoch; "no" */
  char save_strategy[16];           /* no | steps | epoch | best; "steps" */
  char logging_strategy[16];        /* no | steps | epoch; "steps" */
  double eval_steps;                /* 0 = logging_steps; below 1 = ratio of max_steps */
  double save_steps;                /* 500; below 1 = ratio */
  double logging_steps;             /* 500; below 1 = ratio */
  int save_total_limit;             /* -1 = unlimited (None) */
  int load_best_model_at_end;       /* false */
  char metric_for_best_model[64];   /* "" = None ("loss" with load_best_model_at_end) */
  int greater_is_better;            /* -1 = None: true unless the metric ends in "loss" */
  int gradient_accumulation_steps;  /* 1 */
  double max_grad_norm;             /* 1.0; 0 = no clipping */
  long long seed;                   /* 42 */
  char mixed_precision[8];          /* no | fp16 | bf16; "no" (then the launcher's
                                     * ACCELERATE_MIXED_PRECISION decides, as
                                     * Accelerator(mixed_precision=None)) */
  char log_level[16];               /* debug|info|warning|error|critical|passive; "passive" */
  char log_level_replica[16];       /* "warning" */
  int log_on_each_node;             /* true */
  double neftune_noise_alpha;       /* 0 = None; needs the model's input_embeddings */
  char optim[32];                   /* sgd | adamw | galore_adamw | lomo | adalomo ("adamw");
                                     * lomo/adalomo need gradient_accumulation_steps 1,
                                     * no fp16 and the toolkit MLP on the host */
  char optim_args[256];             /* sgd: "momentum=0.9"; galore_adamw: "rank=128,
                                     * update_proj_gap=200, scale=0.25" (defaults) */
  char optim_target_modules[256];   /* galore_adamw: comma-separated parts of
                                     * tensor names ("layers.0") */
  char resume_from_checkpoint[512]; /* "" or "false" = no; "true" = latest checkpoint-N;
                                     * or a path */
  int early_stopping_patience;      /* 0 = no EarlyStoppingCallback */
  double early_stopping_threshold;  /* 0.0 */
  int disable_tqdm;                 /* false: a progress bar on the main process */
  int do_train, do_eval;            /* false; not read by the Trainer (as in Transformers:
                                     * scripts read them) */
  char report_to[16];               /* none | all; "none" (no integration is built in: the
                                     * log lines and trainer_state.json are written anyway) */
  /* Sharded data parallel (nbf_shard.h; README "Sharding"), Transformers'
   * names. fsdp: space-separated FSDPOption words: full_shard (ZeRO 3),
   * shard_grad_op (2), no_shard (0), hybrid_shard (3 within each node),
   * hybrid_shard_zero2 (2 within each node), offload, auto_wrap (the wrap
   * units are the model's layers / named tensor groups already).
   * fsdp_config: a JSON file or inline JSON object (keys with or without
   * "fsdp_"): offload_params, state_dict_type (FULL_STATE_DICT |
   * SHARDED_STATE_DICT), backward_prefetch "no_prefetch" and
   * forward_prefetch false (stage 3's prefetch off) honoured;
   * min_num_params, transformer_layer_cls_to_wrap, other prefetch values,
   * limit_all_gathers, use_orig_params, sync_module_states,
   * cpu_ram_efficient_loading accepted as hints; activation_checkpointing
   * and xla refused when true; others refused by name. deepspeed: a
   * DeepSpeed JSON file or inline object: zero_optimization.stage 0..3
   * and offload_optimizer/offload_param.device (cpu | none) honoured;
   * gradient_accumulation_steps, train_micro_batch_size_per_gpu and
   * gradient_clipping must be "auto" or equal the arguments' (as
   * HfTrainerDeepSpeedConfig checks). Without any of them the launcher's
   * environment decides (ACCELERATE_USE_FSDP / ACCELERATE_USE_DEEPSPEED,
   * as acc_shard_new reads it); optim must then be sgd or adamw. */
  char fsdp[128];
  char fsdp_config[1024];
  char deepspeed[1024];
} acc_training_args_t;

/* Transformers' defaults (listed above). Cannot fail. */
ACC_API void acc_training_args_init(acc_training_args_t *args);

/* Set the field `name` (Transformers' name, without "--") from text:
 * numbers as C/Python literals, booleans as true/false/1/0 (any case),
 * strings checked against their allowed values. Errors:
 * INVALID_ARGUMENT with "unknown argument 'NAME'" or "--NAME: bad value
 * 'VALUE' (expected ...)" in acc_last_error(NULL); the field is then
 * unchanged. */
ACC_API acc_result_t acc_training_args_set(acc_training_args_t *args, const char *name,
                                           const char *value);

/* Parse a command line of `--name value` or `--name=value` pairs
 * (argv[0] is the program and skipped), as HfArgumentParser does. A flag
 * not in the table, a missing or bad value is INVALID_ARGUMENT naming
 * it. Stops at the first error. */
ACC_API acc_result_t acc_training_args_parse(acc_training_args_t *args, int argc, char **argv);

/* Check the arguments together (what TrainingArguments.__post_init__
 * checks): load_best_model_at_end needs eval_strategy == save_strategy
 * (save_strategy "best" excepted) and, for "steps", save_steps a multiple
 * of eval_steps; save_strategy "best" and early stopping need an
 * eval_strategy and a metric; cosine_with_min_lr needs min_lr or
 * min_lr_rate; positive batch sizes and accumulation. Errors:
 * INVALID_ARGUMENT naming the fields, in acc_last_error(NULL). */
ACC_API acc_result_t acc_training_args_validate(const acc_training_args_t *args);

/* Python logging levels, as Transformers' log_level takes them. */
enum {
  ACC_LOG_PASSIVE = -1,
  ACC_LOG_DEBUG = 10,
  ACC_LOG_INFO = 20,
  ACC_LOG_WARNING = 30,
  ACC_LOG_ERROR = 40,
  ACC_LOG_CRITICAL = 50
};

/* TrainingArguments.get_process_log_level: log_level on the main process
 * (local rank 0 with log_on_each_node, else global rank 0), log_level_replica
 * on the others; "passive" gives the library default, warning (30). */
ACC_API int acc_training_args_process_log_level(const acc_training_args_t *args, int rank,
                                                int local_rank);

/* An Accelerator for these arguments: acc_new with mixed_precision,
 * gradient_accumulation_steps and seed (set_seed(args.seed) as the
 * Trainer does, so model initialization is reproducible). NULL on
 * failure (as acc_new). */
ACC_API acc_t *acc_trainer_accelerator_new(const acc_training_args_t *args);

/* ------------------------------------------------------------------ */
/* Learning-rate schedulers (transformers.get_scheduler)                */
/* ------------------------------------------------------------------ */

/* The multiplier of the base learning rate after `step` optimizer steps
 * (LambdaLR's lambda) for `args.lr_scheduler_type` with num_warmup_steps
 * `warmup` and num_training_steps `total`, as transformers/optimization.py
 * defines them (cosine with num_cycles 0.5; inverse_sqrt's timescale
 * defaults to warmup or 10000). Returns NaN for an unknown type or a
 * missing min_lr/min_lr_rate (see acc_training_args_validate). */
ACC_API double acc_lr_lambda(const acc_training_args_t *args, long step, long warmup, long total);

/* ------------------------------------------------------------------ */
/* Data                                                                 */
/* ------------------------------------------------------------------ */

/* A dataset of n samples: sample i is x[i*dim .. i*dim+dim) (f32) with
 * label y[i] (int64). Borrowed by the Trainer. */
typedef struct {
  const float *x;
  const int64_t *y;
  size_t n;
  int dim;
} acc_dataset_t;

/* Named metrics (Transformers' dict returned by compute_metrics). */
#define ACC_METRICS_MAX 16
typedef struct {
  int count;
  char name[ACC_METRICS_MAX][48];
  double value[ACC_METRICS_MAX];
} acc_metrics_t;

/* Append (name, value); replaces a metric of the same name. Names are
 * kept to their first 47 bytes (cut at a UTF-8 character boundary; names
 * equal once cut are one metric). Returns -1 when full, or for a name
 * starting with the byte 0x01 (trainer_state.json's writer reserves it). */
ACC_API int acc_metrics_put(acc_metrics_t *m, const char *name, double value);
/* The value of `name`, or NaN when absent. */
ACC_API double acc_metrics_get(const acc_metrics_t *m, const char *name);

/* compute_metrics(EvalPrediction): `n` predictions and labels gathered
 * from every rank (gather_for_metrics: each sample once); put named
 * metrics (without the "eval_" prefix) into `out`. */
typedef void (*acc_compute_metrics_fn)(const int64_t *preds, const int64_t *labels, size_t n,
                                       acc_metrics_t *out, void *user);
/* A compute_metrics giving "accuracy". */
ACC_API void acc_accuracy_metric(const int64_t *preds, const int64_t *labels, size_t n,
                                 acc_metrics_t *out, void *user);

/* ------------------------------------------------------------------ */
/* TrainerState, TrainerControl, callbacks                              */
/* ------------------------------------------------------------------ */

/* One entry of log_history: named values and the global step. */
typedef struct {
  acc_metrics_t values; /* "loss", "grad_norm", "learning_rate", "epoch", ... */
  long step;
} acc_log_entry_t;

typedef struct {
  double epoch; /* fractional: epochs done + steps into this epoch */
  long global_step, max_steps;
  long logging_steps, eval_steps, save_steps;
  int num_train_epochs, train_batch_size;
  acc_log_entry_t *log_history; /* log_history_len entries, owned by the Trainer */
  size_t log_history_len;
  int has_best_metric; /* best_metric is None until the first evaluation */
  double best_metric;
  long best_global_step;           /* 0 = None */
  char best_model_checkpoint[600]; /* "" = None */
  int is_local_process_zero, is_world_process_zero;
} acc_trainer_state_t;

typedef struct {
  int should_training_stop, should_epoch_stop, should_save, should_evaluate, should_log;
} acc_trainer_control_t;

typedef struct acc_trainer acc_trainer_t;

/* TrainerCallback: each event may be NULL. `logs` is the log entry for
 * on_log and the metrics for on_evaluate, NULL otherwise. Callbacks may
 * set the control flags. Called on every rank, as Transformers does.
 * on_substep_end fires after each gradient-accumulation micro-step that
 * is not an optimizer step (gradient_accumulation_steps - 1 times per
 * step); on_step_end after the optimizer step. Initialize this struct
 * with designated initializers (.on_log = f): fields may be added. */
typedef void (*acc_trainer_event_fn)(const acc_training_args_t *args, acc_trainer_state_t *state,
                                     acc_trainer_control_t *control, const acc_metrics_t *logs,
                                     void *user);
typedef struct {
  acc_trainer_event_fn on_init_end, on_train_begin, on_train_end, on_epoch_begin, on_epoch_end,
      on_step_begin, on_step_end, on_evaluate, on_save, on_log, on_substep_end;
  void *user;
} acc_trainer_callback_t;

/* ------------------------------------------------------------------ */
/* The Trainer                                                          */
/* ------------------------------------------------------------------ */

/* A Trainer for `model` on `train` (and `eval`, may be NULL) under * `args` (copied; validated with
 * acc_training_args_validate). `acc` must accumulate the arguments' gradient_accumulation_steps
 * (acc_trainer_accelerator_new makes such an accelerator; its mixed
 * precision is the model's). Creates the optimizer (optim,
 * learning_rate, weight_decay, adam_*, optim_args) and, with
 * early_stopping_patience > 0, an EarlyStoppingCallback. NULL on failure, the reason in
 * acc_last_error(acc). Everything borrowed must outlive the Trainer; the
 * Trainer must be destroyed before `acc`. */
ACC_API acc_trainer_t *acc_trainer_new(acc_t *acc, const acc_training_args_t *args,
                                       acc_model_t *model, const acc_dataset_t *train,
                                       const acc_dataset_t *eval);
ACC_API void acc_trainer_destroy(acc_trainer_t **tr_p);

/* Trainer.add_callback (copied; at most 16). The callback's on_init_end
 * fires at once: it joins a Trainer whose __init__ has ended. Errors:
 * INVALID_ARGUMENT (NULL, too many). */
ACC_API acc_result_t acc_trainer_add_callback(acc_trainer_t *tr, const acc_trainer_callback_t *cb);
ACC_API void acc_trainer_set_compute_metrics(acc_trainer_t *tr, acc_compute_metrics_fn fn,
                                             void *user);

/* Overridable steps (Trainer.compute_loss, training_step,
 * prediction_step): NULL restores the default. compute_loss returns the * mean loss of the batch
 * (it calls model->forward_loss by default); training_step runs compute_loss and model->backward
 * and returns the loss, or NaN on failure (the 1/gradient_accumulation_steps scaling and the
 * all-reduce are acc_backward's, after it); prediction_step fills preds and returns the loss
 * without gradients. `user` is given to each. With optim lomo/adalomo the update happens in
 * the default training_step's backward: an override must call acc_trainer_training_step
 * (train() stops with INVALID_ARGUMENT when a step ran no fused backward). */
typedef float (*acc_compute_loss_fn)(acc_trainer_t *tr, const float *x, const int64_t *y, int batch,
                                     int training, void *user);
typedef float (*acc_training_step_fn)(acc_trainer_t *tr, const float *x, const int64_t *y,
                                      int batch, void *user);
typedef float (*acc_prediction_step_fn)(acc_trainer_t *tr, const float *x, const int64_t *y,
                                        int batch, int64_t *preds, void *user);
ACC_API void acc_trainer_set_steps(acc_trainer_t *tr, acc_compute_loss_fn compute_loss,
                                   acc_training_step_fn training_step,
                                   acc_prediction_step_fn prediction_step, void *user);
/* The default steps, for an override to call. */
ACC_API float acc_trainer_compute_loss(acc_trainer_t *tr, const float *x, const int64_t *y,
                                       int batch, int training);
ACC_API float acc_trainer_training_step(acc_trainer_t *tr, const float *x, const int64_t *y,
                                        int batch);
ACC_API float acc_trainer_prediction_step(acc_trainer_t *tr, const float *x, const int64_t *y,
                                          int batch, int64_t *preds);

/* Trainer.train: the loop (resuming from args.resume_from_checkpoint
 * when set), logging, evaluation, checkpoints, callbacks, early stopping,
 * loading the best model at the end. Collective (every rank calls it).
 * Errors: INVALID_ARGUMENT (no checkpoint to resume from, a NaN loss
 * from a bad label), IO (checkpoint files), the collectives'. */
ACC_API acc_result_t acc_trainer_train(acc_trainer_t *tr);

/* Trainer.evaluate on the eval dataset: eval_loss, the compute_metrics
 * values prefixed "eval_", eval_runtime (s), eval_samples_per_second,
 * eval_steps_per_second, epoch; logged (on_log, a printed line) and given
 * to on_evaluate. `out` may be NULL. Collective. Errors: INVALID_ARGUMENT
 * (no eval dataset), the collectives'. */
ACC_API acc_result_t acc_trainer_evaluate(acc_trainer_t *tr, acc_metrics_t *out);

/* Save `output_dir/checkpoint-<global_step>/` now (Trainer._save_checkpoint):
 * nbfork_state.bin (model, optimizer, loss scaler, Trainer loop state),
 * nbfork_rank<R>.bin (each rank's RNG and accumulation state) and
 * trainer_state.json, then rotate (save_total_limit, keeping the best).
 * Collective. Errors: IO naming the path, the collectives'. */
ACC_API acc_result_t acc_trainer_save_checkpoint(acc_trainer_t *tr);

ACC_API acc_trainer_state_t *acc_trainer_state(acc_trainer_t *tr);
ACC_API acc_trainer_control_t *acc_trainer_control(acc_trainer_t *tr);
ACC_API const acc_training_args_t *acc_trainer_args(const acc_trainer_t *tr);
ACC_API acc_model_t *acc_trainer_model(acc_trainer_t *tr);
ACC_API acc_t *acc_trainer_accelerator(acc_trainer_t *tr);
/* The learning rate the next optimizer step uses. */
ACC_API double acc_trainer_learning_rate(const acc_trainer_t *tr);

/* Log `fmt` at `level` through the Trainer's logger (stderr, one line,
 * "[LEVEL|trainer] message") when level >= this process's log level
 * (acc_training_args_process_log_level). Returns 1 when printed, else 0. */
ACC_API int acc_trainer_log(const acc_trainer_t *tr, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* get_last_checkpoint: the path of the checkpoint-N under `dir` with the
 * largest N into `out`; 0 when found, -1 when none. */
ACC_API int acc_trainer_last_checkpoint(const char *dir, char *out, size_t outlen);

#ifdef __cplusplus
}
#endif

/* Sharded data parallel (ZeRO stages, FSDP strategies) on acc_model_t. */
#include "nbf_shard.h"

#endif /* NBF_TRAINER_H */
