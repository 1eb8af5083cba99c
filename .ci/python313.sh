#!/usr/bin/env bash
# Prints the path of a CPython 3.13 interpreter, building it once if needed.
#
# These machines run Debian 12, whose only Python is 3.11; JAX >= 0.11 and EnvPool >= 1.2.6 need
# Python >= 3.12, so "the stack a new user gets" can only be tested on an interpreter built here.
# Debian's package archive (reachable from every machine, CI included) carries CPython's source
# for its newer releases: this script fetches python3.13's upstream tarball from the trixie source
# suite with apt, installs the -dev headers the standard library needs, and builds it into
# $PY313_PREFIX (default ~/.cache/jaxrl-python313). About 5-8 minutes on 2 cores, once per machine.
#
# Usage: PY=$(bash .ci/python313.sh) && "$PY" -m venv .venv313
set -euo pipefail
prefix=${PY313_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/jaxrl-python313}
py=$prefix/bin/python3.13
if [ -x "$py" ] && "$py" -c "import ssl, sqlite3, lzma, bz2, ctypes, zlib" 2>/dev/null; then
  echo "$py"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
# the same archive this machine's apt already uses (its first URIs line), asked for trixie's sources
uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null)
[ -n "$uri" ] || uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$uri" ] || { echo "python313.sh: no Debian archive found in apt's sources" >&2; exit 1; }
printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" > "$work/trixie.sources"
apt_o=(-o Dir::Etc::sourcelist="$work/trixie.sources" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/lists")
{
  apt-get "${apt_o[@]}" update -qq
  (cd "$work" && apt-get "${apt_o[@]}" source --download-only python3.13)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev zlib1g-dev libffi-dev libbz2-dev \
    liblzma-dev libsqlite3-dev libreadline-dev libncurses-dev uuid-dev
} >&2
tar -C "$work" -xf "$work"/python3.13_*.orig.tar.xz
src=$(ls -d "$work"/Python-3.13*/)
(cd "$src" && ./configure --prefix="$prefix" --with-ensurepip=install -q && make -j"$(nproc)" -s && make install -s) >"$work/build.log" 2>&1 \
  || { tail -n 30 "$work/build.log" >&2; echo "python313.sh: the build failed" >&2; exit 1; }
"$py" -c "import ssl, sqlite3, lzma, bz2, ctypes, zlib" >&2
echo "$py"
