/*
 * acc_keep.c — named memory that survives re-runs of a notebook cell
 * (see nbfork.h): a short list, searched by name under a mutex.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "acc_internal.h"
#include "nbfork.h"

typedef struct keep {
  struct keep *next;
  size_t size;
  void *data;
  char name[];
} keep_t;

static keep_t *g_kept;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* The link pointing at `name`'s entry (or at the list's NULL end). */
static keep_t **find(const char *name) {
  keep_t **p = &g_kept;
  while (*p && strcmp((*p)->name, name) != 0)
    p = &(*p)->next;
  return p;
}

static void drop(keep_t **p) {
  keep_t *k = *p;
  *p = k->next;
  free(k->data);
  free(k);
}

void *acc_keep(const char *name, size_t size, int *fresh) {
  if (!name || !*name || size == 0) {
    acc__set_error(NULL, ACC_ERR_INVALID_ARGUMENT, "acc_keep: %s", size ? "no name" : "size 0");
    return NULL;
  }
  pthread_mutex_lock(&g_lock);
  keep_t **p = find(name);
  if (*p && (*p)->size == size) {
    void *data = (*p)->data;
    pthread_mutex_unlock(&g_lock);
    if (fresh)
      *fresh = 0;
    return data;
  }
  if (*p)
    drop(p); /* another size: a changed cell, not a re-run */
  size_t len = strlen(name) + 1;
  keep_t *k = malloc(sizeof *k + len);
  void *data = k ? calloc(1, size) : NULL;
  if (!data) {
    free(k);
    pthread_mutex_unlock(&g_lock);
    acc__set_error(NULL, ACC_ERR_NO_MEMORY, "acc_keep: cannot allocate %zu bytes for '%s'", size,
                   name);
    return NULL;
  }
  memcpy(k->name, name, len);
  k->size = size;
  k->data = data;
  k->next = g_kept;
  g_kept = k;
  pthread_mutex_unlock(&g_lock);
  if (fresh)
    *fresh = 1;
  return data;
}

void acc_keep_free(const char *name) {
  if (!name)
    return;
  pthread_mutex_lock(&g_lock);
  keep_t **p = find(name);
  if (*p)
    drop(p);
  pthread_mutex_unlock(&g_lock);
}

void *acc_keep_find(const char *name, size_t *size) {
  if (!name)
    return NULL;
  pthread_mutex_lock(&g_lock);
  keep_t *k = *find(name);
  void *data = k ? k->data : NULL;
  if (k && size)
    *size = k->size;
  pthread_mutex_unlock(&g_lock);
  return data;
}
