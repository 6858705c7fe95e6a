/*
 * nbf_cluster — what the launcher (`srun nbfork launch`) and the runtime
 * (`srun prog`, `mpirun prog`) both need to read a cluster engine's
 * environment: Slurm's first node and the port derived from its job id;
 * and where a rendezvous store binds for a master address.
 */
#ifndef NBF_CLUSTER_H
#define NBF_CLUSTER_H

#include <stddef.h>

/* The first host of a Slurm hostlist expression (SLURM_JOB_NODELIST):
 * "node[03-05,9],gpu1" -> "node03"; "a,b" -> "a"; "x" -> "x". Zero
 * padding is kept, as Slurm writes names. Lightning's
 * SLURMEnvironment.resolve_root_node_address does the same. Returns 0, or
 * -1 (errno EINVAL) when the list is empty or the name does not fit. */
int nbf_slurm_first_node(const char *nodelist, char *out, size_t outlen);

/* The rendezvous port of a Slurm job when MASTER_PORT is not set:
 * 15000 + the last four digits of SLURM_JOB_ID (Lightning's rule), so
 * every task of a job agrees without talking. -1 when job_id is not a
 * number. */
int nbf_slurm_port(const char *job_id);

/* Whether a master address names this host's loopback ("127.0.0.1",
 * "localhost"): every rank runs here, so the rendezvous store (the
 * launcher's, or a rank 0's) binds 127.0.0.1 only; any other address
 * means other nodes must reach it, and it binds every interface. */
int nbf_loopback_name(const char *master_addr);

/* 0 when `name` resolves here (getaddrinfo, TCP), else getaddrinfo's
 * error code (gai_strerror says it). */
int nbf_resolve(const char *name);

/* An address other nodes reach a Slurm node at: the name itself when it
 * resolves here, else its NodeAddr from `scontrol -o show node NAME`
 * (clusters whose node names only Slurm knows; scontrol gets 10 s). 0,
 * or -1 when neither. */
int nbf_slurm_node_addr(const char *name, char *out, size_t outlen);

#endif
