/*
 * ex_stdin — stdin for cells that read it (scanf, fgets, getchar).
 *
 * The executor replaces libc's `stdin` with a stream (fopencookie) whose
 * reads ask the kernel for a line: an input_request event, then the
 * answer the kernel writes on fd 0 (Jupyter messaging spec, "Messages on
 * the stdin ROUTER/DEALER channel"). When the front end does not allow
 * stdin, reads see end-of-file at once: a cell never hangs on input.
 */
#ifndef EX_STDIN_H
#define EX_STDIN_H

/* Install the stream. Returns 0 or -1. */
int ex_stdin_install(void);

/* Start an execute request: `allow` = its front end accepts
 * input_request. Clears end-of-file and what an earlier cell left unread
 * (buffered or still in the pipe); when not allowed, fd 0 is /dev/null
 * until ex_stdin_end (nbf_wire.h), so even read(0, ...) sees end-of-file. */
void ex_stdin_begin(int allow);

/* End the request: fd 0 is the kernel's pipe again. */
void ex_stdin_end(void);

#endif
