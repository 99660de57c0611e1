//! The etcd v3 calls lockrun makes, over the JSON gateway: leases, the lock
//! key, and the record stored as its value.
//!
//! The lock follows etcd's own lock recipe (the one behind `etcdctl lock`
//! and the `/v3/lock/lock` service): each contender creates the key
//! `NAME/<lease id in hex>` attached to its lease, and the contender whose
//! key has the lowest creation revision holds the lock. So lockrun and
//! `etcdctl lock NAME` exclude each other, as lockrun and flock(1) do on a
//! file.

use super::base64;
use super::http::{self, HttpError};
use serde_json::{Value, json};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long an ordinary call may take before etcd counts as unreachable.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct EtcdError {
    pub message: String,
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One key as etcd returns it.
#[derive(Debug, Clone)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub lease: i64,
}

/// The outcome of one attempt at the lock.
pub enum Attempt {
    /// Our key is the oldest: the lock is ours; `revision` is our key's
    /// creation revision (the fencing token).
    Acquired { revision: i64 },
    /// Another key is older; ours now exists and waits behind it.
    Queued { revision: i64, owner: Option<Kv> },
}

/// A client for a list of endpoints. Calls go to the endpoint that last
/// answered and move on to the next one only when a connection cannot be
/// made (a request that was sent is never re-sent elsewhere: it may have
/// taken effect).
#[derive(Clone)]
pub struct Client {
    endpoints: Arc<[String]>,
    preferred: Arc<AtomicUsize>,
}

impl Client {
    pub fn new(endpoints: Vec<String>) -> Client {
        Client {
            endpoints: endpoints.into(),
            preferred: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn endpoints(&self) -> String {
        self.endpoints.join(",")
    }

    fn call(
        &self,
        path: &str,
        body: &Value,
        deadline: Option<Instant>,
    ) -> Result<Value, EtcdError> {
        let body = body.to_string().into_bytes();
        let n = self.endpoints.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..n {
            let at = (first + i) % n;
            let endpoint = &self.endpoints[at];
            match http::post(endpoint, path, &body, deadline) {
                Ok(answer) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return serde_json::from_slice(&answer).map_err(|e| EtcdError {
                        message: format!("{endpoint}: {path}: not JSON: {e}"),
                    });
                }
                Err(HttpError::Connect(e)) => failures.push(format!("{endpoint}: {e}")),
                Err(HttpError::Status(code, message)) => {
                    return Err(EtcdError {
                        message: format!("{endpoint}: {path}: HTTP {code}: {message}"),
                    });
                }
                Err(e) => {
                    return Err(EtcdError {
                        message: format!("{endpoint}: {path}: {e}"),
                    });
                }
            }
        }
        Err(EtcdError {
            message: format!("cannot connect to etcd ({})", failures.join("; ")),
        })
    }

    /// Grants a lease; returns its id and the TTL etcd granted (which may
    /// be longer than asked: etcd has a minimum).
    pub fn grant(&self, ttl: Duration) -> Result<(i64, Duration), EtcdError> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let answer = self.call(
            "/v3/lease/grant",
            &json!({ "TTL": secs.max(1).to_string() }),
            Some(Instant::now() + CALL_TIMEOUT),
        )?;
        let id = int(&answer["ID"]).ok_or_else(|| malformed("lease grant without ID"))?;
        let granted = int(&answer["TTL"]).unwrap_or(secs as i64).max(1) as u64;
        Ok((id, Duration::from_secs(granted)))
    }

    /// Renews the lease; returns the TTL it now has, or `None` when etcd
    /// says the lease no longer exists.
    pub fn keepalive(&self, lease: i64, deadline: Instant) -> Result<Option<Duration>, EtcdError> {
        let answer = self.call(
            "/v3/lease/keepalive",
            &json!({ "ID": lease.to_string() }),
            Some(deadline),
        )?;
        if let Some(error) = answer.get("error") {
            return Err(malformed(&format!("keepalive: {error}")));
        }
        let ttl = int(&answer["result"]["TTL"]).unwrap_or(0);
        Ok((ttl > 0).then(|| Duration::from_secs(ttl as u64)))
    }

    /// Revokes the lease, which deletes every key attached to it: the lock
    /// key, whether held or still waiting.
    pub fn revoke(&self, lease: i64, deadline: Instant) -> Result<(), EtcdError> {
        self.call(
            "/v3/lease/revoke",
            &json!({ "ID": lease.to_string() }),
            Some(deadline),
        )
        .map(drop)
    }

    /// One round trip: creates our key (with `value`, on `lease`) unless it
    /// exists, and reads the oldest key under the lock's prefix.
    pub fn attempt(&self, name: &str, lease: i64, value: &[u8]) -> Result<Attempt, EtcdError> {
        let key = key_for(name, lease);
        let owner_range = range_first(name);
        let body = json!({
            "compare": [{ "target": "CREATE", "key": b64(&key), "create_revision": "0" }],
            "success": [
                { "request_put": { "key": b64(&key), "value": base64::encode(value), "lease": lease.to_string() } },
                { "request_range": owner_range },
            ],
            "failure": [
                { "request_range": { "key": b64(&key) } },
                { "request_range": owner_range },
            ],
        });
        let answer = self.call("/v3/kv/txn", &body, Some(Instant::now() + CALL_TIMEOUT))?;
        let created = answer["succeeded"].as_bool().unwrap_or(false);
        let responses = answer["responses"]
            .as_array()
            .ok_or_else(|| malformed("txn without responses"))?;
        let revision = if created {
            int(&answer["header"]["revision"])
        } else {
            responses
                .first()
                .and_then(|r| kvs(&r["response_range"]).into_iter().next())
                .map(|kv| kv.create_revision)
        }
        .ok_or_else(|| malformed("txn without our key's revision"))?;
        let owner = responses
            .get(1)
            .and_then(|r| kvs(&r["response_range"]).into_iter().next());
        Ok(match owner {
            Some(kv) if kv.key == key => Attempt::Acquired { revision },
            owner => Attempt::Queued { revision, owner },
        })
    }

    /// Waits (in etcd, not by polling) until our key is the oldest, through
    /// the lock service; the key must exist already (see [`attempt`]).
    /// Returns the key etcd says we hold.
    pub fn wait_lock(&self, name: &str, lease: i64) -> Result<String, EtcdError> {
        let answer = self.call(
            "/v3/lock/lock",
            &json!({ "name": b64(name), "lease": lease.to_string() }),
            None,
        )?;
        answer["key"]
            .as_str()
            .and_then(base64::decode)
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .ok_or_else(|| malformed("lock answer without key"))
    }

    /// The oldest key under the lock's prefix (the holder) and how many
    /// keys there are (the holder and its waiters).
    pub fn owner(&self, name: &str) -> Result<(Option<Kv>, usize), EtcdError> {
        let answer = self.call(
            "/v3/kv/range",
            &range_first(name),
            Some(Instant::now() + CALL_TIMEOUT),
        )?;
        let count = int(&answer["count"]).unwrap_or(0).max(0) as usize;
        Ok((kvs(&answer).into_iter().next(), count))
    }

    pub fn get(&self, key: &str, deadline: Instant) -> Result<Option<Kv>, EtcdError> {
        let answer = self.call("/v3/kv/range", &json!({ "key": b64(key) }), Some(deadline))?;
        Ok(kvs(&answer).into_iter().next())
    }

    /// Replaces the value of our key, only if it is still the key we
    /// created (same creation revision): a lost lock is never re-created.
    pub fn update_if_ours(
        &self,
        key: &str,
        revision: i64,
        value: &[u8],
        lease: i64,
    ) -> Result<bool, EtcdError> {
        let body = json!({
            "compare": [{ "target": "CREATE", "key": b64(key), "create_revision": revision.to_string() }],
            "success": [{ "request_put": { "key": b64(key), "value": base64::encode(value), "lease": lease.to_string() } }],
        });
        let answer = self.call("/v3/kv/txn", &body, Some(Instant::now() + CALL_TIMEOUT))?;
        Ok(answer["succeeded"].as_bool().unwrap_or(false))
    }

    /// A plain put without a lease (the last holder's record).
    pub fn put(&self, key: &str, value: &[u8], deadline: Instant) -> Result<(), EtcdError> {
        let body = json!({ "key": b64(key), "value": base64::encode(value) });
        self.call("/v3/kv/put", &body, Some(deadline)).map(drop)
    }
}

/// `NAME/<lease id in hex>`, as etcd's lock recipe names a contender's key.
pub fn key_for(name: &str, lease: i64) -> String {
    format!("{name}/{lease:x}")
}

/// The range request for the oldest key under `NAME/`.
fn range_first(name: &str) -> Value {
    let prefix = format!("{name}/");
    let mut end = prefix.clone().into_bytes();
    // The prefix ends in '/', so the last byte can always be incremented.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    json!({
        "key": b64(&prefix),
        "range_end": base64::encode(&end),
        "sort_order": "ASCEND",
        "sort_target": "CREATE",
        "limit": "1",
    })
}

fn b64(text: &str) -> String {
    base64::encode(text.as_bytes())
}

fn malformed(what: &str) -> EtcdError {
    EtcdError {
        message: format!("unexpected answer from etcd: {what}"),
    }
}

/// The gateway writes 64-bit integers as strings.
fn int(value: &Value) -> Option<i64> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn kvs(range: &Value) -> Vec<Kv> {
    let Some(list) = range["kvs"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|kv| {
            let key = base64::decode(kv["key"].as_str()?)?;
            Some(Kv {
                key: String::from_utf8_lossy(&key).into_owned(),
                value: kv["value"]
                    .as_str()
                    .and_then(base64::decode)
                    .unwrap_or_default(),
                create_revision: int(&kv["create_revision"])?,
                lease: int(&kv["lease"]).unwrap_or(0),
            })
        })
        .collect()
}
