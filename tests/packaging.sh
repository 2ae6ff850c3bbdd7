#!/usr/bin/env bash
# What a package of this build holds, and whether a program can use it:
# installs the build (HEAPD_BUILD_ROOT) into a temporary DESTDIR with
# `meson install --destdir`, then, seeing nothing of the system's
# pkg-config files (PKG_CONFIG_LIBDIR and PKG_CONFIG_SYSROOT_DIR point at
# the DESTDIR only):
#   - `pkg-config --cflags --libs heapd` works without libuv's or
#     libprotobuf-c's .pc (no Requires.private), and --static adds them as
#     flags;
#   - a program including heapd.h and heapd_collections.h compiles with
#     those flags (-std=c11 -Wall -Wextra -Werror), links the installed
#     libheapd, and runs: heapd_connect to a socket nobody listens on
#     fails with HEAPD_ENODAEMON, named by heapd_strerror; with
#     -DHEAPD_NO_INLINE its heapd_write is a call of the function (Note
#     [Inline write fast path]);
#   - the same program, compiled with the flags of the build tree's
#     meson-uninstalled/heapd-uninstalled.pc, takes the source tree's
#     headers, links the build's libheapd and runs with it;
#   - libheapd.so's SONAME is libheapd.so.0, and it exports exactly the
#     HEAPD_API functions of its installed headers (no other global
#     function or data symbol but the linker's own);
#   - the binaries, headers, config, systemd units, docs and (with
#     --man: scdoc was found) man pages are where they belong, and every
#     Documentation= of heapd.service names something installed.
# Usage: packaging.sh [--man].  Prints one line per check and, last, a
# check-style summary line ("N%: Checks: N, Failures: N, Errors: 0") that
# scripts/test counts.  tests/meson.build runs it only in builds without
# sanitizers (an instrumented libheapd needs its runtime in the program).
set -uo pipefail

build=${HEAPD_BUILD_ROOT:?HEAPD_BUILD_ROOT: the build directory to install}
want_man=false
[ "${1:-}" = --man ] && want_man=true

checks=0 failures=0
work=$(mktemp -d "${TMPDIR:-/tmp}/heapd-pkg.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/dest

check() {  # check WHAT COMMAND...: one check, its output shown on failure
    local what=$1
    shift
    checks=$((checks + 1))
    if "$@" >"$work/out" 2>&1; then
        echo "ok   $what"
    else
        echo "FAIL $what"
        sed 's/^/       /' "$work/out" | head -40
        failures=$((failures + 1))
    fi
}
finish() {
    echo "$(((checks - failures) * 100 / checks))%: Checks: $checks, Failures: $failures, Errors: 0"
    [ "$failures" -eq 0 ]
    exit
}

# ---- install ----
check "meson install --destdir" \
    meson install -C "$build" --quiet --destdir "$dest"
[ "$failures" -eq 0 ] || finish

# the build's directories, as meson resolves them (relative to the prefix,
# or absolute)
eval "$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
for k in ("prefix", "bindir", "sbindir", "libdir", "includedir", "datadir",
          "mandir", "sysconfdir"):
    print("%s=%s" % (k, o[k]))')"
at() {  # at DIR: the DESTDIR path of an install directory option's value
    case $1 in
    /*) echo "$dest$1" ;;
    *) echo "$dest$prefix/$1" ;;
    esac
}
libdir_d=$(at "$libdir")
lib=$libdir_d/libheapd.so

# ---- pkg-config ----
export PKG_CONFIG_LIBDIR=$libdir_d/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
unset PKG_CONFIG_PATH
check "pkg-config --cflags --libs heapd, with no other .pc file to see" \
    pkg-config --cflags --libs heapd
check "heapd.pc has no Requires.private (libheapd's own deps are not the program's)" \
    bash -c '! pkg-config --print-requires-private heapd | grep .'
check "pkg-config --static --libs heapd lists libuv, libprotobuf-c and -pthread" \
    bash -c 'l=$(pkg-config --static --libs heapd) && echo "$l" &&
             [[ " $l " == *" -luv "* && " $l " == *" -lprotobuf-c "* &&
                " $l " == *" -pthread "* && " $l " == *" -lheapd "* ]]'

# ---- a client program ----
cat >"$work/client.c" <<'EOF'
#include <stdio.h>
#include <string.h>

#include <heapd.h>
#include <heapd_collections.h>

/* a store through heapd_write, compiled whichever way heapd.h makes it
 * (Note [Inline write fast path]); main does not call it */
void link_first(heapd_mutator *m, void **list, void *node);
void link_first(heapd_mutator *m, void **list, void *node)
{
    heapd_write(m, list, &list[0], node);
}

int main(int argc, char **argv)
{
    static char not_null;
    heapd_connect_opts o;
    heapd_client *c = (heapd_client *)(void *)&not_null;
    memset(&o, 0, sizeof o);
    o.socket_path = argc > 1 ? argv[1] : "/nonexistent/heapd.sock";
    o.client_name = "packaging-test";
    int rc = heapd_connect(&c, &o);
    /* on failure *out is NULL (heapd.h) */
    printf("%d %s%s\n", rc, heapd_strerror(rc), c ? " (out not NULL)" : "");
    /* and one call of heapd_collections.h, which needs no heap */
    return rc == HEAPD_ENODAEMON && !c &&
           heapd_hash_bytes("x", 1) == heapd_hash_bytes("x", 1) ? 0 : 1;
}
EOF
check "a client program compiles and links with \$(pkg-config --cflags --libs heapd)" \
    bash -c 'cc -std=c11 -Wall -Wextra -Werror -o "$0/client" "$0/client.c" \
                $(pkg-config --cflags --libs heapd)' "$work"
check "with -DHEAPD_NO_INLINE it compiles too, and its heapd_write is a call of the function" \
    bash -c 'cc -std=c11 -Wall -Wextra -Werror -DHEAPD_NO_INLINE -o "$0/client-noinline" \
                "$0/client.c" $(pkg-config --cflags --libs heapd) &&
             body=$(objdump -d "$0/client-noinline" | awk "/<link_first>:/,/^\$/") &&
             echo "$body" && grep -qE "(call|jmp).*<heapd_write@" <<<"$body" &&
             ! grep -q heapd_write_inline_ <<<"$body"' "$work"
check "with GCC its calls into libheapd go through the GOT, not a PLT stub (Note [Calls without the PLT])" \
    bash -c 'if cc -dM -E - </dev/null | grep -q __clang__; then
                 echo "cc is clang: it has no noplt"; exit 0; fi
             calls=$(objdump -d "$0/client" | grep -E "call.*<heapd_[a-z_]+@") || exit 1
             echo "$calls"
             ! grep -q "@plt>" <<<"$calls"' "$work"
check "it loads the installed libheapd" \
    bash -c 'LD_LIBRARY_PATH=$1 ldd "$0/client" | grep -F "libheapd.so.0 => $1/libheapd.so.0"' \
    "$work" "$libdir_d"
check "it runs: heapd_connect to a dead socket is HEAPD_ENODAEMON, named by heapd_strerror" \
    bash -c 'out=$(env -u HEAPD_SOCKET -u HEAPD_CHECK LD_LIBRARY_PATH=$1 \
                 "$0/client" "$0/nobody.sock") ; echo "$out";
             [ "$out" = "-1001 no heapd is listening on the socket" ]' \
    "$work" "$libdir_d"

# ---- the same program against the build tree, uninstalled ----
# meson writes meson-uninstalled/heapd-uninstalled.pc, which pkg-config
# prefers to heapd.pc in the same directory; its flags name the build's
# libheapd and the source directories of the public headers (README:
# "Building a client against a build tree").  Only that directory is
# searched, so nothing installed can stand in for the build tree.
unin=(env -u PKG_CONFIG_PATH -u PKG_CONFIG_SYSROOT_DIR
      PKG_CONFIG_LIBDIR="$build/meson-uninstalled")
check "pkg-config --cflags --libs heapd from the build tree: -L names the build's libheapd" \
    bash -c 'f=$("$@" pkg-config --cflags --libs heapd) && echo "$f" &&
             [[ " $f " == *" -L$0/client "* ]]' "$build" "${unin[@]}"
check "with those flags the program's headers are the source tree's heapd.h, heapd_counters.h, heapd_errors.h, heapd_object.h, heapd_collections.h" \
    bash -c 'src=$(cd "$1" && pwd -P)
             deps=$(cc -std=c11 -M "$0/client.c" $("${@:2}" pkg-config --cflags heapd) |
                    tr -d "\\\\" | tr " " "\n" | grep -E "/heapd(_counters|_errors|_object|_collections)?\.h$" |
                    xargs -r realpath) || exit 1
             echo "$deps"
             for h in heapd.h heapd_counters.h heapd_errors.h heapd_object.h heapd_collections.h; do
                 grep -qE "^$src/.*/$h$" <<<"$deps" || { echo "not from $src: $h"; exit 1; }
             done' "$work" "${HEAPD_SOURCE_ROOT:?HEAPD_SOURCE_ROOT: the source tree}" "${unin[@]}"
check "it compiles and links with \$(pkg-config --cflags --libs heapd) of the build tree" \
    bash -c 'cc -std=c11 -Wall -Wextra -Werror -o "$0/client-unin" "$0/client.c" \
                $("$@" pkg-config --cflags --libs heapd)' "$work" "${unin[@]}"
check "with LD_LIBRARY_PATH=<build>/client it loads the build's libheapd and runs" \
    bash -c 'lib=$(cd "$1/client" && pwd -P)
             LD_LIBRARY_PATH=$lib ldd "$0/client-unin" |
                 grep -F "libheapd.so.0 => $lib/libheapd.so.0" || exit 1
             out=$(env -u HEAPD_SOCKET -u HEAPD_CHECK LD_LIBRARY_PATH=$lib \
                   "$0/client-unin" "$0/nobody.sock"); echo "$out"
             [ "$out" = "-1001 no heapd is listening on the socket" ]' \
    "$work" "$build"

# ---- the library's ABI ----
check "libheapd.so -> libheapd.so.0 -> libheapd.so.0.*, SONAME libheapd.so.0" \
    bash -c '[ "$(readlink "$0")" = libheapd.so.0 ] &&
             [[ "$(readlink "$0.0")" == libheapd.so.0.* ]] &&
             readelf -d "$0" | grep -E "\(SONAME\) .*\[libheapd\.so\.0\]$"' "$lib"
# the linker's own symbols, never the library's API
linker_syms='^(_init|_fini|_edata|_end|__bss_start)$'
# (nm names a versioned symbol NAME@@VERSION: the version goes to a 4th
# column)
nm -D --defined-only "$lib" 2>&1 |
    awk '{ v = ""; if (split($3, p, "@@") == 2) { $3 = p[1]; v = p[2] }
           print $1, $2, $3, v }' >"$work/nm"
check "libheapd exports no function but heapd_* (nm -D --defined-only)" \
    bash -c 'awk "\$2 ~ /^[TWi]$/ { print \$3 }" "$0" | grep -Ev "$1" |
             grep -v "^heapd_" && exit 1; exit 0' "$work/nm" "$linker_syms"
check "libheapd exports no data symbol (but the linker's own)" \
    bash -c 'awk "\$2 ~ /^[BDRGSVu]$/ { print \$3 }" "$0" | grep -Ev "$1" &&
             exit 1; exit 0' "$work/nm" "$linker_syms"
include_d=$(at "$includedir")
check "libheapd exports exactly the HEAPD_API functions of its installed headers" \
    bash -c 'api=$(cat "$1/heapd.h" "$1/heapd_collections.h" | tr "\n" " " |
                  grep -oE "(HEAPD_API|HEAPD_SIZED_\() *[^;(]*\(" |
                  sed -nE "s/.*[ *](heapd_[a-z_0-9]+) *\(\$/\1/p" | sort -u)
             exp=$(awk "\$2 ~ /^[TWi]$/ { print \$3 }" "$0" | grep "^heapd_" |
                  sort -u)
             echo "declared, not exported: $(comm -23 <(echo "$api") <(echo "$exp") | tr "\n" " ")"
             echo "exported, not declared: $(comm -13 <(echo "$api") <(echo "$exp") | tr "\n" " ")"
             [ -n "$api" ] && [ "$api" = "$exp" ]' "$work/nm" "$include_d"
# Note [Symbol versions] in client/abi.c
check "every heapd_* symbol has a version, HEAPD_0.1 or later" \
    bash -c 'awk "\$3 ~ /^heapd_/ && \$4 !~ /^HEAPD_0\\.[0-9]+\$/" "$0" |
             grep . && exit 1; exit 0' "$work/nm"
check "0.1.0's symbols are all exported, at HEAPD_0.1 (tests/abi/0.1.0/symbols)" \
    bash -c 'have=$(awk "\$4 == \"HEAPD_0.1\" { print \$3 }" "$0" | sort)
             missing=$(comm -23 "$1" <(echo "$have"))
             echo "missing or moved: $missing"; [ -z "$missing" ]' \
    "$work/nm" "$HEAPD_SOURCE_ROOT/tests/abi/0.1.0/symbols"

# ---- installed files ----
files=("$(at "$sbindir")/heapd" "$(at "$bindir")/heapctl"
       "$include_d/heapd.h" "$include_d/heapd_collections.h"
       "$include_d/heapd_counters.h" "$include_d/heapd_errors.h"
       "$include_d/heapd_object.h"
       "$libdir_d/pkgconfig/heapd.pc"
       "$(at "$sysconfdir")/heapd/heapd.conf"
       "$dest$prefix/lib/systemd/system/heapd.service"
       "$dest$prefix/lib/systemd/system/heapd.socket")
docdir=$(at "$datadir")/doc/heapd
for f in README.md architecture.md hardening.md benchmarks.md; do
    files+=("$docdir/$f")
done
mandir_d=$(at "$mandir")
if $want_man; then
    files+=("$mandir_d/man8/heapd.8" "$mandir_d/man1/heapctl.1"
            "$mandir_d/man5/heapd.conf.5" "$mandir_d/man3/libheapd.3")
fi
what="binaries, headers, heapd.pc, heapd.conf, units, docs"
$want_man && what+=", man pages"
check "installed where they belong: $what" \
    bash -c 'for f; do [ -s "$f" ] || { echo "missing: $f"; bad=1; }; done;
             [ -z "${bad:-}" ]' _ "${files[@]}"

# Documentation= of heapd.service: file:// paths installed; man: pages
# installed (when they are built)
check "every Documentation= of heapd.service names an installed file or page" \
    bash -c 'unit=$0 dest=$1 mandir=$2 want_man=$3
             docs=$(sed -n "s/^Documentation=//p" "$unit" | tr " " "\n")
             [ -n "$docs" ] || { echo "no Documentation= in $unit"; exit 1; }
             bad=
             for d in $docs; do
                 case $d in
                 file://*) p=$dest${d#file://}
                           [ -s "$p" ] || { echo "not installed: $d"; bad=1; } ;;
                 man:*) $want_man || continue
                        n=${d#man:}; s=${n##*(}; s=${s%)}; n=${n%(*}
                        [ -s "$mandir/man$s/$n.$s" ] ||
                            { echo "not installed: $d"; bad=1; } ;;
                 *) echo "unknown kind: $d"; bad=1 ;;
                 esac
             done
             echo "$docs"; [ -z "$bad" ]' \
    "$dest$prefix/lib/systemd/system/heapd.service" "$dest" "$mandir_d" "$want_man"

finish
