//! What tests/metrics.rs and tests/log.rs share: a strict parser of the
//! Prometheus text format, and a private redis-server for a lock URL that
//! can be lost.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A series: its metric name and its labels, in order of name.
pub type Series = (String, Labels);
/// A sample's labels, sorted by name.
pub type Labels = Vec<(String, String)>;

/// Parses a textfile as Prometheus would, strictly: every line is blank,
/// a comment, or `name{labels} value`; a metric's `# HELP` and `# TYPE`
/// come before its samples, once each; a metric's samples are together
/// (no other metric in between); every series appears once; a non-empty
/// file ends with a newline (a file cut short is not one).
pub fn parse_strict(text: &str) -> Result<BTreeMap<Series, f64>, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("does not end with a newline (cut short?)".into());
    }
    let mut out = BTreeMap::new();
    let mut helped = std::collections::BTreeSet::new();
    let mut typed = std::collections::BTreeSet::new();
    let mut finished = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let words: Vec<&str> = comment.trim_start().splitn(3, ' ').collect();
            match words.first() {
                Some(&"HELP") | Some(&"TYPE") => {
                    let name = *words.get(1).ok_or_else(|| at("no metric name"))?;
                    metric_name(name).map_err(|e| at(&e))?;
                    if out.keys().any(|(m, _): &Series| m == name) {
                        return Err(at("HELP/TYPE after the metric's samples"));
                    }
                    let set = if words[0] == "HELP" {
                        &mut helped
                    } else {
                        let kind = words.get(2).ok_or_else(|| at("TYPE without a type"))?;
                        if !["counter", "gauge", "histogram", "summary", "untyped"]
                            .contains(&kind.trim())
                        {
                            return Err(at("unknown type"));
                        }
                        &mut typed
                    };
                    if !set.insert(name.to_owned()) {
                        return Err(at("given twice"));
                    }
                }
                _ => {}
            }
            continue;
        }
        let (name, labels, value) = sample(line).map_err(|e| at(&e))?;
        if !helped.contains(&name) || !typed.contains(&name) {
            return Err(at("sample before its HELP and TYPE"));
        }
        if current.as_deref() != Some(name.as_str()) {
            if finished.contains(&name) {
                return Err(at("the metric's samples are not together"));
            }
            if let Some(previous) = current.take() {
                finished.insert(previous);
            }
            current = Some(name.clone());
        }
        if out.insert((name, labels), value).is_some() {
            return Err(at("series given twice"));
        }
    }
    Ok(out)
}

fn metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

fn sample(line: &str) -> Result<(String, Labels, f64), String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    metric_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=').ok_or("label without =")?;
            let key = &rest[..eq];
            let mut chars = key.chars();
            if !(chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
            {
                return Err(format!("bad label name {key:?}"));
            }
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .ok_or("label value not quoted")?;
            let mut value = String::new();
            let mut it = rest.char_indices();
            let end = loop {
                let (i, c) = it.next().ok_or("unterminated label value")?;
                match c {
                    '"' => break i,
                    '\\' => match it.next().ok_or("dangling backslash")?.1 {
                        'n' => value.push('\n'),
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        other => return Err(format!("bad escape \\{other}")),
                    },
                    '\n' => return Err("newline in a label value".into()),
                    c => value.push(c),
                }
            };
            labels.push((key.to_owned(), value));
            rest = &rest[end + 1..];
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else if !rest.starts_with('}') {
                return Err("labels not separated by ','".into());
            }
        }
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = value.split(' ').next().unwrap_or_default();
    let number = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse::<f64>().map_err(|_| format!("bad value {v:?}"))?,
    };
    labels.sort();
    Ok((name.to_owned(), labels, number))
}

/// `name{lock="..."}` or, with `outcome`, `lockrun_runs_total`'s series.
pub fn value(
    all: &BTreeMap<Series, f64>,
    name: &str,
    lock: &str,
    outcome: Option<&str>,
) -> Option<f64> {
    let mut labels = vec![("lock".to_owned(), lock.to_owned())];
    if let Some(outcome) = outcome {
        labels.push(("outcome".to_owned(), outcome.to_owned()));
    }
    labels.sort();
    all.get(&(name.to_owned(), labels)).copied()
}

/// A private redis-server on 127.0.0.1 with nothing saved; killed on drop.
/// `None` (after the tests' loud SKIPPED, or a failure under
/// LOCKRUN_TEST_REQUIRE_ALL) without redis-server and redis-cli.
pub struct Redis {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Option<Redis> {
        for tool in ["redis-server", "redis-cli"] {
            if !super::common::needs(tool, "a Redis lock URL to lose") {
                return None;
            }
        }
        for _ in 0..5 {
            let dir = super::common::temp_dir();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut redis = Redis {
                port,
                child,
                _dir: dir,
            };
            let deadline = Instant::now() + super::common::BOUND;
            while Instant::now() < deadline {
                if redis.child.try_wait().expect("try_wait").is_some() {
                    break; // the port was taken meanwhile
                }
                if redis.cli(&["PING"]).as_deref() == Some("PONG") {
                    return Some(redis);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("redis-server never started");
    }

    pub fn url(&self, name: &str) -> String {
        format!("redis://127.0.0.1:{}#{name}", self.port)
    }

    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
