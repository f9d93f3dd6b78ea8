#!/usr/bin/env bash
# Debian packages the container, PostgreSQL and browser tests need: a Docker engine and debootstrap (the
# runner's images are built and run for real), Podman with its init (catatonit) and network stack
# (netavark), for the sandbox's tests on the second engine (marker podman), a PostgreSQL server (the
# queue's scale-out path), Chromium (the leaderboard's browser test), and Slurm with munge (a one-node
# cluster for the sweep's and the workers' Slurm jobs). Installs only what is missing; needs root or sudo.
set -euo pipefail
packages=(docker.io debootstrap podman catatonit netavark postgresql chromium slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
