#!/usr/bin/env bash
# Makes sure mailpit (a real SMTP + POP3 server with an HTTP API) is
# installed for the mail tests (host/mail/mailtest starts it on free ports).
# Exits 0 when one is found or was installed, 1 otherwise. The Makefile's
# test target fails on 1 under CI and goes on elsewhere (the tests skip).
set -u
VERSION=v1.33.1
if [ -n "${ASYNCGATE_MAILPIT:-}" ] && [ -x "$ASYNCGATE_MAILPIT" ]; then
	exit 0
fi
if command -v mailpit >/dev/null 2>&1; then
	exit 0
fi
GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1; then
	echo "ensure-mailpit: no mailpit and no go to install it with" >&2
	exit 1
fi
BIN="$($GO env GOPATH)/bin"
if [ -x "$BIN/mailpit" ]; then
	exit 0
fi
echo "ensure-mailpit: installing github.com/axllent/mailpit@$VERSION into $BIN" >&2
if ! GOFLAGS= "$GO" install "github.com/axllent/mailpit@$VERSION" >/dev/null 2>&1; then
	echo "ensure-mailpit: go install github.com/axllent/mailpit@$VERSION failed" >&2
	exit 1
fi
[ -x "$BIN/mailpit" ]
