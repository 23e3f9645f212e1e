#!/bin/bash
# Is pahole's BTF of one vmlinux the same from run to run, on one thread and with -j2?
set -e
V=${1:?vmlinux}
T=$(mktemp -d)
echo "# $(date -u +%F) $(pahole --version), $(bpftool version | head -1), vmlinux: $V ($(stat -c %s $V) bytes)"
for mode in "one-thread" "j2"; do
  for i in 1 2; do
    flags="--btf_gen_floats"; [ $mode = j2 ] && flags="-j2 $flags"
    echo "\$ pahole -J $flags --btf_encode_detached=$mode-$i.btf vmlinux"
    pahole -J $flags --btf_encode_detached=$T/$mode-$i.btf $V
    n=$(bpftool btf dump file $T/$mode-$i.btf | sed -E 's/^\[[0-9]+\] //; s/type_id=[0-9]+//g' | sort | tee $T/$mode-$i.norm | wc -l)
    echo "  bytes $(stat -c %s $T/$mode-$i.btf), sha256 $(sha256sum < $T/$mode-$i.btf | cut -c1-16); dump without ids, sorted: $n lines, sha256 $(sha256sum < $T/$mode-$i.norm | cut -c1-16)"
  done
done
echo "one-thread runs' dumps differ in $(diff $T/one-thread-1.norm $T/one-thread-2.norm | grep -c '^[<>]' || true) lines; j2 runs' in $(diff $T/j2-1.norm $T/j2-2.norm | grep -c '^[<>]' || true)"
rm -r $T
