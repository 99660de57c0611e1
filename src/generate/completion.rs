//! What lockrun adds to the completion scripts clap_complete writes.
//!
//! clap_complete completes lockrun's own options and subcommands, but not
//! what comes after the lock file: that is a command and its arguments, and
//! a user expects the command's own completion there, as sudo's, timeout's
//! and env's completions give it (bash-completion's `_command_offset`,
//! zsh's `_normal`, fish's `complete -C`). No clap value hint says "the
//! rest of the line is another command line", so each script gets a small
//! wrapper here, built from the same clap definition (which options take a
//! value, which mean the command comes as a string), so that it cannot
//! drift from the options lockrun has. It lives in the library, not beside
//! the generator, because a build with lock URLs writes its completions at
//! run time (`render`) and must write the same wrapper.
//!
//! Kept free of clap_complete: the default build does not link it.

use super::Kind;

/// The names lockrun's run form knows, read from the clap definition.
struct RunOptions {
    /// Every long option and visible alias, without `--` (clap accepts an
    /// unambiguous prefix of any of them: `infer_long_args`).
    longs: Vec<String>,
    /// The long options that read a value.
    value_longs: Vec<String>,
    /// Those of them whose value is a file (`--also`).
    path_longs: Vec<String>,
    /// The short options that read a value, as one string of letters.
    value_shorts: String,
    /// `-c`/`--command`: the command comes as one string, not after the
    /// lock file.
    command_string: Vec<String>,
    /// `--fd FD`: there is no lock file; the command comes first.
    fd: Vec<String>,
    /// The subcommands (`holder`, `check`).
    subcommands: Vec<String>,
    /// The subcommands' options that read a value (`check --token`).
    sub_values: Vec<String>,
}

fn names(arg: &clap::Arg) -> (Vec<String>, Vec<char>) {
    let mut longs: Vec<String> = arg.get_long().map(str::to_owned).into_iter().collect();
    longs.extend(
        arg.get_visible_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(str::to_owned),
    );
    let mut shorts: Vec<char> = arg.get_short().into_iter().collect();
    shorts.extend(arg.get_visible_short_aliases().unwrap_or_default());
    (longs, shorts)
}

fn run_options(cmd: &clap::Command) -> RunOptions {
    // Building adds clap's own --help and --version, which count for
    // prefixes (`--ver` is ambiguous only with --version there).
    let mut cmd = cmd.clone();
    cmd.build();
    let mut opts = RunOptions {
        longs: Vec::new(),
        value_longs: Vec::new(),
        path_longs: Vec::new(),
        value_shorts: String::new(),
        command_string: Vec::new(),
        fd: Vec::new(),
        subcommands: cmd
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect(),
        sub_values: Vec::new(),
    };
    for sub in cmd.get_subcommands() {
        for arg in sub
            .get_arguments()
            .filter(|a| !a.is_positional() && a.get_action().takes_values())
        {
            let (longs, shorts) = names(arg);
            opts.sub_values
                .extend(longs.iter().map(|l| format!("--{l}")));
            opts.sub_values
                .extend(shorts.iter().map(|s| format!("-{s}")));
        }
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_positional()) {
        let (longs, shorts) = names(arg);
        let dashed: Vec<String> = longs
            .iter()
            .map(|l| format!("--{l}"))
            .chain(shorts.iter().map(|s| format!("-{s}")))
            .collect();
        if arg.get_value_hint() == clap::ValueHint::CommandString {
            opts.command_string.extend(dashed.iter().cloned());
        }
        if arg.get_id() == "fd" {
            opts.fd.extend(dashed.iter().cloned());
        }
        if arg.get_action().takes_values() {
            if matches!(
                arg.get_value_hint(),
                clap::ValueHint::FilePath | clap::ValueHint::AnyPath | clap::ValueHint::DirPath
            ) {
                opts.path_longs.extend(longs.iter().cloned());
            }
            opts.value_longs.extend(longs.iter().cloned());
            opts.value_shorts.extend(shorts.iter());
        }
        opts.longs.extend(longs);
    }
    opts
}

/// clap_complete's script for `kind`, with lockrun's wrapper around it.
/// Scripts of other shells (elvish, PowerShell) are returned as they are.
pub fn finish(kind: Kind, cmd: &clap::Command, generated: Vec<u8>) -> Vec<u8> {
    let opts = run_options(cmd);
    match kind {
        Kind::CompleteBash => bash(&opts, generated),
        Kind::CompleteFish => fish(&opts, generated),
        Kind::CompleteZsh => zsh(&opts, generated),
        _ => generated,
    }
}

/// The start of the `complete` lines clap_complete ends its bash script
/// with: lockrun registers its own function instead.
const BASH_REGISTER: &str = "if [[ \"${BASH_VERSINFO[0]}\" -eq 4 && \"${BASH_VERSINFO[1]}\" -ge 4";

fn bash(opts: &RunOptions, generated: Vec<u8>) -> Vec<u8> {
    let script = String::from_utf8_lossy(&generated);
    // clap's function completes options and their values; it is renamed
    // and called from lockrun's for those words.
    let body = script.replacen("_lockrun() {", "_lockrun__clap() {", 1);
    let body = match body.find(BASH_REGISTER) {
        Some(at) => &body[..at],
        None => &body[..],
    };
    let mut out = String::from(body);
    out.push_str(&fill(BASH_WRAPPER, opts));
    out.into_bytes()
}

/// A wrapper template with its `@NAME@`s filled in from the clap
/// definition: the same names for every shell's wrapper.
fn fill(template: &str, opts: &RunOptions) -> String {
    let names: [(&str, String); 8] = [
        ("@LONGS@", opts.longs.join(" ")),
        // Before @VALUE_LONGS@'s name would match its start.
        ("@VALUE_LONGS_PATHS@", opts.path_longs.join(" ")),
        ("@VALUE_LONGS@", opts.value_longs.join(" ")),
        ("@VALUE_SHORTS@", opts.value_shorts.clone()),
        ("@COMMAND_STRING@", opts.command_string.join(" ")),
        ("@FD@", opts.fd.join(" ")),
        ("@SUB_VALUES@", opts.sub_values.join(" ")),
        ("@SUBCOMMANDS@", opts.subcommands.join(" ")),
    ];
    names
        .iter()
        .fold(template.to_owned(), |text, (name, value)| {
            text.replace(name, value)
        })
}

/// lockrun's bash completion function. `@NAME@` are filled in from the
/// clap definition (`bash`).
const BASH_WRAPPER: &str = r#"
# lockrun's own part (src/generate/completion.rs): the function above is
# clap_complete's, renamed; it completes lockrun's options and their
# values. This one finds the lock file and hands the command after it, and
# that command's arguments, to the command's own completion
# (bash-completion's _command_offset, as sudo, timeout and env do), and
# offers files for a lock file and for holder and check.

# Whether option word $1 reads the next word as its value. A long option
# may be an unambiguous prefix (lockrun accepts --time for --timeout); in a
# cluster of short options (-nw) the first that takes a value takes the
# rest of the word, or the next word when it is last.
_lockrun__takes_value() {
    local word=$1
    case $word in
        --?*=*) return 1 ;;
        --?*)
            local REPLY
            _lockrun__whole "$word"
            [[ " @VALUE_LONGS@ " == *" ${REPLY#--} "* ]]
            ;;
        -?*)
            local rest=${word#-}
            while [[ -n $rest ]]; do
                if [[ "@VALUE_SHORTS@" == *"${rest:0:1}"* ]]; then
                    [[ ${#rest} -eq 1 ]]
                    return
                fi
                rest=${rest:1}
            done
            return 1
            ;;
        *) return 1 ;;
    esac
}

# Long option word $1 by its whole name in REPLY, when it is one or an
# unambiguous prefix of one (clap's function knows only whole names);
# else $1 as it is. No subshell: it runs for every option word.
_lockrun__whole() {
    local long=${1#--} name match= n=0
    REPLY=$1
    [[ $1 == --?* && $1 != *=* ]] || return 0
    for name in @LONGS@; do
        if [[ $name == "$long" ]]; then
            match=$name n=1
            break
        fi
        if [[ $name == "$long"* ]]; then
            match=$name
            ((n++))
        fi
    done
    ((n == 1)) && REPLY=--$match
    return 0
}

# Files, with bash-completion's quoting where it is loaded.
_lockrun__files() {
    if declare -F _filedir >/dev/null; then
        _filedir
    else
        local IFS=$'\n'
        COMPREPLY=($(compgen -f -- "$1"))
        compopt -o filenames 2>/dev/null
    fi
}

_lockrun() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=
    ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
    # bash splits --timeout=5 into "--timeout" "=" "5": after the "=",
    # clap's function wants the option as the word before.
    if [[ $prev == = ]] && ((COMP_CWORD > 1)); then
        _lockrun__clap "$1" "$cur" "${COMP_WORDS[COMP_CWORD - 2]}"
        return
    fi
    [[ $cur == = ]] && cur=

    local i=1 word string= fd= target=
    while ((i < COMP_CWORD)); do
        word=${COMP_WORDS[i]}
        # A subcommand only as the first word (its options come after it).
        if ((i == 1)) && [[ " @SUBCOMMANDS@ " == *" $word "* ]]; then
            # Its options (--json, -q) and their values are clap's;
            # everything else is a lock file.
            if [[ $cur == -* || " @SUB_VALUES@ " == *" $prev "* ]]; then
                _lockrun__clap "$@"
            else
                _lockrun__files "$cur"
            fi
            return
        fi
        case $word in
            --)
                ((i++))
                target=$i
                break
                ;;
            -*)
                [[ " @COMMAND_STRING@ " == *" $word "* ]] && string=1
                [[ " @FD@ " == *" $word "* ]] && fd=1
                if _lockrun__takes_value "$word"; then
                    # The value, "=" and all.
                    ((i++))
                    [[ ${COMP_WORDS[i]} == = ]] && ((i++))
                fi
                ;;
            *)
                target=$i
                break
                ;;
        esac
        ((i++))
    done

    # Still among lockrun's own options: an option, an option's value, or
    # the lock file (or, first, a subcommand).
    if [[ -z $target ]] || ((target >= COMP_CWORD)); then
        if [[ $cur != -* && " @COMMAND_STRING@ " == *" $prev "* ]]; then
            # -c SHELL_COMMAND: it starts with a command name.
            COMPREPLY=($(compgen -c -- "$cur"))
        elif [[ $cur == -* ]] || _lockrun__takes_value "$prev"; then
            local REPLY
            _lockrun__whole "$prev"
            _lockrun__clap "$1" "$2" "$REPLY"
        elif [[ -n $fd ]]; then
            # --fd N: no lock file; the command comes first.
            _lockrun__command "$COMP_CWORD"
        else
            _lockrun__files "$cur"
            if ((COMP_CWORD == 1)); then
                COMPREPLY+=($(compgen -W "@SUBCOMMANDS@" -- "$cur"))
            fi
        fi
        return
    fi

    # With -c the command is a string given to the option; nothing follows
    # the lock file.
    if [[ -n $string ]]; then
        COMPREPLY=()
        compopt +o default +o bashdefault 2>/dev/null
        return
    fi
    # The command starts after the lock file (an optional "--" between
    # them), or at once with --fd.
    local start=$((target + 1))
    [[ -n $fd ]] && start=$target
    if [[ ${COMP_WORDS[start]} == -- ]] && ((start < COMP_CWORD)); then
        ((start++))
    fi
    _lockrun__command "$start"
}

# The command line from word $1 on, by the command's own completion.
_lockrun__command() {
    if declare -F _command_offset >/dev/null; then
        _command_offset "$1"
    elif (($1 == COMP_CWORD)); then
        COMPREPLY=($(compgen -c -- "${COMP_WORDS[COMP_CWORD]}"))
    else
        _lockrun__files "${COMP_WORDS[COMP_CWORD]}"
    fi
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _lockrun -o nosort -o bashdefault -o default lockrun
else
    complete -F _lockrun -o bashdefault -o default lockrun
fi
"#;

/// clap_complete's test for "no subcommand or positional yet" gives up
/// when the last word is an option still waiting for its value (`lockrun
/// -w <TAB>`: argparse fails), so none of its rules applied there and fish
/// offered files. Waiting for a value is still lockrun's own position.
const FISH_GIVES_UP: &str =
    "    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null\n    or return\n";
const FISH_WAITS: &str = "    # An option still waiting for its value: still lockrun's own position\n    # (lockrun's change to clap_complete's function, src/generate/completion.rs).\n    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null\n    or return 0\n";

fn fish(opts: &RunOptions, generated: Vec<u8>) -> Vec<u8> {
    let script = String::from_utf8_lossy(&generated);
    let mut out = script.replacen(FISH_GIVES_UP, FISH_WAITS, 1);
    // clap offers a subcommand wherever none has come yet, so also after
    // options (`lockrun -n <TAB>` offered holder); there the word is the
    // lock file. A subcommand is only ever the first word.
    for sub in &opts.subcommands {
        out = out.replacen(
            &format!("-n \"__fish_lockrun_needs_command\" -a \"{sub}\""),
            &format!("-n \"__fish_lockrun_first_word\" -a \"{sub}\""),
            1,
        );
    }
    out.push_str(&fill(FISH_WRAPPER, opts));
    out.into_bytes()
}

/// lockrun's fish rules for the command after the lock file.
const FISH_WRAPPER: &str = r#"
# lockrun's own part (src/generate/completion.rs): the command after the
# lock file, and its arguments, complete by that command's own completion
# (as sudo's and env's do in fish).

# Whether the word being completed is the first after lockrun: the only
# place for a subcommand.
function __fish_lockrun_first_word
    test (count (commandline -opc)) -eq 1
end

# Whether option word $argv[1] reads the next word as its value (a long
# option may be an unambiguous prefix; in a cluster of short options the
# first that takes a value takes the rest of the word).
function __fish_lockrun_takes_value
    set -l word $argv[1]
    switch $word
        case '--*=*'
            return 1
        case '--?*'
            set -l long (string sub -s 3 -- $word)
            set -l matches
            for name in @LONGS@
                if test "$name" = "$long"
                    set matches $name
                    break
                end
                string match -q -- "$long*" $name; and set -a matches $name
            end
            test (count $matches) -eq 1; and contains -- $matches[1] @VALUE_LONGS@
        case '-?*'
            set -l rest (string sub -s 2 -- $word)
            while test -n "$rest"
                if string match -q -- "*"(string sub -l 1 -- $rest)"*" "@VALUE_SHORTS@"
                    test (string length -- $rest) -eq 1
                    return
                end
                set rest (string sub -s 2 -- $rest)
            end
            return 1
        case '*'
            return 1
    end
end

# The words of the command line from the command on, if the word being
# completed is the command or one of its arguments; fails otherwise.
function __fish_lockrun_command_words
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l n (count $tokens)
    set -l i 1
    set -l target
    set -l string
    set -l fd
    set -l start
    while test $i -le $n
        set -l word $tokens[$i]
        if test $i -eq 1; and contains -- $word @SUBCOMMANDS@
            return 1
        end
        switch $word
            case --
                set target (math $i + 1)
                break
            case '-*'
                contains -- $word @COMMAND_STRING@; and set string 1
                contains -- $word @FD@; and set fd 1
                if __fish_lockrun_takes_value $word
                    set i (math $i + 1)
                    # The value is the word being completed.
                    test $i -le $n; or return 1
                end
            case '*'
                set target $i
                break
        end
        set i (math $i + 1)
    end
    # With -c the command is the option's string: nothing follows the lock file.
    test -z "$string"; or return 1
    if test -n "$fd"
        # --fd N: no lock file; the command comes first.
        test -n "$target"; or set target (math $n + 1)
        set start $target
    else
        test -n "$target"; and test $target -le $n; or return 1
        set start (math $target + 1)
    end
    if test $start -le $n; and test "$tokens[$start]" = --
        set start (math $start + 1)
    end
    test $start -le $n; and printf '%s\n' $tokens[$start..-1]
    return 0
end

# An abbreviated long option (--time for --timeout) still reads its value:
# clap's rules know only the whole name, so without this fish offered files.
function __fish_lockrun_abbreviated_value
    set -l tokens (commandline -opc)
    set -l word $tokens[-1]
    string match -q -- '--?*' $word; or return 1
    string match -q -- '*=*' $word; and return 1
    set -l long (string sub -s 3 -- $word)
    contains -- $long @LONGS@; and return 1
    __fish_lockrun_takes_value $word; or return 1
    for name in @VALUE_LONGS_PATHS@
        string match -q -- "$long*" $name; and return 1
    end
    return 0
end

complete -c lockrun -n __fish_lockrun_abbreviated_value -f

complete -c lockrun -n __fish_lockrun_command_words -f -a '(__fish_complete_subcommand --commandline (__fish_lockrun_command_words) (commandline -ct))'
"#;

/// clap_complete's zsh script describes the lock file, the command and the
/// subcommands as three positions, one after the other (`lockrun holder
/// <TAB>` completed a command name there, `lockrun x.lock ec<TAB>` nothing).
/// lockrun's has one position, the lock file or a subcommand, and then
/// either the subcommand's arguments (clap's code for them) or a command
/// line of its own, which zsh's `_normal` completes as if typed alone.
fn zsh(opts: &RunOptions, generated: Vec<u8>) -> Vec<u8> {
    let script = String::from_utf8_lossy(&generated);
    let mut out = String::new();
    let mut first_arguments = true;
    for line in script.split_inclusive('\n') {
        if line.starts_with("'::command -- ") || line == "\":: :_lockrun_commands\" \\\n" {
            continue;
        }
        if line.starts_with("'::target -- ") {
            // Required, not optional as clap has it: an optional one
            // lets zsh complete the command line there too.
            let line = line.replacen("'::target -- ", "':target -- ", 1);
            out.push_str(&line.replacen(":_files' \\", ":_lockrun__target' \\", 1));
            continue;
        }
        if first_arguments && line.trim_start().starts_with("_arguments ") {
            // Options complete only before the lock file: after it, an
            // option is the command's.
            out.push_str(&line.replacen(" : \\", " -A \"-*\" : \\", 1));
            first_arguments = false;
            continue;
        }
        out.push_str(line);
    }
    let out = out
        .replacen(ZSH_SUBCOMMAND_STATE, &zsh_state(opts), 1)
        .replacen(
            ZSH_START,
            &format!("{ZSH_START}{}", fill(ZSH_WHOLE_LONGS, opts)),
            1,
        )
        .replacen(
            "\nif [ \"$funcstack[1]\" = \"_lockrun\" ]; then",
            &format!(
                "{}\nif [ \"$funcstack[1]\" = \"_lockrun\" ]; then",
                zsh_target(opts)
            ),
            1,
        );
    out.into_bytes()
}

/// The first lines of clap's zsh function, before its `_arguments`.
const ZSH_START: &str = "_lockrun() {\n    typeset -A opt_args\n";

/// clap takes any unambiguous prefix of a long option (`--time 5` is
/// `--timeout 5`); zsh's `_arguments` knows only whole names, so it took
/// `5` for the lock file. The words before the cursor, up to the lock file,
/// get their whole names first. Inline in `_lockrun`, not a function of its
/// own: zsh keeps a function's change to `words` to that function.
const ZSH_WHOLE_LONGS: &str = r#"    # lockrun's own part (src/generate/completion.rs): abbreviated long
    # options (--time for --timeout) by their whole names, as clap reads them.
    local _lr_i _lr_long _lr_value _lr_name _lr_match _lr_n _lr_rest
    for (( _lr_i = 2; _lr_i < CURRENT; _lr_i++ )); do
        case $words[_lr_i] in
            (--) break ;;
            (--?*)
                _lr_long=${words[_lr_i]#--} _lr_value=
                if [[ $_lr_long == *=* ]]; then
                    _lr_value="=${_lr_long#*=}" _lr_long=${_lr_long%%=*}
                fi
                _lr_match= _lr_n=0
                for _lr_name in @LONGS@; do
                    if [[ $_lr_name == "$_lr_long" ]]; then
                        _lr_match=$_lr_name _lr_n=1
                        break
                    fi
                    if [[ $_lr_name == "$_lr_long"* ]]; then
                        _lr_match=$_lr_name
                        (( _lr_n++ ))
                    fi
                done
                (( _lr_n == 1 )) || continue
                words[_lr_i]="--$_lr_match$_lr_value"
                # Its value is the next word.
                if [[ -z $_lr_value && " @VALUE_LONGS@ " == *" $_lr_match "* ]]; then
                    (( _lr_i++ ))
                fi
                ;;
            (-?*)
                _lr_rest=${words[_lr_i]#-}
                while [[ -n $_lr_rest ]]; do
                    if [[ "@VALUE_SHORTS@" == *"${_lr_rest[1]}"* ]]; then
                        [[ ${#_lr_rest} -eq 1 ]] && (( _lr_i++ ))
                        break
                    fi
                    _lr_rest=${_lr_rest[2,-1]}
                done
                ;;
            (*) break ;;
        esac
    done
"#;

/// Where clap's script turns to a subcommand's arguments, at its third
/// position.
const ZSH_SUBCOMMAND_STATE: &str = r#"        words=($line[3] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:lockrun-command-$line[3]:"
        case $line[3] in
"#;

fn zsh_state(opts: &RunOptions) -> String {
    let any = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("${{+opt_args[{n}]}}"))
            .collect::<Vec<_>>()
            .join(" || ")
    };
    format!(
        r#"        # lockrun's own part (src/generate/completion.rs): after a
        # subcommand, its arguments; after a lock file, a command line of
        # its own, completed as if typed alone.
        case $line[1] in
            ({subcommands}) ;;
            (*)
                if (( {string} )); then
                    _message 'nothing more: -c gave the command'
                    return
                fi
                if (( {fd} )); then
                    # --fd N: no lock file; the command came first.
                    words=($line[1] "${{words[@]}}")
                    (( CURRENT += 1 ))
                elif [[ $words[1] == -- ]] && (( CURRENT > 1 )); then
                    # lockrun LOCKFILE -- COMMAND
                    shift words
                    (( CURRENT -= 1 ))
                fi
                _normal
                return
                ;;
        esac
        words=($line[1] "${{words[@]}}")
        (( CURRENT += 1 ))
        curcontext="${{curcontext%:*:*}}:lockrun-command-$line[1]:"
        case $line[1] in
"#,
        subcommands = opts.subcommands.join("|"),
        string = any(&opts.command_string),
        fd = any(&opts.fd),
    )
}

fn zsh_target(opts: &RunOptions) -> String {
    let fd = opts
        .fd
        .iter()
        .map(|n| format!("${{+opt_args[{n}]}}"))
        .collect::<Vec<_>>()
        .join(" || ");
    format!(
        r#"
# The first word that is not an option: with --fd the command, else a lock
# file, or first on the line a subcommand.
(( $+functions[_lockrun__target] )) ||
_lockrun__target() {{
    if (( {fd} )); then
        _command_names -e
    elif (( CURRENT == 2 )); then
        _alternative 'files:lock file:_files' 'commands:subcommand:_lockrun_commands'
    else
        _files
    fi
}}
"#
    )
}
