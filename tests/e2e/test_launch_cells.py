"""Issue 14, items 3 and 5: what a hostile `%launch` cell gets, end to end
through jupyter_client and the real kernel.

- `%launch g(42, "no")` for `void g(const char *, int)` is a CompileError at
  the cell's %launch line before anything is forked (it was warnings, then
  `WorkerFailed ... SIGSEGV`, and on a re-run not even the warnings), every
  time it runs;
- the wrong number of arguments is one error, not three;
- a comment, an #include or statements above `%launch` work (they were
  `expected expression before '%' token`), and run before the launch;
- code after `%launch` is refused (it compiled and ran *before* the launch);
- a repeated option is an error naming it (the last one silently won);
- a function returning double is a CompileError naming the type (it was
  `exited with code 1` without a reason);
- a worker reading stdin gets end-of-file at once and no input_request
  reaches the front end (one per rank arrived, answers discarded).

Each test waits on the cell's reply; the only bounds say "it ends"."""
import os
import queue
import unittest

import nbf_harness as h

TIMEOUT = 120

DEFS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int magic = 0;
void g(const char *s, int n) { printf("g(%s, %d) on rank %s\n", s, n, getenv("RANK")); }
double half(void) { return 1.5; }
int noargs() { return 0; }
int show(void) { printf("rank %s magic=%d\n", getenv("RANK"), magic); return 0; }
int reader(void) {
    char line[64];
    int n = 0, c;
    char *r = fgets(line, sizeof line, stdin);
    int s = scanf("%d", &n);
    c = getchar();
    char b[8];
    ssize_t k = read(0, b, sizeof b);
    printf("rank %s fgets=%s scanf=%d getchar=%d read=%zd\n", getenv("RANK"),
           r ? "line" : "EOF", s, c, k);
    return 0;
}
"""


class LaunchCellTest(h.KernelTestCase):
    workdir_prefix = "nbfork-launch-cells-"
    cell_timeout = TIMEOUT

    def kernel_environ(self, workdir):
        return {"NBFORK_WORKDIR": os.path.join(workdir, "cells")}

    def setUp(self):
        super().setUp()
        self.ok(DEFS)

    def ok(self, code, **kw):
        _, outputs, stdin_reqs, _ = self.run_ok(code, **kw)
        return outputs, stdin_reqs

    def fails(self, code, ename):
        """Run a cell that must fail with `ename` without launching; returns
        its traceback as one text."""
        reply, outputs, _, _ = self.run_cell(code)
        self.assertEqual(reply["status"], "error", code)
        self.assertEqual(reply["ename"], ename, reply.get("traceback"))
        self.assertNotIn("Launching training", h.stream_text(outputs))
        return "\n".join([reply["evalue"]] + reply.get("traceback", []))

    def test_argument_type_mismatch_is_a_compile_error_before_any_fork(self):
        cell = '%launch g(42, "no") num_processes=2'
        for _ in range(2):  # the second run is not hidden by the compile cache
            text = self.fails(cell, "CompileError")
            self.assertRegex(text, r"cell\[\d+\]:1:11: error: passing argument 1 of 'g' makes "
                                   r"pointer from integer without a cast")
            self.assertIn("int-conversion", text)
        text = self.fails('// above\n%launch g("yes", "no") num_processes=1', "CompileError")
        self.assertRegex(text, r"cell\[\d+\]:2:18: error: passing argument 2 of 'g' makes "
                               r"integer from pointer without a cast")

    def test_wrong_argument_count_is_one_error(self):
        for call, what in [('g("a")', "too few"), ('g("a", 1, 2)', "too many")]:
            text = self.fails("%%launch %s num_processes=1" % call, "CompileError")
            self.assertIn("%s arguments to function 'g'" % what, text)
            tb = text.split("\n", 1)[1]
            self.assertEqual(tb.count("error:"), 1, tb)
        # `int noargs()`: C does not check the arguments of an empty list
        text = self.fails("%launch noargs(1) num_processes=1", "CompileError")
        self.assertIn("too many arguments: 'noargs' is declared with an empty parameter list",
                      text)

    def test_comment_include_and_code_above_launch_run_first(self):
        outputs, _ = self.ok("// the training cell\n#include <string.h>\nmagic = 7;\n"
                             "%launch show() num_processes=2\n// the end\n")
        out = h.stream_text(outputs)
        self.assertIn("rank 0 magic=7", out)
        self.assertIn("rank 1 magic=7", out)

    def test_function_defined_in_the_launch_cell(self):
        outputs, _ = self.ok("int here(int k) { printf(\"here %d rank %s\\n\", k, getenv(\"RANK\")); "
                             "return 0; }\n%launch here(5) num_processes=1")
        self.assertIn("here 5 rank 0", h.stream_text(outputs))
        text = self.fails("float there(void) { return 1.5f; }\n%launch there() num_processes=1",
                          "CompileError")
        self.assertIn("'there' returns float", text)

    def test_code_after_launch_is_refused(self):
        text = self.fails('magic = 1;\n%launch show() num_processes=1\nmagic = 9;',
                          "UsageError")
        self.assertIn("code after %launch (line 3)", text)
        outputs, _ = self.ok("magic")  # nothing of the refused cell ran
        self.assertEqual(h.results(outputs), ["0"])

    def test_repeated_option_is_an_error_naming_it(self):
        text = self.fails('%launch show() num_processes=2 num_processes=4', "LaunchError")
        self.assertIn("option num_processes is given twice", text)

    def test_double_return_is_a_compile_error_naming_the_type(self):
        text = self.fails("%launch half() num_processes=1", "CompileError")
        self.assertIn("'half' returns double", text)
        self.assertIn("a launched function returns int", text)
        self.assertNotIn("exited with code", text)

    def test_worker_stdin_is_end_of_file_without_input_request(self):
        outputs, stdin_reqs = self.ok("%launch reader() num_processes=2", allow_stdin=True,
                                      answers=["12", "34", "56"])
        out = h.stream_text(outputs)
        for rank in (0, 1):
            self.assertIn("rank %d fgets=EOF scanf=-1 getchar=-1 read=0" % rank, out)
        self.assertEqual(stdin_reqs, [])
        with self.assertRaises(queue.Empty):  # none arrives late either
            self.k.kc.get_stdin_msg(timeout=1)
        # the kernel's own cells still ask the front end
        outputs, stdin_reqs = self.ok('char in[32]; fgets(in, sizeof in, stdin); printf("[%s]", in);',
                                      allow_stdin=True, answers=["hello"])
        self.assertEqual(len(stdin_reqs), 1)
        self.assertIn("[hello", h.stream_text(outputs))


if __name__ == "__main__":
    unittest.main()
