/*
 * kn_connection.h — the Jupyter connection file (jupyter_client
 * "Connection files" section of the messaging docs).
 *
 * Fields read:
 *   transport         "tcp" (default) or "ipc"
 *   ip                tcp: address to bind (default "127.0.0.1");
 *                     ipc: path prefix, endpoints are "ipc://IP-PORT"
 *   shell_port, control_port, stdin_port, iopub_port, hb_port
 *                     required, integers 1..65535 (tcp) or >= 1 (ipc)
 *   key               required string; "" disables signing
 *   signature_scheme  "hmac-sha256" (default); any other value is an error
 * Other fields (kernel_name, ...) are ignored.
 */
#ifndef KN_CONNECTION_H
#define KN_CONNECTION_H

#include <stddef.h>

#include "kn_result.h"

typedef enum kn_port_index {
  KN_PORT_SHELL,
  KN_PORT_CONTROL,
  KN_PORT_STDIN,
  KN_PORT_IOPUB,
  KN_PORT_HB,
  KN_PORT_COUNT
} kn_port_index_t;

typedef struct kn_connection {
  char transport[8];         /* "tcp" or "ipc" */
  char ip[256];              /* address or ipc path prefix */
  int ports[KN_PORT_COUNT];  /* indexed by kn_port_index_t */
  unsigned char *key;        /* owned; NUL-terminated for convenience */
  size_t key_len;            /* bytes, 0 = no signing */
  char signature_scheme[32]; /* "hmac-sha256" */
} kn_connection_t;

/* What went wrong in a connection file; filled by kn_connection_load. */
typedef struct kn_connection_error {
  char field[64];   /* the offending field, "(file)" or "(json)" */
  char text[256];   /* what is wrong with it */
  int line, column; /* for "(json)" errors, else 0 */
} kn_connection_error_t;

/* Name of port i in the connection file ("shell_port", ...). */
const char *kn_connection_port_name(kn_port_index_t i);

/* Read and validate the connection file at path into *out (caller then
 * owns out->key; release with kn_connection_clear). On error returns
 * KN_ERR_INVALID (bad content) or KN_ERR_SYSTEM (unreadable file) and
 * fills *err; *out is left cleared. */
kn_result_t kn_connection_load(const char *path, kn_connection_t *out, kn_connection_error_t *err);

/* Same, from a JSON text already in memory (used by the unit tests). */
kn_result_t kn_connection_parse(const char *json_text, kn_connection_t *out,
                                kn_connection_error_t *err);

/* ZeroMQ endpoint for port i ("tcp://127.0.0.1:5555", "ipc://path-5555")
 * into buf. Returns KN_ERR_INVALID if it does not fit. */
kn_result_t kn_connection_endpoint(const kn_connection_t *c, kn_port_index_t i, char *buf,
                                   size_t len);

/* Is the connection file at path private? jupyter_client writes it 0600:
 * its key lets whoever reads it run code in the kernel. Returns 0 when no
 * group/other permission bit is set (or it cannot be stat()ed: load
 * reports that), 1 otherwise with msg[len] saying so and what to do
 * (chmod 600): the kernel warns, as ipykernel leaves it to the user. */
int kn_connection_check_mode(const char *path, char *msg, size_t len);

/* Free the key and zero *c. NULL-safe. */
void kn_connection_clear(kn_connection_t *c);

#endif
