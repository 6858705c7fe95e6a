/*
 * acc_shard_merge.c — `nbfork merge-weights CKPT OUT`
 * (acc_shard_merge_weights, nbf_shard.h): a SHARDED_STATE_DICT
 * checkpoint's nbfork_shard<R>.bin files (acc_shard_ckpt_sharded.c's layout)
 * put back together into the FULL_STATE_DICT files acc_shard_save_state
 * writes: OUT/nbfork_state.bin in acc_save_state's section order
 * (scaler, model.sizes, model.params, optim, optim.m, optim.v, the
 * registered objects) and OUT/nbfork_rank0.bin (rank 0's sections plus
 * its model.grads). The result is a world-size-1 checkpoint. A
 * HYBRID_SHARD checkpoint holds one replica: the mark's sworld shards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc_shard_internal.h"

typedef acc__shard_mark_t mark_t;

typedef acc__shard_unit_rec_t unit_rec_t;

typedef struct {
  mark_t mk;
  float *st[3];  /* parameters, m, v: all of them */
  void *grads0;  /* rank 0's gradient buffer */
  int *sizes;    /* a toolkit MLP's layer sizes, or NULL */
  size_t nsizes; /* bytes */
  acc__ckpt_optim_rec_t o;
} merged_t;

static void *dup_bytes(const void *p, size_t n) {
  void *d = malloc(n ? n : 1);
  if (d && n)
    memcpy(d, p, n);
  return d;
}

/* Shard r's file into m (the first one sets the optimizer record,
 * sizes and gradients). */
static acc_result_t merge_one(acc_t *acc, const char *ckpt, int r, merged_t *m) {
  char path[4200];
  snprintf(path, sizeof path, "%s/nbfork_shard%d.bin", ckpt, r);
  acc__ckpt_file_t f;
  ACC_CHECK(acc__ckpt_read(acc, path, 2, &f));
  acc_result_t res = ACC_OK;
  size_t b, bu, tot = 0;
  mark_t mk;
  int ok = acc__shard_mark_get(&f, "shard.meta", &mk);
  const unsigned char *ur = acc__ckpt_find(&f, "shard.units", &bu);
  if (!ok || mk.world != m->mk.world || mk.sworld != m->mk.sworld ||
      mk.num_params != m->mk.num_params || !ur || bu != (size_t)mk.nunits * sizeof(unit_rec_t)) {
    free(f.buf);
    return acc__set_error(acc, ACC_ERR_IO, "%s does not belong to the checkpoint in %s", path,
                          ckpt);
  }
  if (r == 0) {
    memcpy(&m->o, acc__ckpt_find(&f, "optim", &b), sizeof m->o);
    const void *g = acc__ckpt_find(&f, "model.grads", &b);
    m->grads0 = dup_bytes(g, b);
    const void *s = acc__ckpt_find(&f, "model.sizes", &m->nsizes);
    m->sizes = s ? dup_bytes(s, m->nsizes) : NULL;
  }
  for (int i = 0; i < mk.nunits; i++) {
    unit_rec_t u;
    memcpy(&u, ur + (size_t)i * sizeof u, sizeof u);
    tot += u.own;
  }
  static const char *const names[] = {"shard.params", "shard.m", "shard.v"};
  for (int w = 0; w < 3 && res == ACC_OK; w++) {
    const unsigned char *src = acc__ckpt_find(&f, names[w], &b);
    if (!m->st[w])
      continue;
    if (!src || b != tot * sizeof(float)) {
      res = acc__set_error(acc, ACC_ERR_IO, "%s: %s missing or short", path, names[w]);
      break;
    }
    for (int i = 0, at = 0; i < mk.nunits; i++) {
      unit_rec_t u;
      memcpy(&u, ur + (size_t)i * sizeof u, sizeof u);
      size_t start = mk.stage ? (size_t)r * u.s : 0;
      if (u.off + start + u.own > m->mk.num_params) {
        res = acc__set_error(acc, ACC_ERR_IO, "%s: unit %d outside the model", path, i);
        break;
      }
      memcpy(m->st[w] + u.off + start, src + (size_t)at * sizeof(float), u.own * sizeof(float));
      at += (int)u.own;
    }
  }
  free(f.buf);
  return res;
}

/* OUT/nbfork_state.bin: CKPT's shared sections with the merged model and
 * optimizer after the scaler, the marker rewritten to FULL on 1 rank. */
static acc_result_t write_state(acc_t *acc, const acc__ckpt_file_t *sf, merged_t *m,
                                const char *out) {
  int cap = 16, n = 0;
  acc__ckpt_sec_t *secs = NULL;
  char(*names)[33] = NULL;
  size_t off = 0, b;
  char nm[33];
  for (const void *d; (d = acc__ckpt_next(sf, &off, nm, &b));)
    cap++;
  secs = calloc((size_t)cap, sizeof *secs);
  names = calloc((size_t)cap, sizeof *names);
  if (!secs || !names) {
    free(secs), free(names);
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "merge-weights: no memory");
  }
  const size_t np = m->mk.num_params * sizeof(float);
  mark_t full = m->mk;
  full.type = ACC_FULL_STATE_DICT;
  full.world = full.sworld = full.ngroups = 1;
  off = 0;
  for (const void *d; (d = acc__ckpt_next(sf, &off, names[n], &b));) {
    if (!strcmp(names[n], "user." ACC__SHARD_MARK)) {
      if (!m->sizes) /* a model without layer sizes: the parameters as FULL saves them */
        secs[n++] = (acc__ckpt_sec_t){"user.nbfork.params", m->st[0], np};
      secs[n] = (acc__ckpt_sec_t){names[n], &full, sizeof full};
      n++;
      continue;
    }
    secs[n] = (acc__ckpt_sec_t){names[n], d, b};
    if (strcmp(names[n++], "scaler"))
      continue;
    if (m->sizes) {
      secs[n++] = (acc__ckpt_sec_t){"model.sizes", m->sizes, m->nsizes};
      secs[n++] = (acc__ckpt_sec_t){"model.params", m->st[0], np};
    }
    secs[n++] = (acc__ckpt_sec_t){"optim", &m->o, sizeof m->o};
    if (m->st[1])
      secs[n++] = (acc__ckpt_sec_t){"optim.m", m->st[1], np};
    if (m->st[2])
      secs[n++] = (acc__ckpt_sec_t){"optim.v", m->st[2], np};
  }
  acc_result_t r = acc__ckpt_write(acc, out, "nbfork_state.bin", 0, 0, secs, n);
  free(secs);
  free(names);
  return r;
}

/* OUT/nbfork_rank0.bin: CKPT's rank-0 sections plus the gradients. */
static acc_result_t write_rank0(acc_t *acc, const char *ckpt, merged_t *m, const char *out) {
  char path[4200];
  snprintf(path, sizeof path, "%s/nbfork_rank0.bin", ckpt);
  acc__ckpt_file_t f;
  ACC_CHECK(acc__ckpt_read(acc, path, 1, &f));
  acc__ckpt_sec_t secs[16];
  char names[16][33];
  size_t off = 0, b;
  int n = 0;
  for (const void *d; n < 15 && (d = acc__ckpt_next(&f, &off, names[n], &b)); n++)
    secs[n] = (acc__ckpt_sec_t){names[n], d, b};
  if (m->sizes) /* acc_save_state keeps gradients of a toolkit MLP only */
    secs[n++] = (acc__ckpt_sec_t){"model.grads", m->grads0, m->mk.num_params * sizeof(float)};
  acc_result_t r = acc__ckpt_write(acc, out, "nbfork_rank0.bin", 1, 0, secs, n);
  free(f.buf);
  return r;
}

static acc_result_t merge(acc_t *acc, const char *ckpt, const acc__ckpt_file_t *sf, merged_t *m,
                          const char *out) {
  for (int w = 0; w < 3; w++)
    if (!(m->st[w] = calloc(m->mk.num_params ? m->mk.num_params : 1, sizeof(float))))
      return acc__set_error(acc, ACC_ERR_NO_MEMORY, "merge-weights: no memory for %llu parameters",
                            (unsigned long long)m->mk.num_params);
  for (int r = 0; r < m->mk.sworld; r++) {
    ACC_CHECK(merge_one(acc, ckpt, r, m));
    if (r == 0 && !m->o.has_m) /* the optimizer has no such buffer */
      free(m->st[1]), m->st[1] = NULL;
    if (r == 0 && !m->o.has_v)
      free(m->st[2]), m->st[2] = NULL;
  }
  if (!m->grads0)
    return acc__set_error(acc, ACC_ERR_NO_MEMORY, "merge-weights: no memory");
  ACC_CHECK(write_state(acc, sf, m, out));
  return write_rank0(acc, ckpt, m, out);
}

acc_result_t acc_shard_merge_weights(acc_t *acc, const char *ckpt, const char *out) {
  if (!acc)
    return ACC_ERR_INVALID_ARGUMENT;
  if (!ckpt || !out || !*ckpt || !*out)
    return acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT, "merge-weights: need CKPT and OUT");
  char path[4200];
  snprintf(path, sizeof path, "%s/nbfork_state.bin", ckpt);
  acc__ckpt_file_t sf;
  ACC_CHECK(acc__ckpt_read(acc, path, 0, &sf));
  merged_t m = {0};
  int ok = acc__shard_mark_get(&sf, "user." ACC__SHARD_MARK, &m.mk);
  acc_result_t r;
  if (!ok || m.mk.type != ACC_SHARDED_STATE_DICT || m.mk.sworld < 1 || m.mk.sworld > m.mk.world)
    r = acc__set_error(acc, ACC_ERR_INVALID_ARGUMENT,
                       "merge-weights: %s is not a SHARDED_STATE_DICT checkpoint (a "
                       "FULL_STATE_DICT one already holds the whole model in nbfork_state.bin)",
                       ckpt);
  else
    r = merge(acc, ckpt, &sf, &m, out);
  for (int w = 0; w < 3; w++)
    free(m.st[w]);
  free(m.grads0);
  free(m.sizes);
  free(sf.buf);
  return r;
}
