//! `lockrun --generate KIND`: the man pages and shell completions of this
//! binary, as built (ripgrep's convention). The files in the repository's
//! man/ and completions/ are the same output for the default build
//! (`files(false)`); a test keeps them so.
//!
//! The man pages are written here, not by clap_mangen: a manual page has
//! sections a `--help` text does not (ENVIRONMENT, EXIT STATUS, EXAMPLES,
//! NOTES), and the options come from the same clap definition as `--help`,
//! so the two cannot drift apart.

use crate::backend::Words;
use crate::cli;
use crate::registry;

pub use crate::cli::GenerateKind as Kind;

pub mod completion;

/// The text `--generate KIND` prints for this build.
///
/// The default build prints the repository's files, compiled in: they are
/// what it would generate (a test checks), and generating them at run time
/// would cost more than the text. Measured on the static release binary
/// (1,574,176 bytes before `--generate`): generating the man page and
/// completions (clap_complete) +136 KB; the files compiled in +38 KB. A
/// build with lock URLs has other options, so it generates its own (the
/// `lock-urls` feature, which every lock URL backend's turns on, brings
/// clap_complete), as the tests do for the files.
pub fn render(kind: Kind) -> Vec<u8> {
    #[cfg(feature = "lock-urls")]
    {
        use clap_complete::Shell;
        let shell = match kind {
            Kind::Man => return man_page(true).into_bytes(),
            Kind::ManHolder => return holder_page(true).into_bytes(),
            Kind::ManCheck => return check_page(true).into_bytes(),
            Kind::CompleteBash => Shell::Bash,
            Kind::CompleteZsh => Shell::Zsh,
            Kind::CompleteFish => Shell::Fish,
            Kind::CompleteElvish => Shell::Elvish,
            Kind::CompletePowershell => Shell::PowerShell,
        };
        let mut cmd = cli::command_for(true);
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, "lockrun", &mut out);
        completion::finish(kind, &cmd, out)
    }
    #[cfg(not(feature = "lock-urls"))]
    {
        let script: &[u8] = match kind {
            Kind::Man => include_bytes!("../man/lockrun.1"),
            Kind::ManHolder => include_bytes!("../man/lockrun-holder.1"),
            Kind::ManCheck => include_bytes!("../man/lockrun-check.1"),
            Kind::CompleteBash => include_bytes!("../completions/lockrun.bash"),
            Kind::CompleteZsh => include_bytes!("../completions/_lockrun"),
            Kind::CompleteFish => include_bytes!("../completions/lockrun.fish"),
            Kind::CompleteElvish => include_bytes!("../completions/lockrun.elv"),
            Kind::CompletePowershell => include_bytes!("../completions/_lockrun.ps1"),
        };
        script.to_vec()
    }
}

/// The man pages, as (path relative to the crate root, contents).
pub fn man_pages(with_urls: bool) -> Vec<(String, String)> {
    vec![
        ("man/lockrun.1".into(), man_page(with_urls)),
        ("man/lockrun-holder.1".into(), holder_page(with_urls)),
        ("man/lockrun-check.1".into(), check_page(with_urls)),
    ]
}

/// Text for roff: hyphens as `\-` (so they stay minus signs a reader can
/// search for and copy), backslashes as `\e`, and a line that would start
/// with a control character made literal.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|line| {
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn title(name: &str) -> String {
    format!(
        ".TH {} 1 \"\" \"lockrun {}\" \"User Commands\"\n",
        name.to_uppercase(),
        env!("CARGO_PKG_VERSION")
    )
}

/// The OPTIONS section from the clap definition: one `.SS` per help
/// heading, in the order `--help` shows them; hidden options left out (the
/// build does not have them).
fn options(cmd: &clap::Command) -> String {
    // Building adds clap's own --help and --version.
    let mut cmd = cmd.clone();
    cmd.build();
    let cmd = &cmd;
    let mut out = String::from(".SH OPTIONS\n");
    let mut headings: Vec<Option<&str>> = Vec::new();
    for arg in cmd.get_arguments() {
        if !arg.is_hide_set() && !arg.is_positional() && !headings.contains(&arg.get_help_heading())
        {
            headings.push(arg.get_help_heading());
        }
    }
    // clap's own --help and --version have no heading: last, as in --help.
    headings.sort_by_key(|h| h.is_none());
    for heading in headings {
        if let Some(heading) = heading {
            out.push_str(&format!(".SS {heading}\n"));
        } else if cmd.get_arguments().any(|a| a.get_help_heading().is_some()) {
            out.push_str(".SS Other\n");
        }
        for arg in cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_positional() && a.get_help_heading() == heading)
        {
            let mut names = Vec::new();
            if let Some(short) = arg.get_short() {
                names.push(format!("\\fB\\-{short}\\fR"));
            }
            for short in arg.get_visible_short_aliases().unwrap_or_default() {
                names.push(format!("\\fB\\-{short}\\fR"));
            }
            if let Some(long) = arg.get_long() {
                names.push(format!("\\fB\\-\\-{}\\fR", roff(long)));
            }
            for long in arg.get_visible_aliases().unwrap_or_default() {
                names.push(format!("\\fB\\-\\-{}\\fR", roff(long)));
            }
            let mut header = names.join(", ");
            if arg.get_action().takes_values()
                && let Some(values) = arg.get_value_names()
            {
                for value in values {
                    header.push_str(&format!(" \\fI{}\\fR", roff(value)));
                }
            }
            let help = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            out.push_str(&format!(".TP\n{header}\n{}\n", roff(&help)));
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("\\fB{}\\fR", roff(v.get_name())))
                .collect();
            if !values.is_empty() {
                out.push_str(&format!(".br\nOne of: {}.\n", values.join(", ")));
            }
        }
    }
    out
}

fn has_arg(cmd: &clap::Command, id: &str) -> bool {
    cmd.get_arguments()
        .any(|a| a.get_id() == id && !a.is_hide_set())
}

/// The lock URL backends a page describes: this build's, or none.
fn backends(with_urls: bool) -> Vec<&'static Words> {
    if with_urls {
        registry::built().collect()
    } else {
        Vec::new()
    }
}

fn man_page(with_urls: bool) -> String {
    let cmd = cli::command_for(with_urls);
    let built = backends(with_urls);
    let mut page = title("lockrun");
    page.push_str(MAN_NAME);
    page.push_str(MAN_SYNOPSIS);
    page.push_str(MAN_DESCRIPTION);
    for words in &built {
        page.push_str(words.man_description);
    }
    page.push_str(&options(&cmd));
    page.push_str(MAN_ENVIRONMENT);
    if has_arg(&cmd, "slots") {
        page.push_str(MAN_ENVIRONMENT_SLOTS);
    }
    if !built.is_empty() {
        page.push_str(MAN_ENVIRONMENT_URLS);
        for words in &built {
            page.push_str(words.man_environment);
        }
        page.push_str(".PP\nlockrun reads:\n");
        for words in &built {
            page.push_str(words.man_reads);
        }
    }
    page.push_str(MAN_EXIT_STATUS);
    if has_arg(&cmd, "max_time") {
        page.push_str(MAN_EXIT_STATUS_MAX_TIME);
    }
    for words in &built {
        page.push_str(words.man_exit);
    }
    page.push_str(MAN_FILES);
    page.push_str(MAN_EXAMPLES);
    page.push_str(MAN_NOTES);
    page.push_str(MAN_SEE_ALSO);
    page
}

fn holder_page(with_urls: bool) -> String {
    let cmd = cli::command_for(with_urls);
    let sub = cmd
        .find_subcommand("holder")
        .cloned()
        .unwrap_or_else(|| clap::Command::new("holder"));
    let mut page = title("lockrun-holder");
    page.push_str(
        ".SH NAME\nlockrun\\-holder \\- who holds each lock now, or held it last\n\
         .SH SYNOPSIS\n.B lockrun holder\n[\\fB\\-\\-json\\fR] \\fILOCKFILE\\fR...\n",
    );
    page.push_str(HOLDER_DESCRIPTION);
    let built = backends(with_urls);
    for words in &built {
        page.push_str(words.holder_description);
    }
    page.push_str(&options(&sub));
    page.push_str(HOLDER_EXIT_STATUS);
    for words in &built {
        page.push_str(words.inspect_exit);
    }
    page.push_str(SUB_SEE_ALSO);
    page
}

fn check_page(with_urls: bool) -> String {
    let cmd = cli::command_for(with_urls);
    let sub = cmd
        .find_subcommand("check")
        .cloned()
        .unwrap_or_else(|| clap::Command::new("check"));
    let mut page = title("lockrun-check");
    page.push_str(
        ".SH NAME\nlockrun\\-check \\- is a lock held right now?\n\
         .SH SYNOPSIS\n.B lockrun check\n[\\fB\\-\\-json\\fR] [\\fB\\-q\\fR] [\\fB\\-\\-probe\\fR] \\fILOCKFILE\\fR\n",
    );
    page.push_str(CHECK_DESCRIPTION);
    let built = backends(with_urls);
    for words in &built {
        page.push_str(words.holder_description);
    }
    page.push_str(&options(&sub));
    page.push_str(CHECK_EXIT_STATUS);
    page.push_str(SUB_SEE_ALSO);
    page
}

const MAN_NAME: &str = "\
.SH NAME
lockrun \\- run a command while holding a kernel lock on a file, and tell who holds it
";

const MAN_SYNOPSIS: &str = "\
.SH SYNOPSIS
.B lockrun
[\\fIOPTIONS\\fR] \\fILOCKFILE\\fR [\\fB\\-\\-\\fR] \\fICOMMAND\\fR [\\fIARG\\fR]...
.br
.B lockrun
[\\fIOPTIONS\\fR] \\fILOCKFILE\\fR \\fB\\-c\\fR \\fISHELL_COMMAND\\fR
.br
.B lockrun
[\\fIOPTIONS\\fR] \\fIFD\\fR
.br
.B lockrun
[\\fIOPTIONS\\fR] \\fB\\-\\-fd\\fR \\fIFD\\fR [\\fB\\-\\-\\fR] \\fICOMMAND\\fR [\\fIARG\\fR]...
.br
.B lockrun holder
[\\fB\\-\\-json\\fR] \\fILOCKFILE\\fR...
.br
.B lockrun check
[\\fB\\-\\-json\\fR] [\\fB\\-q\\fR] [\\fB\\-\\-probe\\fR] \\fILOCKFILE\\fR
.br
.B lockrun list
[\\fB\\-\\-json\\fR] [\\fB\\-\\-all\\fR] [\\fB\\-\\-color\\fR \\fIWHEN\\fR] [\\fIDIR\\fR|\\fILOCKFILE\\fR]...
.br
.B lockrun \\-\\-generate
\\fIKIND\\fR
";

const MAN_DESCRIPTION: &str = "\
.SH DESCRIPTION
.B lockrun
takes a kernel lock on \\fILOCKFILE\\fR, runs \\fICOMMAND\\fR while holding it, and
releases it when the command has exited, in the manner of
.BR flock (1),
whose invocations it accepts.
The lock is a
.BR flock (2)
lock by default, or with \\fB\\-\\-fcntl\\fR an open file description lock
(\\fBF_OFD_SETLK\\fR, see
.BR fcntl (2)).
Either belongs to the open file description, which the command inherits:
if lockrun itself is killed, even with SIGKILL, the command keeps the lock until
it exits, and when the last holder dies, for whatever reason, the kernel
releases the lock. There is no stale lock to clean up after a crash.
.PP
The lock file is created if it does not exist (mode 0666 minus the umask; its
directory must exist) and is never deleted, renamed or replaced: the inode is
the lock. \\fILOCKFILE\\fR may be a directory, which is locked as it is. A
symbolic link in the last component, a FIFO, a socket or a device is refused
without being opened.
.PP
lockrun writes into the lock file only its own holder record, and only when
the file is empty or already holds a lockrun record (an earlier run's); not
with \\fB\\-s\\fR, \\fB\\-\\-no\\-record\\fR, a byte range, a directory or a file with
more than one name, nor, under the name flock, into an empty file it did not
create. Each write replaces that record and cuts the file to the
new record's length
.RB ( ftruncate (2)),
which removes only the rest of the record it replaced (after a failed write,
the whole of it). Any other content, the
file's own data or what the command wrote into it, is never written over nor
truncated: the release record is written only while the file still holds, byte
for byte, the record this run wrote.
.PP
By default lockrun waits, in the kernel, until the lock is free; \\fB\\-n\\fR
gives up at once and \\fB\\-w\\fR after a while, and then lockrun exits 75 (see
\\fBEXIT STATUS\\fR) without running the command.
The command gets the environment variables \\fBLOCKRUN_LOCKFILE\\fR and
\\fBLOCKRUN_MODE\\fR. Signals sent to lockrun (SIGTERM, SIGHUP, SIGINT, SIGQUIT,
SIGUSR1, SIGUSR2) reach the command, and lockrun ends as the command ended: with
its exit status, or by the same signal.
.SS The holder record
After taking an exclusive lock, lockrun writes one line of JSON into the lock
file before the command starts: the command's pid and start time, the user,
host, command line, working directory and when the lock was taken. When the
command has exited lockrun adds when and how it ended. So a held lock tells who
holds it, and a free one who held it last. The record is written only into a
file that is empty or already holds a record, never into other content, a file
with several hard links, a directory, in shared mode, in the descriptor forms,
for a byte range (\\fB\\-\\-start\\fR, \\fB\\-\\-length\\fR: other ranges' holders hold the
file at the same time), or with \\fB\\-\\-no\\-record\\fR.
.SS holder and check
.B lockrun holder
\\fILOCKFILE\\fR... says who holds each lock now, or held it last;
.B lockrun check
\\fILOCKFILE\\fR answers by its exit status whether the lock is held. Both read
the kernel's lock table and the record and never take the lock (but
\\fBcheck \\-\\-probe\\fR). See
.BR lockrun\\-holder (1)
and
.BR lockrun\\-check (1).
.B lockrun list
lists every lock in the kernel's table (or the lock files and directories
given), one row each in aligned columns, sorted by path, with the same
reports; a free file of a directory with no record only with \\fB\\-\\-all\\fR.
On a terminal rows are cut to its width (\\fBCOLUMNS\\fR, or the terminal's);
\\fB\\-\\-color\\fR \\fIalways\\fR|\\fIauto\\fR|\\fInever\\fR colours the state
(default \\fInever\\fR; \\fIauto\\fR: on a terminal unless \\fBNO_COLOR\\fR is set).
\\fB\\-\\-json\\fR adds \\fBwaiters\\fR to the \\fBholder \\-\\-json\\fR schema.
A lock file literally named \\fBholder\\fR, \\fBcheck\\fR or \\fBlist\\fR in the current
directory is written \\fB./holder\\fR.
.SS Descriptor forms
With a lone number \\fIFD\\fR in place of \\fILOCKFILE\\fR and no command, lockrun
locks (or with \\fB\\-u\\fR unlocks) the descriptor \\fIFD\\fR it inherited and
exits, for the shell idiom shown in \\fBEXAMPLES\\fR: the lock stays with the
shell's descriptor. With \\fB\\-\\-fd\\fR \\fIFD\\fR \\fICOMMAND\\fR it locks the
descriptor and runs the command, which inherits it. lockrun never closes a
descriptor it was lent.
.SS Several locks at once
With \\fB\\-\\-also\\fR \\fILOCKFILE2\\fR (repeatable) lockrun holds every lock file
named while the command runs, or none of them. It takes them in one order, by
device and inode, whatever the order they were named in, so lockruns naming the
same files in any order never deadlock: it only ever waits, in the kernel, for a
lock that comes after every lock it holds. One \\fB\\-w\\fR deadline covers the
set; when the wait ends without all of them (\\fB\\-n\\fR, the deadline, a signal)
none is held. A file named twice or through a hard link is locked once. Each
lock file's record names the others (\\fBalso\\fR), so \\fBlockrun holder\\fR on any
of them shows the set.
.SS At most once per period
With \\fB\\-\\-skip\\-if\\-succeeded\\-within\\fR \\fIDURATION\\fR lockrun, once it holds
the lock, reads the lock file's record: if the last run exited 0 and ended less
than \\fIDURATION\\fR ago, it does not run the command, leaves the record as it
was, says so on stderr (not with \\fB\\-q\\fR) and exits 0. A failed, killed or
unfinished last run, or no record, never causes a skip.
";

const MAN_ENVIRONMENT: &str = "\
.SH ENVIRONMENT
.TP
.B SHELL
The shell that runs \\fB\\-c\\fR \\fISHELL_COMMAND\\fR (as \\fB\"$SHELL\" \\-c\\fR); /bin/sh when unset or empty.
.PP
lockrun sets these for the command:
.TP
.B LOCKRUN_LOCKFILE
The absolute path of the lock file (with \\fB\\-\\-fd\\fR, the file the descriptor is open on).
.TP
.B LOCKRUN_MODE
\\fBexclusive\\fR or \\fBshared\\fR.
";

const MAN_ENVIRONMENT_SLOTS: &str = "\
.TP
.B LOCKRUN_SLOT
With \\fB\\-\\-slots\\fR \\fIN\\fR: the slot the command holds, 1 to \\fIN\\fR, unique among the current holders.
";

/// What every lock URL gives the command; each backend then adds its own.
const MAN_ENVIRONMENT_URLS: &str = "\
.TP
.B LOCKRUN_FENCING_TOKEN
With a lock URL: a number that grows with every new holder, for the
command to pass to whatever it writes to.
";

const MAN_EXIT_STATUS: &str = "\
.SH EXIT STATUS
.TP
.I the command's
The command ran; a command killed by signal \\fIN\\fR makes lockrun end by the same signal.
.TP
.B 0
In the descriptor form: the lock was taken (or released). With
\\fB\\-\\-skip\\-if\\-succeeded\\-within\\fR: the last run succeeded within the period,
so the command did not run.
.TP
.B 75
The lock was not acquired: held and \\fB\\-n\\fR, or the \\fB\\-w\\fR timeout ran out (EX_TEMPFAIL; \\fB\\-E\\fR changes it). The command did not run.
.TP
.B 64
Usage error: a bad option, duration or size, a missing command.
.TP
.B 66
The lock file cannot be opened or created (missing directory, permission), or the descriptor is not open.
.TP
.B 71
The lock call itself failed for another reason; the message carries the OS error.
.TP
.B 77
The lock file was refused as unsafe: a symbolic link, FIFO, socket or device.
.TP
.B 126
The command was found but cannot be executed.
.TP
.B 127
The command was not found.
.TP
.BI 128+ N
Signal \\fIN\\fR arrived while waiting for the lock (no lock taken, the command did not run).
";

const MAN_EXIT_STATUS_MAX_TIME: &str = "\
.TP
.B 124
\\fB\\-\\-max\\-time\\fR ran out and the command was stopped.
";

const MAN_FILES: &str = "\
.SH FILES
.TP
.I LOCKFILE
The lock and its holder record. Any directory works; \\fI/run/lock\\fR (also
\\fI/var/lock\\fR) is the usual place for system jobs, writable by root only on
most systems. lockrun never deletes it.
";

const MAN_EXAMPLES: &str = "\
.SH EXAMPLES
From cron, every five minutes, skipping a run while the previous one still
runs, and quietly (cron runs with PATH=/usr/bin:/bin, hence the full path):
.PP
.RS
.EX
*/5 * * * * /usr/bin/lockrun \\-n \\-q /run/lock/sync.lock /usr/local/bin/sync.sh
.EE
.RE
.PP
Wait at most ten seconds for the lock:
.PP
.RS
.EX
lockrun \\-w 10s /run/lock/backup.lock \\-\\- backup.sh \\-\\-full
.EE
.RE
.PP
Hourly, but at most one successful run in six hours (a failed run does not
count):
.PP
.RS
.EX
0 * * * * /usr/bin/lockrun \\-w 30m \\-\\-skip\\-if\\-succeeded\\-within 6h /run/lock/report.lock /usr/local/bin/job.sh
.EE
.RE
.PP
Two jobs that share a disk and a database, each holding both locks while it
runs (named in any order: they never deadlock):
.PP
.RS
.EX
lockrun \\-\\-also /run/lock/db.lock /run/lock/disk.lock \\-\\- backup.sh
.EE
.RE
.PP
A shell command line under the lock:
.PP
.RS
.EX
lockrun /run/lock/deploy.lock \\-c \\(aqgit pull && make install\\(aq
.EE
.RE
.PP
A critical section of a script, with the lock on descriptor 9 (the idiom of
.BR flock (1)):
.PP
.RS
.EX
(
  lockrun \\-n 9 || exit 1
  # ... commands executed under the lock ...
) 9>/run/lock/mylockfile
.EE
.RE
.PP
A script that locks itself on its first line:
.PP
.RS
.EX
[ \"$LOCKED\" = \"$0\" ] || exec env LOCKED=\"$0\" lockrun \\-n \"$0\" \"$0\" \"$@\"
.EE
.RE
.PP
Who holds it, and is it held:
.PP
.RS
.EX
lockrun holder /run/lock/backup.lock
if lockrun check \\-q /run/lock/backup.lock; then echo \"backup running\"; fi
.EE
.RE
";

const MAN_NOTES: &str = "\
.SH NOTES
.SS Differences from flock(1)
lockrun accepts flock(1)'s options and forms, with getopt's rules (an option
given again overrides the earlier one). Where it differs:
.IP \\(bu 2
A lock not acquired exits 75, not 1, and prints a line on stderr naming the
holder (\\fB\\-q\\fR silences it; \\fB\\-E 1\\fR restores flock(1)'s status).
.IP \\(bu 2
It writes a holder record into an empty lock file (\\fB\\-\\-no\\-record\\fR to
leave the file alone).
.IP \\(bu 2
A symbolic link in the last component, a FIFO, socket or device is refused (77);
flock(1) opens whatever the path names.
.IP \\(bu 2
A command not found or not executable exits 127 or 126 (flock(1): 69); a command
killed by a signal makes lockrun die by the same signal (flock(1): exits
128+\\fIN\\fR). Signals sent to lockrun are passed to the command.
.IP \\(bu 2
\\fB\\-\\-verbose\\fR (also \\fB\\-v\\fR) names the holder while waiting, on
stderr; flock(1) prints its lines on stdout.
.IP \\(bu 2
Durations also take units (\\fB250ms\\fR, \\fB1m30s\\fR); \\fB\\-\\-poll\\fR,
\\fB\\-q\\fR, \\fB\\-\\-no\\-record\\fR, \\fBholder\\fR and \\fBcheck\\fR are
lockrun's own.
.PP
Invoked under the name \\fBflock\\fR (a symbolic link or copy named flock),
lockrun is flock(1) wherever the two differ: status 1 on a conflict or timeout
and nothing printed, flock(1)'s \\fB\\-\\-verbose\\fR lines on stdout, its exit
statuses (69 command not run, 65 lock call failed, 128+\\fIN\\fR command killed),
and no subcommands. It still writes the holder record, refuses unsafe lock
files and forwards signals. To have it stand in for flock(1):
.PP
.RS
.EX
ln \\-s \\(dq$(command \\-v lockrun)\\(dq /usr/local/bin/flock
.EE
.RE
.SS Network file systems
On NFS, flock(2) locks are emulated with byte\\-range locks on the server, so
they exclude holders on other clients, but a holder on another machine never
appears in this machine's lock table: \\fBholder\\fR and \\fBcheck\\fR say
\\fBunknown\\fR (exit 69) rather than free. An exclusive lock there needs the file open for
writing, so lockrun opens it read\\-write on NFS where it may.
\\fB\\-\\-poll\\fR helps where blocking waits are unreliable.
.SS Durations
A duration is seconds (\\fB10\\fR, \\fB0.5\\fR) or humantime text
(\\fB250ms\\fR, \\fB1m30s\\fR); anything longer than 100 years counts as 100 years.
";

const MAN_SEE_ALSO: &str = "\
.SH SEE ALSO
.BR lockrun\\-holder (1),
.BR lockrun\\-check (1),
.BR flock (1),
.BR flock (2),
.BR fcntl (2),
.BR lockf (3),
.BR lslocks (8)
";

const HOLDER_DESCRIPTION: &str = "\
.SH DESCRIPTION
For each \\fILOCKFILE\\fR, says whether its lock is held, by which processes (from
the kernel's lock table and \\fI/proc\\fR: the processes whose descriptors hold
it, lockrun or not), and what the holder record adds: the command, user, host
and since when; for a free lock, who held it last, when and how it ended. It
never takes the lock. A missing file is reported as free, with no lock file.
";

const HOLDER_EXIT_STATUS: &str = "\
.SH EXIT STATUS
.TP
.B 0
Every path was reported.
.TP
.B 66
A path exists but cannot be read.
.TP
.B 71
The report cannot be written (standard output full or closed).
.TP
.B 64
Usage error.
";

const CHECK_DESCRIPTION: &str = "\
.SH DESCRIPTION
Says whether the lock on \\fILOCKFILE\\fR is held right now, by its exit status
(and a line, unless \\fB\\-q\\fR). It never takes the lock, except with
\\fB\\-\\-probe\\fR where the kernel's table cannot tell (a network file system, a
holder in another PID namespace): then it tries the lock without waiting and
releases it at once, and a concurrent \\fBlockrun \\-n\\fR may fail meanwhile.
";

const CHECK_EXIT_STATUS: &str = "\
.SH EXIT STATUS
.TP
.B 0
The lock is held.
.TP
.B 1
The lock is free, or there is no lock file.
.TP
.B 69
It cannot be told without taking the lock (the reason is printed).
.TP
.B 71
The answer cannot be written (standard output full or closed).
.TP
.B 64
Usage error.
";

const SUB_SEE_ALSO: &str = "\
.SH SEE ALSO
.BR lockrun (1),
.BR flock (1),
.BR lslocks (8)
";
