#!/bin/sh
# install.sh: build lockrun's fastest binary and install it with its man
# pages and its bash, zsh and fish completions.
#
#   ./install.sh [CARGO BUILD OPTIONS]        e.g. ./install.sh --features etcd
#
#   PREFIX=DIR   where to install (default /usr/local: /usr/local/bin/lockrun,
#                /usr/local/share/man/man1, /usr/local/share/bash-completion, ...)
#   DESTDIR=DIR  staging root for packagers (files go to $DESTDIR$PREFIX)
#   LOCKRUN_LIBC=glibc   skip the musl build (below)
#   LOCKRUN_BUILD_ONLY=1 build, print the binary's path, install nothing
#                (bench/compare.sh and CI measure and package this build)
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

die() { echo "install.sh: $*" >&2; exit 1; }
command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs), then run me again"

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
if [ "$(uname -s)" = Linux ] && [ $features = 0 ] && [ "${LOCKRUN_LIBC:-}" != glibc ] \
  && command -v rustup >/dev/null 2>&1; then
  t=$(uname -m)-unknown-linux-musl
  if rustup target list --installed 2>/dev/null | grep -qx "$t"; then
    musl=$t
  else
    echo "install.sh: adding Rust's $t target (rustup target add $t): the fastest build; LOCKRUN_LIBC=glibc skips it" >&2
    if rustup target add "$t" >&2; then musl=$t; else echo "install.sh: could not add $t: building against glibc" >&2; fi
  fi
fi
kind=
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

# sudo only for the copy, and only when needed.
d=$dest/bin
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
sudo=
if [ ! -w "$d" ]; then
  command -v sudo >/dev/null 2>&1 || die "$dest is not writable and there is no sudo: run me as root, or with PREFIX=\$HOME/.local"
  sudo=sudo
fi
# The man pages and completions of the binary just built, from the binary
# itself (`--generate`): a build with lock URLs has options and pages the
# repository's files (the default build's) lack. The default build prints
# exactly those files.
docs=$(mktemp -d)
trap 'rm -f "$out"; rm -rf "$docs"' EXIT
for kind in man:lockrun.1 man-holder:lockrun-holder.1 man-check:lockrun-check.1 \
  complete-bash:lockrun.bash complete-zsh:_lockrun complete-fish:lockrun.fish; do
  "$bin" --generate "${kind%%:*}" >"$docs/${kind#*:}" || die "$bin --generate ${kind%%:*} failed"
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

echo "install.sh: installed $prefix/bin/lockrun ($kind), its man pages and completions"
case ":/usr/bin:/bin:" in
  *":$prefix/bin:"*) ;;
  *) echo "install.sh: cron runs jobs with PATH=/usr/bin:/bin: write $prefix/bin/lockrun in crontabs" ;;
esac
