#!/usr/bin/env bash
# The release artifacts, for real: builds them (packaging/release.sh), runs lintian on the .deb,
# installs it, checks its files, the unit and the packaged config, runs the installed binary as
# the unit would run it and delivers an event end to end, upgrades over itself (data and a
# changed conffile kept, herald restarted), removes (data and config kept) and purges (config
# gone, the data's place printed, the data kept), and runs the tarball's binary with no Rust
# toolchain on PATH. Part of the README's test command (CI).
#
# Needs root (it installs and purges the herald package) on a Debian machine where systemd is not
# PID 1 (CI): there the maintainer scripts' service actions are recorded by stand-ins for
# systemctl and deb-systemd-invoke instead of starting the packaged service. Whatever happens,
# the package is purged and what the test made is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

# `systemd-analyze security --offline=yes systemd/herald.service` before the package existed
# (systemd 252): the installed unit may not be more exposed.
EXPOSURE_BASELINE=1.4
# The .deb's size limit.
MAX_DEB_BYTES=$((12 * 1024 * 1024))
# How long herald and the receiver get to start, and an event to be delivered.
DEADLINE_SECONDS=30
# The unprivileged user herald runs as here, from systemd's DynamicUser range.
RUN_UID=61999
# Marks what this test made, so a later run may remove it after a run that was killed.
MARK=herald-packaging-test

fail() {
  echo "packaging/test.sh: FAIL: $*" >&2
  exit 1
}
step() { echo "packaging/test.sh: $*"; }

[ "$(id -u)" = 0 ] || fail "run as root: it installs and purges the herald package"
for tool in dpkg-deb lintian systemd-analyze setpriv unshare curl jq readelf cargo-deb; do
  command -v "$tool" >/dev/null || fail "$tool is missing (.ci/run installs it)"
done
if [ -d /run/systemd/system ] && [ ! -e /run/systemd/$MARK ]; then
  fail "systemd runs this machine: the package would start the real service; run this where systemd is not PID 1 (CI)"
fi

work=$(mktemp -d /tmp/herald-packaging.XXXXXX)
chmod 0755 "$work"
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  remove_leftovers
  rm -rf "$work"
  exit $status
}
# What this test or an earlier, killed run of it made (the package, the data directory, the
# systemd stand-in), never anything else.
installed_mark=/var/lib/dpkg/herald.$MARK
remove_leftovers() {
  if [ -e "$installed_mark" ]; then
    if dpkg-query -W -f='${db:Status-Abbrev}' herald 2>/dev/null | grep -q '^[a-z]i\|^rc'; then
      dpkg -P herald >/dev/null 2>&1 || true
    fi
    rm -f "$installed_mark"
  fi
  if [ -e /run/systemd/$MARK ]; then rm -rf /run/systemd/system "/run/systemd/$MARK"; fi
  if [ -e "/var/lib/private/herald.$MARK" ]; then
    rm -rf /var/lib/private/herald /var/lib/herald "/var/lib/private/herald.$MARK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A herald package or data left by a killed run of this test is removed; anyone else's is not.
remove_leftovers
if dpkg-query -W -f='${db:Status-Abbrev}' herald 2>/dev/null | grep -q '^[a-z]i\|^rc'; then
  fail "a herald package this test did not install is here; refusing to purge it"
fi
if [ -e /var/lib/private/herald ] || [ -e /var/lib/herald ]; then
  fail "/var/lib/herald holds data this test did not make; refusing to touch it"
fi

# Waits until FILE has a line matching REGEX and prints the first such line.
wait_for_line() {
  local file=$1 regex=$2 what=$3 end=$((SECONDS + DEADLINE_SECONDS))
  until grep -m 1 -E "$regex" "$file" 2>/dev/null; do
    ((SECONDS < end)) || { cat "$file" >&2; fail "no $what within ${DEADLINE_SECONDS}s"; }
    sleep 0.1
  done
}

# dpkg with stand-ins for the service manager: the maintainer scripts see /run/systemd/system,
# as on a systemd machine, and their systemctl / deb-systemd-invoke calls land in service.log.
# What works on unit files alone (deb-systemd-helper's `systemctl preset` on a first install,
# which enables the unit) runs the real systemctl, where /run/systemd is empty as on this machine.
stubs="$work/stubs"
mkdir -p "$stubs"
real_systemctl=$(command -v systemctl) || fail "systemctl is missing"
printf '#!/bin/sh\necho "deb-systemd-invoke $*" >>%s/service.log\n' "$work" >"$stubs/deb-systemd-invoke"
cat >"$stubs/systemctl" <<STUB
#!/bin/sh
echo "systemctl \$*" >>$work/service.log
case " \$* " in
*" preset "* | *" enable "* | *" disable "* | *" is-enabled "* | *" mask "* | *" unmask "*)
  exec unshare --mount --propagation private sh -c \\
    'mount -t tmpfs tmpfs /run/systemd && exec $real_systemctl "\$@"' sh "\$@" ;;
esac
STUB
chmod 0755 "$stubs/systemctl" "$stubs/deb-systemd-invoke"
dpkg_as_on_systemd() {
  : >"$work/service.log"
  local made_run_systemd=no status=0
  [ -d /run/systemd ] || { mkdir /run/systemd && made_run_systemd=yes; }
  touch "/run/systemd/$MARK"
  mkdir /run/systemd/system
  PATH="$stubs:$PATH" dpkg "$@" </dev/null >"$work/dpkg.out" 2>&1 || status=$?
  rm -rf /run/systemd/system "/run/systemd/$MARK"
  [ $made_run_systemd = no ] || rmdir /run/systemd
  cat "$work/dpkg.out"
  [ $status = 0 ] || fail "dpkg $*: exit $status"
}
expect_service_call() {
  grep -qxF "$1" "$work/service.log" || {
    cat "$work/service.log" >&2
    fail "the maintainer scripts did not run: $1"
  }
}

# --- Build ---------------------------------------------------------------------------------
bash packaging/release.sh
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
dist=target/dist
deb="$dist/herald_${version}-1_amd64.deb"
tarball="$dist/herald-${version}-x86_64-linux.tar.gz"
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "target/dist/SHA256SUMS does not match"
deb_bytes=$(stat -c %s "$deb")
step "$(basename "$deb"): $deb_bytes bytes"
((deb_bytes <= MAX_DEB_BYTES)) || fail "the .deb is $deb_bytes bytes, over $MAX_DEB_BYTES"

# The Depends that dpkg-shlibdeps gave: glibc, at least 2.34.
depends=$(dpkg-deb -f "$deb" Depends)
step "Depends: $depends"
libc=$(grep -oE 'libc6 \(>= [0-9.]+\)' <<<"$depends") || fail "Depends names no libc6 version: $depends"
dpkg --compare-versions "$(grep -oE '[0-9.]+' <<<"$libc" | head -n 1)" ge 2.34 ||
  fail "Depends asks for $libc; the binary is built for glibc >= 2.34"

# --- lintian: no error; the warnings kept are overridden in the package, each with its reason.
lintian --fail-on error,warning --display-info "$deb" | tee "$work/lintian.out" ||
  fail "lintian reports an error or a warning not overridden (packaging/lintian-overrides)"

# --- Install -------------------------------------------------------------------------------
touch "$installed_mark"
dpkg_as_on_systemd -i "$deb"
expect_service_call "systemctl --system daemon-reload"
expect_service_call "deb-systemd-invoke start herald.service"
[ -L /etc/systemd/system/multi-user.target.wants/herald.service ] || fail "herald.service is not enabled"

expect_file() { # PATH MODE
  [ -f "$1" ] || fail "$1 is not installed"
  [ "$(stat -c '%a %U:%G' "$1")" = "$2 root:root" ] || fail "$1 is $(stat -c '%a %U:%G' "$1"), want $2 root:root"
}
expect_file /usr/bin/herald 755
expect_file /usr/lib/systemd/system/herald.service 644
expect_file /etc/herald/herald.toml 644
expect_file /usr/share/man/man1/herald.1.gz 644
for f in packaging/man/*.1; do expect_file "/usr/share/man/man1/$(basename "$f").gz" 644; done
expect_file /usr/share/bash-completion/completions/herald 644
expect_file /usr/share/zsh/vendor-completions/_herald 644
expect_file /usr/share/fish/vendor_completions.d/herald.fish 644
for f in README.md copyright config.example.toml docs/operations.md docs/api.md examples/herald-cluster.conf; do
  expect_file "/usr/share/doc/herald/$f" 644
done
for f in docs/*.md; do expect_file "/usr/share/doc/herald/$f" 644; done
dpkg-query -W -f='${Conffiles}\n' herald | grep -q '^ /etc/herald/herald.toml ' ||
  fail "/etc/herald/herald.toml is not a conffile"
cmp -s /usr/lib/systemd/system/herald.service systemd/herald.service || fail "the installed unit is not systemd/herald.service"
cmp -s /etc/herald/herald.toml packaging/herald.toml || fail "the installed config is not packaging/herald.toml"
sections=$(readelf -S --wide /usr/bin/herald)
! grep -qE '\.debug_(info|line|str|abbrev|ranges|loc)' <<<"$sections" || fail "/usr/bin/herald carries debug info"
! grep -q '\.symtab' <<<"$sections" || fail "/usr/bin/herald is not stripped"
/usr/bin/herald --version | tee "$work/version.out"
grep -q "^herald $version" "$work/version.out" || fail "herald --version does not name $version"
man -l /usr/share/man/man1/herald.1.gz >/dev/null 2>&1 || fail "man cannot read herald(1)"

# --- The unit: verify, exposure ------------------------------------------------------------
systemd-analyze verify /usr/lib/systemd/system/herald.service || fail "systemd-analyze verify"
exposure=$(systemd-analyze security --offline=yes /usr/lib/systemd/system/herald.service |
  sed -n 's/.*Overall exposure level for herald.service: \([0-9.]*\).*/\1/p')
[ -n "$exposure" ] || fail "no exposure level from systemd-analyze security"
step "exposure level $exposure (baseline $EXPOSURE_BASELINE)"
awk -v e="$exposure" -v b="$EXPOSURE_BASELINE" 'BEGIN { exit !(e <= b) }' ||
  fail "exposure $exposure is worse than the baseline $EXPOSURE_BASELINE"

# --- The packaged config --------------------------------------------------------------------
/usr/bin/herald check-config /etc/herald/herald.toml || fail "check-config /etc/herald/herald.toml"

# --- Run the installed herald as the unit would -----------------------------------------------
# DynamicUser=yes and StateDirectory=herald: an unprivileged uid, its data in
# /var/lib/private/herald (0700, its own) reached through /var/lib/herald; the admin token from
# a credential file (LoadCredential), read through server.admin_token_file; UMask=0077.
mkdir -p -m 0700 /var/lib/private
touch "/var/lib/private/herald.$MARK"
install -d -m 0700 -o $RUN_UID -g $RUN_UID /var/lib/private/herald
ln -s private/herald /var/lib/herald
credentials="$work/credentials"
install -d -m 0500 -o $RUN_UID -g $RUN_UID "$credentials"
token=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
(umask 0277 && printf '%s\n' "$token" >"$credentials/admin-token")
chown $RUN_UID:$RUN_UID "$credentials/admin-token"
# The changed conffile: a free port, the credential, and plain http to loopback for the
# receiver (production herald refuses both; these are the documented keys).
cp /etc/herald/herald.toml "$work/herald.toml.packaged"
sed -i \
  -e "/^\[server\]$/a # changed by $MARK\nlisten = \"127.0.0.1:0\"\nadmin_token_file = \"$credentials/admin-token\"" \
  -e '/^\[delivery\]$/a allow_http = true\nallow_private_networks = ["127.0.0.0/8"]' \
  /etc/herald/herald.toml
/usr/bin/herald check-config /etc/herald/herald.toml || fail "check-config of the changed config"

start_herald() { # LOG
  # As systemd does for a DynamicUser service: in the service's own mount namespace
  # /var/lib/private (0700 root outside it) is a 0755 directory holding just its state directory.
  unshare --mount --propagation private sh -c '
    set -e
    mkdir -p "$1/state"
    mount --bind /var/lib/private/herald "$1/state"
    mount -t tmpfs -o mode=0755 tmpfs /var/lib/private
    mkdir /var/lib/private/herald
    mount --bind "$1/state" /var/lib/private/herald
    cd /var/lib/herald
    umask 0077
    exec setpriv --reuid="$2" --regid="$2" --clear-groups --no-new-privs --inh-caps=-all \
      env -i PATH=/usr/bin:/bin NO_COLOR=1 STATE_DIRECTORY=/var/lib/herald \
      CREDENTIALS_DIRECTORY="$1/credentials" \
      /usr/bin/herald serve --config /etc/herald/herald.toml
  ' sh "$work" "$RUN_UID" >"$1" 2>&1 &
  herald_pid=$!
  pids+=("$herald_pid")
  api=http://$(wait_for_line "$1" 'herald listening' "herald listening" |
    sed -n 's/.*addr=\([0-9.]*:[0-9]*\).*/\1/p')
  [ "$api" != http:// ] || fail "no address in herald's log"
}
stop_herald() {
  kill -TERM "$herald_pid"
  local status=0
  wait "$herald_pid" || status=$?
  [ $status = 0 ] || fail "herald exited $status after SIGTERM"
}
call() { # METHOD PATH [BODY]
  curl -sS --fail-with-body -X "$1" "$api$2" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' ${3:+-d "$3"}
}

start_herald "$work/herald.log"
step "herald (uid $RUN_UID) listening at $api"
secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
setpriv --reuid=65534 --regid=65534 --clear-groups \
  /usr/bin/herald receive --listen 127.0.0.1:0 --secret "$secret" >"$work/receiver.log" 2>&1 &
pids+=($!)
receiver=$(wait_for_line "$work/receiver.log" 'listening on http://' "receiver" |
  sed -n 's|.*listening on \(http://[0-9.]*:[0-9]*\)/.*|\1|p')

endpoint=$(call POST /v1/accounts/11073/endpoints \
  "{\"url\": \"$receiver/hook\", \"secret\": \"$secret\"}" | jq -er .endpoint.id)
[ "$(call POST "/v1/endpoints/$endpoint/verify" | jq -r .verified)" = true ] ||
  fail "endpoint verification failed"
delivery=$(call POST /v1/events \
  '{"account_id": 11073, "type": "interaction.review", "payload": {"review_id": "r_1", "rating": 5}}' |
  jq -er '.deliveries[0].delivery_id')
end=$((SECONDS + DEADLINE_SECONDS))
until [ "$(call GET "/v1/deliveries/$delivery" | jq -r .state)" = delivered ]; do
  ((SECONDS < end)) || { call GET "/v1/deliveries/$delivery" >&2; fail "$delivery not delivered within ${DEADLINE_SECONDS}s"; }
  sleep 0.1
done
grep -q 'type=interaction.review attempt=1 verified' "$work/receiver.log" ||
  { cat "$work/receiver.log" >&2; fail "the receiver did not verify the event"; }
step "$delivery delivered and verified"
stop_herald
[ "$(stat -c '%a %u' /var/lib/private/herald)" = "700 $RUN_UID" ] || fail "the data directory's mode or owner changed"
[ -z "$(find /var/lib/private/herald -type f ! -perm 0600)" ] || fail "a data file is not 0600"

# --- Upgrade over itself: data and the changed conffile kept, herald restarted --------------
next="${version}-2"
cargo deb --no-build --no-dbgsym --strip --deb-version "$next" --output "$work/" >/dev/null
dpkg_as_on_systemd -i "$work/herald_${next}_amd64.deb"
[ "$(dpkg-query -W -f='${Version}' herald)" = "$next" ] || fail "herald $next is not installed"
expect_service_call "deb-systemd-invoke restart herald.service"
grep -q "^# changed by $MARK" /etc/herald/herald.toml || fail "the upgrade replaced the changed conffile"
start_herald "$work/herald-upgraded.log"
[ "$(call GET "/v1/deliveries/$delivery" | jq -r .state)" = delivered ] || fail "the upgrade lost $delivery"
stop_herald
step "upgraded to $next: config and data kept"

# --- Remove: data and config kept --------------------------------------------------------------
dpkg_as_on_systemd -r herald
expect_service_call "deb-systemd-invoke stop herald.service"
[ ! -e /usr/bin/herald ] || fail "dpkg -r left /usr/bin/herald"
[ -f /etc/herald/herald.toml ] || fail "dpkg -r removed the config"
[ -n "$(ls -A /var/lib/private/herald)" ] || fail "dpkg -r removed the data"

# --- Purge: config removed, the data's place said, the data kept ------------------------------
dpkg_as_on_systemd -P herald
[ ! -e /etc/herald/herald.toml ] || fail "dpkg -P left /etc/herald/herald.toml"
[ ! -e /etc/systemd/system/multi-user.target.wants/herald.service ] || fail "dpkg -P left the unit enabled"
grep -q '/var/lib/private/herald' "$work/dpkg.out" || fail "dpkg -P did not say where the data is"
[ -n "$(ls -A /var/lib/private/herald)" ] || fail "dpkg -P deleted the data"
step "removed and purged: the data stays in /var/lib/private/herald"

# --- The tarball, with no Rust toolchain on PATH -----------------------------------------------
mkdir "$work/tarball"
tar -C "$work/tarball" -xzf "$tarball"
unpacked="$work/tarball/herald-${version}-x86_64-linux"
(cd "$unpacked" && sha256sum --quiet -c SHA256SUMS) || fail "the tarball's SHA256SUMS does not match"
for f in herald systemd/herald.service config.example.toml man/herald.1 completions/herald.bash \
  completions/_herald completions/herald.fish README.md; do
  [ -f "$unpacked/$f" ] || fail "the tarball has no $f"
done
bare_path=/usr/bin:/bin
for tool in cargo rustc; do
  ! PATH=$bare_path command -v $tool >/dev/null || fail "$bare_path has $tool"
done
env -i PATH=$bare_path "$unpacked/herald" --version | grep -q "^herald $version" ||
  fail "the tarball's herald --version"
env -i PATH=$bare_path "$unpacked/herald" check-config "$unpacked/config.example.toml" ||
  fail "the tarball's herald check-config"
step "all passed"
