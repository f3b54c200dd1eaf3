#!/usr/bin/env bash
# Builds herald's release artifacts from this checkout into target/dist/ (one release build):
#   herald_VERSION-1_amd64.deb           the Debian package (`cargo deb`, metadata in Cargo.toml)
#   herald-dbgsym_VERSION-1_amd64.ddeb   its debug info, for debuggers (not needed to run herald)
#   herald-VERSION-x86_64-linux.tar.gz   the same stripped binary, the systemd unit, the example
#                                        config, man pages, completions, README, and SHA256SUMS
#   SHA256SUMS                           of the files above
# Needs cargo-deb (`cargo install cargo-deb --locked`) and dpkg-dev (dpkg-shlibdeps, for the
# .deb's Depends). The binary targets the build machine's glibc (x86_64-unknown-linux-gnu): build
# on Debian 12 (glibc 2.36) or older, never newer than the oldest system it must run on.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "release.sh: $*" >&2
  exit 1
}

out=target/dist
host=$(rustc -vV | sed -n 's/^host: //p')
[ "$host" = x86_64-unknown-linux-gnu ] || fail "build on x86_64-unknown-linux-gnu (this is $host)"
command -v cargo-deb >/dev/null || fail "cargo-deb is missing: cargo install cargo-deb --locked"
command -v dpkg-shlibdeps >/dev/null || fail "dpkg-shlibdeps is missing: apt-get install dpkg-dev"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || fail "no version in Cargo.toml"

# The files' times in both archives are the commit's. The build itself runs without
# SOURCE_DATE_EPOCH: the C parts of ring, zstd and jemalloc are rebuilt whenever it changes, which
# would make every commit's build a nearly cold one; `herald --version` names the build's day.
epoch=${SOURCE_DATE_EPOCH:-}
if git rev-parse --git-dir >/dev/null 2>&1; then
  epoch=$(git log -1 --format=%ct)
  [ -z "$(git status --porcelain --untracked-files=no)" ] ||
    echo "release.sh: warning: the checkout has uncommitted changes; --version names only HEAD" >&2
fi

rm -rf "$out"
mkdir -p "$out"

# The release build; `cargo deb` strips the binary and puts its debug info in the .ddeb (dbgsym
# in Cargo.toml).
(unset SOURCE_DATE_EPOCH && cargo build --release --locked)
if [ -n "$epoch" ]; then
  SOURCE_DATE_EPOCH=$epoch cargo deb --no-build --locked --output "$out"
else
  cargo deb --no-build --locked --output "$out"
fi
deb="$out/herald_${version}-1_amd64.deb"
[ -f "$deb" ] || fail "cargo deb made no $deb"

# The tarball carries the .deb's own binary: one build, one binary.
name="herald-${version}-x86_64-linux"
stage="$out/$name"
mkdir -p "$stage/man" "$stage/completions" "$stage/systemd"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/herald >"$stage/herald"
chmod 0755 "$stage/herald"
install -m 0644 systemd/herald.service systemd/herald-cluster.conf "$stage/systemd/"
install -m 0644 config.example.toml README.md "$stage/"
install -m 0644 packaging/man/*.1 "$stage/man/"
install -m 0644 packaging/completions/* "$stage/completions/"
(cd "$stage" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort |
  xargs sha256sum >SHA256SUMS)
tar_time=()
[ -z "$epoch" ] || tar_time=(--mtime="@$epoch")
tar -C "$out" --sort=name --owner=0 --group=0 --numeric-owner "${tar_time[@]}" -cf - "$name" |
  gzip -n -9 >"$out/$name.tar.gz"
rm -rf "$stage"

(cd "$out" && sha256sum -- *.deb *.ddeb "$name.tar.gz" >SHA256SUMS)
echo "release.sh: built in $out:"
(cd "$out" && ls -l -- *.deb *.ddeb "$name.tar.gz" SHA256SUMS)
