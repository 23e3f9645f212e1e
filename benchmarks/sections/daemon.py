# SPDX-License-Identifier: Apache-2.0
"""Daemon footprint: the loader handover's A/B, resident memory against a
Python exporter's floor, scrapes under a password flood."""
from __future__ import annotations

import statistics

from ._format import machine, med_range, ms


def daemon_loader_ab(raw: dict) -> str:
    before, after = raw["before_in_process_bcc"], raw["after_loader_handover"]
    fields = (("start to READY=1", lambda d: d["ready_s"], ".2f", " s"),
              ("resident memory, idle", lambda d: d["rss_kib_idle"] / 1024, ".1f", " MiB"),
              ("resident memory, after the scrapes", lambda d: d["rss_kib_after_load"] / 1024, ".1f", " MiB"),
              ("scrape latency p50", lambda d: d["scrape_ms"]["p50"], ".2f", " ms"),
              ("scrape latency p99", lambda d: d["scrape_ms"]["p99"], ".2f", " ms"),
              ("scrape latency max", lambda d: d["scrape_ms"]["max"], ".1f", " ms"),
              ("scrapes per second (4 threads)", lambda d: d["scrapes_per_s"], ".0f", ""),
              ("idle CPU share over 10 s", lambda d: 100 * d["idle_cpu_share"], ".1f", "%"))
    rows = ["| | before | after | after / before |", "|---|---:|---:|---:|"]
    for label, get, fmt, unit in fields:
        b, a = [get(d) for d in before], [get(d) for d in after]
        rows.append(f"| {label} | {med_range(b, fmt)}{unit} | {med_range(a, fmt)}{unit} | "
                    f"{statistics.median(a) / statistics.median(b):.2f} |")
    rows += ["", f"Medians [min..max] of {len(before)} and {len(after)} rounds; epyc-vm, 2026-11-30. "
                 f"Command: {raw['command']}."]
    return "\n".join(rows)


def memory_floor(raw: dict) -> str:
    """The daemon's resident memory against the least a Python exporter holds."""
    bare = raw["bare"]["summary"]["peak_rss_mib"]["median"]
    floor = raw["exporter"]["summary"]["peak_rss_mib"]["median"]
    daemon = statistics.median(d["rss_kib_idle"] for d in raw["daemon"]["after_loader_handover"]) / 1024
    rows = ["| process | resident MiB (median) |", "|---|--:|",
            f"| a bare Python (`{raw['bare']['command']}`), peak | {bare:.1f} |",
            f"| Python importing what an exporter needs (`{raw['exporter']['command']}`), peak | {floor:.1f} |",
            f"| the daemon, idle, default probe set (the loader A/B's 'after' rounds) | {daemon:.1f} |", "",
            f"The daemon is x{daemon / floor:.2f} that floor. Floors: {len(raw['bare']['runs'])} runs each "
            f"(`python3 benchmarks/whole_command.py -- COMMAND`), epyc-vm, {raw['bare']['taken']}; the daemon's "
            "figure is from `nttrace bench daemon`, epyc-vm, 2026-11-30."]
    return "\n".join(rows)


def auth_under_attack(raw: dict) -> str:
    """benchmarks/auth_under_attack.py: an authorised scraper's latency
    while a flood of wrong passwords runs, and what the daemon held."""
    s, d, a = raw["scraper"], raw["daemon"], raw["attack"]
    ok = s["codes"].get("200", 0)
    rows = ["| authorised scrapes | ok | p50 ms | p99 ms | max ms | daemon RSS MiB, before / peak / after | threads, peak |",
            "|--:|--:|--:|--:|--:|--:|--:|",
            f"| {s['n']} | {ok} | {ms(s['p50_ms'])} | {ms(s['p99_ms'])} | {ms(s['max_ms'])} | "
            f"{d['rss_kib_before'] / 1024:.1f} / {d['rss_kib_max'] / 1024:.1f} / {d['rss_kib_after'] / 1024:.1f} | "
            f"{d['threads_max']} |", ""]
    answers = ", ".join(f"{n} {k}" for k, n in sorted(a["responses"].items(), key=lambda kv: -kv[1]))
    rows.append(f"{raw['setup']['connections']} attacking connections for {raw['setup']['seconds']:.0f} s "
                f"({a['per_s']:.0f} requests/s; answers: {answers}); bcrypt cost {raw['setup']['bcrypt_cost']}; "
                f"{machine(raw)}, load average {raw['host']['loadavg_before'][0]:.1f} before; "
                f"at {raw['commit']}. Command: `{raw['command']}`.")
    return "\n".join(rows)


LOADER_AB = "daemon-loader-ab-epyc-vm-2026-11-30.json"
BLOCKS = {
    "daemon-loader-ab": (daemon_loader_ab, [LOADER_AB]),
    "memory-floor": (memory_floor, {"bare": "python-floor-bare-epyc-vm-2026-12-01.json",
                                     "exporter": "python-floor-exporter-imports-epyc-vm-2026-12-01.json",
                                     "daemon": LOADER_AB}),
    "auth-under-attack": (auth_under_attack, ["auth-under-attack-xeon-vm-2026-12-05-09666ac.json"]),
}
