"""bench/nbf_cbench: what the benches with a C side share: compiling their
C program against the build tree's libnbfork.so, and naming the BLAS that
library really links (ldd, through Debian's alternatives to the file).
(bench/allreduce.py links the internal static objects instead: its own.)"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build(build_dir, name):
    """Compile bench/NAME.c into BUILD_DIR/bench_NAME against
    BUILD_DIR/lib/libnbfork.so (rpath set); exits when the library is not
    built. Returns the executable's path."""
    lib = os.path.abspath(os.path.join(build_dir, "lib"))
    if not os.path.exists(os.path.join(lib, "libnbfork.so")):
        sys.exit("no %s/libnbfork.so: build first (scripts/build.sh) or pass --build" % lib)
    exe = os.path.join(build_dir, "bench_" + name)
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", os.path.join(HERE, name + ".c"),
                    "-I", os.path.join(ROOT, "include"), "-I", os.path.join(ROOT, "common"),
                    "-L", lib, "-lnbfork", "-Wl,-rpath," + lib, "-lm", "-lpthread", "-o", exe],
                   check=True)
    return exe


def blas_of_libnbfork(build_dir):
    """The BLAS libnbfork.so is linked against: "libblas.so.3 (real file)"."""
    out = subprocess.run(["ldd", os.path.join(build_dir, "lib", "libnbfork.so")],
                         stdout=subprocess.PIPE, text=True).stdout
    libs = sorted(set(re.findall(r"(lib\S*blas\S*\.so\S*) => (\S+)", out)))
    return ", ".join("%s (%s)" % (n, os.path.realpath(p)) for n, p in libs) or "(none linked)"
