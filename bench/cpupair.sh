#!/usr/bin/env bash
# cpupair.sh RUNS 'COMMAND A' 'COMMAND B' runs A and B alternately RUNS
# times and prints each run's user + system CPU seconds (its children's
# included), then the medians and A/B. CPU seconds, not wall time: on a
# shared machine the CPU a fixed amount of work spends moves far less than
# its wall time. Give each command a fixed amount of work (-benchtime Nx)
# and a test binary built beforehand, so that no build is counted:
#
#   go test -c -o /tmp/after.test ./sqlite
#   bench/cpupair.sh 5 "/tmp/after.test -test.run '^$' -test.bench 'BenchmarkAppend/queued/writers=8' -test.benchtime 20000x" \
#                      "/tmp/after.test -test.run '^$' -test.bench 'BenchmarkAppend/durable=false/writers=8' -test.benchtime 20000x"
set -euo pipefail
if [ $# -ne 3 ]; then
	echo "usage: $0 RUNS 'COMMAND A' 'COMMAND B'" >&2
	exit 2
fi
runs=$1
cpu() {
	local me=$BASHPID t0 t1
	t0=$(awk '{print $14+$15+$16+$17}' /proc/$me/stat)
	bash -c "$1" >/dev/null
	# Children's times reach the cutime and cstime of this (sub)shell once waited for.
	t1=$(awk '{print $14+$15+$16+$17}' /proc/$me/stat)
	awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f\n", (b-a)/hz}'
}
median() { sort -g | awk '{v[NR]=$1} END{print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
a=() b=()
for i in $(seq "$runs"); do
	a+=("$(cpu "$2")")
	b+=("$(cpu "$3")")
	echo "run $i: A ${a[-1]} s, B ${b[-1]} s"
done
ma=$(printf '%s\n' "${a[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
awk -v a="$ma" -v b="$mb" 'BEGIN{printf "median: A %.2f s, B %.2f s, A/B %.2f\n", a, b, a/b}'
