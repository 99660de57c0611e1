
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'lockrun' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'lockrun'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'lockrun' {
            [CompletionResult]::new('--generate', '--generate', [CompletionResultType]::ParameterName, 'Print the man page or a shell completion script of this build, then exit')
            [CompletionResult]::new('--start', '--start', [CompletionResultType]::ParameterName, 'Lock bytes from OFFSET on (implies --fcntl) [default: 0]')
            [CompletionResult]::new('--length', '--length', [CompletionResultType]::ParameterName, 'Lock N bytes (implies --fcntl); 0 is to the end of the file [default: 0]')
            [CompletionResult]::new('--fd', '--fd', [CompletionResultType]::ParameterName, 'Lock the inherited descriptor FD, then run COMMAND')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]')
            [CompletionResult]::new('--poll', '--poll', [CompletionResultType]::ParameterName, 'Retry every INTERVAL (at least 1ms) instead of a blocking kernel wait')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]')
            [CompletionResult]::new('-c', '-c', [CompletionResultType]::ParameterName, 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)')
            [CompletionResult]::new('--command', '--command', [CompletionResultType]::ParameterName, 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)')
            [CompletionResult]::new('--forward', '--forward', [CompletionResultType]::ParameterName, 'Pass signals sent to lockrun on to the command (auto), or not (never: for a supervisor that signals every process itself, as systemd''s KillMode=control-group) [default: auto]')
            [CompletionResult]::new('--max-time', '--max-time', [CompletionResultType]::ParameterName, 'Stop the command, and every process holding the lock through it, after DURATION (SIGTERM, then SIGKILL after --kill-grace); exit 124')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'After --max-time (or a lost lock URL), SIGKILL this long after SIGTERM [default: 5s]')
            [CompletionResult]::new('--slots', '--slots', [CompletionResultType]::ParameterName, 'Let up to N commands hold the lock at once (1..1024), each in its own slot (LOCKRUN_SLOT)')
            [CompletionResult]::new('--also', '--also', [CompletionResultType]::ParameterName, 'Also hold LOCKFILE while the command runs (repeatable): all the locks or none, taken in one order (device, then inode) so that lockruns naming them in any order never deadlock')
            [CompletionResult]::new('--skip-if-succeeded-within', '--skip-if-succeeded-within', [CompletionResultType]::ParameterName, 'Do not run the command if the last run under this lock exited 0 less than DURATION ago (decided under the lock, from its record; exit 0)')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'After each run, rewrite PATH (Prometheus textfile collector format) with this lock''s outcome counters and last run; several locks may share one PATH')
            [CompletionResult]::new('--log', '--log', [CompletionResultType]::ParameterName, 'Log every outcome (acquired, busy, timed out, skipped, finished, stopped, lost) to syslog (/dev/log) or the systemd journal; a missing socket is skipped')
            [CompletionResult]::new('--log-facility', '--log-facility', [CompletionResultType]::ParameterName, 'The syslog facility of --log''s events [default: user]')
            [CompletionResult]::new('-x', '-x', [CompletionResultType]::ParameterName, 'Exclusive lock (the default)')
            [CompletionResult]::new('-e', '-e', [CompletionResultType]::ParameterName, 'Exclusive lock (the default)')
            [CompletionResult]::new('--exclusive', '--exclusive', [CompletionResultType]::ParameterName, 'Exclusive lock (the default)')
            [CompletionResult]::new('-s', '-s', [CompletionResultType]::ParameterName, 'Shared lock: many holders at once, no exclusive holder')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Shared lock: many holders at once, no exclusive holder')
            [CompletionResult]::new('-u', '-u', [CompletionResultType]::ParameterName, 'Release the lock on FD (with a LOCKFILE and COMMAND, as flock(1): run it holding nothing)')
            [CompletionResult]::new('--unlock', '--unlock', [CompletionResultType]::ParameterName, 'Release the lock on FD (with a LOCKFILE and COMMAND, as flock(1): run it holding nothing)')
            [CompletionResult]::new('--fcntl', '--fcntl', [CompletionResultType]::ParameterName, 'Take an open-file-description lock (fcntl F_OFD_SETLK) instead of flock(2)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held')
            [CompletionResult]::new('--nonblock', '--nonblock', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held')
            [CompletionResult]::new('--nb', '--nb', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held')
            [CompletionResult]::new('--nonblocking', '--nonblocking', [CompletionResultType]::ParameterName, 'Fail at once if the lock is held')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Do not let the command inherit the lock (it lives only as long as lockrun)')
            [CompletionResult]::new('--close', '--close', [CompletionResultType]::ParameterName, 'Do not let the command inherit the lock (it lives only as long as lockrun)')
            [CompletionResult]::new('-F', '-F ', [CompletionResultType]::ParameterName, 'Exec the command in place of lockrun; it keeps the lock descriptor')
            [CompletionResult]::new('--no-fork', '--no-fork', [CompletionResultType]::ParameterName, 'Exec the command in place of lockrun; it keeps the lock descriptor')
            [CompletionResult]::new('--no-record', '--no-record', [CompletionResultType]::ParameterName, 'Do not write the holder record into the lock file')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing when the lock is busy or the wait times out')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing when the lock is busy or the wait times out')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say who holds the lock while waiting, and how long acquiring took')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say who holds the lock while waiting, and how long acquiring took')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('holder', 'holder', [CompletionResultType]::ParameterValue, 'Who holds each lock now, or held it last (never takes the lock)')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'Every lock on this host, or the lock files given, one per line (never takes a lock)')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Is the lock held right now? (never takes the lock unless --probe)')
            break
        }
        'lockrun;holder' {
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per path, one per line')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
        'lockrun;list' {
            [CompletionResult]::new('--color', '--color', [CompletionResultType]::ParameterName, 'Colour the state: always, auto (on a terminal, unless NO_COLOR is set) or never')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'One JSON object per lock, one per line (holder --json''s schema, plus `waiters`)')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'In a directory, also the files that are free and hold no record')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;check' {
            [CompletionResult]::new('--token', '--token', [CompletionResultType]::ParameterName, 'Lock URLs only: is T the fencing token of a current holder?')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print the same JSON object as `holder --json`')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing; answer with the exit status only')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing; answer with the exit status only')
            [CompletionResult]::new('--probe', '--probe', [CompletionResultType]::ParameterName, 'Where the kernel cannot tell, try the lock without waiting and release it at once (this touches the lock: a concurrent `lockrun -n` may fail while it is held)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
