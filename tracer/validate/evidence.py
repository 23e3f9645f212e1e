"""A check's evidence as a typed record: one class per check whose evidence
other code reads (the A/B, its HTML page, the lab's checks), each with one
`to_json` and one `from_json`, and the figures a reviewer compares computed
here, once, from what the check recorded.

`from_json` reads every format nttrace has written (tests/fixtures/recorded
holds reports of each): a memmap report's calls as a list of records or, as
some older captures hold them, the text of that list.

`figures()` is what `validate --baseline/--current` compares: each Figure
has a role (statistics.ROLES): one `primary` figure per scenario carries the
test at alpha; `secondary` ones are tested with the report's multiplicity
correction; `descriptive` ones are shown, never tested. PRIMARY_REASON says
why each primary figure was chosen.

Checks without a class here keep their evidence as a dict (`Untyped`): all
their numbers are descriptive figures.
"""
from __future__ import annotations

import ast
import statistics
from dataclasses import asdict, dataclass, field, fields

# Why the memmap scenario's primary figure is the fastest rebind of a boot:
# it was chosen on the lab's host-clock A/A and A/B boots (benchmarks/
# lab-aa-base-*-2026-12-01, lab-ab-base-nt-v3-*-2026-12-01, quiet and beside
# a compiler), where its boot-to-boot CoV was 2.0-24.6%, against 1.8-63.6%
# for the median rebind and 3.3-74.3% for the mean: a rebind slowed by
# anything else on the host or the other vCPU moves the median and mean,
# while the fastest of 30 is the path's own cost. The lab now times its
# guests in instructions (icount), where every figure is steady: in its A/A
# (benchmarks/lab-aa-base-icount-*) the fastest rebind's CoV is
# 0.0031-0.024%, the median's 0.001-0.0034%. tests/unit/test_ab_statistics.py
# derives both from those files again. The slowest rebind of a boot is an
# outlier by construction: described, never tested.
PRIMARY_REASON = {
    "kernel.memmap_latency": "the fastest rebind of each boot, the path's own cost (contention slows some "
                             "rebinds of a boot, rarely all); its boot-to-boot CoV: 0.0031-0.024% in the lab's "
                             "icount A/A, where guest time counts instructions (the median's 0.001-0.0034%); "
                             "2.0-24.6% on the host clock (boots of 2026-12-01), where it was chosen as the "
                             "steadiest (the median's 1.8-63.6%)",
    "kernel.demotion_nt": "the mean migrate_pages() call of MR_DEMOTION: the demotion path's own cost",
    "probe.": "the fastest call of a run, as for the memmap rebinds: the path's own cost, which contention "
              "slows in some calls of a run but rarely in all",
}


@dataclass
class Figure:
    metric: str
    label: str
    value: object                          # a number, a string or None
    samples: list[float] | None = None     # what the value summarises, within the run
    stat: str | None = None                # how: median, mean, min, max
    role: str = "descriptive"              # statistics.ROLES; categories are never tested


def _spread(values: list[float]) -> dict | None:
    """min/median/max/mean of a series (None when it is empty)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values),
            "mean": statistics.mean(values)}


# -- kernel.memmap_latency -----------------------------------------------------
@dataclass
class MemmapCall:
    """One memmap_init_zone_device() call as the memmap probe recorded it."""
    latency_ns: int
    nr_pages: int
    pages_initialised: int
    pgmap_type: str = ""
    vmemmap_shift: int = 0
    page_ref_sets: int | None = None
    template_path: str | None = None
    rest: dict = field(default_factory=dict)      # every other field of the record, kept as it came

    @property
    def ms(self) -> float:
        return self.latency_ns / 1e6

    @property
    def ns_per_page(self) -> float | None:
        return self.latency_ns / self.pages_initialised if self.pages_initialised else None

    @property
    def page_ref_sets_per_page(self) -> float | None:
        if self.page_ref_sets is None or not self.pages_initialised:
            return None
        return self.page_ref_sets / self.pages_initialised

    @classmethod
    def from_json(cls, d: dict) -> "MemmapCall":
        known = {f.name for f in fields(cls)} - {"rest"}
        kw = {k: d[k] for k in known if k in d and d[k] is not None}
        return cls(**kw, rest={k: v for k, v in d.items() if k not in known and k not in _DERIVED_CALL})

    def to_json(self) -> dict:
        out = {**self.rest, "latency_ns": self.latency_ns, "nr_pages": self.nr_pages,
               "pages_initialised": self.pages_initialised, "pgmap_type": self.pgmap_type,
               "vmemmap_shift": self.vmemmap_shift, "ns_per_page": self.ns_per_page}
        if self.page_ref_sets is not None:
            out.update(page_ref_sets=self.page_ref_sets, page_ref_sets_per_page=self.page_ref_sets_per_page)
        if self.template_path is not None:
            out["template_path"] = self.template_path
        return out


_DERIVED_CALL = {"ns_per_page", "page_ref_sets_per_page"}


@dataclass
class MemmapEvidence:
    """kernel.memmap_latency: the first bind and the rebinds of one namespace,
    each call as the probe saw it, and the native model's cost per descriptor."""
    CHECK = "kernel.memmap_latency"
    namespace: str
    mode: str
    calls: list[MemmapCall]
    device: str = ""
    driver: str = ""
    runs: int = 0
    via: str | None = None
    bind_wall_s: list[float] = field(default_factory=list)
    native_model_ns_per_descriptor: float | None = None
    kernel_lines: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # figures an older report holds without the calls behind them
    stored: dict = field(default_factory=dict)

    # what the check computes, in one place
    @property
    def first(self) -> MemmapCall | None:
        return self.calls[0] if self.calls else None

    @property
    def rebinds(self) -> list[MemmapCall]:
        return self.calls[1:]

    def rebind_ms(self) -> list[float]:
        return [c.ms for c in self.rebinds]

    def rebind_ns_per_page(self) -> list[float]:
        return [c.ns_per_page for c in self.rebinds if c.ns_per_page is not None]

    def template_paths(self) -> list[str]:
        return sorted({c.template_path for c in self.calls if c.template_path})

    def derived(self) -> dict:
        """The figures the report carries beside the calls."""
        if not self.calls:
            return dict(self.stored)
        first, rest = self.first, self.rebinds
        out = {"first_bind_ms": first.ms, "first_bind_ns_per_page": first.ns_per_page,
               "rebind_ms": _spread(self.rebind_ms()), "rebind_ns_per_page": _spread(self.rebind_ns_per_page()),
               "rebind_avg_ms": statistics.mean(self.rebind_ms()) if rest else None,
               "ns_per_page": statistics.mean(self.rebind_ns_per_page()) if rest else first.ns_per_page,
               "pgmap_type": first.pgmap_type, "vmemmap_shift": first.vmemmap_shift,
               "nr_pages": first.nr_pages, "pages_initialised": first.pages_initialised}
        if self.native_model_ns_per_descriptor:
            out["native_model_ns_per_descriptor"] = self.native_model_ns_per_descriptor
            if out["ns_per_page"]:
                out["kernel_over_native"] = out["ns_per_page"] / self.native_model_ns_per_descriptor
        if self.template_paths():
            out["template_path"] = self.template_paths()
            out["page_ref_sets_per_page"] = _spread([c.page_ref_sets_per_page for c in self.calls])
        return out

    def to_json(self) -> dict:
        out = {"namespace": self.namespace, "device": self.device, "driver": self.driver, "mode": self.mode,
               "runs": self.runs, "bind_wall_s": self.bind_wall_s, "calls": [c.to_json() for c in self.calls],
               "via": self.via}
        if self.kernel_lines:
            out["kernel_lines"] = self.kernel_lines
        if self.warnings:
            out["warnings"] = self.warnings
        out.update(self.derived())
        return out

    @classmethod
    def from_json(cls, d: dict) -> "MemmapEvidence":
        calls = d.get("calls") or []
        if isinstance(calls, str):          # the text of the list, as some older captures hold it
            calls = ast.literal_eval(calls)
        calls = [MemmapCall.from_json(c) for c in calls if isinstance(c, dict) and c.get("latency_ns")]
        stored_keys = ("first_bind_ms", "first_bind_ns_per_page", "rebind_ms", "rebind_ns_per_page",
                       "rebind_avg_ms", "ns_per_page", "pgmap_type", "vmemmap_shift", "nr_pages",
                       "pages_initialised", "template_path", "page_ref_sets_per_page", "kernel_over_native")
        return cls(namespace=d.get("namespace", ""), mode=d.get("mode", ""), calls=calls,
                   device=d.get("device", ""), driver=d.get("driver", ""), runs=d.get("runs", 0),
                   via=d.get("via"), bind_wall_s=list(d.get("bind_wall_s") or []),
                   native_model_ns_per_descriptor=d.get("native_model_ns_per_descriptor"),
                   kernel_lines=list(d.get("kernel_lines") or []), warnings=list(d.get("warnings") or []),
                   stored={} if calls else {k: d[k] for k in stored_keys if k in d})

    def subject(self) -> str:
        return self.mode

    def figures(self) -> list[Figure]:
        d = self.derived()
        ms = self.rebind_ms() if len(self.calls) >= 3 else None
        ns = self.rebind_ns_per_page() if len(self.calls) >= 3 else None
        spread_ms, spread_ns = d.get("rebind_ms") or {}, d.get("rebind_ns_per_page") or {}
        tag = f" (n={spread_ms['n']})" if spread_ms.get("n") else ""
        out = [Figure("first_bind_ms", "first bind, ms", d.get("first_bind_ms"), role="secondary"),
               Figure("first_bind_ns_per_page", "first bind, ns/page", d.get("first_bind_ns_per_page"))]
        for stat in ("min", "median", "max"):
            out.append(Figure(f"rebind_ms.{stat}", f"rebinds{tag}, {stat} ms", spread_ms.get(stat), ms, stat,
                              role={"min": "primary", "median": "secondary"}.get(stat, "descriptive")))
        out.append(Figure("rebind_avg_ms", f"rebinds{tag}, mean ms", d.get("rebind_avg_ms"), ms, "mean",
                          role="secondary"))
        for stat in ("min", "median", "max"):
            out.append(Figure(f"rebind_ns_per_page.{stat}", f"rebinds, {stat} ns/page", spread_ns.get(stat), ns, stat))
        paths = d.get("template_path")
        if paths:
            out.append(Figure("template_path", "memmap path (page_ref_set)", ", ".join(paths)))
            out.append(Figure("page_ref_sets_per_page.median", "page_ref_set events per page",
                              (d.get("page_ref_sets_per_page") or {}).get("median")))
        return out


# -- kernel.demotion_nt --------------------------------------------------------
@dataclass
class DemotionEvidence:
    """kernel.demotion_nt: the migrate probe's MR_DEMOTION rows, the copy
    routines that ran, and the kernel's own count of demoted pages."""
    CHECK = "kernel.demotion_nt"
    rows: list[dict]
    copy: dict = field(default_factory=dict)      # the copy routines' probe snapshot: rows, untraceable, notes
    rest: dict = field(default_factory=dict)      # pgdemote_delta, the run, ... as the check wrote them
    copy_key: str = ""                            # the key the check wrote that snapshot under

    @property
    def pages(self) -> int:
        return sum(r.get("succeeded", 0) for r in self.rows)

    @property
    def nt_pages(self) -> int:
        return sum(r.get("succeeded", 0) for r in self.rows if r.get("nt"))

    def modes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.get("mode", "?")] = out.get(r.get("mode", "?"), 0) + r.get("succeeded", 0)
        return out

    def routines(self) -> dict[str, int]:
        return {r["routine"]: r.get("calls", 0) for r in self.copy.get("rows") or [] if "routine" in r}

    def mean_call_us(self) -> float | None:
        lat = [r["latency_ns"]["mean"] for r in self.rows if isinstance(r.get("latency_ns"), dict)
               and r["latency_ns"].get("mean") is not None]
        calls = sum(r.get("calls", 0) for r in self.rows)
        return sum(lat) / len(lat) / 1000.0 if lat and calls else None

    def to_json(self) -> dict:
        return {**self.rest, "rows": self.rows, **({self.copy_key: self.copy} if self.copy_key else {})}

    @classmethod
    def from_json(cls, d: dict) -> "DemotionEvidence":
        # the copy routines' snapshot: the entry whose rows name routines (the
        # check files it under that probe's name)
        key = next((k for k, v in d.items() if isinstance(v, dict)
                    and any(isinstance(r, dict) and "routine" in r for r in v.get("rows") or [])), "")
        return cls(rows=list(d.get("rows") or []), copy=dict(d.get(key) or {}),
                   rest={k: v for k, v in d.items() if k not in ("rows", key)}, copy_key=key)

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        modes = ", ".join(sorted(m for m in self.modes() if m != "?")) or None
        routines = ", ".join(f"{k} {v}" for k, v in self.routines().items() if v) or None
        out = [Figure("mode", "demotion migrate mode", modes),
               Figure("nt_share_pct", "NT share of demoted pages, %",
                      (100.0 * self.nt_pages / self.pages) if self.pages else None),
               Figure("probe_succeeded_pages", "pages demoted", self.rest.get("probe_succeeded_pages")),
               Figure("copy_routines", "copy routines (calls)", routines),
               Figure("migrate_pages_mean_us", "migrate_pages() mean, us", self.mean_call_us(), role="primary")]
        untraceable = self.copy.get("untraceable")
        if untraceable:
            out.append(Figure("copy_untraceable", "copy routines not traceable", ", ".join(sorted(untraceable))))
        return out


# -- kernel.nt_support, kernel.migrate_observed ---------------------------------
@dataclass
class NtSupportEvidence:
    CHECK = "kernel.nt_support"
    nt_revision: str | None
    rest: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {**self.rest, "nt_revision": self.nt_revision}

    @classmethod
    def from_json(cls, d: dict) -> "NtSupportEvidence":
        return cls(d.get("nt_revision"), {k: v for k, v in d.items() if k != "nt_revision"})

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        return [Figure("nt_revision", "NT demotion revision", self.nt_revision)]


@dataclass
class MigrateObservedEvidence:
    CHECK = "kernel.migrate_observed"
    rows: list[dict]
    compaction_calls: int | None = None
    rest: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {**self.rest, "rows": self.rows}
        if self.compaction_calls is not None:
            out["compaction_calls"] = self.compaction_calls
        return out

    @classmethod
    def from_json(cls, d: dict) -> "MigrateObservedEvidence":
        return cls(list(d.get("rows") or []), d.get("compaction_calls"),
                   {k: v for k, v in d.items() if k not in ("rows", "compaction_calls")})

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        rows = [r for r in self.rows if r.get("reason") == "MR_COMPACTION"]
        modes = ", ".join(sorted({f"{r['mode']}={r['mode_value']}" if r.get("mode_value") is not None
                                  else r["mode"] for r in rows})) or None
        return [Figure("compaction_modes", "compaction migrate modes", modes),
                Figure("compaction_calls", "compaction calls", self.compaction_calls)]


# -- probe.<name>: a probe's declared exercise ---------------------------------
@dataclass
class ExerciseEvidence:
    """probe.<name>: the probe's workload run once while it was attached
    alone: what the workload returned (the kernel's count among it), the
    probe's rows and count, whether they agree, and each call it recorded."""
    CHECK = "probe."                   # a prefix: one check per probe
    probe: str
    workload: str = ""
    via: str | None = None
    run: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    seen: int | None = None
    expected: int | None = None
    source: str | None = None
    agrees: bool | None = None
    calls: list[dict] = field(default_factory=list)

    def latencies_ms(self) -> list[float]:
        return [c["latency_ns"] / 1e6 for c in self.calls if c.get("latency_ns") is not None]

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("probe", "workload", "via", "run", "rows", "seen", "expected",
                                              "source", "agrees", "calls")}

    @classmethod
    def from_json(cls, d: dict) -> "ExerciseEvidence":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        ms = self.latencies_ms()
        spread = _spread(ms) or {}
        samples = ms if len(ms) >= 2 else None
        tag = f" (n={len(ms)})" if ms else ""
        return [Figure("calls.min_ms", f"calls{tag}, fastest ms", spread.get("min"), samples, "min", role="primary"),
                Figure("calls.median_ms", f"calls{tag}, median ms", spread.get("median"), samples, "median",
                       role="secondary"),
                Figure("calls.max_ms", f"calls{tag}, slowest ms", spread.get("max"), samples, "max"),
                Figure("pages", "pages the probe counted", self.seen),
                Figure("agrees", f"agrees with {self.source or 'the kernel'}",
                       None if self.agrees is None else ("yes" if self.agrees else "no"))]


# -- everything else ----------------------------------------------------------
@dataclass
class Untyped:
    """A check whose evidence nothing else reads: kept as the check wrote it;
    each of its numbers a descriptive figure."""
    data: dict

    def to_json(self) -> dict:
        return self.data

    @classmethod
    def from_json(cls, d: dict) -> "Untyped":
        return cls(dict(d))

    def subject(self) -> str:
        return ""

    def figures(self) -> list[Figure]:
        return [Figure(k, k, v) for k, v in _numbers(self.data)]


def _numbers(evidence, prefix=""):
    if isinstance(evidence, dict):
        for key, value in evidence.items():
            yield from _numbers(value, f"{prefix}{key}.")
    elif isinstance(evidence, (int, float)) and not isinstance(evidence, bool):
        yield prefix.rstrip("."), float(evidence)


TYPES = {c.CHECK: c for c in (MemmapEvidence, DemotionEvidence, NtSupportEvidence, MigrateObservedEvidence)}


def of(check: dict):
    """The typed evidence of one check as a report holds it (JSON)."""
    ev = check.get("evidence") or {}
    if not isinstance(ev, dict):
        ev = {}
    cid = str(check.get("id", ""))
    cls = ExerciseEvidence if cid.startswith(ExerciseEvidence.CHECK) else TYPES.get(cid, Untyped)
    return cls.from_json(ev)


def as_dict(ev) -> dict:
    """JSON of a typed record or of a plain dict (checks that return one)."""
    return ev.to_json() if hasattr(ev, "to_json") else (asdict(ev) if hasattr(ev, "__dataclass_fields__") else ev)
