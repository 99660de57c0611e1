#!/bin/sh
# install.sh: build lockrun's fast static binary (`cargo build-static`) and
# install it with its man pages and its bash, zsh and fish completions.
#
#   ./install.sh [CARGO BUILD OPTIONS]        e.g. ./install.sh --features etcd
#
#   PREFIX=DIR   where to install (default /usr/local: /usr/local/bin/lockrun,
#                /usr/local/share/man/man1, /usr/local/share/bash-completion, ...)
#   DESTDIR=DIR  staging root for packagers (files go to $DESTDIR$PREFIX)
#
# Builds as the calling user, then copies with install(1), through sudo
# only when the destination is not writable. Without a static glibc
# (libc.a: Debian libc6-dev, Fedora glibc-static) it says so and installs
# the dynamically linked build instead (docs/FAQ.md, "Why a static binary?").
set -eu
cd "$(dirname "$0")"
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}$prefix

die() { echo "install.sh: $*" >&2; exit 1; }
command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs), then run me again"

# Static only where it links: on Linux with glibc, try a static link of an
# empty C program (Rust links through cc too).
static=1
if [ "$(uname -s)" = Linux ] && ldd --version 2>&1 | grep -qi 'gnu libc\|glibc'; then
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
if [ $static = 1 ]; then
  minor=$(cargo --version | sed -n 's/^cargo 1\.\([0-9]*\).*/\1/p')
  if [ -n "$minor" ] && [ "$minor" -lt 91 ]; then
    echo "install.sh: cargo 1.$minor cannot name the host target (needs 1.91): installing the dynamically linked build" >&2
    static=0
  fi
fi
# Ask cargo where it put the binary: it honours CARGO_TARGET_DIR and the
# static build's target/<host tuple>/release/. Its messages go to a file
# first, so that a failed build is reported as one (sh has no pipefail).
if [ $static = 1 ]; then set -- build-static "$@"; else set -- build --release --locked "$@"; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo "$@" --bin lockrun --message-format=json-render-diagnostics >"$out" || die "cargo $* failed"
bin=$(sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' "$out" | tail -1)
[ -n "$bin" ] && [ -x "$bin" ] || die "cargo $* named no lockrun binary"

# sudo only for the copy, and only when needed.
d=$dest/bin
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
sudo=
if [ ! -w "$d" ]; then
  command -v sudo >/dev/null 2>&1 || die "$dest is not writable and there is no sudo: run me as root, or with PREFIX=\$HOME/.local"
  sudo=sudo
fi
$sudo install -Dm755 "$bin" "$dest/bin/lockrun"
$sudo install -Dm644 -t "$dest/share/man/man1" man/lockrun.1 man/lockrun-holder.1 man/lockrun-check.1
# The shells' own lookup decides whether these are found: zsh searches
# /usr/local/share/zsh/site-functions but not ~/.local/share/zsh/...;
# fish 3.6 reads ~/.local/share/fish/vendor_completions.d but
# /usr/local/share/fish/... only when XDG_DATA_DIRS names /usr/local/share
# (docs/GUIDE.md, "Man pages and completions").
$sudo install -Dm644 completions/lockrun.bash "$dest/share/bash-completion/completions/lockrun"
$sudo install -Dm644 completions/_lockrun "$dest/share/zsh/site-functions/_lockrun"
$sudo install -Dm644 completions/lockrun.fish "$dest/share/fish/vendor_completions.d/lockrun.fish"

echo "install.sh: installed $prefix/bin/lockrun ($([ $static = 1 ] && echo static || echo dynamic)), its man pages and completions"
case ":/usr/bin:/bin:" in
  *":$prefix/bin:"*) ;;
  *) echo "install.sh: cron runs jobs with PATH=/usr/bin:/bin: write $prefix/bin/lockrun in crontabs" ;;
esac
