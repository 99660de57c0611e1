//! bench/floors: the floor of a handoff on Redis, the server's own latency
//! from a release to a waiter's wake-up: one connection deletes the key
//! and publishes on its channel in one script (as a release does), another
//! subscribed to the channel receives the message. Nothing of lockrun runs.
//!
//!   cargo run --release --features redis --example floor-redis -- redis://HOST:PORT [ROUNDS]
//!
//!   floor-redis redis://HOST:PORT --run NAME -- COMMAND [ARG...]
//!
//! Prints one latency a line (microseconds), then `p50 P p90 P rtt R`:
//! R is the median of one plain command's round trip (`PING`), the "one
//! round trip" of issue 34's goal for acquire + run + release.
//!
//! With `--run`, the floor of the handoff as lockrun's rows measure it:
//! the least a tool must do to run COMMAND under a Redis lock that wakes
//! its waiters (subscribe to `NAME:released`, `SET NAME NX PX`, a message
//! before each retry; the command; one script's DEL + PUBLISH), with
//! nothing else (no token check, record, renewal, signals). bench/redis.sh
//! runs it through the same handoff rounds as lockrun, so both processes'
//! starts and exits are in it, as they are in lockrun's.

use std::sync::mpsc;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(url) = args.next() else {
        eprintln!("usage: floor-redis redis://HOST:PORT [ROUNDS]");
        std::process::exit(64);
    };
    let next = args.next();
    if next.as_deref() == Some("--run") {
        let name = args.next().unwrap_or_else(|| fail("--run needs NAME"));
        let command: Vec<String> = args.skip_while(|a| a == "--").collect();
        std::process::exit(run(&url, &name, &command));
    }
    let rounds: usize = next.and_then(|n| n.parse().ok()).unwrap_or(50);
    let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| fail(&format!("{url}: {e}")));
    let connect = || {
        client
            .get_connection()
            .unwrap_or_else(|e| fail(&format!("cannot connect: {e}")))
    };
    let mut holder = connect();
    let mut listener = connect();
    let key = format!("lockrun-floor:{}", std::process::id());
    let channel = format!("{key}:released");
    let (woke, woken) = mpsc::channel::<Instant>();
    let (subscribed, is_subscribed) = mpsc::channel::<()>();
    let ch = channel.clone();
    std::thread::spawn(move || {
        let mut sub = listener.as_pubsub();
        if let Err(e) = sub.subscribe(&ch) {
            fail(&format!("subscribe: {e}"));
        }
        let _ = subscribed.send(());
        loop {
            match sub.get_message() {
                Ok(_) => {
                    let _ = woke.send(Instant::now());
                }
                Err(e) => fail(&format!("message: {e}")),
            }
        }
    });
    let _ = is_subscribed.recv();
    let release = redis::Script::new(
        "if redis.call('DEL', KEYS[1]) == 1 then redis.call('PUBLISH', ARGV[1], '1') end return 1",
    );
    let mut trips: Vec<u128> = (0..rounds)
        .map(|_| {
            let t0 = Instant::now();
            let pong: Result<String, _> = redis::cmd("PING").query(&mut holder);
            if let Err(e) = pong {
                fail(&format!("PING: {e}"));
            }
            t0.elapsed().as_micros()
        })
        .collect();
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("held")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query(&mut holder)
            .unwrap_or_else(|e| fail(&format!("SET: {e}")));
        let t0 = Instant::now();
        let _: i64 = release
            .key(&key)
            .arg(&channel)
            .invoke(&mut holder)
            .unwrap_or_else(|e| fail(&format!("release: {e}")));
        let t1 = woken.recv().unwrap_or_else(|_| fail("the listener ended"));
        times.push(t1.duration_since(t0).as_micros());
    }
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

/// Runs `command` holding NAME: subscribed before the first try, so a
/// release between a failed `SET` and the wait for a message still wakes
/// it; one thread.
fn run(url: &str, name: &str, command: &[String]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        fail("--run NAME needs a COMMAND");
    };
    let client = redis::Client::open(url).unwrap_or_else(|e| fail(&format!("{url}: {e}")));
    let connect = || {
        client
            .get_connection()
            .unwrap_or_else(|e| fail(&format!("cannot connect: {e}")))
    };
    let mut con = connect();
    let mut listener = connect();
    let channel = format!("{name}:released");
    let mut sub = listener.as_pubsub();
    if let Err(e) = sub.subscribe(&channel) {
        fail(&format!("subscribe: {e}"));
    }
    loop {
        let set: Option<String> = redis::cmd("SET")
            .arg(name)
            .arg("held")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut con)
            .unwrap_or_else(|e| fail(&format!("SET: {e}")));
        if set.is_some() {
            break;
        }
        if let Err(e) = sub.get_message() {
            fail(&format!("message: {e}"));
        }
    }
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {program}: {e}")));
    let _: i64 = redis::Script::new(
        "if redis.call('DEL', KEYS[1]) == 1 then redis.call('PUBLISH', ARGV[1], '1') end return 1",
    )
    .key(name)
    .arg(&channel)
    .invoke(&mut con)
    .unwrap_or_else(|e| fail(&format!("release: {e}")));
    status.code().unwrap_or(1)
}

fn fail(message: &str) -> ! {
    eprintln!("floor-redis: {message}");
    std::process::exit(69);
}
