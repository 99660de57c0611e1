//! The one list of lock URL backends, and the only place outside their
//! folders that names them.
//!
//! Each line of [`lock_urls!`] below is a backend: a `LockTarget` variant
//! and the module in `src/backend/` whose `entry` gives what everything
//! else asks of it: whether a LOCKFILE argument is its URL and what it
//! parses to (`is_url`, `parse_target`), its clap options (`Args`,
//! `InspectArgs`, `ARGS_ONLY_HERE`), its run form (`run_options`, `start`),
//! its `holder`/`check` (`look_up`), its words for `--help` and the man
//! pages (`WORDS`), its `Capabilities` (`CAPS`) and whether the build has
//! it (`ENABLED`, `not_built`). `LockTarget`, main.rs's dispatch,
//! `holder`/`check`, `--help` and `--generate` all go through here.
//!
//! A backend whose cargo feature is off still has its `entry` (parsing
//! refuses with "built without", `start` returns a backend that cannot
//! exist), so nothing here or in a caller writes `cfg`, and a build
//! advertises exactly the backends it has ([`built`]).
//!
//! Above `run`, `inspect` and `backend`: it joins them, and neither the run
//! path nor a backend reaches it (tests/layering.rs).

use crate::backend::{self, Asked, Capabilities, UrlBase, Words};
use crate::exit_codes::Failure;
use crate::inspect::Report;
use crate::run::{self, Ending};
use clap::{Args as _, FromArgMatches as _};
use std::ffi::OsString;
use std::path::PathBuf;

/// What the locks of one `holder` call share: the host's lock table and
/// the walk of every process's descriptors, read once for all of its
/// lock files, as `list` reads them once for every row (issue 34 item 4).
/// Lock URLs each ask their own service.
#[derive(Default)]
pub struct Looks {
    #[cfg(unix)]
    file: backend::file::inspect::Look,
}

/// `text` (a lock URL) with its passwords taken out, as the command's
/// `LOCKRUN_LOCK_URL` carries it: `user:secret@` becomes `user@`, and a
/// `password=secret` parameter goes with its `&`. The command asks the
/// service with its own credentials (PGPASSWORD, a password file).
pub fn without_passwords(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    for span in password_spans(bytes).into_iter().rev() {
        let (start, end) = (span.start, span.end);
        if start > 0 && bytes[start - 1] == b':' {
            out.drain(start - 1..end);
            continue;
        }
        // A query parameter: from its name (after `?` or `&`) to its end,
        // and one `&` joining it to the next or the one before.
        let name = bytes[..start]
            .iter()
            .rposition(|&b| b == b'?' || b == b'&')
            .map_or(start, |p| p + 1);
        if bytes.get(end) == Some(&b'&') {
            out.drain(name..=end);
        } else if name > 0 && bytes[name - 1] == b'&' {
            out.drain(name - 1..end);
        } else {
            out.drain(name..end);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

macro_rules! lock_urls {
    ($($variant:ident => $module:ident),* $(,)?) => {
        /// What a LOCKFILE argument names: the one place that decides which
        /// backend a lock goes to. Nothing but a lock URL's scheme makes a
        /// URL, so every path a user could mean as a file stays a file.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum LockTarget {
            File(PathBuf),
            $($variant(backend::$module::entry::Url),)*
        }

        impl LockTarget {
            pub fn parse(arg: OsString) -> Result<LockTarget, Failure> {
                $(
                    if backend::$module::entry::is_url(&arg) {
                        return backend::$module::entry::parse_target(&arg).map(LockTarget::$variant);
                    }
                )*
                Ok(LockTarget::File(PathBuf::from(arg)))
            }
        }

        impl LockTarget {
            /// Whether its backend takes `--cacert`, `--cert`, `--key`.
            fn takes_tls_files(&self) -> bool {
                match self {
                    LockTarget::File(_) => false,
                    $(LockTarget::$variant(_) => backend::$module::entry::TLS_FILES,)*
                }
            }
        }

        /// The run form on a lock URL, as its backend takes it.
        pub enum UrlRun {
            $($variant(backend::$module::RunOptions),)*
        }

        /// Every lock URL backend's own options, as the command line gave
        /// them (all default when none was given, or the build lacks it).
        #[derive(Debug, Default, PartialEq, Eq)]
        pub struct UrlArgs {
            $($module: backend::$module::entry::Args,)*
        }

        /// The same for `holder` and `check`.
        #[derive(Debug, Default, PartialEq, Eq)]
        pub struct InspectArgs {
            $($module: backend::$module::entry::InspectArgs,)*
        }

        /// Each lock URL backend: whether this build has it, its words,
        /// what it can do, and what its options say elsewhere.
        const ALL: &[(bool, &Words, &Capabilities, &str)] = &[
            $((
                backend::$module::ENABLED,
                &backend::$module::entry::WORDS,
                &backend::$module::CAPS,
                backend::$module::entry::ARGS_ONLY_HERE,
            ),)*
        ];

        /// Whether a built backend's URLs may carry a password, which
        /// main.rs then hides from `ps` (a constant: the file path pays
        /// nothing for it in a build without one).
        pub const HIDES_PASSWORDS: bool =
            false $(|| (backend::$module::ENABLED && backend::$module::entry::HAS_PASSWORDS))*;

        /// Where passwords sit in an argument, for every built backend.
        pub fn password_spans(arg: &[u8]) -> Vec<std::ops::Range<usize>> {
            let mut spans = Vec::new();
            $(
                if backend::$module::ENABLED && backend::$module::entry::HAS_PASSWORDS {
                    spans.extend(backend::$module::entry::password_spans(arg));
                }
            )*
            spans.sort_by_key(|s| s.start);
            spans
        }

        /// The run form on a lock URL.
        pub fn run(opts: &UrlRun) -> Result<Ending, Failure> {
            match opts {
                $(UrlRun::$variant(opts) => {
                    if !backend::$module::ENABLED {
                        return Err(backend::$module::not_built());
                    }
                    let public = without_passwords(&opts.url.text);
                    run::urls::run_url(opts, (&opts.url.text, public), |label| {
                        backend::$module::entry::start(opts, label)
                    })
                })*
            }
        }

        /// `holder` and `check` on any lock, asked where it lives. `probe`
        /// (`check --probe`) tries a file lock whose state the kernel's
        /// table leaves unknown; a lock URL's state is never in doubt while
        /// its service answers, and a probe cannot help when it does not.
        pub fn look_up(target: &LockTarget, want_holders: bool, probe: bool) -> Result<Report, Failure> {
            look_up_with(target, want_holders, probe, &mut Looks::default())
        }

        /// [`look_up`] for one of several locks asked together (`holder
        /// A B C`), from what `looks` has read for the others.
        pub fn look_up_with(target: &LockTarget, want_holders: bool, probe: bool, looks: &mut Looks) -> Result<Report, Failure> {
            #[cfg(not(unix))]
            let _ = &looks;
            match target {
                #[cfg(unix)]
                LockTarget::File(path) => backend::file::inspect::look_up_in(path, want_holders, probe, &mut looks.file),
                // lockrun.exe looks lock files up itself (src/windows/inspect.rs):
                // the Unix file backend is not built there.
                #[cfg(not(unix))]
                LockTarget::File(path) => {
                    let _ = (want_holders, probe);
                    Err(Failure::new(crate::exit_codes::USAGE, format!("{} is not a lock URL", path.display())))
                }
                $(LockTarget::$variant(url) => backend::$module::entry::look_up(url),)*
            }
        }

        /// The run form's options on a lock URL, its backend's refusals
        /// first (what it cannot do, another backend's options).
        pub fn url_run(target: LockTarget, asked: &Asked, args: UrlArgs, base: UrlBase) -> Result<UrlRun, Refusal> {
            match target {
                LockTarget::File(_) => Err(Refusal::Usage(String::from("not a lock URL"))),
                $(LockTarget::$variant(url) => {
                    backend::$module::CAPS.refuse(asked).map_err(Refusal::Usage)?;
                    if let Some(message) = others_given(&args, stringify!($module), backend::$module::entry::TLS_FILES) {
                        return Err(Refusal::Usage(message));
                    }
                    backend::$module::entry::run_options(url, &args.$module, base)
                        .map(UrlRun::$variant)
                        .map_err(Refusal::Failure)
                })*
            }
        }

        /// The message for the first backend other than `own` whose
        /// options were given. `--cacert`, `--cert` and `--key` are one set
        /// of options for every backend that takes TLS files
        /// (`entry::TLS_FILES`): given to one such backend, they are not
        /// another's.
        fn others_given(args: &UrlArgs, own: &str, own_tls: bool) -> Option<String> {
            $(
                let theirs = if own_tls && backend::$module::entry::TLS_FILES {
                    backend::$module::entry::without_tls_files(&args.$module)
                } else {
                    args.$module.clone()
                };
                if stringify!($module) != own && theirs != Default::default() {
                    return Some(backend::$module::entry::ARGS_ONLY_HERE.to_owned());
                }
            )*
            None
        }

        /// The message when a lock file was given lock URL options.
        fn any_given(args: &UrlArgs) -> Option<&'static str> {
            $(
                if args.$module != Default::default() {
                    return Some(backend::$module::entry::ARGS_ONLY_HERE);
                }
            )*
            None
        }

        /// `holder`/`check` targets with the options given: each URL gets
        /// its own backend's; options no target can take are a usage error.
        pub fn with_inspect_args(targets: Vec<LockTarget>, args: &InspectArgs) -> Result<Vec<LockTarget>, String> {
            let tls_target = targets.iter().any(LockTarget::takes_tls_files);
            $(
                let theirs = if tls_target && backend::$module::entry::TLS_FILES {
                    backend::$module::entry::without_tls_files(&args.$module)
                } else {
                    args.$module.clone()
                };
                if theirs != Default::default()
                    && !targets.iter().any(|t| matches!(t, LockTarget::$variant(_)))
                {
                    return Err(backend::$module::entry::ARGS_ONLY_HERE.to_owned());
                }
            )*
            targets
                .into_iter()
                .map(|target| match target {
                    LockTarget::File(path) => Ok(LockTarget::File(path)),
                    $(LockTarget::$variant(url) => backend::$module::entry::with_inspect_args(url, &args.$module)
                        .map(LockTarget::$variant)
                        .map_err(|f| f.message),)*
                })
                .collect()
        }

        /// The run form's command line with each built backend's options.
        pub fn augment_run(mut cmd: clap::Command) -> clap::Command {
            $(
                if backend::$module::ENABLED {
                    cmd = <backend::$module::entry::Args>::augment_args(cmd);
                }
            )*
            cmd
        }

        /// `holder`'s or `check`'s with each built backend's options.
        pub fn augment_inspect(mut cmd: clap::Command) -> clap::Command {
            $(
                if backend::$module::ENABLED {
                    cmd = <backend::$module::entry::InspectArgs>::augment_args(cmd);
                }
            )*
            cmd
        }

        /// Each built backend's options from clap's matches.
        pub fn url_args(matches: &clap::ArgMatches) -> Result<UrlArgs, clap::Error> {
            Ok(UrlArgs {
                $($module: if backend::$module::ENABLED {
                    <backend::$module::entry::Args>::from_arg_matches(matches)?
                } else {
                    Default::default()
                },)*
            })
        }

        pub fn inspect_args(matches: &clap::ArgMatches) -> Result<InspectArgs, clap::Error> {
            Ok(InspectArgs {
                $($module: if backend::$module::ENABLED {
                    <backend::$module::entry::InspectArgs>::from_arg_matches(matches)?
                } else {
                    Default::default()
                },)*
            })
        }
    };
}

// The lock URL backends: one line each.
lock_urls! {
    Etcd => etcd,
    Postgres => postgres,
    Redis => redis,
}

/// Why a lock URL's run form is refused: a usage error the command line
/// shows with its usage (an option the backend cannot take), or the
/// backend's own failure, as it words it.
pub enum Refusal {
    Usage(String),
    Failure(Failure),
}

impl LockTarget {
    /// A lock URL: its service, not this machine's kernel, holds the lock,
    /// so a look-up that cannot tell means the service could not be asked.
    pub fn is_url(&self) -> bool {
        !matches!(self, LockTarget::File(_))
    }
}

impl UrlArgs {
    /// What a lock file says to lock URL options, if any were given.
    pub fn refused_for_files(&self) -> Option<&'static str> {
        any_given(self)
    }
}

/// The words of the lock URL backends this build has, in the registry's
/// order.
pub fn built() -> impl Iterator<Item = &'static Words> {
    ALL.iter()
        .filter(|(enabled, ..)| *enabled)
        .map(|(_, words, ..)| *words)
}

/// Whether this build has any lock URL backend with a lease (`--ttl`).
pub fn has_lease() -> bool {
    ALL.iter()
        .any(|(enabled, _, caps, _)| *enabled && caps.lease)
}

/// Every lock URL backend the registry lists, built or not, with its
/// words: for the tests that check a build advertises exactly its own.
pub fn all() -> impl Iterator<Item = (bool, &'static Words)> {
    ALL.iter().map(|(enabled, words, ..)| (*enabled, *words))
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::without_passwords;

    #[test]
    fn a_lock_url_for_the_command_has_no_password() {
        for (given, expected) in [
            (
                "postgres://app:secret@db:5432/jobs#nightly",
                "postgres://app@db:5432/jobs#nightly",
            ),
            (
                "postgres://app@db/jobs?password=secret&sslmode=require#n",
                "postgres://app@db/jobs?sslmode=require#n",
            ),
            (
                "postgres://app@db/jobs?sslmode=require&password=secret#n",
                "postgres://app@db/jobs?sslmode=require#n",
            ),
            ("postgres://app@db/jobs#n", "postgres://app@db/jobs#n"),
            ("etcd://127.0.0.1:2379/job", "etcd://127.0.0.1:2379/job"),
        ] {
            assert_eq!(without_passwords(given), expected, "{given}");
        }
    }
}
