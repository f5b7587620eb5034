# shellcheck shell=bash
# Shared by scripts/test-rxe.sh, build-initramfs.sh and results.sh (sourced): the commands-file
# reader. Functions print errors to standard error and return 2 on bad input.
#
# A commands file has one command a line; `#` starts a comment line, blank lines are skipped:
#   NAME[@GUEST][&] COMMAND...
# NAME: letters, digits, `_`, `.`, `-` (unique within a guest); @GUEST: the guest that runs it, 1 (the
# default) or 2; a trailing `&`: start it in the background (a server) and go on with the next line.
# COMMAND: a busybox-sh command line run in the guest (see scripts/rxe/init for what it sees).

# rxe_parse_commands FILE GUESTS OUTDIR: checks FILE and writes OUTDIR/commands-N (N = 1..GUESTS),
# each line NAME <tab> BG(0|1) <tab> COMMAND, the form the guest's /init reads.
rxe_parse_commands() {
  local file=$1 guests=$2 outdir=$3 line n=0 spec cmd name guest bg g
  [ -r "$file" ] || { echo "commands file $file: cannot be read" >&2; return 2; }
  for ((g = 1; g <= guests; g++)); do : >"$outdir/commands-$g"; done
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line#"${line%%[![:space:]]*}"}
    [[ -z $line || $line == \#* ]] && continue
    spec=${line%%[[:space:]]*}
    cmd=${line#"$spec"}
    cmd=${cmd#"${cmd%%[![:space:]]*}"}
    bg=0
    if [[ $spec == *'&' ]]; then bg=1; spec=${spec%'&'}; fi
    guest=1
    if [[ $spec == *@* ]]; then guest=${spec##*@}; spec=${spec%@*}; fi
    name=$spec
    if [[ ! $name =~ ^[A-Za-z0-9_.-]+$ ]]; then
      echo "$file:$n: bad command name '$name' (letters, digits, _ . - only)" >&2
      return 2
    fi
    if [[ ! $guest =~ ^[12]$ ]]; then
      echo "$file:$n: $name: bad guest '@$guest' (1 or 2)" >&2
      return 2
    fi
    if ((guest > guests)); then
      echo "$file:$n: $name runs on guest $guest, but this run boots $guests guest(s)" >&2
      return 2
    fi
    if [ -z "$cmd" ]; then
      echo "$file:$n: $name: no command after the name" >&2
      return 2
    fi
    if [[ $cmd == *$'\t'* ]]; then
      echo "$file:$n: $name: tab in the command (use spaces)" >&2
      return 2
    fi
    if cut -f1 "$outdir/commands-$guest" | grep -qxF -- "$name"; then
      echo "$file:$n: $name: a second command of that name on guest $guest" >&2
      return 2
    fi
    printf '%s\t%s\t%s\n' "$name" "$bg" "$cmd" >>"$outdir/commands-$guest"
  done <"$file"
  local total=0
  for ((g = 1; g <= guests; g++)); do total=$((total + $(wc -l <"$outdir/commands-$g"))); done
  if ((total == 0)); then
    echo "commands file $file: no commands" >&2
    return 2
  fi
}
