/*
 * ex_diag — what the user sees of the compiler's output: the lines about
 * nbfork's generated wrappers dropped, versioned names shown plain, and a
 * one-line summary for the error's evalue. Pure string functions.
 */
#ifndef EX_DIAG_H
#define EX_DIAG_H

/* Compiler diagnostics as the user should see them (caller frees): lines
 * about the generated wrapper (`In function '__nbf_run_...'`, notes in
 * nbfork's own helper code, `cc1: some warnings being treated as errors`)
 * and repeated lines dropped, versioned symbol names (`sq__c<16 hex>`)
 * shown as the plain name. */
char *ex_diag_clean(const char *diag);

/* `diag` with the column of each `LABEL:LINE:COL:` location rewritten
 * from bytes (the compiler's unit, -fdiagnostics-column-unit=byte) to
 * characters (Unicode code points) of that line of `code`, the cell's
 * text, as Jupyter front ends count them. Caller frees; NULL when memory
 * ran out. */
char *ex_diag_columns(const char *diag, const char *label, const char *code);

/* The first "error" line of compiler diagnostics, trimmed, for a one-line
 * summary (caller frees). */
char *ex_diag_summary(const char *diag);

#endif
