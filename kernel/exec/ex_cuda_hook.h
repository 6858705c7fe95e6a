#ifndef EX_CUDA_HOOK_H
#define EX_CUDA_HOOK_H

/*
 * Who initialized CUDA in the executor (the kernel process), by
 * interposition: the executor defines and exports the driver's first
 * entry, cuInit (CMakeLists.txt, --export-dynamic-symbol), so a cell or
 * a library a cell calls binds to it rather than to libcuda's (the
 * executable comes first in every object's symbol lookup). The wrapper
 * calls the real cuInit (libcuda.so.1 through dlsym) and, on the first
 * success, records the call stack (backtrace + dladdr) and the cell
 * being run. Not seen: code that fetches cuInit with dlsym(handle) or
 * cuGetProcAddress (the CUDA runtime, cudart, does): then only the
 * per-cell check (ex_run.c check_cuda) names the cell.
 */

/* The cell about to run (execution count, its code; NULL code = none):
 * what a cuInit seen from now on is charged to. The code must stay
 * valid until ex_cuda_hook_describe has been called. */
void ex_cuda_hook_cell(int count, const char *code);

/* What the first successful cuInit seen here was, as text for the
 * %launch refusal: "cell [3], line 2: gpu_setup() in libgpuinit.so
 * called cuInit" (cell objects are workdir/cell_*; the line when the cell's code names the function it
 * called; the library and call from dladdr of the caller's frame).
 * NULL when none was seen. Freshly allocated on each call; caller frees. */
char *ex_cuda_hook_describe(const char *workdir);

/* 1-based line of the first call of function `name` in a cell's code
 * (the identifier followed by `(`, where only words and '*' before it on
 * its line would make it a declaration, `return` excepted), or 0. Text
 * only: a call in a comment or string counts. Exposed for its tests. */
int ex_cuda_hook_call_line(const char *code, const char *name);

#endif
