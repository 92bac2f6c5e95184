#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""docgen.py - the man pages and shell completions of an installed kosa8, written from the
built programs' own help (so they say what the binaries do, never what they once did).

  docgen.py BIN OUT     BIN: the folder holding kosa8 and kosa8d; writes below OUT:
                          share/man/man1/kosa8.1, share/man/man8/kosa8d.8,
                          share/bash-completion/completions/kosa8,
                          share/zsh/site-functions/_kosa8

The commands are found the way a user finds them: `kosa8 help`, `kosa8 help WORD` for each
first word it lists (a group when the answer is "kosa8 WORD - ..."), the group's
"Commands:" list, and each command's --help, whose "Options:" lines give its flags.
A file is rewritten only when its bytes change (make's timestamps stay meaningful)."""
import os
import re
import subprocess
import sys


def helptext(kosa8, *args):
    p = subprocess.run([kosa8] + list(args), capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C"})
    if p.returncode != 0:
        raise SystemExit("docgen: %s %s failed (%d): %s" % (kosa8, " ".join(args),
                                                           p.returncode, p.stderr))
    return p.stdout


def commands(kosa8):
    """[(words, help text)] for every command, groups first in the order help lists them,
    and {group: [verbs]}."""
    top = helptext(kosa8, "help")
    firsts = []
    for line in top.splitlines():
        m = re.match(r"^  ([a-z][a-z-]*)\b", line)
        if m and m.group(1) not in firsts and m.group(1) != "help":
            firsts.append(m.group(1))
    cmds, groups = [], {}
    for w in firsts:
        h = helptext(kosa8, "help", w)
        if h.startswith("kosa8 %s - " % w):
            verbs = re.findall(r"^  ([a-z][a-z-]*)  ", h.split("Commands:", 1)[1], re.M)
            groups[w] = verbs
            for v in verbs:
                cmds.append(([w, v], helptext(kosa8, w, v, "--help")))
        else:
            cmds.append(([w], h))
    return top, cmds, groups


def flags(text):
    """The long and short flags a command's help lists under Options:."""
    out = []
    if "Options:" not in text:
        return out
    for line in text.split("Options:", 1)[1].splitlines():
        if line and not line.startswith(" "):
            break
        m = re.match(r"^  (-[a-zA-Z]), (--[a-z][a-z-]*)|^  (--[a-z][a-z-]*)", line)
        if m:
            out += [f for f in m.groups() if f and f not in out]
    return out


def roff(text):
    """Help text as a man page's literal block: backslashes and leading dots escaped."""
    lines = []
    for line in text.rstrip("\n").splitlines():
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return ".nf\n" + "\n".join(lines) + "\n.fi\n"


def man_kosa8(version, top, cmds):
    out = ['.TH KOSA8 1 "" "kosa8 %s" "kosa8 manual"' % version,
           ".SH NAME", "kosa8 \\- run untrusted code in sealed, rewindable virtual machines",
           ".SH SYNOPSIS", ".B kosa8", "[\\-\\-home DIR] COMMAND [ARGS...]",
           ".SH DESCRIPTION", roff(top), ".SH COMMANDS"]
    for words, text in cmds:
        out += [".SS kosa8 %s" % " ".join(words), roff(text)]
    out += [".SH FILES",
            ".TP", ".I ~/.kosa8",
            "a user's own kosa8 state, when it exists",
            ".TP", ".I /var/lib/kosa8",
            "the system service's state and sockets (kosa8d.sock, docker.sock), used when "
            "~/.kosa8 does not exist; root and the members of the group kosa8 may use it",
            ".SH ENVIRONMENT",
            ".TP", ".B KOSA8_HOME", "the state folder (as \\-\\-home)",
            ".TP", ".B KOSA8D", "the daemon program for daemon start",
            ".SH SEE ALSO", "kosa8d(8); the docs in /usr/share/doc/kosa8 or the install's "
            "share/doc/kosa8"]
    return "\n".join(out) + "\n"


def man_kosa8d(version, text):
    return "\n".join([
        '.TH KOSA8D 8 "" "kosa8 %s" "kosa8 manual"' % version,
        ".SH NAME", "kosa8d \\- the kosa8 daemon: sandboxes, images and the audit log",
        ".SH SYNOPSIS", ".B kosa8d", "[OPTIONS]",
        ".SH DESCRIPTION", roff(text),
        ".SH SERVICE",
        "The unit kosa8.service runs kosa8d \\-\\-home /var/lib/kosa8 \\-\\-socket-group "
        "kosa8 as root (Type=notify). Members of the group kosa8 may use it: that is as "
        "good as root for sandboxes, as the docker group is.",
        ".SH SEE ALSO", "kosa8(1)"]) + "\n"


def completion_tables(groups, cmds):
    """What both shells complete: the words of the first position, then `case` arms (the
    pattern, the words) for the second position (a group's verbs, a lone command's flags)
    and for later ones (a command's flags), the patterns valid in sh and zsh alike."""
    singles = [w[0] for w, _ in cmds if len(w) == 1]
    first = list(groups) + singles + ["help", "--home", "--help"]
    second = [(g, verbs) for g, verbs in groups.items()]
    second += [(w[0], flags(text) + ["--help"]) for w, text in cmds if len(w) == 1]
    second.append(("help", list(groups) + singles))
    later = [('"%s"' % " ".join(w) if len(w) == 2 else '"%s "*' % w[0], flags(text) + ["--help"])
             for w, text in cmds]
    return first, second, later


def case_arms(arms, fmt):
    return [fmt % (pat, " ".join(words)) for pat, words in arms]


def bash_completion(groups, cmds):
    first, second, later = completion_tables(groups, cmds)
    arm = '        %s) words="%s" ;;'
    return "\n".join(
        ["# bash completion for kosa8 (written by scripts/docgen.py from kosa8's help)",
         "_kosa8() {",
         "    local cur=${COMP_WORDS[COMP_CWORD]} w1= w2= i n=0",
         "    for ((i = 1; i < COMP_CWORD; i++)); do",
         "        case ${COMP_WORDS[i]} in",
         "        --home) ((i++)) ;;",
         "        -*) ;;",
         "        *) ((n++)); [ $n = 1 ] && w1=${COMP_WORDS[i]}; [ $n = 2 ] && w2=${COMP_WORDS[i]} ;;",
         "        esac",
         "    done",
         "    local words",
         "    if [ $n = 0 ]; then",
         '        words="%s"' % " ".join(first),
         "    elif [ $n = 1 ]; then",
         "        case $w1 in"] + case_arms(second, arm) +
        ["        esac",
         "    else",
         '        case "$w1 $w2" in'] + case_arms(later, arm) +
        ["        esac",
         "    fi",
         "    # sandbox names where a command takes one",
         '    case "$cur/$n/$w1" in',
         "    -*) ;;",
         "    */1/rewind|*/[2-9]/sandbox|*/[2-9]/checkpoint|*/[2-9]/rewind)",
         "        words=\"$words $(kosa8 sandbox ls 2>/dev/null | awk 'NR > 1 { print $1 }')\" ;;",
         "    esac",
         '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
         "}",
         "complete -o default -F _kosa8 kosa8", ""])


def zsh_completion(groups, cmds):
    first, second, later = completion_tables(groups, cmds)
    arm = "        %s) cand=(%s) ;;"
    return "\n".join(
        ["#compdef kosa8",
         "# zsh completion for kosa8 (written by scripts/docgen.py from kosa8's help)",
         "_kosa8() {",
         "    local -a args cand",
         "    local w",
         "    for w in ${words[2,CURRENT-1]}; do",
         "        [[ $w == -* ]] || args+=($w)",
         "    done",
         "    if (( ${#args} == 0 )); then",
         "        cand=(%s)" % " ".join(first),
         "    elif (( ${#args} == 1 )); then",
         "        case ${args[1]} in"] + case_arms(second, arm) +
        ["        esac",
         "    else",
         '        case "${args[1]} ${args[2]}" in'] + case_arms(later, arm) +
        ["        esac",
         "        [[ ${args[1]} == (sandbox|checkpoint|rewind) ]] && "
         "cand+=(${(f)\"$(kosa8 sandbox ls 2>/dev/null | awk 'NR > 1 { print $1 }')\"})",
         "    fi",
         "    compadd -- $cand",
         "    _files",
         "}",
         '_kosa8 "$@"', ""])


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    tmp = "%s.tmp%d" % (path, os.getpid())      # two builds at once each write their own
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    bindir, out = sys.argv[1], sys.argv[2]
    kosa8, kosa8d = os.path.join(bindir, "kosa8"), os.path.join(bindir, "kosa8d")
    version = helptext(kosa8, "version").split()[1]
    top, cmds, groups = commands(kosa8)
    write(os.path.join(out, "share/man/man1/kosa8.1"), man_kosa8(version, top, cmds))
    write(os.path.join(out, "share/man/man8/kosa8d.8"), man_kosa8d(version,
                                                                  helptext(kosa8d, "--help")))
    write(os.path.join(out, "share/bash-completion/completions/kosa8"),
          bash_completion(groups, cmds))
    write(os.path.join(out, "share/zsh/site-functions/_kosa8"), zsh_completion(groups, cmds))


if __name__ == "__main__":
    main()
