//! The etcd v3 calls lockrun makes, over gRPC: leases, the lock key, the
//! record stored as its value, and the wait for the key ahead of ours.
//!
//! The lock follows etcd's own lock recipe (the one behind `etcdctl lock`
//! and the `/v3/lock/lock` service): each contender creates the key
//! `NAME/<lease id in hex>` attached to its lease, and the contender whose
//! key has the lowest creation revision holds the lock. So lockrun and
//! `etcdctl lock NAME` exclude each other, as lockrun and flock(1) do on a
//! file.
//!
//! Every call goes to the member that last answered and moves on to the
//! next one on any failure that another member may not share (no
//! connection, no answer in time, no leader, a member shutting down). Each
//! call lockrun makes is safe to repeat: creating our key is
//! compare-and-create, a lease granted twice leaves an empty lease that
//! expires on its own.
//!
//! The client is asynchronous inside (tonic on a one-worker tokio
//! runtime, which also keeps the connections alive while lockrun's
//! threads block) and blocking outside: lockrun's threads call it like a
//! function.

use super::{Access, EtcdUrl, Password};
use etcd_client as ec;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long an ordinary call may take before etcd counts as unreachable.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// One member's share of a call: past this, the next member is asked. A
/// stopped or partitioned member accepts connections and never answers,
/// so silence must count as a failure, well within a lease's TTL. The
/// least: with a longer `--ttl` it is a quarter of the TTL (see
/// [`Client::fit_to_ttl`]).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
/// A waiter's watch is silent while the holder works; this often it asks
/// its member for a progress report, to notice a member that stopped.
const WATCH_PROBE: Duration = Duration::from_secs(2);
/// After every member failed, a waiter tries again this soon.
const RETRY: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct EtcdError {
    pub message: String,
    /// Every member would say the same (credentials refused, access
    /// denied, a certificate refused): trying again cannot help.
    pub permanent: bool,
    /// The exit status when the cause is on this machine, not in etcd: a
    /// credential file lockrun refuses to read (a FIFO, a device) is 77,
    /// as a lock file of that kind is. `None`: etcd's, 69.
    pub exit: Option<u8>,
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn error(message: impl Into<String>) -> EtcdError {
    EtcdError {
        message: message.into(),
        permanent: false,
        exit: None,
    }
}

fn permanent(message: String) -> EtcdError {
    EtcdError {
        message,
        permanent: true,
        exit: None,
    }
}

/// One key as etcd returns it.
#[derive(Debug, Clone)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

impl From<&ec::KeyValue> for Kv {
    fn from(kv: &ec::KeyValue) -> Kv {
        Kv {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        }
    }
}

/// How a release found our key.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// Still ours: deleted now, so the next holder may go.
    Ours,
    /// Gone before the release: the lease had expired (or the key was
    /// deleted), so the lock was not ours for the whole run.
    AlreadyGone,
}

/// What the client crate says for a keep-alive answered with TTL <= 0.
const LEASE_NOT_FOUND: &str = "lease not found";

/// How one renewal ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// etcd says the lease no longer exists.
    Expired,
    /// lockrun is finishing: not an answer.
    Stopped,
}

/// How a watch on the held key ended.
pub enum Watched {
    /// Nothing happened to the key until the time given.
    Quiet,
    /// The key was deleted or is no longer ours: the lock is lost.
    Gone(String),
    /// lockrun is finishing.
    Stopped,
    /// The member failed (or the watch was cancelled): try again.
    Failed,
}

/// The watch on our held key, kept across renewals.
pub struct HeldWatch {
    key: String,
    /// Our key's creation revision.
    revision: i64,
    /// The revision to watch from: every change after the last one seen.
    from: i64,
    stream: Option<ec::WatchStream>,
}

impl HeldWatch {
    /// From our key's creation on: nothing that happened to it since (even
    /// before this watch exists) is missed.
    pub fn new(key: String, revision: i64) -> HeldWatch {
        HeldWatch {
            key,
            revision,
            from: revision,
            stream: None,
        }
    }
}

/// The outcome of one attempt at the lock.
pub enum Attempt {
    /// Our key is the oldest: the lock is ours; `revision` is our key's
    /// creation revision (the fencing token).
    Acquired { revision: i64 },
    /// Another key is older; ours now exists and waits behind it.
    Queued { revision: i64, owner: Option<Kv> },
}

/// How one round of a wait ended.
enum Round {
    /// The lock (or a slot) is ours.
    Ours,
    /// The key watched changed, seen on member `at`: look again there, with
    /// a read of that member's own state, which is already as new as the
    /// change (a serializable read: no round of consensus, half the time).
    Changed { at: usize },
    /// Look again from scratch (the watch was cancelled).
    Again,
}

/// What a batch of watch events means to a waiter.
enum Verdict {
    /// Nothing that concerns us: keep watching.
    Wait,
    /// The lock (or a slot) is ours, as of these events.
    Ours,
    /// Something changed: read again.
    Look,
    /// Our own key changed (it was deleted): read again from scratch.
    Again,
}

/// A client for a list of endpoints; cheap to clone (threads share it).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// Always `Some` until dropped (see `Drop`).
    runtime: Option<tokio::runtime::Runtime>,
    members: Vec<Member>,
    /// The member that answered last: calls start there.
    preferred: AtomicUsize,
    tls: Option<ec::TlsOptions>,
    credentials: Option<(String, String)>,
    access: Access,
    /// `-v`: say when a key left behind is revoked (see `revoke_abandoned`).
    verbose: AtomicBool,
    /// One member's share of a call, in ms (see `ATTEMPT_TIMEOUT`).
    attempt_ms: AtomicU64,
}

struct Member {
    endpoint: String,
    /// Connected on first use, and kept: tonic reconnects it as needed.
    client: tokio::sync::Mutex<Option<ec::Client>>,
}

/// Why one member could not serve a call.
enum Failed {
    /// Another member may do better (no connection, no answer, no leader).
    Member(String),
    /// Every member would say the same (authentication, permissions, a
    /// refused certificate): stop and say so.
    Final(String),
}

impl Client {
    /// Reads the certificates and password the URL's access names and
    /// prepares one connection per endpoint (made on first use). A file
    /// that cannot be read or parsed is an error naming it.
    pub fn new(url: &EtcdUrl) -> Result<Client, EtcdError> {
        let access = url.access.clone();
        let tls = if access.tls {
            Some(tls_options(&access)?)
        } else {
            None
        };
        let credentials = match (&access.user, &access.password) {
            (Some(user), Some(password)) => Some((user.clone(), read_password(password)?)),
            _ => None,
        };
        // A member that closes a connection under a write must be an error
        // (EPIPE), not the death of lockrun.
        crate::platform::ignore_broken_pipes();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd-io")
            // Every thread of the runtime (workers, the blocking pool that
            // resolves names) keeps signals off: lockrun's handlers write to
            // the wake pipe, which only the main thread knows to be open.
            .on_thread_start(|| {
                crate::platform::block_signals_on_this_thread();
            })
            .enable_all()
            .build()
            .map_err(|e| error(format!("cannot start the etcd client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                runtime: Some(runtime),
                members: url
                    .endpoints
                    .iter()
                    .map(|endpoint| Member {
                        endpoint: endpoint.clone(),
                        client: tokio::sync::Mutex::new(None),
                    })
                    .collect(),
                preferred: AtomicUsize::new(0),
                tls,
                credentials,
                access,
                verbose: AtomicBool::new(false),
                attempt_ms: AtomicU64::new(millis(ATTEMPT_TIMEOUT)),
            }),
        })
    }

    /// Fits each call's time to the lease's TTL (issue 29 item 6): a fixed
    /// 1.5 s per member made etcd unusable on a slow link whatever the TTL
    /// (a new connection and its first call take several round trips: at
    /// 500 ms each, past 1.5 s). A member may now take up to TTL/4 (at
    /// least 1.5 s), and a call up to three of those (at least 5 s): a
    /// renewal, every TTL/6, still leaves time for another member before
    /// the TTL has passed.
    pub fn fit_to_ttl(&self, ttl: Duration) {
        let attempt = ATTEMPT_TIMEOUT.max(ttl / 4);
        self.inner
            .attempt_ms
            .store(millis(attempt), Ordering::Relaxed);
    }

    /// How long an ordinary call may take before etcd counts as unreachable.
    pub fn call_timeout(&self) -> Duration {
        self.inner.call_timeout()
    }

    /// `-v`: say what is done to keys other lockruns left behind.
    pub fn set_verbose(&self, verbose: bool) {
        self.inner.verbose.store(verbose, Ordering::Relaxed);
    }

    pub fn endpoints(&self) -> String {
        let names: Vec<&str> = self
            .inner
            .members
            .iter()
            .map(|m| m.endpoint.as_str())
            .collect();
        names.join(",")
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        match &self.inner.runtime {
            Some(runtime) => runtime.block_on(future),
            None => unreachable!("the runtime lives as long as the client"),
        }
    }

    /// Runs `future` until it ends (`Some`) or `stop` is notified (`None`;
    /// a permit stored before is taken at once, so no stop is missed).
    fn unless_stopped<F: Future>(
        &self,
        stop: &tokio::sync::Notify,
        future: F,
    ) -> Option<F::Output> {
        self.block_on(async {
            let mut future = std::pin::pin!(future);
            let mut stopped = std::pin::pin!(stop.notified());
            std::future::poll_fn(|cx| {
                if stopped.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(None);
                }
                future.as_mut().poll(cx).map(Some)
            })
            .await
        })
    }

    /// Grants a lease; returns its id and the TTL etcd granted (which may
    /// be longer than asked: etcd has a minimum).
    pub fn grant(&self, ttl: Duration) -> Result<(i64, Duration), EtcdError> {
        let secs = (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1);
        let secs = i64::try_from(secs).unwrap_or(i64::MAX);
        let answer = self.block_on(self.inner.call(
            "lease grant",
            Instant::now() + self.call_timeout(),
            move |mut c| async move { c.lease_grant(secs, None).await },
        ))?;
        let granted = u64::try_from(answer.ttl()).unwrap_or(0).max(1);
        Ok((answer.id(), Duration::from_secs(granted)))
    }

    /// Renews the lease once. `Expired` is etcd's own answer that the lease
    /// no longer exists (revoked, or expired): a keep-alive answered with a
    /// TTL of 0, which etcd gives only from the leader's lessor, so it is
    /// never a member's guess. The client crate turns that answer into an
    /// error ("lease not found") before lockrun sees the TTL; taken as a
    /// member failure it would have been retried until lockrun's own
    /// deadline, with the command running on although the next holder had
    /// started (issue 29 item 1). One round trip: the crate's opening
    /// keep-alive is itself the renewal, and a lease renewed is good for
    /// its granted TTL. `Stopped`: `stop` was notified (lockrun is
    /// finishing), whatever was in flight.
    ///
    /// `hedge`: ask the preferred member first and, if it has not answered
    /// after that long, every other member too, each with the whole time
    /// left, rather than one after the other with a share of it each.
    /// During a leader election every member holds a renewal until there is
    /// a leader again and then forwards it; the first to get through is the
    /// one that counts (issue 29 item 4: shares cut short one after the
    /// other used up the lease's deadline although the cluster had a leader
    /// again before it). `None`: one member after the other.
    pub fn keepalive(
        &self,
        lease: i64,
        deadline: Instant,
        hedge: Option<Duration>,
        stop: &tokio::sync::Notify,
    ) -> Result<Renewal, EtcdError> {
        let op = move |mut c: ec::Client| async move {
            match c.lease_keep_alive(lease).await {
                Ok(_) => Ok(true),
                Err(ec::Error::LeaseKeepAliveError(m)) if m == LEASE_NOT_FOUND => Ok(false),
                Err(e) => Err(e),
            }
        };
        let renewed = match hedge {
            Some(hedge) if self.inner.members.len() > 1 => self.unless_stopped(
                stop,
                self.inner.call_all("lease keep-alive", deadline, hedge, op),
            ),
            _ => self.unless_stopped(stop, self.inner.call("lease keep-alive", deadline, op)),
        };
        match renewed {
            None => Ok(Renewal::Stopped),
            Some(Ok(true)) => Ok(Renewal::Renewed),
            Some(Ok(false)) => Ok(Renewal::Expired),
            Some(Err(e)) => Err(e),
        }
    }

    /// Watches our held key (kept open in `watch` between calls) until
    /// `until`, so that its deletion (a revoked or expired lease, a key
    /// deleted by hand) is seen the moment etcd applies it rather than at
    /// the next renewal, TTL/6 later. Only etcd's own events count: a
    /// failing member is `Failed`, and the renewals judge the lease.
    pub fn watch_held(
        &self,
        watch: &mut HeldWatch,
        until: Instant,
        stop: &tokio::sync::Notify,
    ) -> Watched {
        match self.unless_stopped(stop, self.inner.watch_held(watch, until)) {
            None => Watched::Stopped,
            Some(Ok(None)) => Watched::Quiet,
            Some(Ok(Some(reason))) => Watched::Gone(reason),
            Some(Err(_)) => Watched::Failed,
        }
    }

    /// Revokes the lease, which deletes every key attached to it: the lock
    /// key, whether held or still waiting. Tried again (every member, with
    /// a short pause) until `deadline`: a key left behind would hold or
    /// block the lock for a whole TTL with nobody running.
    pub fn revoke(&self, lease: i64, deadline: Instant) -> Result<(), EtcdError> {
        self.block_on(self.inner.revoke(lease, deadline))
    }

    /// Releases the lock: deletes our key `key` and stores the last
    /// holder's record under `last.0` (no lease: it outlives us) in one
    /// transaction, then revokes the lease, retried until `deadline` as
    /// [`Client::revoke`] is (when the transaction's fate is unknown, the
    /// revoke is what deletes the key). The revoke is awaited even after
    /// the transaction deleted the key: sent and left to the runtime, 40
    /// of 50 runs' revokes never left before lockrun exited (issue 34),
    /// and each such lease lingered until its TTL.
    pub fn release(
        &self,
        lease: i64,
        (key, revision): (&str, i64),
        last: Option<(&str, &[u8])>,
        deadline: Instant,
    ) -> Result<Released, EtcdError> {
        let mut ops = vec![ec::TxnOp::delete(key, None)];
        // When the compare fails: the last record as it stands, so that a
        // transaction already applied by a member that answered too late
        // (and so sent again to the next one) is known by what it wrote.
        let mut otherwise = Vec::new();
        if let Some((name, value)) = last {
            ops.push(ec::TxnOp::put(name, value, None));
            otherwise.push(ec::TxnOp::get(name, None));
        }
        let ours_written = |answer: &ec::TxnResponse| {
            last.is_some_and(|(_, value)| {
                answer.op_responses().iter().any(|r| match r {
                    ec::TxnOpResponse::Get(get) => get.kvs().iter().any(|kv| kv.value() == value),
                    _ => false,
                })
            })
        };
        // Only while our key is still the one we created: if its lease
        // expired meanwhile (a renewal starved for a whole TTL), etcd may
        // already have given the lock to another holder while the command
        // ran, and that must not end as a success.
        let ours = ec::Compare::create_revision(key, ec::CompareOp::Equal, revision);
        self.block_on(async {
            // The handoff first, then the revoke: run together, the revoke
            // could delete our key before the transaction's compare, which
            // would then read as a key lost before the release.
            let handed = self
                .inner
                .call("release transaction", deadline, move |mut c| {
                    let txn = ec::Txn::new()
                        .when([ours.clone()])
                        .and_then(ops.clone())
                        .or_else(otherwise.clone());
                    async move { c.txn(txn).await }
                })
                .await;
            let revoked = self.inner.revoke(lease, deadline).await;
            match handed {
                // Our own earlier attempt deleted the key (issue 29: exit
                // 76 for a run that held the lock to its end, when the
                // first member applied the release but answered late): the
                // record it stored is ours, byte for byte (it names our
                // token, pid and times), which no later holder's can be.
                Ok(answer) if !answer.succeeded() && ours_written(&answer) => {
                    revoked.map(|()| Released::Ours)
                }
                Ok(answer) if !answer.succeeded() => Ok(Released::AlreadyGone),
                Ok(_) => revoked.map(|()| Released::Ours),
                // etcd's refusal says what happened; a revoke that then
                // ran out of time would only say "no answer".
                Err(e) if e.permanent => Err(e),
                Err(e) => revoked.and(Err(e)),
            }
        })
    }

    /// One round trip: creates our key (with `value`, on `lease`) unless it
    /// exists, and reads the oldest key under the lock's prefix.
    pub fn attempt(&self, name: &str, lease: i64, value: &[u8]) -> Result<Attempt, EtcdError> {
        let key = key_for(name, lease);
        let (revision, oldest) = self.attempt_n(name, lease, value, 1)?;
        Ok(match oldest.into_iter().next() {
            Some(kv) if kv.key == key => Attempt::Acquired { revision },
            owner => Attempt::Queued { revision, owner },
        })
    }

    /// [`Client::attempt`] for `--slots N`: returns our key's creation
    /// revision and the `limit` oldest keys under the prefix, oldest first,
    /// with their values (the holders, when `limit` is N).
    pub fn attempt_n(
        &self,
        name: &str,
        lease: i64,
        value: &[u8],
        limit: u16,
    ) -> Result<(i64, Vec<Kv>), EtcdError> {
        let key = key_for(name, lease);
        let prefix = format!("{name}/");
        let value = value.to_vec();
        let k = key.clone();
        let answer = self.block_on(self.inner.call(
            "lock transaction",
            Instant::now() + self.call_timeout(),
            move |mut c| {
                let txn = ec::Txn::new()
                    .when([ec::Compare::create_revision(
                        k.clone(),
                        ec::CompareOp::Equal,
                        0,
                    )])
                    .and_then([
                        ec::TxnOp::put(
                            k.clone(),
                            value.clone(),
                            Some(ec::PutOptions::new().with_lease(lease)),
                        ),
                        ec::TxnOp::get(prefix.clone(), Some(oldest_n(limit))),
                    ])
                    .or_else([
                        ec::TxnOp::get(k.clone(), None),
                        ec::TxnOp::get(prefix.clone(), Some(oldest_n(limit))),
                    ]);
                async move { c.txn(txn).await }
            },
        ))?;
        let ranges: Vec<Vec<Kv>> = answer
            .op_responses()
            .into_iter()
            .map(|r| match r {
                ec::TxnOpResponse::Get(get) => get.kvs().iter().map(Kv::from).collect(),
                _ => Vec::new(),
            })
            .collect();
        let revision = if answer.succeeded() {
            answer.header().map(|h| h.revision())
        } else {
            ranges
                .first()
                .and_then(|r| r.first())
                .map(|kv| kv.create_revision)
        }
        .ok_or_else(|| malformed("a lock transaction without our key's revision"))?;
        let oldest = ranges.into_iter().nth(1).unwrap_or_default();
        Ok((revision, oldest))
    }

    /// Waits until our key (created by [`Client::attempt`]) is the oldest
    /// under the lock's prefix; returns it. Fails if our key is gone (or
    /// replaced) when a round looks: the lock is never reported ours
    /// without our key, as created, in the same read that finds it oldest,
    /// or in the same watch that sees the last older key go.
    ///
    /// A handoff costs the releasing holder's one write and its watch
    /// event, nothing more: when the key ahead is the last one older than
    /// ours, the watch covers our key too, so its deletion needs no read to
    /// confirm; with more keys ahead, the read after a deletion is served
    /// by the member that reported it, from its own state (serializable),
    /// which is already as new as the deletion.
    ///
    /// Not etcd's lock service: that one watches the key ahead from the
    /// revision it read it at, which etcd serves from its "unsynced"
    /// watchers, caught up by a loop every 100 ms. This watches from the
    /// revision *after* the read, which etcd serves at once from its
    /// synced watchers, so the deletion is seen as it happens; nothing is
    /// missed, because every change after the read is in the watch.
    ///
    /// While the lease lives, a failing member is not a failed wait: the
    /// wait moves to the next member, and keeps trying while none answers
    /// (the caller ends it at its deadline or when the lease is lost), so
    /// a waiter does not leave the queue because of an outage.
    ///
    /// With `--slots N` (`slots`), until our key is among the `n` oldest
    /// under the prefix (see `Inner::wait_slot_round`).
    ///
    /// `cancel` ends the wait at once (the caller's deadline passed, or a
    /// signal came), whatever call or watch is in flight: dropping it
    /// leaves nothing behind that the caller's revoke does not undo.
    pub fn wait_lock(
        &self,
        name: &str,
        lease: i64,
        slots: Option<u16>,
        cancel: &tokio::sync::Notify,
    ) -> Result<String, EtcdError> {
        let ours = key_for(name, lease);
        let wait = async {
            let mut revision = None;
            let mut seen_at = None;
            loop {
                let round = match slots {
                    Some(n) => {
                        self.inner
                            .wait_slot_round(name, &ours, n, &mut revision, seen_at)
                            .await
                    }
                    None => {
                        self.inner
                            .wait_round(name, &ours, &mut revision, seen_at)
                            .await
                    }
                };
                match round {
                    Ok(Round::Ours) => return Ok(ours),
                    Ok(Round::Changed { at }) => seen_at = Some(at),
                    Ok(Round::Again) => seen_at = None,
                    Err(Failed::Final(message)) => return Err(error(message)),
                    Err(Failed::Member(_)) => {
                        seen_at = None;
                        tokio::time::sleep(RETRY).await;
                    }
                }
            }
        };
        self.block_on(async {
            let mut wait = std::pin::pin!(wait);
            // A permit stored by a cancel that came before this wait began
            // is taken on the first poll: no cancel is ever missed.
            let mut cancelled = std::pin::pin!(cancel.notified());
            std::future::poll_fn(|cx| {
                if cancelled.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(Err(error("the wait was ended")));
                }
                wait.as_mut().poll(cx)
            })
            .await
        })
    }

    /// Revokes the lease of a key its lockrun abandoned (see
    /// [`super::keeper`]), so that it stops blocking the lock.
    pub fn revoke_abandoned(&self, kv: &Kv) -> Result<(), EtcdError> {
        self.block_on(
            self.inner
                .revoke(kv.lease, Instant::now() + self.call_timeout()),
        )
    }

    /// The `n` oldest keys under the lock's prefix (the holders with
    /// `--slots N`), oldest first, and how many keys there are in all.
    pub fn oldest_n(&self, name: &str, n: u16) -> Result<(Vec<Kv>, usize), EtcdError> {
        let prefix = format!("{name}/");
        let answer = self.block_on(self.inner.call(
            "range",
            Instant::now() + self.call_timeout(),
            move |mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(oldest_n(n))).await }
            },
        ))?;
        let count = usize::try_from(answer.count()).unwrap_or(0);
        Ok((answer.kvs().iter().map(Kv::from).collect(), count))
    }

    /// Every key that starts with `prefix` (no `/` added), up to `limit`.
    pub fn keys_starting(&self, prefix: &str, limit: i64) -> Result<Vec<Kv>, EtcdError> {
        let prefix = prefix.to_owned();
        let answer = self.block_on(self.inner.call(
            "range",
            Instant::now() + self.call_timeout(),
            move |mut c| {
                let prefix = prefix.clone();
                async move {
                    c.get(
                        prefix,
                        Some(ec::GetOptions::new().with_prefix().with_limit(limit)),
                    )
                    .await
                }
            },
        ))?;
        Ok(answer.kvs().iter().map(Kv::from).collect())
    }

    /// Takes a slot number for our key (`key`, created at `revision`, now
    /// among the `n` oldest): the lowest that no other holder's value
    /// names (`slot_of`), written into our value (`value_for`) by a
    /// transaction that succeeds only if no other holder's key changed
    /// since it was read. Two holders choosing at once cannot both win,
    /// so the numbers of current holders are unique. `Ok(None)`: our key
    /// is no longer among the holders (it is gone).
    pub fn claim_slot(
        &self,
        name: &str,
        (key, revision, lease): (&str, i64, i64),
        n: u16,
        slot_of: &dyn Fn(&[u8]) -> Option<u16>,
        value_for: &dyn Fn(u16) -> Vec<u8>,
        give_up: Instant,
    ) -> Result<Option<u16>, EtcdError> {
        // Each call has a whole call's time: one deadline shared by every
        // round left a round lost to contention with less and less (the
        // fault harness saw "no answer to the slot claim within 80 ms"
        // with etcd up, and the run end 69). Rounds end when the claim is
        // made, our key is gone, or, once `give_up` has passed, more rounds
        // were lost than claims and arrivals can explain. A lost round is
        // another holder's claim or a key come or gone: with N slots, 2N + 2
        // of them is churn, not contention. A time alone gave up on six
        // claimers whose rounds took 1.2 s each on a 0.3 s link under load
        // (tests/etcd.rs slot_claims_made_in_many_rounds_on_a_slow_link_all_succeed).
        let mut lost_rounds = 0u32;
        loop {
            let (holders, count) = self.oldest_n(name, n)?;
            if !holders
                .iter()
                .any(|kv| kv.key == key && kv.create_revision == revision)
            {
                return Ok(None);
            }
            let others: Vec<&Kv> = holders.iter().filter(|kv| kv.key != key).collect();
            let taken: Vec<u16> = others.iter().filter_map(|kv| slot_of(&kv.value)).collect();
            let Some(slot) = (1..=n).find(|k| !taken.contains(k)) else {
                return Err(error(format!(
                    "every slot number of {name} is taken by the other holders"
                )));
            };
            let mut compares = vec![ec::Compare::create_revision(
                key,
                ec::CompareOp::Equal,
                revision,
            )];
            compares.extend(others.iter().map(|kv| {
                ec::Compare::mod_revision(kv.key.as_str(), ec::CompareOp::Equal, kv.mod_revision)
            }));
            // With fewer than N keys in all, a key created after our read
            // holds at once, leaving none of `others`: it may have claimed
            // the number we chose. Then no key may be newer than what we read.
            // (With N or more, a newcomer holds only once one of `others`
            // has gone, which the compares above see.)
            if count <= usize::from(n) {
                let newest = holders
                    .iter()
                    .map(|kv| kv.create_revision)
                    .max()
                    .unwrap_or(0);
                compares.push(
                    ec::Compare::create_revision(
                        format!("{name}/"),
                        ec::CompareOp::Less,
                        newest + 1,
                    )
                    .with_prefix(),
                );
            }
            let put = ec::TxnOp::put(
                key,
                value_for(slot),
                Some(ec::PutOptions::new().with_lease(lease)),
            );
            let deadline = Instant::now() + self.call_timeout();
            let answer = self.block_on(self.inner.call("slot claim", deadline, move |mut c| {
                let txn = ec::Txn::new()
                    .when(compares.clone())
                    .and_then([put.clone()]);
                async move { c.txn(txn).await }
            }))?;
            if answer.succeeded() {
                return Ok(Some(slot));
            }
            lost_rounds += 1;
            if Instant::now() >= give_up && lost_rounds > 2 * u32::from(n) + 2 {
                return Err(error(format!(
                    "could not claim a slot number of {name}: other holders changed theirs at each of {lost_rounds} tries, more than {n} slots' claims explain, until past the time a claim may take"
                )));
            }
        }
    }

    /// The oldest key under the lock's prefix (the holder) and how many
    /// keys there are (the holder and its waiters).
    pub fn owner(&self, name: &str) -> Result<(Option<Kv>, usize), EtcdError> {
        let prefix = format!("{name}/");
        let answer = self.block_on(self.inner.call(
            "range",
            Instant::now() + self.call_timeout(),
            move |mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(oldest())).await }
            },
        ))?;
        let count = usize::try_from(answer.count()).unwrap_or(0);
        Ok((answer.kvs().first().map(Kv::from), count))
    }

    pub fn get(&self, key: &str, deadline: Instant) -> Result<Option<Kv>, EtcdError> {
        let key = key.to_owned();
        let answer = self.block_on(self.inner.call("range", deadline, move |mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        }))?;
        Ok(answer.kvs().first().map(Kv::from))
    }

    /// Replaces the value of our key, only if it is still the key we
    /// created (same creation revision): a lost lock is never re-created.
    /// Sent and left to the runtime, never awaited: it is the record
    /// naming the command's pid, stored while the command runs (a whole
    /// write, about 0.7 ms on loopback, that held up the wait for a short
    /// command: issue 34's acquire + run + release). Its order with the
    /// release's transaction does not matter: applied after it, the
    /// compare finds our key gone and nothing is written. Its answer is
    /// not read: a key gone is the session's to notice.
    pub fn update_if_ours_unawaited(&self, key: &str, revision: i64, value: &[u8], lease: i64) {
        let (key, value) = (key.to_owned(), value.to_vec());
        let inner = Arc::clone(&self.inner);
        let deadline = Instant::now() + self.call_timeout();
        // The task holds the client's state until it ends; if that is
        // after lockrun let go of its own, the runtime is shut down from
        // the task's thread, which `shutdown_background` allows.
        if let Some(runtime) = &self.inner.runtime {
            runtime.spawn(async move {
                let _ = inner
                    .call("record update", deadline, move |mut c| {
                        let txn = ec::Txn::new()
                            .when([ec::Compare::create_revision(
                                key.clone(),
                                ec::CompareOp::Equal,
                                revision,
                            )])
                            .and_then([ec::TxnOp::put(
                                key.clone(),
                                value.clone(),
                                Some(ec::PutOptions::new().with_lease(lease)),
                            )]);
                        async move { c.txn(txn).await }
                    })
                    .await;
            });
        }
    }

    /// A plain put without a lease (the last holder's record).
    pub fn put(&self, key: &str, value: &[u8], deadline: Instant) -> Result<(), EtcdError> {
        self.block_on(self.inner.put(key, value, deadline))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Not a plain drop, which waits for blocking tasks: a host name
        // being resolved (getaddrinfo, which no timeout interrupts) must
        // not keep lockrun from exiting once the call has given up on it.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Inner {
    fn attempt_timeout(&self) -> Duration {
        Duration::from_millis(self.attempt_ms.load(Ordering::Relaxed))
    }

    fn call_timeout(&self) -> Duration {
        CALL_TIMEOUT.max(self.attempt_timeout() * 3)
    }

    async fn revoke(&self, lease: i64, deadline: Instant) -> Result<(), EtcdError> {
        loop {
            let result = self
                .call("lease revoke", deadline, move |mut c| async move {
                    match c.lease_revoke(lease).await {
                        // Gone already (expired, or revoked by an answer
                        // that was lost): what we wanted.
                        Err(ec::Error::GRpcStatus(s)) if s.code() == tonic::Code::NotFound => {
                            Ok(())
                        }
                        other => other.map(drop),
                    }
                })
                .await;
            match result {
                // A refusal every member would give (the password changed,
                // the user or its role revoked while the command ran) does
                // not pass by asking again: retrying until the deadline
                // only delayed the exit, and its last try, cut short by the
                // deadline, then hid etcd's words behind "no answer".
                Err(e) if !e.permanent && Instant::now() + RETRY < deadline => {
                    tokio::time::sleep(RETRY).await;
                }
                done => return done,
            }
        }
    }

    /// See [`Client::watch_held`]. `Ok(None)`: quiet until `until`.
    async fn watch_held(
        &self,
        w: &mut HeldWatch,
        until: Instant,
    ) -> Result<Option<String>, Failed> {
        if w.stream.is_none() {
            let at = self.preferred.load(Ordering::Relaxed);
            let endpoint = &self.members[at].endpoint;
            let opened = async {
                let mut client = self.member(at).await?;
                let options = ec::WatchOptions::new().with_start_revision(w.from);
                client
                    .watch(w.key.clone(), Some(options))
                    .await
                    .map_err(|e| self.failure(endpoint, &e))
            };
            let stream = tokio::time::timeout(self.attempt_timeout(), opened)
                .await
                .map_err(|_| Failed::Member(format!("{endpoint}: no answer to the watch")))??;
            w.stream = Some(stream);
        }
        let Some(stream) = w.stream.as_mut() else {
            return Err(Failed::Member("no watch".into()));
        };
        loop {
            let answer = match tokio::time::timeout_at(until.into(), stream.message()).await {
                Err(_) => return Ok(None),
                Ok(Ok(Some(answer))) => answer,
                Ok(Ok(None) | Err(_)) => {
                    w.stream = None;
                    return Err(Failed::Member("the watch of the held key ended".into()));
                }
            };
            if answer.canceled() {
                // Compacted past `from`: what happened before the compaction
                // is left to the next renewal's look at the key.
                w.from = w.from.max(answer.compact_revision());
                w.stream = None;
                return Err(Failed::Member(
                    "the watch of the held key was cancelled".into(),
                ));
            }
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                if kv.key() != w.key.as_bytes() {
                    continue;
                }
                w.from = w.from.max(kv.mod_revision() + 1);
                match event.event_type() {
                    ec::EventType::Delete => {
                        return Ok(Some(format!(
                            "the lock key {} was deleted in etcd (its lease was revoked or expired, or the key was deleted)",
                            w.key
                        )));
                    }
                    ec::EventType::Put if kv.create_revision() != w.revision => {
                        return Ok(Some(format!(
                            "the lock key {} was deleted in etcd and created again by someone else",
                            w.key
                        )));
                    }
                    ec::EventType::Put => {}
                }
            }
        }
    }

    async fn put(&self, key: &str, value: &[u8], deadline: Instant) -> Result<(), EtcdError> {
        let (key, value) = (key.to_owned(), value.to_vec());
        self.call("put", deadline, move |mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move { c.put(key, value, None).await }
        })
        .await
        .map(drop)
    }

    /// The member's client, connected (and authenticated) on first use.
    async fn member(&self, at: usize) -> Result<ec::Client, Failed> {
        let member = &self.members[at];
        let mut slot = member.client.lock().await;
        if let Some(client) = &*slot {
            return Ok(client.clone());
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let uri = format!("{scheme}://{}", member.endpoint);
        let mut endpoint = tonic::transport::Endpoint::from_shared(uri)
            .map_err(|e| Failed::Final(format!("{}: {e}", member.endpoint)))?
            .connect_timeout(self.attempt_timeout())
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|e| Failed::Final(format!("{}: TLS: {}", member.endpoint, chain(&e))))?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| self.transport_failure(&member.endpoint, &chain(&e)))?;
        // `hasleader` on every call (etcd's WithRequireLeader): a member cut
        // off from the majority refuses at once ("no leader") and ends its
        // watches, rather than answering from its stale view. A waiter
        // watching such a member sat blind while the lock was free, its
        // progress requests still answered (issue 29 item 7: 10-13 s); now
        // the watch ends and the wait goes on at another member.
        let mut options = ec::ConnectOptions::new()
            .with_auto_token_refresh(true)
            .with_require_leader(true);
        if let Some((user, password)) = &self.credentials {
            options = options.with_user(user.clone(), password.clone());
        }
        // Authenticates when there are credentials: a wrong password or an
        // etcd without authentication is reported here.
        let client = ec::Client::from_channel(ec::Channel::Tonic(channel), Some(options))
            .await
            .map_err(|e| self.failure(&member.endpoint, &e))?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Runs `op` on the preferred member, then on each other one, until one
    /// answers, a failure is final, or `deadline` passes.
    async fn call<T, F, Fut>(&self, what: &str, deadline: Instant, op: F) -> Result<T, EtcdError>
    where
        F: Fn(ec::Client) -> Fut,
        Fut: Future<Output = Result<T, ec::Error>>,
    {
        let n = self.members.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..n {
            let at = (first + i) % n;
            let endpoint = &self.members[at].endpoint;
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                failures.push(format!("{endpoint}: not tried, out of time"));
                break;
            };
            let attempt = async {
                let client = self.member(at).await?;
                op(client).await.map_err(|e| self.failure(endpoint, &e))
            };
            // Time for the members still to try, shared: one that never
            // answers must leave the others enough of the deadline.
            let share = (left / u32::try_from(n - i).unwrap_or(1)).max(Duration::from_millis(100));
            let share = share.min(self.attempt_timeout()).min(left);
            match tokio::time::timeout(share, attempt).await {
                Ok(Ok(answer)) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(answer);
                }
                Ok(Err(Failed::Final(message))) => return Err(permanent(message)),
                Ok(Err(Failed::Member(message))) => failures.push(message),
                Err(_) => failures.push(format!(
                    "{endpoint}: no answer to the {what} within {} ms",
                    share.as_millis()
                )),
            }
        }
        // Start the next call elsewhere.
        self.preferred.store((first + 1) % n, Ordering::Relaxed);
        Err(error(format!(
            "cannot reach etcd ({})",
            failures.join("; ")
        )))
    }

    /// [`Inner::call`] on every member at once, each until `deadline` (the
    /// preferred one first, the others `hedge` later, unless it failed
    /// before): the first answer wins, a final failure ends it, and it
    /// fails only when every member has failed or the deadline has passed.
    async fn call_all<T, F, Fut>(
        &self,
        what: &str,
        deadline: Instant,
        hedge: Duration,
        op: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(ec::Client) -> Fut,
        Fut: Future<Output = Result<T, ec::Error>>,
    {
        type Attempt<'a, T> =
            std::pin::Pin<Box<dyn Future<Output = Result<(usize, T), Failed>> + 'a>>;
        let op = &op;
        let n = self.members.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        // Ends the others' hedge early when the preferred member fails.
        let first_failed = tokio::sync::Notify::new();
        let first_failed = &first_failed;
        let mut attempts: Vec<Option<Attempt<'_, T>>> = (0..n)
            .map(|i| {
                let at = (first + i) % n;
                let endpoint = &self.members[at].endpoint;
                let attempt: Attempt<'_, T> = Box::pin(async move {
                    if i == 0 {
                        let client = self.member(at).await;
                        let answer = match client {
                            Ok(client) => op(client).await.map_err(|e| self.failure(endpoint, &e)),
                            Err(e) => Err(e),
                        };
                        if answer.is_err() {
                            first_failed.notify_waiters();
                        }
                        return answer.map(|a| (at, a));
                    }
                    let _ = tokio::time::timeout(hedge, first_failed.notified()).await;
                    let client = self.member(at).await?;
                    op(client)
                        .await
                        .map(|a| (at, a))
                        .map_err(|e| self.failure(endpoint, &e))
                });
                Some(attempt)
            })
            .collect();
        let mut failures = Vec::new();
        let answered = std::future::poll_fn(|cx| {
            for slot in &mut attempts {
                let Some(attempt) = slot else { continue };
                match attempt.as_mut().poll(cx) {
                    std::task::Poll::Pending => {}
                    std::task::Poll::Ready(Ok(answer)) => {
                        return std::task::Poll::Ready(Ok(answer));
                    }
                    std::task::Poll::Ready(Err(Failed::Final(message))) => {
                        return std::task::Poll::Ready(Err(Some(message)));
                    }
                    std::task::Poll::Ready(Err(Failed::Member(message))) => {
                        failures.push(message);
                        *slot = None;
                    }
                }
            }
            if attempts.iter().all(Option::is_none) {
                std::task::Poll::Ready(Err(None))
            } else {
                std::task::Poll::Pending
            }
        });
        match tokio::time::timeout_at(deadline.into(), answered).await {
            Ok(Ok((at, answer))) => {
                self.preferred.store(at, Ordering::Relaxed);
                Ok(answer)
            }
            Ok(Err(Some(message))) => Err(permanent(message)),
            Ok(Err(None)) => Err(error(format!(
                "cannot reach etcd ({})",
                failures.join("; ")
            ))),
            Err(_) => Err(error(format!(
                "cannot reach etcd (no member answered the {what} in time{}{})",
                if failures.is_empty() { "" } else { "; " },
                failures.join("; ")
            ))),
        }
    }

    /// One round of the wait. A single transaction reads the two newest
    /// keys older than ours, only if our key still exists as we created it
    /// (same creation revision): none older means the lock is ours; our
    /// key gone or replaced is a final failure, since a key deleted from
    /// the queue (`etcdctl del`, a lease lost) is no longer in line and the
    /// lock may already be someone else's. Else watch the key ahead until
    /// it is deleted (look again; or, when it was the only one, ours).
    async fn wait_round(
        &self,
        name: &str,
        ours: &str,
        revision: &mut Option<i64>,
        seen_at: Option<usize>,
    ) -> Result<Round, Failed> {
        let (ahead, read_at) = self
            .keys_ahead("lock wait transaction", name, ours, 2, revision, seen_at)
            .await?;
        if self.revoke_abandoned(&ahead).await? {
            return Ok(Round::Again);
        }
        let Some(key) = ahead.first().map(|kv| kv.key.clone().into_bytes()) else {
            return Ok(Round::Ours);
        };
        let from = ec::WatchOptions::new().with_start_revision(read_at + 1);
        if ahead.len() > 1 {
            // Keys further ahead: its deletion moves us up one place.
            return self.watch_for(key, from, &ahead[..1], deletes).await;
        }
        // The key ahead is the only one older than ours, and no key created
        // later can be older: its deletion makes ours the oldest, unless
        // ours went first. One watch over the range holding both keys sees
        // every change to either, in revision order, so the lock is ours
        // the moment the deletion arrives, without reading again.
        let ours = ours.as_bytes().to_vec();
        let (low, high) = if key < ours {
            (key.clone(), ours.clone())
        } else {
            (ours.clone(), key.clone())
        };
        let mut end = high;
        end.push(0);
        self.watch_for(low, from.with_range(end), &ahead, |events| {
            let deleted = |k: &[u8]| was_deleted(events, k);
            if deleted(&ours) {
                Verdict::Again
            } else if deleted(&key) {
                Verdict::Ours
            } else {
                Verdict::Wait
            }
        })
        .await
    }

    /// One round of the wait for one of `n` slots. The `n` oldest keys hold
    /// the lock; a single transaction reads, if our key still exists as we
    /// created it, up to `n + 1` keys older than ours, newest first. Fewer
    /// than `n`: a slot is ours. Exactly `n`: we are first in line, and the
    /// deletion of any of those holders admits us, so we watch deletions
    /// under the prefix (only the first in line does: the others sleep).
    /// More: we watch only the key just ahead of ours, for
    /// any change: it is deleted, or it gets a slot and writes its slot
    /// number into its value, and then we are first in line. Either way a
    /// release wakes one waiter, not the crowd.
    async fn wait_slot_round(
        &self,
        name: &str,
        ours: &str,
        n: u16,
        revision: &mut Option<i64>,
        seen_at: Option<usize>,
    ) -> Result<Round, Failed> {
        let (ahead, read_at) = self
            .keys_ahead(
                "slot wait transaction",
                name,
                ours,
                i64::from(n) + 1,
                revision,
                seen_at,
            )
            .await?;
        if self.revoke_abandoned(&ahead).await? {
            return Ok(Round::Again);
        }
        if ahead.len() < usize::from(n) {
            return Ok(Round::Ours);
        }
        let from = ec::WatchOptions::new().with_start_revision(read_at + 1);
        if ahead.len() > usize::from(n) {
            return self
                .watch_for(
                    ahead[0].key.clone().into_bytes(),
                    from,
                    &ahead[..1],
                    |events: &[ec::Event]| {
                        if events.is_empty() {
                            Verdict::Wait
                        } else {
                            Verdict::Look
                        }
                    },
                )
                .await;
        }
        // First in line: the n keys ahead are all the keys older than ours,
        // and none created later is older. The first of them deleted makes
        // ours one of the n oldest, unless ours went first: the lock is
        // ours as soon as that deletion arrives. Deletions of newer keys
        // (waiters leaving) change nothing.
        let older: Vec<Vec<u8>> = ahead.iter().map(|kv| kv.key.clone().into_bytes()).collect();
        let ours = ours.as_bytes().to_vec();
        let options = from
            .with_prefix()
            .with_filters([ec::WatchFilterType::NoPut]);
        self.watch_for(format!("{name}/").into_bytes(), options, &ahead, |events| {
            let deleted = |k: &[u8]| was_deleted(events, k);
            if deleted(&ours) {
                Verdict::Again
            } else if older.iter().any(|k| deleted(k)) {
                Verdict::Ours
            } else {
                Verdict::Wait
            }
        })
        .await
    }

    /// Revokes the lease of every key in `ahead` whose lockrun left it
    /// behind on this host (see [`super::keeper`]); whether there was one,
    /// so that the round looks again. A revoke that fails is the member's
    /// failure: the next round tries again.
    async fn revoke_abandoned(&self, ahead: &[Kv]) -> Result<bool, Failed> {
        let mut any = false;
        for kv in ahead
            .iter()
            .filter(|kv| super::keeper::abandoned(&kv.value))
        {
            self.revoke(kv.lease, Instant::now() + self.call_timeout())
                .await
                .map_err(|e| Failed::Member(e.message))?;
            if self.verbose.load(Ordering::Relaxed) {
                crate::say!("lockrun: {}", super::keeper::revoked(&kv.key, kv.lease));
            }
            any = true;
        }
        Ok(any)
    }

    /// The wait rounds' one read: a single transaction that reads up to
    /// `limit` keys older than ours, newest first, only if our key still
    /// exists as we created it (same creation revision; learnt on the
    /// first round). Our key gone or replaced is a final failure: a key
    /// deleted from the queue (`etcdctl del`, a lease lost) is no longer in
    /// line, and the lock may already be someone else's. Returns the keys
    /// and the revision they were read at.
    async fn keys_ahead(
        &self,
        what: &str,
        name: &str,
        ours: &str,
        limit: i64,
        revision: &mut Option<i64>,
        seen_at: Option<usize>,
    ) -> Result<(Vec<Kv>, i64), Failed> {
        let deadline = Instant::now() + self.call_timeout();
        let gone = || {
            Failed::Final(format!(
                "our lock key {ours} is gone from etcd (its lease expired or it was deleted) while it waited"
            ))
        };
        let mine = match *revision {
            Some(r) => r,
            None => {
                let kv = self.get_member(ours, deadline).await?.ok_or_else(gone)?;
                *revision = Some(kv.create_revision);
                kv.create_revision
            }
        };
        let prefix = format!("{name}/");
        let key = ours.to_owned();
        let txn = move |mut c: ec::Client| {
            // With their values: a key whose lockrun is gone from this host
            // is seen for what it is (see `abandoned_ahead`).
            let mut options = ec::GetOptions::new()
                .with_prefix()
                .with_max_create_revision(mine - 1)
                .with_sort(ec::SortTarget::Create, ec::SortOrder::Descend)
                .with_limit(limit);
            if seen_at.is_some() {
                options = options.with_serializable();
            }
            let txn = ec::Txn::new()
                .when([ec::Compare::create_revision(
                    key.clone(),
                    ec::CompareOp::Equal,
                    mine,
                )])
                .and_then([ec::TxnOp::get(prefix.clone(), Some(options))]);
            async move { c.txn(txn).await }
        };
        let answer = self.read(what, seen_at, deadline, txn).await?;
        if !answer.succeeded() {
            return Err(gone());
        }
        let Some(ahead) = answer.op_responses().into_iter().find_map(|r| match r {
            ec::TxnOpResponse::Get(get) => Some(get.kvs().iter().map(Kv::from).collect::<Vec<_>>()),
            _ => None,
        }) else {
            return Err(Failed::Final(format!(
                "unexpected answer from etcd: a {what} without its range"
            )));
        };
        Ok((ahead, answer.header().map_or(0, |h| h.revision())))
    }

    /// A wait round's read: after a change seen on member `seen_at`, on
    /// that member alone (the caller made it serializable); else as any
    /// call, on whichever member answers.
    async fn read<T, F, Fut>(
        &self,
        what: &str,
        seen_at: Option<usize>,
        deadline: Instant,
        op: F,
    ) -> Result<T, Failed>
    where
        F: Fn(ec::Client) -> Fut,
        Fut: Future<Output = Result<T, ec::Error>>,
    {
        let Some(at) = seen_at else {
            return self
                .call(what, deadline, op)
                .await
                .map_err(|e| Failed::Member(e.message));
        };
        let endpoint = &self.members[at].endpoint;
        let attempt = async {
            let client = self.member(at).await?;
            op(client).await.map_err(|e| self.failure(endpoint, &e))
        };
        let share = deadline
            .saturating_duration_since(Instant::now())
            .min(self.attempt_timeout());
        tokio::time::timeout(share, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(Failed::Member(format!(
                    "{endpoint}: no answer to the {what}"
                )))
            })
    }

    async fn get_member(&self, key: &str, deadline: Instant) -> Result<Option<Kv>, Failed> {
        let key = key.to_owned();
        let answer = self
            .call("range", deadline, move |mut c| {
                let key = key.clone();
                async move { c.get(key, None).await }
            })
            .await
            .map_err(|e| Failed::Member(e.message))?;
        Ok(answer.kvs().first().map(Kv::from))
    }

    /// Watches `key` (with `options`) on the member that answered the last
    /// read, until `verdict` finds in a batch of events that our place in
    /// line changed. `watched`: the keys (as read) whose deletion the
    /// watch waits for; one whose lockrun turns out gone from this host
    /// (see [`super::keeper`]) never will be deleted until its TTL, so at
    /// each quiet spell the round ends, and the next one revokes it.
    async fn watch_for(
        &self,
        key: Vec<u8>,
        options: ec::WatchOptions,
        watched: &[Kv],
        verdict: impl Fn(&[ec::Event]) -> Verdict,
    ) -> Result<Round, Failed> {
        // The member that answered the read: watch there.
        let at = self.preferred.load(Ordering::Relaxed);
        let endpoint = &self.members[at].endpoint;
        let mut client = self.member(at).await?;
        let mut stream =
            tokio::time::timeout(self.attempt_timeout(), client.watch(key, Some(options)))
                .await
                .map_err(|_| Failed::Member(format!("{endpoint}: no answer to the watch")))?
                .map_err(|e| self.failure(endpoint, &e))?;
        let mut probe_sent: Option<Instant> = None;
        loop {
            let wait = match probe_sent {
                Some(sent) => {
                    (sent + self.attempt_timeout()).saturating_duration_since(Instant::now())
                }
                None => WATCH_PROBE,
            };
            match tokio::time::timeout(wait, stream.message()).await {
                Ok(Ok(Some(answer))) => {
                    probe_sent = None;
                    if answer.canceled() {
                        // Compacted past our start, or the member is going
                        // away: read again.
                        return Ok(Round::Again);
                    }
                    match verdict(answer.events()) {
                        Verdict::Wait => {}
                        Verdict::Ours => return Ok(Round::Ours),
                        Verdict::Look => return Ok(Round::Changed { at }),
                        Verdict::Again => return Ok(Round::Again),
                    }
                }
                Ok(Ok(None)) => {
                    return Err(Failed::Member(format!("{endpoint}: the watch ended")));
                }
                Ok(Err(e)) => return Err(self.failure(endpoint, &e)),
                Err(_) if probe_sent.is_some() => {
                    // Silent past a progress request: stopped or cut off.
                    self.preferred
                        .store((at + 1) % self.members.len(), Ordering::Relaxed);
                    return Err(Failed::Member(format!(
                        "{endpoint}: no answer to a watch progress request"
                    )));
                }
                Err(_) => {
                    if watched.iter().any(|kv| super::keeper::abandoned(&kv.value)) {
                        return Ok(Round::Again);
                    }
                    stream
                        .request_progress()
                        .await
                        .map_err(|e| self.failure(endpoint, &e))?;
                    probe_sent = Some(Instant::now());
                }
            }
        }
    }

    /// Sorts an etcd client error into one that another member may not
    /// have and one that every member would give, with words a person can
    /// act on.
    fn failure(&self, endpoint: &str, e: &ec::Error) -> Failed {
        match e {
            ec::Error::GRpcStatus(status) => {
                use tonic::Code;
                let message = status.message();
                let code = status.code();
                let text = match (code, message) {
                    (_, m) if m.contains("authentication failed") => format!(
                        "etcd refused user '{}' with the password from {} ({m})",
                        self.access.user.as_deref().unwrap_or("?"),
                        self.access
                            .password
                            .as_ref()
                            .map_or_else(|| "nowhere".into(), Password::source),
                    ),
                    (_, m) if m.contains("authentication is not enabled") => format!(
                        "--user was given but this etcd has no authentication enabled ({m}); drop --user, or enable auth in etcd"
                    ),
                    (_, m) if m.contains("permission denied") => format!(
                        "etcd denied user '{}' access to the lock's keys ({m}): the user was revoked, or its role lacks readwrite on the lock name's prefix",
                        self.access
                            .user
                            .as_deref()
                            .or(self
                                .access
                                .cert
                                .as_ref()
                                .map(|_| "from the client certificate"))
                            .unwrap_or("(none)")
                    ),
                    (_, m)
                        if m.contains("user name is empty")
                            || m.contains("user name not found") =>
                    {
                        format!(
                            "etcd requires authentication ({m}): give --user NAME (or a client certificate whose CN is an etcd user)"
                        )
                    }
                    (_, m) if m.contains("invalid auth token") => format!(
                        "etcd refused the authentication token and a new one could not be had ({m})"
                    ),
                    (Code::Unavailable | Code::Unknown, m) => {
                        return self.transport_failure(endpoint, &status_chain(status, m));
                    }
                    (
                        Code::DeadlineExceeded | Code::Aborted | Code::Internal | Code::Cancelled,
                        m,
                    ) => {
                        return Failed::Member(format!("{endpoint}: {m}"));
                    }
                    (_, m) => m.to_owned(),
                };
                Failed::Final(format!("{endpoint}: {text}"))
            }
            ec::Error::TransportError(t) => self.transport_failure(endpoint, &chain(t)),
            ec::Error::LeaseKeepAliveError(m) | ec::Error::WatchError(m) => {
                Failed::Member(format!("{endpoint}: {m}"))
            }
            other => Failed::Member(format!("{endpoint}: {}", chain(other))),
        }
    }

    /// A failure below gRPC: connecting, TLS, HTTP/2. TLS failures are
    /// final and explained with the file involved; the rest is the member.
    fn transport_failure(&self, endpoint: &str, text: &str) -> Failed {
        let a = &self.access;
        let ca = a.cacert.as_ref().map_or_else(
            || "the system's trusted roots".to_owned(),
            |f| format!("the CA in {}", f.display()),
        );
        let cert = a.cert.as_ref().map_or_else(
            || "none was given (--cert/--key)".to_owned(),
            |f| f.display().to_string(),
        );
        let reason = if text.contains("UnknownIssuer") || text.contains("unknown issuer") {
            format!("TLS: the server's certificate is not signed by {ca}")
        } else if text.contains("NotValidForName") || text.contains("not valid for name") {
            format!(
                "TLS: the server's certificate is not valid for this host name or address (checked against {ca})"
            )
        } else if text.contains("Expired") || text.contains("expired") {
            "TLS: a certificate has expired".to_owned()
        } else if text.contains("CertificateRequired") || text.contains("certificate required") {
            format!("TLS: the server requires a client certificate; {cert}")
        } else if text.contains("BadCertificate")
            || text.contains("UnknownCA")
            || text.contains("UnknownCa")
            || text.contains("bad certificate")
            || text.contains("unknown ca")
        {
            format!("TLS: the server refused our client certificate {cert}")
        } else if text.contains("InvalidContentType")
            || text.contains("corrupt message")
            || text.contains("CorruptMessage")
        {
            "TLS: the server does not speak TLS here (a plain-HTTP endpoint? then drop https and --cacert/--cert/--key)".to_owned()
        } else if self.tls.is_none() && text.contains("frame with invalid size") {
            "no gRPC answer over plain HTTP; if this etcd serves TLS, use etcd+https:// or --cacert FILE".to_owned()
        } else if self.tls.is_none()
            && (text.contains("broken pipe") || text.contains("connection reset"))
        {
            // A member going away, or a TLS port refusing plain HTTP: the
            // same closed connection. Another member may answer.
            return Failed::Member(format!(
                "{endpoint}: connection closed ({text}); if this etcd serves TLS, use etcd+https:// or --cacert FILE"
            ));
        } else if self.tls.is_some()
            && (text.contains("broken pipe") || text.contains("connection reset"))
        {
            // TLS 1.3 finishes the client's side of the handshake before the
            // server checks the client certificate: a refusal arrives as a
            // closed connection on the first request.
            let ours = match &a.cert {
                Some(file) => format!("it refused ours ({})", file.display()),
                None => "none was given (--cert/--key)".to_owned(),
            };
            return Failed::Member(format!(
                "{endpoint}: the server closed the connection after the TLS handshake; if it requires a client certificate, {ours} ({text})"
            ));
        } else {
            return Failed::Member(format!("{endpoint}: {text}"));
        };
        Failed::Final(format!("{endpoint}: {reason} ({})", text.trim()))
    }
}

/// Any deletion: look again.
fn deletes(events: &[ec::Event]) -> Verdict {
    if events
        .iter()
        .any(|e| e.event_type() == ec::EventType::Delete)
    {
        Verdict::Look
    } else {
        Verdict::Wait
    }
}

/// The range options for the oldest key under a prefix.
fn oldest() -> ec::GetOptions {
    oldest_n(1)
}

/// The `n` oldest keys under a prefix, oldest first.
fn oldest_n(n: u16) -> ec::GetOptions {
    ec::GetOptions::new()
        .with_prefix()
        .with_sort(ec::SortTarget::Create, ec::SortOrder::Ascend)
        .with_limit(i64::from(n))
}

fn chain(e: &dyn std::error::Error) -> String {
    crate::display::error_chain(e)
}

fn status_chain(status: &tonic::Status, message: &str) -> String {
    match std::error::Error::source(status) {
        Some(cause) => {
            let causes = chain(cause);
            if message.contains(&causes) {
                message.to_owned()
            } else {
                format!("{message}: {causes}")
            }
        }
        None => message.to_owned(),
    }
}

/// The TLS configuration: server verification always on (the given CA,
/// else the system's roots), a client certificate if one is given.
fn tls_options(access: &Access) -> Result<ec::TlsOptions, EtcdError> {
    let mut tls = ec::TlsOptions::new().assume_http2(true);
    tls = match &access.cacert {
        Some(file) => {
            let pem = read_pem(file, "CA certificate", "CERTIFICATE")?;
            tls.ca_certificate(ec::Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&access.cert, &access.key) {
        let cert = read_pem(cert, "client certificate", "CERTIFICATE")?;
        let key = read_pem(key, "client key", "PRIVATE KEY")?;
        tls = tls.identity(ec::Identity::from_pem(cert, key));
    }
    Ok(tls)
}

/// A credential file's content, read without ever blocking (see
/// [`crate::platform::read_regular`]); one that is not a regular file is
/// refused with 77, naming it and what it is.
fn read_credential(file: &std::path::Path, role: &str) -> Result<Vec<u8>, EtcdError> {
    use crate::platform::NotRead;
    crate::platform::read_regular(file).map_err(|e| {
        let mut failure = error(format!("cannot read the {role} {}: {e}", file.display()));
        if matches!(e, NotRead::NotRegular(_)) {
            failure.exit = Some(crate::exit_codes::NO_PERMISSION);
        }
        failure
    })
}

/// A PEM file's content, checked to hold at least one `what` block, so a
/// wrong or empty file is named here rather than lost in a TLS error.
fn read_pem(file: &std::path::Path, role: &str, what: &str) -> Result<Vec<u8>, EtcdError> {
    let pem = read_credential(file, role)?;
    let text = String::from_utf8_lossy(&pem);
    if !text.contains("-----BEGIN ")
        || !text
            .lines()
            .any(|l| l.starts_with("-----BEGIN ") && l.contains(what))
    {
        return Err(error(format!(
            "the {role} {} is not a PEM file with a {what} block",
            file.display()
        )));
    }
    Ok(pem)
}

fn read_password(password: &Password) -> Result<String, EtcdError> {
    match password {
        Password::Env { value, .. } => Ok(value.clone()),
        Password::File(file) => {
            let bytes = read_credential(file, "password file")?;
            let text = String::from_utf8(bytes).map_err(|_| {
                error(format!(
                    "cannot read the password file {}: it is not UTF-8 text",
                    file.display()
                ))
            })?;
            // The first line, as written by `echo secret > file`.
            Ok(text.lines().next().unwrap_or("").to_owned())
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `NAME/<lease id in hex>`, as etcd's lock recipe names a contender's key.
pub fn key_for(name: &str, lease: i64) -> String {
    format!("{name}/{lease:x}")
}

fn malformed(what: &str) -> EtcdError {
    error(format!("unexpected answer from etcd: {what}"))
}

/// Whether `events` include the deletion of `key`.
fn was_deleted(events: &[ec::Event], key: &[u8]) -> bool {
    events.iter().any(|e| {
        e.event_type() == ec::EventType::Delete && e.kv().is_some_and(|kv| kv.key() == key)
    })
}
