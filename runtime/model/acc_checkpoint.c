/*
 * acc_checkpoint.c — acc_save_state / acc_load_state (Accelerate's
 * save_state / load_state) and acc_register_for_checkpointing.
 *
 * A checkpoint is a directory with
 *   nbfork_state.bin        written by the main process: model parameters
 *                           and layer sizes, optimizer state (hyper-
 *                           parameters, step count, momentum / moments),
 *                           loss scaler, registered objects;
 *   nbfork_rank<R>.bin      written by every rank R: its RNG states (the
 *                           accelerator's and the process-wide one, which
 *                           differ per rank after acc_set_seed(..., 1)),
 *                           its gradient-accumulation position (micro-step
 *                           counter, the buffer of the open window) and
 *                           the model's gradient buffer, so a run saved in
 *                           the middle of an accumulation window resumes
 *                           exactly.
 * Every file is written atomically (temporary file in the same directory,
 * fsync, rename over the old one, fsync of the directory), so a crash
 * leaves either the old or the new file, never a torn one.
 *
 * File format (native byte order, checked on load): a 40-byte header
 *   "NBFSTATE", u32 version (1), u32 0x01020304 (byte order), u32 kind
 *   (0 shared, 1 rank), u32 rank, u64 payload bytes, u32 CRC-32 (zlib) of
 *   the payload, u32 0,
 * then the payload: sections of [32-byte NUL-padded name, u64 bytes,
 * bytes]. Loading checks everything (CRC, sizes against the live model
 * and optimizer) before changing anything, so a failed load leaves the
 * accelerator, the model and the optimizer as they were.
 *
 * Loading: the main process reads nbfork_state.bin and broadcasts it (the
 * other ranks, possibly on other nodes, need no shared file system for
 * it); each rank reads its own rank file. Both calls are collective with
 * world size > 1: every rank returns the same result.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "acc_internal.h"
#include "acc_optim_cuda.h"
#include "nbf_buf.h"
#include "nbf_util.h"

#define CKPT_MAGIC "NBFSTATE"
#define CKPT_VERSION 1u
#define CKPT_BOM 0x01020304u
#define CKPT_HEADER 40
#define CKPT_NAME 32
#define CKPT_MAX_ITEMS 64
#define SHARED_FILE "nbfork_state.bin"

/* The header of a checkpoint file, in the writer's byte order (`bom`
 * tells a reader of the other order): magic, format version, byte-order
 * mark, kind (0 shared, 1 per-rank), rank, payload bytes, the payload's
 * CRC-32, a reserved zero. Every field sits on its natural alignment, so
 * the struct has no padding and is copied whole. */
typedef struct {
  char magic[8];
  uint32_t version, bom, kind, rank;
  uint64_t payload_len;
  uint32_t crc, zero;
} ckpt_header_t;
_Static_assert(sizeof(ckpt_header_t) == CKPT_HEADER, "the checkpoint header is 40 bytes");

/* CRC-32 of p[n]; zlib's crc32 takes uInt lengths, so large payloads go
 * in pieces. */
static uint32_t payload_crc(const unsigned char *p, size_t n) {
  uint32_t crc = (uint32_t)crc32(0L, p, 0);
  for (size_t off = 0; off < n;) {
    size_t len = n - off > (1u << 30) ? (1u << 30) : n - off;
    crc = (uint32_t)crc32(crc, p + off, (uInt)len);
    off += len;
  }
  return crc;
}

/* ---------------------------------------------------------------- errors */

static acc_result_t io_error(acc_t *acc, const char *what, const char *path, int e) {
  return acc__set_error(acc, ACC_ERR_IO, "%s %s: %s", what, path, NBF_STRERROR(e));
}

/* ---------------------------------------------------------------- writer */

/* The payload being written. Its first failed growth sticks (oom) and is
 * checked once before the file is written. */
typedef struct {
  nbf_buf_t b;
  int oom;
} wbuf_t;

static void put(wbuf_t *w, const void *data, size_t n) {
  if (!w->oom && n && nbf_buf_append(&w->b, data, n) != 0)
    w->oom = 1;
}

static void section(wbuf_t *w, const char *name, const void *data, size_t bytes) {
  char nm[CKPT_NAME] = {0};
  snprintf(nm, sizeof nm, "%s", name);
  uint64_t b = bytes;
  put(w, nm, sizeof nm);
  put(w, &b, sizeof b);
  put(w, data, bytes);
}

/* Header + payload of kind 0 (shared) or 1 (rank) into one buffer. */
static unsigned char *finish(const wbuf_t *payload, uint32_t kind, uint32_t rank, size_t *len) {
  unsigned char *out = malloc(CKPT_HEADER + payload->b.len);
  if (!out)
    return NULL;
  ckpt_header_t h = {.version = CKPT_VERSION,
                     .bom = CKPT_BOM,
                     .kind = kind,
                     .rank = rank,
                     .payload_len = payload->b.len,
                     .crc = payload_crc((const unsigned char *)payload->b.data, payload->b.len)};
  memcpy(h.magic, CKPT_MAGIC, 8);
  memcpy(out, &h, sizeof h);
  if (payload->b.len)
    memcpy(out + CKPT_HEADER, (const unsigned char *)payload->b.data, payload->b.len);
  *len = CKPT_HEADER + payload->b.len;
  return out;
}

/* mkdir -p */
static acc_result_t make_dirs(acc_t *acc, const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "checkpoint directory name too long");
  for (char *p = path + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return io_error(acc, "cannot create checkpoint directory", path, errno);
      *p = c;
      if (!c)
        break;
    }
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return acc__set_error(acc, ACC_ERR_IO, "checkpoint path %s exists and is not a directory", dir);
  return ACC_OK;
}

/* Write `len` bytes to DIR/NAME atomically: DIR/.NAME.tmp.PID, fsync,
 * rename, fsync DIR. */
static acc_result_t write_atomic(acc_t *acc, const char *dir, const char *name, const void *data,
                                 size_t len) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%d", dir, name, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error(acc, "cannot create checkpoint file", tmp, errno);
  const char *failed = nbf_write_all(fd, data, len) != 0 ? "cannot write checkpoint file"
                       : fsync(fd) != 0                  ? "cannot flush checkpoint file"
                                                         : NULL;
  if (failed) {
    int e = errno;
    close(fd);
    unlink(tmp);
    return io_error(acc, failed, tmp, e);
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return io_error(acc, "cannot close checkpoint file", tmp, e);
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return io_error(acc, "cannot rename checkpoint file to", path, e);
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int rc = fsync(dfd);
    int e = errno;
    close(dfd);
    if (rc != 0 && e != EINVAL) /* some file systems cannot fsync dirs */
      return io_error(acc, "cannot flush checkpoint directory", dir, e);
  }
  return ACC_OK;
}

/* ---------------------------------------------------------------- reader */

typedef acc__ckpt_file_t rfile_t;

/* Read PATH into memory. */
static acc_result_t read_file(acc_t *acc, const char *path, unsigned char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return io_error(acc, "cannot open checkpoint file", path, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return io_error(acc, "cannot stat checkpoint file", path, e);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *b = malloc((n + 7) / 8 * 8 + 8); /* whole words: see acc_load_state */
  if (!b) {
    close(fd);
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "no memory to read %s (%zu bytes)", path, n);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;
      close(fd);
      free(b);
      return io_error(acc, "cannot read checkpoint file", path, e);
    }
    got += (size_t)r;
  }
  close(fd);
  *out = b;
  *len = n;
  return ACC_OK;
}

/* Check the header and CRC of `f` (buf/len set); `what` names it. */
static acc_result_t parse(acc_t *acc, rfile_t *f, uint32_t kind, const char *what) {
  ckpt_header_t h;
  if (f->len < CKPT_HEADER || memcmp(f->buf, CKPT_MAGIC, 8) != 0)
    return acc__set_error(acc, ACC_ERR_IO, "%s is not an nbfork checkpoint file (bad magic)", what);
  memcpy(&h, f->buf, sizeof h);
  if (h.bom != CKPT_BOM)
    return acc__set_error(acc, ACC_ERR_IO, "%s was written on a machine of other byte order", what);
  if (h.version != CKPT_VERSION)
    return acc__set_error(acc, ACC_ERR_IO, "%s has format version %u; this nbfork reads %u", what,
                          h.version, CKPT_VERSION);
  if (h.kind != kind)
    return acc__set_error(acc, ACC_ERR_IO, "%s is a %s file, expected a %s file", what,
                          h.kind ? "per-rank" : "shared", kind ? "per-rank" : "shared");
  if (h.payload_len != f->len - CKPT_HEADER)
    return acc__set_error(acc, ACC_ERR_IO,
                          "%s is truncated or has trailing bytes (%zu payload bytes, header says "
                          "%llu)",
                          what, f->len - CKPT_HEADER, (unsigned long long)h.payload_len);
  f->payload = f->buf + CKPT_HEADER;
  f->plen = (size_t)h.payload_len;
  if (payload_crc(f->payload, f->plen) != h.crc)
    return acc__set_error(acc, ACC_ERR_IO, "%s is corrupt (CRC-32 mismatch)", what);
  /* sections must tile the payload exactly */
  size_t off = 0;
  while (off < f->plen) {
    uint64_t b;
    if (f->plen - off < CKPT_NAME + 8)
      return acc__set_error(acc, ACC_ERR_IO, "%s: malformed section table", what);
    memcpy(&b, f->payload + off + CKPT_NAME, 8);
    if (b > f->plen - off - CKPT_NAME - 8)
      return acc__set_error(acc, ACC_ERR_IO, "%s: malformed section table", what);
    off += CKPT_NAME + 8 + (size_t)b;
  }
  return ACC_OK;
}

/* The section `name` of `f`, or NULL; *bytes gets its size. */
static const void *find(const rfile_t *f, const char *name, size_t *bytes) {
  size_t off = 0;
  while (off + CKPT_NAME + 8 <= f->plen) {
    const char *nm = (const char *)f->payload + off;
    uint64_t b;
    memcpy(&b, f->payload + off + CKPT_NAME, 8);
    if (strncmp(nm, name, CKPT_NAME) == 0) {
      *bytes = (size_t)b;
      return f->payload + off + CKPT_NAME + 8;
    }
    off += CKPT_NAME + 8 + (size_t)b;
  }
  *bytes = 0;
  return NULL;
}

/* find() for a fixed-size record: the payload packs records back to back,
 * so a record may sit at any address; copy it into the caller's aligned
 * struct. Returns dst, or NULL when absent or of another size. */
static const void *find_rec(const rfile_t *f, const char *name, void *dst, size_t size,
                            size_t *bytes) {
  const void *p = find(f, name, bytes);
  if (!p || *bytes != size)
    return NULL;
  memcpy(dst, p, size);
  return dst;
}

/* ---------------------------------------------------------------- records */

typedef struct {
  float scale, growth_factor, backoff_factor;
  int32_t growth_interval, growth_tracker;
} scaler_rec_t;

typedef acc__ckpt_optim_rec_t optim_rec_t;

typedef struct {
  uint64_t s[4];
  int64_t has_spare;
  double spare;
} rng_rec_t;

typedef struct {
  int32_t step, sync_gradients, accum_prev_zero, pad;
  uint64_t accum_prev_n;
} accum_rec_t;

static rng_rec_t rng_rec(const acc_rng_t *r) {
  rng_rec_t x;
  memcpy(x.s, r->s, sizeof x.s);
  x.has_spare = r->has_spare;
  x.spare = r->spare;
  return x;
}

static void rng_apply(acc_rng_t *r, const rng_rec_t *x) {
  memcpy(r->s, x->s, sizeof x->s);
  r->has_spare = (int)x->has_spare;
  r->spare = x->spare;
}

/* ---------------------------------------------------------------- public */

acc_result_t acc_register_for_checkpointing(acc_t *acc, const char *name, void *data,
                                            size_t bytes) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!name || !*name || strlen(name) > 24 || (bytes && !data))
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_register_for_checkpointing: need a name of 1..24 characters and "
                          "a buffer");
  for (int i = 0; i < acc->nckpt_items; i++)
    if (strcmp(acc->ckpt_items[i].name, name) == 0) {
      acc->ckpt_items[i].data = data;
      acc->ckpt_items[i].bytes = bytes;
      return ACC_OK;
    }
  if (acc->nckpt_items == CKPT_MAX_ITEMS)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                          "acc_register_for_checkpointing: at most %d objects", CKPT_MAX_ITEMS);
  struct acc_ckpt_item *items =
      realloc(acc->ckpt_items, (size_t)(acc->nckpt_items + 1) * sizeof *items);
  if (!items)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_register_for_checkpointing: no memory");
  acc->ckpt_items = items;
  struct acc_ckpt_item *it = &items[acc->nckpt_items++];
  snprintf(it->name, sizeof it->name, "%s", name);
  it->data = data;
  it->bytes = bytes;
  return ACC_OK;
}

void acc__unregister_for_checkpointing(acc_t *acc, const char *name) {
  for (int i = 0; acc && i < acc->nckpt_items; i++)
    if (strcmp(acc->ckpt_items[i].name, name) == 0) {
      acc->ckpt_items[i] = acc->ckpt_items[--acc->nckpt_items];
      return;
    }
}

/* (acc_internal.h) */
acc_result_t acc__ckpt_agree(acc_t *acc, acc_result_t r, const char *what, const char *after) {
  if (acc->world == 1)
    return r;
  int32_t bad[2] = {r != ACC_OK ? (int32_t)r : 0, r != ACC_OK ? acc->rank : -1};
  char keep[sizeof acc->err];
  memcpy(keep, acc->err, sizeof keep);
  ACC_CHECK(acc_all_reduce(acc, bad, 2, ACC_I32, ACC_MAX));
  memcpy(acc->err, keep, sizeof keep);
  ACC_CHECK(r);
  if (bad[0] != 0)
    return acc__set_error(acc, (acc_result_t)bad[0], "%s failed on rank %d (see that rank's error)%s",
                          what, bad[1], after);
  return ACC_OK;
}

/* acc__ckpt_agree, unless the group is broken already (then the local
 * result: no collective would answer). */
static acc_result_t agree(acc_t *acc, acc_result_t r, const char *what) {
  if (acc->broken)
    return r;
  return acc__ckpt_agree(acc, r, what, "; nothing was changed here");
}

/* The open accumulation window's buffer, wherever acc_backward keeps it:
 * host memory, or device memory for device gradients (copied into *tmp,
 * which the caller frees). *n = 0 when there is none. ACC_ERR_BACKEND
 * when the device copy failed. */
static acc_result_t accum_prev_host(acc_t *acc, const float **prev, size_t *n, float **tmp) {
  *tmp = NULL;
  *prev = acc->accum_prev;
  *n = acc->accum_prev ? acc->accum_prev_n : 0;
  if (!acc->accum_prev_dev || !acc->accum_prev_dev_n)
    return ACC_OK;
  char err[512];
  *n = acc->accum_prev_dev_n;
  if (!(*tmp = malloc(*n * sizeof(float))))
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_save_state: no memory");
  acc_result_t r = acc_optim_cuda_copy(*tmp, acc->accum_prev_dev, *n, 0, err, sizeof err);
  if (r != ACC_OK)
    return acc__set_error(acc, r, "acc_save_state: the accumulation buffer on device %d: %s",
                          acc->device, err);
  *prev = *tmp;
  return ACC_OK;
}

static void rank_file_name(char *out, size_t len, int rank) {
  snprintf(out, len, "nbfork_rank%d.bin", rank);
}

acc_result_t acc_save_state(acc_t *acc, const char *dir, acc_mlp_t *model, acc_optim_t *opt) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!dir || !*dir)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_save_state: no directory given");
  acc_result_t r = make_dirs(acc, dir);
  wbuf_t w = {0};
  unsigned char *file = NULL;
  size_t flen = 0;
  /* this rank's file; a device model's buffers are copied to the host
   * first (a failed copy is the error: nothing is written from NULL) */
  const float *prev = NULL, *mgrads = NULL;
  float *prev_tmp = NULL;
  size_t prev_n = 0;
  if (r == ACC_OK)
    r = accum_prev_host(acc, &prev, &prev_n, &prev_tmp);
  if (r == ACC_OK && model && !(mgrads = acc__mlp_host(model, 1)))
    r = ACC_ERR_BACKEND; /* acc__mlp_host set the error */
  if (r == ACC_OK) {
    rng_rec_t rr = rng_rec(&acc->rng), rg = rng_rec(acc__rng(NULL));
    section(&w, "rng", &rr, sizeof rr);
    section(&w, "rng.global", &rg, sizeof rg);
    accum_rec_t ar = {acc->step, acc->sync_gradients, acc->accum_prev_zero, 0, prev_n};
    section(&w, "accum", &ar, sizeof ar);
    if (prev_n)
      section(&w, "accum.prev", prev, prev_n * sizeof(float));
    if (model)
      section(&w, "model.grads", mgrads, acc_mlp_num_params(model) * sizeof(float));
    file = w.oom ? NULL : finish(&w, 1, (uint32_t)acc->rank, &flen);
    if (!file)
      r = acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_save_state: no memory for the rank file");
  }
  free(prev_tmp);
  if (r == ACC_OK) {
    char name[64];
    rank_file_name(name, sizeof name, acc->rank);
    r = write_atomic(acc, dir, name, file, flen);
  }
  free(file);
  file = NULL;
  nbf_buf_free(&w.b);
  memset(&w, 0, sizeof w);
  /* the shared file, main process only */
  const float *mparams = NULL;
  acc__optim_view_t v = {0};
  if (r == ACC_OK && acc->rank == 0 && model && !(mparams = acc__mlp_host(model, 0)))
    r = ACC_ERR_BACKEND; /* acc__mlp_host set the error */
  if (r == ACC_OK && acc->rank == 0 && opt)
    r = acc__optim_view(acc, opt, &v);
  if (r == ACC_OK && acc->rank == 0) {
    scaler_rec_t sr = {acc->scale, acc->growth_factor, acc->backoff_factor, acc->growth_interval,
                       acc->growth_tracker};
    section(&w, "scaler", &sr, sizeof sr);
    if (model) {
      int nl;
      const int *sizes = acc__mlp_sizes(model, &nl);
      section(&w, "model.sizes", sizes, (size_t)(nl + 1) * sizeof(int));
      section(&w, "model.params", mparams, acc_mlp_num_params(model) * sizeof(float));
    }
    if (opt) {
      optim_rec_t o = {v.kind,        v.m != NULL,       v.v != NULL, 0,          v.n,      v.hp.lr,
                       v.hp.momentum, v.hp.weight_decay, v.hp.beta1,  v.hp.beta2, v.hp.eps, v.hp.t};
      section(&w, "optim", &o, sizeof o);
      if (v.m)
        section(&w, "optim.m", v.m, v.n * sizeof(float));
      if (v.v)
        section(&w, "optim.v", v.v, v.n * sizeof(float));
    }
    for (int i = 0; i < acc->nckpt_items; i++) {
      char nm[80];
      snprintf(nm, sizeof nm, "user.%s", acc->ckpt_items[i].name);
      section(&w, nm, acc->ckpt_items[i].data, acc->ckpt_items[i].bytes);
    }
    file = w.oom ? NULL : finish(&w, 0, 0, &flen);
    if (!file)
      r = acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_save_state: no memory for the state file");
    else
      r = write_atomic(acc, dir, SHARED_FILE, file, flen);
    free(file);
    nbf_buf_free(&w.b);
  }
  return agree(acc, r, "acc_save_state");
}

/* Check the shared file against the live objects; apply when `apply`. */
static acc_result_t use_shared(acc_t *acc, const rfile_t *f, acc_mlp_t *model, acc_optim_t *opt,
                               int apply, const char *path) {
  size_t b;
  scaler_rec_t sr_copy;
  const scaler_rec_t *sr = find_rec(f, "scaler", &sr_copy, sizeof sr_copy, &b);
  if (!sr || b != sizeof *sr)
    return acc__set_error(acc, ACC_ERR_IO, "%s has no loss scaler record", path);
  if (model) {
    int nl;
    const int *sizes = acc__mlp_sizes(model, &nl);
    size_t bs, bp;
    const int *fs = find(f, "model.sizes", &bs);
    const void *fp = find(f, "model.params", &bp);
    if (!fs || !fp)
      return acc__set_error(acc, ACC_ERR_IO, "%s holds no model (saved with model NULL)", path);
    if (bs != (size_t)(nl + 1) * sizeof(int) || memcmp(fs, sizes, bs) != 0 ||
        bp != acc_mlp_num_params(model) * sizeof(float))
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "%s holds a model of other layer sizes (%zu parameters) than the one "
                            "given (%zu parameters)",
                            path, bp / sizeof(float), acc_mlp_num_params(model));
    if (apply) {
      memcpy(acc__mlp_host_buffer(model, 0), fp, bp);
      ACC_CHECK(acc__mlp_upload(model, 0));
    }
  }
  if (opt) {
    acc__optim_view_t v;
    ACC_CHECK(acc__optim_view(acc, opt, &v));
    optim_rec_t o_copy;
    const optim_rec_t *o = find_rec(f, "optim", &o_copy, sizeof o_copy, &b);
    if (!o || b != sizeof *o)
      return acc__set_error(acc, ACC_ERR_IO,
                            "%s holds no optimizer state (saved with opt NULL: LOMO, GaLore or "
                            "no optimizer); the one given is %s of %zu parameters",
                            path, v.kind ? "AdamW" : "SGD", v.n);
    if (o->kind != v.kind || o->n != v.n || o->has_m != (v.m != NULL) || o->has_v != (v.v != NULL))
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "%s holds a %s optimizer of %llu parameters%s; the one given is %s "
                            "of %zu%s",
                            path, o->kind ? "AdamW" : "SGD", (unsigned long long)o->n,
                            o->has_m && !o->kind ? " with momentum" : "", v.kind ? "AdamW" : "SGD",
                            v.n, v.m && !v.kind ? " with momentum" : "");
    size_t bm = 0, bv = 0;
    const void *m = o->has_m ? find(f, "optim.m", &bm) : NULL;
    const void *vv = o->has_v ? find(f, "optim.v", &bv) : NULL;
    if ((o->has_m && (!m || bm != v.n * sizeof(float))) ||
        (o->has_v && (!vv || bv != v.n * sizeof(float))))
      return acc__set_error(acc, ACC_ERR_IO, "%s: optimizer buffers are missing or short", path);
    if (apply) {
      acc__optim_hparams_t hp = {o->lr,  o->momentum, o->weight_decay, o->beta1, o->beta2,
                                 o->eps, o->t};
      acc__optim_restore(opt, &hp);
      if (m)
        memcpy(v.m, m, bm);
      if (vv)
        memcpy(v.v, vv, bv);
    }
  }
  for (int i = 0; i < acc->nckpt_items; i++) {
    char nm[80];
    snprintf(nm, sizeof nm, "user.%s", acc->ckpt_items[i].name);
    const void *d = find(f, nm, &b);
    if (!d)
      return acc__set_error(acc, ACC_ERR_IO, "%s has no registered object '%s'", path,
                            acc->ckpt_items[i].name);
    if (b != acc->ckpt_items[i].bytes)
      return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                            "registered object '%s' is %zu bytes but %s holds %zu",
                            acc->ckpt_items[i].name, acc->ckpt_items[i].bytes, path, b);
    if (apply && b)
      memcpy(acc->ckpt_items[i].data, d, b);
  }
  if (apply) {
    acc->scale = sr->scale;
    acc->growth_factor = sr->growth_factor;
    acc->backoff_factor = sr->backoff_factor;
    acc->growth_interval = sr->growth_interval;
    acc->growth_tracker = sr->growth_tracker;
    acc->unscaled_grads = NULL;
    acc->found_inf = 0;
  }
  return ACC_OK;
}

/* Check this rank's file; apply when `apply`. */
static acc_result_t use_rank(acc_t *acc, const rfile_t *f, acc_mlp_t *model, int apply,
                             const char *path) {
  size_t b, bg = 0, bp = 0;
  rng_rec_t rr_copy, rg_copy;
  accum_rec_t ar_copy;
  const rng_rec_t *rr = find_rec(f, "rng", &rr_copy, sizeof rr_copy, &b);
  const rng_rec_t *rg = rr ? find_rec(f, "rng.global", &rg_copy, sizeof rg_copy, &b) : NULL;
  const accum_rec_t *ar = rg ? find_rec(f, "accum", &ar_copy, sizeof ar_copy, &b) : NULL;
  if (!ar || b != sizeof *ar)
    return acc__set_error(acc, ACC_ERR_IO, "%s: RNG or accumulation record missing", path);
  const void *prev = ar->accum_prev_n ? find(f, "accum.prev", &bp) : NULL;
  if (ar->accum_prev_n && (!prev || bp != ar->accum_prev_n * sizeof(float)))
    return acc__set_error(acc, ACC_ERR_IO, "%s: accumulation buffer missing or short", path);
  const void *grads = NULL;
  if (model) {
    grads = find(f, "model.grads", &bg);
    if (!grads || bg != acc_mlp_num_params(model) * sizeof(float))
      return acc__set_error(acc, ACC_ERR_IO, "%s holds no gradients for this model", path);
  }
  if (!apply)
    return ACC_OK;
  float *np = NULL;
  if (ar->accum_prev_n) {
    np = malloc(bp);
    if (!np)
      return acc__set_error(acc, ACC_ERR_NO_MEMORY, "acc_load_state: no memory");
    memcpy(np, prev, bp);
  }
  rng_apply(&acc->rng, rr);
  rng_apply(acc__rng(NULL), rg);
  acc->step = ar->step;
  acc->sync_gradients = ar->sync_gradients;
  acc->accum_prev_zero = ar->accum_prev_zero;
  free(acc->accum_prev);
  acc->accum_prev = np;
  acc->accum_prev_n = np ? (size_t)ar->accum_prev_n : 0;
  if (!np)
    acc->accum_prev_zero = 1;
  /* a device window's buffer is rebuilt from the host one at the next
   * acc_backward on device gradients (acc__accumulate_device) */
  acc__device_free(acc);
  if (model) {
    memcpy(acc__mlp_host_buffer(model, 1), grads, bg);
    ACC_CHECK(acc__mlp_upload(model, 1));
  }
  return ACC_OK;
}

acc_result_t acc_load_state(acc_t *acc, const char *dir, acc_mlp_t *model, acc_optim_t *opt) {
  return acc__load_state_ex(acc, dir, model, opt, 1);
}

acc_result_t acc__load_state_ex(acc_t *acc, const char *dir, acc_mlp_t *model, acc_optim_t *opt,
                                int rank_file) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!dir || !*dir)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "acc_load_state: no directory given");
  char spath[4200], rpath[4200], name[64];
  snprintf(spath, sizeof spath, "%s/%s", dir, SHARED_FILE);
  rank_file_name(name, sizeof name, acc->rank);
  snprintf(rpath, sizeof rpath, "%s/%s", dir, name);
  rfile_t sf = {0}, rf = {0};
  acc_result_t r = ACC_OK;
  /* the shared file: read by the main process, broadcast to the others */
  if (acc->rank == 0)
    r = read_file(acc, spath, &sf.buf, &sf.len);
  if (acc->world > 1 && !acc->broken) {
    int64_t len = r == ACC_OK ? (int64_t)sf.len : -1;
    ACC_CHECK(acc_broadcast(acc, &len, 1, ACC_I64, 0));
    if (len < 0) {
      if (acc->rank != 0)
        r = acc__set_error(acc, ACC_ERR_IO,
                           "acc_load_state: the main process could not read %s (see rank 0's "
                           "error)",
                           spath);
    } else {
      /* broadcast whole 8-byte words (both sides allocated them) */
      if (acc->rank != 0) {
        sf.len = (size_t)len;
        sf.buf = malloc((sf.len + 7) / 8 * 8 + 8);
      }
      int32_t ok = sf.buf != NULL, all_ok = ok;
      acc_result_t c = acc_all_reduce(acc, &all_ok, 1, ACC_I32, ACC_MIN);
      if (c == ACC_OK && !all_ok) {
        free(sf.buf);
        return acc__set_error(acc, ACC_ERR_NO_MEMORY,
                              "acc_load_state: a rank has no memory for %s (%zu bytes)", spath,
                              sf.len);
      }
      if (c == ACC_OK)
        c = acc_broadcast(acc, sf.buf, (sf.len + 7) / 8, ACC_I64, 0);
      if (c != ACC_OK) {
        free(sf.buf);
        return c;
      }
    }
  }
  if (r == ACC_OK)
    r = parse(acc, &sf, 0, spath);
  if (r == ACC_OK && rank_file)
    r = read_file(acc, rpath, &rf.buf, &rf.len);
  if (r == ACC_OK && rank_file)
    r = parse(acc, &rf, 1, rpath);
  if (r == ACC_OK)
    r = use_shared(acc, &sf, model, opt, 0, spath);
  if (r == ACC_OK && rank_file)
    r = use_rank(acc, &rf, model, 0, rpath);
  r = agree(acc, r, "acc_load_state");
  if (r == ACC_OK) /* every rank checked everything: apply */
    r = use_shared(acc, &sf, model, opt, 1, spath);
  if (r == ACC_OK && rank_file)
    r = use_rank(acc, &rf, model, 1, rpath);
  free(sf.buf);
  free(rf.buf);
  return r;
}

/* ---------------------------------------------------------------- for sharding */

acc_result_t acc__ckpt_write(acc_t *acc, const char *dir, const char *file, uint32_t kind,
                             uint32_t rank, const acc__ckpt_sec_t *s, int n) {
  ACC_CHECK(make_dirs(acc, dir));
  wbuf_t w = {0};
  for (int i = 0; i < n; i++)
    section(&w, s[i].name, s[i].data, s[i].bytes);
  size_t flen = 0;
  unsigned char *f = w.oom ? NULL : finish(&w, kind, rank, &flen);
  nbf_buf_free(&w.b);
  if (!f)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "no memory for checkpoint file %s/%s", dir, file);
  acc_result_t r = write_atomic(acc, dir, file, f, flen);
  free(f);
  return r;
}

acc_result_t acc__ckpt_read(acc_t *acc, const char *path, uint32_t kind, acc__ckpt_file_t *f) {
  memset(f, 0, sizeof *f);
  ACC_CHECK(read_file(acc, path, &f->buf, &f->len));
  acc_result_t r = parse(acc, f, kind, path);
  if (r != ACC_OK) {
    free(f->buf);
    memset(f, 0, sizeof *f);
  }
  return r;
}

const void *acc__ckpt_find(const acc__ckpt_file_t *f, const char *name, size_t *bytes) {
  return find(f, name, bytes);
}

const void *acc__ckpt_next(const acc__ckpt_file_t *f, size_t *off, char name[33], size_t *bytes) {
  if (*off + CKPT_NAME + 8 > f->plen)
    return NULL;
  uint64_t b;
  memcpy(name, f->payload + *off, CKPT_NAME);
  name[CKPT_NAME] = 0;
  memcpy(&b, f->payload + *off + CKPT_NAME, 8);
  const void *p = f->payload + *off + CKPT_NAME + 8;
  *bytes = (size_t)b;
  *off += CKPT_NAME + 8 + (size_t)b;
  return p;
}
