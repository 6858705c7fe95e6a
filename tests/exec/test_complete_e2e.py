#!/usr/bin/python3
"""End-to-end tests of completion and inspection (issue 13, item 3) through
jupyter_client: the semantic answers of libclang (kernel/exec/ex_clang.h)
and the lexical fallback (NBFORK_LIBCLANG=0, or a build without libclang).

SemanticCompletionTest SKIPs where the executor was built without libclang
(ctest passes NBFORK_TEST_LIBCLANG from the configure step).
LexicalFallbackTest runs the completion and inspect tests of
test_exec_e2e.ExecutorE2ETest again with NBFORK_LIBCLANG=0, so both paths
stay tested on every machine. One runs by hand with

  NBFORK_BUILD_DIR=build NBFORK_TEST_LIBCLANG=ON PYTHONPATH=tests/e2e:tests/exec \\
    /usr/bin/python3 -m unittest test_complete_e2e.SemanticCompletionTest
"""
import os
import unittest

from test_exec_e2e import ExecutorE2ETest


class SemanticCompletionTest(ExecutorE2ETest):
    kernel_env = {"NBFORK_LIBCLANG": "1"}

    def setUp(self):
        if os.environ.get("NBFORK_TEST_LIBCLANG", "").upper() not in ("ON", "1", "TRUE"):
            self.skipTest("the executor was built without libclang (Debian libclang-16-dev)")
        super().setUp()

    def complete(self, code, cursor=None):
        reply = self.shell(self.kc.complete(code, len(code) if cursor is None else cursor))
        self.assertEqual(reply["status"], "ok", code)
        return reply

    def inspect_text(self, code, cursor):
        reply = self.shell(self.kc.inspect(code, cursor))
        self.assertEqual(reply["status"], "ok", code)
        self.assertTrue(reply["found"], (code, cursor))
        return reply["data"]["text/plain"]

    def test_member_completion(self):
        # the repro: `p.` offers x and y; `pp->` too
        self.ok("struct P { int x; int y; }; struct P p;")
        reply = self.complete("p.")
        self.assertEqual(reply["matches"], ["x", "y"])
        self.assertEqual((reply["cursor_start"], reply["cursor_end"]), (2, 2))
        self.ok("struct P *pp = &p;")
        self.assertEqual(self.complete("pp->")["matches"], ["x", "y"])
        reply = self.complete("int s = p.x + pp->y")
        self.assertEqual(reply["matches"], ["y"])
        self.assertEqual(reply["cursor_start"], len("int s = p.x + pp->"))
        # in the middle of the cell, with code after the cursor
        reply = self.complete("pp->\nint after = 1;", 4)
        self.assertEqual(reply["matches"], ["x", "y"])
        # inside a function of this cell, through a parameter
        self.assertEqual(self.complete("int f(struct P *q) {\n  return q->")["matches"],
                         ["x", "y"])
        # a type this cell defines and has not run yet, and a nested member
        reply = self.complete("struct Q { struct P at; double w; } q;\nq.at.")
        self.assertEqual(reply["matches"], ["x", "y"])
        self.assertEqual(self.complete("struct Q { struct P at; double w; } q;\nq.")["matches"],
                         ["at", "w"])
        # a typedef'd struct of the runtime's API
        reply = self.complete("acc_config_t cfg;\ncfg.mixed_pre")
        self.assertEqual(reply["matches"], ["mixed_precision"])

    def test_locals_and_parameters_complete(self):
        reply = self.complete("int f(int alpha) {\n  int alpine = 2;\n  return al")
        self.assertEqual(reply["matches"], ["alpha", "alpine"])
        # the lexical names stay: earlier cells', the runtime's, libc's
        self.ok("int my_counter = 1;")
        self.assertEqual(self.complete("int g(void) { return my_c")["matches"], ["my_counter"])
        self.assertIn("acc_all_reduce", self.complete("acc_all_r")["matches"])

    def test_inspect_semantic(self):
        self.ok("/* A 2-D point. */\nstruct P { int x; int y; };\nstruct P p;\n"
                "/* Squares v. */\nint sq(int v) { return v * v; }")
        # a member of an earlier cell's struct: the struct's declaration
        text = self.inspect_text("p.y", 3)
        self.assertIn("y, member of", text)
        self.assertIn("struct P { int x; int y; };", text)
        self.assertIn("A 2-D point.", text)
        # this cell's own declarations, and a local
        text = self.inspect_text("struct R { long zz; } r;\nr.zz", 28)
        self.assertIn("zz, member of struct R (this cell)", text)
        self.assertIn("long zz", text)
        text = self.inspect_text("int f(void) {\n  double spot = 1;\n  return sq(spot", 45)
        self.assertIn("double spot", text)
        # a header the cell includes: the declaration clang resolved, in its header
        text = self.inspect_text("#include <stdio.h>\nputs", 21)
        self.assertIn("puts (stdio.h)", text)
        self.assertIn("int puts (const char", text)
        # a parameter named like a global is the parameter
        self.ok("int count = 3;")
        text = self.inspect_text("int h(int count) { return count", 30)
        self.assertIn("int count", text)
        self.assertIn("this cell", text)


class LexicalFallbackTest(ExecutorE2ETest):
    """Completion and inspect without libclang: the same answers the
    lexical path has always given (test_exec_e2e's tests, inherited)."""
    kernel_env = {"NBFORK_LIBCLANG": "0"}

    def test_member_completion_is_lexical(self):
        self.ok("struct P { int x; int y; }; struct P p;")
        reply = self.shell(self.kc.complete("p.", 2))
        self.assertEqual(reply["status"], "ok")
        # no member list without libclang: the lexical names come instead
        self.assertNotEqual(reply["matches"], ["x", "y"])
        self.assertIn("printf", reply["matches"])


# LexicalFallbackTest also inherits every other ExecutorE2ETest method; ctest
# runs only its completion and inspect ones (tests/exec/CMakeLists.txt).

if __name__ == "__main__":
    unittest.main()
