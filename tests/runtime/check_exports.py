"""runtime.exports: libnbfork.so exports exactly the functions include/ declares.

The library is built with -fvisibility=hidden and the ACC_API export macro
(include/nbfork.h); this compares `nm -D --defined-only` of the built
library with the non-static functions that the C compiler sees declared in
include/*.h (`-aux-info`), and fails naming every symbol on either side
only: an internal function leaking out, or a public one not exported.

Usage: check_exports.py LIBNBFORK_SO INCLUDE_DIR CC
"""
import os
import re
import subprocess
import sys
import tempfile


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def declared(include_dir, cc):
    names = set()
    headers = sorted(h for h in os.listdir(include_dir) if h.endswith(".h"))
    with tempfile.TemporaryDirectory() as tmp:
        for h in headers:
            aux = os.path.join(tmp, h + ".aux")
            subprocess.run([cc, "-fsyntax-only", "-x", "c", "-I", include_dir,
                            "-aux-info", aux, os.path.join(include_dir, h)], check=True)
            for line in open(aux):
                m = re.match(r"/\* (\S+):\d+:\S+ \*/ (.*)", line)
                if not m or os.path.dirname(os.path.abspath(m.group(1))) != os.path.abspath(include_dir):
                    continue
                if re.search(r"\bstatic\b", m.group(2)):
                    continue
                name = re.search(r"(\w+) \(", m.group(2))
                if name:
                    names.add(name.group(1))
    return names


def main():
    lib, include_dir, cc = sys.argv[1:4]
    exp, dec = exported(lib), declared(include_dir, cc)
    leaked, missing = sorted(exp - dec), sorted(dec - exp)
    print("libnbfork.so exports %d symbols; include/ declares %d functions" % (len(exp), len(dec)))
    for s in leaked:
        print("exported but not declared in include/ (mark it static or hide it): " + s)
    for s in missing:
        print("declared in include/ but not exported (missing ACC_API or definition): " + s)
    if not dec:
        print("no declarations found in %s: the check itself is broken" % include_dir)
        return 1
    return 1 if leaked or missing else 0


if __name__ == "__main__":
    sys.exit(main())
