#!/bin/sh
# Installs every Debian package shardnode builds, tests and runs with.
# Idempotent: when everything is present it touches nothing and needs no network.
set -eu
PKGS="build-essential cmake pkg-config libopenblas-openmp-dev libopenblas-dev libjansson-dev
libpcre2-dev libmsgpack-dev libevent-dev wireguard-go iproute2 iptables clang libclang-rt-14-dev libssl-dev wireguard-tools bible-kjv python3 python3-numpy python3-torch python3-cryptography chromium faketime"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
