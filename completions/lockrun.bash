_lockrun__clap() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="lockrun"
                ;;
            lockrun,check)
                cmd="lockrun__subcmd__check"
                ;;
            lockrun,holder)
                cmd="lockrun__subcmd__holder"
                ;;
            lockrun,list)
                cmd="lockrun__subcmd__list"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        lockrun)
            opts="-e -x -s -u -n -w -E -c -o -F -q -v -h -V --generate --exclusive --shared --unlock --fcntl --start --length --fd --nb --nonblocking --nonblock --wait --timeout --poll --conflict-exit-code --command --close --no-fork --no-record --forward --quiet --verbose --max-time --kill-grace --slots --also --skip-if-succeeded-within --metrics-file --log --log-facility --help --version holder list check"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --generate)
                    COMPREPLY=($(compgen -W "man man-holder man-check complete-bash complete-zsh complete-fish complete-elvish complete-powershell" -- "${cur}"))
                    return 0
                    ;;
                --start)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --length)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --fd)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --wait)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                -w)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --poll)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --conflict-exit-code)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                -E)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --command)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -c)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --forward)
                    COMPREPLY=($(compgen -W "auto never" -- "${cur}"))
                    return 0
                    ;;
                --max-time)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --kill-grace)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --slots)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --also)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --skip-if-succeeded-within)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                --metrics-file)
                    local oldifs
                    if [ -n "${IFS+x}" ]; then
                        oldifs="$IFS"
                    fi
                    IFS=$'\n'
                    COMPREPLY=($(compgen -f "${cur}"))
                    if [ -n "${oldifs+x}" ]; then
                        IFS="$oldifs"
                    fi
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o filenames
                    fi
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -W "syslog journal" -- "${cur}"))
                    return 0
                    ;;
                --log-facility)
                    COMPREPLY=($(compgen -W "kern user mail daemon auth syslog lpr news uucp cron authpriv ftp local0 local1 local2 local3 local4 local5 local6 local7" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        lockrun__subcmd__check)
            opts="-q -h --json --quiet --probe --token --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --token)
                    COMPREPLY=("${cur}")
                    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
                        compopt -o nospace
                    fi
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        lockrun__subcmd__holder)
            opts="-h --json --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        lockrun__subcmd__list)
            opts="-h --json --all --color --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --color)
                    COMPREPLY=($(compgen -W "always auto never" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}


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
            [[ " generate start length fd timeout wait poll conflict-exit-code command forward max-time kill-grace slots also skip-if-succeeded-within metrics-file log log-facility " == *" ${REPLY#--} "* ]]
            ;;
        -?*)
            local rest=${word#-}
            while [[ -n $rest ]]; do
                if [[ "wEc" == *"${rest:0:1}"* ]]; then
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
    for name in generate exclusive shared unlock fcntl start length fd nonblock nb nonblocking timeout wait poll conflict-exit-code command close no-fork no-record forward quiet verbose max-time kill-grace slots also skip-if-succeeded-within metrics-file log log-facility help version; do
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
        if ((i == 1)) && [[ " holder list check " == *" $word "* ]]; then
            # Its options (--json, -q) and their values are clap's;
            # everything else is a lock file.
            if [[ $cur == -* || " --color --token " == *" $prev "* ]]; then
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
                [[ " --command -c " == *" $word "* ]] && string=1
                [[ " --fd " == *" $word "* ]] && fd=1
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
        if [[ $cur != -* && " --command -c " == *" $prev "* ]]; then
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
                COMPREPLY+=($(compgen -W "holder list check" -- "$cur"))
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
