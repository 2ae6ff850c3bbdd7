#!/usr/bin/env bash
# The manual pages (docs/man/*.scd) against the code they describe: each
# check compares two lists of names and fails naming what one has and the
# other lacks.
#   - heapd.conf(5): the keys of daemon/config.c's tables (daemon_keys,
#     heap_keys), the keys the shipped heapd.conf sets or shows commented
#     out (";key = value"), and the keys heapd.conf.5.scd documents (its
#     "*key* = _type_" entries under "# THE [daemon] SECTION" and "# THE
#     [heap NAME] SECTIONS"), section by section; and every documented key
#     says its default;
#   - heapd(8), heapctl(1): the options of the getopt_long tables of
#     daemon/main.c and heapctl/heapctl.c, short and long ("*-c*, *--config*"
#     entries under "# OPTIONS"); heapctl's commands (its strcmp(cmd, ...)
#     list) against "# COMMANDS"; the counter table HEAPD_HEAP_COUNTERS
#     (proto/heapd_counters.h) against heapctl(1)'s "# COUNTERS";
#   - libheapd(3): every HEAPD_API function of heapd.h and
#     heapd_collections.h is named on the page, and every HEAPD_E* code of
#     the error table (proto/heapd_errors.h) has an entry "*NAME* (VALUE)"
#     under "# ERRORS", with its value.
# Reads sources only (HEAPD_SOURCE_ROOT, else this script's tree): it needs
# no build.  Prints one line per check and, last, a check-style
# summary line ("N%: Checks: N, Failures: N, Errors: 0") that scripts/test
# counts.
set -uo pipefail
export LC_ALL=C     # one collation for sort and comm

src=${HEAPD_SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
man=$src/docs/man
checks=0 failures=0 errors=0

# section_lines FILE HEADING-ERE: the lines of FILE's scdoc sections ("# ...")
# whose heading matches HEADING-ERE.  names_in FILE HEADING-ERE ERE: the
# first group of ERE (sed -E) on those lines, sorted and unique.
section_lines() {
    # the pattern through the environment: awk -v would process its
    # backslashes first, which gawk and mawk do differently
    HEAD="$2" awk 'BEGIN { head = ENVIRON["HEAD"] }
        /^# / { in_sec = ($0 ~ head); next } in_sec' "$1"
}
names_in() {
    section_lines "$1" "$2" | sed -nE "s/$3/\\1/p" | sort -u
}

# compare WHAT LEFT-NAME LEFT-LIST RIGHT-NAME RIGHT-LIST: one check, failed
# if the lists differ or are empty.
compare() {
    local what=$1 ln=$2 l=$3 rn=$4 r=$5 only_l only_r
    checks=$((checks + 1))
    if [ -z "$l" ] || [ -z "$r" ]; then
        echo "FAIL $what: no names found in ${l:+$rn}${l:-$ln} (has its format changed?)"
        failures=$((failures + 1))
        return
    fi
    only_l=$(comm -23 <(echo "$l") <(echo "$r") | tr '\n' ' ')
    only_r=$(comm -13 <(echo "$l") <(echo "$r") | tr '\n' ' ')
    if [ -z "$only_l$only_r" ]; then
        echo "ok   $what: $(echo "$l" | wc -l) the same in $ln and $rn"
    else
        echo "FAIL $what:${only_l:+ in $ln but not in $rn: $only_l;}${only_r:+ in $rn but not in $ln: $only_r}"
        failures=$((failures + 1))
    fi
}

# ---- heapd.conf(5) ----

# config.c: the names of table TABLE ("daemon_keys" or "heap_keys")
table_keys() {
    awk -v t="$1" '
        index($0, "struct key " t "[") { on = 1; next }
        on && /^};/ { on = 0 }
        on' "$src/daemon/config.c" |
        sed -nE 's/^[[:space:]]*\{ *"([a-z_0-9]+)",.*/\1/p' | sort -u
}
# heapd.conf: keys set, or shown as ";key = value", in [daemon] or in the
# [heap ...] sections
conf_keys() {
    awk -v want="$1" '
        /^\[/ { sec = ($0 ~ /^\[daemon\]/) ? "daemon" : ($0 ~ /^\[heap[ \]]/) ? "heap" : "other"; next }
        sec == want' "$src/heapd.conf" |
        sed -nE 's/^;?([a-z_0-9]+)[[:space:]]*[=:].*/\1/p' | sort -u
}
scd_keys() {
    names_in "$man/heapd.conf.5.scd" "$1" '^\*([a-z_0-9]+)\* = .*'
}

daemon_table=$(table_keys daemon_keys)
heap_table=$(table_keys heap_keys)
compare "heapd.conf(5) [daemon] keys" daemon/config.c "$daemon_table" \
    docs/man/heapd.conf.5.scd "$(scd_keys '^# THE \[daemon\] SECTION')"
compare "heapd.conf(5) [heap NAME] keys" daemon/config.c "$heap_table" \
    docs/man/heapd.conf.5.scd "$(scd_keys '^# THE \[heap NAME\] SECTIONS')"
compare "heapd.conf [daemon] keys" daemon/config.c "$daemon_table" \
    heapd.conf "$(conf_keys daemon)"
compare "heapd.conf [heap NAME] keys" daemon/config.c "$heap_table" \
    heapd.conf "$(conf_keys heap)"

# every key entry of heapd.conf(5) ends with its "Default: ..." line
checks=$((checks + 1))
no_default=$(awk '
    /^\*[a-z_0-9]+\* = / { if (key != "" && !seen) print key; key = $1; seen = 0; next }
    /^# / { if (key != "" && !seen) print key; key = ""; next }
    /^\tDefault: / { seen = 1 }
    END { if (key != "" && !seen) print key }' "$man/heapd.conf.5.scd" |
    tr -d '*' | tr '\n' ' ')
if [ -z "$no_default" ]; then
    echo "ok   heapd.conf(5): every key says its default"
else
    echo "FAIL heapd.conf(5): no \"Default:\" line for: $no_default"
    failures=$((failures + 1))
fi

# ---- heapd(8), heapctl(1): options and commands ----

# FILE's getopt_long table as "c:config" pairs
source_options() {
    awk 'index($0, "struct option opts[] = {") { on = 1; next }
         on && /};/ { on = 0 }
         on' "$1" |
        sed -nE "s/^[[:space:]]*\{\"([a-z-]+)\", *[a-z_]+, *NULL, *'(.)'\},.*/\2:\1/p" |
        sort -u
}
man_options() {
    section_lines "$1" '^# OPTIONS' |
        sed -nE 's/^\*-(.)\*, \*--([a-z-]+)\*.*/\1:\2/p' | sort -u
}
compare "heapd(8) options" daemon/main.c "$(source_options "$src/daemon/main.c")" \
    docs/man/heapd.8.scd "$(man_options "$man/heapd.8.scd")"
compare "heapctl(1) options" heapctl/heapctl.c \
    "$(source_options "$src/heapctl/heapctl.c")" \
    docs/man/heapctl.1.scd "$(man_options "$man/heapctl.1.scd")"
compare "heapctl(1) commands" heapctl/heapctl.c \
    "$(grep -oE 'strcmp\(cmd, "[a-z-]+"\)' "$src/heapctl/heapctl.c" |
        sed -E 's/.*"(.*)".*/\1/' | sort -u)" \
    docs/man/heapctl.1.scd "$(names_in "$man/heapctl.1.scd" '^# COMMANDS' '^\*([a-z-]+)\*( _[A-Z]+_)*$')"
compare "heapctl(1) counters" proto/heapd_counters.h \
    "$(sed -nE 's/^[[:space:]]*X\(([a-z_0-9]+), .*/\1/p' "$src/proto/heapd_counters.h" | sort -u)" \
    docs/man/heapctl.1.scd "$(names_in "$man/heapctl.1.scd" '^# COUNTERS' '^\*([a-z_0-9]+)\*$')"

# ---- libheapd(3) ----

api=$(cat "$src/client/heapd.h" "$src/client/collections/heapd_collections.h" |
    tr '\n' ' ' | grep -oE 'HEAPD_API [^;(]*\(' |
    sed -nE 's/.*[ *](heapd_[a-z_0-9]+) *\($/\1/p' | sort -u)
compare "libheapd(3) functions" "heapd.h, heapd_collections.h" "$api" \
    docs/man/libheapd.3.scd \
    "$(grep -oE 'heapd_[a-z_0-9]+' "$man/libheapd.3.scd" | sort -u |
        comm -12 - <(echo "$api"))"
compare "libheapd(3) error codes and values" proto/heapd_errors.h \
    "$(sed -nE 's/^[[:space:]]*X\((HEAPD_E[A-Z]+), (-[0-9]+), .*/\1 \2/p' "$src/proto/heapd_errors.h" | sort -u)" \
    docs/man/libheapd.3.scd \
    "$(section_lines "$man/libheapd.3.scd" '^# ERRORS' |
        sed -nE 's/^\*(HEAPD_E[A-Z]+)\* \((-[0-9]+)\)$/\1 \2/p' | sort -u)"

echo "$(((checks - failures) * 100 / checks))%: Checks: $checks, Failures: $failures, Errors: $errors"
[ "$failures" -eq 0 ]
