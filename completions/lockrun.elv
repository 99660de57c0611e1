
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
            cand --ttl 'etcd lock URL only: lease TTL; the lock is lost if etcd cannot be reached this long [default: 10s]'
            cand --kill-grace 'etcd lock URL only: after a lost lock, SIGKILL the command this long after SIGTERM [default: 5s]'
            cand --cacert 'etcd lock URL only: verify the server''s certificate with this CA (TLS; default: the system''s roots)'
            cand --cert 'etcd lock URL only: client certificate (TLS), with --key'
            cand --key 'etcd lock URL only: the client certificate''s private key'
            cand --user 'etcd lock URL only: authenticate as NAME (password from LOCKRUN_ETCD_PASSWORD or --password-file)'
            cand --password-file 'etcd lock URL only: read the --user password from FILE (first line)'
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
