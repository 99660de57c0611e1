//! The shell completions in completions/, run in the real shells (issue
//! 32, item 3): after the lock file the command's name completes, then its
//! arguments by that command's own completion; `holder` and `check` offer
//! files; options that take a number or a duration offer no file names.
//!
//! Each test runs the committed script (the one `--generate` prints and
//! the packages install) in a temporary directory holding two files,
//! `alpha.lock` and `beta.txt`, so that "offers files" and "offers no
//! files" can be told apart. A missing shell is a visible SKIPPED line, a
//! failure under CI (`common::needs`).
//!
//! LOCKRUN_TEST_COMPLETIONS=DIR runs the same tests on the scripts in DIR
//! instead: how the tests were shown to fail on clap_complete's scripts
//! alone (the completions of an older commit).
// Unix: these run bash, zsh and fish.
#![cfg(unix)]

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

/// The directory of the completion scripts under test.
fn scripts() -> PathBuf {
    match std::env::var_os("LOCKRUN_TEST_COMPLETIONS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("completions"),
    }
}

/// The directory the shell runs in: two files a file completion offers.
fn files_dir() -> tempfile::TempDir {
    let dir = temp_dir();
    for name in ["alpha.lock", "beta.txt"] {
        std::fs::write(dir.path().join(name), "").expect("write a file");
    }
    dir
}

/// Whether a candidate is one of the directory's files.
fn is_file(candidate: &str) -> bool {
    candidate == "alpha.lock" || candidate == "beta.txt"
}

const BASH_COMPLETION: &str = "/usr/share/bash-completion/bash_completion";

/// The candidates bash's completion offers for the command line `words`
/// (the last word is the one being completed), as bash computes them on
/// TAB: COMP_WORDS, COMP_CWORD, COMP_LINE and COMP_POINT set, and the
/// function `complete -p lockrun` names called with the command, the
/// current word and the word before it. bash-completion is loaded first,
/// as in an interactive shell; `frobnicate` is a command with a completion
/// of its own (`complete -W`), so that "the command's own completion" is
/// checked without depending on what else is installed.
fn bash(words: &[&str]) -> Option<Vec<String>> {
    if !needs("bash", "the bash completion runs in bash") {
        return None;
    }
    if !std::path::Path::new(BASH_COMPLETION).exists() {
        skip("bash-completion is not installed (the bash completion runs under it)");
        return None;
    }
    let dir = files_dir();
    let driver = r#"
        source "$BASH_COMPLETION" || exit 90
        source "$SCRIPT" || exit 91
        frobnicate() { :; }
        complete -W "alpha-one beta-two" frobnicate
        COMP_WORDS=("$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        spec=$(complete -p lockrun) || exit 92
        fn=${spec#*-F }
        fn=${fn%% *}
        prev=
        ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
        # compopt complains outside a real completion; its options are not
        # what is checked here.
        "$fn" lockrun "${COMP_WORDS[COMP_CWORD]}" "$prev" 2>/dev/null
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .arg("--norc")
        .arg("-c")
        .arg(driver)
        .arg("bash")
        .args(words)
        .current_dir(dir.path())
        .env("BASH_COMPLETION", BASH_COMPLETION)
        .env("SCRIPT", scripts().join("lockrun.bash"))
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "bash failed on {words:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(candidates(&out.stdout))
}

/// One candidate a line; the empty candidate (bash's "insert nothing")
/// left out.
fn candidates(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_the_command_after_the_lock_file() {
    let Some(got) = bash(&["lockrun", "/tmp/x.lock", "ec"]) else {
        return;
    };
    assert!(got.iter().any(|c| c == "echo"), "{got:?}");
    assert!(!got.iter().any(|c| is_file(c)), "{got:?}");
    // After options and their values, and after "--".
    let got = bash(&["lockrun", "-n", "-w", "5", "--", "alpha.lock", "frob"]).unwrap_or_default();
    assert!(got.iter().any(|c| c == "frobnicate"), "{got:?}");
}

#[test]
fn bash_completes_the_commands_arguments_by_its_own_completion() {
    // `frobnicate`'s completion offers alpha-one and beta-two.
    for words in [
        &["lockrun", "/tmp/x.lock", "frobnicate", "al"][..],
        &[
            "lockrun",
            "-s",
            "--timeout=10s",
            "/tmp/x.lock",
            "frobnicate",
            "al",
        ],
        &[
            "lockrun",
            "--time",
            "10s",
            "-E",
            "3",
            "/tmp/x.lock",
            "--",
            "frobnicate",
            "al",
        ],
        &["lockrun", "-nw5", "/tmp/x.lock", "frobnicate", "al"],
        // --fd N has no lock file: the command comes first.
        &["lockrun", "--fd", "3", "frobnicate", "al"],
    ] {
        let Some(got) = bash(words) else {
            return;
        };
        assert_eq!(got, ["alpha-one"], "{words:?}");
    }
    // A command's own options: the command line after lockrun is the
    // command's, as if typed alone (sudo's completion gets `sudo ec`).
    let got = bash(&["lockrun", "/tmp/x.lock", "sudo", "ec"]).unwrap_or_default();
    assert!(got.iter().any(|c| c == "echo"), "{got:?}");
}

#[test]
fn bash_completes_git_subcommands_through_gits_completion() {
    if !has("git") || !std::path::Path::new("/usr/share/bash-completion/completions/git").exists() {
        // frobnicate's test above checks the same mechanism.
        skip("git or its bash completion is not installed");
        return;
    }
    let Some(got) = bash(&["lockrun", "/tmp/x.lock", "git", "che"]) else {
        return;
    };
    assert!(got.iter().any(|c| c == "checkout"), "{got:?}");
    assert!(got.iter().any(|c| c == "cherry-pick"), "{got:?}");
}

#[test]
fn bash_offers_no_files_for_options_that_take_a_number_or_a_duration() {
    for option in [
        "-w",
        "--timeout",
        "--wait",
        "-E",
        "--conflict-exit-code",
        "--slots",
        "--max-time",
        "--kill-grace",
        "--fd",
        "--poll",
        "--start",
        "--length",
        // Abbreviated, as clap accepts them.
        "--time",
        "--max-t",
    ] {
        let Some(got) = bash(&["lockrun", option, ""]) else {
            return;
        };
        assert!(got.is_empty(), "lockrun {option} <TAB> offered {got:?}");
    }
    // --timeout=<TAB>: bash splits the "=" off as a word of its own.
    let got = bash(&["lockrun", "--timeout", "=", ""]).unwrap_or_default();
    assert!(got.is_empty(), "lockrun --timeout=<TAB> offered {got:?}");
    // Values from a list still complete.
    let got = bash(&["lockrun", "--forward", ""]).unwrap_or_default();
    assert_eq!(got, ["auto", "never"]);
}

#[test]
fn bash_offers_files_for_holder_and_check_and_the_lock_file() {
    for sub in ["holder", "check"] {
        let Some(got) = bash(&["lockrun", sub, ""]) else {
            return;
        };
        assert_eq!(got, ["alpha.lock", "beta.txt"], "lockrun {sub} <TAB>");
        let got = bash(&["lockrun", sub, "--json", "a"]).unwrap_or_default();
        assert_eq!(got, ["alpha.lock"], "lockrun {sub} --json a<TAB>");
        // Their options when asked for.
        let got = bash(&["lockrun", sub, "--j"]).unwrap_or_default();
        assert_eq!(got, ["--json"], "lockrun {sub} --j<TAB>");
    }
    // More than one path for holder.
    let got = bash(&["lockrun", "holder", "alpha.lock", "b"]).unwrap_or_default();
    assert_eq!(got, ["beta.txt"]);
    // The lock file of the run form, after options; and, first, the
    // subcommands beside the files.
    let got = bash(&["lockrun", "-n", "-w", "5", "al"]).unwrap_or_default();
    assert_eq!(got, ["alpha.lock"]);
    // After an option, files only: a subcommand is only ever the first word.
    let got = bash(&["lockrun", "-n", ""]).unwrap_or_default();
    assert_eq!(got, ["alpha.lock", "beta.txt"], "lockrun -n <TAB>");
    let got = bash(&["lockrun", ""]).unwrap_or_default();
    for want in ["alpha.lock", "beta.txt", "holder", "check"] {
        assert!(
            got.iter().any(|c| c == want),
            "lockrun <TAB> offered {got:?}"
        );
    }
}

/// The candidates zsh's completion offers for `line` on TAB. zsh completes
/// only inside its line editor, so a zsh runs under a pseudo-terminal
/// (zsh/zpty), with `compinit` and the script's directory first in
/// `fpath`, as a user's would be; `compadd` is wrapped to print each match
/// it adds (the technique of zsh-capture-completion), and a post-function
/// ends the shell once the completion is done. `frobnicate` has a
/// completion of its own, as in the bash tests.
fn zsh(line: &str) -> Option<Vec<String>> {
    if !needs("zsh", "the zsh completion runs in zsh") {
        return None;
    }
    let dir = files_dir();
    let driver = r#"
        zmodload zsh/zpty || exit 90
        zpty z zsh -f -i || exit 91
        zpty -w z "PS1= PROMPT= RPROMPT=; fpath=(${(q)1} \$fpath)"
        zpty -w z 'autoload -Uz compinit && compinit -u -D'
        zpty -w z 'frobnicate() { : }; _frobnicate() { compadd alpha-one beta-two }; compdef _frobnicate frobnicate'
        zpty -w z "bindkey '^I' complete-word; zstyle ':completion:*' insert-tab false"
        zpty -w z 'compadd() { if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then builtin compadd "$@"; return; fi; local -a __hits; builtin compadd -A __hits "$@"; (( $#__hits )) && print -rl -- "CAND:"${^__hits}; builtin compadd "$@" }'
        zpty -w z 'comppostfuncs=( _lockrun_test_done ); _lockrun_test_done() { print -r -- "END""MARK"; exit }'
        zpty -w z 'print -r -- READY""MARK'
        while zpty -r z out; do [[ $out == *READYMARK* ]] && break; done
        zpty -w -n z "$2"$'\t'
        while zpty -r z out; do
            [[ $out == *ENDMARK* ]] && break
            [[ $out == *CAND:* ]] && print -r -- "${${out#*CAND:}//[$'\r\n']/}"
        done
        zpty -d z
    "#;
    // `timeout`: a completion that never finishes would otherwise hang
    // the test on the pseudo-terminal.
    let out = Command::new("timeout")
        .args(["30", "zsh", "-f", "-c", driver, "zsh"])
        .arg(scripts())
        .arg(line)
        .current_dir(dir.path())
        .output()
        .expect("run zsh");
    assert!(
        out.status.success(),
        "zsh failed on {line:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got = candidates(&out.stdout);
    // A match added by two completers (a file and a subcommand) once.
    got.sort();
    got.dedup();
    Some(got)
}

/// The candidates fish offers for `line` (`complete -C`, fish's own
/// test hook), the script sourced first; a description after a tab is
/// left off. Fish's own completions (git's) are on its path; the user's
/// configuration is not (an empty XDG_CONFIG_HOME).
fn fish(line: &str) -> Option<Vec<String>> {
    if !needs("fish", "the fish completion runs in fish") {
        return None;
    }
    let dir = files_dir();
    let config = temp_dir();
    let driver = r#"
        source $argv[1]; or exit 90
        function frobnicate; end
        complete -c frobnicate -f -a 'alpha-one beta-two'
        complete -C"$argv[2]"
    "#;
    let out = Command::new("fish")
        .args(["-c", driver])
        .arg(scripts().join("lockrun.fish"))
        .arg(line)
        .current_dir(dir.path())
        .env("XDG_CONFIG_HOME", config.path())
        .output()
        .expect("run fish");
    assert!(
        out.status.success(),
        "fish failed on {line:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = candidates(&out.stdout)
        .into_iter()
        .map(|c| c.split('\t').next().unwrap_or_default().to_owned())
        .collect();
    Some(got)
}

/// The same checks in zsh and fish, each shell by its own driver.
fn check_shell(shell: &str, complete: fn(&str) -> Option<Vec<String>>) {
    let Some(got) = complete("lockrun /tmp/x.lock ec") else {
        return;
    };
    assert!(got.iter().any(|c| c == "echo"), "{shell}: {got:?}");
    for line in [
        "lockrun /tmp/x.lock frobnicate al",
        "lockrun -n -w 5 /tmp/x.lock frobnicate al",
        "lockrun /tmp/x.lock -- frobnicate al",
        "lockrun --fd 3 frobnicate al",
    ] {
        assert_eq!(
            complete(line).unwrap_or_default(),
            ["alpha-one"],
            "{shell}: {line}"
        );
    }
    for option in [
        "-w",
        "--timeout",
        "-E",
        "--slots",
        "--max-time",
        "--kill-grace",
        "--fd",
    ] {
        let got = complete(&format!("lockrun {option} ")).unwrap_or_default();
        assert!(
            !got.iter().any(|c| is_file(c)),
            "{shell}: lockrun {option} <TAB> offered {got:?}"
        );
    }
    for sub in ["holder", "check"] {
        let got = complete(&format!("lockrun {sub} ")).unwrap_or_default();
        assert_eq!(
            got,
            ["alpha.lock", "beta.txt"],
            "{shell}: lockrun {sub} <TAB>"
        );
    }
    let got = complete("lockrun -n al").unwrap_or_default();
    assert_eq!(got, ["alpha.lock"], "{shell}");
    // After an option the word is the lock file: a subcommand is only ever
    // the first word (`lockrun -n holder` locks a file named holder).
    let got = complete("lockrun -n ").unwrap_or_default();
    assert_eq!(got, ["alpha.lock", "beta.txt"], "{shell}: lockrun -n <TAB>");
    // An abbreviated long option (clap takes any unambiguous prefix) still
    // reads its value: `--time 5` is `--timeout 5`.
    let got = complete("lockrun --time ").unwrap_or_default();
    assert!(
        !got.iter().any(|c| is_file(c)),
        "{shell}: lockrun --time <TAB> offered {got:?}"
    );
    assert_eq!(
        complete("lockrun --time 5 /tmp/x.lock frobnicate al").unwrap_or_default(),
        ["alpha-one"],
        "{shell}: an abbreviated option's value is not the lock file"
    );
}

#[test]
fn zsh_completes_the_command_line_after_the_lock_file_and_files_where_files_go() {
    check_shell("zsh", zsh);
}

#[test]
fn fish_completes_the_command_line_after_the_lock_file_and_files_where_files_go() {
    check_shell("fish", fish);
}

#[test]
fn zsh_and_fish_complete_git_through_gits_completion() {
    if !has("git") {
        skip("git is not installed");
        return;
    }
    for (shell, complete) in [("zsh", zsh as fn(&str) -> _), ("fish", fish)] {
        let Some(got) = complete("lockrun /tmp/x.lock git che") else {
            continue;
        };
        assert!(got.iter().any(|c| c == "checkout"), "{shell}: {got:?}");
    }
}
