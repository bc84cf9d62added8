#!/bin/sh
# deps.sh PKG... — install the named Debian packages when run as root, else stop with one line.
[ $# -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "flashgrad: installing missing packages: $*"
    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }) \
        || { echo "flashgrad: could not install: $* (try: sudo apt-get install $*)" >&2; exit 1; }
else
    echo "flashgrad: missing packages: $* (install with: sudo apt-get install $*)" >&2
    exit 1
fi
