#!/usr/bin/env bash
# spread.sh: the run-to-run spread of one collbench row, for one or more
# collbench builds, under grun's default binding and --bind-to none.
#
#   bash bench/spread.sh [-boost] [-runs N] [-grun GRUN] [-n RANKS] COLLBENCH... [-- COLLBENCH-FLAGS]
#
# Each run is a fresh job (`GRUN [--bind-to none] -n RANKS COLLBENCH
# FLAGS -format csv`); the builds take turns, run by run, so that a change
# of load falls on all of them alike. The flags default to issue 44's
# case, `-transport shm -min 64M -max 64M`. For each binding and build it
# prints the busbw (GB/s) of the last row of every run, then min, median,
# max and max/min, and the load average before and after.
#
# -boost runs it all in a session of its own whose autogroup has nice -20
# (Linux, root or CAP_SYS_NICE): on a machine that other work keeps busy,
# the jobs then get nearly all of the CPUs while the others still run.
set -euo pipefail

if [[ ${1:-} == -boost ]]; then
	shift
	# shellcheck disable=SC2016 # $$ is the new session's shell
	exec setsid bash -c 'echo -20 >/proc/$$/autogroup && exec nice -n -20 bash "$0" "$@"' "$0" "$@"
fi

runs=10 grun=grun ranks=2
builds=()
while (($#)); do
	case $1 in
	-runs) runs=$2; shift 2 ;;
	-grun) grun=$2; shift 2 ;;
	-n) ranks=$2; shift 2 ;;
	--) shift; break ;;
	-*) echo "spread.sh: unknown flag $1" >&2; exit 2 ;;
	*) builds+=("$1"); shift ;;
	esac
done
flags=("$@")
if ((${#flags[@]} == 0)); then
	flags=(-transport shm -min 64M -max 64M)
fi
if ((${#builds[@]} == 0)); then
	echo "usage: spread.sh [-boost] [-runs N] [-grun GRUN] [-n RANKS] COLLBENCH... [-- COLLBENCH-FLAGS]" >&2
	exit 2
fi

echo "# $(date -u +%FT%TZ) load before: $(cut -d' ' -f1-3 /proc/loadavg), autogroup: $(cat /proc/self/autogroup 2>/dev/null || echo none)"
echo "# $grun -n $ranks BUILD ${flags[*]} -format csv, $runs runs per build and binding"
for bind in default none; do
	bindflags=()
	[[ $bind == none ]] && bindflags=(--bind-to none)
	declare -A got=()
	for ((r = 1; r <= runs; r++)); do
		for b in "${builds[@]}"; do
			row=$("$grun" "${bindflags[@]}" -n "$ranks" "$b" "${flags[@]}" -format csv | tail -n 1)
			got[$b]+="$(cut -d, -f8 <<<"$row") "
		done
	done
	for b in "${builds[@]}"; do
		# shellcheck disable=SC2086 # one figure a word
		printf '%s\n' ${got[$b]} | sort -g | awk -v bind="$bind" -v b="$b" '
			{ v[NR] = $1; all = all " " $1 }
			END {
				med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
				printf "bind %-7s %-24s busbw min %.3f median %.3f max %.3f  max/min %.2f  (sorted:%s)\n", bind, b, v[1], med, v[NR], v[NR] / v[1], all
			}'
	done
	unset got
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
