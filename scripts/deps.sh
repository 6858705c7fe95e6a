#!/usr/bin/env bash
# Install what nbfork needs to build, run and be tested: C libraries and
# tools as Debian packages, Python tools (JupyterLab, Notebook 7,
# jupyter_client, nbclient, selenium) from PyPI into the project's virtual
# environment .venv/, pinned by requirements.txt.
# Usage: scripts/deps.sh [--bench]                      (--bench adds PyTorch and
#                                                        Accelerate, requirements-bench.txt)
#        scripts/deps.sh --offline DIR [--prefix PREFIX] (from scripts/bundle.sh DIR, no network)
#
# --offline: as root on the Debian release the bundle came from, and without
# --prefix, the packages go into the system with apt (local files only).
# Otherwise (a non-root user, another distribution such as Ubuntu 24.04, or
# --prefix) they are unpacked into PREFIX (default: .deps/ in the checkout),
# which scripts/build.sh then uses (NBFORK_DEPS_PREFIX, or .deps/ when there).
set -euo pipefail

die() { echo "deps.sh: $*" >&2; exit 1; }

# The dpkg architecture of this machine, also where dpkg is missing.
host_arch() {
  if command -v dpkg >/dev/null; then dpkg --print-architecture; return; fi
  case $(uname -m) in
    x86_64) echo amd64 ;; aarch64) echo arm64 ;; ppc64le) echo ppc64el ;;
    *) uname -m ;;
  esac
}

# Debian's multiarch triplet (x86_64-linux-gnu): where libraries and the
# arch-specific headers of the bundle live.
multiarch() {
  gcc -print-multiarch 2>/dev/null | grep . ||
    case $(uname -m) in x86_64) echo x86_64-linux-gnu ;; aarch64) echo aarch64-linux-gnu ;;
      *) echo "$(uname -m)-linux-gnu" ;; esac
}

# Check the bundle: there, made for this architecture, every file intact.
# Sets BUNDLE_FILES (the .deb files, in MANIFEST order).
check_bundle() {
  local dir=$1 arch want sum file
  [ -d "$dir" ] || die "no bundle folder '$dir' (make one with scripts/bundle.sh DIR on a machine with network)"
  dir=$(cd "$dir" && pwd)
  [ -f "$dir/MANIFEST" ] || die "'$dir' has no MANIFEST: not a bundle of scripts/bundle.sh"
  arch=$(sed -n 's/^# architecture: //p' "$dir/MANIFEST")
  want=$(host_arch)
  [ "$arch" = "$want" ] || die "the bundle in '$dir' is for $arch, this machine is $want: make one on an $want machine"
  BUNDLE_FILES=()
  local bad=()
  while IFS=$'\t' read -r _ _ _ sum file; do
    if [ ! -f "$dir/$file" ]; then bad+=("$file (missing)")
    elif [ "$(sha256sum <"$dir/$file" | cut -d' ' -f1)" != "$sum" ]; then bad+=("$file (checksum mismatch)")
    fi
    BUNDLE_FILES+=("$dir/$file")
  done < <(grep -v '^#' "$dir/MANIFEST")
  [ ${#bad[@]} -eq 0 ] || die "bundle '$dir' is damaged: ${bad[*]}; copy it again or rebuild it"
  [ ${#BUNDLE_FILES[@]} -gt 0 ] || die "bundle '$dir' lists no packages"
}

# Root, same Debian release: apt installs the bundle's packages that are not
# installed yet, from the local files only (no sources, no download). Returns
# 1 when apt cannot (the bundle leaves out packages a fresh system lacks, such
# as libzmq3-dev's static-only dependencies): the caller uses a prefix then.
install_system() {
  local dir=$1 f p
  local -a todo=() apt_offline=(--no-install-recommends --no-download
    -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/dev/null)
  for f in "${BUNDLE_FILES[@]}"; do
    p=$(dpkg-deb -f "$f" Package)
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || todo+=("$f")
  done
  if [ ${#todo[@]} -eq 0 ]; then echo "deps.sh: every package of the bundle is installed"; return 0; fi
  if ! apt-get install -s -q "${apt_offline[@]}" "${todo[@]}" >/dev/null 2>&1; then
    echo "deps.sh: apt cannot install the bundle into this system offline (missing dependencies: see apt-get install -s)"
    return 1
  fi
  echo "deps.sh: installing ${#todo[@]} packages from $dir"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${apt_offline[@]}" "${todo[@]}"
}

# Unpack one .deb into $2: dpkg-deb where there is one, else ar + tar.
unpack_deb() {
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  local member
  member=$(ar t "$1" | grep '^data\.tar') || die "$1: no data.tar member"
  case $member in
    *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
    *.zst) ar p "$1" "$member" | tar --zstd -x -C "$2" ;;
    *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
    *) ar p "$1" "$member" | tar -x -C "$2" ;;
  esac
}

# The maintainer scripts do not run in a prefix: make the links that
# update-alternatives would (OpenBLAS' libblas.so.3, libopenblas.so,
# cblas.h ...). Only literal paths (every alternative of the bundle uses them).
alternatives_links() {
  local deb=$1 prefix=$2 ctl link path
  ctl=$(mktemp -d)
  if command -v dpkg-deb >/dev/null; then dpkg-deb -e "$deb" "$ctl"
  else (cd "$ctl" && ar p "$deb" "$(ar t "$deb" | grep '^control\.tar')" | tar -xJ 2>/dev/null || true)
  fi
  if [ -f "$ctl/postinst" ]; then
    # join continued lines, then read "--install LINK NAME PATH PRIO" and
    # "--slave LINK NAME PATH" as LINK PATH pairs
    { sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$ctl/postinst" | tr -s ' \t' '  ' |
        grep 'update-alternatives --install' |
        grep -o -- '--\(install\|slave\) [^ ]* [^ ]* [^ ]*' || true; } | awk '{ print $2, $4 }' |
      while read -r link path; do
        case "$link$path" in *'$'*) continue ;; esac
        [ -e "$prefix$path" ] || [ -L "$prefix$path" ] || continue
        [ -e "$prefix$link" ] || [ -L "$prefix$link" ] || ln -s "$prefix$path" "$prefix$link"
      done
  fi
  rm -rf "$ctl"
}

# Library links of the bundle that point outside it: an absolute target that
# the prefix has goes to the prefix's copy; one left out of the bundle (zlib's
# libz.so -> /lib/.../libz.so.1.2.13) goes to this system's library of the
# same soname (libz.so.1), whatever its exact version.
fix_links() {
  local prefix=$1 ma=$2 l t base soname d n found
  while IFS= read -r l; do
    t=$(readlink "$l")
    if [ "${t#/}" != "$t" ] && [ -e "$prefix$t" ]; then ln -sfn "$prefix$t" "$l"; continue; fi
    [ -e "$l" ] && continue
    base=${t##*/}
    soname=$(sed -E 's/^(lib[^/]*\.so\.[0-9]+).*/\1/' <<<"$base")
    found=
    for d in /lib/$ma /usr/lib/$ma /lib64 /usr/lib64 /lib /usr/lib; do
      for n in "$base" "$soname"; do
        [ -e "$d/$n" ] && { found=$d/$n; break 2; }
      done
    done
    if [ -n "$found" ]; then ln -sfn "$found" "$l"
    else echo "deps.sh: warning: $l -> $t: not in the bundle nor on this system" >&2
    fi
  done < <(find "$prefix/usr" -path "$prefix/usr/share/doc" -prune -o -type l -print)
}

# pkg-config files: prefix=/usr -> the prefix; Requires.private modules that
# the prefix does not have are dropped (they only matter for static links:
# the bundle leaves out libzmq's static-only dependencies).
fix_pkgconfig() {
  local prefix=$1 pc mod spec keep i d
  local -a dirs t
  mapfile -t dirs < <(find "$prefix/usr" -type d -name pkgconfig)
  while IFS= read -r pc; do
    sed -i -E "s#^([A-Za-z_]+=)/usr([/ ]|\$)#\1$prefix/usr\2#" "$pc"
    grep -q '^Requires.private:' "$pc" || continue
    # "mod [op version], ..." -> keep the modules that have a .pc here
    read -ra t <<<"$(sed -n 's/^Requires.private://p' "$pc" | tr ',' ' ')"
    keep="" i=0
    while [ $i -lt ${#t[@]} ]; do
      mod=${t[i]} spec=${t[i]} i=$((i + 1))
      if [ $i -lt ${#t[@]} ] && [[ ${t[i]} == [\<\>=\!]* ]]; then
        spec+=" ${t[i]} ${t[i + 1]:-}" i=$((i + 2))
      fi
      for d in "${dirs[@]}"; do [ -f "$d/$mod.pc" ] && { keep+=" $spec"; break; }; done
    done
    sed -i "s#^Requires.private:.*#Requires.private:$keep#" "$pc"
  done < <(find "$prefix/usr" -name '*.pc')
}

install_prefix() {
  local dir=$1 prefix=$2 ma f d
  local -a libdirs
  ma=$(multiarch)
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  # Start clean (no files of an older bundle), but never empty a folder that
  # is not ours.
  if [ -n "$(ls -A "$prefix")" ]; then
    [ -f "$prefix/.nbfork-deps" ] || die "'$prefix' is not empty and not an nbfork prefix: choose another --prefix"
    find "$prefix" -mindepth 1 -delete
  fi
  : >"$prefix/.nbfork-deps"   # ours from now on; the MANIFEST goes in when complete
  echo "deps.sh: unpacking ${#BUNDLE_FILES[@]} packages into $prefix"
  for f in "${BUNDLE_FILES[@]}"; do unpack_deb "$f" "$prefix"; done
  # Some packages still put libraries in /lib (libnl-3-200, libcom-err2):
  # merge it into usr/ as merged-/usr systems (Debian 12, Ubuntu) do.
  for d in bin sbin lib lib64; do
    [ -d "$prefix/$d" ] && [ ! -L "$prefix/$d" ] || continue
    mkdir -p "$prefix/usr/$d"
    cp -a "$prefix/$d/." "$prefix/usr/$d/"
    rm -rf "${prefix:?}/$d"
    ln -s "usr/$d" "$prefix/$d"
  done
  for f in "${BUNDLE_FILES[@]}"; do alternatives_links "$f" "$prefix"; done
  fix_links "$prefix" "$ma"
  fix_pkgconfig "$prefix"

  # pkg-config for machines that have none: Debian's pkgconf, its library
  # from the prefix, searching the prefix first.
  mkdir -p "$prefix/bin"
  cat >"$prefix/bin/pkg-config" <<WRAP
#!/bin/sh
PKG_CONFIG_PATH="$prefix/usr/lib/$ma/pkgconfig:$prefix/usr/lib/pkgconfig:$prefix/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}" \\
LD_LIBRARY_PATH="$prefix/usr/lib/$ma\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
exec "$prefix/usr/bin/pkgconf" "\$@"
WRAP
  chmod +x "$prefix/bin/pkg-config"

  # The folders with shared libraries, for build.sh's rpath. Some packages
  # leave the soname link (libnl-3.so.200 -> libnl-3.so.200.26.0) to
  # ldconfig's run at install: make those links here (-n: no cache).
  find "$prefix/usr" -name 'lib*.so*' -printf '%h\n' | sort -u >"$prefix/libdirs"
  mapfile -t libdirs <"$prefix/libdirs"
  PATH=$PATH:/sbin:/usr/sbin ldconfig -n "${libdirs[@]}" ||
    die "ldconfig -n failed: the soname links in $prefix are incomplete"
  cp "$dir/MANIFEST" "$prefix/.nbfork-deps"

  # The tests and notebooks read /usr/share/datasets/fashion-mnist, a
  # compiled-in path. As root, link it to the prefix where it is absent.
  # (TinyCC's runtime needs nothing: the build points libtcc at the
  # prefix's /usr/lib/$ma/tcc, see kernel/exec/CMakeLists.txt.)
  local sys=/usr/share/datasets/fashion-mnist
  if [ -e "$prefix$sys" ] && [ ! -e "$sys" ]; then
    if [ "$(id -u)" -eq 0 ]; then
      mkdir -p "$(dirname "$sys")"; ln -sfn "$prefix$sys" "$sys"; echo "deps.sh: linked $sys -> $prefix$sys"
    else
      echo "deps.sh: note: $sys is absent and only root can link it to $prefix$sys; until then the tests that read Fashion-MNIST skip, the notebook stops"
    fi
  fi
  echo "deps.sh: done. Build with: NBFORK_DEPS_PREFIX=$prefix scripts/build.sh"
  echo "deps.sh: (binaries built so carry an rpath into $prefix; other programs need LD_LIBRARY_PATH=\$(paste -sd: $prefix/libdirs))"
}

offline() {
  local dir="" prefix=""
  while [ $# -gt 0 ]; do
    case $1 in
      --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; prefix=$2; shift 2 ;;
      --prefix=*) prefix=${1#--prefix=}; shift ;;
      -*) die "unknown option $1 (usage: scripts/deps.sh --offline DIR [--prefix PREFIX])" ;;
      *) [ -z "$dir" ] || die "one bundle folder only"; dir=$1; shift ;;
    esac
  done
  [ -n "$dir" ] || die "usage: scripts/deps.sh --offline DIR [--prefix PREFIX]"
  check_bundle "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -z "$prefix" ] && [ "$(id -u)" -eq 0 ]; then
    local origin here
    origin=$(sed -n 's/^# origin: \([^ ]* [^ ]*\).*/\1/p' "$dir/MANIFEST")
    here=$(. /etc/os-release; echo "${ID:-?} ${VERSION_ID:-?}")
    if [ "$origin" = "$here" ] && command -v apt-get >/dev/null; then
      install_system "$dir" && return
    else
      # Debian 12's packages into another distribution's /usr would clash
      # with its own (Ubuntu 24.04's libssl3t64 ...): a prefix instead.
      echo "deps.sh: bundle from $origin, this is $here: unpacking into a prefix, not the system"
    fi
  fi
  install_prefix "$dir" "${prefix:-$(cd "$(dirname "$0")/.." && pwd)/.deps}"
}

if [ "${1:-}" = "--offline" ]; then
  shift
  offline "$@"
  exit 0
fi

pkgs=(
  build-essential cmake pkg-config
  libzmq3-dev libjansson-dev libssl-dev zlib1g-dev
  libgloo-dev libopenblas-dev libopenblas0
  tcc libtcc-dev
  libyaml-dev openmpi-bin libopenmpi-dev slurm-wlm munge iproute2
  libclang-16-dev
  # the libFuzzer harnesses of tests/fuzz (scripts/fuzz.sh)
  clang-16 libfuzzer-16-dev libclang-rt-16-dev
  dataset-fashion-mnist
  # Python and its venv module for .venv/ (below); Debian's jupyter_client
  # and nbclient for the tests where no .venv is made
  python3 python3-venv python3-jupyter-client python3-nbclient python3-nbformat python3-ipykernel
  chromium chromium-driver
)
bench=0
case ${1:-} in
  "") ;;
  --bench) bench=1; pkgs+=(python3-torch) ;;
  *) die "unknown option $1 (usage: scripts/deps.sh [--bench] | --offline DIR [--prefix PREFIX])" ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "nbfork: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The virtual environment: Debian's python3 (not whatever python3 is first
# on PATH), pip from PyPI. It is brought up to date only when a requirements
# file changed since the last install (a stamp holds their checksum), so the
# test command costs nothing once it is there.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
reqs=("$root/requirements.txt")
[ "$bench" -eq 0 ] || reqs=("$root/requirements-bench.txt")
stamp=$venv/.nbfork-requirements
want=$(cat "${reqs[@]}" "$root/requirements.txt" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && grep -qx "$want" "$stamp"; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "nbfork: creating the virtual environment $venv"
  /usr/bin/python3 -m venv "$venv" ||
    die "could not create $venv (Debian's python3-venv is needed: apt-get install python3-venv)"
fi
echo "nbfork: installing the Python tools from ${reqs[*]##*/} into $venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "${reqs[0]}" ||
  die "pip could not install ${reqs[0]##*/} into $venv (is PyPI reachable?); run scripts/deps.sh again"
# A bench install satisfies the plain one as well.
{ echo "$want"; [ "$bench" -eq 0 ] || cat "$root/requirements.txt" "$root/requirements.txt" | sha256sum | cut -d' ' -f1; } >"$stamp"
