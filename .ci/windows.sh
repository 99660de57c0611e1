#!/usr/bin/env bash
# CI, Windows: builds lockrun.exe (x86_64-pc-windows-gnu, the mingw-w64
# linker), lints it, runs tests/windows.rs under Wine against it, and
# builds the zip a Windows user installs from (lockrun.exe, README,
# licences) into target/dist/. Called by .ci/run; runs on its own too:
#
#   .ci/windows.sh            the step as CI runs it
#   .ci/windows.sh --broken   also builds each deliberately broken variant
#                             (LOCKRUN_BROKEN=...) and requires the suite to
#                             fail on it: the tests can fail
#
# Wine notes (issue 27): one wineserver for every process (locks are seen
# only within one server), started first with -p; WINEDEBUG=-all; a fresh
# prefix per run (5-20 s); Rust >= 1.78 needs a bcryptprimitives.dll with
# ProcessPrng (.ci/wine/), which Wine 8.0 lacks. What Wine cannot show is
# listed in the README's platform section.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s (%ss)\n' "$*" "$SECONDS"; }
SECONDS=0
TARGET=x86_64-pc-windows-gnu

missing=()
command -v x86_64-w64-mingw32-gcc >/dev/null || missing+=(gcc-mingw-w64-x86-64)
command -v wine >/dev/null || missing+=(wine wine64)
command -v python3 >/dev/null || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"

# A private prefix, and one wineserver for this whole step.
export WINEDEBUG=-all
WINEPREFIX="$(mktemp -d /tmp/lockrun-wine.XXXXXX)"
export WINEPREFIX
cleanup() {
  wineserver -k >/dev/null 2>&1 || true
  rm -rf "$WINEPREFIX"
}
trap cleanup EXIT

step "Wine prefix $WINEPREFIX (in the background, while cargo builds)"
(
  wineserver -p
  wine wineboot --init >/dev/null 2>&1
  x86_64-w64-mingw32-gcc -shared -O2 -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
    .ci/wine/bcryptprimitives.c .ci/wine/bcryptprimitives.def -ladvapi32
) >"$WINEPREFIX.log" 2>&1 &
prefix_job=$!

step "cargo clippy --target $TARGET"
cargo clippy --locked --target "$TARGET" --all-targets -- -D warnings

step "cargo build --target $TARGET --tests (lockrun.exe and tests/windows.rs)"
cargo test --locked --target "$TARGET" --test windows --no-run

wait "$prefix_job" || { cat "$WINEPREFIX.log"; exit 1; }
rm -f "$WINEPREFIX.log"

export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
step "tests/windows.rs under Wine"
cargo test --locked --target "$TARGET" --test windows

if [ "${1:-}" = --broken ]; then
  for broken in no-lock record-after-resume no-kill-on-close; do
    step "broken variant LOCKRUN_BROKEN=$broken: the suite must fail"
    if LOCKRUN_BROKEN=$broken cargo test --locked --target "$TARGET" --test windows 2>&1 |
      grep -E '^test .* FAILED$|^test result'; then :; fi
    if LOCKRUN_BROKEN=$broken cargo test --locked --target "$TARGET" --test windows >/dev/null 2>&1; then
      echo "the suite passed on the broken variant $broken" >&2
      exit 1
    fi
  done
  # Back to the real build.
  cargo test --locked --target "$TARGET" --test windows --no-run
fi

step "release build and zip"
cargo build --locked --release --target "$TARGET"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
dist=target/dist
name="lockrun-$version-$TARGET"
rm -rf "$dist/$name" "$dist/$name.zip"
mkdir -p "$dist/$name"
cp "target/$TARGET/release/lockrun.exe" README.md LICENSE-MIT LICENSE-APACHE "$dist/$name/"
(cd "$dist" && python3 -m zipfile -c "$name.zip" "$name")
python3 -m zipfile -l "$dist/$name.zip"
# The zipped binary runs.
wine "$dist/$name/lockrun.exe" --version

step "Windows step done"
