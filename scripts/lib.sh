# Shared by scripts/test and scripts/demo: install missing build and test
# dependencies from Debian packages, and build.
# shellcheck shell=bash

HEAPD_PACKAGES=(gcc meson ninja-build pkg-config protobuf-c-compiler
                libprotobuf-c-dev libuv1-dev check libinih-dev libsystemd-dev
                libmicrohttpd-dev libncurses-dev systemd
                scdoc mandoc man-db)  # the man pages: built, linted, rendered

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ensure_packages PKG...: apt-get install those not installed yet.
ensure_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "==> installing: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >/dev/null
}

# build DIR [meson options...]: configure once, then compile.
build() {
    local dir=$1; shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >/dev/null
    fi
    ninja -C "$dir" >/dev/null
}
