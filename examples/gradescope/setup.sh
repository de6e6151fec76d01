#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image from the zip (unpacked in
# /autograder/source). It installs what attnlab grades with (g++ for the CPU backend, bubblewrap for the
# box every submission runs in, Python >= 3.11) and attnlab itself with the extras of attnlab.conf, and
# makes the secret seed (README, "Seeds").
#
# attnlab comes from, in this order: $ATTNLAB_SOURCE (a URL pip fetches, or a folder of attnlab's
# source), one attnlab-*.whl in the zip (`pip wheel --no-deps -w . PATH-TO-ATTNLAB` makes it), or a folder
# attnlab/ in the zip holding attnlab's source.
#
# The seed: a file attnlab-seed in the zip is the course's secret, kept (the same inputs in every image
# and every regrade; ship one to grade Gradescope and a CI job alike). Without one, a random secret is
# made here. Either way the file is readable by root alone (mode 600), and no submission can reach it:
# each runs in a box that maps in only the toolchain and its own job folder.
#
# Environment, for trying the kit outside Gradescope (tests/test_gradescope_kit.py does):
#   AUTOGRADER_ROOT       the folder that stands for /autograder (default /autograder)
#   ATTNLAB_VENV          the virtual environment attnlab is installed in (default $AUTOGRADER_ROOT/attnlab-venv)
#   ATTNLAB_SKIP_INSTALL  1: install nothing (no apt-get, no pip), use the attnlab already in $ATTNLAB_VENV
set -euo pipefail

ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
VENV="${ATTNLAB_VENV:-$ROOT/attnlab-venv}"
SEED_FILE="$SOURCE/attnlab-seed"

fail() {
    echo "setup.sh: $*" >&2
    exit 1
}

[ -f "$SOURCE/attnlab.conf" ] || fail "no attnlab.conf in the zip: zip it beside setup.sh and run_autograder"
EXTRAS=triton
# shellcheck source=attnlab.conf
source "$SOURCE/attnlab.conf"
[ -n "${LAB:-}" ] || fail "attnlab.conf sets no LAB: write LAB=lab2 (or lab1, lab3)"

at_least_3_11() {
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

python_3_11() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null && at_least_3_11 "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

attnlab_requirement() {
    local wheels
    if [ -n "${ATTNLAB_SOURCE:-}" ]; then
        if [ -d "$ATTNLAB_SOURCE" ]; then
            echo "$(cd "$ATTNLAB_SOURCE" && pwd)[$EXTRAS]"
        else
            echo "attnlab[$EXTRAS] @ $ATTNLAB_SOURCE"
        fi
        return 0
    fi
    shopt -s nullglob
    wheels=("$SOURCE"/attnlab-*.whl)
    shopt -u nullglob
    if [ "${#wheels[@]}" -gt 1 ]; then
        fail "${#wheels[@]} attnlab wheels in the zip (${wheels[*]##*/}): keep one"
    elif [ "${#wheels[@]}" -eq 1 ]; then
        echo "${wheels[0]}[$EXTRAS]"
    elif [ -f "$SOURCE/attnlab/pyproject.toml" ]; then
        echo "$SOURCE/attnlab[$EXTRAS]"
    else
        fail "no attnlab to install: put its wheel in the zip (pip wheel --no-deps -w . PATH-TO-ATTNLAB), or its source as attnlab/, or set ATTNLAB_SOURCE"
    fi
}

if [ "${ATTNLAB_SKIP_INSTALL:-}" != 1 ]; then
    REQUIREMENT="$(attnlab_requirement)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends g++ bubblewrap ca-certificates python3 python3-venv python3-pip
    if ! PYTHON="$(python_3_11)"; then
        # Ubuntu 22.04's python3 is 3.10: its packaged python3.11 where the release has one, else a Python
        # that uv (PyPI's `uv`) installs.
        apt-get install -y --no-install-recommends python3.11 python3.11-venv || true
        if ! PYTHON="$(python_3_11)"; then
            python3 -m pip install --quiet uv
            python3 -m uv python install 3.12
            PYTHON="$(python3 -m uv python find 3.12)"
        fi
    fi
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install "$REQUIREMENT"
fi
[ -x "$VENV/bin/attnlab" ] || fail "no attnlab at $VENV/bin/attnlab"
at_least_3_11 "$VENV/bin/python" || fail "$VENV/bin/python is older than Python 3.11"
"$VENV/bin/attnlab" starter "$LAB" >/dev/null || fail "attnlab.conf: LAB=$LAB is not a lab attnlab knows"

if [ -e "$SEED_FILE" ]; then
    echo "setup.sh: the course's seed file is kept (attnlab-seed, from the zip)"
else
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$SEED_FILE")
    echo "setup.sh: a secret seed was made (attnlab-seed); ship your own in the zip to keep it across images"
fi
chmod 600 "$SEED_FILE"

if [ "${ATTNLAB_SKIP_INSTALL:-}" != 1 ]; then
    # Whether this container can make the box, run g++ and (with DEVICE=gpu) reach a GPU: said now, in
    # the build log, rather than by the first submission. A run that cannot grade publishes no score.
    "$VENV/bin/attnlab" doctor --device "$DEVICE" ||
        echo "setup.sh: attnlab doctor says this machine cannot grade (above); every submission will fail until it can" >&2
fi
