#!/bin/sh
# install.sh: build lockrun's fastest binary and install it with its man
# pages and its bash, zsh and fish completions.
#
#   ./install.sh [CARGO BUILD OPTIONS]   build and install, e.g. --features etcd
#   ./install.sh --uninstall             remove what an install put there
#   ./install.sh --help                  this text
#
#   PREFIX=DIR   where to install (default /usr/local: /usr/local/bin/lockrun,
#                /usr/local/share/man/man1, /usr/local/share/bash-completion, ...)
#   DESTDIR=DIR  staging root for packagers (files go to $DESTDIR$PREFIX)
#   LOCKRUN_LIBC=glibc   skip the musl build (below)
#   LOCKRUN_BUILD_ONLY=1 build, print the binary's path, install nothing
#                (bench/compare.sh and CI measure and package this build)
#   LOCKRUN_BIN=FILE     install this lockrun binary, already built: no cargo
#
# Every file installed is listed, one path a line, in
# $PREFIX/share/lockrun/installed-files; --uninstall (with the same PREFIX
# and DESTDIR) removes exactly those, names each, and then the list.
#
# Which build, fastest first (docs/FAQ.md, "Why a static binary?"):
# - static against musl, for the file-lock build (no --features): glibc's
#   start-up alone (its CPU feature probe) costs more than all lockrun does
#   on a virtual machine. Needs rustup's <arch>-unknown-linux-musl target,
#   which this script adds when rustup can (it says so first).
# - static-pie against glibc (`cargo build-static`), for lock URLs too;
#   needs a static glibc (libc.a: Debian libc6-dev, Fedora glibc-static).
# - without either, the dynamically linked build (it says so).
# Builds as the calling user, then copies with install(1), through sudo
# only when the destination is not writable.
set -eu
cd "$(dirname "$0")"
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}$prefix
manifest=share/lockrun/installed-files

die() { echo "install.sh: $*" >&2; exit 1; }

# install.sh's own options, before anything is built: every other argument
# goes to cargo (which took --help as its own, and the musl build then
# "failed").
case "${1:-}" in
  -h|--help)
    # The comment block at the top of this file, without the "# ".
    sed -n '2,/^[^#]/{/^#/!q;s/^# \{0,1\}//;p;}' "$0"
    exit 0
    ;;
  --uninstall) uninstall=1 ;;
  *) uninstall= ;;
esac

# sudo only to write under $dest, and only when needed: $1 is the
# directory that must be writable (or, if missing, its first existing parent).
need_sudo() {
  d=$1
  while [ ! -d "$d" ]; do d=$(dirname "$d"); done
  sudo=
  if [ ! -w "$d" ]; then
    command -v sudo >/dev/null 2>&1 || die "$dest is not writable and there is no sudo: run me as root, or with PREFIX=\$HOME/.local"
    sudo=sudo
  fi
}

# The files install.sh installed before it wrote a list: an install from
# then is uninstalled by these names.
known_files="bin/lockrun share/man/man1/lockrun.1 share/man/man1/lockrun-holder.1
share/man/man1/lockrun-check.1 share/bash-completion/completions/lockrun
share/zsh/site-functions/_lockrun share/fish/vendor_completions.d/lockrun.fish"

if [ -n "$uninstall" ]; then
  [ $# -eq 1 ] || die "--uninstall takes no other arguments (PREFIX and DESTDIR say where)"
  need_sudo "$dest/bin"
  if [ -f "$dest/$manifest" ]; then
    list=$(cat "$dest/$manifest")
  else
    echo "install.sh: no $prefix/$manifest: removing the files install.sh has always installed" >&2
    list=$(for f in $known_files; do echo "$prefix/$f"; done)
  fi
  removed=0
  # One path a line; only what lies under $prefix (the list is a file
  # anyone with write access there could have edited). Files first, then
  # the list itself, then the directories the install created, each only
  # if empty (something else may have been put there since).
  for pass in files list dirs; do
    if [ $pass = list ]; then
      if [ -f "$dest/$manifest" ]; then
        $sudo rm -f "$dest/$manifest"
        echo "removed $prefix/$manifest"
      fi
      continue
    fi
    while IFS= read -r f; do
      case "$f" in
        ""|"$prefix/$manifest") continue ;;
        "$prefix"/*/) [ $pass = dirs ] || continue
          if $sudo rmdir "${DESTDIR:-}$f" 2>/dev/null; then echo "removed $f"; fi
          continue ;;
        "$prefix"/*) [ $pass = files ] || continue ;;
        *) [ $pass = files ] && echo "install.sh: not under $prefix, left alone: $f" >&2; continue ;;
      esac
      if [ -e "${DESTDIR:-}$f" ] || [ -L "${DESTDIR:-}$f" ]; then
        $sudo rm -f "${DESTDIR:-}$f"
        echo "removed $f"
        removed=$((removed + 1))
      fi
    done <<LIST
$list
LIST
  done
  [ $removed -gt 0 ] || echo "install.sh: nothing of lockrun's was installed under $prefix" >&2
  exit 0
fi

if [ -n "${LOCKRUN_BIN:-}" ]; then
  [ -f "$LOCKRUN_BIN" ] && [ -x "$LOCKRUN_BIN" ] || die "LOCKRUN_BIN=$LOCKRUN_BIN is not an executable file"
  [ $# -eq 0 ] || die "LOCKRUN_BIN installs a binary already built: it takes no cargo options ($*)"
fi
[ -n "${LOCKRUN_BIN:-}" ] || command -v cargo >/dev/null 2>&1 \
  || die "cargo not found: install Rust (https://rustup.rs), then run me again"

# Runs cargo with the given arguments and sets $bin to the lockrun binary it
# built: cargo knows where (CARGO_TARGET_DIR, target/<triple>/release/). Its
# messages go to a file first, so that a failed build is reported as one
# (sh has no pipefail).
out=$(mktemp)
trap 'rm -f "$out"' EXIT
build() {
  cargo "$@" --bin lockrun --message-format=json-render-diagnostics >"$out" || return 1
  bin=$(sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' "$out" | tail -1)
  [ -n "$bin" ] && [ -x "$bin" ]
}

# musl only for the file-lock build: the lock URLs' TLS needs a C compiler
# for musl (musl-gcc), which few machines have.
musl=
case " $* " in *" --features"*|*" -F"*|*" --all-features "*) features=1 ;; *) features=0 ;; esac
if [ -z "${LOCKRUN_BIN:-}" ] && [ "$(uname -s)" = Linux ] && [ $features = 0 ] \
  && [ "${LOCKRUN_LIBC:-}" != glibc ] && command -v rustup >/dev/null 2>&1; then
  t=$(uname -m)-unknown-linux-musl
  if rustup target list --installed 2>/dev/null | grep -qx "$t"; then
    musl=$t
  else
    echo "install.sh: adding Rust's $t target (rustup target add $t): the fastest build; LOCKRUN_LIBC=glibc skips it" >&2
    if rustup target add "$t" >&2; then musl=$t; else echo "install.sh: could not add $t: building against glibc" >&2; fi
  fi
fi
kind=
if [ -n "${LOCKRUN_BIN:-}" ]; then
  # Built already (a test, a packager): nothing to choose or build.
  bin=$LOCKRUN_BIN kind="given as LOCKRUN_BIN" musl=
fi
if [ -n "$musl" ]; then
  if build build --release --locked --target "$musl" "$@"; then
    kind="static, musl"
  else
    echo "install.sh: the musl build failed: building against glibc" >&2
  fi
fi

# Static only where it links: on Linux with glibc, try a static link of an
# empty C program (Rust links through cc too).
static=1
if [ -n "$kind" ]; then
  :
elif [ "$(uname -s)" = Linux ] && ldd --version 2>&1 | grep -qi 'gnu libc\|glibc'; then
  t=$(mktemp -d)
  printf 'int main(void) { return 0; }\n' >"$t/t.c"
  if ! ${CC:-cc} -static-pie -o "$t/t" "$t/t.c" >/dev/null 2>&1; then
    echo "install.sh: no static glibc (libc.a) found: installing the dynamically linked build," >&2
    echo "install.sh: about 0.3 ms slower per run (Debian: apt-get install libc6-dev; Fedora: dnf install glibc-static)" >&2
    static=0
  fi
  rm -rf "$t"
fi
# `cargo build-static` names the host as `--target host-tuple`, which
# cargo understands from 1.91 on; an older one gets the dynamic build.
if [ -z "$kind" ] && [ $static = 1 ]; then
  minor=$(cargo --version | sed -n 's/^cargo 1\.\([0-9]*\).*/\1/p')
  if [ -n "$minor" ] && [ "$minor" -lt 91 ]; then
    echo "install.sh: cargo 1.$minor cannot name the host target (needs 1.91): installing the dynamically linked build" >&2
    static=0
  fi
fi
if [ -z "$kind" ]; then
  if [ $static = 1 ]; then set -- build-static "$@"; kind="static, glibc"; else set -- build --release --locked "$@"; kind=dynamic; fi
  build "$@" || die "cargo $* failed (or named no lockrun binary)"
fi
if [ -n "${LOCKRUN_BUILD_ONLY:-}" ]; then
  echo "$bin"
  exit 0
fi

need_sudo "$dest/bin"
# The directories the install creates (install -D), for --uninstall to
# remove once empty; those that were there already stay.
created=
for f in $known_files $manifest; do
  d=$(dirname "$f")
  while [ "$d" != . ] && [ ! -d "$dest/$d" ]; do
    case " $created " in *" $d "*) ;; *) created="$created $d" ;; esac
    d=$(dirname "$d")
  done
done
# The man pages and completions of the binary just built, from the binary
# itself (`--generate`): a build with lock URLs has options and pages the
# repository's files (the default build's) lack. The default build prints
# exactly those files.
docs=$(mktemp -d)
trap 'rm -f "$out"; rm -rf "$docs"' EXIT
# (Not $kind, which names the build in the last message.)
for page in man:lockrun.1 man-holder:lockrun-holder.1 man-check:lockrun-check.1 \
  complete-bash:lockrun.bash complete-zsh:_lockrun complete-fish:lockrun.fish; do
  "$bin" --generate "${page%%:*}" >"$docs/${page#*:}" || die "$bin --generate ${page%%:*} failed"
done
$sudo install -Dm755 "$bin" "$dest/bin/lockrun"
$sudo install -Dm644 -t "$dest/share/man/man1" "$docs/lockrun.1" "$docs/lockrun-holder.1" "$docs/lockrun-check.1"
# The shells' own lookup decides whether these are found: zsh searches
# /usr/local/share/zsh/site-functions but not ~/.local/share/zsh/...;
# fish 3.6 reads ~/.local/share/fish/vendor_completions.d but
# /usr/local/share/fish/... only when XDG_DATA_DIRS names /usr/local/share
# (docs/GUIDE.md, "Man pages and completions").
$sudo install -Dm644 "$docs/lockrun.bash" "$dest/share/bash-completion/completions/lockrun"
$sudo install -Dm644 "$docs/_lockrun" "$dest/share/zsh/site-functions/_lockrun"
$sudo install -Dm644 "$docs/lockrun.fish" "$dest/share/fish/vendor_completions.d/lockrun.fish"
# The list --uninstall reads: the paths as installed (under $prefix, not
# $DESTDIR, which a package moves away), this list, then the directories
# created, each ending in "/", deepest first.
# Installed over an earlier install: the directories that one created.
{
  for f in $known_files $manifest; do echo "$prefix/$f"; done
  {
    for d in $created; do echo "$prefix/$d/"; done
    if [ -f "$dest/$manifest" ]; then grep '/$' "$dest/$manifest" || true; fi
  } | sort -ru
} >"$docs/installed-files"
$sudo install -Dm644 "$docs/installed-files" "$dest/$manifest"

echo "install.sh: installed $prefix/bin/lockrun ($kind), its man pages and completions"
echo "install.sh: the files are listed in $prefix/$manifest; ./install.sh --uninstall removes them"
case ":/usr/bin:/bin:" in
  *":$prefix/bin:"*) ;;
  *) echo "install.sh: cron runs jobs with PATH=/usr/bin:/bin: write $prefix/bin/lockrun in crontabs" ;;
esac
