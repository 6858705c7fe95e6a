/*
 * nbf_wire.h — the contract between the kernel process (ZeroMQ, threads)
 * and the executor process (single-threaded, holds cell state, forks
 * training workers). See ../shared/DESIGN.md "Processes".
 *
 * The kernel starts `nbfork-executor` (found next to `nbfork-kernel`) with:
 *
 *   fd 0  stdin:  a pipe from the kernel (cell input; EOF when the front
 *                 end does not allow stdin)
 *   fd 1  stdout: a pipe to the kernel -> iopub `stream` name=stdout
 *   fd 2  stderr: a pipe to the kernel -> iopub `stream` name=stderr
 *   fd 3  requests (kernel -> executor): one JSON object per line
 *   fd 4  events   (executor -> kernel): one JSON object per line
 *
 * and in its environment NBFORK_DISPLAY_FD=4 (so the runtime's display API
 * writes events), OPENBLAS_NUM_THREADS=1 unless already set (OpenBLAS must
 * not start threads in a process that forks), and the executor is put in
 * its own process group: the kernel forwards SIGINT to it (Jupyter's
 * signal-mode interrupt is a killpg of the kernel's group; forwarding
 * keeps it exactly one SIGINT).
 *
 * Requests (fd 3), field "msg" names the request:
 *   {"msg":"execute","code":STR,"execution_count":INT,"silent":BOOL,
 *    "allow_stdin":BOOL}
 *   {"msg":"complete","code":STR,"cursor_pos":INT}      (bytes offset)
 *   {"msg":"inspect","code":STR,"cursor_pos":INT,"detail_level":INT}
 *   {"msg":"is_complete","code":STR}
 *
 * Events (fd 4). Every event but "reply" is published on iopub with
 * msg_type = "msg" and content = the object without "msg":
 *   {"msg":"execute_result","data":{MIME:..},"metadata":{}}
 *                         (the kernel adds "execution_count")
 *   {"msg":"display_data","data":{..},"metadata":{},"transient":{"display_id":STR}}
 *   {"msg":"update_display_data", same fields}
 *   {"msg":"clear_output","wait":BOOL}
 *   {"msg":"input_request","prompt":STR,"password":BOOL}
 *                         (the kernel asks the front end on stdin and
 *                          writes the answer + "\n" to the executor's fd 0)
 * and exactly one terminating event per request:
 *   {"msg":"reply","status":"ok", ...reply content fields...}
 *   {"msg":"reply","status":"error","ename":STR,"evalue":STR,
 *    "traceback":[STR,..]}
 * For execute, an error reply is also published once as iopub `error`.
 * Reply fields per request (offsets in BYTES of the UTF-8 code; the kernel
 * converts from/to Jupyter's code points):
 *   execute:     {"msg":"reply","status":"ok"} or, for a help request
 *                (`name?`, `name??`: ex_query.h), with the pager payload
 *                {"msg":"reply","status":"ok","payload":[{"source":"page",
 *                 "data":{"text/plain":STR},"start":0}]}, which the
 *                kernel puts in execute_reply's "payload" as it is
 *   complete:    {..,"status":"ok","matches":[STR..],"cursor_start":INT,
 *                 "cursor_end":INT,"metadata":{}}
 *   inspect:     {..,"status":"ok","found":BOOL,"data":{MIME:..},"metadata":{}}
 *   is_complete: see "is_complete reply" below (status carries the answer)
 *
 * Ordering: the executor flushes stdout/stderr before writing any event,
 * and the kernel drains the stdout/stderr pipes before publishing an
 * event, so output printed before a display or the reply is shown before
 * it.
 *
 * Details (added by the kernel side; the kernel implements exactly this):
 *
 * - One request in flight at a time: the kernel writes the next request
 *   only after the "reply" of the previous one. Lines are UTF-8 JSON with
 *   no raw newline inside (JSON escapes them).
 * - execute: "execution_count" is the count this cell gets (for a silent
 *   or store_history=false request, the current, unchanged count). The ok
 *   reply is {"msg":"reply","status":"ok"} plus optional "payload" and
 *   "user_expressions"; the kernel adds "execution_count".
 * - complete reply: {"msg":"reply","status":"ok","matches":[STR,..],
 *   "cursor_start":INT,"cursor_end":INT,"metadata":{}}.
 *   inspect reply:  {"msg":"reply","status":"ok","found":BOOL,
 *   "data":{MIME:..},"metadata":{}}.
 *   All cursor offsets on this wire (requests and replies) are BYTE
 *   offsets into "code"; the kernel converts from/to the Unicode code
 *   point offsets of the Jupyter protocol (5.2+).
 * - is_complete reply: "status" carries the answer itself:
 *   {"msg":"reply","status":"complete"|"incomplete"|"invalid"|"unknown",
 *    "indent":STR}. Status "error" (or anything else) -> kernel answers
 *   "unknown". For complete/inspect an error reply -> empty matches /
 *   found=false.
 * - stdin: the kernel writes to fd 0 only the answer to an input_request
 *   it forwarded (value + "\n"). When the execute request has
 *   "allow_stdin":false the executor must not wait on the pipe: it points
 *   fd 0 at /dev/null for that request (dup2, restored afterwards) so
 *   reads see EOF, and it emits no input_request (an input_request the
 *   kernel cannot forward is dropped, nothing is written).
 * - Interrupt: while a request is in flight the kernel sends exactly one
 *   SIGINT to the executor's pid (not its group) per interrupt. The
 *   executor answers the in-flight request with a reply status "error",
 *   ename "KeyboardInterrupt". If no reply comes within 2 s the kernel
 *   sends SIGKILL to the executor's process group, answers the request
 *   itself (state lost) and starts a fresh executor.
 * - Death: EOF on fd 4 or the pid exiting ends the executor; the kernel
 *   reports the signal/exit status on the in-flight execute and spawns a
 *   fresh executor.
 * - Shutdown: EOF on fd 3 means "exit now" (stop any workers first). The
 *   kernel closes fd 3, waits up to 1 s, then SIGTERM, then SIGKILL to the
 *   executor's process group. An executor whose kernel died also sees EOF.
 * - Events written while no request is in flight (e.g. a worker's
 *   display after its cell returned) are published with the last execute
 *   request as parent.
 */
#ifndef NBF_WIRE_H
#define NBF_WIRE_H

#define NBF_WIRE_FD_REQUESTS 3
#define NBF_WIRE_FD_EVENTS 4
#define NBF_WIRE_EXECUTOR_NAME "nbfork-executor"
/* Milliseconds the executor gets to answer an interrupt before it is killed. */
#define NBF_WIRE_INTERRUPT_GRACE_MS 2000
/* NBFORK_EXECUTOR (nbf_params.def) names the executor binary instead. */

#endif
