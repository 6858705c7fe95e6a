/*
 * acc_shm.h — collectives of host buffers between the processes of one
 * node through shared memory (DESIGN.md, "Intra-node collectives").
 *
 * Each member maps every member's workspace: a header page (its state
 * flag: a sequence number other members wait on, a count of sleepers, an
 * abort word) and two slots (double buffers) of ACC_SHM_SLOT bytes. A
 * workspace is an anonymous memfd: no name in /dev/shm or anywhere else,
 * so nothing outlives the processes whatever way they end (crash, kill,
 * interrupt). Peers open it through /proc/PID/fd/N during the setup
 * (allowed between processes of one user; Yama's ptrace_scope restricts
 * attaching only), then every descriptor is closed and the mappings
 * alone keep the memory.
 *
 * Waiting spins for a few microseconds, then sleeps on the peer's flag
 * (FUTEX_WAIT on the shared page); after a spin that was switched out
 * (another task wanted the core) the next 16 to 4096 waits sleep at once, waking every 50 ms to check the
 * deadline and whether the peer still lives; a member that fails sets
 * every peer's abort word and wakes them, so they fail at once too.
 *
 * Every member must make the same sequence of calls: each call's kind,
 * size, dtype, op and root are published in the header and compared by
 * the peers at the call's first wait, so that differing calls fail with
 * ACC_ERR_MISMATCH instead of hanging or mixing data. After a failure
 * the group must not be used again. Internal.
 */
#ifndef ACC_SHM_H
#define ACC_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nbfork.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acc_shm acc_shm_t;

/* Bytes of one slot (a member's workspace holds two). */
#ifndef ACC_SHM_SLOT
#define ACC_SHM_SLOT ((size_t)1 << 20)
#endif

/* All-reduces of at most this many bytes run the naive symmetric
 * algorithm (every member reduces the whole buffer from every slot: one
 * synchronisation); larger ones reduce-scatter then all-gather through
 * the slots (each member reduces 1/n, two synchronisations per slot). */
#define ACC_SHM_NAIVE_MAX ((size_t)64 << 10)

/* What a process publishes about itself for the setup (all-gathered by
 * the caller, e.g. through Gloo). */
typedef struct {
  uint64_t node;  /* FNV-1a of host name | boot id | pid namespace | extra:
                     equal = one node (a collision only fails the attach) */
  uint64_t nonce; /* written in the workspace's header, checked by peers */
  int32_t pid;    /* this process */
  int32_t fd;     /* its workspace memfd, -1 when it has none */
  int32_t ok;     /* 1 = workspace created */
  int32_t pad;
} acc_shm_card_t;

/* Create this process's workspace and fill `card` (`node_extra` joins
 * the node identity: ranks a launch puts on different nodes stay apart).
 * Returns NULL (card->ok = 0, why in err) when it cannot: the caller then
 * uses no shared memory on any rank. */
acc_shm_t *acc_shm_create(acc_shm_card_t *card, const char *node_extra, char *err, size_t errlen);

/* Map the workspaces of the `n` members `cards` (member order; this
 * process is member `me`; ranks[j]: member j's rank in the whole group,
 * which error texts name), waiting at most `timeout_ms` per collective
 * later on. Returns 0, or -1 with why in err (the caller then tells the
 * others and everyone falls back; see acc_shm_close_fds). */
int acc_shm_attach(acc_shm_t *s, const acc_shm_card_t *cards, const int *ranks, int n, int me,
                   int timeout_ms, char *err, size_t errlen);

/* Every member has attached: the descriptors are no longer needed (the
 * mappings keep the memory until the last member unmaps or exits). */
void acc_shm_close_fds(acc_shm_t *s);

/* Unmap and free. NULL-safe; clears *s_p. */
void acc_shm_destroy(acc_shm_t **s_p);

/* This process's node identity (see acc_shm_card_t.node). */
void acc_shm_node_id(char *out, size_t n);

/* The collectives, among the members, on host buffers; the result is the
 * same on every member. `count` elements of `dtype`; AVG divides the sum
 * by the number of members (f16/bf16 accumulated and divided in f32).
 * Errors: ACC_ERR_TIMEOUT (a member did not arrive within the timeout),
 * ACC_ERR_PEER (a member died or failed), with the text in err. */
acc_result_t acc_shm_all_reduce(acc_shm_t *s, void *buf, size_t count, acc_dtype_t dtype,
                                acc_op_t op, char *err, size_t errlen);
/* `send` holds n*count elements (block j for member j); recv gets the
 * reduction of this member's block. recv may not overlap send. */
acc_result_t acc_shm_reduce_scatter(acc_shm_t *s, const void *send, void *recv, size_t count,
                                    acc_dtype_t dtype, acc_op_t op, char *err, size_t errlen);
/* `bytes` from member `root` to everyone. */
acc_result_t acc_shm_broadcast(acc_shm_t *s, void *buf, size_t bytes, int root, char *err,
                               size_t errlen);
/* `bytes` from each member into recv (n*bytes, member-major); send may
 * be recv + me*bytes (in place). */
acc_result_t acc_shm_all_gather(acc_shm_t *s, const void *send, void *recv, size_t bytes, char *err,
                                size_t errlen);
/* leaving = 1: acc_destroy's barrier; a peer in another collective then
 * fails with ACC_ERR_PEER (this member left), as after a closed
 * connection. */
acc_result_t acc_shm_barrier(acc_shm_t *s, int leaving, char *err, size_t errlen);

/* A collective failed on this member: make every peer's current or next
 * wait fail at once (ACC_ERR_PEER). */
void acc_shm_abort(acc_shm_t *s);

/* Waits that slept without spinning because a recent spin was switched
 * out (another task wanted the core); tests. */
long acc_shm_waits_slept_at_once(const acc_shm_t *s);

/* The member whose death or failure the last failed collective saw, or
 * -1. */
int acc_shm_lost_member(const acc_shm_t *s);

#ifdef __cplusplus
}
#endif

#endif /* ACC_SHM_H */
