#!/bin/sh
# The system programs plangate's sandbox and its tests use: bubblewrap (bash's sandbox), git
# (plan worktrees), util-linux's setpriv/unshare (the unprivileged and PID 1 sandbox tests) and
# PostgreSQL's server (the tests start a throwaway cluster on a unix socket: tests/pg.py), and
# node with npm (a Node project's .plangate/setup.sh and npm test: docs/environments.md).
# `make test` runs this first: as root with apt-get it installs what is missing (Debian's
# packages); otherwise it says what is missing and the tests that need it fail with the fix.
missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
command -v git >/dev/null 2>&1 || missing="$missing git"
{ command -v setpriv >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1; } \
    || missing="$missing util-linux"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 \
    || missing="$missing postgresql"
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing:$missing" >&2
    { apt-get update -qq && apt-get install -y -qq $missing >/dev/null; } \
        || echo "could not install$missing; the tests that need them will fail" >&2
else
    echo "missing:$missing (install them, e.g. apt-get install$missing); the tests that need them will fail" >&2
fi
exit 0
