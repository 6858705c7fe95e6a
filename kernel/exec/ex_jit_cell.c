/*
 * ex_jit_cell.c — see ex_jit.h (straight-line cells through TinyCC).
 */
#define _GNU_SOURCE
#include "ex_jit.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Words after which the cell is left to the system compiler: layouts and
 * calling conventions TinyCC does not share with GCC (aggregates, whose
 * mixed int/float eightbytes it classifies differently from the x86-64
 * psABI and whose attributes it drops; enums, whose underlying type it
 * may choose differently; types only an expression carries), and what
 * TinyCC lacks (thread-local storage, atomics, 128-bit integers, inline
 * asm). */
static const char k_declined[] =
    " struct union enum __attribute__ _Complex complex _Imaginary imaginary __int128 _Atomic"
    " __thread _Thread_local thread_local asm __asm__ __asm _Pragma __typeof__ typeof __typeof"
    " __auto_type _Generic _Alignas alignas __builtin_va_arg va_arg"
    " div ldiv lldiv imaxdiv div_t ldiv_t lldiv_t imaxdiv_t ";

/* Words a scalar type (integer, float, double, pointer to one) is made
 * of in an earlier cell's declaration; anything else there (a struct, a
 * typedef name that is not itself scalar) declines. */
static const char k_scalar[] =
    " void char short int long float double signed unsigned _Bool bool const volatile restrict"
    " extern static register typedef size_t ssize_t ptrdiff_t intptr_t uintptr_t intmax_t"
    " uintmax_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t ";

/* Libraries' `_t` typedefs that are scalars or enums (int-sized in both
 * compilers); any other `_t` name no cell defined declines the cell. */
static const char k_scalar_lib[] =
    " off_t pid_t time_t wchar_t clock_t ssize_t socklen_t mode_t uid_t gid_t useconds_t"
    " acc_dtype_t acc_op_t acc_precision_t acc_result_t ";

static int safe_text(const ex_cell_state_t *st, const char *text, int depth, const char *self);

/* Whether an earlier cell's declaration `decl` (of `self`) has a scalar
 * type: words of k_scalar, `self`, scalar typedefs and macros of earlier
 * cells (array bounds); no `long double` (x87, in memory), no function
 * or function pointer type (`(`: its parameters would need the same
 * check; a function is judged by scalar_function). */
static int scalar_decl(const ex_cell_state_t *st, const char *decl, int depth, const char *self) {
  if (depth > 3 || strchr(decl, '('))
    return 0;
  const char *p = decl;
  size_t n;
  int after_long = 0;
  for (const char *w = ex_cell_next_word(&p, &n); n; w = ex_cell_next_word(&p, &n)) {
    if (isdigit((unsigned char)*w) || (self && strlen(self) == n && !strncmp(self, w, n)))
      continue;
    if (after_long && n == 6 && !strncmp(w, "double", 6))
      return 0;
    after_long = n == 4 && !strncmp(w, "long", 4);
    if (ex_cell_word_in(k_scalar, w, n))
      continue;
    char name[128];
    ex_cell_name_t d;
    if (n >= sizeof name)
      return 0;
    memcpy(name, w, n);
    name[n] = 0;
    if (!st || !ex_cell_find(st, name, &d) || !d.decl || !d.kind)
      return 0;
    if (!strcmp(d.kind, "type")
            ? !scalar_decl(st, d.decl, depth + 1, name)
            : strcmp(d.kind, "macro") || !safe_text(st, d.decl, depth + 1, name))
      return 0;
  }
  return 1;
}

/* The name a parameter's text declares (`v` in `const double *v`), to be
 * skipped like `self`: its last word when a word comes before it and it
 * is no scalar word nor a type of an earlier cell (`const real` names
 * none). The function's own name for its return part. Points into a
 * static buffer. */
static const char *param_name(const ex_cell_state_t *st, const char *part, const char *fname) {
  static char last[128];
  const char *p = part, *w, *lw = NULL;
  size_t n, ln = 0;
  int words = 0;
  while ((w = ex_cell_next_word(&p, &n)), n) {
    words++;
    lw = w;
    ln = n;
  }
  if (words < 2 || ln >= sizeof last || ex_cell_word_in(k_scalar, lw, ln))
    return fname;
  memcpy(last, lw, ln);
  last[ln] = 0;
  ex_cell_name_t d;
  if (!strcmp(last, fname) || (st && ex_cell_find(st, last, &d) && !strcmp(d.kind, "type")))
    return fname;
  return last;
}

/* Whether an earlier cell's function `decl` (`double f(int a, float *b)`)
 * takes and returns scalars only: its return type and each parameter
 * pass scalar_decl; `...` is allowed (scalars are promoted alike). */
static int scalar_function(const ex_cell_state_t *st, const char *decl, const char *name,
                           int depth) {
  const char *at = ex_cell_find_word(decl, name);
  const char *open = at ? strchr(at, '(') : NULL;
  const char *close = open ? strrchr(open, ')') : NULL;
  if (!open || !close || memchr(open + 1, '(', (size_t)(close - open - 1)))
    return 0; /* a parameter of function type, or a function returning a pointer to one */
  char buf[512];
  if ((size_t)(close - decl) >= sizeof buf)
    return 0;
  memcpy(buf, decl, (size_t)(close - decl));
  buf[close - decl] = 0;
  buf[open - decl] = ','; /* the return type and name, then the parameters */
  char *save = NULL;
  for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
    if (strstr(part, "...") ? part[strspn(part, " \t\n.")] != 0
                            : !scalar_decl(st, part, depth + 1, param_name(st, part, name)))
      return 0;
  }
  return 1;
}

/* Whether a word appears in the body of an enum an earlier cell defined
 * (one of its constants: GCC may give it another type than TinyCC). */
static void enum_word(const ex_cell_name_t *d, void *ctx) {
  const char **w = ctx;
  if (w[0] && !strcmp(d->kind, "type") && ex_cell_find_word(d->decl, "enum") &&
      ex_cell_find_word(d->decl, w[0]))
    w[0] = NULL;
}

/* Whether a name that earlier cells defined may be used from a TinyCC
 * unit, judged by its declared type: a variable or typedef of scalar
 * type (scalar_decl), a function of scalars (scalar_function), a macro
 * whose body passes safe_text. A name no cell defined is the library's
 * or libc's (k_declined lists libc's functions and types that pass
 * aggregates by value), unless it is an enumerator of an earlier cell. */
static int safe_name(const ex_cell_state_t *st, const char *w, size_t n, int depth) {
  char name[128];
  if (n >= sizeof name)
    return 0;
  memcpy(name, w, n);
  name[n] = 0;
  ex_cell_name_t d;
  if (!ex_cell_find(st, name, &d) || !d.decl || !d.kind) {
    /* a library's `_t` type may be a struct used by value (div_t,
     * acc_config_t): only the scalar ones are known */
    if (n > 2 && w[n - 2] == '_' && w[n - 1] == 't' && !ex_cell_word_in(k_scalar, w, n) &&
        !ex_cell_word_in(k_scalar_lib, w, n))
      return 0;
    const char *probe[1] = {name};
    if (ex_cell_state_has_enums(st))
      ex_cell_each_name(st, enum_word, probe);
    return probe[0] != NULL;
  }
  if (!strcmp(d.kind, "type") || !strcmp(d.kind, "variable"))
    return scalar_decl(st, d.decl, depth + 1, name);
  if (!strcmp(d.kind, "function"))
    return scalar_function(st, d.decl, name, depth + 1);
  if (!strcmp(d.kind, "macro"))
    return safe_text(st, d.decl, depth + 1, name);
  return 0;
}

/* Words an integer variable's declaration may be made of (no typedef
 * name: `real` may be double). */
static const char k_integer[] =
    " char short int long signed unsigned _Bool bool const volatile extern static size_t"
    " ssize_t ptrdiff_t intptr_t uintptr_t intmax_t uintmax_t int8_t int16_t int32_t int64_t"
    " uint8_t uint16_t uint32_t uint64_t ";

/* Whether the operand of a unary minus at `p` (just after the `-`) is an
 * integer for sure: a number, or an earlier cell's variable of integer
 * type, standing alone (no postfix operator after it). */
static int integer_operand(const ex_cell_state_t *st, const char *p) {
  while (isspace((unsigned char)*p))
    p++;
  if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1])))
    return 1; /* a literal: folded, never a NaN */
  char name[128];
  size_t n = ex_cell_take_word(&p, name, sizeof name);
  if (!n || strchr("([.", *p) || (*p == '-' && (p[1] == '>' || p[1] == '-')) ||
      (*p == '+' && p[1] == '+'))
    return 0;
  ex_cell_name_t d;
  if (!st || !ex_cell_find(st, name, &d) || strcmp(d.kind, "variable") || strchr(d.decl, '*') ||
      strchr(d.decl, '['))
    return 0;
  const char *q = d.decl;
  size_t wn;
  for (const char *x = ex_cell_next_word(&q, &wn); wn; x = ex_cell_next_word(&q, &wn))
    if (!ex_cell_word_in(k_integer, x, wn) && !(wn == n && !strncmp(x, name, n)))
      return 0;
  return 1;
}

/* Whether every unary minus of `text` negates an integer (integer_operand).
 * TinyCC 0.9.27 computes a floating `-x` as `-0.0 - x`, which keeps the
 * sign of a NaN where C's negation (GCC's sign-bit flip) changes it
 * (issue 20, found by difftest: `-g8` of a NaN printed "-nan" by GCC,
 * "nan" by TinyCC). A `-` is unary after an operator, `(`, `[`, `,`, `;`,
 * `{`, `}`, `?`, `:`, the start, or the words return, sizeof, case,
 * else; `--`, `-=` and `->` are other operators. */
static int unary_minus_ok(const ex_cell_state_t *st, const char *text) {
  for (const char *p = strchr(text, '-'); p; p = strchr(p + 1, '-')) {
    if (p[1] == '-' || p[1] == '=' || p[1] == '>') {
      p++;
      continue;
    }
    const char *b = p;
    while (b > text && isspace((unsigned char)b[-1]))
      b--;
    int unary = b == text || !(isalnum((unsigned char)b[-1]) || b[-1] == '_' || b[-1] == ')' ||
                               b[-1] == ']' || b[-1] == '.' || b[-1] == '\'' || b[-1] == '"');
    if (!unary) { /* a word before it: an operand, unless a keyword */
      const char *e = b;
      while (b > text && (isalnum((unsigned char)b[-1]) || b[-1] == '_'))
        b--;
      static const char k_before[] = " return sizeof case else ";
      unary = e > b && !isdigit((unsigned char)*b) && ex_cell_word_in(k_before, b, (size_t)(e - b));
    }
    if (unary && !integer_operand(st, p + 1))
      return 0;
  }
  return 1;
}

/* Every word of `text` acceptable (k_declined, no `long double`: x87,
 * passed in memory; safe_name), looking through at most three levels of
 * earlier cells' declarations; `self` (the name `text` declares, or
 * NULL) is not looked up again. */
static int safe_text(const ex_cell_state_t *st, const char *text, int depth, const char *self) {
  if (depth > 3 || !unary_minus_ok(st, text))
    return 0;
  const char *p = text;
  size_t n;
  int after_long = 0;
  for (const char *w = ex_cell_next_word(&p, &n); n; w = ex_cell_next_word(&p, &n)) {
    if (isdigit((unsigned char)*w))
      continue;
    if (ex_cell_word_in(k_declined, w, n) || (after_long && n == 6 && !strncmp(w, "double", 6)))
      return 0;
    after_long = n == 4 && !strncmp(w, "long", 4);
    int is_self = self && strlen(self) == n && !strncmp(self, w, n);
    if (st && !is_self && !safe_name(st, w, n, depth))
      return 0;
  }
  return 1;
}

int ex_jit_cell_safe(const ex_cell_state_t *st, const char *code) {
  if (!code || strstr(code, "#include \"") || strstr(code, "# include \"") ||
      strstr(code, "#pragma"))
    return 0;
  return safe_text(st, code, 0, NULL);
}

#ifdef NBFORK_HAVE_TCC
#include <dlfcn.h>
#include <elf.h>
#include <libtcc.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>

/* dl_iterate_phdr's callback: whether the address ctx[0] lies in an
 * executable loaded segment of this object (ctx[1] set to 1 if so). */
static int in_code(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size;
  uintptr_t *c = ctx;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && c[0] >= lo && c[0] < lo + ph->p_memsz) {
      c[1] = (ph->p_flags & PF_X) != 0;
      return 1;
    }
  }
  return 0;
}

/* Whether `name` is a function of the process (earlier cells' objects are
 * loaded RTLD_GLOBAL): its symbol's ELF type, as the linker knows it; for
 * an IFUNC (memcpy), whose resolved address is a symbol dladdr may not
 * name, whether that address is in an executable segment (an object's
 * never is). */
static int is_function(const char *name) {
  void *addr = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!addr)
    return 0;
  if (dladdr1(addr, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && info.dli_sname &&
      !strcmp(info.dli_sname, name)) {
    int type = ELF64_ST_TYPE(sym->st_info);
    return type == STT_FUNC || type == STT_GNU_IFUNC;
  }
  uintptr_t ctx[2] = {(uintptr_t)addr, 0};
  dl_iterate_phdr(in_code, ctx);
  return ctx[1] == 1;
}

/* Whether one dynamic relocation of TinyCC's object is one GCC's code
 * would agree with: a GOT entry (GLOB_DAT), a relative or absolute data
 * word, or a PLT slot of a function. TinyCC 0.9.27 reaches an external
 * object used directly as an SSE or x87 operand (`A + B` with `double
 * A`), or whose address it takes, PC-relative to a PLT slot: the
 * instruction then reads the stub's code bytes. Such a slot names an
 * object, not a function; the cell goes to GCC. */
static int reloc_ok(const ElfW(Rela) * r, const char *syms, size_t nsyms, const char *strs,
                    size_t strsize) {
  unsigned type = ELF64_R_TYPE(r->r_info), si = ELF64_R_SYM(r->r_info);
  if (type == R_X86_64_RELATIVE || type == R_X86_64_GLOB_DAT || type == R_X86_64_64)
    return 1;
  if (type != R_X86_64_JUMP_SLOT || si >= nsyms)
    return 0;
  ElfW(Sym) sym;
  memcpy(&sym, syms + (size_t)si * sizeof sym, sizeof sym);
  if (sym.st_name >= strsize)
    return 0;
  return is_function(strs + sym.st_name);
}

/* The file at `path` read whole (caller frees), its size in *size; NULL
 * when it cannot be read. TinyCC writes its section header table at an
 * unaligned offset (its dynamic tables, in loaded segments, are aligned):
 * the table is copied to an aligned place after the file's bytes and
 * e_shoff of this copy points there, so the headers can be read in place
 * (UBSan: misaligned member access). NULL too when the table lies
 * outside the file. */
static char *read_image(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *img = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n > (long)sizeof(ElfW(Ehdr)) && fseek(f, 0, SEEK_SET) == 0 && (img = malloc((size_t)n)) &&
      fread(img, 1, (size_t)n, f) != (size_t)n) {
    free(img);
    img = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  if (!img)
    return NULL;
  ElfW(Ehdr) *eh = (ElfW(Ehdr) *)img;
  size_t table = (size_t)eh->e_shnum * sizeof(ElfW(Shdr)), at = ((size_t)n + 7) & ~(size_t)7;
  char *grown = eh->e_shoff <= (size_t)n && table <= (size_t)n - eh->e_shoff
                    ? realloc(img, at + table)
                    : NULL;
  if (!grown) {
    free(img);
    return NULL;
  }
  img = grown;
  eh = (ElfW(Ehdr) *)img;
  memcpy(img + at, img + eh->e_shoff, table);
  eh->e_shoff = at;
  *size = at + table;
  return img;
}

/* Copy n bytes at offset off of the image (size bytes) into out: TinyCC
 * does not align its section headers or tables, so they are copied out
 * rather than read in place (UBSan: misaligned member access). */
static int read_at(const char *img, size_t size, size_t off, void *out, size_t n) {
  if (off > size || n > size - off)
    return -1;
  memcpy(out, img + off, n);
  return 0;
}

/* Whether section i's relocations all pass reloc_ok: 1 yes, 0 no. */
static int section_relocs_ok(const char *img, size_t size, const ElfW(Ehdr) * eh, int i) {
  ElfW(Shdr) sh, symh, strh;
  size_t hs = sizeof sh;
  if (read_at(img, size, eh->e_shoff + (size_t)i * hs, &sh, hs))
    return 0;
  if (sh.sh_type != SHT_RELA)
    return 1;
  if (sh.sh_link >= eh->e_shnum || read_at(img, size, eh->e_shoff + sh.sh_link * hs, &symh, hs) ||
      symh.sh_link >= eh->e_shnum ||
      read_at(img, size, eh->e_shoff + symh.sh_link * hs, &strh, hs) ||
      sh.sh_offset + sh.sh_size > size || symh.sh_offset + symh.sh_size > size ||
      strh.sh_offset + strh.sh_size > size)
    return 0;
  for (size_t j = 0; j < sh.sh_size / sizeof(ElfW(Rela)); j++) {
    ElfW(Rela) r;
    memcpy(&r, img + sh.sh_offset + j * sizeof r, sizeof r);
    if (!reloc_ok(&r, img + symh.sh_offset, symh.sh_size / sizeof(ElfW(Sym)),
                  img + strh.sh_offset, strh.sh_size))
      return 0;
  }
  return 1;
}

/* 0 when every dynamic relocation of the shared object `path` passes
 * reloc_ok, -1 otherwise (or when it cannot be read as ELF64). */
static int check_relocs(const char *path) {
  size_t size = 0;
  char *img = read_image(path, &size);
  if (!img)
    return -1;
  ElfW(Ehdr) eh;
  memcpy(&eh, img, sizeof eh);
  int ok = 1;
  for (int i = 0; ok && i < eh.e_shnum; i++)
    ok = section_relocs_ok(img, size, &eh, i);
  free(img);
  return ok ? 0 : -1;
}

/* TinyCC's diagnostics are not shown: on any of them the cell goes to the
 * system compiler, which reports its own. */
static void quiet(void *opaque, const char *msg) {
  (void)opaque;
  (void)msg;
}

int ex_jit_cell_so(const char *source, const char *incdir, const char *path,
                   const char *const *dsos) {
  if (!source || !path || !ex_jit_enabled())
    return -1;
  TCCState *s = tcc_new();
  if (!s)
    return -1;
  tcc_set_error_func(s, NULL, quiet);
  /* -Werror: a warning sends the cell to GCC, whose diagnostics (with
   * -Werror=implicit-function-declaration) the user then sees */
  /* 4 KiB between its segments, not 2 MiB: no gap to map (dlopen), a
   * small span to copy (ex_jit_dll_load) */
  tcc_set_options(s, "-Werror -std=c11 -Wl,-section-alignment=0x1000");
#ifdef NBFORK_TCC_LIB_DIR
  tcc_set_lib_path(s, NBFORK_TCC_LIB_DIR); /* before output type: it reads libtcc1.a */
  /* No libc.so and crti/crtn in the link, only TinyCC's runtime helpers
   * (libtcc1.a) and `dsos`: reading libc's ~3,000 dynamic symbols into
   * the object's tables was a third of a trivial cell's instructions
   * (issue 20, item 8). An object ex_jit_dll_load binds needs none (its
   * dlsym gives each reference the default version); one that is
   * dlopen()ed (%ranks, a fallback) links the executor's libc and libm
   * (`dsos`), or the loader would bind the oldest versions. */
  tcc_set_options(s, "-nostdlib");
#endif
  int rc = tcc_set_output_type(s, TCC_OUTPUT_DLL);
#ifdef NBFORK_TCC_LIB_DIR
  if (rc == 0)
    rc = tcc_add_file(s, NBFORK_TCC_LIB_DIR "/libtcc1.a");
  for (const char *const *d = dsos; rc == 0 && d && *d; d++)
    rc = tcc_add_file(s, *d);
#endif
  if (rc == 0 && incdir)
    rc = tcc_add_include_path(s, incdir);
  if (rc == 0)
    rc = tcc_compile_string(s, source);
  if (rc == 0)
    rc = tcc_output_file(s, path);
  tcc_delete(s);
  if (rc == 0)
    rc = check_relocs(path);
  if (rc != 0)
    unlink(path);
  return rc == 0 ? 0 : -1;
}

int ex_jit_dll_sizes(const char *path, const char *const *names, size_t *sizes, size_t n) {
  size_t size = 0, found = 0;
  char *img = read_image(path, &size);
  if (!img)
    return -1;
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)img;
  const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(img + eh->e_shoff);
  int ok = eh->e_shoff + (size_t)eh->e_shnum * sizeof *sh <= size;
  for (int i = 0; ok && i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum)
      continue;
    const ElfW(Shdr) *strh = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > size || strh->sh_offset + strh->sh_size > size)
      break;
    const ElfW(Sym) *sym = (const ElfW(Sym) *)(img + sh[i].sh_offset);
    const char *strs = img + strh->sh_offset;
    for (size_t j = 0; j < sh[i].sh_size / sizeof *sym; j++) {
      if (sym[j].st_name >= strh->sh_size || sym[j].st_shndx == SHN_UNDEF)
        continue;
      for (size_t k = 0; k < n; k++)
        if (!strcmp(strs + sym[j].st_name, names[k])) {
          sizes[k] = (size_t)sym[j].st_size;
          found++;
        }
    }
  }
  free(img);
  return found == n ? 0 : -1;
}

/* The value of dynamic symbol `si` of the object loaded at `base`: its
 * own definition, or the process's (dlsym: earlier cells, libnbfork,
 * libc); 0 for an undefined weak one (__gmon_start__). -1 when unknown. */
static int symbol_value(const ElfW(Sym) * syms, size_t nsyms, const char *strs, size_t strsize,
                        unsigned si, char *base, uintptr_t *v) {
  if (si >= nsyms || syms[si].st_name >= strsize)
    return -1;
  if (syms[si].st_shndx != SHN_UNDEF) {
    *v = (uintptr_t)base + syms[si].st_value;
    return 0;
  }
  void *p = dlsym(RTLD_DEFAULT, strs + syms[si].st_name);
  *v = (uintptr_t)p;
  return p || ELF64_ST_BIND(syms[si].st_info) == STB_WEAK ? 0 : -1;
}

/* Apply the allocated (dynamic) relocations of the image to the copy at
 * `base`: the types check_relocs admits, as ld.so would (bound now). */
static int apply_relocs(const char *img, size_t size, char *base) {
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)img;
  const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(img + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_RELA || !(sh[i].sh_flags & SHF_ALLOC))
      continue;
    if (sh[i].sh_link >= eh->e_shnum)
      return -1;
    const ElfW(Shdr) *symh = &sh[sh[i].sh_link];
    const ElfW(Shdr) *strh = symh->sh_link < eh->e_shnum ? &sh[symh->sh_link] : NULL;
    if (!strh || sh[i].sh_offset + sh[i].sh_size > size || symh->sh_offset + symh->sh_size > size ||
        strh->sh_offset + strh->sh_size > size)
      return -1;
    const ElfW(Rela) *r = (const ElfW(Rela) *)(img + sh[i].sh_offset);
    const ElfW(Sym) *syms = (const ElfW(Sym) *)(img + symh->sh_offset);
    size_t nsyms = symh->sh_size / sizeof *syms;
    for (size_t j = 0; j < sh[i].sh_size / sizeof *r; j++) {
      unsigned type = ELF64_R_TYPE(r[j].r_info);
      uintptr_t v = 0;
      if (type == R_X86_64_RELATIVE)
        v = (uintptr_t)base + (uintptr_t)r[j].r_addend;
      else if (symbol_value(syms, nsyms, img + strh->sh_offset, strh->sh_size,
                            ELF64_R_SYM(r[j].r_info), base, &v))
        return -1;
      else if (type == R_X86_64_64)
        v += (uintptr_t)r[j].r_addend;
      else if (type != R_X86_64_GLOB_DAT && type != R_X86_64_JUMP_SLOT)
        return -1;
      memcpy(base + r[j].r_offset, &v, sizeof v);
    }
  }
  return 0;
}

/* Copy the PT_LOAD segments of the image to memory from alloc (their
 * span, zero-filled): its base, or NULL. Dynamic entries it cannot honour
 * (constructors arrays, TLS) refuse the object; DT_INIT is run after the
 * relocations (TinyCC's crti _init: __gmon_start__ when profiling). */
static char *place_segments(const char *img, size_t size, void *(*alloc)(size_t, void *), void *ctx,
                            uintptr_t *init) {
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)img;
  const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(img + eh->e_phoff);
  if (eh->e_phoff + (size_t)eh->e_phnum * sizeof *ph > size)
    return NULL;
  size_t span = 0;
  for (int i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_TLS || ph[i].p_type == PT_INTERP)
      return NULL;
    if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr + ph[i].p_memsz > span)
      span = ph[i].p_vaddr + ph[i].p_memsz;
  }
  char *base = span && span < (16u << 20) ? alloc(span, ctx) : NULL;
  for (int i = 0; base && i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_LOAD) {
      if (ph[i].p_offset + ph[i].p_filesz > size || ph[i].p_filesz > ph[i].p_memsz)
        return NULL;
      memcpy(base + ph[i].p_vaddr, img + ph[i].p_offset, ph[i].p_filesz);
    } else if (ph[i].p_type == PT_DYNAMIC) {
      const ElfW(Dyn) *d = (const ElfW(Dyn) *)(img + ph[i].p_offset);
      for (size_t k = 0; (k + 1) * sizeof *d <= ph[i].p_filesz && d[k].d_tag != DT_NULL; k++) {
        if (d[k].d_tag == DT_INIT_ARRAY || d[k].d_tag == DT_PREINIT_ARRAY)
          return NULL;
        if (d[k].d_tag == DT_INIT)
          *init = d[k].d_un.d_ptr;
      }
    }
  }
  return base;
}

int ex_jit_dll_load(const char *path, void *(*alloc)(size_t, void *), void *ctx,
                    const char *const *names, void **addrs, size_t n) {
  size_t size = 0;
  char *img = read_image(path, &size);
  if (!img)
    return -1;
  uintptr_t init = 0;
  const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)img;
  int ok = eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) <= size && eh->e_type == ET_DYN &&
           eh->e_machine == EM_X86_64;
  char *base = ok ? place_segments(img, size, alloc, ctx, &init) : NULL;
  ok = base && apply_relocs(img, size, base) == 0;
  /* the symbols: from the dynamic symbol table, as dlsym would */
  const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(img + eh->e_shoff);
  size_t found = 0;
  for (int i = 0; ok && i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum)
      continue;
    const ElfW(Shdr) *strh = &sh[sh[i].sh_link];
    const ElfW(Sym) *sym = (const ElfW(Sym) *)(img + sh[i].sh_offset);
    for (size_t j = 0; j < sh[i].sh_size / sizeof *sym; j++)
      for (size_t k = 0; k < n; k++)
        if (names[k] && sym[j].st_shndx != SHN_UNDEF && sym[j].st_name < strh->sh_size &&
            !strcmp(img + strh->sh_offset + sym[j].st_name, names[k])) {
          addrs[k] = base + sym[j].st_value;
          found++;
        }
  }
  size_t want = 0;
  for (size_t k = 0; k < n; k++)
    want += names[k] != NULL;
  free(img);
  if (!ok || found != want)
    return -1;
  if (init)
    ((void (*)(void))(base + init))();
  return 0;
}

#else /* no libtcc: every cell goes to the system compiler */

int ex_jit_cell_so(const char *source, const char *incdir, const char *path,
                   const char *const *dsos) {
  (void)source;
  (void)incdir;
  (void)path;
  (void)dsos;
  return -1;
}

int ex_jit_dll_sizes(const char *path, const char *const *names, size_t *sizes, size_t n) {
  (void)path;
  (void)names;
  (void)sizes;
  (void)n;
  return -1;
}

int ex_jit_dll_load(const char *path, void *(*alloc)(size_t, void *), void *ctx,
                    const char *const *names, void **addrs, size_t n) {
  (void)path;
  (void)alloc;
  (void)ctx;
  (void)names;
  (void)addrs;
  (void)n;
  return -1;
}

#endif
