# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lockrun_global_optspecs
    string join \n generate= x/exclusive s/shared u/unlock fcntl start= length= fd= n/nonblock w/timeout= poll= E/conflict-exit-code= c/command= o/close F/no-fork no-record forward= q/quiet v/verbose max-time= kill-grace= slots= also= skip-if-succeeded-within= metrics-file= log= log-facility= h/help V/version
end

function __fish_lockrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    # An option still waiting for its value: still lockrun's own position
    # (lockrun's change to clap_complete's function, src/generate/completion.rs).
    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null
    or return 0
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lockrun_using_subcommand
    set -l cmd (__fish_lockrun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lockrun -n "__fish_lockrun_needs_command" -l generate -d 'Print the man page or a shell completion script of this build, then exit' -r -f -a "man\t''
man-holder\t''
man-check\t''
complete-bash\t''
complete-zsh\t''
complete-fish\t''
complete-elvish\t''
complete-powershell\t''"
complete -c lockrun -n "__fish_lockrun_needs_command" -l start -d 'Lock bytes from OFFSET on (implies --fcntl) [default: 0]' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l length -d 'Lock N bytes (implies --fcntl); 0 is to the end of the file [default: 0]' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l fd -d 'Lock the inherited descriptor FD, then run COMMAND' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -s w -l timeout -l wait -d 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l poll -d 'Retry every INTERVAL (at least 1ms) instead of a blocking kernel wait' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -s E -l conflict-exit-code -d 'Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -s c -l command -d 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)' -r -f -a "(__fish_complete_command)"
complete -c lockrun -n "__fish_lockrun_needs_command" -l forward -d 'Pass signals sent to lockrun on to the command (auto), or not (never: for a supervisor that signals every process itself, as systemd\'s KillMode=control-group) [default: auto]' -r -f -a "auto\t'Those the command cannot have received itself (docs/GUIDE.md, "Signals")'
never\t'None: the supervisor signals every process itself'"
complete -c lockrun -n "__fish_lockrun_needs_command" -l max-time -d 'Stop the command, and every process holding the lock through it, after DURATION (SIGTERM, then SIGKILL after --kill-grace); exit 124' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l kill-grace -d 'After --max-time (or a lost lock URL), SIGKILL this long after SIGTERM [default: 5s]' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l slots -d 'Let up to N commands hold the lock at once (1..1024), each in its own slot (LOCKRUN_SLOT)' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l also -d 'Also hold LOCKFILE while the command runs (repeatable): all the locks or none, taken in one order (device, then inode) so that lockruns naming them in any order never deadlock' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l skip-if-succeeded-within -d 'Do not run the command if the last run under this lock exited 0 less than DURATION ago (decided under the lock, from its record; exit 0)' -r -f
complete -c lockrun -n "__fish_lockrun_needs_command" -l metrics-file -d 'After each run, rewrite PATH (Prometheus textfile collector format) with this lock\'s outcome counters and last run; several locks may share one PATH' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l log -d 'Log every outcome (acquired, busy, timed out, skipped, finished, stopped, lost) to syslog (/dev/log) or the systemd journal; a missing socket is skipped' -r -f -a "syslog\t'RFC 5424 lines on /dev/log (tag lockrun)'
journal\t'The systemd journal\'s native protocol (fields LOCKRUN_EVENT, LOCKRUN_LOCK, ...)'"
complete -c lockrun -n "__fish_lockrun_needs_command" -l log-facility -d 'The syslog facility of --log\'s events [default: user]' -r -f -a "kern\t''
user\t''
mail\t''
daemon\t''
auth\t''
syslog\t''
lpr\t''
news\t''
uucp\t''
cron\t''
authpriv\t''
ftp\t''
local0\t''
local1\t''
local2\t''
local3\t''
local4\t''
local5\t''
local6\t''
local7\t''"
complete -c lockrun -n "__fish_lockrun_needs_command" -s x -s e -l exclusive -d 'Exclusive lock (the default)'
complete -c lockrun -n "__fish_lockrun_needs_command" -s s -l shared -d 'Shared lock: many holders at once, no exclusive holder'
complete -c lockrun -n "__fish_lockrun_needs_command" -s u -l unlock -d 'Release the lock on FD (with a LOCKFILE and COMMAND, as flock(1): run it holding nothing)'
complete -c lockrun -n "__fish_lockrun_needs_command" -l fcntl -d 'Take an open-file-description lock (fcntl F_OFD_SETLK) instead of flock(2)'
complete -c lockrun -n "__fish_lockrun_needs_command" -s n -l nonblock -l nb -l nonblocking -d 'Fail at once if the lock is held'
complete -c lockrun -n "__fish_lockrun_needs_command" -s o -l close -d 'Do not let the command inherit the lock (it lives only as long as lockrun)'
complete -c lockrun -n "__fish_lockrun_needs_command" -s F -l no-fork -d 'Exec the command in place of lockrun; it keeps the lock descriptor'
complete -c lockrun -n "__fish_lockrun_needs_command" -l no-record -d 'Do not write the holder record into the lock file'
complete -c lockrun -n "__fish_lockrun_needs_command" -s q -l quiet -d 'Print nothing when the lock is busy or the wait times out'
complete -c lockrun -n "__fish_lockrun_needs_command" -s v -l verbose -d 'Say who holds the lock while waiting, and how long acquiring took'
complete -c lockrun -n "__fish_lockrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_needs_command" -s V -l version -d 'Print version'
complete -c lockrun -n "__fish_lockrun_first_word" -a "holder" -d 'Who holds each lock now, or held it last (never takes the lock)'
complete -c lockrun -n "__fish_lockrun_first_word" -a "list" -d 'Every lock on this host, or the lock files given, one per line (never takes a lock)'
complete -c lockrun -n "__fish_lockrun_first_word" -a "check" -d 'Is the lock held right now? (never takes the lock unless --probe)'
complete -c lockrun -n "__fish_lockrun_using_subcommand holder" -l json -d 'One JSON object per path, one per line'
complete -c lockrun -n "__fish_lockrun_using_subcommand holder" -s h -l help -d 'Print help'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l color -d 'Colour the state: always, auto (on a terminal, unless NO_COLOR is set) or never' -r -f -a "always\t'Always, NO_COLOR or not: asked for by name'
auto\t'On a terminal, unless NO_COLOR is set'
never\t'Never'"
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l json -d 'One JSON object per lock, one per line (holder --json\'s schema, plus `waiters`)'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l all -d 'In a directory, also the files that are free and hold no record'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l token -d 'Lock URLs only: is T the fencing token of a current holder?' -r -f
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l json -d 'Print the same JSON object as `holder --json`'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s q -l quiet -d 'Print nothing; answer with the exit status only'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l probe -d 'Where the kernel cannot tell, try the lock without waiting and release it at once (this touches the lock: a concurrent `lockrun -n` may fail while it is held)'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s h -l help -d 'Print help'

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
            for name in generate exclusive shared unlock fcntl start length fd nonblock nb nonblocking timeout wait poll conflict-exit-code command close no-fork no-record forward quiet verbose max-time kill-grace slots also skip-if-succeeded-within metrics-file log log-facility help version
                if test "$name" = "$long"
                    set matches $name
                    break
                end
                string match -q -- "$long*" $name; and set -a matches $name
            end
            test (count $matches) -eq 1; and contains -- $matches[1] generate start length fd timeout wait poll conflict-exit-code command forward max-time kill-grace slots also skip-if-succeeded-within metrics-file log log-facility
        case '-?*'
            set -l rest (string sub -s 2 -- $word)
            while test -n "$rest"
                if string match -q -- "*"(string sub -l 1 -- $rest)"*" "wEc"
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
        if test $i -eq 1; and contains -- $word holder list check
            return 1
        end
        switch $word
            case --
                set target (math $i + 1)
                break
            case '-*'
                contains -- $word --command -c; and set string 1
                contains -- $word --fd; and set fd 1
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
    contains -- $long generate exclusive shared unlock fcntl start length fd nonblock nb nonblocking timeout wait poll conflict-exit-code command close no-fork no-record forward quiet verbose max-time kill-grace slots also skip-if-succeeded-within metrics-file log log-facility help version; and return 1
    __fish_lockrun_takes_value $word; or return 1
    for name in also metrics-file
        string match -q -- "$long*" $name; and return 1
    end
    return 0
end

complete -c lockrun -n __fish_lockrun_abbreviated_value -f

complete -c lockrun -n __fish_lockrun_command_words -f -a '(__fish_complete_subcommand --commandline (__fish_lockrun_command_words) (commandline -ct))'
