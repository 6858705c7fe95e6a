#!/usr/bin/env python3
"""Differential test of the cell engine (issue 20): the same cells run
three ways must print the same bytes.

  1. the executor as the kernel runs it (TinyCC takes the cells
     ex_jit_cell_safe admits, GCC the rest),
  2. the executor with NBFORK_JIT=0 (GCC for every cell),
  3. the whole program compiled by GCC as one translation unit: every
     cell's declarations at file scope, its statements in main, in order.

Each cell prints what it computed (integers in decimal, floating point in
hex with %a, every member of a struct, sizeof/offsetof of each type), so
any difference in a value, a calling convention or a layout shows.

Usage:
  difftest.py --seed S --cells N [--executor PATH]   random sequences
  difftest.py --case NAME                            one regression case
  difftest.py --list                                 the regression cases
Exit status 0 when the three agree, 1 on a difference (the first one is
printed with the sequence's cells), 2 on bad usage.
"""
import argparse
import concurrent.futures
import os
import random
import re
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import exec_notebook  # noqa: E402  (the executor driver over nbf_wire.h)

# TinyCC cannot parse <complex.h>: a sequence that includes it (one in
# four) goes to GCC from there on, so the others exercise the fast path.
HEADER = ("#include <stdio.h>\n#include <string.h>\n#include <stdarg.h>\n#include <stddef.h>\n"
          # a double kept where converting it to an integer is defined
          "#define CL(x) ((x) < 1e15 && (x) > -1e15 ? (double)(x) : 0.0)\n")
COMPLEX = "#include <complex.h>\n"


class Cell:
    """One cell: `decls` go to file scope in the whole program, `stmts` into
    main; the kernel gets `text` (both, in the cell's order)."""

    def __init__(self, text, decls="", stmts=""):
        self.text, self.decls, self.stmts = text, decls, stmts


def decl_cell(text):
    return Cell(text, decls=text)


def stmt_cell(text):
    return Cell(text, stmts=text)


def init_cell(ctype, name, expr, printer):
    """`T name = expr;` at top level: a runtime initializer in the kernel,
    a file-scope object assigned in main in the whole program."""
    return Cell("%s %s = %s;\n%s" % (ctype, name, expr, printer),
                decls="%s %s;\n" % (ctype, name), stmts="%s = %s;\n%s" % (name, expr, printer))


# ---------------------------------------------------------------- generator

INT_TYPES = ["char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned",
             "long", "unsigned long", "long long", "unsigned long long", "_Bool"]
FLOAT_TYPES = ["float", "double", "long double"]
SIGNED = {"signed char", "short", "int", "long", "long long", "char"}


def print_scalar(ctype, lv):
    if ctype in ("float", "double"):
        return 'printf("%%a\\n", (double)(%s));\n' % lv
    if ctype == "long double":
        return 'printf("%%La\\n", (long double)(%s));\n' % lv
    if ctype.endswith("omplex"):
        return 'printf("%%a %%a\\n", (double)creal(%s), (double)cimag(%s));\n' % (lv, lv)
    if ctype in SIGNED:
        return 'printf("%%lld\\n", (long long)(%s));\n' % lv
    return 'printf("%%llu\\n", (unsigned long long)(%s));\n' % lv


def scalar_value(rng, ctype):
    if ctype in FLOAT_TYPES:
        v = rng.choice(["%d.%d" % (rng.randint(-99, 99), rng.randint(0, 999)), "0.1", "1e10",
                        "-2.5e-3", "3.0"])
        return v + ("f" if ctype == "float" else "L" if ctype == "long double" else "")
    if ctype.endswith("omplex"):
        return "(%d.5 + %d.25 * I)" % (rng.randint(-9, 9), rng.randint(-9, 9))
    if ctype == "_Bool":
        return str(rng.randint(0, 1))
    return str(rng.randint(-100 if ctype in SIGNED else 0, 120))


class Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.n = 0
        self.scalars = []   # (ctype, name) of arithmetic globals
        self.aggs = []      # (tname, members [(ctype, mname, bits)], is_union)
        self.objs = []      # (tname, name): globals of aggregate type
        self.funcs = []     # (kind, name, tname, ctype): callables over aggregates/scalars
        self.arrays = []    # (ctype, name, length): arrays of scalars
        self.ptrs = []      # (ctype, name): pointers to a scalar global or an array element
        self.enums = []     # (tname, name, [enumerators]): enum globals
        self.macros = []    # macros naming globals (expressions of double)
        self.macro_text = {}
        self.cells = [Cell(HEADER, decls=HEADER)]
        self.complex = False
        self.allow_complex = self.rng.random() < 0.25

    def name(self, p):
        self.n += 1
        return "%s%d" % (p, self.n)

    def scalar_global(self):
        r = self.rng
        ctype = r.choice(INT_TYPES + FLOAT_TYPES * 2 +
                         (["double _Complex", "float _Complex", "double complex"]
                          if self.allow_complex and len(self.cells) > 20 else []))
        if ctype.endswith("omplex") and not self.complex:
            self.complex = True
            self.cells.append(decl_cell(COMPLEX))
        name = self.name("g")
        if self.scalars and r.random() < 0.5 and not ctype.endswith("omplex"):
            src = r.choice([s for s in self.scalars if not s[0].endswith("omplex")] or [None])
            if src:  # derived at run time from an earlier cell's global (class a)
                expr = "(%s)(%s %s %s)" % (ctype, src[1], r.choice("+-*"), scalar_value(r, "double"))
                if ctype not in FLOAT_TYPES:
                    expr = "(%s)(long long)CL(%s * 0.5)" % (ctype, src[1]) if src[0] in FLOAT_TYPES \
                        else "(%s)((unsigned long long)%s * 3u + 1u)" % (ctype, src[1])
                self.cells.append(init_cell(ctype, name, expr, print_scalar(ctype, name)))
                self.scalars.append((ctype, name))
                return
        text = "%s %s = %s;\n" % (ctype, name, scalar_value(r, ctype))
        self.cells.append(decl_cell(text))
        self.scalars.append((ctype, name))

    def member(self, i):
        r = self.rng
        k = r.random()
        if k < 0.2:
            return ("unsigned", "m%d" % i, r.randint(1, 9))
        if k < 0.3 and self.aggs:
            inner = r.choice(self.aggs)
            if not inner[2]:
                return (inner[0], "m%d" % i, None)
        if k < 0.35:
            return ("_Alignas(%d) char" % r.choice([2, 4, 8]), "m%d" % i, None)
        return (r.choice(["char", "unsigned char", "short", "int", "long", "float", "double",
                          "long long", "float", "double"]), "m%d" % i, None)

    def aggregate(self):
        r = self.rng
        is_union = r.random() < 0.15
        tname = self.name("U" if is_union else "S")
        # 1 to 8 members: from 1 byte (one char) to ~40 (mixed, padded)
        members = [self.member(i) for i in range(r.randint(1, 8))]
        if is_union:
            members = [m for m in members if m[2] is None] or [("int", "m0", None)]
        body = " ".join("%s %s%s;" % (t, m, ":%d" % b if b else "") for t, m, b in members)
        attr = r.choice(["", "", "", " __attribute__((packed))", " __attribute__((aligned(16)))",
                         " __attribute__((packed, aligned(4)))", "pragma1", "pragma2"])
        kw = "union" if is_union else "struct"
        if attr.startswith("pragma"):
            text = "#pragma pack(push, %s)\ntypedef %s %s_ { %s } %s;\n#pragma pack(pop)\n" % (
                attr[6], kw, tname, body, tname)
        else:
            text = "typedef %s%s %s_ { %s } %s;\n" % (kw, attr, tname, body, tname)
        self.aggs.append((tname, members, is_union))
        lay = self.layout(tname, members)
        self.cells.append(Cell(text + lay, decls=text, stmts=lay))
        # the layout again in a later cell (item 3: one layout in every cell)
        self.cells.append(stmt_cell(lay))
        # a function over it by value, a function pointer and a __typeof__ one (class b)
        f = self.name("f")
        upd = self.update(members, "a", "b")
        self.cells.append(decl_cell("%s %s(%s a, int b) { %s return a; }\n" % (tname, f, tname, upd)))
        fp, tp = self.name("fp"), self.name("tp")
        self.cells.append(decl_cell("%s (*%s)(%s, int) = %s;\n__typeof__(%s) *%s = %s;\n" % (
            tname, fp, tname, f, f, tp, f)))
        v = self.name("va")
        self.cells.append(decl_cell(
            "%s %s(int n, ...) { va_list ap; va_start(ap, n); %s r = va_arg(ap, %s);"
            " va_end(ap); return r; }\n" % (tname, v, tname, tname)))
        self.funcs += [("direct", f, tname), ("ptr", fp, tname), ("ptr", tp, tname),
                       ("va", v, tname)]

    def layout(self, tname, members):
        out = 'printf("%s %%zu %%zu\\n", sizeof(%s), _Alignof(%s));\n' % (tname, tname, tname)
        for t, m, b in members:
            if not b:
                out += 'printf("%%zu\\n", offsetof(%s, %s));\n' % (tname, m)
        return out

    def update(self, members, obj, by):
        r = self.rng
        t, m, b = r.choice(members)
        t = t.split(") ")[-1]  # `_Alignas(2) char` -> `char`
        if t.startswith("S") or t.startswith("U"):
            return ""
        if t in ("float", "double"):
            return "%s.%s = %s.%s * 0.5 + %s;" % (obj, m, obj, m, by)
        return "%s.%s = (%s)(%s.%s + %s);" % (obj, m, "unsigned" if b else t, obj, m, by)

    def print_agg(self, tname, lv, depth=0):
        agg = next(a for a in self.aggs if a[0] == tname)
        out = ""
        for t, m, b in (agg[1][:1] if agg[2] else agg[1]):
            if t.startswith("S") or t.startswith("U"):
                out += self.print_agg(t, "%s.%s" % (lv, m), depth + 1)
            else:
                out += print_scalar("unsigned" if b else t.split(") ")[-1], "%s.%s" % (lv, m))
        return out

    def agg_value(self, tname):
        agg = next(a for a in self.aggs if a[0] == tname)
        parts = []
        for t, m, b in (agg[1][:1] if agg[2] else agg[1]):
            if t.startswith("S") or t.startswith("U"):
                parts.append(".%s = %s" % (m, self.agg_value(t)))
            else:
                parts.append(".%s = %s" % (m, str(self.rng.randint(0, (1 << b) - 1)) if b
                                           else scalar_value(self.rng, t.split(") ")[-1])))
        return "{ %s }" % ", ".join(parts)

    def agg_global(self):
        tname = self.rng.choice(self.aggs)[0]
        name = self.name("o")
        self.cells.append(decl_cell("%s %s = %s;\n" % (tname, name, self.agg_value(tname))))
        self.objs.append((tname, name))

    def scalar_stmt(self):
        r = self.rng
        real = [s for s in self.scalars if not s[0].endswith("omplex")]
        dst, a, b = r.choice(real), r.choice(real), r.choice(real)
        t = dst[0]
        if t in FLOAT_TYPES:
            e = r.choice(["%s + %s", "%s - %s", "%s * %s", "-%s + %s * 2", "(%s < %s) + 0.5",
                          "%s * 0.25 - %s"]) % (a[1], b[1])
            s = r.choice(["%s = (%s)(%s);", "%s += (%s)(%s);"]) % (dst[1], t, e)
        else:
            s = "%s = (%s)((unsigned long long)%s * 7u + (unsigned long long)(%s > %s));" % (
                dst[1], t, a[1], a[1], b[1])
            if a[0] in FLOAT_TYPES:
                s = "%s = (%s)(%s < %s);" % (dst[1], t, a[1], b[1])
        return s + "\n" + print_scalar(t, dst[1])

    def array_global(self):
        r = self.rng
        ctype = r.choice(["double", "float", "int", "unsigned", "short", "long", "double"])
        n = r.randint(1, 6)
        name = self.name("a")
        vals = ", ".join(scalar_value(r, ctype) for _ in range(r.randint(0, n)))
        text = "%s %s[%d] = { %s };\n" % (ctype, name, n, vals or "0")
        text += 'printf("%%zu\\n", sizeof %s);\n' % name
        self.cells.append(Cell(text, decls=text.split("\n")[0] + "\n",
                               stmts=text.split("\n", 1)[1]))
        self.arrays.append((ctype, name, n))

    def pointer_global(self):
        r = self.rng
        name = self.name("p")
        cands = [(t, "&%s" % n) for t, n in self.scalars if t in ("double", "float", "int")]
        cands += [(t, "&%s[%d]" % (n, r.randint(0, k - 1))) for t, n, k in self.arrays]
        cands += [(t, n) for t, n, k in self.arrays]  # decays to &a[0]
        if not cands:
            return self.scalar_global()
        ctype, target = r.choice(cands)
        text = "%s *%s = %s;\n" % (ctype, name, target)
        self.cells.append(decl_cell(text))
        self.ptrs.append((ctype, name))

    def enum_global(self):
        r = self.rng
        tname, name = self.name("E"), self.name("e")
        base = r.choice([0, -3, 7, 1 << 20])
        ks = ["%s_K%d" % (tname, i) for i in range(r.randint(1, 4))]
        body = ", ".join("%s = %d" % (k, base + 3 * i) for i, k in enumerate(ks))
        text = "typedef enum { %s } %s;\n%s %s = %s;\n" % (body, tname, tname, name, r.choice(ks))
        text2 = 'printf("%%zu %%lld\\n", sizeof(%s), (long long)%s);\n' % (tname, name)
        self.cells.append(Cell(text + text2, decls=text, stmts=text2))
        self.enums.append((tname, name, ks))

    def macro_global(self):
        r = self.rng
        real = [s for s in self.scalars if s[0] in ("float", "double", "int", "long")]
        if len(real) < 2:
            return self.scalar_global()
        a, b = r.choice(real), r.choice(real)
        name = self.name("M")
        text = "#define %s ((double)%s * 0.5 + (double)%s)\n" % (name, a[1], b[1])
        self.macro_text[name] = text
        self.cells.append(decl_cell(text))
        self.macros.append(name)

    def operand(self):
        """A double-valued expression naming some global: a scalar, an array
        element, through a pointer, a macro, an enum, sizeof or an address."""
        r = self.rng
        real = [s for s in self.scalars if not s[0].endswith("omplex")]
        opts = [lambda: "(double)%s" % r.choice(real)[1]]
        if self.arrays:
            opts.append(lambda: (lambda a: "(double)%s[%d]" % (a[1], r.randint(0, a[2] - 1)))(
                r.choice(self.arrays)))
            opts.append(lambda: "(double)sizeof %s" % r.choice(self.arrays)[1])
        if self.ptrs:
            opts.append(lambda: "(double)*%s" % r.choice(self.ptrs)[1])
            opts.append(lambda: (lambda p: "(double)(%s == (%s *)0)" % (p[1], p[0]))(
                r.choice(self.ptrs)))
        if self.macros:
            opts.append(lambda: "(%s)" % r.choice(self.macros))
        if self.enums:
            opts.append(lambda: "(double)%s" % r.choice(self.enums)[1])
        return r.choice(opts)()

    def mixed_stmt(self):
        """A store into an array element, through a pointer, into a scalar
        or an enum, from a mix of operands; what was stored is printed."""
        r = self.rng
        e = "%s %s %s" % (self.operand(), r.choice("+-*"), self.operand())
        k = r.random()
        if self.arrays and k < 0.3:
            t, a, n = r.choice(self.arrays)
            lv = "%s[%d]" % (a, r.randint(0, n - 1))
        elif self.ptrs and k < 0.6:
            t, p = r.choice(self.ptrs)
            lv = "*%s" % p
        elif k < 0.65:  # a block's local under an earlier global's name
            t, v = r.choice([s for s in self.scalars if not s[0].endswith("omplex")])
            body = e + "".join(self.macro_text[m] for m in self.macros if m in e)
            if re.search(r"\b%s\b" % v, body):  # in its own initializer: uninitialized
                e = "1.5"
            return "{ %s %s = (%s)(long long)CL(%s); %s}\n" % (
                r.choice(["int", "double", "long"]), v, "double", e,
                print_scalar("double", v).replace("\n", " "))
        elif self.enums and k < 0.7:
            t, v, ks = r.choice(self.enums)
            return "%s = %s;\nprintf(\"%%lld\\n\", (long long)%s);\n" % (v, r.choice(ks), v)
        else:
            t, lv = r.choice([s for s in self.scalars if not s[0].endswith("omplex")])
        if t in FLOAT_TYPES:
            s = r.choice(["%s = (%s)(%s);", "%s += (%s)(%s);", "%s -= (%s)(%s);"]) % (lv, t, e)
        else:  # through long long, the double kept in range: no undefined conversion
            s = "%s = (%s)(long long)CL(%s);" % (lv, t, e)
        return s + "\n" + print_scalar(t, lv)

    def agg_stmt(self):
        r = self.rng
        tname, o = r.choice(self.objs)
        fs = [f for f in self.funcs if f[2] == tname]
        kind, f, _ = r.choice(fs)
        arg = r.randint(0, 9)
        if kind == "va":
            s = "%s = %s(1, %s);\n" % (o, f, o)
        else:
            s = "%s = %s(%s, %d);\n" % (o, f, o, arg)
        return s + self.print_agg(tname, o)

    def statement_cell(self):
        parts = []
        for _ in range(self.rng.randint(1, 3)):
            k = self.rng.random()
            if self.objs and k < 0.3:
                parts.append(self.agg_stmt())
            elif self.scalars and k < 0.6:
                parts.append(self.mixed_stmt())
            elif self.scalars:
                parts.append(self.scalar_stmt())
        self.cells.append(stmt_cell("".join(parts)))

    def step(self):
        k = self.rng.random()
        if k < 0.15 or len(self.scalars) < 2:
            self.scalar_global()
        elif k < 0.20:
            self.aggregate()
        elif k < 0.24 and self.aggs:
            self.agg_global()
        elif k < 0.28:
            self.array_global()
        elif k < 0.31:
            self.pointer_global()
        elif k < 0.33:
            self.enum_global()
        elif k < 0.35:
            self.macro_global()
        else:
            self.statement_cell()


def generate(seed, ncells):
    g = Gen(seed)
    while len(g.cells) < ncells:
        g.step()
    return g.cells


# ------------------------------------------------------- regression cases

def case_a():
    return [decl_cell(HEADER), decl_cell("double A = 1.5, B = 2.25;\nfloat F = 0.5f;\n"),
            init_cell("double", "C", "A + B", 'printf("%a\\n", C);\n'),
            stmt_cell('C = 2 * B; printf("%a\\n", C);\n'
                      'C += B; printf("%a\\n", C); C = (A < B) + F; printf("%a\\n", C);\n'),
            stmt_cell('C = -B; printf("%a\\n", C);\n')]  # GCC's: a floating negation


def case_unary_minus_nan():
    """Found by the generator (seed 7): TinyCC negates a double as
    `-0.0 - x`, which keeps a NaN's sign; C (GCC) flips it. A cell
    negating a floating operand goes to GCC (ex_jit_cell_safe)."""
    return [decl_cell(HEADER), decl_cell("double Z = 0.0, QN;\nint I = 3;\n"),
            stmt_cell('QN = Z / Z; printf("%a\\n", QN);\n'),
            stmt_cell('QN = -QN; printf("%a\\n", QN);\n'),
            stmt_cell('printf("%a %a\\n", -QN, QN);\n'),
            stmt_cell('I = -I * 2 + -4; printf("%d\\n", I);\n')]


def case_a_indirect_access():
    """Item 1: every kind of access to earlier cells' float/double globals
    in cells TinyCC compiles (reads as SSE operands, writes, compound
    assignments, `&X`, `sizeof X`, arrays and pointers into them, a macro
    naming them, a const one, a float widened): all through the pointers
    of ex_cell_state_indirect; each cell must be TinyCC's (MIN_TINYCC)."""
    return [decl_cell(HEADER),
            decl_cell("double A = 1.5, B = 2.25; float F = 0.5f; double V[3] = {1.0, 2.0, 4.0};\n"
                      "const double K = 3.0; int N = 4; float FV[2] = {0.25f, 8.0f};\n"),
            decl_cell("double *P = &B;\ndouble *Q = V;\n"),
            decl_cell("#define SUM (A + B * K)\n"),
            stmt_cell('A = B * -1.0; printf("%a\\n", A); V[1] += A * F; printf("%a\\n", V[1]);\n'
                      '*P *= 2; printf("%a\\n", B); printf("%zu %zu\\n", sizeof V, sizeof A);\n'
                      'printf("%d %d\\n", &V[2] == V + 2, P == &B); printf("%a\\n", SUM);\n'
                      'B = V[N - 2] / K; printf("%a\\n", B); F += (float)B; printf("%a\\n", F);\n'
                      'A = (A < B) ? K : 0 - K; printf("%a\\n", A); FV[1] *= F; printf("%a\\n", FV[1]);\n'
                      'Q[2] = A - FV[0]; printf("%a %a\\n", V[2], *Q);\n'),
            init_cell("double", "W", "SUM * V[0] + (double)FV[1]", 'printf("%a\\n", W);\n'),
            stmt_cell('W -= A * B - F; printf("%a %d\\n", W, (int)(W > A) + (int)(W * 2 < B));\n')]


def case_shadowed_global():
    """A block declares a local under an earlier global's name: TinyCC's
    unit (`#define A (*(0, __nbf_p_A))`) does not parse, and the cell is
    generated again for GCC. Found while writing item 1: the first form of
    the macro, `(*__nbf_p_A)`, made `{ int A; A = 3; }` declare a local
    pointer and write through it (a crash); the unit GCC got was TinyCC's."""
    return [decl_cell(HEADER), decl_cell("double A = 1.5; int N = 2;\n"),
            stmt_cell('{ double A = 2; printf("%a\\n", A); }\n'),
            stmt_cell('{ int A; A = 3; printf("%d %a\\n", A, 1.0); }\n'),
            stmt_cell('{ int N = 5; A += N; } printf("%a %d\\n", A, N);\n'),
            stmt_cell('A += N; printf("%a\\n", A);\n')]


def case_b():
    t = "typedef struct { int i; double d; } mix_t;\n"
    f = "mix_t bump(mix_t m, int k) { m.i += k; m.d *= 2; return m; }\n"
    return [decl_cell(HEADER), decl_cell(t), decl_cell(f),
            decl_cell("mix_t (*fp)(mix_t, int) = bump;\nmix_t gm = { 3, 1.25 };\n"),
            stmt_cell('gm = fp(gm, 4);\nprintf("%d %a\\n", gm.i, gm.d);\n')]


def case_c():
    t = "struct pk { char c; double d; int i; unsigned b : 3; } __attribute__((packed));\n"
    return [decl_cell(HEADER), decl_cell(t), decl_cell("struct pk P = { 1, 2.5, 3 }; long after = 7;\n"),
            stmt_cell('P.i = 9; printf("%zu %d %ld\\n", sizeof P, P.i, after);\n')]


def case_c_leading_attribute():
    t = "struct __attribute__((packed)) pl { char c; double d; int i; };\n"
    return [decl_cell(HEADER), decl_cell(t), decl_cell("struct pl L = { 1, 2.5, 3 };\n"),
            stmt_cell('L.i = 9; printf("%zu %d\\n", sizeof L, L.i);\n')]


def case_d():
    t = "#pragma pack(push, 1)\nstruct pp { char c; int i; };\n#pragma pack(pop)\n"
    lay = 'printf("%zu %zu\\n", sizeof(struct pp), offsetof(struct pp, i));\n'
    return [decl_cell(HEADER), Cell(t + lay, decls=t, stmts=lay), stmt_cell(lay)]


def case_e():
    return [decl_cell(HEADER), decl_cell("int *cp = (int[]){1, 2, 3};\n"),
            stmt_cell('{ volatile char junk[256]; memset((char *)junk, 0x55, sizeof junk); }\n'),
            stmt_cell('printf("%d %d %d\\n", cp[0], cp[1], cp[2]);\n')]


def case_f():
    return [decl_cell(HEADER + COMPLEX), decl_cell("double complex z = 1.0 + 2.0 * I;\n"),
            stmt_cell('printf("%a %a\\n", creal(z), cimag(z));\n')]


def case_layouts():
    """Item 3: one layout per type in every cell (pragma pack, packed and
    aligned attributes, _Alignas, bit-fields)."""
    types = ("#pragma pack(push, 2)\nstruct l1 { char c; double d; };\n#pragma pack(pop)\n"
             "struct l2 { char c; int i : 5; long long b : 40; } __attribute__((packed, aligned(4)));\n"
             "struct l3 { char c; _Alignas(16) int i; };\n"
             "typedef union __attribute__((aligned(32))) { char c; double d; } l4;\n")
    lay = "".join('printf("%%zu %%zu\\n", sizeof(%s), _Alignof(%s));\n' % (t, t) for t in
                  ("struct l1", "struct l2", "struct l3", "l4"))
    lay += 'printf("%zu %zu\\n", offsetof(struct l1, d), offsetof(struct l3, i));\n'
    return [decl_cell(HEADER), Cell(types + lay, decls=types, stmts=lay), stmt_cell(lay),
            stmt_cell("int unrelated = 1;\n" + lay)]


def case_f_bool_atomic():
    """Item 4: declarators through <stdbool.h>'s and <stdatomic.h>'s names."""
    inc = "#include <stdbool.h>\n#include <stdatomic.h>\n"
    return [decl_cell(HEADER + inc), decl_cell("bool flag = true;\natomic_int counter = 5;\n"),
            decl_cell("atomic_int *cp = &counter;\ndouble complex_part = 0.5;\n"),
            stmt_cell('*cp += 2; printf("%d %d %a\\n", (int)flag, (int)counter, complex_part);\n')]


def case_g_versioned_libc():
    """Found by hand (session 6): the system compiler's cells were linked
    without the shared libc, so their references carried no symbol
    version and the loader bound each to its oldest one: realpath(p, NULL)
    was GLIBC_2.2.5's, which wants a buffer and failed with EINVAL (and
    pthread_cond_wait the 2.2.5 compatibility one). A function (GCC) and
    statements (TinyCC, or GCC with NBFORK_JIT=0) call it."""
    inc = "#include <stdlib.h>\n#include <errno.h>\n"
    return [decl_cell(HEADER + inc),
            decl_cell("int rp_ok(const char *p) {\n  char *r = realpath(p, NULL);\n"
                      "  int ok = r != NULL ? 1 : -errno;\n  free(r);\n  return ok;\n}\n"),
            stmt_cell('printf("%d %d\\n", rp_ok("/tmp/.."), rp_ok("/"));\n'),
            stmt_cell('{ char *rq = realpath("/tmp/..", NULL); printf("%s\\n", rq ? rq : "NULL");'
                      ' free(rq); }\n')]


def case_h_nan_sign_at_run_time():
    """Found by the generator (seed 3005, sequence 148), a difference of
    the reference's: GCC at -O1 over the whole program knew g1 and g2 and
    folded the invalid `g7 + (g1 - g2)` at compile time (+NaN), the cells
    compute it at run time (the SSE unit's default NaN has its sign set:
    `-nan`). C leaves that sign unspecified; the reference now compiles
    the statements at the straight-line cells' -O0 (run_whole), so all
    three print `-nan`."""
    return [decl_cell(HEADER), decl_cell("float g1 = -2.5e-3f;\n"), decl_cell("float g2 = 1e10f;\n"),
            decl_cell("_Bool g3 = 0;\n"),
            stmt_cell('g1 += (float)(-g2 + g1 * 2);\nprintf("%a\\n", (double)(g1));\n'),
            decl_cell("#define M4 ((double)g1 * 0.5 + (double)g2)\n"),
            Cell('float a5[6] = { 83.712f, 3.0f };\nprintf("%zu\\n", sizeof a5);\n',
                 decls="float a5[6] = { 83.712f, 3.0f };\n", stmts='printf("%zu\\n", sizeof a5);\n'),
            stmt_cell('g2 += (float)(g3 - g1);\ng1 += (float)(g1 * g2);\n'
                      'printf("%a %a\\n", (double)(g1), (double)(g2));\n'),
            stmt_cell('g2 = (float)((M4) * (M4));\ng1 += (float)(g2 * g3);\n'
                      'printf("%a %a\\n", (double)(g1), (double)(g2));\n'),
            stmt_cell('g2 += (float)((double)sizeof a5 - (double)g2);\n'
                      'g1 += (float)((double)g2 - (double)g3);\n'
                      'printf("%a %a\\n", (double)(g1), (double)(g2));\n'),
            decl_cell("float g7 = 1e10f;\n"),
            init_cell("unsigned long", "g13", "(unsigned long)(long long)CL(g2 * 0.5)",
                      'printf("%lu\\n", g13);\n'),
            stmt_cell('g7 += (float)(g1 * g13);\nprintf("%a\\n", (double)(g7));\n'),
            decl_cell("long double g19 = 0.1L;\n"),
            stmt_cell('g1 = (float)(-g2 + g19 * 2);\nprintf("%a\\n", (double)(g1));\n'),
            stmt_cell('g7 += (float)(g1 - g2);\nprintf("%a\\n", (double)(g7));\n')]


def case_h_va_arg_overaligned_union():
    """Found by the generator (seed 3005, sequence 108), a difference of
    the reference's: GCC 12 at -O2, the level function cells compile at,
    miscompiles `va_arg` of a union `aligned(16)` (a `movdqa` from a slot
    8 bytes off 16: SIGSEGV in va21); the reference compiled at -O1 ran.
    Compiled at the cells' levels (run_whole), the three runs agree: the
    last cell crashes in each (a GCC bug the engine does not add to)."""
    s9 = ("typedef struct S9_ { unsigned m0:2; _Alignas(2) char m1; float m2; unsigned m3:1;"
          " unsigned m4:3; char m5; } S9;\n")
    u17 = ("typedef union __attribute__((aligned(16))) U17_ { long long m0; _Alignas(8) char m1;"
           " long long m2; S9 m3; short m4; } U17;\n")
    lay = 'printf("%zu %zu %zu\\n", sizeof(U17), _Alignof(U17), offsetof(U17, m3));\n'
    return [decl_cell(HEADER), decl_cell(s9), Cell(u17 + lay, decls=u17, stmts=lay),
            decl_cell("U17 f18(U17 a, int b) { a.m2 = (long long)(a.m2 + b); return a; }\n"),
            decl_cell("U17 (*fp19)(U17, int) = f18;\n__typeof__(f18) *tp20 = f18;\n"),
            decl_cell("U17 va21(int n, ...) { va_list ap; va_start(ap, n);"
                      " U17 r = va_arg(ap, U17); va_end(ap); return r; }\n"),
            decl_cell("U17 o22 = { .m0 = 43 };\n"),
            stmt_cell('o22 = tp20(o22, 3);\nprintf("%lld\\n", (long long)(o22.m0));\n'
                      'o22 = va21(1, o22);\nprintf("%lld\\n", (long long)(o22.m0));\n')]


CASES = {"a_float_global_operand": case_a, "a_indirect_access": case_a_indirect_access,
         "unary_minus_nan": case_unary_minus_nan, "shadowed_global": case_shadowed_global,
         "b_struct_through_fnptr": case_b,
         "c_packed_type_later_cell": case_c,
         "c_packed_leading_attribute": case_c_leading_attribute, "d_pragma_pack_later_cell": case_d,
         "e_file_scope_compound_literal": case_e, "f_complex_macro_declarator": case_f,
         "f_bool_atomic_declarators": case_f_bool_atomic, "layouts_every_cell": case_layouts,
         "g_versioned_libc_symbols": case_g_versioned_libc,
         "h_nan_sign_at_run_time": case_h_nan_sign_at_run_time,
         "h_va_arg_overaligned_union": case_h_va_arg_overaligned_union}

# Cases whose cells the fast path must take, all of them: the proof that it
# is exercised (a case that quietly went to GCC would prove nothing).
MIN_TINYCC = {"a_float_global_operand": 4, "a_indirect_access": 7, "unary_minus_nan": 4,
              "shadowed_global": 3}


# ------------------------------------------------------------ the three runs

def run_executor(executor, cells, jit, tmp):
    """Each cell's stdout (or its error) through the executor."""
    os.environ["NBFORK_JIT"] = "1" if jit else "0"
    # a work directory of its own, so each run's objects can be counted
    # (the tag names the compiler: one directory would do for correctness)
    os.environ["NBFORK_WORKDIR"] = os.path.join(tmp, "cells-jit%d" % jit)
    os.environ["NBFORK_KEEP_WORKDIR"] = "1"  # tinycc_objects counts them
    proc, pipes = exec_notebook.start_executor(executor)
    outs = []
    try:
        for i, c in enumerate(cells, 1):
            saved = sys.stdout
            sys.stdout = open(os.devnull, "w")
            try:
                reply, o = exec_notebook.run_cell(proc, pipes, c.text, i, 60)
            finally:
                sys.stdout.close()
                sys.stdout = saved
            text = "".join(x["text"] for x in o if x.get("output_type") == "stream"
                           and x.get("name") == "stdout")
            if reply.get("status") == "error":
                text += "ERROR %s: %s\n" % (reply.get("ename"), reply.get("evalue"))
            outs.append(text)
    except (TimeoutError, RuntimeError) as e:
        outs.append("EXECUTOR %s\n" % e)
    finally:
        os.close(pipes["requests"])
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if outs and outs[-1].startswith("EXECUTOR") and proc.returncode < 0 \
            and proc.returncode != -signal.SIGKILL:
        outs[-1] = crashed(-proc.returncode)  # the cell killed the executor
    return outs


def run_whole(cells, tmp):
    """Each cell's stdout from the program GCC compiles whole, at the
    levels the kernel compiles the cells at (ex_run.c cell_cflags): the
    declarations (the generator's function cells) at -O2 and, as shared
    objects are, position-independent (no call inlined across cells), the
    statements (straight-line cells: no loop, no function; -O0 or TinyCC)
    at -O0. At one level for all, the reference differed where GCC's
    optimizer does (h_nan_sign_at_run_time, h_va_arg_overaligned_union).
    A program killed by a signal ends its cell with "CRASH signal N"."""
    src = "".join(c.decls for c in cells)
    src += '__attribute__((optimize("O0"))) int main(void) {\n'
    for i, c in enumerate(cells):
        src += 'printf("@@cell %d\\n"); fflush(stdout);\n%s\n' % (i, c.stmts)
    src += "return 0;\n}\n"
    path = os.path.join(tmp, "whole.c")
    with open(path, "w") as f:
        f.write(src)
    exe = os.path.join(tmp, "whole")
    cc = subprocess.run(["gcc", "-std=gnu11", "-O2", "-fPIC", "-w", path, "-o", exe, "-lm"],
                        capture_output=True, text=True)
    if cc.returncode:
        return None, cc.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    parts = run.stdout.split("@@cell ")[1:]
    parts = [p.split("\n", 1)[1] if "\n" in p else "" for p in parts]
    if run.returncode < 0 and parts:
        parts[-1] = crashed(-run.returncode)
    return parts, None


def crashed(signum):
    """What a cell that killed its process prints in every run (what it
    printed before is lost in the program's buffer and the executor's)."""
    return "CRASH signal %d\n" % signum


def tinycc_objects(workdir):
    """How many cell objects in `workdir` TinyCC made (GCC's carry a
    `GCC:` .comment; TinyCC writes none)."""
    n = 0
    for root, _, files in os.walk(workdir):
        for f in files:
            if f.endswith(".so"):
                with open(os.path.join(root, f), "rb") as fh:
                    n += b"GCC: (" not in fh.read()
    return n


def exit_on_sigterm():
    """SIGTERM (a killed campaign) ends the process through SystemExit, so
    the `with` blocks remove the work directories (nbf-difftest-*) and
    stop the executors; the pool's workers install it too."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def compare(executor, cells, label):
    """(1 when the three runs differ on some cell (printed), else 0,
    cells TinyCC compiled in the first run)."""
    with tempfile.TemporaryDirectory(prefix="nbf-difftest-") as tmp:
        whole, err = run_whole(cells, tmp)
        if whole is None:
            print("%s: the whole program does not compile:\n%s" % (label, err[:2000]))
            return 1, 0
        jit = run_executor(executor, cells, True, tmp)
        gcc = run_executor(executor, cells, False, tmp)
        ntcc = tinycc_objects(os.path.join(tmp, "cells-jit1"))
    for i, c in enumerate(cells):
        w = whole[i] if i < len(whole) else "<missing>"
        j = jit[i] if i < len(jit) else "<missing>"
        g = gcc[i] if i < len(gcc) else "<missing>"
        if not (w == j == g):
            print("%s: cell %d differs\n--- cells so far:\n%s\n--- cell:\n%s--- whole GCC:\n%s"
                  "--- kernel (JIT on):\n%s--- kernel (NBFORK_JIT=0):\n%s" % (
                      label, i + 1, "".join("[%d]\n%s" % (k + 1, x.text) for k, x in
                                            enumerate(cells[:i])), c.text, w, j, g))
            return 1, ntcc
    return 0, ntcc


def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", default=os.path.join(
        os.environ.get("NBFORK_BUILD_DIR", os.path.join(ROOT, "build")), "bin", "nbfork-executor"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cells", type=int, default=0, help="cells in all (sequences of --length)")
    ap.add_argument("--length", type=int, default=60, help="cells per sequence")
    ap.add_argument("--jobs", type=int, default=0,
                    help="sequences run at once (default: the idle cores, 1 to 4)")
    ap.add_argument("--case")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    if not os.access(a.executor, os.X_OK):
        print("difftest: no executor at %s" % a.executor, file=sys.stderr)
        return 77
    if a.case:
        if a.case not in CASES:
            print("difftest: no case %s (--list)" % a.case, file=sys.stderr)
            return 2
        rc, ntcc = compare(a.executor, CASES[a.case](), a.case)
        print("%s: %s (%d cells by TinyCC)" % (a.case, "differs" if rc else "the three runs agree",
                                               ntcc))
        want = MIN_TINYCC.get(a.case, 0)
        if ntcc < want:
            print("%s: only %d cells by TinyCC, %d expected: the fast path was not taken" % (
                a.case, ntcc, want))
            return 1
        return rc
    jobs, run, seq = [], 0, 0
    while run < a.cells:
        jobs.append((a.executor, a.seed * 100003 + seq, min(a.length, a.cells - run),
                     "seed %d sequence %d" % (a.seed, seq)))
        run += jobs[-1][2]
        seq += 1
    # each sequence is one executor and its compilers, mostly one core's
    # work: run as many at once as cores are idle (a loaded machine gains
    # nothing from more, and its other users lose)
    idle = len(os.sched_getaffinity(0)) - os.getloadavg()[0]
    njobs = a.jobs or max(1, min(4, int(idle + 0.5)))
    with concurrent.futures.ProcessPoolExecutor(max_workers=njobs,
                                                initializer=exit_on_sigterm) as pool:
        results = list(pool.map(one_sequence, jobs))
    diffs, ntcc = sum(r[0] for r in results), sum(r[1] for r in results)
    print("difftest: %d cells in %d sequences (%d compiled by TinyCC), %d sequences with a "
          "difference" % (run, seq, ntcc, diffs))
    return 1 if diffs else 0


def one_sequence(job):
    executor, seed, n, label = job
    return compare(executor, generate(seed, n), label)


if __name__ == "__main__":
    sys.exit(main())
