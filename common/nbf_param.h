/*
 * nbf_param.h — the one reader of environment variables (after NCCL's
 * NCCL_PARAM). Every variable nbfork reads or sets is declared once in
 * nbf_params.def; `getenv` appears here and nowhere else in kernel/,
 * launcher/ and runtime/.
 *
 * Values are read lazily, at each call, never cached: the launcher sets
 * a worker's variables after fork(), and %env changes the executor's
 * between cells, so a value read at load time would be stale.
 *
 * Part of the static library nbfork_common (hidden symbols), linked into
 * the kernel, the executor, the launcher and libnbfork. Not installed.
 */
#ifndef NBF_PARAM_H
#define NBF_PARAM_H

#include <stddef.h>

typedef enum nbf_param_type {
  NBF_PARAM_STR,
  NBF_PARAM_INT,
  NBF_PARAM_BOOL,
  NBF_PARAM_DOUBLE,
} nbf_param_type_t;

typedef enum nbf_param_id {
#define NBF_PARAM(name, type, dflt, reader, doc) NBF_P_##name,
#include "nbf_params.def"
#undef NBF_PARAM
  NBF_P_COUNT
} nbf_param_id_t;

/* One row of the table (static storage; never freed). */
typedef struct nbf_param {
  const char *name;        /* "NBFORK_TIMEOUT_S" */
  nbf_param_type_t type;   /* how nbf_param_long/_bool/_double parse it */
  const char *default_str; /* value when unset, as text; NULL: none (DOC says) */
  const char *reader;      /* "runtime", "launcher, runtime", ... */
  const char *doc;         /* one line */
} nbf_param_t;

/* The row of `id`; NULL when `id` is out of range. */
const nbf_param_t *nbf_param_info(nbf_param_id_t id);
/* The variable's name ("RANK"); "" when `id` is out of range. */
const char *nbf_param_name(nbf_param_id_t id);

/* The value as set, or NULL when unset or empty. */
const char *nbf_param_raw(nbf_param_id_t id);
/* The value exactly as set, "" included; NULL when unset. For the few
 * variables where empty means something (CUDA_VISIBLE_DEVICES="" hides
 * every GPU). */
const char *nbf_param_exact(nbf_param_id_t id);
/* The value as set, else the table's default (NULL when it has none). */
const char *nbf_param_str(nbf_param_id_t id);
/* Integer value: as set, else the table's default. Returns 0 with *out
 * set; 1 when unset and the table has no default (*out untouched: the
 * row's DOC says what stands for it); -1 when the value set is not a
 * whole decimal number that fits a long (*out untouched; the caller
 * reports it, naming nbf_param_name(id) and nbf_param_raw(id)). */
int nbf_param_long(nbf_param_id_t id, long *out);
/* Floating-point value, with the rules of nbf_param_long. */
int nbf_param_double(nbf_param_id_t id, double *out);
/* Truth value (nbf_truthy) as set, else the table's default: 1 or 0; -1
 * when unset and the table has no default. */
int nbf_param_bool(nbf_param_id_t id);
/* Accelerate's str_to_bool, strictly: *out = 1 for its true words, 0 for
 * "0", "false", "no", "off", "n" (any case), as set, else the table's
 * default; returns 0. 1 when unset and the table has no default (*out
 * untouched); -1 for any other value (*out untouched: the caller names
 * the variable and NBF_BOOL_WORDS, the accepted values). */
int nbf_param_bool_strict(nbf_param_id_t id, int *out);
#define NBF_BOOL_WORDS "1, true, yes, on, y or 0, false, no, off, n (any case)"

/* Accelerate's str_to_bool: 1 for "1", "true", "yes", "on", "y" in any
 * case, 0 for anything else and for NULL. The only table of true words. */
int nbf_truthy(const char *s);

/* Set (overwrite) or remove a variable for this process and its children.
 * 0, or -1 with errno set (ENOMEM). */
int nbf_param_set(nbf_param_id_t id, const char *value);
int nbf_param_set_long(nbf_param_id_t id, long value);
int nbf_param_unset(nbf_param_id_t id);

/* Typed accessors, one per row of nbf_params.def, generated from its
 * TYPE column (as NCCL_PARAM makes ncclParamX()); the table's DEFAULT is
 * the only default:
 *   STR     const char *nbf_param_NAME(void)   nbf_param_str
 *   INT     int nbf_param_NAME(long *out)      nbf_param_long
 *   DOUBLE  int nbf_param_NAME(double *out)    nbf_param_double
 *   BOOL    int nbf_param_NAME(void)           nbf_param_bool
 * e.g. `if (nbf_param_NBFORK_TIMEOUT_S(&s) < 0) ...malformed...`. */
#define NBF_PARAM_ACCESSOR_STR(name)                                                               \
  static inline const char *nbf_param_##name(void) { return nbf_param_str(NBF_P_##name); }
#define NBF_PARAM_ACCESSOR_INT(name)                                                               \
  static inline int nbf_param_##name(long *out) { return nbf_param_long(NBF_P_##name, out); }
#define NBF_PARAM_ACCESSOR_DOUBLE(name)                                                            \
  static inline int nbf_param_##name(double *out) { return nbf_param_double(NBF_P_##name, out); }
#define NBF_PARAM_ACCESSOR_BOOL(name)                                                              \
  static inline int nbf_param_##name(void) { return nbf_param_bool(NBF_P_##name); }
#define NBF_PARAM(name, type, dflt, reader, doc) NBF_PARAM_ACCESSOR_##type(name)
#include "nbf_params.def"
#undef NBF_PARAM

/* A variable the *user* names (%env NAME), not one nbfork reads itself:
 * its value or NULL. Not for nbfork's own variables (use the table). */
const char *nbf_env_get(const char *name);

#endif
