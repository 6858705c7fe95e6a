/*
 * nbf_rankstate — what every rank is doing, as a fixed binary record in a
 * page of shared memory per rank (issue 21).
 *
 * The launcher creates one page per worker before fork (a memfd of
 * NBF_RANKSTATE_PAGE bytes, mapped MAP_SHARED) and passes its descriptor
 * to the worker as NBFORK_RANKSTATE_FD (not close-on-exec, so a program
 * `nbfork launch` execs gets it too). The runtime maps the page once
 * (nbf_rankstate_self) and writes its phase, the collective in flight and
 * its last error; the launcher reads the records (nbf_rankstate_read) for
 * its failure and hang reports instead of the workers' stderr text.
 *
 * One writer per record (the rank), any number of readers: the writer
 * makes `gen` odd, writes, makes it even (a seqlock); a reader copies the
 * record until it sees the same even `gen` before and after.
 *
 * Layout, version 1 (every field little-endian host order, offsets fixed
 * by static assertions in nbf_rankstate.c; docs/ARCHITECTURE.md):
 *
 *   off size field
 *     0   4  magic      NBF_RANKSTATE_MAGIC ("NBRS")
 *     4   4  version    NBF_RANKSTATE_VERSION
 *     8   4  size       sizeof(nbf_rankstate_t)
 *    12   4  gen        seqlock counter (odd: being written)
 *    16   4  rank       global rank (the launcher writes it)
 *    20   4  pid        the worker's pid (the launcher writes it)
 *    24   4  phase      nbf_rs_phase_t
 *    28   4  err_code   acc_result_t of the last error; 0 = none
 *    32   4  err_peer   the rank a failed collective lost; -1 = unknown
 *    36   2  flags      NBF_RS_FATAL: the error ended the rank;
 *                       NBF_RS_LEAVING: in acc_destroy (leaving the group);
 *                       NBF_RS_ERRORS_RETURN: the rank handles failed
 *                       collectives itself (ACC_ERRORS_RETURN)
 *    38   1  done_op    nbf_rs_op_t of the last collective completed
 *    39   1  reserved  0
 *    40  32  call       the collective in flight, or the last one begun
 *    72   8  done_seq   sequence number of the last collective completed
 *    80  32  err_call   the collective of the last error (seq 0: none)
 *   112   8  err_ms     when the last error happened (nbf_now_ms)
 *   120   8  phase_ms   when the phase last changed (nbf_now_ms)
 *   128 512  err_msg    the last error's text, NUL-terminated
 *
 *   call (nbf_rs_call_t): op (u8, nbf_rs_op_t), dtype (u8, acc_dtype_t;
 *   255 none), device (u8: 1 device buffer), reduce (u8, acc_op_t),
 *   root (i32; -1 none), count (u64 elements), seq (u64, 1 = the first
 *   collective of the process group), start_ms (i64, nbf_now_ms).
 *
 * Times are CLOCK_MONOTONIC milliseconds: one clock for every process of
 * a host, so the launcher compares them with its own nbf_now_ms.
 */
#ifndef NBF_RANKSTATE_H
#define NBF_RANKSTATE_H

#include <stddef.h>
#include <stdint.h>

#define NBF_RANKSTATE_MAGIC 0x5352424eu /* "NBRS" in memory order */
#define NBF_RANKSTATE_VERSION 1u
#define NBF_RANKSTATE_PAGE 4096

typedef enum {
  NBF_RS_STARTING = 0,   /* forked, libnbfork not yet joined          */
  NBF_RS_RENDEZVOUS = 1, /* acc_new: store, gate, Gloo's full mesh     */
  NBF_RS_RUNNING = 2,    /* between collectives                        */
  NBF_RS_COLLECTIVE = 3, /* in `call`                                  */
  NBF_RS_EXITED = 4      /* left the group (acc_destroy, or fatal err) */
} nbf_rs_phase_t;

typedef enum {
  NBF_RS_OP_NONE = 0,
  NBF_RS_ALL_REDUCE,
  NBF_RS_BROADCAST,
  NBF_RS_ALL_GATHER,
  NBF_RS_REDUCE_SCATTER,
  NBF_RS_BARRIER
} nbf_rs_op_t;

#define NBF_RS_FATAL 1u   /* the recorded error ended the rank           */
#define NBF_RS_LEAVING 2u /* in acc_destroy: `call` is its final barrier */
/* Failed collectives return to the caller (ACC_ERRORS_RETURN): the
 * launcher leaves a group with such a rank to its own handling instead of
 * stopping it when a peer leaves early. A bit version-1 readers that do
 * not know it ignore. */
#define NBF_RS_ERRORS_RETURN 4u

typedef struct {
  uint8_t op, dtype, device, reduce;
  int32_t root;
  uint64_t count;
  uint64_t seq;
  int64_t start_ms;
} nbf_rs_call_t;

typedef struct {
  uint32_t magic, version, size, gen;
  int32_t rank, pid, phase, err_code, err_peer;
  uint16_t flags;
  uint8_t done_op, reserved;
  nbf_rs_call_t call;
  uint64_t done_seq;
  nbf_rs_call_t err_call;
  int64_t err_ms;
  int64_t phase_ms;
  char err_msg[512];
} nbf_rankstate_t;

/* Create one record page: a memfd (close-on-exec) of NBF_RANKSTATE_PAGE
 * bytes mapped MAP_SHARED into *rs, initialised for `rank` in phase
 * STARTING. Returns the descriptor, or -1 (errno set; *rs NULL). */
int nbf_rankstate_create(int rank, nbf_rankstate_t **rs);

/* Unmap a page nbf_rankstate_create mapped; NULL-safe, clears *rs. */
void nbf_rankstate_unmap(nbf_rankstate_t **rs);

/* This process's record: the page NBFORK_RANKSTATE_FD names, mapped on
 * the first call (the descriptor is then made close-on-exec); NULL when
 * the variable is unset or the page is not a version-1 record. Every
 * nbf_rankstate_* writer below accepts NULL and does nothing. */
nbf_rankstate_t *nbf_rankstate_self(void);

/* Writers (the rank only). */
void nbf_rankstate_phase(nbf_rankstate_t *rs, nbf_rs_phase_t phase);
/* Enter collective `c` (c->seq, c->start_ms filled by the caller). */
void nbf_rankstate_begin(nbf_rankstate_t *rs, const nbf_rs_call_t *c);
/* Leave the collective in flight: done_seq = call.seq, phase RUNNING. */
void nbf_rankstate_end(nbf_rankstate_t *rs);
/* Record an error: `code` (nonzero), the peer it lost (-1 unknown),
 * `c` the collective (NULL: none), text `msg`. Phase unchanged. */
void nbf_rankstate_error(nbf_rankstate_t *rs, int code, int peer, const nbf_rs_call_t *c,
                         const char *msg);
/* The rank is leaving its group (acc_destroy): set NBF_RS_LEAVING. */
void nbf_rankstate_leaving(nbf_rankstate_t *rs);
/* Set (on != 0) or clear `flag` (NBF_RS_ERRORS_RETURN) in the record. */
void nbf_rankstate_flag(nbf_rankstate_t *rs, unsigned flag, int on);
/* Mark the record's error as the one that ended the rank; phase EXITED. */
void nbf_rankstate_fatal(nbf_rankstate_t *rs);

/* Reader: a consistent copy of `rs` into *out. 0, or -1 when the record
 * is absent, not version 1, or kept changing (a writer died mid-write:
 * then *out is the last copy, still usable field by field). */
int nbf_rankstate_read(const nbf_rankstate_t *rs, nbf_rankstate_t *out);

/* Names as the reports spell them: "all_reduce", "broadcast", ...;
 * "f32", "f64", "f16", "bf16", "i32", "i64" (acc_dtype_t order);
 * "starting", "rendezvous", "running", "in a collective", "exited". */
const char *nbf_rs_op_name(int op);
const char *nbf_rs_dtype_name(int dtype);
const char *nbf_rs_phase_name(int phase);

/* "all_reduce #58 (f32 x 4096)" (with ", root 1" for broadcast, ",
 * device" for a device buffer) into out; returns out. */
char *nbf_rs_call_text(const nbf_rs_call_t *c, char *out, size_t outlen);

#endif
