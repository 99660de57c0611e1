//! Property tests: whatever bytes a lock file holds, the record parser
//! never panics, human output never carries a raw control character, and
//! JSON output always parses (issue: hostile paths and bad input).
// Unix: these spawn sh, read /proc and send signals; tests/windows.rs is
// the Windows suite.
#![cfg(unix)]

use lockrun::backend::etcd::inspect::EtcdLock;
use lockrun::inspect::{Holder, Report, Span, State};
use lockrun::record::{Exit, Record};
use proptest::prelude::*;

fn any_text() -> impl Strategy<Value = String> {
    // Heavy on control characters and escapes, with anything else mixed in.
    prop_oneof![
        proptest::string::string_regex(
            "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{61c}\\u{200b}-\\u{200f}\\u{202a}-\\u{202e}\\u{2060}-\\u{2064}\\u{2066}-\\u{2069}\\u{feff}\\u{e0000}-\\u{e007f}a-z \\[;\\]\\\\\"']{0,40}"
        )
            .unwrap(),
        any::<String>(),
    ]
}

fn any_record() -> impl Strategy<Value = Record> {
    (
        (
            any::<Option<i64>>(),
            any::<Option<u64>>(),
            proptest::option::of(any_text()),
            any::<Option<i64>>(),
        ),
        (
            proptest::option::of(any_text()),
            proptest::option::of(any_text()),
            any::<Option<u32>>(),
        ),
        (
            proptest::option::of(proptest::collection::vec(any_text(), 0..4)),
            // `also`: the rest of an --also set.
            proptest::option::of(proptest::collection::vec(any_text(), 0..3)),
        ),
        (
            proptest::option::of(any_text()),
            proptest::option::of(any_text()),
            proptest::option::of(any_text()),
        ),
        (
            proptest::option::of(any_text()),
            any::<Option<i32>>(),
            any::<Option<i32>>(),
        ),
        any::<Option<i64>>(),
    )
        .prop_map(
            |(
                (pid, pid_start, boot_id, lockrun_pid),
                (host, user, uid),
                (command, also),
                (cwd, mode, acquired_at),
                (released_at, code, signal),
                fencing_token,
            )| Record {
                lockrun: 1,
                pid,
                pid_start,
                boot_id,
                lockrun_pid,
                host,
                user,
                uid,
                command,
                cwd,
                mode,
                acquired_at,
                version: None,
                pid_ns: None,
                max_time: None,
                fencing_token,
                also,
                released_at,
                exit: (code.is_some() || signal.is_some()).then_some(Exit {
                    code,
                    signal,
                    max_time: None,
                }),
            },
        )
}

fn any_report() -> impl Strategy<Value = Report> {
    (
        any_text(),
        prop_oneof![Just(State::Held), Just(State::Free), Just(State::Unknown)],
        proptest::collection::vec(
            (
                any::<i32>(),
                proptest::option::of(proptest::collection::vec(any_text(), 0..3)),
                any::<Option<i32>>(),
                proptest::option::of((
                    prop_oneof![Just("flock"), Just("ofd"), Just("posix")],
                    any::<u64>(),
                    any::<Option<u64>>(),
                )),
            ),
            0..3,
        ),
        proptest::option::of(any_record()),
        any::<Option<bool>>(),
        proptest::option::of(any_text()),
        (any::<bool>(), any::<bool>()),
        0usize..3,
        proptest::option::of((any_text(), any_text(), any::<i64>())),
    )
        .prop_map(
            |(path, state, holders, record, alive, reason, (exists, unreadable), waiting, etcd)| {
                Report {
                    path,
                    state,
                    holders: holders
                        .into_iter()
                        .map(|(pid, command, locked_by, span)| Holder {
                            pid,
                            mode: "exclusive",
                            command,
                            locked_by,
                            span: span.map(|(kind, start, end)| Span { kind, start, end }),
                            lock_owner: None,
                        })
                        .collect(),
                    record,
                    record_holder_alive: alive,
                    reason,
                    exists,
                    waiting,
                    unreadable,
                    record_unconfirmed: unreadable && alive == Some(true),
                    // The key and lease come from etcd: as untrusted as a file.
                    service: etcd.map(|(key, lease, fencing_token)| {
                        EtcdLock {
                            key,
                            lease,
                            fencing_token,
                        }
                        .into()
                    }),
                    slots: None,
                    slot_reports: None,
                    lockfile_holders: None,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Record::parse(&bytes);
    }

    #[test]
    fn parsing_json_shaped_garbage_never_panics(text in "\\{\"lockrun\":[0-9]{1,3}(,\"[a-z_]{1,12}\":(-?[0-9]{1,25}|\"[^\"]{0,10}\"|null|\\[\\]|\\{\\}))*\\}") {
        let _ = Record::parse(text.as_bytes());
    }

    #[test]
    fn records_round_trip(record in any_record()) {
        prop_assert_eq!(Record::parse(&record.to_line()), Some(record));
    }

    #[test]
    fn human_output_has_no_raw_control_characters(report in any_report()) {
        let text = lockrun::report::human(&report);
        prop_assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{:?}", text);
        // Nor anything that reorders or hides text (CONTRACT §6).
        prop_assert!(!text.chars().any(|c| matches!(c,
            '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}'
            | '\u{e0000}'..='\u{e007f}')), "{:?}", text);
    }

    #[test]
    fn slots_output_has_no_raw_control_characters(
        report in any_report(),
        slots in proptest::collection::vec(any_report(), 1..4),
    ) {
        let report = Report {
            slots: Some(slots.len() as u16),
            slot_reports: Some(slots),
            ..report
        };
        let text = lockrun::report::human(&report);
        prop_assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{:?}", text);
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        prop_assert_eq!(json["slot_reports"].as_array().map(Vec::len), Some(report.slots.unwrap_or(0) as usize));
    }

    #[test]
    fn json_output_keeps_its_documented_schema(report in any_report()) {
        let json = lockrun::sanitize::json(&report).unwrap();
        prop_assert!(!json.contains('\n'), "one line per path");
        prop_assert!(!json.chars().any(char::is_control), "raw DEL or C1: {:?}", json);
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        prop_assert!(["held", "free", "unknown"].contains(&back["state"].as_str().unwrap()));
        prop_assert_eq!(&back["path"], &serde_json::json!(report.path));
        prop_assert_eq!(back["holders"].as_array().map(Vec::len), Some(report.holders.len()));
        for holder in back["holders"].as_array().unwrap() {
            prop_assert!(holder["pid"].is_i64() && holder["mode"].is_string());
            prop_assert!(holder.get("command").is_some());
            // A file lock's kind and range, or none of them (a lock URL).
            let spanned = holder.get("kind").is_some();
            prop_assert_eq!(holder.get("start").is_some(), spanned);
            prop_assert_eq!(holder.get("end").is_some(), spanned);
        }
        prop_assert_eq!(back["record"].is_null(), report.record.is_none());
        prop_assert!(back["record_holder_alive"].is_boolean() || back["record_holder_alive"].is_null());
        prop_assert!(back.get("reason").is_some());
        // Files keep the schema they had before lock URLs: no `etcd` key.
        prop_assert_eq!(back.get("etcd").is_some(), report.service.is_some());
        if report.service.is_some() {
            prop_assert!(back["etcd"]["key"].is_string() && back["etcd"]["fencing_token"].is_i64());
        }
        // Nor `slots` unless the lock has them.
        prop_assert!(back.get("slots").is_none() && back.get("slot_reports").is_none());
    }
}

/// A lock URL's object keeps its fields in the order its type declares,
/// as before reports became generic (a Value would sort them).
#[test]
fn a_services_json_keeps_its_field_order() {
    let mut report = Report::free("postgres:///#x".into());
    report.service = Some(
        lockrun::backend::postgres::inspect::PgLock {
            key: 1,
            backend_pid: Some(2),
            application_name: Some("app".into()),
            user: None,
            client_addr: None,
            backend_start: None,
        }
        .into(),
    );
    let json = serde_json::to_string(&report).unwrap();
    assert!(
        json.contains(r#""postgres":{"key":1,"backend_pid":2,"application_name":"app","#),
        "{json}"
    );
}
