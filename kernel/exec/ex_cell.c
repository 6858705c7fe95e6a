/*
 * ex_cell.c — code generation for cells and the registry of what earlier
 * cells defined. See ex_cell.h for the scheme.
 */
#include "ex_cell.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_buf.h"

/* Stands for the unit's tag until the unit's hash is known. */
#define TAG_PLACEHOLDER "@NBFTAG@"

typedef struct {
  char *key;  /* "sym:NAME", "type:NAME", "macro:NAME", "proto:NAME", "pp:TEXT" */
  char *text; /* what the prelude of later cells contains for it */
} entry_t;

struct ex_cell_state {
  entry_t *entries; /* prelude, in order of first definition */
  size_t n, cap;
  char **typedefs; /* names that are types, for the splitter */
  size_t ntypedefs;
};

ex_cell_state_t *ex_cell_state_new(void) { return calloc(1, sizeof(ex_cell_state_t)); }

void ex_cell_state_destroy(ex_cell_state_t **st_p) {
  if (!st_p || !*st_p)
    return;
  ex_cell_state_t *st = *st_p;
  for (size_t i = 0; i < st->n; i++) {
    free(st->entries[i].key);
    free(st->entries[i].text);
  }
  free(st->entries);
  for (size_t i = 0; i < st->ntypedefs; i++)
    free(st->typedefs[i]);
  free(st->typedefs);
  free(st);
  *st_p = NULL;
}

int ex_cell_is_type(const char *name, void *ctx) {
  const ex_cell_state_t *st = ctx;
  for (size_t i = 0; i < st->ntypedefs; i++)
    if (strcmp(st->typedefs[i], name) == 0)
      return 1;
  return 0;
}

static uint64_t fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

static char *concat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *r = malloc(la + lb + 1);
  if (r) {
    memcpy(r, a, la);
    memcpy(r + la, b, lb + 1);
  }
  return r;
}

/* Key under which a chunk's definition is registered (caller frees), or
 * NULL when the chunk defines nothing by name. Variables have one key per
 * declarator and are handled by the caller. */
static char *chunk_key(const ex_chunk_t *k) {
  switch (k->kind) {
  case EX_CHUNK_PREPROC:
    return k->name ? concat("macro:", k->name) : concat("pp:", k->text);
  case EX_CHUNK_TYPE:
    return k->name ? concat("type:", k->name) : concat("pp:", k->text);
  case EX_CHUNK_FUNCTION:
    return concat("sym:", k->name);
  case EX_CHUNK_PROTOTYPE:
    return concat("proto:", k->name);
  default:
    return NULL;
  }
}

/* Does this cell define `key` (so earlier prelude text for it is left
 * out)? "sym:X" and "proto:X" shadow each other. */
static int cell_defines(const ex_split_t *sp, const char *key) {
  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    if (k->kind == EX_CHUNK_VARIABLE && !k->is_extern) {
      for (size_t d = 0; d < k->ndecls; d++)
        if ((strncmp(key, "sym:", 4) == 0 || strncmp(key, "proto:", 6) == 0) &&
            strcmp(strchr(key, ':') + 1, k->decls[d].name) == 0)
          return 1;
      continue;
    }
    char *ck = chunk_key(k);
    if (!ck)
      continue;
    int same = strcmp(ck, key) == 0;
    if (!same && (k->kind == EX_CHUNK_FUNCTION || k->kind == EX_CHUNK_PROTOTYPE) &&
        (strncmp(key, "sym:", 4) == 0 || strncmp(key, "proto:", 6) == 0))
      same = strcmp(strchr(key, ':') + 1, k->name) == 0;
    free(ck);
    if (same)
      return 1;
  }
  return 0;
}

/* Is function `name` defined (with a body) in this cell? */
static int cell_defines_function(const ex_split_t *sp, const char *name) {
  for (size_t i = 0; i < sp->count; i++)
    if (sp->chunks[i].kind == EX_CHUNK_FUNCTION && strcmp(sp->chunks[i].name, name) == 0)
      return 1;
  return 0;
}

/* A declarator whose initializer must stay a static initializer: braced
 * lists, arrays, and const objects (assignment would be illegal). */
static int static_init(const ex_chunk_t *k, const ex_declarator_t *d) {
  if (d->init_braced || strchr(d->declarator, '['))
    return 1;
  if (strchr(d->declarator, '*'))
    return 0;
  const char *p = k->specifiers;
  while ((p = strstr(p, "const")) != NULL) {
    int start = p == k->specifiers || p[-1] == ' ';
    int end = p[5] == 0 || p[5] == ' ';
    if (start && end)
      return 1;
    p += 5;
  }
  return 0;
}

/* Helpers that print a cell's last expression as Jupyter execute_result
 * (text/plain). Doubles print in the shortest form that reads back equal. */
static const char show_helpers[] =
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "static void __nbf_show_ll(long long v){char b[32];snprintf(b,sizeof b,\"%lld\",v);"
    "nbf__execute_result(b);}\n"
    "static void __nbf_show_ull(unsigned long long v){char b[32];snprintf(b,sizeof b,\"%llu\",v);"
    "nbf__execute_result(b);}\n"
    "static void __nbf_show_d(double v){char b[40];for(int p=1;p<=17;p++){snprintf(b,sizeof b,"
    "\"%.*g\",p,v);if(strtod(b,0)==v)break;}nbf__execute_result(b);}\n"
    "static void __nbf_show_f(float v){char b[40];for(int p=1;p<=9;p++){snprintf(b,sizeof b,"
    "\"%.*g\",p,(double)v);if(strtof(b,0)==v)break;}nbf__execute_result(b);}\n"
    "static void __nbf_show_ld(long double v){char b[64];snprintf(b,sizeof b,\"%Lg\",v);"
    "nbf__execute_result(b);}\n"
    "static void __nbf_show_bool(_Bool v){nbf__execute_result(v?\"true\":\"false\");}\n"
    "static void __nbf_show_char(char v){char b[32];snprintf(b,sizeof b,\"'%c' (%d)\",v,v);"
    "nbf__execute_result(b);}\n"
    "static void __nbf_show_str(const char *s){if(!s){nbf__execute_result(\"NULL\");return;}"
    "size_t n=0;while(s[n])n++;char *b=malloc(n+3);if(!b)return;b[0]='\"';for(size_t i=0;i<n;i++)"
    "b[i+1]=s[i];b[n+1]='\"';b[n+2]=0;nbf__execute_result(b);free(b);}\n"
    "static void __nbf_show_ptr(const void *p){char b[32];if(p)snprintf(b,sizeof b,\"%p\",p);"
    "else snprintf(b,sizeof b,\"NULL\");nbf__execute_result(b);}\n"
    "#define __nbf_show(x) _Generic((x), _Bool: __nbf_show_bool, char: __nbf_show_char, "
    "signed char: __nbf_show_ll, unsigned char: __nbf_show_ull, short: __nbf_show_ll, "
    "unsigned short: __nbf_show_ull, int: __nbf_show_ll, unsigned: __nbf_show_ull, "
    "long: __nbf_show_ll, unsigned long: __nbf_show_ull, long long: __nbf_show_ll, "
    "unsigned long long: __nbf_show_ull, float: __nbf_show_f, double: __nbf_show_d, "
    "long double: __nbf_show_ld, char *: __nbf_show_str, const char *: __nbf_show_str, "
    "default: __nbf_show_ptr)(x)\n";

/* Replace every TAG_PLACEHOLDER in src with tag (caller frees). */
static char *fill_tag(const char *src, const char *tag) {
  ex_buf_t b = {0};
  const char *p = src, *q;
  size_t pl = strlen(TAG_PLACEHOLDER);
  while ((q = strstr(p, TAG_PLACEHOLDER)) != NULL) {
    if (ex_buf_append(&b, p, (size_t)(q - p)) || ex_buf_puts(&b, tag))
      goto oom;
    p = q + pl;
  }
  if (ex_buf_puts(&b, p))
    goto oom;
  return ex_buf_take(&b);
oom:
  ex_buf_free(&b);
  return NULL;
}

int ex_cell_generate(ex_cell_state_t *st, const char *code, const char *label,
                     const char *launch_call, const char *salt, ex_cell_unit_t *out, char *err,
                     size_t errlen) {
  memset(out, 0, sizeof *out);
  if (ex_split(code, ex_cell_is_type, st, &out->split, err, errlen))
    return -1;
  const ex_split_t *sp = &out->split;
  ex_buf_t src = {0}, run = {0};
  int ok = 1, has_expr = 0;

  ok &= !ex_buf_puts(&src, "/* generated by nbfork from a notebook cell */\n"
                           "#include <nbfork.h>\n");
  /* prelude: what earlier cells defined, minus what this cell redefines */
  for (size_t i = 0; i < st->n; i++)
    if (!cell_defines(sp, st->entries[i].key))
      ok &= !ex_buf_puts(&src, st->entries[i].text);

  for (size_t i = 0; i < sp->count; i++) {
    const ex_chunk_t *k = &sp->chunks[i];
    switch (k->kind) {
    case EX_CHUNK_PREPROC:
    case EX_CHUNK_TYPE:
      ok &= !ex_buf_printf(&src, "#line %d \"%s\"\n%s\n", k->line, label, k->text);
      break;
    case EX_CHUNK_PROTOTYPE: {
      if (cell_defines_function(sp, k->name)) {
        size_t l = strlen(k->text);
        while (l && (k->text[l - 1] == ';' || k->text[l - 1] == ' '))
          l--;
        ok &= !ex_buf_printf(&src, "#line %d \"%s\"\n%.*s __asm__(\"%s__c" TAG_PLACEHOLDER "\");\n",
                             k->line, label, (int)l, k->text, k->name);
      } else {
        ok &= !ex_buf_printf(&src, "#line %d \"%s\"\n%s\n", k->line, label, k->text);
      }
      break;
    }
    case EX_CHUNK_FUNCTION:
      ok &= !ex_buf_printf(&src,
                           "#line %d \"%s\"\n%s __asm__(\"%s__c" TAG_PLACEHOLDER "\");\n"
                           "#line %d \"%s\"\n%s\n",
                           k->line, label, k->signature, k->name, k->line, label, k->text);
      break;
    case EX_CHUNK_VARIABLE:
      if (k->is_extern) {
        ok &= !ex_buf_printf(&src, "#line %d \"%s\"\n%s\n", k->line, label, k->text);
        break;
      }
      for (size_t d = 0; d < k->ndecls; d++) {
        const ex_declarator_t *dd = &k->decls[d];
        int si = dd->init && static_init(k, dd);
        ok &= !ex_buf_printf(&src, "#line %d \"%s\"\n%s %s __asm__(\"%s__c" TAG_PLACEHOLDER "\")%s%s;\n",
                             k->line, label, k->specifiers, dd->declarator, dd->name,
                             si ? " = " : "", si ? dd->init : "");
        if (dd->init && !si)
          /* through a local, so braced macros (ACC_CONFIG_INIT) and
           * struct-valued calls both work as initializers */
          ok &= !ex_buf_printf(&run,
                               "#line %d \"%s\"\n{ __typeof__(%s) __nbf_init = %s; %s = __nbf_init; }\n",
                               k->line, label, dd->name, dd->init, dd->name);
      }
      break;
    case EX_CHUNK_STATEMENT:
      ok &= !ex_buf_printf(&run, "#line %d \"%s\"\n%s\n", k->line, label, k->text);
      break;
    case EX_CHUNK_EXPRESSION:
      has_expr = 1;
      ok &= !ex_buf_printf(&run, "#line %d \"%s\"\n__nbf_show((%s));\n", k->line, label, k->text);
      break;
    }
  }
  if (has_expr)
    ok &= !ex_buf_printf(&src, "#line 1 \"<nbfork>\"\n%s", show_helpers);
  ok &= !ex_buf_printf(&src, "#line 1 \"<nbfork>\"\nvoid __nbf_run_" TAG_PLACEHOLDER "(void) {\n%s}\n",
                       run.data ? run.data : "");
  if (launch_call) {
    /* void calls return 0; others are converted to int (a non-zero return
     * is that worker's failure). */
    ok &= !ex_buf_printf(
        &src,
        "#line 1 \"%%launch\"\nint __nbf_launch_" TAG_PLACEHOLDER "(void) {\n"
        "  return __builtin_choose_expr(__builtin_types_compatible_p(__typeof__(%s), void),\n"
        "    ((%s), 0), (%s));\n}\n",
        launch_call, launch_call, launch_call);
  }
  ex_buf_free(&run);
  if (!ok) {
    ex_buf_free(&src);
    snprintf(err, errlen, "out of memory");
    ex_split_free(&out->split);
    return -1;
  }
  uint64_t h = fnv1a(src.data, fnv1a(salt ? salt : "", 14695981039346656037ULL));
  snprintf(out->tag, sizeof out->tag, "%016llx", (unsigned long long)h);
  out->source = fill_tag(src.data, out->tag);
  ex_buf_free(&src);
  snprintf(out->run_symbol, sizeof out->run_symbol, "__nbf_run_%s", out->tag);
  snprintf(out->launch_symbol, sizeof out->launch_symbol, "__nbf_launch_%s", out->tag);
  out->has_launch = launch_call != NULL;
  snprintf(out->label, sizeof out->label, "%s", label);
  if (!out->source) {
    snprintf(err, errlen, "out of memory");
    ex_split_free(&out->split);
    return -1;
  }
  return 0;
}

/* Set `key` to `text`: replace in place (types, macros: later entries may
 * use them), or move to the end ("sym:": its new declaration may use types
 * defined after the old one). Takes ownership of key and text. */
static int put_entry(ex_cell_state_t *st, char *key, char *text) {
  if (!key || !text)
    goto oom;
  for (size_t i = 0; i < st->n; i++) {
    if (strcmp(st->entries[i].key, key) != 0)
      continue;
    if (strncmp(key, "sym:", 4) != 0) {
      free(st->entries[i].text);
      st->entries[i].text = text;
      free(key);
      return 0;
    }
    free(st->entries[i].key);
    free(st->entries[i].text);
    memmove(&st->entries[i], &st->entries[i + 1], (st->n - i - 1) * sizeof(entry_t));
    st->n--;
    break;
  }
  if (st->n == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 32;
    entry_t *v = realloc(st->entries, cap * sizeof *v);
    if (!v)
      goto oom;
    st->entries = v;
    st->cap = cap;
  }
  st->entries[st->n++] = (entry_t){key, text};
  return 0;
oom:
  free(key);
  free(text);
  return -1;
}

/* Remove `key` if present (a prototype superseded by a definition). */
static void drop_entry(ex_cell_state_t *st, const char *key) {
  for (size_t i = 0; i < st->n; i++) {
    if (strcmp(st->entries[i].key, key) == 0) {
      free(st->entries[i].key);
      free(st->entries[i].text);
      memmove(&st->entries[i], &st->entries[i + 1], (st->n - i - 1) * sizeof(entry_t));
      st->n--;
      return;
    }
  }
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(NULL, 0, f, ap);
  va_end(ap);
  if (n < 0)
    return NULL;
  char *r = malloc((size_t)n + 1);
  if (!r)
    return NULL;
  va_start(ap, f);
  vsnprintf(r, (size_t)n + 1, f, ap);
  va_end(ap);
  return r;
}

int ex_cell_commit(ex_cell_state_t *st, const ex_cell_unit_t *u) {
  int rc = 0;
  for (size_t i = 0; i < u->split.count; i++) {
    const ex_chunk_t *k = &u->split.chunks[i];
    switch (k->kind) {
    case EX_CHUNK_PREPROC:
    case EX_CHUNK_TYPE:
      rc |= put_entry(st, chunk_key(k), fmt("#line %d \"%s\"\n%s\n", k->line, u->label, k->text));
      if (k->kind == EX_CHUNK_TYPE && k->name && !strchr(k->name, ' ') &&
          !ex_cell_is_type(k->name, st)) {
        char **v = realloc(st->typedefs, (st->ntypedefs + 1) * sizeof *v);
        if (v) {
          st->typedefs = v;
          st->typedefs[st->ntypedefs++] = strdup(k->name);
        }
      }
      break;
    case EX_CHUNK_PROTOTYPE:
      if (!cell_defines_function(&u->split, k->name))
        rc |= put_entry(st, chunk_key(k), fmt("%s\n", k->text));
      break;
    case EX_CHUNK_FUNCTION: {
      char *pk = concat("proto:", k->name);
      if (pk)
        drop_entry(st, pk);
      free(pk);
      rc |= put_entry(st, chunk_key(k),
                      fmt("%s __asm__(\"%s__c%s\");\n", k->signature, k->name, u->tag));
      break;
    }
    case EX_CHUNK_VARIABLE:
      if (k->is_extern) {
        rc |= put_entry(st, concat("pp:", k->text), fmt("%s\n", k->text));
        break;
      }
      for (size_t d = 0; d < k->ndecls; d++)
        rc |= put_entry(st, concat("sym:", k->decls[d].name),
                        fmt("extern %s %s __asm__(\"%s__c%s\");\n", k->specifiers,
                            k->decls[d].declarator, k->decls[d].name, u->tag));
      break;
    default:
      break;
    }
  }
  return rc ? -1 : 0;
}

void ex_cell_unit_free(ex_cell_unit_t *u) {
  free(u->source);
  ex_split_free(&u->split);
  memset(u, 0, sizeof *u);
}

void ex_cell_each_name(const ex_cell_state_t *st,
                       void (*fn)(const char *name, const char *kind, const char *decl, void *ctx),
                       void *ctx) {
  for (size_t i = 0; i < st->n; i++) {
    const char *key = st->entries[i].key;
    const char *kind = NULL;
    if (strncmp(key, "sym:", 4) == 0)
      kind = strchr(st->entries[i].text, '(') && strncmp(st->entries[i].text, "extern ", 7)
                 ? "function"
                 : "variable";
    else if (strncmp(key, "type:", 5) == 0)
      kind = "type";
    else if (strncmp(key, "macro:", 6) == 0)
      kind = "macro";
    else if (strncmp(key, "proto:", 6) == 0)
      kind = "function";
    if (kind)
      fn(strchr(key, ':') + 1, kind, st->entries[i].text, ctx);
  }
}
