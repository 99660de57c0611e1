
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
            cand -w 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5); 0 is -n [default: wait for ever]'
            cand --timeout 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5); 0 is -n [default: wait for ever]'
            cand --wait 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5); 0 is -n [default: wait for ever]'
            cand --poll 'Retry every INTERVAL instead of a blocking kernel wait'
            cand -E 'Exit status when the lock is not acquired'
            cand --conflict-exit-code 'Exit status when the lock is not acquired'
            cand -c 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)'
            cand --command 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)'
            cand --max-time 'Stop the command, and every process holding the lock through it, after DURATION (SIGTERM, then SIGKILL after --kill-grace); exit 124'
            cand --ttl 'etcd lock URL only: lease TTL; the lock is lost if etcd cannot be reached this long [default: 10s]'
            cand --kill-grace 'After --max-time (or a lost etcd lock), SIGKILL this long after SIGTERM [default: 5s]'
            cand --slots 'Let up to N commands hold the lock at once (1..1024), each in its own slot (LOCKRUN_SLOT)'
            cand -x 'Exclusive lock (the default)'
            cand --exclusive 'Exclusive lock (the default)'
            cand -s 'Shared lock: many holders at once, no exclusive holder'
            cand --shared 'Shared lock: many holders at once, no exclusive holder'
            cand -n 'Fail at once if the lock is held'
            cand --nonblock 'Fail at once if the lock is held'
            cand -o 'Do not let the command inherit the lock (it lives only as long as lockrun)'
            cand --close 'Do not let the command inherit the lock (it lives only as long as lockrun)'
            cand -F 'Exec the command in place of lockrun; it keeps the lock descriptor'
            cand --no-fork 'Exec the command in place of lockrun; it keeps the lock descriptor'
            cand --no-record 'Do not write the holder record into the lock file'
            cand -u 'FD form only: release the lock on FD'
            cand --unlock 'FD form only: release the lock on FD'
            cand -q 'Print nothing when the lock is busy or the wait times out'
            cand --quiet 'Print nothing when the lock is busy or the wait times out'
            cand -v 'Say who holds the lock while waiting, and how long acquiring took'
            cand --verbose 'Say who holds the lock while waiting, and how long acquiring took'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand holder 'Who holds each lock now, or held it last (never takes the lock)'
            cand check 'Is the lock held right now? (never takes the lock unless --probe)'
        }
        &'lockrun;holder'= {
            cand --json 'One JSON object per path, one per line'
            cand -h 'Print help'
            cand --help 'Print help'
        }
        &'lockrun;check'= {
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
