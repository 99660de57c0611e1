//! Talking to Redis: connections (with the URL's user, password, database
//! and TLS) and the Lua scripts that make the lock atomic. Every call has
//! a deadline: lockrun must end with 69 or 76, never hang on a server that
//! stopped answering.
//!
//! The scripts name every key they touch in KEYS (the lock, its fencing
//! counter, the last holder's record), as Redis asks of scripts.

use super::RedisUrl;
use redis::{ConnectionAddr, ConnectionInfo, RedisConnectionInfo, Script, Value};
use std::time::{Duration, Instant};

/// How long connecting may take: a server that does not answer is 69.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take when nothing tighter applies.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sets the lock key if absent, with the token the counter gives, in one
/// step; or says who holds it and for how long yet.
/// KEYS: lock, counter, the slots' N, the queue, its ticket counter.
/// ARGV: the record (a JSON object, or empty), the lease in ms, our
/// waiter id, '1' to queue (a waiter) or '', the waiters' key prefix.
/// `{1, token}`, `{0, value, pttl}`, `{4, waiters ahead}` (free, but
/// others queued first), or `{3, N}` when the lock is used with
/// `--slots N`.
const ACQUIRE: &str = r#"
local n = redis.call('GET', KEYS[3])
if n then return {3, n} end
local ahead = ahead_of(KEYS[4], ARGV[5], ARGV[3])
local held = redis.call('GET', KEYS[1])
if held or ahead > 0 then
  enqueue(KEYS[4], KEYS[5], ARGV[5], ARGV[3], ARGV[4], ARGV[2])
  if held then return {0, held, redis.call('PTTL', KEYS[1])} end
  return {4, ahead}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], with_token(token, ARGV[3], ARGV[1]), 'PX', ARGV[2])
leave(KEYS[4], ARGV[5], ARGV[3])
return {1, token}
"#;

/// The waiters' queue: a sorted set of waiter ids by ticket, each alive
/// while its key (prefix .. id) lives (renewed by every attempt of its
/// waiter). `ahead_of` drops the dead and counts the live ones queued
/// before `me` (all of them when `me` is not queued).
const QUEUE: &str = r#"
local function ahead_of(queue, prefix, me)
  local mine = redis.call('ZSCORE', queue, me)
  local members = redis.call('ZRANGE', queue, 0, -1, 'WITHSCORES')
  local ahead = 0
  for i = 1, #members, 2 do
    local who = members[i]
    if who ~= me then
      if redis.call('EXISTS', prefix .. who) == 0 then
        redis.call('ZREM', queue, who)
      elseif (not mine) or tonumber(members[i + 1]) < tonumber(mine) then
        ahead = ahead + 1
      end
    end
  end
  return ahead
end
local function enqueue(queue, tickets, prefix, me, want, ttl)
  if want ~= '1' then return end
  if not redis.call('ZSCORE', queue, me) then
    redis.call('ZADD', queue, redis.call('INCR', tickets), me)
  end
  redis.call('SET', prefix .. me, '1', 'PX', ttl)
end
local function leave(queue, prefix, me)
  redis.call('ZREM', queue, me)
  redis.call('DEL', prefix .. me)
end
"#;

/// The key's value: the record with the token as its first field and the
/// holder's id second (`super::value_with_token`, which this mirrors).
const WITH_TOKEN: &str = r#"
local function with_token(token, owner, body)
  local head = '{"fencing_token":' .. string.format('%d', token) .. ',"owner":"' .. owner .. '"'
  if string.len(body) > 2 then
    return head .. ',' .. string.sub(body, 2)
  end
  return head .. '}'
end
"#;

/// `--slots N`: takes the first free one of the N slot keys, with a new
/// token, and (re)states N for the lease's time; or says when the first
/// held one expires. A free slot goes to a contender only when fewer
/// live waiters are queued ahead of it than slots are free. KEYS: the
/// plain lock, counter, N's key, the queue, its tickets, then the N slot
/// keys. ARGV: record, lease in ms, N, our waiter id, '1' to queue, the
/// waiters' key prefix. `{1, token, slot}`, `{0, soonest pttl or -1}`,
/// `{4, waiters ahead}`, `{2, plain holder's value}` (held without
/// --slots), `{3, other N}`.
const ACQUIRE_SLOT: &str = r#"
local plain = redis.call('GET', KEYS[1])
if plain then return {2, plain} end
local n = redis.call('GET', KEYS[3])
if n and n ~= ARGV[3] then return {3, n} end
local ahead = ahead_of(KEYS[4], ARGV[6], ARGV[4])
local soonest = -1
local free = {}
for i = 6, #KEYS do
  local left = redis.call('PTTL', KEYS[i])
  if left == -2 then
    table.insert(free, i)
  elseif left >= 0 and (soonest < 0 or left < soonest) then
    soonest = left
  end
end
if #free > ahead then
  local i = free[1]
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[i], with_token(token, ARGV[4], ARGV[1]), 'PX', ARGV[2])
  if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  end
  leave(KEYS[4], ARGV[6], ARGV[4])
  return {1, token, i - 5}
end
enqueue(KEYS[4], KEYS[5], ARGV[6], ARGV[4], ARGV[5], ARGV[2])
if #free > 0 then return {4, ahead} end
return {0, soonest}
"#;

/// The part every script that acts on a held key starts with: 0 when the
/// key is gone, -1 when it is not ours (another token or another owner,
/// another type). ARGV[1] is our mark (`super::mark`: token and id).
const OURS: &str = r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return 0 end
if kind ~= 'string' then return -1 end
local value = redis.call('GET', KEYS[1])
local prefix = '{"fencing_token":' .. ARGV[1]
local after = string.sub(value, string.len(prefix) + 1, string.len(prefix) + 1)
if string.sub(value, 1, string.len(prefix)) ~= prefix or (after ~= ',' and after ~= '}') then
  return -1
end
"#;

/// Renews our lease (and stores a new value, when given); with slots,
/// N's key too. KEYS: lock (or slot) [, N's key]. ARGV: token, lease in
/// ms, new value or empty [, N].
const RENEW: &str = r#"
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if KEYS[2] and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[2])
end
return 1
"#;

/// Lets go of our key, keeps the last record, wakes the waiters; with
/// slots, N's key goes with the last slot holder. KEYS: lock (or slot),
/// last record [, N's key, every slot key]. ARGV: token, last record or
/// empty, channel.
const RELEASE: &str = r#"
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[2], ARGV[2])
end
if KEYS[3] then
  local any = false
  for i = 4, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then any = true end
  end
  if not any then redis.call('DEL', KEYS[3]) end
end
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
"#;

/// What the key held when our script looked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ours {
    Yes,
    Gone,
    Other,
}

/// One attempt's answer.
pub enum Attempt {
    /// The token, and with `--slots` the slot, and whether a replica has
    /// it.
    Acquired(i64, Option<u16>, Replicated),
    /// Held by the key's value (empty with `--slots`), for this many ms
    /// yet (-1: no expiry).
    Held { value: Vec<u8>, pttl: i64 },
    /// The lock is used with `--slots N`, another N (or none).
    OtherSlots(u16),
    /// A contender with `--slots` met a holder without: its value.
    Plain(Vec<u8>),
    /// Free, but this many live waiters were queued first.
    Queued(i64),
    /// Taken on a primary that Sentinel no longer names (a failover
    /// happened while the acquire was on its way) and let go again: try
    /// again on the one it names now.
    Stale,
}

/// Whether the acquire (the token's `INCR`, the key) reached a replica
/// before the command starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replicated {
    /// The primary has no replica connected (or `LOCKRUN_REDIS_WAIT=0`):
    /// nothing to wait for.
    NoReplica,
    /// `WAIT 1` answered: this many replicas acknowledged it.
    Acked(i64),
    /// None of the `connected` replicas acknowledged it within the wait:
    /// a failover now could hand the token out again.
    NotAcked { connected: i64, waited: Duration },
    /// `ROLE` or `WAIT` failed (a user without the right to them, the
    /// connection broken): the lock is ours, but whether a replica has it
    /// is unknown. Not a failed acquire: the key is set, and failing here
    /// would leave it held for a TTL by nobody.
    Unknown(String),
}

/// How long the acquire waits for a replica: long enough for a replica
/// in the same region (a few round trips), short against the lease.
pub fn replica_wait(ttl: Duration) -> Duration {
    (ttl / 4).min(Duration::from_secs(1))
}

/// After an acquire: when the primary has replicas connected (`ROLE`),
/// `WAIT 1` on the same connection, so that the write is on a replica
/// before the command runs. Replication is asynchronous, so without it a
/// failover right after the acquire (the primary's host dying, Sentinel
/// promoting a replica that had not yet read the `INCR`) hands the same
/// token to the next holder; `bench/faults/wait.py` measured it (see
/// docs/LOCK-URLS.md). It narrows the window, it does not close it: a
/// replica that acknowledged can still lose the write to its own crash.
fn replicate(con: &mut redis::Connection, ttl: Duration) -> redis::RedisResult<Replicated> {
    let waited = replica_wait(ttl);
    // Both calls within the lease's first half: the lease counts from
    // the acquire, and a primary that stops answering here must not hold
    // the command's start past it.
    set_deadline(con, Instant::now() + waited);
    let role: Vec<Value> = redis::cmd("ROLE").query(con)?;
    let connected = match role.as_slice() {
        [kind, _, Value::Array(replicas)] if bytes(kind).as_deref() == Some(b"master") => {
            i64::try_from(replicas.len()).unwrap_or(i64::MAX)
        }
        _ => 0,
    };
    if connected == 0 {
        return Ok(Replicated::NoReplica);
    }
    // WAIT blocks on the server for up to its timeout: the socket's
    // deadline must outlast it, a little.
    set_deadline(con, Instant::now() + waited + waited / 2);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(millis(waited)).query(con)?;
    Ok(if acked > 0 {
        Replicated::Acked(acked)
    } else {
        Replicated::NotAcked { connected, waited }
    })
}

/// The scripts, hashed once (EVALSHA, loaded on the first NOSCRIPT).
pub struct Scripts {
    acquire: Script,
    acquire_slot: Script,
    renew: Script,
    release: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            acquire: Script::new(&format!("{WITH_TOKEN}{QUEUE}{ACQUIRE}")),
            acquire_slot: Script::new(&format!("{WITH_TOKEN}{QUEUE}{ACQUIRE_SLOT}")),
            renew: Script::new(&format!("{OURS}{RENEW}")),
            release: Script::new(&format!("{OURS}{RELEASE}")),
        }
    }
}

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts::new()
    }
}

/// Why a call failed, worded for a person: what Redis said, or what
/// happened on the way, and what to do.
pub fn explain(url: &RedisUrl, e: &redis::RedisError) -> String {
    use redis::ErrorKind;
    let at = url.address();
    let password = || match &url.password {
        Some(p) => format!("the password in ${}", p.var),
        None => "no password (set REDISCLI_AUTH or LOCKRUN_REDIS_PASSWORD)".to_owned(),
    };
    let code = e.code().unwrap_or("");
    if e.kind() == ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
        let who = url.user.as_deref().unwrap_or("default");
        return format!("Redis at {at} refused user {who} with {}: {e}", password());
    }
    if code == "NOAUTH" {
        return format!(
            "Redis at {at} asks for a password and lockrun has {}",
            password()
        );
    }
    if code == "NOPERM" {
        return format!(
            "Redis at {at} does not let user {} run what the lock needs (EVAL/EVALSHA, GET, SET, INCR, PEXPIRE, DEL, PUBLISH, SUBSCRIBE on the lock's keys): {e}",
            url.user.as_deref().unwrap_or("default")
        );
    }
    if code == "READONLY" {
        return format!(
            "Redis at {at} is a read-only replica: name the primary (or use redis+sentinel:// once supported): {e}"
        );
    }
    if matches!(code, "MOVED" | "ASK" | "CROSSSLOT" | "CLUSTERDOWN") {
        return format!(
            "Redis at {at} runs in cluster mode, which redis:// lock URLs do not support (moved keys, CROSSSLOT): name a standalone server or a Sentinel-managed primary: {e}"
        );
    }
    if e.is_timeout() {
        return format!("Redis at {at} did not answer in time: {e}");
    }
    if e.is_connection_refusal() {
        return format!("cannot connect to Redis at {at}: {e}");
    }
    if e.is_io_error() || e.is_connection_dropped() {
        return format!("the connection to Redis at {at} failed: {e}");
    }
    format!("Redis at {at}: {e}")
}

/// A connection to `url`'s server, within `timeout`, its calls bounded by
/// `CALL_TIMEOUT` until told otherwise.
pub fn connect(url: &RedisUrl, timeout: Duration) -> Result<redis::Connection, String> {
    connect_at(url, timeout).map(|(con, _)| con)
}

/// `connect`, and the address it connected to (through Sentinel: the
/// primary it named), for `attempt` to check after an acquire.
pub fn connect_at(
    url: &RedisUrl,
    timeout: Duration,
) -> Result<(redis::Connection, (String, u16)), String> {
    let until = Instant::now() + timeout;
    let (host, port) = match &url.sentinel {
        Some(sentinel) => primary(url, sentinel, until)?,
        None => (url.host.clone(), url.port),
    };
    let mut redis = RedisConnectionInfo::default().set_db(url.db);
    if let Some(user) = &url.user {
        redis = redis.set_username(user);
    }
    if let Some(password) = &url.password {
        redis = redis.set_password(&password.value);
    }
    let left = until.saturating_duration_since(Instant::now());
    let at = (host.clone(), port);
    let con = open(url, (host, port), redis, left).map_err(|e| match e {
        Opened::Tls(e) => format!(
            "TLS with Redis at {} failed (does it serve TLS on that port, and does --cacert, or else the system's roots, hold the CA that signed its certificate for this host name?): {e}",
            url.address()
        ),
        Opened::Other(e) => explain(url, &e),
    })?;
    if url.sentinel.is_some() {
        // What a Sentinel said may be a moment old (a failover under
        // way): only the primary itself can say it is one. Asked within
        // the connect's own deadline: a renewal connects this way, and a
        // stopped primary (which still completes the TCP handshake: the
        // kernel does) held it for a whole CALL_TIMEOUT past the lease
        // (found by the fault harness's `pause`: 76 after 2×TTL).
        set_deadline(&con, until);
        let mut con = con;
        let role: Vec<Value> = redis::cmd("ROLE")
            .query(&mut con)
            .map_err(|e| explain(url, &e))?;
        set_deadline(&con, Instant::now() + CALL_TIMEOUT);
        return match role.first().and_then(bytes).as_deref() {
            Some(b"master") => Ok((con, at)),
            _ => Err(format!(
                "{} is not a primary (yet): a failover is under way, or the Sentinels disagree",
                url.address()
            )),
        };
    }
    set_deadline(&con, Instant::now() + CALL_TIMEOUT);
    Ok((con, at))
}

/// Why `open` failed: TLS (worded by the caller) or anything else.
enum Opened {
    Tls(redis::RedisError),
    Other(redis::RedisError),
}

/// A connection to HOST:PORT with `url`'s TLS (scheme and files) and the
/// given user, password and database: a data node or a Sentinel.
fn open(
    url: &RedisUrl,
    (host, port): (String, u16),
    settings: RedisConnectionInfo,
    timeout: Duration,
) -> Result<redis::Connection, Opened> {
    let addr = if url.tls {
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host, port)
    };
    // redis-rs reads each reply of its set-up pipeline (AUTH, SELECT,
    // CLIENT SETINFO twice) with the whole time left, so a server that
    // accepts but does not answer (SIGSTOP: the kernel completes the TCP
    // handshake) held a connect for several times its timeout: a renewal
    // then stopped the command at twice the TTL (the fault harness's
    // `pause`). SETINFO is left out (only a label in CLIENT LIST; Redis
    // 7.0 refuses it anyway), and the time is shared among the replies.
    let replies = u32::from(settings.password().is_some()) + u32::from(settings.db() != 0);
    let settings = settings.set_skip_set_lib_name();
    let info = redis::IntoConnectionInfo::into_connection_info(addr)
        .map(|info: ConnectionInfo| info.set_redis_settings(settings))
        .map_err(Opened::Other)?;
    let client = if url.files == super::TlsFiles::default() {
        redis::Client::open(info).map_err(Opened::Other)?
    } else {
        let certificates = certificates(&url.files).map_err(|e| {
            Opened::Other(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "unreadable TLS file",
                e,
            )))
        })?;
        redis::Client::build_with_tls(info, certificates).map_err(Opened::Other)?
    };
    let timeout = (timeout / replies.max(1)).max(Duration::from_millis(10));
    let until = Instant::now() + timeout;
    let tls_failure = |e: redis::RedisError| {
        if url.tls && (e.is_io_error() || e.kind() == redis::ErrorKind::InvalidClientConfig) {
            Opened::Tls(e)
        } else {
            Opened::Other(e)
        }
    };
    let mut con = client
        .get_connection_with_timeout(timeout)
        .map_err(tls_failure)?;
    if url.tls {
        // The TLS handshake happens at the first exchange, which the
        // set-up pipeline no longer makes without a password: a PING
        // here, so that a certificate refused is said to be TLS's.
        set_deadline(&con, until);
        redis::cmd("PING")
            .query::<()>(&mut con)
            .map_err(tls_failure)?;
    }
    Ok(con)
}

/// The primary's address, from the first Sentinel that knows it; over
/// TLS with `rediss+sentinel://`, with the Sentinels' own password.
fn primary(
    url: &RedisUrl,
    sentinel: &super::Sentinel,
    until: Instant,
) -> Result<(String, u16), String> {
    let mut why = Vec::new();
    let mut settings = RedisConnectionInfo::default();
    if let Some(password) = &sentinel.password {
        settings = settings.set_password(&password.value);
    }
    for (host, port) in &sentinel.addrs {
        let left = until
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        let asked = open(url, (host.clone(), *port), settings.clone(), left).and_then(|mut con| {
            set_deadline(&con, Instant::now() + left);
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&sentinel.master)
                .query::<Option<(String, u16)>>(&mut con)
                .map_err(Opened::Other)
        });
        let at = super::join(host, *port);
        match asked {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => why.push(format!(
                "Sentinel {at} does not know a primary named {}",
                sentinel.master
            )),
            Err(Opened::Tls(e)) => why.push(format!(
                "TLS with Sentinel {at} failed (does it serve TLS on that port, and does --cacert, or else the system's roots, hold its CA?): {e}"
            )),
            Err(Opened::Other(e)) => why.push(sentinel_error(&at, sentinel, &e)),
        }
    }
    Err(format!(
        "no Sentinel named the primary {} ({})",
        sentinel.master,
        why.join("; ")
    ))
}

/// A Sentinel's refusal, saying which password is meant: the Sentinels'
/// own, not the data nodes'.
fn sentinel_error(at: &str, sentinel: &super::Sentinel, e: &redis::RedisError) -> String {
    let code = e.code().unwrap_or("");
    let auth = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(code, "WRONGPASS" | "NOAUTH");
    match (&sentinel.password, auth) {
        (None, true) => format!(
            "Sentinel {at} asks for a password: set {} (the Sentinels' requirepass, not the data nodes' password): {e}",
            super::SENTINEL_PASSWORD_VAR
        ),
        (Some(p), true) => format!("Sentinel {at} refused the password in ${}: {e}", p.var),
        _ => format!("Sentinel {at}: {e}"),
    }
}

/// The PEM files `--cacert`, `--cert` and `--key` name, read without
/// ever blocking on a FIFO.
fn certificates(files: &super::TlsFiles) -> Result<redis::TlsCertificates, String> {
    let read = |path: &std::path::Path, role: &str| {
        crate::platform::read_regular(path)
            .map_err(|e| format!("cannot read the {role} {}: {e}", path.display()))
    };
    let root_cert = match &files.cacert {
        Some(path) => Some(read(path, "CA certificate (--cacert)")?),
        None => None,
    };
    let client_tls = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert, "client certificate (--cert)")?,
            client_key: read(key, "client key (--key)")?,
        }),
        _ => None,
    };
    Ok(redis::TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// The next call on `con` must be answered by `deadline`.
pub fn set_deadline(con: &redis::Connection, deadline: Instant) {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(5));
    let _ = con.set_read_timeout(Some(left));
    let _ = con.set_write_timeout(Some(left));
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

fn malformed(what: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected answer",
        what.to_owned(),
    ))
}

/// Who a contender is in the waiters' queue, and whether this attempt
/// queues it (a waiter) or only asks (`-n`, the first attempt).
#[derive(Debug, Clone, Copy)]
pub struct Waiter<'a> {
    pub id: &'a str,
    pub queue: bool,
}

/// One attempt: set the key (with `slots`, one of N slot keys) if
/// absent, with a new token, unless live waiters are queued first; a
/// waiter that does not get it is queued (or stays so, its place kept
/// alive for a TTL).
pub fn attempt(
    (con, at): (&mut redis::Connection, Option<&(String, u16)>),
    scripts: &Scripts,
    (url, waiter): (&RedisUrl, Waiter<'_>),
    (record, slots): (&[u8], Option<u16>),
    ttl: Duration,
) -> redis::RedisResult<Attempt> {
    let queue = if waiter.queue { "1" } else { "" };
    let answer: Vec<Value> = match slots {
        None => scripts
            .acquire
            .key(&url.name)
            .key(url.fencing_key())
            .key(url.slots_key())
            .key(url.queue_key())
            .key(url.tickets_key())
            .arg(record.trim_ascii())
            .arg(millis(ttl))
            .arg(waiter.id)
            .arg(queue)
            .arg(url.waiter_prefix())
            .invoke(con)?,
        Some(n) => {
            let mut call = scripts.acquire_slot.prepare_invoke();
            call.key(&url.name)
                .key(url.fencing_key())
                .key(url.slots_key())
                .key(url.queue_key())
                .key(url.tickets_key());
            for k in 1..=n {
                call.key(url.slot_key(k));
            }
            call.arg(record.trim_ascii())
                .arg(millis(ttl))
                .arg(n)
                .arg(waiter.id)
                .arg(queue)
                .arg(url.waiter_prefix())
                .invoke(con)?
        }
    };
    let number = |v: &Value| {
        int(v).or_else(|| {
            bytes(v)
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|t| t.parse().ok())
        })
    };
    let acquired = |con: &mut redis::Connection, token, slot: Option<u16>| {
        if still_named(url, at) == Some(false) {
            let place = match (slots, slot) {
                (Some(n), Some(k)) => Place::Slot { n, k },
                _ => Place::Plain,
            };
            let mark = super::mark(token, waiter.id);
            let _ = release(con, scripts, (url, place), &mark, None);
            return Ok(Attempt::Stale);
        }
        let replicated = if url.wait_replica {
            match replicate(con, ttl) {
                Ok(replicated) => replicated,
                // An ACL user without ROLE or WAIT: no wait, as documented
                // (a warning on every run would say nothing new).
                Err(e) if e.code() == Some("NOPERM") => Replicated::NoReplica,
                Err(e) => Replicated::Unknown(explain(url, &e)),
            }
        } else {
            Replicated::NoReplica
        };
        Ok(Attempt::Acquired(token, slot, replicated))
    };
    match answer.as_slice() {
        [flag, token] if int(flag) == Some(1) => match int(token) {
            Some(t) => acquired(con, t, None),
            None => Err(malformed("a fencing token that is not a number")),
        },
        [flag, token, slot] if int(flag) == Some(1) => {
            match int(token).zip(int(slot).and_then(|k| u16::try_from(k).ok())) {
                Some((t, k)) => acquired(con, t, Some(k)),
                None => Err(malformed("a fencing token or slot that is not a number")),
            }
        }
        [flag, value, pttl] if int(flag) == Some(0) => Ok(Attempt::Held {
            value: bytes(value).unwrap_or_default(),
            pttl: int(pttl).unwrap_or(-1),
        }),
        [flag, pttl] if int(flag) == Some(0) => Ok(Attempt::Held {
            value: Vec::new(),
            pttl: int(pttl).unwrap_or(-1),
        }),
        [flag, value] if int(flag) == Some(2) => {
            Ok(Attempt::Plain(bytes(value).unwrap_or_default()))
        }
        [flag, ahead] if int(flag) == Some(4) => Ok(Attempt::Queued(int(ahead).unwrap_or(1))),
        [flag, n] if int(flag) == Some(3) => Ok(Attempt::OtherSlots(
            number(n).and_then(|n| u16::try_from(n).ok()).unwrap_or(0),
        )),
        _ => Err(malformed("the acquire script's answer")),
    }
}

/// Through Sentinel, after an acquire: whether the Sentinels still name
/// the primary it was made on (`None`: not through Sentinel, or they
/// could not be asked). A primary stopped past Sentinel's
/// `down-after-milliseconds` answers, once resumed, what was sent to it
/// before the failover, and takes itself for the primary (its ROLE) until
/// Sentinel demotes it, seconds later: the fault harness's `pause` had a
/// lockrun take the lock there, with the same token as the holder on the
/// new primary, and start its command.
fn still_named(url: &RedisUrl, at: Option<&(String, u16)>) -> Option<bool> {
    let (sentinel, at) = (url.sentinel.as_ref()?, at?);
    let now = primary(url, sentinel, Instant::now() + CALL_TIMEOUT).ok()?;
    Some(now == *at)
}

fn ours(answer: i64) -> Ours {
    match answer {
        1 => Ours::Yes,
        0 => Ours::Gone,
        _ => Ours::Other,
    }
}

/// What a held lock is: the plain lock's key, or slot K of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Plain,
    Slot { n: u16, k: u16 },
}

impl Place {
    /// The key that holds it.
    pub fn key(self, url: &RedisUrl) -> String {
        match self {
            Place::Plain => url.name.clone(),
            Place::Slot { k, .. } => url.slot_key(k),
        }
    }

    /// Where its last holder's record stays.
    pub fn last_key(self, url: &RedisUrl) -> String {
        match self {
            Place::Plain => url.last_key(),
            Place::Slot { k, .. } => url.slot_last_key(k),
        }
    }
}

/// Renews our lease (storing `value` when given), if the key is ours.
pub fn renew(
    con: &mut redis::Connection,
    scripts: &Scripts,
    (url, place): (&RedisUrl, Place),
    mark: &str,
    ttl: Duration,
    value: Option<&[u8]>,
) -> redis::RedisResult<Ours> {
    let mut call = scripts.renew.prepare_invoke();
    call.key(place.key(url))
        .arg(mark)
        .arg(millis(ttl))
        .arg(value.unwrap_or_default());
    if let Place::Slot { n, .. } = place {
        call.key(url.slots_key()).arg(n);
    }
    let answer: i64 = call.invoke(con)?;
    Ok(ours(answer))
}

/// Deletes our key if it is still ours, keeping `last` as the last
/// holder's record and waking the waiters.
pub fn release(
    con: &mut redis::Connection,
    scripts: &Scripts,
    (url, place): (&RedisUrl, Place),
    mark: &str,
    last: Option<&[u8]>,
) -> redis::RedisResult<Ours> {
    let mut call = scripts.release.prepare_invoke();
    call.key(place.key(url))
        .key(place.last_key(url))
        .arg(mark)
        .arg(last.unwrap_or_default())
        .arg(url.channel());
    if let Place::Slot { n, .. } = place {
        call.key(url.slots_key());
        for k in 1..=n {
            call.key(url.slot_key(k));
        }
    }
    let answer: i64 = call.invoke(con)?;
    Ok(ours(answer))
}

/// Leaves the waiters' queue (a waiter giving up).
pub fn leave_queue(
    con: &mut redis::Connection,
    url: &RedisUrl,
    id: &str,
) -> redis::RedisResult<()> {
    redis::pipe()
        .cmd("ZREM")
        .arg(url.queue_key())
        .arg(id)
        .ignore()
        .cmd("DEL")
        .arg(format!("{}{id}", url.waiter_prefix()))
        .ignore()
        .query(con)
}

/// The lock key's value, if any.
pub fn get(con: &mut redis::Connection, key: &str) -> redis::RedisResult<Option<Vec<u8>>> {
    redis::cmd("GET").arg(key).query(con)
}

/// A lease in whole milliseconds, at least 1.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
