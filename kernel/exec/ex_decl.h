/*
 * ex_decl — find the declaration of a name in a C header's text, with
 * the comment above it, for inspect (ex_query.c). Lexical: the header is
 * scanned once with comments, strings and brackets tracked, so only a
 * top-level declaration counts — never a word in a comment, a parameter
 * of another function's prototype or a member of a struct.
 */
#ifndef EX_DECL_H
#define EX_DECL_H

/* The top-level declaration of `name` in `text` (a header), from the
 * comment block right above it (a block comment ending on the line
 * before, or `//` lines) to the `;` that ends it; `#define name` counts
 * too, to the end of its line. Caller frees; NULL when `name` has no
 * top-level declaration there (or memory ran out). */
char *ex_decl_find(const char *text, const char *name);

#endif
