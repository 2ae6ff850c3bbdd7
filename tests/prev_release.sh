#!/bin/bash
# prev_release.sh SOURCE OUT: build the previous release (tests/abi/*/commit,
# the newest) from SOURCE's git history into OUT: its heapd, heapctl and
# libheapd, and tests/abi/client_0_1.c against its own headers and
# library.  The release is built once (OUT/done names it); the client is
# compiled at every call, from this tree's source.  For
# tests/test_versions.c (Note [Versions across releases]).
set -euo pipefail
src=$1 out=$2
# one build at a time: a test's run that its bound cut short may still be
# building when the next test's starts
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
rel=$(ls "$src/tests/abi" | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' | sort -V |
      tail -1)
client() {
    cc -o "$out/client" "$src/tests/abi/client_0_1.c" -I "$out/src/client" \
        -I "$out/src/proto" -I "$out/src/client/collections" \
        -L "$out/build/client" -lheapd -Wl,-rpath,"$out/build/client"
}
if [ "$(cat "$out/done" 2>/dev/null)" = "$rel" ]; then
    client
    exit 0
fi
commit=$(cat "$src/tests/abi/$rel/commit")
if ! git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "prev_release: $rel's commit $commit is not in $src's git history;" \
         "run the tests in a full clone (git clone, not --depth)" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$out/src"
git -C "$src" archive "$commit" | tar -x -C "$out/src"
meson setup "$out/build" "$out/src" >"$out/setup.log" 2>&1 ||
    { cat "$out/setup.log" >&2; exit 1; }
ninja -C "$out/build" daemon/heapd heapctl/heapctl client/libheapd.so.0.1.0 \
    >"$out/ninja.log" 2>&1 || { tail -30 "$out/ninja.log" >&2; exit 1; }
client
echo "$rel" > "$out/done"
