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
#   LOCKRUN_WIN_FILTER='NAME...' .ci/windows.sh
#                             only the tests whose name contains a NAME, and
#                             no release build (a quick check of a change)
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
# lockrun.exe as users get it with lock URLs: every backend whose client
# builds for Windows (all three do).
FEATURES=etcd,postgres,redis

missing=()
command -v x86_64-w64-mingw32-gcc >/dev/null || missing+=(gcc-mingw-w64-x86-64)
command -v wine >/dev/null || missing+=(wine wine64)
command -v python3 >/dev/null || missing+=(python3)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v openssl >/dev/null || missing+=(openssl)
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
SERVERS="$(mktemp -d /tmp/lockrun-win-servers.XXXXXX)"
server_pids=()
cleanup() {
  wineserver -k >/dev/null 2>&1 || true
  for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${server_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  for data in "${PG_DATA:-}" "${PG_TLS_DATA:-}"; do
    if [ -n "$data" ] && [ -f "$data/postmaster.pid" ]; then
      setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$pg_bin/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$WINEPREFIX" "$SERVERS"
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

# A free loopback port (the kernel picks it; a server started right
# after takes it, and a start that loses it fails loudly below).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Waits until something answers on 127.0.0.1:$1 (at most 20 s).
wait_port() {
  python3 - "$1" <<'PY'
import socket, sys, time
end = time.time() + 20
while time.time() < end:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.5).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
}

# The lock URL services, Linux processes on loopback ports: Wine's
# processes use the host's sockets, so lockrun.exe reaches them. Started
# while cargo builds; tests/windows.rs gets their URLs by environment.
step "Redis, etcd and PostgreSQL for the lock URL tests (in the background)"
port="$(free_port)"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$SERVERS" >"$SERVERS/redis.log" 2>&1 &
server_pids+=($!)
export LOCKRUN_WIN_REDIS_URL="redis://127.0.0.1:$port"
redis_port=$port
etcd_port=
if command -v etcd >/dev/null; then
  etcd_port="$(free_port)"
  peer_port="$(free_port)"
  etcd --name win --data-dir "$SERVERS/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "win=http://127.0.0.1:$peer_port" >"$SERVERS/etcd.log" 2>&1 &
  server_pids+=($!)
  export LOCKRUN_WIN_ETCD_URL="etcd://127.0.0.1:$etcd_port"
fi
# TLS and authentication from Windows: a CA and a certificate for
# 127.0.0.1 (P-256, as bench/etcd.sh makes them), a Redis that speaks
# only TLS and wants a password, and an etcd that speaks only https with
# authentication on (etcd refuses to send a password in clear). The tests
# get the CA as a Windows path (Wine's Z: is the Unix root).
TLS="$SERVERS/tls"
mkdir -p "$TLS"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$TLS/ca.key" -out "$TLS/ca.pem" -days 1 -subj /CN=lockrun-win-ca 2>/dev/null
openssl req "${ec[@]}" -keyout "$TLS/server.key" -out "$TLS/server.csr" -subj /CN=lockrun-win 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$TLS/ext"
openssl x509 -req -in "$TLS/server.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
  -out "$TLS/server.pem" -days 1 -extfile "$TLS/ext" 2>/dev/null
# A client certificate from the same CA (etcd checks its extended key
# usage), and a second CA that signed nothing here: a wrong CA.
openssl req "${ec[@]}" -keyout "$TLS/client.key" -out "$TLS/client.csr" -subj /CN=lockrun-win-client 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >"$TLS/client-ext"
openssl x509 -req -in "$TLS/client.csr" -CA "$TLS/ca.pem" -CAkey "$TLS/ca.key" -CAcreateserial \
  -out "$TLS/client.pem" -days 1 -extfile "$TLS/client-ext" 2>/dev/null
openssl req -x509 "${ec[@]}" -keyout "$TLS/other-ca.key" -out "$TLS/other-ca.pem" -days 1 -subj /CN=lockrun-win-other-ca 2>/dev/null
chmod 644 "$TLS"/*
export LOCKRUN_WIN_CACERT="Z:$TLS/ca.pem"
export LOCKRUN_WIN_OTHER_CACERT="Z:$TLS/other-ca.pem"
export LOCKRUN_WIN_CLIENT_CERT="Z:$TLS/client.pem" LOCKRUN_WIN_CLIENT_KEY="Z:$TLS/client.key"
rediss_port="$(free_port)"
redis-server --port 0 --tls-port "$rediss_port" --bind 127.0.0.1 --save '' --appendonly no \
  --tls-cert-file "$TLS/server.pem" --tls-key-file "$TLS/server.key" \
  --tls-ca-cert-file "$TLS/ca.pem" --tls-auth-clients no --requirepass win-redis-pw \
  --dir "$SERVERS" >"$SERVERS/rediss.log" 2>&1 &
server_pids+=($!)
export LOCKRUN_WIN_REDISS_URL="rediss://127.0.0.1:$rediss_port"
export LOCKRUN_WIN_REDIS_PASSWORD=win-redis-pw
etcds_port=
if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
  etcds_port="$(free_port)"
  etcds_peer="$(free_port)"
  etcd --name wins --data-dir "$SERVERS/etcds" \
    --listen-client-urls "https://127.0.0.1:$etcds_port" \
    --advertise-client-urls "https://127.0.0.1:$etcds_port" \
    --cert-file "$TLS/server.pem" --key-file "$TLS/server.key" \
    --listen-peer-urls "http://127.0.0.1:$etcds_peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcds_peer" \
    --initial-cluster "wins=http://127.0.0.1:$etcds_peer" >"$SERVERS/etcds.log" 2>&1 &
  server_pids+=($!)
  export LOCKRUN_WIN_ETCDS_URL="etcd+https://127.0.0.1:$etcds_port"
  export LOCKRUN_WIN_ETCD_USER=winapp LOCKRUN_WIN_ETCD_PASSWORD=win-etcd-pw
fi
# Client certificates from Windows: a Redis (TLS only) and an etcd
# (https only) that each refuse a client without a certificate the CA
# signed.
redism_port="$(free_port)"
redis-server --port 0 --tls-port "$redism_port" --bind 127.0.0.1 --save '' --appendonly no \
  --tls-cert-file "$TLS/server.pem" --tls-key-file "$TLS/server.key" \
  --tls-ca-cert-file "$TLS/ca.pem" --tls-auth-clients yes \
  --dir "$SERVERS" >"$SERVERS/redism.log" 2>&1 &
server_pids+=($!)
export LOCKRUN_WIN_REDIS_MTLS_URL="rediss://127.0.0.1:$redism_port"
etcdm_port=
if command -v etcd >/dev/null; then
  etcdm_port="$(free_port)"
  etcdm_peer="$(free_port)"
  etcd --name winm --data-dir "$SERVERS/etcdm" \
    --listen-client-urls "https://127.0.0.1:$etcdm_port" \
    --advertise-client-urls "https://127.0.0.1:$etcdm_port" \
    --cert-file "$TLS/server.pem" --key-file "$TLS/server.key" \
    --client-cert-auth --trusted-ca-file "$TLS/ca.pem" \
    --listen-peer-urls "http://127.0.0.1:$etcdm_peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcdm_peer" \
    --initial-cluster "winm=http://127.0.0.1:$etcdm_peer" >"$SERVERS/etcdm.log" 2>&1 &
  server_pids+=($!)
  export LOCKRUN_WIN_ETCD_MTLS_URL="etcd+https://127.0.0.1:$etcdm_port"
fi
# Redis Sentinel: a primary of its own (the other tests' Redis stays
# unwatched) and one Sentinel that names it as "winm". The Sentinel
# rewrites its configuration file, so the file is its own copy.
sentinel_port=
if command -v redis-sentinel >/dev/null && command -v redis-cli >/dev/null; then
  sprimary_port="$(free_port)"
  redis-server --port "$sprimary_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$SERVERS" >"$SERVERS/sprimary.log" 2>&1 &
  server_pids+=($!)
  sentinel_port="$(free_port)"
  mkdir -p "$SERVERS/sentinel"
  printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor winm 127.0.0.1 %s 1\n' \
    "$sentinel_port" "$SERVERS/sentinel" "$sprimary_port" >"$SERVERS/sentinel/sentinel.conf"
  redis-sentinel "$SERVERS/sentinel/sentinel.conf" >"$SERVERS/sentinel.log" 2>&1 &
  server_pids+=($!)
  export LOCKRUN_WIN_SENTINEL_URL="redis+sentinel://127.0.0.1:$sentinel_port/winm"
fi
# An etcd cluster of three members on loopback. The tests end one member
# themselves (etcd's member remove, through the JSON gateway: a removed
# member shuts itself down), so each run starts a fresh cluster.
cluster_ports=()
if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
  cluster_peers=()
  for i in 1 2 3; do cluster_ports+=("$(free_port)"); cluster_peers+=("$(free_port)"); done
  initial="c1=http://127.0.0.1:${cluster_peers[0]},c2=http://127.0.0.1:${cluster_peers[1]},c3=http://127.0.0.1:${cluster_peers[2]}"
  for i in 0 1 2; do
    etcd --name "c$((i + 1))" --data-dir "$SERVERS/cluster$i" \
      --listen-client-urls "http://127.0.0.1:${cluster_ports[$i]}" \
      --advertise-client-urls "http://127.0.0.1:${cluster_ports[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${cluster_peers[$i]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${cluster_peers[$i]}" \
      --initial-cluster-token "lockrun-win-$$" --initial-cluster "$initial" \
      --initial-cluster-state new >"$SERVERS/cluster$i.log" 2>&1 &
    server_pids+=($!)
  done
  export LOCKRUN_WIN_ETCD_CLUSTER_URL="etcd://127.0.0.1:${cluster_ports[0]},127.0.0.1:${cluster_ports[1]},127.0.0.1:${cluster_ports[2]}"
fi
pg_port=
pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -n "$pg_bin" ] || pg_bin="$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"
if [ -x "$pg_bin/initdb" ] && command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
  # PostgreSQL refuses to run as root: as nobody (its log in the directory
  # nobody owns), trusting loopback.
  pg_port="$(free_port)"
  pgtls_port="$(free_port)"
  PG_DATA="$SERVERS/pg"
  PG_TLS_DATA="$SERVERS/pgtls"
  mkdir -p "$PG_DATA" "$SERVERS/pgsock" "$SERVERS/pgtlsfiles"
  chown 65534:65534 "$PG_DATA" "$SERVERS/pgsock" "$SERVERS/pgtlsfiles"
  chmod 755 "$SERVERS"
  # PostgreSQL over TLS: a second server, a copy of the first one's fresh
  # cluster (one initdb for both), that takes only TLS (hostnossl
  # rejects) with the certificate for 127.0.0.1; its key must belong to
  # the server's user and be private.
  cp "$TLS/server.pem" "$TLS/server.key" "$SERVERS/pgtlsfiles/"
  chown 65534:65534 "$SERVERS"/pgtlsfiles/*
  chmod 600 "$SERVERS/pgtlsfiles/server.key"
  as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
  (
    as_nobody "$pg_bin/initdb" -U postgres -A trust --no-sync -D "$PG_DATA" >"$SERVERS/initdb.log" 2>&1 &&
      cp -a "$PG_DATA" "$PG_TLS_DATA" &&
      printf 'local all all trust\nhostnossl all all 127.0.0.1/32 reject\nhostssl all all 127.0.0.1/32 trust\n' \
        >"$PG_TLS_DATA/pg_hba.conf" &&
      as_nobody "$pg_bin/pg_ctl" -D "$PG_DATA" -l "$SERVERS/pgsock/pg.log" -w -o \
        "-c listen_addresses=127.0.0.1 -p $pg_port -k $SERVERS/pgsock -c fsync=off" start >/dev/null &&
      as_nobody "$pg_bin/pg_ctl" -D "$PG_TLS_DATA" -l "$SERVERS/pgsock/pgtls.log" -w -o \
        "-c listen_addresses=127.0.0.1 -p $pgtls_port -k $SERVERS/pgsock -c fsync=off -c ssl=on \
         -c ssl_cert_file=$SERVERS/pgtlsfiles/server.pem -c ssl_key_file=$SERVERS/pgtlsfiles/server.key" start >/dev/null
  ) &
  pg_job=$!
  export LOCKRUN_WIN_POSTGRES_TLS_URL="postgres://postgres@127.0.0.1:$pgtls_port/postgres"
  export LOCKRUN_WIN_POSTGRES_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
  # A role that must give its password (scram-sha-256), ahead of the
  # trust line initdb wrote: set up once the server is up (below).
  export LOCKRUN_WIN_POSTGRES_PW_URL="postgres://winpw@127.0.0.1:$pg_port/postgres"
  export LOCKRUN_WIN_POSTGRES_PASSWORD=win-pg-pw
fi

step "cargo clippy --target $TARGET (without features, and with $FEATURES)"
cargo clippy --locked --target "$TARGET" --all-targets -- -D warnings
cargo clippy --locked --target "$TARGET" --all-targets --features "$FEATURES" -- -D warnings

step "cargo build --target $TARGET --tests (lockrun.exe and tests/windows.rs)"
cargo test --locked --target "$TARGET" --features "$FEATURES" --test windows --no-run

wait "$prefix_job" || { cat "$WINEPREFIX.log"; exit 1; }
rm -f "$WINEPREFIX.log"

wait_port "$redis_port" || { cat "$SERVERS/redis.log"; exit 1; }
if [ -n "$etcd_port" ]; then wait_port "$etcd_port" || { cat "$SERVERS/etcd.log"; exit 1; }; fi
if [ -n "$pg_port" ]; then
  wait "$pg_job" || { cat "$SERVERS"/initdb.log "$SERVERS"/pgsock/pg*.log; exit 1; }
  psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres \
    -c "SET password_encryption = 'scram-sha-256'; CREATE ROLE winpw LOGIN PASSWORD 'win-pg-pw'" >/dev/null
  sed -i '1i host all winpw 127.0.0.1/32 scram-sha-256' "$PG_DATA/pg_hba.conf"
  psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "SELECT pg_reload_conf()" >/dev/null
fi
wait_port "$rediss_port" || { cat "$SERVERS/rediss.log"; exit 1; }
if [ -n "$etcds_port" ]; then
  wait_port "$etcds_port" || { cat "$SERVERS/etcds.log"; exit 1; }
  # Authentication on, with a user whose role may lock names under win-
  # (the tests' lock names), as tests/servers/etcd.rs sets it up.
  ectl() { etcdctl --endpoints "https://127.0.0.1:$etcds_port" --cacert "$TLS/ca.pem" "$@" >/dev/null; }
  ectl user add root:win-root-pw
  ectl user grant-role root root
  ectl role add winlockers
  ectl role grant-permission winlockers --prefix=true readwrite win-
  ectl user add "$LOCKRUN_WIN_ETCD_USER:$LOCKRUN_WIN_ETCD_PASSWORD"
  ectl user grant-role "$LOCKRUN_WIN_ETCD_USER" winlockers
  ectl auth enable
fi

wait_port "$redism_port" || { cat "$SERVERS/redism.log"; exit 1; }
if [ -n "$etcdm_port" ]; then wait_port "$etcdm_port" || { cat "$SERVERS/etcdm.log"; exit 1; }; fi
if [ -n "$sentinel_port" ]; then
  wait_port "$sprimary_port" || { cat "$SERVERS/sprimary.log"; exit 1; }
  wait_port "$sentinel_port" || { cat "$SERVERS/sentinel.log"; exit 1; }
  # The Sentinel names the primary from its configuration at once.
  redis-cli -h 127.0.0.1 -p "$sentinel_port" SENTINEL get-master-addr-by-name winm | grep -qx "$sprimary_port" ||
    { cat "$SERVERS/sentinel.log"; exit 1; }
fi
if [ ${#cluster_ports[@]} -gt 0 ]; then
  # Every member up, and the cluster with a leader: a write through the
  # cluster succeeds (etcdctl's own deadline bounds each try; 40 tries).
  endpoints="127.0.0.1:${cluster_ports[0]},127.0.0.1:${cluster_ports[1]},127.0.0.1:${cluster_ports[2]}"
  for port in "${cluster_ports[@]}"; do wait_port "$port" || { cat "$SERVERS"/cluster*.log; exit 1; }; done
  tries=0
  until etcdctl --endpoints "$endpoints" --command-timeout=2s endpoint health >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ $tries -lt 40 ] || { etcdctl --endpoints "$endpoints" endpoint health; cat "$SERVERS"/cluster*.log; exit 1; }
    sleep 0.25
  done
fi

export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
step "tests/windows.rs under Wine"
read -ra filter <<<"${LOCKRUN_WIN_FILTER:-}"
cargo test --locked --target "$TARGET" --features "$FEATURES" --test windows -- "${filter[@]}"
if [ ${#filter[@]} -gt 0 ]; then
  step "LOCKRUN_WIN_FILTER given: no release build"
  exit 0
fi

if [ "${1:-}" = --broken ]; then
  for broken in no-lock record-after-resume no-kill-on-close no-terminate-job share-delete; do
    step "broken variant LOCKRUN_BROKEN=$broken: the suite must fail"
    if LOCKRUN_BROKEN=$broken cargo test --locked --target "$TARGET" --features "$FEATURES" --test windows 2>&1 |
      grep -E '^test .* FAILED$|^test result'; then :; fi
    if LOCKRUN_BROKEN=$broken cargo test --locked --target "$TARGET" --features "$FEATURES" --test windows >/dev/null 2>&1; then
      echo "the suite passed on the broken variant $broken" >&2
      exit 1
    fi
  done
  # Back to the real build.
  cargo test --locked --target "$TARGET" --features "$FEATURES" --test windows --no-run
fi

step "release build and zip (the default build: file locks, as on Linux)"
# The zip is the default build, as the Linux binary and the Debian package
# are: lock URLs are a cargo feature there too, built by whoever wants them
# (README, "Windows"). A release build of the lock URL crates (LTO, one
# codegen unit) took 326 s of this step's 415 s; the tests above already
# ran lockrun.exe with them.
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
