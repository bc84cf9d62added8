#!/bin/sh
# get_tinyshakespeare.sh OUT — put Tiny Shakespeare (~1.1 MB, 65 distinct characters) at OUT.
#
# Does nothing if OUT already exists. Otherwise copies ../shared/datasets/tinyshakespeare/input.txt
# (beside the repository, for machines without network) or downloads it from the char-rnn
# repository with curl or wget. The file is written to a temporary name beside OUT and renamed
# into place, so OUT is never left half-written.
set -eu

URL="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: sh datasets/get_tinyshakespeare.sh OUT" >&2
    exit 2
fi
OUT=$1

if [ -e "$OUT" ]; then
    echo "get_tinyshakespeare: $OUT exists, nothing to do"
    exit 0
fi

# The repository root is the parent of this script's directory; the shared copy lives beside it.
HERE=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
LOCAL="$HERE/../../shared/datasets/tinyshakespeare/input.txt"

DIR=$(dirname -- "$OUT")
mkdir -p -- "$DIR" || { echo "get_tinyshakespeare: cannot create directory $DIR" >&2; exit 1; }
TMP=$(mktemp "$DIR/.tinyshakespeare.XXXXXX") || { echo "get_tinyshakespeare: cannot write in $DIR" >&2; exit 1; }
trap 'rm -f -- "$TMP"' EXIT
trap 'exit 1' HUP INT TERM

if [ -f "$LOCAL" ]; then
    echo "get_tinyshakespeare: copying $LOCAL"
    cp -- "$LOCAL" "$TMP" || { echo "get_tinyshakespeare: copy from $LOCAL failed" >&2; exit 1; }
elif command -v curl >/dev/null 2>&1; then
    echo "get_tinyshakespeare: downloading $URL"
    curl -fsSL --retry 3 -o "$TMP" "$URL" ||
        { echo "get_tinyshakespeare: download failed (curl) from $URL; no network? Put the file at $OUT by hand" >&2; exit 1; }
elif command -v wget >/dev/null 2>&1; then
    echo "get_tinyshakespeare: downloading $URL"
    wget -q -O "$TMP" "$URL" ||
        { echo "get_tinyshakespeare: download failed (wget) from $URL; no network? Put the file at $OUT by hand" >&2; exit 1; }
else
    echo "get_tinyshakespeare: need curl or wget to download $URL (or put the file at $OUT by hand)" >&2
    exit 1
fi

if [ ! -s "$TMP" ]; then
    echo "get_tinyshakespeare: got an empty file from $URL" >&2
    exit 1
fi
chmod 644 "$TMP" 2>/dev/null || true
mv -f -- "$TMP" "$OUT" || { echo "get_tinyshakespeare: cannot move the file to $OUT" >&2; exit 1; }
trap - EXIT
echo "get_tinyshakespeare: wrote $OUT ($(wc -c < "$OUT" | tr -d ' ') bytes)"
