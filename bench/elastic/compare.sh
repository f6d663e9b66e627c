#!/bin/bash
# Compares two ways a job of 4 ranks gets past the death of one: gocoll's
# shrink (grun --elastic 2: the survivors go on in place) and torchrun's
# restart of every rank (torchrun --max_restarts 1), on the same program,
# examples/elastic, whose rank 2 SIGKILLs itself at step 40. Rounds
# alternate the two. For each it prints the time from the kill to the
# survivors' (or the restarted ranks') first collective after it, and the
# whole run's wall time; then min / median / max over the rounds.
#
#   bash bench/elastic/compare.sh [ROUNDS]      (default 5)
#
# Needs torchrun on PATH (Debian's python3-torch; .ci/install installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/" ./cmd/grun ./examples/elastic
command -v torchrun >/dev/null || { echo "compare.sh: torchrun not found (apt-get install python3-torch)" >&2; exit 1; }

# resume OUT: milliseconds from the kill to the last rank's first
# collective after it.
resume() {
	awk '/kills itself/ { match($0, /t=[0-9]+/); k = substr($0, RSTART+2, RLENGTH-2) }
	     /going on from step|first step done/ { match($0, /t=[0-9]+/); r = substr($0, RSTART+2, RLENGTH-2); if (r > last) last = r }
	     END { if (k == "" || last == "") exit 1; printf "%.1f\n", (last - k) / 1e6 }' "$1"
}

stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%.2f / %.2f / %.2f", v[1], v[int((NR+1)/2)], v[NR] }'; }

echo "round  method                         kill->first collective (ms)   wall (s)"
for i in $(seq "$rounds"); do
	for m in shrink restart; do
		start=$(date +%s.%N)
		if [ $m = shrink ]; then
			(cd "$dir" && ./grun -n 4 --elastic 2 ./elastic -kill 2@40) >"$dir/out" 2>&1
		else
			(cd "$dir" && torchrun --standalone --nproc_per_node 4 --max_restarts 1 -r 2 -t 2 \
				--no_python ./elastic -kill 2@40) >"$dir/out" 2>&1
		fi
		wall=$(echo "$(date +%s.%N) - $start" | bc)
		done=$(grep -c "150 of 150 steps" "$dir/out" || true)
		ms=$(resume "$dir/out") || { cat "$dir/out" >&2; echo "compare.sh: no kill or no resume in round $i ($m)" >&2; exit 1; }
		printf "%5d  %-30s %28s %10.2f\n" "$i" "$m ($done ranks finished)" "$ms" "$wall"
		echo "$ms" >>"$dir/$m.ms"
		echo "$wall" >>"$dir/$m.wall"
	done
done
for m in shrink restart; do
	printf "%-8s kill->first collective min/median/max: %s ms; wall: %s s\n" "$m" "$(stats <"$dir/$m.ms")" "$(stats <"$dir/$m.wall")"
done
