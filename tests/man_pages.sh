#!/usr/bin/env bash
# The manual pages as built (docs/man/meson.build): for each page given,
#   - mandoc -Tlint -Wwarning reports nothing (no warning, error or worse);
#   - man --warnings -l renders it with status 0 and nothing on standard
#     error (groff's warnings included), into text that names the page;
#   - no @NAME@ placeholder was left unfilled.
# Usage: man_pages.sh PAGE...  Prints one line per check and, last, a
# check-style summary line ("N%: Checks: N, Failures: N, Errors: N") that
# scripts/test counts.  A missing mandoc or man is an error, not a pass:
# scripts/lib.sh installs them.
set -uo pipefail

checks=0 failures=0 errors=0
work=$(mktemp -d "${TMPDIR:-/tmp}/heapd-man.XXXXXX")
trap 'rm -rf "$work"' EXIT
export LC_ALL=C.UTF-8 MANPAGER=cat PAGER=cat MANWIDTH=80

fail() { echo "FAIL $*"; failures=$((failures + 1)); }

[ $# -gt 0 ] || { echo "usage: man_pages.sh PAGE..." >&2; exit 2; }
for tool in mandoc:mandoc man:man-db; do
    if ! command -v "${tool%:*}" >/dev/null; then
        echo "ERROR ${tool%:*} is not installed (apt-get install ${tool#*:}; scripts/lib.sh lists it)"
        errors=$((errors + 1))
    fi
done

for page in "$@"; do
    name=$(basename "$page")
    if [ ! -s "$page" ]; then
        checks=$((checks + 1))
        fail "$name: not built ($page)"
        continue
    fi

    if command -v mandoc >/dev/null; then
        checks=$((checks + 1))
        if mandoc -Tlint -Wwarning "$page" >"$work/lint" 2>&1; then
            echo "ok   $name: mandoc -Tlint -Wwarning is silent"
        else
            fail "$name: mandoc -Tlint -Wwarning:"
            sed 's/^/       /' "$work/lint"
        fi
    fi

    if command -v man >/dev/null; then
        checks=$((checks + 1))
        title=${name%.*}   # heapd.conf.5 -> heapd.conf
        if man --warnings -l "$page" >"$work/out" 2>"$work/err" &&
            [ ! -s "$work/err" ] && grep -q "^NAME" "$work/out" &&
            grep -qF "$title" "$work/out"; then
            echo "ok   $name: man -l renders $(wc -l <"$work/out") lines, no warning"
        else
            fail "$name: man --warnings -l:"
            sed 's/^/       /' "$work/err"
            [ -s "$work/out" ] || echo "       (no output)"
        fi
    fi

    checks=$((checks + 1))
    if left=$(grep -oE '@[A-Z_]+@' "$page" | sort -u | tr '\n' ' ') &&
        [ -n "$left" ]; then
        fail "$name: placeholders not filled in: $left"
    else
        echo "ok   $name: every @NAME@ placeholder filled in"
    fi
done

total=$((checks + errors))
echo "$(((total - failures - errors) * 100 / total))%: Checks: $total, Failures: $failures, Errors: $errors"
[ "$failures" -eq 0 ] && [ "$errors" -eq 0 ]
