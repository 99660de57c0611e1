//! `--slots N` on a PostgreSQL lock: at most N holders of one name at once.
//!
//! Every key is computed by the server from the lock's NAME, so that any
//! client can take part from SQL (PostgreSQL 12 or later, in the URL's
//! database):
//!
//! - slot K (1..N) is `pg_advisory_lock(hashtextextended('NAME', K))`: a
//!   session holding it holds slot K, and its command gets
//!   `LOCKRUN_SLOT=K`;
//! - the queue is `hashtextextended('NAME', 0)`, the key of the plain lock
//!   of the same name: waiters queue on it in the server, so only the one
//!   holding it (the head) contends for the slots, and the rest are served
//!   in the order the server grants it;
//! - N itself: every contender, from connecting until it ends, holds
//!   `pg_advisory_lock_shared(hashtext('NAME'), N)` (the two-int form, a
//!   key space of its own). `pg_locks` shows it to anyone who can connect,
//!   no privilege and no table needed; a contender whose N differs from one
//!   already there is refused (64) naming the session that holds it. It
//!   takes its own first, then looks: of two contenders arriving together
//!   with different numbers, at least one sees the other.
//! - that the name is used with --slots at all: every such contender also
//!   holds `pg_advisory_lock_shared(hashtext('NAME'), 0)` (0 is no N). A
//!   contender without --slots asks for it exclusively for one statement
//!   (`pg_try_advisory_xact_lock`), after trying the lock: a refusal means
//!   --slots contenders are there, and only then does it read `pg_locks`
//!   for their N. The common case, nobody using --slots, costs no scan of
//!   the lock table, which on a new session costs more than everything
//!   else its first statement does.
//! - the other way round, a contender with --slots looks, in its first
//!   statement, for a session holding the queue key (the plain lock of the
//!   name) that says no N: one that took the lock without --slots, from
//!   lockrun or from SQL. It is refused (64) naming that session.
//! - a lockrun releasing a slot sends `NOTIFY` on the channel
//!   `lockrun <queue key>` (`pg_notify('lockrun ' || hashtextextended('NAME', 0), '')`)
//!   in the same round trip as its unlock.
//!
//! How the head waits: `LISTEN` on that channel, try every slot in one
//! statement, and sleep on the connection until a notification comes, or
//! for at most [`RECHECK`], whichever is first; then try again. Chosen over
//! blocking in `pg_advisory_lock` on one slot with a `lock_timeout`
//! rotation: that wakes at once only when the one slot it blocks on frees,
//! and up to a rotation period late for the other N-1, while a
//! notification wakes the head at once whichever slot freed, and the head
//! makes no query at all while nothing happens. The bounded recheck covers
//! the releases nobody announces: a holder whose lockrun was killed (its
//! session ends and the server frees the slot silently), a broken
//! connection, a client from SQL that does not notify. One statement a
//! second from one session per lock, never a crowd: waiters behind the
//! head wait in the server on the queue key and cost nothing.
//!
//! Taking a slot is one statement: a recursive query tries slot 1, then 2
//! only if 1 was taken, and so on (each step only runs when the one before
//! failed, so at most one slot is ever taken; a plain `LIMIT` does not
//! promise that), and lets go of the queue in the same statement once a
//! slot is ours.

use std::time::Duration;

/// How long the head sleeps without a notification before it looks at the
/// slots again: how late a slot freed without a notification (a killed
/// holder) is noticed.
pub const RECHECK: Duration = Duration::from_secs(1);

/// How long the head of the queue may stay idle before the server ends
/// its session: a head that runs makes a statement at least every
/// [`RECHECK`], so only a stopped one (SIGSTOP, Ctrl-Z) reaches it, and
/// its session's end lets go of the queue for the waiters behind it.
pub const HEAD_IDLE_LIMIT: Duration = Duration::from_secs(10);

/// Sets `idle_session_timeout` (PostgreSQL 14 and later; older servers
/// skip it, evaluating nothing) to [`HEAD_IDLE_LIMIT`], answering with the
/// setting it had (one row, or none on an older server).
pub fn guard_idle_sql() -> String {
    format!(
        "SELECT current_setting('idle_session_timeout') AS lockrun_idle_was, \
         set_config('idle_session_timeout', '{}ms', false) \
         WHERE current_setting('server_version_num')::int >= 140000",
        HEAD_IDLE_LIMIT.as_millis()
    )
}

/// Puts `idle_session_timeout` back as [`guard_idle_sql`] found it.
pub fn restore_idle_sql(previous: &str) -> String {
    format!(
        "SELECT set_config('idle_session_timeout', {}, false)",
        super::sql::literal(previous)
    )
}

/// The SQL expression for slot `k`'s key (`k` an SQL expression).
pub fn slot_key_sql(name: &str, k: &str) -> String {
    format!("hashtextextended({name}, {k})")
}

/// The shared locks every contender holds to say its N, and that the
/// name is used with --slots (two columns).
pub fn announce_sql(name: &str, n: u16) -> String {
    format!(
        "pg_advisory_lock_shared(hashtext({name}), {n}), pg_advisory_lock_shared(hashtext({name}), 0)"
    )
}

/// For a contender without --slots: true when nobody uses the name with
/// --slots (held until the statement's transaction ends, so never in
/// anyone's way for longer).
pub fn unused_sql(name: &str) -> String {
    format!("pg_try_advisory_xact_lock(hashtext({name}), 0)")
}

/// The channel a releasing holder notifies, as an identifier for LISTEN.
pub fn channel(queue: i64) -> String {
    format!("lockrun {queue}")
}

/// The statement a holder lets go of everything with: its slot, the shared
/// lock naming N (and the queue, in case), then wakes the head.
pub fn release_sql(queue: i64) -> String {
    format!(
        "SELECT pg_advisory_unlock_all(), pg_notify('{}', '')",
        channel(queue)
    )
}

/// How a contender comes to try the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Through the queue: only if the queue key is free, and then it is
    /// kept (we are the head) unless a slot is taken.
    Queue,
    /// As the head, already holding the queue key: let go of it with a slot.
    Head,
    /// Not waiting (`-n`, `-w 0`): the slots directly, past the queue.
    Direct,
}

/// One statement: whether another N is announced (that N and a
/// session's server pid saying it, first columns, and then nothing is tried), whether
/// we are at the head (Queue: the queue key was free), and the slot taken
/// with its key (NULL when none was free).
/// Then the fencing token, taken once the slot is ours, and the server pid
/// of a session holding the queue key without --slots (then nothing is
/// tried either). `queue` is the
/// queue key as an SQL expression. With `first` (the attempt made while
/// connecting: our session's mark, see `lock::SESSION_MARK`) the other Ns
/// are looked for, and nothing is tried unless the session bears our mark;
/// without, the first two columns are NULL.
pub fn take_sql(name: &str, queue: &str, n: u16, entry: Entry, first: Option<&str>) -> String {
    let head = match entry {
        Entry::Queue => format!("pg_try_advisory_lock({queue})"),
        Entry::Head | Entry::Direct => "true".to_owned(),
    };
    let unlock = match entry {
        Entry::Queue | Entry::Head => {
            format!(", CASE WHEN c.slot IS NOT NULL THEN pg_advisory_unlock({queue}) END")
        }
        Entry::Direct => String::new(),
    };
    // Without the check, `other` and `plain` are empty (and pg_locks is
    // never read).
    let check = if first.is_some() { "" } else { "AND false" };
    let head = match first {
        Some(mark) => format!(
            "CASE WHEN coalesce(current_setting('{}', true), '') <> {} THEN false ELSE {head} END",
            super::sql::SESSION_MARK,
            super::sql::literal(mark)
        ),
        None => head,
    };
    let slot = slot_key_sql(name, "k + 1");
    let key = slot_key_sql(name, "c.slot");
    // Flushed to disk with the commit, or a crash could hand it out again.
    let token = super::sql::DURABLE_TOKEN;
    format!(
        "WITH RECURSIVE other AS MATERIALIZED (\
           SELECT l.objid::bigint AS n, l.pid FROM pg_locks l \
           WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid() \
           AND l.classid = (hashtext({name})::bigint & 4294967295)::oid AND l.objid NOT IN ({n}::oid, 0::oid) \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           {check} LIMIT 1), \
         plain AS MATERIALIZED (\
           SELECT q.pid FROM pg_locks q \
           WHERE q.locktype = 'advisory' AND q.objsubid = 1 AND q.granted AND q.pid <> pg_backend_pid() \
           AND q.classid = ((({queue}) >> 32) & 4294967295)::oid AND q.objid = (({queue}) & 4294967295)::oid \
           AND q.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND NOT EXISTS (SELECT 1 FROM pg_locks a WHERE a.pid = q.pid AND a.locktype = 'advisory' \
             AND a.objsubid = 2 AND a.granted AND a.classid = (hashtext({name})::bigint & 4294967295)::oid) \
           {check} LIMIT 1), \
         t(k, got) AS (\
           SELECT 0, false FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM other) OR EXISTS (SELECT 1 FROM plain) \
             THEN false ELSE {head} END AS head) h WHERE h.head \
           UNION ALL \
           SELECT k + 1, pg_try_advisory_lock({slot}) FROM t WHERE NOT got AND k < {n}) \
         SELECT (SELECT n FROM other) AS other_n, (SELECT pid FROM other) AS other_pid, \
           c.head AS head, c.slot AS slot, {key} AS slot_key, \
           CASE WHEN c.slot IS NOT NULL THEN {token} END AS token, \
           (SELECT pid FROM plain) AS plain_pid{unlock} \
         FROM (SELECT count(*) > 0 AS head, max(k) FILTER (WHERE got) AS slot FROM t) c"
    )
}

/// An N announced for the lock named by the SQL literal `name` (`holder`
/// and the refusal's message ask `sessions::announcers` which session
/// said it); NULL when nobody uses it with --slots. pg_locks only: its
/// join with pg_stat_activity costs more than the rest of the statement.
pub fn announced_sql(name: &str) -> String {
    format!(
        "(SELECT l.objid::bigint FROM pg_locks l \
           WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted AND l.objid <> 0 \
           AND l.classid = (hashtext({name})::bigint & 4294967295)::oid \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           ORDER BY l.pid LIMIT 1)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_head_and_the_queue_let_go_of_the_queue() {
        let direct = take_sql("E'n'", "5", 3, Entry::Direct, Some("m"));
        assert!(!direct.contains("pg_advisory_unlock(5)"), "{direct}");
        assert!(!direct.contains("pg_try_advisory_lock(5)"), "{direct}");
        let queue = take_sql("E'n'", "5", 3, Entry::Queue, None);
        assert!(queue.contains("AND false"), "{queue}");
        assert!(queue.contains("pg_try_advisory_lock(5)"), "{queue}");
        assert!(queue.contains("pg_advisory_unlock(5)"), "{queue}");
        assert!(queue.contains("k < 3"), "{queue}");
        assert_eq!(channel(-7), "lockrun -7");
    }
}
