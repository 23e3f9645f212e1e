# SPDX-License-Identifier: Apache-2.0
"""`nttrace daemon`: the probes, the vmstat counters and the perf counters
exported for Prometheus, run as a systemd service (Type=notify).

Lifecycle: bind the listen socket (a port in use fails before anything is
attached), have a loader process compile and attach the probes and hand
over their descriptors (nttrace.daemon.loader: the daemon never holds bcc or LLVM),
READY=1, then serve. SIGHUP reloads the
config: a bad one is logged and the running one kept; a good one attaches
new probes and detaches dropped ones, leaving the others and their counters
alone. SIGTERM/SIGINT detach everything and exit. The handlers only set
flags and wake the main loop (nttrace.daemon.signals: a handler that takes
a lock can deadlock the main thread).
"""
from __future__ import annotations

import logging
import sys
import threading
import time

from prometheus_client import CollectorRegistry

from nttrace.daemon import config, loader, sd_notify, signals
from nttrace.errors import EXIT_OK, NttraceError, UsageError
from nttrace.exporters.bpf_program_collector import BpfProgramCollector
from nttrace.exporters.http_server import MetricsServer, ServerCollector
from nttrace.exporters.perf_collector import PerfCollector
from nttrace.exporters.prometheus_collector import ProbeCollector
from nttrace.exporters.vmstat_collector import VmstatCollector
from nttrace.exporters.web_config_collector import WebConfigCollector
from nttrace.exporters.web_config_reload import WebConfigSource
from nttrace.kernel import bpf_stats
from nttrace.kernel.metadata import KernelMetadata
from nttrace.probes import PROBES
from nttrace.capabilities.report import Capability
from nttrace.tracing.tracer import Tracer

log = logging.getLogger("nttrace")
RELOAD_WATCHDOG_S = 300   # the watchdog's bound while a reload compiles and attaches


def _setup_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger().setLevel(level.upper())


class CollectorSlot:
    """A collector the registry keeps for the daemon's whole life, holding
    one that a reload replaces: collect() and swap() exclude each other, so
    a scrape never reads a collector that a reload has closed."""

    def __init__(self, collector):
        self._collector = collector
        self._lock = threading.Lock()

    def collect(self):
        with self._lock:
            return list(self._collector.collect())

    def swap(self, collector):
        with self._lock:
            old, self._collector = self._collector, collector
        return old


class Daemon:
    def __init__(self, cfg: config.Config, config_path: str | None, listen_override: str | None,
                 web_config_override: str | None = None):
        self.cfg = cfg
        self.config_path = config_path
        self.listen_override = listen_override
        self.web_config_override = web_config_override
        self.requests = signals.Requests()   # stop and reload, as SIGTERM/SIGINT and SIGHUP ask
        self.registry = CollectorRegistry(auto_describe=False)
        self.tracer = None
        self.perf = None
        self.server = None
        self.stats = None      # nttrace.kernel.bpf_stats.Hold: run-time statistics on while the daemon runs

    # -- lifecycle -------------------------------------------------------------
    @staticmethod
    def probe_options(names: list[str]) -> dict:
        """The probes' options in the daemon: no per-call records (it exports
        aggregates only, and reads no perf buffer)."""
        return {n: {**PROBES[n].options_for(names, False), "records": False} for n in names}

    def start(self) -> None:
        t0 = time.monotonic()
        self.server = MetricsServer(self.cfg, self.registry, self.health, WebConfigSource(self.cfg.web_config_file))
        try:
            self.stats = bpf_stats.enable()
            if self.stats.restored:
                log.warning("bpf stats: %s", self.stats.restored)
            if self.stats.on:
                log.info("bpf run-time statistics on (%s) while the daemon runs", self.stats.method)
            else:
                log.warning("bpf run-time statistics not turned on: %s", self.stats.reason)
            names = list(self.cfg.probes)
            options = self.probe_options(names)
            loaded = loader.load(names, options, stop=lambda: self.requests.stop)
            attached = [n for n, h in loaded.probes.items() if h.status["status"] == "attached"]
            log.info("loader ran %.2fs (its peak %.0f MiB, released): attached %s", loaded.seconds,
                     loaded.peak_rss_kib / 1024, ", ".join(attached) or "nothing")
            caps = {k: Capability.from_json(v) for k, v in loaded.caps.items()}
            try:
                self.tracer = Tracer(names, options, caps=caps, meta=KernelMetadata.from_json(loaded.meta),
                                     handle_signals=False).attach(handed=loaded.probes)
            finally:
                loaded.close()      # what the tracer did not adopt
            self.perf = PerfCollector(self.cfg.perf)
        except BaseException:
            self.shutdown()
            raise
        self.registry.register(ProbeCollector(self.tracer))
        self.registry.register(BpfProgramCollector(self.tracer, self.stats))
        self.registry.register(VmstatCollector())
        self.perf_slot = CollectorSlot(self.perf)
        self.registry.register(self.perf_slot)
        self.registry.register(WebConfigCollector(lambda: self.server.httpd.web))
        self.registry.register(ServerCollector(self.server))
        self.server.start()
        for name, st in self.tracer.status.items():
            if st["status"] == "attached":
                log.info("probe %s attached via %s", name, st["via"])
            else:
                log.warning("probe %s unavailable: %s", name, st["reason"])
        self.ready_s = time.monotonic() - t0
        log.info("listening on %s (ready in %.2fs)", self.cfg.listen, self.ready_s)
        sd_notify.notify(f"READY=1\nSTATUS=exporting {', '.join(self.attached())} on {self.cfg.listen}")

    def attached(self) -> list[str]:
        return [n for n, s in self.tracer.status.items() if s["status"] == "attached"]

    def health(self) -> dict:
        status = self.tracer.status_view() if self.tracer else {}
        up = [n for n, s in status.items() if s["status"] == "attached"]
        state = "ok" if status and len(up) == len(status) else ("degraded" if up else "down")
        stats = {"method": self.stats.method, "reason": self.stats.reason} if self.stats else {}
        return {"status": state, "probes": status, "perf": self.perf.status if self.perf else {},
                "bpf_stats": stats, "config": self.cfg.source, "listen": self.cfg.listen}

    def run(self) -> None:
        watchdog = sd_notify.watchdog_interval_s()
        next_ping = time.monotonic()
        while not self.requests.wait(0.2):
            # Per-call records (memmap) are not exported; keep their buffers drained.
            self.tracer.poll(timeout_ms=0)
            self.tracer.records()
            if self.requests.take_reload():
                self.reload()
            if watchdog and time.monotonic() >= next_ping:
                sd_notify.notify("WATCHDOG=1")
                next_ping = time.monotonic() + watchdog

    def reload(self) -> None:
        try:
            new = config.load(self.config_path, self.listen_override, self.web_config_override)
            web = self.server.httpd.web
            if new.web_config_file != self.cfg.web_config_file:
                # TLS may go on or off: each connection is wrapped by the config it reads
                web = WebConfigSource(new.web_config_file)
        except UsageError as exc:
            log.error("reload rejected, keeping the running configuration: %s", exc)
            return
        # A reload compiles new probes in this thread, so the main loop pings
        # no watchdog meanwhile: widen the watchdog for the reload (sd_notify's
        # WATCHDOG_USEC=) and put it back after: a compile (slow under
        # emulation) can outlast a short WatchdogSec, and systemd would kill
        # the daemon mid-reload.
        watchdog = sd_notify.watchdog_interval_s()
        widen = f"\nWATCHDOG=1\nWATCHDOG_USEC={RELOAD_WATCHDOG_S * 1_000_000}" if watchdog else ""
        sd_notify.notify(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}{widen}")
        try:
            names = list(new.probes)
            changes = loader.set_probes(self.tracer, names, self.probe_options(names),
                                        stop=lambda: self.requests.stop)
        except loader.Stopped:
            log.info("reload: stopped while the new probes were compiled; not changed")
            changes = {"added": [], "removed": []}
        except NttraceError as exc:
            log.error("reload: probes not changed, keeping the running set: %s", exc)
            changes = {"added": [], "removed": []}
        finally:
            if watchdog:
                sd_notify.notify(f"WATCHDOG_USEC={int(watchdog * 2 * 1_000_000)}\nWATCHDOG=1")
        for name in changes["added"]:
            st = self.tracer.status[name]
            log.info("reload: probe %s %s", name, st["status"] + (f" via {st['via']}" if "via" in st else f": {st.get('reason')}"))
        for name in changes["removed"]:
            log.info("reload: probe %s detached", name)
        if new.perf != self.cfg.perf:
            fresh = PerfCollector(new.perf)
            old = self.perf_slot.swap(fresh)   # a scrape reads the old group or the new one
            self.perf = fresh
            old.close()
            log.info("reload: perf groups now %s", ", ".join(new.perf) or "none")
        if web is not self.server.httpd.web:
            self.server.httpd.web = web           # one reference: a connection reads the old source or the new
            log.info("reload: web configuration now from %s", new.web_config_file or "none (plain HTTP, no users)")
        if new.listen != self.cfg.listen:
            log.warning("reload: listen changed; it takes effect on restart")
        _setup_logging(new.log_level)
        self.cfg = new
        sd_notify.notify("READY=1\nSTATUS=reloaded: " + ", ".join(self.attached()))

    def shutdown(self) -> None:
        """Stop serving, detach, close the perf groups; logs what each took
        (each step is logged as it starts, so a stop that hangs says where)."""
        sd_notify.notify("STOPPING=1")
        took = {}
        t0 = time.monotonic()
        if self.server is not None:
            log.info("stopping: the HTTP server")
            self.server.stop()
            took["http"] = time.monotonic() - t0
        if self.tracer is not None:
            log.info("stopping: detaching %s", ", ".join(self.tracer.probes))
            detached = self.tracer.detach()
            for name, why in self.tracer.detach_errors.items():
                log.warning("detaching %s: %s (its descriptors were closed regardless)", name, why)
            took["probes"] = sum(detached.values())
            took.update({f"probe {n}": s for n, s in detached.items()})
        if self.perf is not None:
            t1 = time.monotonic()
            self.perf.close()
            took["perf"] = time.monotonic() - t1
        if self.stats is not None:
            self.stats.close()      # after the programs: their last runs are counted
        log.info("stopped in %.2fs (%s)", time.monotonic() - t0, ", ".join(f"{k} {v:.2f}s" for k, v in took.items()))


def main(args) -> int:
    web_override = getattr(args, "web_config_file", None)
    if args.check_config:
        cfg = config.load(args.check_config, args.listen, web_override)
        web = WebConfigSource(cfg.web_config_file)
        print(f"{args.check_config}: OK (listen {cfg.listen}, probes {', '.join(cfg.probes)}, "
              f"perf {', '.join(cfg.perf) or 'none'}"
              + (f", web config {cfg.web_config_file}: TLS {'on' if web.tls else 'off'}, "
                 f"{len(web.current().users.hashes)} user(s)" if cfg.web_config_file else "") + ")")
        return EXIT_OK
    cfg = config.load(args.config, args.listen, web_override)
    _setup_logging(cfg.log_level)
    d = Daemon(cfg, args.config, args.listen, web_override)
    d.requests.install()
    try:
        d.start()
    except loader.Stopped as exc:     # SIGTERM/SIGINT during start-up: not an error (systemd's stop)
        log.info("%s; exiting", exc)
        return EXIT_OK
    try:
        d.run()
    finally:
        d.shutdown()
    return EXIT_OK
