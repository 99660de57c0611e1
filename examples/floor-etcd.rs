//! bench/floors: the floor of a handoff on etcd, the server's own latency
//! from a release to a waiter's wake-up: one client deletes a key, another
//! that watches it receives the delete event. Nothing of lockrun runs.
//!
//!   cargo run --release --features etcd --example floor-etcd -- HOST:PORT [ROUNDS]
//!
//! Prints one latency a line (microseconds), then `p50 p90` of them.
//! bench/etcd.sh prints it beside lockrun's handoff.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(endpoint) = args.next() else {
        eprintln!("usage: floor-etcd HOST:PORT [ROUNDS]");
        std::process::exit(64);
    };
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(50);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => fail(&format!("cannot start a runtime: {e}")),
    };
    let url = format!("http://{endpoint}");
    let mut times = runtime.block_on(async move {
        let connect = || etcd_client::Client::connect([url.clone()], None);
        let (mut holder, mut waiter) = match (connect().await, connect().await) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => fail(&format!("cannot connect to {endpoint}: {e}")),
        };
        let key = format!("lockrun-floor/{}", std::process::id());
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
            loop {
                match stream.message().await {
                    Ok(Some(m))
                        if m.events()
                            .iter()
                            .any(|e| e.event_type() == etcd_client::EventType::Delete) =>
                    {
                        break;
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => fail("the watch ended"),
                    Err(e) => fail(&format!("watch: {e}")),
                }
            }
            times.push(t0.elapsed().as_micros());
        }
        times
    });
    report(&mut times);
}

fn report(times: &mut [u128]) {
    for t in times.iter() {
        println!("{t}");
    }
    times.sort_unstable();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!("p50 {} p90 {}", at(0.5), at(0.9));
}

fn fail(message: &str) -> ! {
    eprintln!("floor-etcd: {message}");
    std::process::exit(69);
}
