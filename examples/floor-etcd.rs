//! bench/floors: the floor of a handoff on etcd, the server's own latency
//! from a release to a waiter's wake-up: one client deletes a key, another
//! that watches it receives the delete event. Nothing of lockrun runs.
//!
//!   cargo run --release --features etcd --example floor-etcd -- HOST:PORT [ROUNDS]
//!   floor-etcd HOST:PORT --run NAME -- COMMAND [ARG...]
//!
//! Prints one latency a line (microseconds), then `p50 P p90 P rtt R`:
//! R is the median of one plain request's round trip (a get), the "one
//! round trip" of issue 34's goal for acquire + run + release.
//! bench/etcd.sh prints it beside lockrun's handoff.
//!
//! With `--run`, the floor of the handoff as lockrun's rows measure it:
//! the least a tool must do to run COMMAND under an etcd queue lock (a key
//! under NAME/, a watch on the key ahead, the command, the delete), with
//! nothing else (no lease, record, signals or checks). bench/etcd.sh runs
//! it through the same handoff rounds as lockrun, so both processes'
//! starts and exits are in it, as they are in lockrun's.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(endpoint) = args.next() else {
        eprintln!("usage: floor-etcd HOST:PORT [ROUNDS]");
        std::process::exit(64);
    };
    let next = args.next();
    if next.as_deref() == Some("--run") {
        let name = args.next().unwrap_or_else(|| fail("--run needs NAME"));
        let command: Vec<String> = args.skip_while(|a| a == "--").collect();
        std::process::exit(run(&endpoint, &name, &command));
    }
    let rounds: usize = next.and_then(|n| n.parse().ok()).unwrap_or(50);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => fail(&format!("cannot start a runtime: {e}")),
    };
    let url = format!("http://{endpoint}");
    let (mut times, mut trips) = runtime.block_on(async move {
        let connect = || etcd_client::Client::connect([url.clone()], None);
        let (mut holder, mut waiter) = match (connect().await, connect().await) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => fail(&format!("cannot connect to {endpoint}: {e}")),
        };
        let key = format!("lockrun-floor/{}", std::process::id());
        let mut trips = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let t0 = Instant::now();
            if let Err(e) = holder.get(key.as_str(), None).await {
                fail(&format!("get: {e}"));
            }
            trips.push(t0.elapsed().as_micros());
        }
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let revision = match holder.put(key.as_str(), "held", None).await {
                Ok(put) => put.header().map_or(0, |h| h.revision()),
                Err(e) => fail(&format!("put: {e}")),
            };
            // The waiter watches from the revision after the put: it sees
            // the delete even if it comes before the watch is set up.
            let options = etcd_client::WatchOptions::new().with_start_revision(revision + 1);
            let mut stream = match waiter.watch(key.as_str(), Some(options)).await {
                Ok(w) => w,
                Err(e) => fail(&format!("watch: {e}")),
            };
            let t0 = Instant::now();
            if let Err(e) = holder.delete(key.as_str(), None).await {
                fail(&format!("delete: {e}"));
            }
            deleted(&mut stream).await;
            times.push(t0.elapsed().as_micros());
        }
        (times, trips)
    });
    report(&mut times, &mut trips);
}

/// Runs `command` holding a queue lock on NAME: put our key, wait for the
/// delete of the key created just before ours, run, delete ours. One
/// thread, so the watch event wakes the thread that starts the command.
fn run(endpoint: &str, name: &str, command: &[String]) -> i32 {
    let Some((program, args)) = command.split_first() else {
        fail("--run NAME needs a COMMAND");
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => fail(&format!("cannot start a runtime: {e}")),
    };
    runtime.block_on(async move {
        let mut client = etcd_client::Client::connect([format!("http://{endpoint}")], None)
            .await
            .unwrap_or_else(|e| fail(&format!("cannot connect to {endpoint}: {e}")));
        let prefix = format!("{name}/");
        let key = format!("{prefix}{:x}", std::process::id());
        let mine = match client.put(key.as_str(), "", None).await {
            Ok(put) => put.header().map_or(0, |h| h.revision()),
            Err(e) => fail(&format!("put: {e}")),
        };
        let ahead = etcd_client::GetOptions::new()
            .with_prefix()
            .with_max_create_revision(mine - 1)
            .with_sort(
                etcd_client::SortTarget::Create,
                etcd_client::SortOrder::Descend,
            )
            .with_limit(1)
            .with_keys_only();
        let got = client
            .get(prefix.as_str(), Some(ahead))
            .await
            .unwrap_or_else(|e| fail(&format!("get: {e}")));
        if let Some(before) = got.kvs().first() {
            let seen = got.header().map_or(mine, |h| h.revision());
            let options = etcd_client::WatchOptions::new().with_start_revision(seen + 1);
            let mut stream = client
                .watch(before.key(), Some(options))
                .await
                .unwrap_or_else(|e| fail(&format!("watch: {e}")));
            deleted(&mut stream).await;
        }
        let status = std::process::Command::new(program)
            .args(args)
            .status()
            .unwrap_or_else(|e| fail(&format!("cannot run {program}: {e}")));
        if let Err(e) = client.delete(key.as_str(), None).await {
            fail(&format!("delete: {e}"));
        }
        status.code().unwrap_or(1)
    })
}

/// Until the watch reports a delete.
async fn deleted(stream: &mut etcd_client::WatchStream) {
    loop {
        match stream.message().await {
            Ok(Some(m))
                if m.events()
                    .iter()
                    .any(|e| e.event_type() == etcd_client::EventType::Delete) =>
            {
                return;
            }
            Ok(Some(_)) => continue,
            Ok(None) => fail("the watch ended"),
            Err(e) => fail(&format!("watch: {e}")),
        }
    }
}

fn report(times: &mut [u128], trips: &mut [u128]) {
    for t in times.iter() {
        println!("{t}");
    }
    times.sort_unstable();
    trips.sort_unstable();
    let at = |v: &[u128], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    println!(
        "p50 {} p90 {} rtt {}",
        at(times, 0.5),
        at(times, 0.9),
        at(trips, 0.5)
    );
}

fn fail(message: &str) -> ! {
    eprintln!("floor-etcd: {message}");
    std::process::exit(69);
}
