/*
 * nbf_display.h — the display API: cells and launched workers show rich
 * output (HTML, images, JSON, live updates) in the notebook through the
 * kernel (Jupyter messaging spec, "Display Data" and "Update Display
 * Data"). Included by nbfork.h; usable on its own.
 *
 * Transport: one JSON line per event on the fd named by
 * NBFORK_DISPLAY_FD, which the kernel turns into iopub messages. Calls
 * are thread-safe: each event is written whole under one lock, after
 * stdout and stderr are flushed so that output keeps its order.
 *
 * Errors: calls return -1 on failure (the id-returning ones) or -1 vs 0;
 * there is no error object, so the two failures a caller cannot see
 * coming (invalid JSON data, a failed write to the kernel) also print
 * one line on stderr saying why.
 */
#ifndef NBF_DISPLAY_H
#define NBF_DISPLAY_H

#include <stddef.h>

#include "nbf_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Show `len` bytes of `data` as MIME type `mime` in the cell's output
 * (Jupyter `display_data`, messaging spec §"Display Data"). Text types
 * (text/..., image/svg+xml, application/javascript) are sent as text;
 * binary types (image/png, ...) are base64-encoded; application/json (and
 * any "+json" type) must hold one JSON document. Returns a display id
 * (> 0) for nbf_update_display, or -1 on error (bad argument, invalid
 * JSON, write failure; for invalid JSON and a failed write one line on
 * stderr says why, since there is no object to keep the reason in). Without a kernel attached
 * (NBFORK_DISPLAY_FD unset) text data is printed to stdout and an id is returned; binary data
 * cannot be shown and -1 is returned. */
ACC_API long nbf_display(const char *mime, const void *data, size_t len);

/* Replace what display `id` shows (Jupyter `update_display_data`).
 * Returns 0, or -1 on error. */
ACC_API int nbf_update_display(long id, const char *mime, const void *data, size_t len);

/* One representation of a MIME bundle (Jupyter `data` dict entry). */
typedef struct {
  const char *mime;
  const void *data;
  size_t len;
} nbf_mime_t;

/* Show `n` representations of the same object at once (e.g. text/plain
 * and text/html); the front end picks the richest it can render. Same
 * rules and returns as nbf_display (without a kernel the text/plain item
 * is printed). */
ACC_API long nbf_display_bundle(const nbf_mime_t *items, int n);
ACC_API int nbf_update_display_bundle(long id, const nbf_mime_t *items, int n);

/* Clear the cell's output (Jupyter `clear_output`); with wait != 0 the
 * front end clears only when new output arrives. Returns 0, or -1 on a
 * write error or without a kernel attached. */
ACC_API int nbf_clear_output(int wait);

/* Internal: used by code the cell engine generates to show the value of a
 * cell's last expression (Jupyter `execute_result`, text/plain). */
ACC_API int nbf__execute_result(const char *text_plain);

#ifdef __cplusplus
}
#endif

#endif /* NBF_DISPLAY_H */
