//! What the PostgreSQL backend's modules all need of its SQL: the
//! session's mark, advisory keys as pg_locks shows them, string literals,
//! and the record carried in a statement's comment. Its own module, below
//! `lock`, `session`, `sessions` and `slots`, so that none of them has to
//! name another for these (they formed a cycle when these lived in
//! `lock`).

use crate::record::Record;
use postgres::SimpleQueryRow;

/// The value of `row`'s column named `name`; `None` for NULL or no such
/// column (`SimpleQueryRow::get` would panic on a name the answer lacks).
pub fn named<'a>(row: &'a SimpleQueryRow, name: &str) -> Option<&'a str> {
    row.try_get(name).ok().flatten()
}

/// One row of an answer, its values found by their columns' names: a
/// statement's columns can then be added, removed or reordered without a
/// reader taking one value for another (`SELECT k AS lock_key, ...`).
#[derive(Debug, Clone, Default)]
pub struct Row(Vec<(String, Option<String>)>);

impl Row {
    pub fn of(row: &SimpleQueryRow) -> Row {
        Row(row
            .columns()
            .iter()
            .enumerate()
            .map(|(i, column)| (column.name().to_owned(), row.get(i).map(str::to_owned)))
            .collect())
    }

    /// The value of the column named `name`; `None` for NULL or no such
    /// column.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(column, _)| column == name)
            .and_then(|(_, value)| value.clone())
    }

    /// The first column's value: for an answer of one column.
    pub fn first(&self) -> Option<String> {
        self.0.first().and_then(|(_, value)| value.clone())
    }
}

/// The fencing token, as an SQL expression: `txid_current()`, in a
/// transaction made to flush its commit to disk before the server answers.
///
/// Why not `txid_current()` alone: a transaction that writes nothing but
/// its commit record commits asynchronously (PostgreSQL flushes the commit
/// at once only when the transaction wrote WAL before it); the record sits
/// in the WAL buffers until the WAL writer's next round (200 ms by
/// default), and a crash before it loses it. Recovery then hands out the
/// same transaction id again: the next holder's token equalled, or was
/// even below, the one before the crash (bench/faults/repro-pg-token-reuse.sh:
/// 726, then 726). A transactional logical message (a WAL record anyone
/// may write, no table needed, PostgreSQL 9.6 or later) makes the commit
/// a synchronous one, and `synchronous_commit` is raised from `off` to
/// `local` for this transaction alone (a role or database may set `off`).
/// The cost is one WAL flush per lock taken.
pub const DURABLE_TOKEN: &str = "(SELECT txid_current() \
FROM pg_logical_emit_message(true, 'lockrun', 'fencing token') AS durable, \
set_config('synchronous_commit', CASE current_setting('synchronous_commit') \
WHEN 'off' THEN 'local' ELSE current_setting('synchronous_commit') END, true) AS commit_mode)";

/// A setting lockrun gives its server session, unique to the run: a
/// session that already has one when lockrun connects was handed over from
/// another client, which only a pooler in transaction or statement mode
/// does (a session-mode pool resets the session, DISCARD ALL, between
/// clients; a direct connection is a new session). Such a pooler runs
/// other clients' statements in the session holding our lock, and their
/// `pg_try_advisory_lock` succeeds in it: nothing is taken then.
pub const SESSION_MARK: &str = "lockrun.session";

/// pg_locks shows a bigint advisory key as two oids: the high and the low
/// 32 bits.
pub fn key_parts(key: i64) -> (u32, u32) {
    let bits = key as u64;
    ((bits >> 32) as u32, bits as u32)
}

/// `text` as an SQL string literal whatever `standard_conforming_strings`
/// says: an escape string, its backslashes and quotes escaped.
pub fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The record back from a statement's text, if it carries one.
pub fn record_in(query: &str) -> Option<Record> {
    let rest = query.strip_prefix("/*lockrun ")?;
    let end = rest.find("*/")?;
    Record::parse(&rest.as_bytes()[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal(r"a'b\c"), r"E'a\'b\\c'");
    }

    #[test]
    fn keys_split_as_pg_locks_shows_them() {
        assert_eq!(key_parts(-1), (u32::MAX, u32::MAX));
        assert_eq!(key_parts(0x1_0000_0002), (1, 2));
    }
}
