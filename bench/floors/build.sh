#!/usr/bin/env bash
# bench/floors/build.sh [OUTDIR]: builds the floors (static where the C
# library allows) into OUTDIR (default target/floors) and prints OUTDIR.
# The floors are what the benchmarks compare lockrun with besides its
# peers: the least work a tool could do for the same row (README.md here).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/../../target/floors}
mkdir -p "$out"
cc=${CC:-cc}
for f in floor_run floor_slots; do
  if [ ! -x "$out/$f" ] || [ "$here/$f.c" -nt "$out/$f" ]; then
    "$cc" -O2 -static -pthread -o "$out/$f" "$here/$f.c" 2>/dev/null \
      || "$cc" -O2 -pthread -o "$out/$f" "$here/$f.c"
  fi
done
cd "$out" && pwd
