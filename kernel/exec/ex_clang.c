/*
 * ex_clang.c — see ex_clang.h.
 */
#define _GNU_SOURCE
#include "ex_clang.h"

#include <stdlib.h>
#include <string.h>

#include "nbf_param.h"
#include "nbf_util.h"

#ifndef NBFORK_HAVE_LIBCLANG

ex_clang_t *ex_clang_new(const char *incdir) {
  (void)incdir;
  return NULL;
}

void ex_clang_destroy(ex_clang_t **c_p) {
  if (c_p)
    *c_p = NULL;
}

int ex_clang_complete(ex_clang_t *c, const ex_cell_state_t *cells, const char *code, size_t start,
                      void (*fn)(const char *name, unsigned priority, void *ctx), void *ctx,
                      int *member) {
  (void)c, (void)cells, (void)code, (void)start, (void)fn, (void)ctx;
  *member = 0;
  return 0;
}

int ex_clang_inspect(ex_clang_t *c, const ex_cell_state_t *cells, const char *code, size_t s,
                     size_t e, ex_clang_decl_t *out) {
  (void)c, (void)cells, (void)code, (void)s, (void)e;
  memset(out, 0, sizeof *out);
  return 0;
}

#else

#include <clang-c/Index.h>
#include <stdio.h>

#include "nbf_buf.h"

/* Paths of the two in-memory files (never written to disk). */
#define CTX_PATH "/nbfork-clang/context.h"
#define MAIN_PATH "/nbfork-clang/cell.c"
/* Stands where the cursor is while the cell is split; blanked after. */
#define MARKER "__nbf_cursor_here__"

struct ex_clang {
  CXIndex index;
  CXTranslationUnit tu;
  char *ctx_text; /* the context header the unit was last parsed with */
  char incflag[4200];
};

ex_clang_t *ex_clang_new(const char *incdir) {
  if (!nbf_param_NBFORK_LIBCLANG())
    return NULL;
  ex_clang_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  snprintf(c->incflag, sizeof c->incflag, "-I%s", incdir);
  /* LLVM's crash recovery installs SIGSEGV/SIGBUS/... handlers of its own
   * that would stand in front of the executor's (ex_run.c); a crash in
   * libclang is then an executor crash, which the kernel already survives */
  clang_toggleCrashRecovery(0);
  c->index = clang_createIndex(0, 0);
  if (c->index)
    return c;
  free(c);
  return NULL;
}

void ex_clang_destroy(ex_clang_t **c_p) {
  ex_clang_t *c = NBF_TAKE(c_p);
  if (!c)
    return;
  if (c->tu)
    clang_disposeTranslationUnit(c->tu);
  clang_disposeIndex(c->index);
  free(c->ctx_text);
  free(c);
}

/* The brackets still open at code[0, cut) closed, as text to append
 * (innermost first; a `{` also ends the statement in it). NULL when
 * the cut falls in a comment, a string or a character literal. */
static char *closers(const char *code, size_t cut) {
  char stack[256];
  size_t n = 0;
  for (size_t i = 0; i < cut; i++) {
    char ch = code[i];
    if (ch == '/' && i + 1 < cut && code[i + 1] == '*') {
      const char *e = strstr(code + i + 2, "*/");
      if (!e || (size_t)(e - code) + 2 > cut)
        return NULL;
      i = (size_t)(e - code) + 1;
    } else if (ch == '/' && i + 1 < cut && code[i + 1] == '/') {
      while (i < cut && code[i] != '\n')
        i++;
      if (i == cut)
        return NULL;
    } else if (ch == '"' || ch == '\'') {
      for (i++; i < cut && code[i] != ch && code[i] != '\n'; i++)
        i += code[i] == '\\';
      if (i >= cut)
        return NULL;
    } else if ((ch == '(' || ch == '[' || ch == '{') && n < sizeof stack) {
      stack[n++] = ch;
    } else if ((ch == ')' || ch == ']' || ch == '}') && n > 0) {
      n--;
    }
  }
  nbf_buf_t b = {0};
  int bad = nbf_buf_puts(&b, " ");
  while (n > 0) {
    char o = stack[--n];
    bad |= nbf_buf_puts(&b, o == '(' ? ")" : o == '[' ? "]" : ";}");
  }
  bad |= nbf_buf_puts(&b, ";\n");
  if (bad) {
    nbf_buf_free(&b);
    return NULL;
  }
  return nbf_buf_take(&b);
}

/* 1-based line and byte column of offset `off` in `text`. */
static void line_col(const char *text, size_t off, unsigned *line, unsigned *col) {
  *line = 1;
  size_t ls = 0;
  for (size_t i = 0; i < off; i++)
    if (text[i] == '\n') {
      (*line)++;
      ls = i + 1;
    }
  *col = (unsigned)(off - ls + 1);
}

/* The two in-memory files clang compiles for one query. */
typedef struct {
  nbf_buf_t hdr, main;           /* the context header, the main file     */
  size_t cursor;                 /* byte offset of the cut in main        */
  unsigned line, col;            /* its 1-based line and byte column      */
  struct CXUnsavedFile files[2]; /* hdr and main, as clang takes them     */
} unit_t;

static void unit_free(unit_t *u) {
  nbf_buf_free(&u->hdr);
  nbf_buf_free(&u->main);
}

/* The context header and the main file for `code` cut at `cut` into *u
 * (zeroed first; unit_free after, whatever the result). 0, or -1 when
 * the cell cannot be split there. */
static int build_unit(const ex_cell_state_t *cells, const char *code, size_t cut, unit_t *u) {
  memset(u, 0, sizeof *u);
  nbf_buf_t *ctx = &u->hdr, *main = &u->main;
  char *tail = closers(code, cut);
  if (!tail)
    return -1;
  nbf_buf_t text = {0};
  int bad =
      nbf_buf_append(&text, code, cut) || nbf_buf_puts(&text, MARKER) || nbf_buf_puts(&text, tail);
  free(tail);
  ex_split_t sp;
  char err[256];
  if (bad ||
      ex_split(text.data, 0, ex_cell_is_type, (void *)cells, &sp, err, sizeof err) != EX_OK) {
    nbf_buf_free(&text);
    return -1;
  }
  nbf_buf_free(&text);
  bad = nbf_buf_puts(ctx, "#include <nbfork.h>\n") || ex_cell_state_prelude(cells, &sp, ctx) ||
        nbf_buf_puts(main, "#include \"" CTX_PATH "\"\n");
  /* declarations at file scope, in order; statements in one function */
  for (size_t i = 0; i < sp.count; i++) {
    ex_chunk_kind_t k = sp.chunks[i].kind;
    if (k != EX_CHUNK_STATEMENT && k != EX_CHUNK_EXPRESSION)
      bad |= nbf_buf_printf(main, "%s\n", sp.chunks[i].text);
  }
  bad |= nbf_buf_puts(main, "void __nbf_cell(void) {\n");
  for (size_t i = 0; i < sp.count; i++) {
    ex_chunk_kind_t k = sp.chunks[i].kind;
    if (k == EX_CHUNK_STATEMENT || k == EX_CHUNK_EXPRESSION)
      bad |= nbf_buf_printf(main, "%s%s\n", sp.chunks[i].text, k == EX_CHUNK_EXPRESSION ? ";" : "");
  }
  bad |= nbf_buf_puts(main, "}\n");
  ex_split_free(&sp);
  char *m = bad ? NULL : strstr(main->data, MARKER);
  if (!m)
    return -1;
  memset(m, ' ', strlen(MARKER));
  u->cursor = (size_t)(m - main->data);
  line_col(main->data, u->cursor, &u->line, &u->col);
  u->files[0] = (struct CXUnsavedFile){CTX_PATH, ctx->data, ctx->len};
  u->files[1] = (struct CXUnsavedFile){MAIN_PATH, main->data, main->len};
  return 0;
}

/* Parse (or re-parse) the unit with these files. The first parse builds
 * the preamble (the context header); later ones reuse it while the
 * context is unchanged. 0, or -1 when clang failed. */
static int parse(ex_clang_t *c, struct CXUnsavedFile *files) {
  if (c->tu && clang_reparseTranslationUnit(c->tu, 2, files, clang_defaultReparseOptions(c->tu))) {
    clang_disposeTranslationUnit(c->tu); /* a failed reparse leaves it unusable */
    c->tu = NULL;
  }
  if (!c->tu) {
    const char *args[] = {"-xc", "-std=gnu11", c->incflag, "-Wno-everything"};
    unsigned flags = CXTranslationUnit_PrecompiledPreamble |
                     CXTranslationUnit_CreatePreambleOnFirstParse |
                     CXTranslationUnit_CacheCompletionResults | CXTranslationUnit_KeepGoing;
    if (clang_parseTranslationUnit2(c->index, MAIN_PATH, args, 4, files, 2, flags, &c->tu) !=
        CXError_Success)
      c->tu = NULL;
  }
  if (!c->tu)
    return -1;
  free(c->ctx_text);
  c->ctx_text = strndup(files[0].Contents, files[0].Length);
  return 0;
}

/* Does the cut at code[start] follow `.` or `->`? */
static int after_member_op(const char *code, size_t start) {
  while (start > 0 && (code[start - 1] == ' ' || code[start - 1] == '\t'))
    start--;
  return (start >= 1 && code[start - 1] == '.' && !(start >= 2 && code[start - 2] == '.')) ||
         (start >= 2 && code[start - 1] == '>' && code[start - 2] == '-');
}

int ex_clang_complete(ex_clang_t *c, const ex_cell_state_t *cells, const char *code, size_t start,
                      void (*fn)(const char *name, unsigned priority, void *ctx), void *ctx,
                      int *member) {
  *member = after_member_op(code, start);
  if (!c)
    return 0;
  unit_t u;
  int ok = 0;
  if (build_unit(cells, code, start, &u) == 0) {
    /* a changed context needs a new preamble, which only a parse builds */
    if (c->tu && c->ctx_text && !strcmp(c->ctx_text, u.hdr.data)) {
      ok = 1;
    } else {
      ok = parse(c, u.files) == 0;
    }
    CXCodeCompleteResults *r = ok ? clang_codeCompleteAt(c->tu, MAIN_PATH, u.line, u.col, u.files,
                                                         2, clang_defaultCodeCompleteOptions())
                                  : NULL;
    ok = r != NULL;
    for (unsigned i = 0; r && i < r->NumResults; i++) {
      CXCompletionString cs = r->Results[i].CompletionString;
      if (clang_getCompletionAvailability(cs) == CXAvailability_NotAvailable)
        continue;
      for (unsigned k = 0; k < clang_getNumCompletionChunks(cs); k++) {
        if (clang_getCompletionChunkKind(cs, k) != CXCompletionChunk_TypedText)
          continue;
        CXString t = clang_getCompletionChunkText(cs, k);
        const char *name = clang_getCString(t);
        if (name && *name)
          fn(name, clang_getCompletionPriority(cs), ctx);
        clang_disposeString(t);
      }
    }
    if (r)
      clang_disposeCodeCompleteResults(r);
  }
  unit_free(&u);
  return ok;
}

/* The text of cursor d's extent in the main file `main` (caller frees). */
static char *extent_text(CXCursor d, const char *main, size_t len) {
  CXSourceRange r = clang_getCursorExtent(d);
  unsigned b, e;
  clang_getFileLocation(clang_getRangeStart(r), NULL, NULL, NULL, &b);
  clang_getFileLocation(clang_getRangeEnd(r), NULL, NULL, NULL, &e);
  if (e < b || e > len)
    return NULL;
  return strndup(main + b, e - b);
}

/* Fill out from the declaration d that the cell's identifier refers to. */
static int describe(CXCursor d, const char *main, size_t len, ex_clang_decl_t *out) {
  CXFile file;
  clang_getExpansionLocation(clang_getCursorLocation(d), &file, NULL, NULL, NULL);
  if (!file)
    return 0; /* an implicit declaration (a builtin such as printf) */
  CXString fn = clang_getFileName(file), sp = clang_getCursorSpelling(d);
  snprintf(out->name, sizeof out->name, "%s", clang_getCString(sp));
  snprintf(out->path, sizeof out->path, "%s", clang_getCString(fn));
  clang_disposeString(fn);
  clang_disposeString(sp);
  CXCursor parent = clang_getCursorSemanticParent(d);
  enum CXCursorKind pk = clang_getCursorKind(parent);
  if (pk == CXCursor_StructDecl || pk == CXCursor_UnionDecl) {
    CXString ps = clang_getTypeSpelling(clang_getCursorType(parent));
    snprintf(out->parent, sizeof out->parent, "%s", clang_getCString(ps));
    clang_disposeString(ps);
  }
  if (!strcmp(out->path, MAIN_PATH)) {
    out->origin = EX_CLANG_CELL;
    out->text = extent_text(d, main, len);
  } else if (!strcmp(out->path, CTX_PATH)) {
    out->origin = EX_CLANG_USER; /* a member's: its type's cell */
  } else {
    out->origin = EX_CLANG_HEADER;
  }
  return out->name[0] != 0;
}

int ex_clang_inspect(ex_clang_t *c, const ex_cell_state_t *cells, const char *code, size_t s,
                     size_t e, ex_clang_decl_t *out) {
  memset(out, 0, sizeof *out);
  if (!c || e <= s)
    return 0;
  unit_t u;
  int found = 0;
  if (build_unit(cells, code, e, &u) == 0 && parse(c, u.files) == 0) {
    CXFile f = clang_getFile(c->tu, MAIN_PATH);
    /* on the identifier's last character, just before the cut */
    CXCursor at = clang_getCursor(c->tu, clang_getLocation(c->tu, f, u.line, u.col - 1));
    CXCursor d = clang_getCursorReferenced(at);
    /* C's implicit declaration of an undeclared function (`printf`
     * without <stdio.h>) stands where it is used: no declaration */
    int implicit = (clang_isExpression(clang_getCursorKind(at)) ||
                    clang_isReference(clang_getCursorKind(at))) &&
                   clang_equalLocations(clang_getCursorLocation(d), clang_getCursorLocation(at));
    if (!clang_Cursor_isNull(d) && !clang_isInvalid(clang_getCursorKind(d)) && !implicit)
      found = describe(d, u.main.data, u.main.len, out);
  }
  unit_free(&u);
  return found;
}

#endif
