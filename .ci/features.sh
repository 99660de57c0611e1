#!/usr/bin/env bash
# CI: every feature combination builds, lints clean, and advertises
# exactly the lock URL backends it has: `--help`, the man pages and the
# completions of a build name postgres:// only when it has PostgreSQL,
# etcd:// (and etcd's --user and --password-file) only when it has etcd; --cacert,
# --cert and --key are etcd's and rediss://'s alike; --ttl only
# when it has a lock URL at all. Called from .ci/run; runs alone too
# (`.ci/features.sh`). A build's words come from its backends' folders
# through src/registry.rs, so a backend added there is checked here by
# adding its feature and scheme to the lists below.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
fail() { echo "features.sh: $*" >&2; exit 1; }

# feature name -> the scheme its --help must name (and no other build may)
declare -A scheme=([etcd]='etcd://' [postgres]='postgres://' [redis]='redis://')
# feature name -> an option only that backend has ('' for none)
declare -A option=([etcd]='--password-file' [postgres]='' [redis]='')

combos=("" "etcd" "postgres" "redis" "etcd,postgres,redis")
for combo in "${combos[@]}"; do
  name=${combo:-default}
  args=(--locked)
  [ -n "$combo" ] && args+=(--features "$combo")
  step "build and lint: $name"
  cargo build "${args[@]}" --bin lockrun
  cargo clippy "${args[@]}" --all-targets -- -D warnings
  bin=$(cargo build "${args[@]}" --bin lockrun --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*\/lockrun\)".*/\1/p' | tail -1)
  [ -x "$bin" ] || fail "$name: no lockrun binary"
  help=$("$bin" --help)
  holder=$("$bin" holder --help)
  man=$("$bin" --generate man | sed 's/\\-/-/g')
  bash_completion=$("$bin" --generate complete-bash)
  step "help and man page: $name"
  for feature in "${!scheme[@]}"; do
    s=${scheme[$feature]}
    built=0
    case ",$combo," in *",$feature,"*) built=1 ;; esac
    for what in help holder man; do
      text=${!what}
      if [ $built = 1 ]; then
        grep -qF -- "$s" <<<"$text" || fail "$name: $what does not name $s"
      else
        ! grep -qF -- "$s" <<<"$text" || fail "$name: $what names $s, which this build lacks"
      fi
    done
    o=${option[$feature]}
    if [ -n "$o" ]; then
      for what in help man bash_completion; do
        text=${!what}
        if [ $built = 1 ]; then
          grep -qF -- "$o" <<<"$text" || fail "$name: $what lacks $feature's $o"
        else
          ! grep -qF -- "$o" <<<"$text" || fail "$name: $what offers $feature's $o"
        fi
      done
    fi
  done
  for what in help man bash_completion; do
    text=${!what}
    if [ -n "$combo" ]; then
      grep -qF -- "--ttl" <<<"$text" || fail "$name: $what lacks --ttl"
    else
      ! grep -qF -- "--ttl" <<<"$text" || fail "$name: $what offers --ttl without a lock URL"
    fi
  done
  # A lock URL the build lacks is refused as a usage error (64), saying so.
  for feature in "${!scheme[@]}"; do
    case ",$combo," in *",$feature,"*) continue ;; esac
    set +e
    out=$("$bin" -n "${scheme[$feature]}h/db#x" true 2>&1)
    status=$?
    set -e
    [ $status = 64 ] || fail "$name: ${scheme[$feature]} exited $status, not 64: $out"
    grep -qF "built without" <<<"$out" || fail "$name: ${scheme[$feature]}: $out"
  done
  echo "features.sh: $name advertises exactly its backends"
done
