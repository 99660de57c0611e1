//! A plain `cargo test` builds without the lock-URL features, which leaves
//! out tests/etcd.rs, tests/postgres.rs and tests/redis.rs whole, silently: say so where a
//! person sees it (CI runs `--all-features`, where these do not exist).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

mod common;

#[cfg(not(feature = "etcd"))]
#[test]
fn the_etcd_tests_need_the_etcd_feature() {
    common::skip("tests/etcd.rs did not run: built without --features etcd (use --all-features)");
}

#[cfg(not(feature = "redis"))]
#[test]
fn the_redis_tests_need_the_redis_feature() {
    common::skip("tests/redis.rs did not run: built without --features redis (use --all-features)");
}

#[cfg(not(feature = "postgres"))]
#[test]
fn the_postgres_tests_need_the_postgres_feature() {
    common::skip(
        "tests/postgres.rs did not run: built without --features postgres (use --all-features)",
    );
}
