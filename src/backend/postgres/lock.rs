//! The PostgreSQL backend behind the seam: connect, take the session's
//! advisory lock (at once, or waiting in the server), hand the command a
//! fencing token, watch the connection until the command exits, close it.
//!
//! Differences from a file lock, each forced by the medium: the lock lives
//! as long as lockrun's connection (so `-F` is refused, and if lockrun
//! itself dies its watchdog, which holds a duplicate of the connection,
//! stops the command's tree before letting the session end:
//! `platform::watchdog`); the record is carried in the
//! session's last statement, readable in `pg_stat_activity`; and losing the
//! connection while the command runs stops the command, exit 76.

use super::RunOptions;
use super::connect::{self, Target};
use super::session::{self, Session};
use super::slots::{self, Entry};
use super::sql::{DURABLE_TOKEN, Row, SESSION_MARK, literal, record_in};
use crate::backend::{Backend, Capabilities, Held};
use crate::backend::{Blocking, Contender};
use crate::display;
use crate::exit_codes::{self, Failure};
use crate::platform::OwnedFd;
use crate::record::Record;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{CancelToken, Client, SimpleQueryMessage};
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// While a statement of ours runs (a wait), the server checks every second
/// whether we are still connected (PostgreSQL 14 or later; NULL before),
/// and ends a wait whose client is gone.
const CHECK_CLIENT: &str = "CASE WHEN current_setting('server_version_num')::int >= 140000 \
     THEN set_config('client_connection_check_interval', '1000', false) END";

/// Why a session shared between clients is refused.
pub const POOLER: &str = "a connection pooler in transaction or statement mode (PgBouncer's pool_mode = transaction) shares server sessions between clients, which breaks session advisory locks: connect directly or through a session-mode pool";

/// Whether another connection through the same pooler lands in our server
/// session (it sees our mark): a pooler in transaction mode, found even
/// when lockrun is its only client. Asked only when the server's port is
/// not the one lockrun dialled (something stands between).
fn shares_sessions(target: &Target, mark: &str) -> bool {
    let Ok(mut probe) = target.connect() else {
        return false;
    };
    let seen = probe
        .simple_query(&format!("SELECT current_setting('{SESSION_MARK}', true)"))
        .ok()
        .and_then(|answer| first_value(&answer))
        .and_then(|row| row.first());
    seen.as_deref() == Some(mark)
}

/// The socket of the connection just made: the one socket among our
/// descriptors that was not there `before` it, duplicated (the client
/// library owns and closes its own). `None` when that cannot be told
/// (no /proc, or more than one new socket): then the server's hang-up is
/// noticed at the next check only, and a watchdog cannot hold the session.
fn connection_socket(before: &[(i32, OsString)]) -> Option<OwnedFd> {
    let mut new = crate::platform::socket_fds()
        .into_iter()
        .filter(|entry| !before.contains(entry));
    let (fd, _) = new.next()?;
    if new.next().is_some() {
        return None;
    }
    // SAFETY: `fd` is open (the client's socket) while we duplicate it.
    let borrowed = unsafe { crate::platform::BorrowedFd::borrow_raw(fd) };
    crate::platform::duplicate_above_stdio(borrowed)
}

/// A statement comment carrying `record`: every statement of ours starts
/// with it, so the session's `pg_stat_activity.query` shows the holder.
/// Every `/` is written `\/` and every `*` `\u002a` (the same JSON), so
/// the text can neither end the comment nor open a nested one.
pub fn comment(record: &[u8]) -> String {
    let line = String::from_utf8_lossy(record);
    let line = line.trim_end().replace('/', "\\/").replace('*', "\\u002a");
    if line.is_empty() {
        "/*lockrun*/ ".to_owned()
    } else {
        format!("/*lockrun {line}*/ ")
    }
}

/// `track_activity_query_size` until the server has said (its default):
/// `pg_stat_activity.query` shows only the first this-many-less-one bytes
/// of a statement, so a record longer than that would be cut and lost.
pub const QUERY_SIZE: usize = 1024;

/// What a comment says in place of a record that cannot be made to fit.
const TOO_LONG: &str = "/*lockrun record too long for track_activity_query_size*/ ";

/// Marks a word of the command or the directory cut to fit.
const CUT: char = '…';

/// As [`comment`], but no longer than the server shows of a statement
/// (`query_size` - 1 bytes): the command's words and the directory give
/// way first, each cut to a common length and marked with `…`; then the
/// last words go, one `…` standing for them. A record that cannot fit
/// even so (the server's size set very low) leaves a comment that says so,
/// which `holder` reports.
pub fn fitted_comment(record: &[u8], query_size: usize) -> String {
    // Nor longer than a reader takes as a record.
    let most = usize::try_from(crate::record::MAX_RECORD_BYTES).unwrap_or(usize::MAX);
    let room = query_size.saturating_sub(1).min(most);
    let whole = comment(record);
    if whole.len() <= room {
        return whole;
    }
    let Some(record) = Record::parse(record.trim_ascii_end()) else {
        return TOO_LONG.to_owned();
    };
    let fits = |r: &Record| {
        let text = comment(&r.to_line());
        (text.len() <= room).then_some(text)
    };
    let words = record.command.as_ref().map_or(0, Vec::len);
    let longest = record
        .command
        .iter()
        .flatten()
        .chain(record.cwd.iter())
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0);
    // The longest common length that fits, found by halving: a word of up
    // to 8 characters is kept whole, so cut words still say something.
    let shortest = 8;
    if let Some(mut best) = fits(&capped(&record, shortest, words)) {
        let (mut lo, mut hi) = (shortest, longest);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            match fits(&capped(&record, mid, words)) {
                Some(text) => {
                    best = text;
                    lo = mid;
                }
                None => hi = mid,
            }
        }
        return best;
    }
    // Too many words: keep the first ones that fit (at least the program).
    let (mut lo, mut hi) = (1, words);
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        match fits(&capped(&record, shortest, mid)) {
            Some(text) => {
                best = Some(text);
                lo = mid + 1;
            }
            None => hi = mid - 1,
        }
    }
    best.unwrap_or_else(|| TOO_LONG.to_owned())
}

/// `record` with every word of the command and the directory cut to
/// `cap` characters (the last one a `…`), and only the first `words`
/// words of the command, a `…` standing for the rest.
fn capped(record: &Record, cap: usize, words: usize) -> Record {
    let cut = |s: &String| -> String {
        if s.chars().count() <= cap {
            s.clone()
        } else {
            let mut short: String = s.chars().take(cap.saturating_sub(1)).collect();
            short.push(CUT);
            short
        }
    };
    let mut short = record.clone();
    short.cwd = record.cwd.as_ref().map(cut);
    short.command = record.command.as_ref().map(|command| {
        let mut kept: Vec<String> = command.iter().take(words).map(cut).collect();
        if command.len() > words {
            kept.push(CUT.to_string());
        }
        kept
    });
    short
}

/// Whether a statement's text starts with our comment but carries no
/// record we can read: cut by the server (`track_activity_query_size`
/// smaller than the record), or [`TOO_LONG`].
pub fn record_lost(query: &str) -> bool {
    query.starts_with("/*lockrun ") && record_in(query).is_none()
}

/// The server-side keepalive settings of our session: if lockrun's host
/// dies, the server notices after about 2 x TTL and ends the session,
/// releasing the lock. Later than lockrun gives up on its side (one TTL),
/// so that a command cut off from the server is stopped first.
pub fn server_keepalive(ttl: Duration) -> Vec<(&'static str, String)> {
    let secs = ttl.as_secs().max(1);
    vec![
        ("tcp_keepalives_idle", secs.to_string()),
        ("tcp_keepalives_interval", (secs / 3).max(1).to_string()),
        ("tcp_keepalives_count", "3".to_owned()),
        (
            "tcp_user_timeout",
            (2 * ttl.as_millis().max(1000)).to_string(),
        ),
    ]
}

/// The connection the waiting thread hands back, with the fencing token
/// taken with the lock.
type Returned = (Client, Option<i64>);

pub struct PgBackend {
    target: Target,
    /// Ours while not lent to the waiting thread.
    client: Option<Client>,
    /// A duplicate of `client`'s socket, when it could be told apart:
    /// watched for the server's hang-up and handed to the watchdog.
    socket: Option<OwnedFd>,
    /// Where the waiting thread hands the connection back.
    returned: Arc<Mutex<Option<Returned>>>,
    cancel: CancelToken,
    /// A second connection for naming the holder while ours waits.
    side: Option<Client>,
    name: String,
    label: String,
    key: i64,
    backend_pid: i32,
    /// The answer of the attempt made while connecting, not yet asked for.
    first_try: Option<bool>,
    /// The fencing token, taken in the statement that took the lock.
    token: Option<i64>,
    /// The server ends our session's statement soon after our connection
    /// closes (`CHECK_CLIENT`): a waiter that ends without a cancel request
    /// leaves no waiting session behind for long.
    checks_client: bool,
    /// The server's `track_activity_query_size`: the record must fit.
    query_size: usize,
    comment: String,
    ttl: Duration,
    kill_grace: Duration,
    verbose: bool,
    /// `--slots N`.
    slots: Option<Slots>,
}

/// A contender for one of N slots (see `super::slots`).
struct Slots {
    n: u16,
    /// The lock's name as an SQL literal.
    name: String,
    /// Holding the queue key: the head of the queue.
    head: bool,
    /// Never queues (`-n`, `-w 0`): answers from the slots themselves.
    direct: bool,
    /// The slot taken and its key, once one is.
    chosen: Arc<Mutex<Option<(u16, i64)>>>,
    /// The wait ended (deadline, signal): the head stops sleeping.
    stop: Arc<AtomicBool>,
}

impl Slots {
    fn entry(&self) -> Entry {
        if self.head {
            Entry::Head
        } else if self.direct {
            Entry::Direct
        } else {
            Entry::Queue
        }
    }

    fn chosen(&self) -> Option<(u16, i64)> {
        *self.chosen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What one attempt at the slots answered.
struct Take {
    /// Another N announced, and the server pid of a session announcing it.
    other: Option<(u16, i32)>,
    head: bool,
    slot: Option<(u16, i64)>,
    /// The fencing token, taken with the slot.
    token: Option<i64>,
    /// The server pid of a session holding the queue key without --slots.
    plain: Option<i32>,
}

/// The answer of `slots::take_sql`, by its columns' names.
fn take_answer(row: &Row) -> Option<Take> {
    let value = |name: &str| row.get(name);
    let other = value("other_n")
        .and_then(|n| n.parse().ok())
        .zip(value("other_pid").and_then(|p| p.parse().ok()));
    let slot = value("slot")
        .and_then(|k| k.parse().ok())
        .zip(value("slot_key").and_then(|k| k.parse().ok()));
    Some(Take {
        other,
        head: value("head")? == "t",
        slot,
        token: value("token").and_then(|t| t.parse().ok()),
        plain: value("plain_pid").and_then(|p| p.parse().ok()),
    })
}

/// Every row of a simple query's answer, statement after statement.
fn all_rows(answer: &[SimpleQueryMessage]) -> Vec<Row> {
    answer
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(Row::of(row)),
            _ => None,
        })
        .collect()
}

/// The usage error for contenders that disagree on N: `ours` is what this
/// one gave (`None`: no --slots), `theirs` what `who` announced.
fn disagree(label: &str, ours: Option<u16>, theirs: u16, who: &str) -> Failure {
    let ours = match ours {
        Some(n) => format!("--slots {n}"),
        None => "without --slots".to_owned(),
    };
    Failure::new(
        exit_codes::USAGE,
        format!(
            "{label} is used with --slots {theirs} (set by {who}), not {ours}: \
             every contender must give the same number"
        ),
    )
}

/// The usage error for a contender with --slots when the lock is held
/// without (`who`).
fn held_plain(label: &str, n: u16, who: &str) -> Failure {
    Failure::new(
        exit_codes::USAGE,
        format!(
            "{label} is held without --slots (by {who}), not with --slots {n}: \
             every contender must give the same number"
        ),
    )
}

fn unavailable(label: &str, why: &str) -> Failure {
    Failure::new(
        exit_codes::UNAVAILABLE,
        format!("cannot take {label}: {why} (the command was not run)"),
    )
}

/// The application_name others see in pg_stat_activity (63 bytes at most).
fn application_name() -> String {
    let me = crate::identity::Me::gather();
    let mut name = format!(
        "lockrun {}@{}",
        std::process::id(),
        me.host.as_deref().unwrap_or("?")
    );
    while name.len() > 63 {
        name.pop();
    }
    name
}

impl PgBackend {
    pub fn start(opts: &RunOptions, label: &str) -> Result<PgBackend, Failure> {
        // Below a second the checks would be a busy loop and keepalives
        // (whole seconds) could not follow.
        let ttl = opts.ttl.max(Duration::from_secs(1));
        // What the URL and the environment say cannot work: a usage error.
        let mut target = Target::new(&opts.url, &application_name(), &connect::process_env)
            .map_err(|e| Failure::new(e.status, format!("{label}: {}", e.message)))?;
        target.keepalive(ttl);
        if target.password_in_url && opts.settings.verbose {
            crate::say!(
                "lockrun: warning: the lock URL carries a password, which other users can see in `ps` until lockrun hides it; prefer PGPASSWORD or ~/.pgpass"
            );
        }
        let sockets = crate::platform::socket_fds();
        let connected = target.connect();
        let socket = connection_socket(&sockets);
        let mut client = connected.map_err(|e| {
            unavailable(
                label,
                &format!(
                    "cannot connect to PostgreSQL as {}: {}",
                    target.describe,
                    connect::explain(&e)
                ),
            )
        })?;
        let record = opts.waiting_record();
        // Fitted to the default size until the first answer gives the
        // server's.
        let comment = fitted_comment(&record, QUERY_SIZE);
        let name = literal(&opts.url.name);
        let waits = !opts.nonblocking && opts.timeout != Some(Duration::ZERO);
        // One round trip: the key, our server pid, the server-side
        // keepalives (set_config rather than startup options, which
        // PgBouncer refuses) and the first attempt. A simple query (the
        // name as a literal) rather than a prepared one, which costs three.
        // A plain contender also reads whether --slots contenders use the
        // name; one with --slots says its N first, then looks (another
        // statement of the same round trip).
        // The fencing token comes with the lock, in the same statement.
        let first = match opts.slots {
            None => format!(
                "CASE WHEN pg_try_advisory_lock(k) THEN {DURABLE_TOKEN} END AS token, {} AS slots_unused",
                slots::unused_sql(&name)
            ),
            Some(n) => slots::announce_sql(&name, n),
        };
        // Our mark on the server session, for finding a pooler that shares
        // one between clients (see `SESSION_MARK`). Nothing is taken when
        // the session already has another client's.
        let mark = format!(
            "{} {}",
            application_name(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let mut sql = format!(
            "{comment}SELECT k AS lock_key, pg_backend_pid() AS backend_pid, {first}, \
             inet_server_port() AS server_port, set_config('{SESSION_MARK}', {}, false) AS mark, \
             {CHECK_CLIENT} AS checks_client, \
             (SELECT setting::int FROM pg_settings WHERE name = 'track_activity_query_size') AS query_size",
            literal(&mark)
        );
        for (name, value) in server_keepalive(ttl) {
            sql.push_str(&format!(", set_config('{name}', '{value}', false)"));
        }
        sql.push_str(&format!(
            " FROM (SELECT hashtextextended({name}, 0) AS k) AS key \
             WHERE coalesce(current_setting('{SESSION_MARK}', true), '') = ''"
        ));
        let entry = if waits { Entry::Queue } else { Entry::Direct };
        if let Some(n) = opts.slots {
            let queue = format!("hashtextextended({name}, 0)");
            sql.push_str("; ");
            sql.push_str(&comment);
            sql.push_str(&slots::take_sql(&name, &queue, n, entry, Some(&mark)));
        }
        let answer = client
            .simple_query(&sql)
            .map_err(|e| unavailable(label, &connect::explain(&e)))?;
        let rows = all_rows(&answer);
        // No row from the first statement: the session bore another
        // client's mark.
        if rows.len() < 1 + usize::from(opts.slots.is_some()) {
            return Err(unavailable(label, POOLER));
        }
        let row = rows.first().cloned().unwrap_or_default();
        let value = |name: &str| row.get(name);
        let server_port = value("server_port").and_then(|v| v.parse::<u16>().ok());
        let checks_client = value("checks_client").is_some();
        let query_size = value("query_size")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(QUERY_SIZE);
        let comment = fitted_comment(&record, query_size);
        let (Some(key), Some(backend_pid)) = (
            value("lock_key").and_then(|v| v.parse::<i64>().ok()),
            value("backend_pid").and_then(|v| v.parse::<i32>().ok()),
        ) else {
            return Err(unavailable(
                label,
                "the server's answer to the first attempt is malformed",
            ));
        };
        let malformed = || {
            unavailable(
                label,
                "the server's answer to the first attempt is malformed",
            )
        };
        let (token, slot_state) = match opts.slots {
            None => {
                // Someone uses the name with --slots: which N, read only now.
                if value("slots_unused").as_deref() != Some("t")
                    && let Some(theirs) = announced(&mut client, &name)
                {
                    return Err(disagree(
                        label,
                        None,
                        theirs,
                        &announcer(&mut client, &name, None),
                    ));
                }
                (value("token").and_then(|v| v.parse::<i64>().ok()), None)
            }
            Some(n) => {
                let take = rows.get(1).and_then(take_answer).ok_or_else(malformed)?;
                if let Some((theirs, _)) = take.other {
                    return Err(disagree(
                        label,
                        Some(n),
                        theirs,
                        &announcer(&mut client, &name, Some(n)),
                    ));
                }
                if let Some(pid) = take.plain {
                    return Err(held_plain(label, n, &plain_holder(&mut client, key, pid)));
                }
                let state = Slots {
                    n,
                    name: name.clone(),
                    head: entry == Entry::Queue && take.head && take.slot.is_none(),
                    direct: entry == Entry::Direct,
                    chosen: Arc::new(Mutex::new(take.slot)),
                    stop: Arc::new(AtomicBool::new(false)),
                };
                if take.slot.is_some() && take.token.is_none() {
                    return Err(malformed());
                }
                (take.token, Some(state))
            }
        };
        if target.behind_a_proxy(server_port) && shares_sessions(&target, &mark) {
            // Let go of what our shared session took, and of our mark.
            let _ = client.simple_query(&format!(
                "SELECT pg_advisory_unlock_all(), set_config('{SESSION_MARK}', '', false)"
            ));
            return Err(unavailable(label, POOLER));
        }
        let cancel = client.cancel_token();
        Ok(PgBackend {
            target,
            client: Some(client),
            socket,
            returned: Arc::new(Mutex::new(None)),
            cancel,
            side: None,
            name: opts.url.name.clone(),
            label: label.to_owned(),
            key,
            backend_pid,
            checks_client,
            query_size,
            first_try: Some(token.is_some()),
            token,
            comment,
            ttl,
            kill_grace: opts.settings.kill_grace,
            verbose: opts.settings.verbose,
            slots: slot_state,
        })
    }

    fn failure(&self, why: &str) -> Failure {
        unavailable(&self.label, why)
    }

    /// The fencing token, when the statement that took the lock did not
    /// bring it; with proof that the lock stayed with our session.
    fn fencing_token(&self, client: &mut Client, key: i64) -> Result<i64, Failure> {
        let sql = format!(
            "{}SELECT {DURABLE_TOKEN} AS token, ({}) AS holds",
            self.comment,
            session::holds_sql(key)
        );
        // A cancel request sent as the wait ended may land on this
        // statement instead of the wait it was meant for: try again.
        let mut attempts = 0;
        let row = loop {
            attempts += 1;
            match client.simple_query(&sql) {
                Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) && attempts < 3 => {}
                other => break other.map_err(|e| self.failure(&connect::explain(&e)))?,
            }
        };
        let row = first_value(&row).unwrap_or_default();
        let value = |name: &str| row.get(name).and_then(|v| v.parse::<i64>().ok());
        let (Some(token), Some(holds)) = (value("token"), value("holds")) else {
            return Err(self.failure("the server's answer to the fencing-token query is malformed"));
        };
        if holds != 1 {
            return Err(self.failure(POOLER));
        }
        Ok(token)
    }

    fn take_returned(&mut self) -> Option<Client> {
        let (client, token) = self
            .returned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        if token.is_some() {
            self.token = token;
        }
        Some(client)
    }
}

/// The N that --slots contenders announce for the name (the SQL literal
/// `name`), if any still do.
fn announced(client: &mut Client, name: &str) -> Option<u16> {
    let answer = client
        .simple_query(&format!("SELECT {}", slots::announced_sql(name)))
        .ok()?;
    first_value(&answer)?.first()?.parse().ok()
}

/// The session `pid`, holding the plain lock on `key`, in the conflict
/// message's words.
fn plain_holder(client: &mut Client, key: i64, pid: i32) -> String {
    super::sessions::sessions(client, key)
        .ok()
        .and_then(|found| found.into_iter().find(|s| s.pid == pid && s.granted))
        .map_or_else(|| format!("PostgreSQL session {pid}"), |s| s.describe())
}

/// Who announced an N other than `ours`, in the conflict message's words.
fn announcer(client: &mut Client, name: &str, ours: Option<u16>) -> String {
    super::sessions::announcers(client, name)
        .ok()
        .and_then(|found| found.into_iter().find(|(n, _)| Some(*n) != ours))
        .map_or_else(
            || "a session that has gone since".to_owned(),
            |(_, session)| session.describe(),
        )
}

/// The head's wait for a slot, on the waiting thread: queue, LISTEN, then
/// try the slots each time a notification comes or `RECHECK` passes.
struct HeadWait {
    comment: String,
    name: String,
    queue: i64,
    n: u16,
    head: bool,
    chosen: Arc<Mutex<Option<(u16, i64)>>>,
    stop: Arc<AtomicBool>,
    /// Set when the head finds it did not run for as long as the server
    /// lets its session stay idle (it was stopped): the server has ended
    /// the session, and the error that follows says "connection closed".
    paused: Arc<AtomicBool>,
    /// When the head last ran: a moment before each wait on the server.
    alive_at: std::cell::Cell<Instant>,
}

/// How often a sleeping head looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

impl HeadWait {
    /// The fencing token of the slot taken; `Ok(None)`: stopped before a
    /// slot was free.
    fn run(self, client: &mut Client) -> Result<Option<i64>, postgres::Error> {
        let result = self.wait_for_a_slot(client);
        if result.is_err() {
            self.note_a_pause();
        }
        result
    }

    /// Whether the head did not run for most of the idle limit since it
    /// last looked (its last statement may have been up to RECHECK before
    /// it stopped): the monotonic clock goes on while a process is
    /// stopped, and a running head never goes that long.
    fn note_a_pause(&self) {
        if self.alive_at.get().elapsed() >= slots::HEAD_IDLE_LIMIT / 2 {
            self.paused.store(true, SeqCst);
        }
    }

    fn wait_for_a_slot(&self, client: &mut Client) -> Result<Option<i64>, postgres::Error> {
        // Listening before the first look (LISTEN takes effect when its
        // transaction commits, before the look): a release after that look
        // cannot be missed. In the queue first: the server wakes us when
        // the head before us has its slot (or gives up).
        let queue = if self.head {
            String::new()
        } else {
            format!("{}SELECT pg_advisory_lock({}); ", self.comment, self.queue)
        };
        // A head that is stopped (SIGSTOP, Ctrl-Z) must not keep the queue
        // from the waiters behind it: while it runs it makes a statement at
        // least every RECHECK, so the server ends its session once it has
        // been idle far longer than that, which lets go of the queue (and
        // of its N). The setting it had is put back once a slot is ours:
        // the session then holds the slot, idle, for the whole command.
        let answer = client.simple_query(&format!(
            "{queue}{}; LISTEN \"{}\"",
            slots::guard_idle_sql(),
            slots::channel(self.queue)
        ))?;
        // By name: the queue's own statement answers a row before it.
        let previous_idle = answer.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row
                .try_get("lockrun_idle_was")
                .ok()
                .flatten()
                .map(str::to_owned),
            _ => None,
        });
        let take = format!(
            "{}{}",
            self.comment,
            slots::take_sql(
                &self.name,
                &self.queue.to_string(),
                self.n,
                Entry::Head,
                None
            )
        );
        loop {
            let answer = client.simple_query(&take)?;
            if let Some(take) = first_value(&answer).and_then(|r| take_answer(&r))
                && let (Some(slot), Some(token)) = (take.slot, take.token)
            {
                if let Some(previous) = &previous_idle {
                    client.simple_query(&slots::restore_idle_sql(previous))?;
                }
                *self.chosen.lock().unwrap_or_else(PoisonError::into_inner) = Some(slot);
                return Ok(Some(token));
            }
            if !self.sleep(client)? {
                return Ok(None);
            }
        }
    }

    /// Sleeps on the connection until a notification, `RECHECK`, or the
    /// stop flag (false).
    fn sleep(&self, client: &mut Client) -> Result<bool, postgres::Error> {
        let until = Instant::now() + slots::RECHECK;
        loop {
            if self.stop.load(SeqCst) {
                return Ok(false);
            }
            self.note_a_pause();
            self.alive_at.set(Instant::now());
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(true);
            }
            let mut notes = client.notifications();
            if notes.timeout_iter(left.min(STOP_CHECK)).next()?.is_some() {
                // Several releases at once: one look is enough.
                while notes.iter().next()?.is_some() {}
                return Ok(true);
            }
        }
    }
}

fn cancelled_or(e: &postgres::Error) -> String {
    if e.code() == Some(&SqlState::QUERY_CANCELED) {
        "the wait was cancelled".to_owned()
    } else {
        connect::explain(e)
    }
}

fn first_value(answer: &[SimpleQueryMessage]) -> Option<Row> {
    answer.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(Row::of(row)),
        _ => None,
    })
}

impl Contender for PgBackend {
    fn try_acquire(&mut self) -> Result<bool, Failure> {
        if let Some(got) = self.first_try.take() {
            return Ok(got);
        }
        if let Some(state) = &self.slots {
            let sql = format!(
                "{}{}",
                self.comment,
                slots::take_sql(
                    &state.name,
                    &self.key.to_string(),
                    state.n,
                    state.entry(),
                    None
                )
            );
            let entry = state.entry();
            let Some(client) = self.client.as_mut() else {
                return Err(self.failure("the connection is busy"));
            };
            let answer = client
                .simple_query(&sql)
                .map_err(|e| self.failure(&connect::explain(&e)))?;
            let take = first_value(&answer)
                .and_then(|r| take_answer(&r))
                .ok_or_else(|| self.failure("the server's answer to an attempt is malformed"))?;
            if let Some(state) = self.slots.as_mut() {
                *state.chosen.lock().unwrap_or_else(PoisonError::into_inner) = take.slot;
                if entry == Entry::Queue {
                    state.head = take.head && take.slot.is_none();
                }
            }
            self.token = take.token;
            return Ok(take.slot.is_some() && take.token.is_some());
        }
        let sql = format!(
            "{}SELECT CASE WHEN pg_try_advisory_lock({}) THEN {DURABLE_TOKEN} END",
            self.comment, self.key
        );
        let Some(client) = self.client.as_mut() else {
            return Err(self.failure("the connection is busy"));
        };
        match client.simple_query(&sql) {
            Ok(answer) => {
                self.token = first_value(&answer)
                    .and_then(|row| row.first())
                    .and_then(|v| v.parse().ok());
                Ok(self.token.is_some())
            }
            Err(e) => Err(self.failure(&connect::explain(&e))),
        }
    }

    fn blocking(&mut self) -> Result<Blocking, Failure> {
        // The wait happens in the server. At the deadline or on a signal the
        // waiter cancels it (`interrupt`); a thread that does not answer is
        // left behind, and the connection it holds ends with lockrun.
        let Some(mut client) = self.client.take() else {
            return Err(self.failure("the connection is busy"));
        };
        let returned = Arc::clone(&self.returned);
        let label = self.label.clone();
        if let Some(state) = &self.slots {
            let wait = HeadWait {
                comment: self.comment.clone(),
                name: state.name.clone(),
                queue: self.key,
                n: state.n,
                head: state.head,
                chosen: Arc::clone(&state.chosen),
                stop: Arc::clone(&state.stop),
                paused: Arc::new(AtomicBool::new(false)),
                alive_at: std::cell::Cell::new(Instant::now()),
            };
            let paused = Arc::clone(&wait.paused);
            return Ok(Box::new(move || match wait.run(&mut client) {
                Ok(None) => Err(unavailable(&label, "the wait was cancelled")),
                Ok(Some(token)) => {
                    *returned.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some((client, Some(token)));
                    Ok(())
                }
                Err(_) if paused.load(SeqCst) => Err(unavailable(
                    &label,
                    &format!(
                        "lockrun was stopped (SIGSTOP, Ctrl-Z) while first in the queue for a \
                         slot, so the server ended its session after {} idle to let the waiters \
                         behind it go on; the command did not run: run it again",
                        display::span(slots::HEAD_IDLE_LIMIT)
                    ),
                )),
                Err(e) => Err(unavailable(&label, &cancelled_or(&e))),
            }));
        }
        // The fencing token in the same statement, once the lock is ours
        // (the subquery, fenced by OFFSET 0, yields its row only then): no
        // round trip between the server's wake-up and the command.
        let sql = format!(
            "{}SELECT {DURABLE_TOKEN} FROM (SELECT pg_advisory_lock({}) OFFSET 0) AS locked",
            self.comment, self.key
        );
        Ok(Box::new(move || match client.simple_query(&sql) {
            Ok(answer) => {
                let token = first_value(&answer)
                    .and_then(|row| row.first())
                    .and_then(|v| v.parse().ok());
                *returned.lock().unwrap_or_else(PoisonError::into_inner) = Some((client, token));
                Ok(())
            }
            Err(e) => Err(unavailable(&label, &cancelled_or(&e))),
        }))
    }

    fn block_here(&mut self) -> Option<Result<(), Failure>> {
        // Waiting for ever with nothing to show: the wait runs on the main
        // thread, one thread hop less between the server's wake-up and the
        // command. A signal then ends lockrun from its handler, with no
        // cancel request: the server notices the closed connection within
        // a second (`checks_client`), so only where it does.
        if !self.checks_client {
            return None;
        }
        Some(self.blocking().and_then(|wait| wait()))
    }

    fn interrupt(&mut self) {
        if let Some(state) = &self.slots {
            state.stop.store(true, SeqCst);
        }
        // A cancel request opens a connection of its own, which may take
        // as long as connecting does: sent from a thread of its own.
        let target = self.target.clone();
        let token = self.cancel.clone();
        let _ = crate::platform::with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("pg-cancel".into())
                .spawn(move || target.cancel(&token))
        });
    }

    fn undo(&mut self) {
        // Released before lockrun exits (closing alone would release it
        // only once the server notices).
        let unlock = match &self.slots {
            Some(_) => slots::release_sql(self.key),
            None => format!("SELECT pg_advisory_unlock({})", self.key),
        };
        if let Some(mut client) = self.take_returned().or_else(|| self.client.take()) {
            let _ = client.simple_query(&unlock);
        }
    }

    fn holder(&mut self) -> Option<String> {
        let client = match self.client.as_mut() {
            Some(client) => client,
            None => {
                if self.side.is_none() {
                    self.side = self.target.connect().ok();
                }
                self.side.as_mut()?
            }
        };
        if let Some(state) = &self.slots {
            let found = super::sessions::slot_sessions(client, &state.name, state.n).ok()?;
            let held: Vec<String> = found
                .iter()
                .filter_map(|s| {
                    let session = s.session.as_ref().filter(|p| p.granted)?;
                    Some(format!("slot {}: {}", s.slot, session.describe()))
                })
                .collect();
            return Some(if held.is_empty() {
                format!(
                    "{} commands, one per slot (they released a moment ago)",
                    state.n
                )
            } else {
                format!("{} commands, one per slot ({})", state.n, held.join("; "))
            });
        }
        let sessions = super::sessions::sessions(client, self.key).ok()?;
        let holding = sessions.into_iter().find(|s| s.granted);
        Some(match holding {
            Some(session) => session.describe(),
            None => "another session (it released the lock a moment ago)".to_owned(),
        })
    }

    fn conflict_holder(&mut self) -> String {
        self.holder().unwrap_or_default()
    }
}

impl Backend for PgBackend {
    type Held = PgHeld;
    const CAPS: Capabilities = super::CAPS;

    fn failure_status(&self) -> u8 {
        exit_codes::UNAVAILABLE
    }

    fn give_up(self) {}

    fn acquired(mut self, _record: Option<&Record>, verbose: bool) -> Result<PgHeld, Failure> {
        let Some(mut client) = self.client.take().or_else(|| self.take_returned()) else {
            return Err(self.failure("the connection that took the lock is gone"));
        };
        let slot = self.slots.as_ref().and_then(Slots::chosen);
        if self.slots.is_some() && slot.is_none() {
            return Err(self.failure("lost track of the slot taken"));
        }
        let key = slot.map_or(self.key, |(_, key)| key);
        let token = match self.token {
            // Taken with the lock, in the same statement.
            Some(token) => token,
            None => self.fencing_token(&mut client, key)?,
        };
        let pid = self.backend_pid;
        if verbose || self.verbose {
            let what = match (slot, &self.slots) {
                (Some((k, _)), Some(state)) => format!("slot {k} of {} of the lock", state.n),
                _ => "the lock".to_owned(),
            };
            crate::say!(
                "lockrun: took {what} {} (key {key}, fencing token {token}, server pid {pid} on {}, TTL {}s)",
                display::escape(&self.name),
                display::escape(&self.target.describe),
                self.ttl.as_secs()
            );
        }
        // A head was listening for releases; it stops with the first check
        // (off the path to the command).
        let (release, unlisten) = match slot {
            Some(_) => (slots::release_sql(self.key), "UNLISTEN *; "),
            None => (format!("SELECT pg_advisory_unlock({key})"), ""),
        };
        let session = Session::start(
            (client, self.socket.take()),
            key,
            self.comment.clone(),
            release,
            unlisten,
            self.ttl,
            self.kill_grace,
        );
        Ok(PgHeld {
            session,
            query_size: self.query_size,
            token,
            slot: slot.map(|(k, _)| k),
        })
    }
}

pub struct PgHeld {
    session: Session,
    query_size: usize,
    token: i64,
    /// `--slots`: the slot held, for `LOCKRUN_SLOT`.
    slot: Option<u16>,
}

impl Held for PgHeld {
    fn env(&self) -> Vec<(&'static str, OsString)> {
        crate::backend::url_env(self.token, self.slot)
    }

    fn dies_with_lockrun(&self) -> bool {
        true
    }

    fn fencing_token(&self) -> Option<i64> {
        Some(self.token)
    }

    /// A lock URL has no descriptor whose holders could be traced: what
    /// `--max-time` stops with the command is everything it started.
    fn inheritors(&self) -> Option<crate::backend::Inheritors> {
        Some(crate::backend::command_tree())
    }

    fn searches_descendants(&self) -> bool {
        true
    }

    fn store_record(&mut self, record: &Record, released: bool) -> Result<(), String> {
        // Once released the session ends and its statement text with it:
        // keeping the last holder's record would need a table (DDL).
        if !released {
            self.session
                .update(fitted_comment(&record.to_line(), self.query_size));
        }
        Ok(())
    }

    fn connection_fd(&self) -> Option<crate::platform::BorrowedFd<'_>> {
        self.session.socket()
    }

    fn command_started(&mut self, pid: i32) {
        self.session.command_started(pid);
    }

    fn command_exited(&mut self) {
        self.session.command_exited();
    }

    fn release(self) -> Result<(), String> {
        match self.session.finish() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_record_is_cut_to_fit_and_stays_readable() {
        let record = Record {
            command: Some(
                std::iter::once("sh".to_owned())
                    .chain((0..300).map(|i| format!("{i}/{}", "*".repeat(40))))
                    .collect(),
            ),
            cwd: Some("/d".repeat(600)),
            pid: Some(7),
            lockrun: crate::record::FORMAT,
            ..Record::default()
        };
        let line = record.to_line();
        for size in [100, 200, 512, 1024, 4096, 1 << 20] {
            let text = fitted_comment(&line, size);
            assert!(text.len() < size, "{size}: {} bytes", text.len());
            assert!(text.len() as u64 <= crate::record::MAX_RECORD_BYTES);
            let Some(back) = record_in(&format!("{text}SELECT 1")) else {
                assert_eq!(text, TOO_LONG, "{size}");
                assert!(record_lost(&text));
                continue;
            };
            assert_eq!(back.pid, Some(7), "{size}");
            let command = back.command.unwrap_or_default();
            assert_eq!(command.first().map(String::as_str), Some("sh"));
            // Even a size of 1 MiB: a reader takes no more than 64 KiB.
            assert!(command.iter().any(|w| w.ends_with(CUT)), "{size}");
        }
        // What fits is left alone.
        let short = Record {
            pid: Some(1),
            lockrun: crate::record::FORMAT,
            ..Record::default()
        };
        assert_eq!(
            fitted_comment(&short.to_line(), 1024),
            comment(&short.to_line())
        );
    }

    #[test]
    fn record_survives_the_comment() {
        let record = Record {
            command: Some(vec!["sh".into(), "-c".into(), "echo */ /* x".into()]),
            pid: Some(7),
            lockrun: crate::record::FORMAT,
            ..Record::default()
        };
        let text = comment(&record.to_line());
        assert_eq!(text.matches("*/").count(), 1, "{text}");
        assert!(!text[2..].contains("/*"), "{text}");
        let back = record_in(&format!("{text}SELECT 1")).unwrap();
        assert_eq!(back.command, record.command);
        assert_eq!(back.pid, Some(7));
    }
}
