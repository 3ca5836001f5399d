#!/bin/sh
# rss.sh INTERVAL PID... — print "seconds pid VmRSS_kB VmHWM_kB" for each PID every INTERVAL
# seconds (from /proc/PID/status) until none of them runs.
set -eu
interval=${1:?usage: rss.sh INTERVAL PID...}
shift
start=$(date +%s)
while :; do
	alive=0
	now=$(($(date +%s) - start))
	for pid in "$@"; do
		[ -r "/proc/$pid/status" ] || continue
		alive=1
		awk -v t="$now" -v p="$pid" '/^VmRSS:/ {r=$2} /^VmHWM:/ {h=$2} END {if (r != "") print t, p, r, h}' "/proc/$pid/status"
	done
	[ "$alive" = 1 ] || exit 0
	sleep "$interval"
done
