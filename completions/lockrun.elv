
use builtin;
use str;

set edit:completion:arg-completer[lockrun] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'lockrun'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'lockrun'= {
            cand --generate 'Print the man page or a shell completion script of this build, then exit'
            cand --start 'Lock bytes from OFFSET on (implies --fcntl) [default: 0]'
            cand --length 'Lock N bytes (implies --fcntl); 0 is to the end of the file [default: 0]'
            cand --fd 'Lock the inherited descriptor FD, then run COMMAND'
            cand -w 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]'
            cand --timeout 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]'
            cand --wait 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]'
            cand --poll 'Retry every INTERVAL (at least 1ms) instead of a blocking kernel wait'
            cand -E 'Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]'
            cand --conflict-exit-code 'Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]'
            cand -c 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)'
            cand --command 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)'
            cand --forward 'Pass signals sent to lockrun on to the command (auto), or not (never: for a supervisor that signals every process itself, as systemd''s KillMode=control-group) [default: auto]'
            cand --max-time 'Stop the command, and every process holding the lock through it, after DURATION (SIGTERM, then SIGKILL after --kill-grace); exit 124'
            cand --kill-grace 'After --max-time (or a lost lock URL), SIGKILL this long after SIGTERM [default: 5s]'
            cand --slots 'Let up to N commands hold the lock at once (1..1024), each in its own slot (LOCKRUN_SLOT)'
            cand --also 'Also hold LOCKFILE while the command runs (repeatable): all the locks or none, taken in one order (device, then inode) so that lockruns naming them in any order never deadlock'
            cand --skip-if-succeeded-within 'Do not run the command if the last run under this lock exited 0 less than DURATION ago (decided under the lock, from its record; exit 0)'
            cand --metrics-file 'After each run, rewrite PATH (Prometheus textfile collector format) with this lock''s outcome counters and last run; several locks may share one PATH'
            cand --log 'Log every outcome (acquired, busy, timed out, skipped, finished, stopped, lost) to syslog (/dev/log) or the systemd journal; a missing socket is skipped'
            cand --log-facility 'The syslog facility of --log''s events [default: user]'
            cand -x 'Exclusive lock (the default)'
            cand -e 'Exclusive lock (the default)'
            cand --exclusive 'Exclusive lock (the default)'
            cand -s 'Shared lock: many holders at once, no exclusive holder'
            cand --shared 'Shared lock: many holders at once, no exclusive holder'
            cand -u 'Release the lock on FD (with a LOCKFILE and COMMAND, as flock(1): run it holding nothing)'
            cand --unlock 'Release the lock on FD (with a LOCKFILE and COMMAND, as flock(1): run it holding nothing)'
            cand --fcntl 'Take an open-file-description lock (fcntl F_OFD_SETLK) instead of flock(2)'
            cand -n 'Fail at once if the lock is held'
            cand --nonblock 'Fail at once if the lock is held'
            cand --nb 'Fail at once if the lock is held'
            cand --nonblocking 'Fail at once if the lock is held'
            cand -o 'Do not let the command inherit the lock (it lives only as long as lockrun)'
            cand --close 'Do not let the command inherit the lock (it lives only as long as lockrun)'
            cand -F 'Exec the command in place of lockrun; it keeps the lock descriptor'
            cand --no-fork 'Exec the command in place of lockrun; it keeps the lock descriptor'
            cand --no-record 'Do not write the holder record into the lock file'
            cand -q 'Print nothing when the lock is busy or the wait times out'
            cand --quiet 'Print nothing when the lock is busy or the wait times out'
            cand -v 'Say who holds the lock while waiting, and how long acquiring took'
            cand --verbose 'Say who holds the lock while waiting, and how long acquiring took'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand holder 'Who holds each lock now, or held it last (never takes the lock)'
            cand list 'Every lock on this host, or the lock files given, one per line (never takes a lock)'
            cand check 'Is the lock held right now? (never takes the lock unless --probe)'
        }
        &'lockrun;holder'= {
            cand --json 'One JSON object per path, one per line'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lockrun;list'= {
            cand --color 'Colour the state: always, auto (on a terminal, unless NO_COLOR is set) or never'
            cand --json 'One JSON object per lock, one per line (holder --json''s schema, plus `waiters`)'
            cand --all 'In a directory, also the files that are free and hold no record'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;check'= {
            cand --token 'Lock URLs only: is T the fencing token of a current holder?'
            cand --json 'Print the same JSON object as `holder --json`'
            cand -q 'Print nothing; answer with the exit status only'
            cand --quiet 'Print nothing; answer with the exit status only'
            cand --probe 'Where the kernel cannot tell, try the lock without waiting and release it at once (this touches the lock: a concurrent `lockrun -n` may fail while it is held)'
            cand -h 'Print help'
            cand --help 'Print help'
        }
    ]
    $completions[$command]
}
