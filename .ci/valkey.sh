#!/usr/bin/env bash
# Builds Valkey for CI from Debian's source package, core only, and prints the
# path of the valkey-server it built (valkey-cli is beside it); with redis,
# Redis from the same suite (8.x in forky), for figures on a newer Redis than
# bookworm's 7.0 (bench/README.md).
#
#   .ci/valkey.sh DIR          build Valkey in DIR (made if missing; remove it after use)
#   .ci/valkey.sh DIR redis    build Redis instead
#
# Debian bookworm has no valkey package, so the source comes from a newer
# suite (VALKEY_SUITE, default forky). The deb-src entry is derived from the
# machine's own Debian sources, so that no mirror address is written here: the
# URIs of its entry for its own release, with the type and the suite changed.
# apt's lists for it are kept in DIR, so the machine's apt setup is untouched.
# The build is `make MALLOC=jemalloc BUILD_TLS=no`: the bundled jemalloc, as
# Valkey's packages and images use (built with glibc's malloc instead, calls
# on a dataset of a million grouped messages took 30-120 ms of wall time now
# and then, against under 10 ms with jemalloc: internal/store's
# TestScriptBound_Groups), and no OpenSSL to build or install; Redis 8 is built
# without the modules of its "full" build (BUILD_WITH_MODULES=no: they would be
# fetched and built with Rust and cmake).
set -euo pipefail
dir=${1:?usage: .ci/valkey.sh DIR [redis]}
pkg=${2:-valkey}
suite=${VALKEY_SUITE:-forky}
die() { echo "valkey.sh: $*" >&2; exit 1; }

release=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$release" ] || die "no VERSION_CODENAME in /etc/os-release"
# The machine's sources: deb822 files (Types/URIs/Suites stanzas) or one-line
# entries (deb [options] URI suite components).
uri=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  uri=$(awk -v rel="$release" '
    function stanza() { if (deb && hit && u) { print u; found = 1; exit } deb = hit = 0; u = "" }
    /^[ \t]*$/ { stanza(); next }
    tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
    tolower($1) == "uris:" { u = $2 }
    tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == rel) hit = 1 }
    END { if (!found) stanza() }' "$f")
  [ -n "$uri" ] && break
done
if [ -z "$uri" ]; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(sed -E 's/\[[^]]*\]//' "$f" | awk -v rel="$release" '$1 == "deb" && $3 == rel { print $2; exit }')
    [ -n "$uri" ] && break
  done
fi
[ -n "$uri" ] || die "no deb entry for $release in the machine's apt sources"
case $pkg in
valkey) flags=() ;;
redis) flags=(BUILD_WITH_MODULES=no) ;;
*) die "builds valkey or redis, not $pkg" ;;
esac

mkdir -p "$dir/apt/lists/partial" "$dir/apt/sources.list.d"
dir=$(cd "$dir" && pwd)
cat >"$dir/apt/sources.list.d/valkey-src.sources" <<SOURCES
Types: deb-src
URIs: $uri
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$dir/apt/sources.list.d"
  -o Dir::State::Lists="$dir/apt/lists" -o APT::Sandbox::User=root)

# dpkg-source unpacks the package; gcc and make build it.
missing=""
for c in dpkg-source:dpkg-dev gcc:gcc make:make; do
  command -v "${c%%:*}" >/dev/null || missing="$missing ${c#*:}"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq $missing >/dev/null
fi

apt-get "${apt[@]}" update -qq
rm -rf "$dir/src" && mkdir "$dir/src"
(cd "$dir/src" && apt-get "${apt[@]}" source -qq "$pkg" >"$dir/source.log" 2>&1) \
  || { cat "$dir/source.log" >&2; die "apt-get source $pkg ($suite) failed"; }
src=$(find "$dir/src" -mindepth 1 -maxdepth 1 -type d -name "$pkg-*" | head -n 1)
[ -n "$src" ] || die "apt-get source $pkg unpacked nothing"
make -C "$src" -j"$(nproc)" MALLOC=jemalloc BUILD_TLS=no "${flags[@]}" >"$dir/build.log" 2>&1 \
  || { tail -n 50 "$dir/build.log" >&2; die "make failed in $src"; }
[ -x "$src/src/$pkg-server" ] && [ -x "$src/src/$pkg-cli" ] || die "no $pkg-server/$pkg-cli in $src/src"
echo "$src/src/$pkg-server"
