#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed for the dashboard's
# browser test (cmd/gate/e2e_ui_browser_test.go, driven by chromedp).
# Exits 0 when one is found or was installed, 1 otherwise. The Makefile's
# test target fails on 1 under CI and goes on elsewhere (the test skips).
set -u
for name in chromium chromium-browser google-chrome headless-shell; do
	if command -v "$name" >/dev/null 2>&1; then
		exit 0
	fi
done
if [ -n "${ASYNCGATE_CHROMIUM:-}" ] && [ -x "$ASYNCGATE_CHROMIUM" ]; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-chromium: no Chromium and no apt-get to install it with" >&2
	exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO="sudo -n"
	else
		echo "ensure-chromium: no Chromium, and installing it needs root" >&2
		exit 1
	fi
fi
echo "ensure-chromium: installing Debian's chromium package" >&2
export DEBIAN_FRONTEND=noninteractive
# Another apt or dpkg run (a second test run installing the same package, the
# system's own updates) holds dpkg's lock for a while: wait for it instead of
# failing at once.
APT="$SUDO apt-get -o DPkg::Lock::Timeout=600"
if ! $APT install -y --no-install-recommends chromium >/dev/null 2>&1; then
	$APT update >/dev/null 2>&1 && $APT install -y --no-install-recommends chromium >/dev/null 2>&1 || {
		echo "ensure-chromium: apt-get install chromium failed" >&2
		exit 1
	}
fi
command -v chromium >/dev/null 2>&1
