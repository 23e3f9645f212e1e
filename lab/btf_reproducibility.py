"""Is pahole's BTF of one vmlinux the same from run to run? Encodes it twice
on one thread and twice with -j2, as lab.build_cost's hash and the kernel's
own link do, and prints each BTF's size and hash and how far the two runs of
each mode differ in what they describe (lab.build_cost.btf_dump_lines).

    python3 -m lab.btf_reproducibility /var/cache/nttrace-kernel/work/base/build/vmlinux
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from lab.build_cost import btf_dump_lines, encode_btf


def _version(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[0]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python3 -m lab.btf_reproducibility VMLINUX (a vmlinux with DWARF)", file=sys.stderr)
        return 2
    missing = [tool for tool in ("pahole", "bpftool") if shutil.which(tool) is None]
    if missing:
        print(f"lab.btf_reproducibility: needs {' and '.join(missing)} (Debian: dwarves, bpftool)", file=sys.stderr)
        return 2
    vmlinux = Path(argv[0])
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d} {_version(['pahole', '--version'])}, "
          f"{_version(['bpftool', 'version'])}, vmlinux: {vmlinux} ({vmlinux.stat().st_size} bytes)")
    differing = {}
    with tempfile.TemporaryDirectory(prefix="nttrace-btf-") as tmp:
        for mode, jobs in (("one-thread", 1), ("j2", 2)):
            dumps = []
            for i in (1, 2):
                btf = Path(tmp) / f"{mode}-{i}.btf"
                print(f"$ pahole -J {'-j2 ' if jobs > 1 else ''}--btf_gen_floats --btf_encode_detached={btf.name} vmlinux")
                encode_btf(vmlinux, btf, jobs)
                lines = btf_dump_lines(btf)
                dumps.append(lines)
                print(f"  bytes {btf.stat().st_size}, sha256 {hashlib.sha256(btf.read_bytes()).hexdigest()[:16]}; "
                      f"dump without ids, sorted: {len(lines)} lines, "
                      f"sha256 {hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:16]}")
            a, b = (Counter(d) for d in dumps)     # sorted lines: what one has and the other lacks
            differing[mode] = (a - b).total() + (b - a).total()
    print(f"one-thread runs' dumps differ in {differing['one-thread']} lines; j2 runs' in {differing['j2']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
