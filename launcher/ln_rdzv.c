/*
 * ln_rdzv.c — node arrival at node 0's store and the world check (see
 * ln_rdzv.h).
 */
#define _GNU_SOURCE
#include "ln_rdzv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbf_util.h"

/* The fields every node must agree on, in the order they are reported. */
static const char *const FIELDS[] = {"rdzv_id", "num_nodes", "num_processes", "mixed_precision",
                                     NULL};

#define FIX_SECRET                                                                                 \
  "Give every node the same rendezvous secret (rdzv_conf=secret=... in each launch cell, or the "  \
  "same NBFORK_RDZV_SECRET) and run the launch cells again."
/* The same, in `nbfork launch`'s words (ln_options_t.cli). */
#define FIX_SECRET_CLI                                                                             \
  "Give every machine the same rendezvous secret (--rdzv_conf secret=... in each `nbfork launch`, " \
  "or the same NBFORK_RDZV_SECRET) and run them again."

static const char *fix_secret(const ln_options_t *o) {
  return o->cli ? FIX_SECRET_CLI : FIX_SECRET;
}

/* How the secret is given, in the caller's words. */
static const char *secret_option(const ln_options_t *o) {
  return o->cli ? "--rdzv_conf secret=..." : "rdzv_conf=secret=...";
}

void ln_rdzv_gate_key(const ln_options_t *o, int restart, char *out, size_t n) {
  snprintf(out, n, "%s-r%d/go", o->rdzv_id[0] ? o->rdzv_id : "nbfork", restart);
}

void ln_rdzv_describe(const ln_options_t *o, char *out, size_t n) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  snprintf(out, n, "rdzv_id=%s\nnum_nodes=%d\nnum_processes=%d\nmixed_precision=%s\nhost=%s\n",
           o->rdzv_id[0] ? o->rdzv_id : "(none)", o->num_nodes, o->num_processes,
           o->mixed_precision, host);
}

/* The value of `name` in a description, into out ("?" when absent). */
static void field(const char *desc, const char *name, char *out, size_t n) {
  size_t len = strlen(name);
  for (const char *p = desc; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (!strncmp(p, name, len) && p[len] == '=') {
      const char *v = p + len + 1, *end = strchr(v, '\n');
      snprintf(out, n, "%.*s", (int)(end ? end - v : (long)strlen(v)), v);
      return;
    }
  snprintf(out, n, "?");
}

/* FIELDS as `nbfork launch` spells them. */
static const char *const CLI_FIELDS[] = {"rdzv_id", "--num_machines", "--num_processes",
                                         "--mixed_precision", NULL};

char *ln_rdzv_compare(const char *const *desc, int n) {
  return ln_rdzv_compare_for(desc, n, 0);
}

char *ln_rdzv_compare_for(const char *const *desc, int n, int cli) {
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  int differ = 0;
  for (int k = 0; FIELDS[k]; k++) {
    char first[160] = "", v[160];
    int same = 1, seen = 0;
    for (int i = 0; i < n; i++) {
      if (!desc[i])
        continue;
      field(desc[i], FIELDS[k], v, sizeof v);
      if (seen++ && strcmp(v, first))
        same = 0;
      if (seen == 1)
        snprintf(first, sizeof first, "%s", v);
    }
    if (same)
      continue;
    fprintf(f, "%s%s%s", differ++ ? "; " : "", cli ? CLI_FIELDS[k] : FIELDS[k], cli ? "" : ":");
    for (int i = 0, j = 0; i < n; i++)
      if (desc[i]) {
        field(desc[i], FIELDS[k], v, sizeof v);
        if (cli && !strcmp(FIELDS[k], "num_processes")) { /* the flag counts every machine's */
          char nodes[32];
          field(desc[i], "num_nodes", nodes, sizeof nodes);
          fprintf(f, "%s %ld on machine %d", j++ ? "," : "", atol(v) * atol(nodes), i);
        } else if (cli) {
          fprintf(f, "%s %s on machine %d", j++ ? "," : "", v, i);
        } else
          fprintf(f, "%s node %d has %s", j++ ? "," : "", i, v);
      }
  }
  fclose(f);
  if (!differ) {
    free(text);
    return NULL;
  }
  return text;
}

void ln_rdzv_begin(ln_rdzv_t *r, const ln_options_t *o, int restart,
                   const acc_store_server_t *srv) {
  memset(r, 0, sizeof *r);
  r->o = o;
  r->srv = srv;
  r->restart = restart;
  if (o->num_nodes <= 1) {
    r->done = 1;
    return;
  }
  snprintf(r->prefix, sizeof r->prefix, "nbfork-rdzv/r%d/", restart);
  ln_rdzv_gate_key(o, restart, r->gate, sizeof r->gate);
  r->deadline_ms = nbf_now_ms() + o->rdzv_timeout_s * 1000.0;
  r->present = calloc((size_t)o->num_nodes, sizeof *r->present);
  r->client =
      acc_store_client_new_secure(o->master_addr, o->use_port, LN_RDZV_POLL_MS, o->rdzv_secret);
}

static void key_of(const ln_rdzv_t *r, const char *what, int node, char *key, size_t n) {
  if (node >= 0)
    snprintf(key, n, "%s%s/%d", r->prefix, what, node);
  else
    snprintf(key, n, "%s%s", r->prefix, what);
}

/* Remember why node 0's store refused us (the client forgets it at the
 * next answered request; the last refusal seen is the one to report). */
static void note_refusal(ln_rdzv_t *r) {
  acc_store_refusal_t why = acc_store_client_refusal(r->client);
  if (why != ACC_STORE_ANSWERED)
    r->refusal = (int)why;
}

/* ---- node 0 ---- */

/* The descriptions of every node (node 0's own, the others' from the
 * store; NULL for those not arrived or unreadable). */
static void gather(ln_rdzv_t *r, char **desc) {
  char key[128], mine[512];
  ln_rdzv_describe(r->o, mine, sizeof mine);
  desc[0] = strdup(mine);
  for (int k = 1; k < r->o->num_nodes; k++) {
    void *v = NULL;
    size_t len = 0;
    key_of(r, "node", k, key, sizeof key);
    desc[k] = NULL;
    if (r->present[k] && acc_store_get(r->client, key, &v, &len) == ACC_OK)
      desc[k] = v;
  }
}

static void free_descs(char **desc, int n) {
  for (int i = 0; i < n; i++)
    free(desc[i]);
  free(desc);
}

/* Publish a refusal and keep the store up until the arrived nodes read it. */
static void refuse(ln_rdzv_t *r, char *msg) {
  char key[128];
  r->error = msg ? msg : strdup("rendezvous refused (out of memory for the reason)");
  key_of(r, "verdict", -1, key, sizeof key);
  acc_store_set(r->client, key, r->error, strlen(r->error));
  r->linger_until = nbf_now_ms() + LN_RDZV_LINGER_MS;
}

static int all_acked(ln_rdzv_t *r) {
  char key[128];
  for (int k = 1; k < r->o->num_nodes; k++) {
    int exists = 0;
    key_of(r, "ack", k, key, sizeof key);
    if (r->present[k] && (acc_store_check(r->client, key, &exists) != ACC_OK || !exists))
      return 0;
  }
  return 1;
}

/* What node 0's store refused: the secrets differ when any was. */
static void describe_refusals(const ln_rdzv_t *r, FILE *f) {
  acc_store_refusals_t c;
  acc_store_server_refusals(r->srv, &c);
  const char *Node = r->o->cli ? "Machine" : "Node", *node = r->o->cli ? "machine" : "node";
  if (c.no_secret)
    fprintf(f,
            " %s 0's store refused %u connection%s from processes without a rendezvous secret, "
            "while this %s has one (%s): the %ss' secrets differ.",
            Node, c.no_secret, c.no_secret == 1 ? "" : "s", node, secret_option(r->o), node);
  if (c.unexpected_secret)
    fprintf(f,
            " %s 0's store refused %u connection%s from processes with a rendezvous secret, "
            "while this %s has none: the %ss' secrets differ.",
            Node, c.unexpected_secret, c.unexpected_secret == 1 ? "" : "s", node, node);
  if (c.other_secret)
    fprintf(f,
            " %s 0's store refused %u connection%s with another rendezvous secret than this "
            "%s's: the %ss' secrets differ.",
            Node, c.other_secret, c.other_secret == 1 ? "" : "s", node, node);
  if (c.malformed && !c.no_secret && !c.unexpected_secret && !c.other_secret)
    fprintf(f,
            " %s 0's store refused %u connection%s whose handshake failed (a process with "
            "another rendezvous secret than this %s's, or not an nbfork store client).",
            Node, c.malformed, c.malformed == 1 ? "" : "s", node);
  if (c.no_secret || c.unexpected_secret || c.other_secret || c.malformed)
    fprintf(f, " %s", fix_secret(r->o));
}

/* The timeout passed on node 0: who is missing, what the store refused,
 * what the arrived nodes disagree on. */
static char *missing_message(ln_rdzv_t *r) {
  const ln_options_t *o = r->o;
  int count = 0;
  for (int n = 1; n < o->num_nodes; n++)
    count += !r->present[n];
  char *text = NULL;
  size_t cap = 0;
  FILE *f = open_memstream(&text, &cap);
  if (!f)
    return NULL;
  fprintf(f, "rendezvous: %s%s", o->cli ? "machine" : "node", count > 1 ? "s" : "");
  for (int n = 1, j = 0; n < o->num_nodes; n++)
    if (!r->present[n])
      fprintf(f, "%s %d", j++ ? "," : "", n);
  if (o->cli)
    fprintf(f, " of --num_machines %d did not join within %d s (--rdzv_conf join_timeout; "
               "machine 0 waited at %s:%d).",
            o->num_nodes, o->rdzv_timeout_s, o->master_addr, o->use_port);
  else
    fprintf(f,
            " of num_nodes=%d did not join within rdzv_timeout=%d s (node 0 waited at %s:%d, "
            "rdzv_id '%s').",
            o->num_nodes, o->rdzv_timeout_s, o->master_addr, o->use_port, o->rdzv_id);
  describe_refusals(r, f);
  char **desc = calloc((size_t)o->num_nodes, sizeof *desc);
  if (desc) {
    gather(r, desc);
    char *diff = ln_rdzv_compare_for((const char *const *)desc, o->num_nodes, o->cli);
    if (diff)
      fprintf(f, " The nodes that arrived were launched with different settings: %s.", diff);
    free(diff);
    free_descs(desc, o->num_nodes);
  }
  if (o->cli)
    fprintf(f, " Start `nbfork launch` on those machines with the same --main_process_ip, "
               "--main_process_port and --num_machines.");
  else
    fprintf(f, " Start their launch cells with the same master_addr, use_port, num_nodes and "
               "rdzv_id.");
  fclose(f);
  return text;
}

/* Every node arrived: compare, then open the gate or refuse. */
static void judge(ln_rdzv_t *r) {
  const ln_options_t *o = r->o;
  char key[128];
  char **desc = calloc((size_t)o->num_nodes, sizeof *desc);
  if (!desc)
    return; /* again at the next poll */
  gather(r, desc);
  for (int k = 1; k < o->num_nodes; k++)
    if (!desc[k]) {
      free_descs(desc, o->num_nodes);
      return; /* a GET timed out: again at the next poll */
    }
  char *diff = ln_rdzv_compare_for((const char *const *)desc, o->num_nodes, o->cli);
  free_descs(desc, o->num_nodes);
  if (diff && o->cli) {
    refuse(r, nbf_xprintf("rendezvous refused: the machines were launched with different "
                          "settings: %s. Every machine's `nbfork launch` needs the same "
                          "--num_machines, --num_processes (processes per machine) and "
                          "--mixed_precision: fix the commands that differ and run them again.",
                          diff));
    free(diff);
    return;
  }
  if (diff) {
    refuse(r, nbf_xprintf("rendezvous refused: the nodes were launched with different settings: "
                          "%s. Every node's launch needs the same num_nodes, num_processes "
                          "(workers per node), mixed_precision and rdzv_id: fix the launch cells "
                          "that differ and run them again.",
                          diff));
    free(diff);
    return;
  }
  key_of(r, "verdict", -1, key, sizeof key);
  if (acc_store_set(r->client, key, "OK", 2) == ACC_OK &&
      acc_store_set(r->client, r->gate, "1", 1) == ACC_OK)
    r->done = 1;
}

static int poll_node0(ln_rdzv_t *r, char **error) {
  if (r->linger_until > 0) {
    if (all_acked(r) || nbf_now_ms() > r->linger_until) {
      *error = strdup(r->error);
      return -1;
    }
    return 0;
  }
  char key[128];
  int all = 1;
  for (int n = 1; n < r->o->num_nodes; n++) {
    key_of(r, "node", n, key, sizeof key);
    if (!r->present[n] && acc_store_check(r->client, key, &r->present[n]) != ACC_OK)
      r->present[n] = 0;
    all = all && r->present[n];
  }
  if (all)
    judge(r);
  else if (nbf_now_ms() >= r->deadline_ms)
    refuse(r, missing_message(r));
  return 0;
}

/* ---- nodes > 0 ---- */

/* Node 0's store never answered us: say why, from the handshake, in the
 * caller's words (%launch's options or `nbfork launch`'s flags). */
static char *unreachable_message(const ln_rdzv_t *r) {
  const ln_options_t *o = r->o;
  const char *node = o->cli ? "machine" : "node", *fix = fix_secret(o);
  switch ((acc_store_refusal_t)r->refusal) {
  case ACC_STORE_REFUSED_NEEDS_SECRET:
    return nbf_xprintf("rendezvous refused: %s 0's store at %s:%d requires a rendezvous secret "
                       "and this %s has none: the %ss' secrets differ. %s",
                       node, o->master_addr, o->use_port, node, node, fix);
  case ACC_STORE_REFUSED_OPEN_STORE:
    return nbf_xprintf("rendezvous refused: %s 0's store at %s:%d has no rendezvous secret and "
                       "this %s has one (%s): the %ss' secrets differ. %s",
                       node, o->master_addr, o->use_port, node, secret_option(o), node, fix);
  case ACC_STORE_REFUSED_OTHER_SECRET:
    return nbf_xprintf("rendezvous refused: %s 0's store at %s:%d did not accept this %s's "
                       "rendezvous secret (%s): the %ss' secrets differ. %s",
                       node, o->master_addr, o->use_port, node, secret_option(o), node, fix);
  default:
    if (o->cli)
      return nbf_xprintf(
          "rendezvous: machine 0's store at --main_process_ip %s --main_process_port %d did not "
          "answer within %d s (--rdzv_conf join_timeout). Start `nbfork launch --machine_rank 0` "
          "there (same --main_process_port and --num_machines) and check that %s:%d is "
          "reachable from this machine (and that every machine uses the same rendezvous secret).",
          o->master_addr, o->use_port, o->rdzv_timeout_s, o->master_addr, o->use_port);
    return nbf_xprintf(
        "rendezvous: node 0's store at %s:%d did not answer within rdzv_timeout=%d s. Run the "
        "launch cell of node_rank=0 (same use_port, num_nodes, rdzv_id) and check that %s:%d is "
        "reachable from this machine (and that every node uses the same rendezvous secret).",
        o->master_addr, o->use_port, o->rdzv_timeout_s, o->master_addr, o->use_port);
  }
}

/* Node 0 took this node's arrival but published no verdict in time. */
static char *no_verdict_message(const ln_options_t *o) {
  if (o->cli)
    return nbf_xprintf("rendezvous: machine 0 (store at %s:%d) gave no verdict within %d s "
                       "(--rdzv_conf join_timeout): some other machine did not join, or machine "
                       "0's `nbfork launch` ended. Run `nbfork launch` on every machine again.",
                       o->master_addr, o->use_port, o->rdzv_timeout_s);
  return nbf_xprintf("rendezvous: node 0 (store at %s:%d) gave no verdict within "
                     "rdzv_timeout=%d s: some other node did not join, or node 0's "
                     "launch ended. Run every node's launch cell again.",
                     o->master_addr, o->use_port, o->rdzv_timeout_s);
}

static int poll_other(ln_rdzv_t *r, char **error) {
  const ln_options_t *o = r->o;
  char key[128];
  if (!r->self_set) {
    char desc[512];
    ln_rdzv_describe(o, desc, sizeof desc);
    key_of(r, "node", o->node_rank, key, sizeof key);
    if (acc_store_set(r->client, key, desc, strlen(desc)) == ACC_OK)
      r->self_set = 1;
    else
      note_refusal(r);
  }
  int exists = 0;
  key_of(r, "verdict", -1, key, sizeof key);
  if (r->self_set && acc_store_check(r->client, key, &exists) == ACC_OK && exists) {
    void *v = NULL;
    size_t len = 0;
    if (acc_store_get(r->client, key, &v, &len) == ACC_OK) {
      if (!strcmp(v, "OK")) {
        free(v);
        r->done = 1;
        return 0;
      }
      key_of(r, "ack", o->node_rank, key, sizeof key);
      acc_store_set(r->client, key, "1", 1);
      *error = nbf_xprintf("%s (node 0's verdict, read by node %d)", (char *)v, o->node_rank);
      free(v);
      return -1;
    }
  }
  /* no verdict yet: is our description still there? A node 0 that
   * started its store again (a %ranks restart run on this node first: its
   * old store was still up) has lost it: set it again at the next poll */
  key_of(r, "node", o->node_rank, key, sizeof key);
  if (r->self_set && acc_store_check(r->client, key, &exists) == ACC_OK && !exists)
    r->self_set = 0;
  if (nbf_now_ms() < r->deadline_ms + (r->self_set ? LN_RDZV_GRACE_MS : 0))
    return 0;
  *error = r->self_set ? no_verdict_message(o) : unreachable_message(r);
  return -1;
}

int ln_rdzv_poll(ln_rdzv_t *r, char **error) {
  if (r->done)
    return 0;
  if (!r->client || !r->present) {
    *error = nbf_xprintf("rendezvous: cannot create a client of node 0's store at %s:%d",
                         r->o->master_addr, r->o->use_port);
    return -1;
  }
  return r->o->node_rank == 0 ? poll_node0(r, error) : poll_other(r, error);
}

void ln_rdzv_end(ln_rdzv_t *r) {
  acc_store_client_destroy(&r->client);
  free(r->present);
  free(r->error);
  r->present = NULL;
  r->error = NULL;
  r->done = 1;
}
