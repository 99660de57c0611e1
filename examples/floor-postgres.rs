//! bench/floors: the floor of a handoff on PostgreSQL, the server's own
//! latency from a release to a waiter's wake-up: one session holds an
//! advisory lock, another blocks in `pg_advisory_lock` on it; the first
//! unlocks, the second's call returns. Nothing of lockrun runs.
//!
//!   cargo run --release --features postgres --example floor-postgres -- 'host=... user=...' [ROUNDS]
//!
//!   floor-postgres CONNINFO --run NAME -- COMMAND [ARG...]
//!
//! Prints one latency a line (microseconds), then `p50 P p90 P rtt R`:
//! R is the median of one plain statement's round trip (`SELECT 1`), the
//! "one round trip" of issue 34's goal for acquire + run + release.
//!
//! With `--run`, the floor of the handoff as lockrun's rows measure it:
//! the least a tool must do to run COMMAND holding NAME's advisory lock
//! (lockrun's key, `hashtextextended(NAME, 0)`): lock, run, unlock, with
//! nothing else (no record, watcher, signals or checks). bench/postgres.sh
//! runs it through the same handoff rounds as lockrun, so both processes'
//! starts and exits are in it, as they are in lockrun's.

use std::sync::mpsc;
use std::time::Instant;

const KEY: i64 = 0x6c6f_636b_7275;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(conninfo) = args.next() else {
        eprintln!("usage: floor-postgres CONNINFO [ROUNDS]");
        std::process::exit(64);
    };
    let next = args.next();
    if next.as_deref() == Some("--run") {
        let name = args.next().unwrap_or_else(|| fail("--run needs NAME"));
        let command: Vec<String> = args.skip_while(|a| a == "--").collect();
        std::process::exit(run(&conninfo, &name, &command));
    }
    let rounds: usize = next.and_then(|n| n.parse().ok()).unwrap_or(50);
    let connect = || {
        postgres::Client::connect(&conninfo, postgres::NoTls)
            .unwrap_or_else(|e| fail(&format!("cannot connect: {e}")))
    };
    let mut holder = connect();
    let mut waiter = connect();
    let (go, ready) = mpsc::channel::<()>();
    let (woke, woken) = mpsc::channel::<Instant>();
    let thread = std::thread::spawn(move || {
        while ready.recv().is_ok() {
            if let Err(e) = waiter.execute("SELECT pg_advisory_lock($1)", &[&KEY]) {
                fail(&format!("lock: {e}"));
            }
            let _ = woke.send(Instant::now());
            if let Err(e) = waiter.execute("SELECT pg_advisory_unlock($1)", &[&KEY]) {
                fail(&format!("unlock: {e}"));
            }
        }
    });
    let mut trips: Vec<u128> = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            if let Err(e) = holder.execute("SELECT 1", &[]) {
                fail(&format!("SELECT 1: {e}"));
            }
            t0.elapsed().as_micros()
        })
        .collect();
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let sql = |c: &mut postgres::Client, q: &str| {
            c.execute(q, &[&KEY])
                .unwrap_or_else(|e| fail(&format!("{q}: {e}")))
        };
        sql(&mut holder, "SELECT pg_advisory_lock($1)");
        let _ = go.send(());
        // Released only once the waiter is blocked on it in the server.
        loop {
            let n: i64 = holder
                .query_one(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                    &[],
                )
                .map(|r| r.get(0))
                .unwrap_or_else(|e| fail(&format!("pg_locks: {e}")));
            if n > 0 {
                break;
            }
        }
        let t0 = Instant::now();
        sql(&mut holder, "SELECT pg_advisory_unlock($1)");
        let t1 = woken.recv().unwrap_or_else(|_| fail("the waiter ended"));
        times.push(t1.duration_since(t0).as_micros());
    }
    drop(go);
    let _ = thread.join();
    for t in &times {
        println!("{t}");
    }
    times.sort_unstable();
    trips.sort_unstable();
    let at = |v: &[u128], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    println!(
        "p50 {} p90 {} rtt {}",
        at(&times, 0.5),
        at(&times, 0.9),
        at(&trips, 0.5)
    );
}

/// Runs `command` holding NAME's advisory lock: one session, one blocking
/// `pg_advisory_lock`, the command, `pg_advisory_unlock`.
fn run(conninfo: &str, name: &str, command: &[String]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        fail("--run NAME needs a COMMAND");
    };
    let mut client = postgres::Client::connect(conninfo, postgres::NoTls)
        .unwrap_or_else(|e| fail(&format!("cannot connect: {e}")));
    let sql = |c: &mut postgres::Client, q: &str| {
        c.execute(q, &[&name])
            .unwrap_or_else(|e| fail(&format!("{q}: {e}")))
    };
    sql(
        &mut client,
        "SELECT pg_advisory_lock(hashtextextended($1, 0))",
    );
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {program}: {e}")));
    sql(
        &mut client,
        "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
    );
    status.code().unwrap_or(1)
}

fn fail(message: &str) -> ! {
    eprintln!("floor-postgres: {message}");
    std::process::exit(69);
}
