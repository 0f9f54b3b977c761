#!/bin/sh
# Installs a built agentd tree (npm install has run: dist/ and node_modules/
# exist) into a prefix, with its systemd unit, config and system user.
#
#   systemd/install.sh [--prefix DIR] [--dry-run]
#
# PREFIX   install location (default /opt/agentd; also --prefix)
# DESTDIR  staging root prepended to every path (packaging, tests); with
#          DESTDIR set, no user is created and systemd is not reloaded
#          (the sysusers.d file creates the user on the target system).
# --dry-run  print what would be done, change nothing.
#
# An existing /etc/agentd/agentd.toml is never overwritten.
set -eu

prefix=/opt/agentd
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be an absolute path, got $prefix" >&2; exit 2 ;; esac

src=$(cd "$(dirname "$0")/.." && pwd)
destdir=${DESTDIR:-}
root="$destdir$prefix"

for required in dist/bundle/agentd.js dist/bundle/agentctl.js node_modules/.bin/node package.json; do
  [ -e "$src/$required" ] || { echo "install.sh: $src/$required is missing; run 'npm install' (which builds) first" >&2; exit 1; }
done

run() {
  if [ "$dry_run" -eq 1 ]; then echo "would run: $*"; else "$@"; fi
}
write_file() { # write_file PATH MODE < content
  if [ "$dry_run" -eq 1 ]; then echo "would write: $1 (mode $2)"; cat >/dev/null; return; fi
  mkdir -p "$(dirname "$1")"
  cat >"$1.tmp.$$"
  chmod "$2" "$1.tmp.$$"
  mv -f "$1.tmp.$$" "$1"
}

# The packages the agent runs with (npm ls --omit=dev: Node.js itself included), each with what it
# nests, as paths under node_modules/; empty without npm or when npm cannot tell.
production_packages() {
  command -v npm >/dev/null 2>&1 || return 0
  (cd "$src" && npm ls --omit=dev --all --parseable 2>/dev/null) | sed -n "s#^$src/##p" \
    | awk -F/ '$1 == "node_modules" { print ($2 ~ /^@/) ? $1 "/" $2 "/" $3 : $1 "/" $2 }' | sort -u || true
}

echo "installing agentd from $src into $root"
run mkdir -p "$root" "$root/bin"
for part in dist package.json package-lock.json README.md; do
  [ -e "$src/$part" ] || continue
  run rm -rf "$root/$part"
  run cp -a "$src/$part" "$root/$part"
done
# Build-time packages (TypeScript, tap, the linters: more than half of node_modules) are not needed
# to run: only the production packages are copied (with npm's record of the tree and the command
# links, those of the packages left out removed). Without npm the whole tree is kept.
packages=$(production_packages)
run rm -rf "$root/node_modules"
if [ -n "$packages" ]; then
  run mkdir -p "$root/node_modules"
  for extra in .bin .package-lock.json; do
    [ -e "$src/node_modules/$extra" ] && run cp -a "$src/node_modules/$extra" "$root/node_modules/$extra"
  done
  if [ "$dry_run" -eq 1 ]; then
    echo "would copy $(echo "$packages" | wc -l) production packages of $src/node_modules"
  else
    for package in $packages; do
      mkdir -p "$root/$(dirname "$package")"
      cp -a "$src/$package" "$root/$package"
    done
  fi
  run npm prune --omit=dev --no-audit --no-fund --prefix "$root" --loglevel=error
  # Links of the build-time packages' commands point nowhere now.
  run find "$root/node_modules/.bin" -xtype l -delete
else
  echo "npm not found: keeping development dependencies in $root/node_modules"
  run cp -a "$src/node_modules" "$root/node_modules"
fi
if [ -d "$src/native/build" ]; then
  run mkdir -p "$root/native"
  run rm -rf "$root/native/build"
  run cp -a "$src/native/build" "$root/native/build"
fi

# Entry points that run the bundled Node.js, whatever node is on PATH, on their
# single-file bundle (npm run build:bundle): a third less start-up CPU and
# ~12 MB less resident memory than loading ~1,400 modules. The agent runs with
# its Node.js flags and environment defaults (agent/node-flags.ts, kept in step
# by a test); a value the operator sets (systemd Environment=) wins.
agentd_node_flags='--max-semi-space-size=1 --heap-growing-percent=25'
printf '#!/bin/sh\n: "${MALLOC_ARENA_MAX:=2}"\nexport MALLOC_ARENA_MAX\nexec %s/node_modules/.bin/node %s %s/dist/bundle/agentd.js "$@"\n' \
  "$prefix" "$agentd_node_flags" "$prefix" | write_file "$root/bin/agentd" 0755
printf '#!/bin/sh\nexec %s/node_modules/.bin/node %s/dist/bundle/agentctl.js "$@"\n' "$prefix" "$prefix" | write_file "$root/bin/agentctl" 0755
run mkdir -p "$destdir/usr/local/bin"
run ln -sfn "$prefix/bin/agentctl" "$destdir/usr/local/bin/agentctl"
# Bash completion (bash-completion loads it on demand). Run from $src: under DESTDIR, $prefix does not exist yet.
"$src/node_modules/.bin/node" "$src/dist/bundle/agentctl.js" completion bash | write_file "$destdir/usr/local/share/bash-completion/completions/agentctl" 0644

sed "s#/opt/agentd#$prefix#g" "$src/systemd/agentd.service" | write_file "$destdir/etc/systemd/system/agentd.service" 0644
write_file "$destdir/usr/lib/sysusers.d/agentd.conf" 0644 <"$src/systemd/sysusers.conf"
if [ -e "$destdir/etc/agentd/agentd.toml" ]; then
  echo "keeping existing $destdir/etc/agentd/agentd.toml"
else
  write_file "$destdir/etc/agentd/agentd.toml" 0640 <"$src/systemd/agentd.toml"
fi

if [ -z "$destdir" ]; then
  if command -v systemd-sysusers >/dev/null 2>&1; then
    run systemd-sysusers /usr/lib/sysusers.d/agentd.conf
  else
    getent group agentd >/dev/null || run groupadd --system agentd
    getent passwd agentd >/dev/null || run useradd --system --gid agentd --home-dir /var/lib/agentd --shell /usr/sbin/nologin agentd
  fi
  run chgrp agentd /etc/agentd/agentd.toml
  if [ -d /run/systemd/system ]; then
    run systemctl daemon-reload
  fi
fi
echo "done. Start it with: systemctl enable --now agentd; then: agentctl status"
