#!/bin/sh
# `make demo`'s set-up: install what the demo needs when it can (root with apt), or say in
# one line what is missing. Without full isolation the demo still runs and shows the
# honest outcome: the benign pull request is unproven, never clean.
set -eu
PYTHON=${PYTHON:-python3}
# Where nft, ip and setpriv live; not on an ordinary user's PATH on Debian.
SBIN=${SBIN-/usr/local/sbin:/usr/sbin:/sbin}

have() { PATH="$PATH${SBIN:+:$SBIN}" command -v "$1" >/dev/null 2>&1; }

basic=""
have git || basic="$basic git"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || basic="$basic python3-venv"
isolation=""
have ip || isolation="$isolation iproute2"
have nft || isolation="$isolation nftables"
have setpriv || isolation="$isolation util-linux"
have bwrap || isolation="$isolation bubblewrap"
need="$basic$isolation"

if [ "$(id -u)" = 0 ]; then
  if [ -n "$need" ]; then
    if ! have apt-get; then
      echo "make demo: missing$need, and no apt-get to install them with" >&2
      exit 1
    fi
    echo "make demo: installing$need"
    apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  fi
  exit 0
fi

if [ -n "$basic" ]; then
  echo "make demo needs$basic: sudo apt-get install$basic" >&2
  exit 1
fi
# Without root, full isolation where the kernel lets an ordinary user make namespaces
# (cujo_action/net/ns/rootless.py): the tools, and one namespace made here to ask the kernel.
if [ -z "$isolation" ] && have unshare && have nsenter &&
  PATH="$PATH${SBIN:+:$SBIN}" unshare --user --map-root-user --net true 2>/dev/null; then
  echo "make demo: not root: full isolation without root (unprivileged user namespaces)"
  exit 0
fi
how="sudo make demo"
[ -z "$isolation" ] || how="sudo apt-get install$isolation && $how"
echo "make demo: not root, so the sandbox runs with partial isolation and the benign pull request can be at best unproven; for full isolation: $how"
