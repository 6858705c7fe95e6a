#!/usr/bin/env bash
# scripts/deps.sh --offline on a small bundle made here (no network, no apt):
# unpacking into a prefix, /lib merged into usr/, soname links, links to a
# library left out of the bundle, update-alternatives links, pkg-config files
# rewritten, a program built from the prefix that runs, and the errors for a
# missing, damaged or foreign bundle and a prefix that is not ours.
# Usage: tests/e2e/test_offline.sh   (from the source tree; exit 77 = skipped)
set -euo pipefail
cd "$(dirname "$0")/../.."
DEPS_SH=$PWD/scripts/deps.sh

for tool in dpkg-deb cc sha256sum; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not found"; exit 77; }
done
ma=$(cc -print-multiarch 2>/dev/null || true)
[ -n "$ma" ] || { echo "SKIP: the compiler has no multiarch triplet"; exit 77; }
arch=$(dpkg --print-architecture)

T=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else fail "$what"; fi; }

# --- a bundle of four packages --------------------------------------------
# libfoo1: a shared library in /lib/<ma> (as libnl-3-200 has), without its
# soname link (ldconfig makes it at install).
mkdir -p "$T/src"
cat >"$T/src/foo.c" <<'EOF'
int foo_answer(void) { return 42; }
EOF
p=$T/pkg/libfoo1
mkdir -p "$p/DEBIAN" "$p/lib/$ma"
cc -shared -fPIC -Wl,-soname,libfoo.so.1 -o "$p/lib/$ma/libfoo.so.1.2.3" "$T/src/foo.c"
# libfoo-dev: header, an absolute .so link (as zlib1g-dev has), a .pc file,
# a header chosen with update-alternatives in postinst, and a link to a
# library the bundle leaves out (this system's libc, by an exact version
# that does not exist).
p=$T/pkg/libfoo-dev
mkdir -p "$p/DEBIAN" "$p/usr/include/$ma/foo-variant" "$p/usr/lib/$ma/pkgconfig"
echo 'int foo_answer(void);' >"$p/usr/include/foo.h"
echo '#define FOO_VARIANT 1' >"$p/usr/include/$ma/foo-variant/fooalt.h"
ln -s "/lib/$ma/libfoo.so.1.2.3" "$p/usr/lib/$ma/libfoo.so"
ln -s "/lib/$ma/libc.so.6.99.99" "$p/usr/lib/$ma/libc-left-out.so"
cat >"$p/usr/lib/$ma/pkgconfig/foo.pc" <<EOF
prefix=/usr
libdir=\${prefix}/lib/$ma
includedir=\${prefix}/include

Name: foo
Description: test
Version: 1.2.3
Requires.private: bar >= 1.0, missing-static-only
Libs: -L\${libdir} -lfoo
Cflags: -I\${includedir}
EOF
cat >"$p/DEBIAN/postinst" <<EOF
#!/bin/sh
update-alternatives --install /usr/include/$ma/fooalt.h \\
                    fooalt.h-$ma \\
	            /usr/include/$ma/foo-variant/fooalt.h 100
EOF
chmod 755 "$p/DEBIAN/postinst"
# libbar-dev: only a .pc file (a Requires.private the prefix has).
p=$T/pkg/libbar-dev
mkdir -p "$p/DEBIAN" "$p/usr/share/pkgconfig"
printf 'prefix=/usr\n\nName: bar\nDescription: test\nVersion: 1.5\n' >"$p/usr/share/pkgconfig/bar.pc"

mkdir -p "$T/bundle"
for name in libfoo1 libfoo-dev libbar-dev; do
  printf 'Package: %s\nVersion: 1.0-1\nArchitecture: %s\nMaintainer: t <t@t>\nDescription: test\n' \
    "$name" "$arch" >"$T/pkg/$name/DEBIAN/control"
  dpkg-deb -Zxz --root-owner-group -b "$T/pkg/$name" "$T/bundle/${name}_1.0-1_$arch.deb" >/dev/null
done
. /etc/os-release
{
  echo "# test bundle"
  echo "# origin: test-os 0"   # never this system: no apt install, even as root
  echo "# architecture: $arch"
  for f in "$T"/bundle/*.deb; do
    printf '%s\t1.0-1\t%s\t%s\t%s\n' "$(dpkg-deb -f "$f" Package)" "$arch" \
      "$(sha256sum <"$f" | cut -d' ' -f1)" "${f##*/}"
  done
} >"$T/bundle/MANIFEST"

# --- install into a prefix, twice (the second replaces the first) ----------
P=$T/prefix
for run in 1 2; do
  check "deps.sh --offline into a prefix (run $run)" "$DEPS_SH" --offline "$T/bundle" --prefix "$P" >"$T/out" 2>&1 ||
    cat "$T/out"
done
check "/lib merged into usr/lib" test -L "$P/lib" -a -f "$P/usr/lib/$ma/libfoo.so.1.2.3"
check "soname link made" test "$(readlink "$P/usr/lib/$ma/libfoo.so.1")" = libfoo.so.1.2.3
check "absolute .so link points into the prefix" test "$(readlink -f "$P/usr/lib/$ma/libfoo.so")" = "$(readlink -f "$P/usr/lib/$ma/libfoo.so.1.2.3")"
check "link to a left-out library points to this system's (by soname)" \
  test "$(readlink "$P/usr/lib/$ma/libc-left-out.so")" != "/lib/$ma/libc.so.6.99.99" -a -e "$P/usr/lib/$ma/libc-left-out.so"
check "alternatives link made" test -e "$P/usr/include/$ma/fooalt.h"
check "pkg-config prefix rewritten" grep -qx "prefix=$P/usr" "$P/usr/lib/$ma/pkgconfig/foo.pc"
check "Requires.private keeps bar >= 1.0, drops the absent module" \
  grep -qx 'Requires.private: bar >= 1.0' "$P/usr/lib/$ma/pkgconfig/foo.pc"
check "libdirs lists the library folder" grep -qx "$P/usr/lib/$ma" "$P/libdirs"
check "the prefix is marked complete" test -s "$P/.nbfork-deps"
if command -v pkg-config >/dev/null; then
  check "pkg-config finds foo in the prefix" \
    test "$(PKG_CONFIG_PATH=$P/usr/lib/$ma/pkgconfig:$P/usr/share/pkgconfig pkg-config --libs foo | xargs)" = "-L$P/usr/lib/$ma -lfoo"
fi

# A program built the way build.sh builds (rpath, DT_RPATH) runs from it.
printf '#include <foo.h>\n#include <fooalt.h>\nint main(void) { return foo_answer() == 42 && FOO_VARIANT ? 0 : 1; }\n' >"$T/src/main.c"
rp=$(paste -sd: "$P/libdirs")
check "a program built against the prefix links" \
  cc -I"$P/usr/include" -isystem "$P/usr/include/$ma" -o "$T/main" "$T/src/main.c" \
  -L"$P/usr/lib/$ma" -lfoo -Wl,--disable-new-dtags,-rpath,"$rp"
check "and runs without LD_LIBRARY_PATH" env -u LD_LIBRARY_PATH "$T/main"

# --- errors -----------------------------------------------------------------
expect_error() { # WHAT PATTERN ARGS...
  local what=$1 pat=$2; shift 2
  if "$DEPS_SH" --offline "$@" >"$T/out" 2>&1; then fail "$what: succeeded"; return; fi
  if grep -q -- "$pat" "$T/out"; then ok "$what"; else fail "$what: $(cat "$T/out")"; fi
}
expect_error "missing bundle" "no bundle folder" "$T/nothing" --prefix "$T/p2"
cp -r "$T/bundle" "$T/bad"
echo x >>"$T/bad/libbar-dev_1.0-1_$arch.deb"
expect_error "checksum mismatch" "checksum mismatch" "$T/bad" --prefix "$T/p2"
rm "$T/bad/libfoo1_1.0-1_$arch.deb"
expect_error "missing file" "libfoo1_1.0-1_$arch.deb (missing)" "$T/bad" --prefix "$T/p2"
cp -r "$T/bundle" "$T/foreign"
sed -i "s/^# architecture: .*/# architecture: not-$arch/" "$T/foreign/MANIFEST"
expect_error "another architecture" "is for not-$arch" "$T/foreign" --prefix "$T/p2"
mkdir -p "$T/mine" && touch "$T/mine/keep"
expect_error "a prefix that is not ours" "not an nbfork prefix" "$T/bundle" --prefix "$T/mine"
check "... is left alone" test -f "$T/mine/keep"

[ $fails -eq 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
