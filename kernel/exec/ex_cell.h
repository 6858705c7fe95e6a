/*
 * ex_cell — turn a cell into a translation unit, and remember what it
 * defined so later cells see it.
 *
 * How redefinition works (see DESIGN.md "Cells"): C forbids two
 * definitions of one name, so each cell's functions and globals are
 * emitted under a versioned assembler name (`sq` -> `sq__c<tag>`, with
 * GCC's `__asm__("...")` label, so the C name stays `sq`). The prelude of
 * later cells declares each name with the label of its newest version.
 * Code compiled earlier keeps calling what it was compiled against.
 * Preprocessor lines and type declarations are replayed in the prelude
 * (a re-defined typedef/struct/macro replaces its earlier text).
 *
 * The tag is a hash of the generated unit (without its `#line` markers,
 * which name the cell by execution count) and of the size and time of the
 * files it includes with quotes, so re-running an unchanged cell produces
 * the same shared object path and skips the compiler (compile cache). Its globals are then reset
 * when it runs again: no initializer
 * -> zero, a static initializer -> that value again (a re-run of a cell
 * that defines `int a[3] = {1, 2, 3};` gives back {1, 2, 3}, as a
 * recompiled cell would).
 *
 * The unit is valid C (gnu11) and, for %%cuda cells compiled by nvcc, C++:
 * the run and launch entry points are extern "C" there, and the value of
 * a last expression is shown through overloads instead of _Generic.
 *
 * Top-level variable initializers that are not constant-looking (not
 * braced, not arrays, not const objects) run as assignments in order
 * with the statements, so `float *x = malloc(..);` works at file scope.
 */
#ifndef EX_CELL_H
#define EX_CELL_H

#include "ex_launch_thunk.h"
#include "ex_result.h"
#include "ex_split.h"

typedef struct ex_cell_state ex_cell_state_t;

ex_cell_state_t *ex_cell_state_new(void);
void ex_cell_state_destroy(ex_cell_state_t **st_p);

/* ex_is_type_fn over the typedef names earlier cells defined. */
int ex_cell_is_type(const char *name, void *st);

/* Append to `out` the prelude of a cell split as `sp`: what earlier cells
 * defined, minus what the cell redefines. 0, or -1 when memory ran out
 * (ex_cell_generate's part; in ex_cell_state.c with the registry). */
struct nbf_buf;
int ex_cell_state_prelude(const ex_cell_state_t *st, const ex_split_t *sp, struct nbf_buf *out);

/* The prelude of a unit for TinyCC: types, macros and preprocessor lines
 * as ex_cell_state_prelude gives them, but only the functions and
 * variables `code` names (directly, through earlier macros, or through
 * the declarations kept), so that a cell's unit does not grow with the
 * notebook (issue 20, item 7: a new cell after 20,000 distinct ones);
 * found by looking the words up by key, so neither does the work of
 * making it (O(words of the cell and of what it keeps) lookups, plus the
 * types, macros and preprocessor lines every prelude keeps). A
 * name it misses makes TinyCC fail, and the cell goes to the system
 * compiler with the whole prelude. 0, or -1 when memory ran out. */
int ex_cell_state_prelude_for(const ex_cell_state_t *st, const ex_split_t *sp, const char *code,
                              struct nbf_buf *out);

/* Append to `out` what a unit TinyCC compiles reaches earlier cells'
 * globals through (issue 20, class a): for each variable of the prelude
 * that `code` (the cell split as `sp`) names, directly or through earlier
 * macros, and does not redefine,
 *   static __typeof__(X) *const __nbf_p_X = &X;
 *   #define X (*(0, __nbf_p_X))
 * so every access to X (read, write, `&X`, `sizeof X`, `X[i]`) is made
 * through a pointer the dynamic linker fills (an R_X86_64_64 data
 * relocation), never a PC-relative operand naming X: TinyCC 0.9.27 points
 * an SSE/x87 operand that names an external object at a PLT stub. The
 * comma makes every use of X that is not an expression a syntax error (a
 * block-scope `int X;`, a member `.X`, a parameter or label X), never a
 * declaration of another name: such a cell is then generated again for
 * the system compiler, without these lines (ex_run.c). Goes after the
 * prelude, before the cell's own code. 0, or -1 out of memory. */
int ex_cell_state_indirect(const ex_cell_state_t *st, const ex_split_t *sp, const char *code,
                           struct nbf_buf *out);

/* Refuse a cell that redefines a struct, union, enum, typedef or macro
 * with another text while what an earlier cell compiled (not redefined by
 * this cell too) uses it: a global or function that names it, directly or
 * through another type or macro, or names an enumerator whose value the
 * new text changes; or a type whose array sizes, bit-field widths or
 * enumerator values name a changed macro or enumerator. Their compiled
 * code would read memory with the old layout or compute with the old
 * values (DESIGN.md "Cells"). EX_OK; EX_ERR_REDEFINED with err naming
 * the type or macro, the cell that defined it and each user with its
 * kind and cell; EX_ERR_NOMEM. The check is lexical: a user is code whose
 * text names the type, macro or enumerator. */
ex_result_t ex_cell_state_check_types(const ex_cell_state_t *st, const ex_split_t *sp, char *err,
                                      size_t errlen);

/* Call fn(tag, ctx) for the tag of each object a definition of the
 * registry names (its versioned symbol `sq__c<tag>`; a tag may come more
 * than once). For ex_objects.h. */
void ex_cell_state_each_tag(const ex_cell_state_t *st, void (*fn)(const char *tag, void *ctx),
                            void *ctx);

/* The first place where `word` stands as a whole identifier in `text`
 * (not inside a longer name), or NULL. */
const char *ex_cell_find_word(const char *text, const char *word);

/* The next identifier-like word (letters, digits, '_') at or after *p,
 * its length in *n (0 at the end of the text); *p moves past it. */
const char *ex_cell_next_word(const char **p, size_t *n);

/* The identifier that starts at *p after white space, copied into
 * `name` (NUL-terminated; `size` bytes): its length, or 0 when none
 * starts there or it does not fit. *p moves past it and the white space
 * after, so that *p is what follows the name. */
size_t ex_cell_take_word(const char **p, char *name, size_t size);

/* Whether the n bytes at w are one of the words of `list`, a string of
 * words each preceded by a space (" int long "). */
int ex_cell_word_in(const char *list, const char *w, size_t n);

typedef struct {
  char *source;           /* generated C translation unit                     */
  char tag[17];           /* hex hash of the unit: file names and versions     */
  char run_symbol[64];    /* `void RUN(void)` runs the statements      */
  char launch_symbol[64]; /* `int LAUNCH(void)` calls the launch call  */
  int has_launch;
  char timeit_symbol[64]; /* `void TIMEIT(long n)` runs the %timeit statement n times */
  int has_timeit;
  char label[32]; /* `cell[3]`: names the cell in diagnostics  */
  int cxx;        /* C++ (%%cuda) unit                          */
  int straight;   /* no function definition and no loop (for,
                     while, do, goto) anywhere: nothing here runs
                     long enough for optimization to pay for its
                     compile time                                */
  int tinycc;     /* generated for TinyCC (straight C, asked for):
                     earlier globals reached through pointers
                     (ex_cell_state_indirect), "tinycc" in the
                     tag's salt, so no object one compiler built
                     is reused where the other is asked for      */
  ex_split_t split;
} ex_cell_unit_t;

/* Generate the unit for `code` (no magic lines). `cxx`: the cell is C++
 * (a %%cuda cell, compiled by nvcc): its C++/CUDA-only declarations
 * (EX_CHUNK_VERBATIM) stay local to it, and the #include lines it leaves
 * for later cells are seen by later C++ cells only. `label` names the cell
 * in diagnostics (`cell[3]`). `launch_call`, when not NULL, is a C call
 * expression compiled into a thunk returning int (0 for void calls).
 * `timeit_stmt`, when not NULL, is a statement (or expression) run in a
 * loop by `void TIMEIT(long n)` (ex_timeit.h).
 * `salt` (flags, compiler) enters the hash. `tinycc`: the unit is for
 * TinyCC when it is straight C (ex_cell_unit_t.tinycc). Caller frees `out`
 * (ex_cell_unit_free) after EX_OK. Results: EX_OK; EX_ERR_SPLIT, the cell
 * could not be split (why, in err); EX_ERR_NOMEM ("out of memory" in
 * err); EX_ERR_REDEFINED, see ex_cell_state_check_types. `out` holds
 * nothing to free after a failure. */
ex_result_t ex_cell_generate(ex_cell_state_t *st, const char *code, int cxx, const char *label,
                             const char *launch_call, const char *timeit_stmt, const char *salt,
                             ex_cell_unit_t *out, char *err, size_t errlen);

/* ex_cell_generate for TinyCC (`tinycc` 1) or the system compiler (0). */
ex_result_t ex_cell_generate_for(ex_cell_state_t *st, const char *code, int cxx, const char *label,
                                 const char *launch_call, const char *timeit_stmt, const char *salt,
                                 int tinycc, ex_cell_unit_t *out, char *err, size_t errlen);

/* ex_cell_generate with the %launch call's place in the cell (launch
 * may be NULL: no %launch), so its diagnostics name the cell's line.
 * Also EX_ERR_COMPILE: the launched function's return type is refused
 * (ex_launch_thunk.h; why, in err). */
ex_result_t ex_cell_generate_at(ex_cell_state_t *st, const char *code, int cxx, const char *label,
                                const ex_launch_site_t *launch, const char *timeit_stmt,
                                const char *salt, int tinycc, ex_cell_unit_t *out, char *err,
                                size_t errlen);

/* Record the unit's definitions after it compiled and loaded. EX_OK, or
 * EX_ERR_NOMEM (some definitions may then be missing for later cells). */
ex_result_t ex_cell_commit(ex_cell_state_t *st, const ex_cell_unit_t *u);

void ex_cell_unit_free(ex_cell_unit_t *u);

/* What earlier cells defined under one name (borrowed from the state). */
typedef struct {
  const char *name;   /* `sq`, `point_t`, `struct S`, `N`                   */
  const char *kind;   /* "function", "variable", "type" or "macro"           */
  const char *decl;   /* declaration as the user wrote it (`int sq(int x)`,
                         `float *w`, the typedef or #define text)            */
  const char *doc;    /* the comment above the definition, or NULL           */
  const char *label;  /* the cell that defined it (`cell[3]`)                */
  const char *source; /* the whole definition as written in its cell (a
                         function with its body, `int x = 5;`)              */
} ex_cell_name_t;

/* Each name currently defined, in order of first definition (for %who,
 * complete and inspect). */
void ex_cell_each_name(const ex_cell_state_t *st, void (*fn)(const ex_cell_name_t *n, void *ctx),
                       void *ctx);

/* The newest definition of `name`, or 0 when there is none. */
int ex_cell_find(const ex_cell_state_t *st, const char *name, ex_cell_name_t *out);

/* The variable `name` (its newest definition) lives at addr, size bytes,
 * in memory TinyCC relocated (ex_memcells.h): later units reach it by
 * that address. 0, or -1 when the registry has no such variable. */
int ex_cell_state_place(ex_cell_state_t *st, const char *name, void *addr, size_t size);

/* Whether an earlier cell ever defined an enum type (else no word can be
 * an enumerator of one). */
int ex_cell_state_has_enums(const ex_cell_state_t *st);

/* Where the variable `name` lives when a cell compiled into memory
 * defined it: 1 with *addr and *size, else 0 (then its symbol names it). */
int ex_cell_find_place(const ex_cell_state_t *st, const char *name, void **addr, size_t *size);

/* The assembler name of the newest definition of the function or global
 * `name` (`w__c<tag>`) into sym[n]: 1, or 0 when the registry has none
 * (a type, a macro, an unknown name). For %ranks pull/push (ex_ranks.c). */
int ex_cell_find_symbol(const ex_cell_state_t *st, const char *name, char *sym, size_t n);

#endif
