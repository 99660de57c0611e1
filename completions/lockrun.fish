# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lockrun_global_optspecs
    string join \n generate= x/exclusive s/shared u/unlock fcntl start= length= fd= n/nonblock w/timeout= poll= E/conflict-exit-code= c/command= o/close F/no-fork no-record forward= q/quiet v/verbose max-time= kill-grace= slots= also= skip-if-succeeded-within= h/help V/version
end

function __fish_lockrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null
    or return
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
complete -c lockrun -n "__fish_lockrun_needs_command" -l start -d 'Lock bytes from OFFSET on (implies --fcntl) [default: 0]' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l length -d 'Lock N bytes (implies --fcntl); 0 is to the end of the file [default: 0]' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l fd -d 'Lock the inherited descriptor FD, then run COMMAND' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -s w -l timeout -l wait -d 'Wait at most DURATION (10s, 1m30s, 250ms, or seconds like 0.5; at most 100 years); 0 is -n [default: wait for ever]' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l poll -d 'Retry every INTERVAL (at least 1ms) instead of a blocking kernel wait' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -s E -l conflict-exit-code -d 'Exit status when the lock is not acquired [default: 75; 1 in fd mode and as flock]' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -s c -l command -d 'Run SHELL_COMMAND with "$SHELL" -c (default /bin/sh)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l forward -d 'Pass signals sent to lockrun on to the command (auto), or not (never: for a supervisor that signals every process itself, as systemd\'s KillMode=control-group) [default: auto]' -r -f -a "auto\t'Those the command cannot have received itself (docs/GUIDE.md, "Signals")'
never\t'None: the supervisor signals every process itself'"
complete -c lockrun -n "__fish_lockrun_needs_command" -l max-time -d 'Stop the command, and every process holding the lock through it, after DURATION (SIGTERM, then SIGKILL after --kill-grace); exit 124' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l kill-grace -d 'After --max-time (or a lost lock URL), SIGKILL this long after SIGTERM [default: 5s]' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l slots -d 'Let up to N commands hold the lock at once (1..1024), each in its own slot (LOCKRUN_SLOT)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l also -d 'Also hold LOCKFILE while the command runs (repeatable): all the locks or none, taken in one order (device, then inode) so that lockruns naming them in any order never deadlock' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l skip-if-succeeded-within -d 'Do not run the command if the last run under this lock exited 0 less than DURATION ago (decided under the lock, from its record; exit 0)' -r
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
complete -c lockrun -n "__fish_lockrun_needs_command" -a "holder" -d 'Who holds each lock now, or held it last (never takes the lock)'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "list" -d 'Every lock on this host, or the lock files given, one per line (never takes a lock)'
complete -c lockrun -n "__fish_lockrun_needs_command" -a "check" -d 'Is the lock held right now? (never takes the lock unless --probe)'
complete -c lockrun -n "__fish_lockrun_using_subcommand holder" -l json -d 'One JSON object per path, one per line'
complete -c lockrun -n "__fish_lockrun_using_subcommand holder" -s h -l help -d 'Print help'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l json -d 'One JSON object per lock, one per line (holder --json\'s schema)'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s h -l help -d 'Print help'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l token -d 'Lock URLs only (shown in builds that have them; see `command_for`)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l json -d 'Print the same JSON object as `holder --json`'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s q -l quiet -d 'Print nothing; answer with the exit status only'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l probe -d 'Where the kernel cannot tell, try the lock without waiting and release it at once (this touches the lock: a concurrent `lockrun -n` may fail while it is held)'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s h -l help -d 'Print help'
