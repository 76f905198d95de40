#!/usr/bin/env bash
# CI: build the desktop bundle, then run the built artifact's selftest (not the source tree's):
# once normally, once with networking blocked for the process. Both start from an empty home, so
# the model must come from the bundle itself.
set -euo pipefail
cd "$(dirname "$0")/.."

bash packaging/build.sh
app="$PWD/dist/localchat/localchat"
du -sh dist/localchat

selftest() {  # selftest LABEL [WRAPPER...]: run the bundle's selftest in a fresh home, check the model's origin
  local label=$1 home out
  shift
  home=$(mktemp -d)
  out="$home/selftest.txt"
  echo "== selftest, $label"
  if ! env LOCALCHAT_HOME="$home/home" HF_HOME="$home/hf" "$@" "$app" selftest | tee "$out"; then
    echo "ci-selftest: the $label selftest failed" >&2
    exit 1
  fi
  grep -q "from the bundle" "$out" || { echo "ci-selftest: the $label selftest did not use the bundled model" >&2; exit 1; }
  rm -rf "$home"
}

# Brings loopback up inside a new network namespace (it starts down), then runs the command.
# The bundle's own server listens on loopback; nothing else is reachable.
lo_up='import fcntl, os, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))
os.execvp(sys.argv[1], sys.argv[1:])'
if command -v python3 >/dev/null; then py=python3; else py=.venv/bin/python; fi

selftest "online"

if command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
  selftest "offline (unshare -n)" unshare -n "$py" -c "$lo_up"
elif command -v unshare >/dev/null && unshare -rn true 2>/dev/null; then
  selftest "offline (unshare -rn)" unshare -rn "$py" -c "$lo_up"
else
  echo "ci-selftest: WARNING: cannot block networking here (unshare -n needs root or user namespaces);" \
       "the offline run only points every proxy at a closed port and forbids the package index." >&2
  selftest "offline (best effort, network NOT blocked)" \
    http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 \
    HTTPS_PROXY=http://127.0.0.1:9 no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost \
    HF_HUB_OFFLINE=1 PIP_NO_INDEX=1
fi
echo "ci-selftest: the bundle passed its selftest online and offline"
