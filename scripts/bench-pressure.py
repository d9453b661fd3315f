#!/usr/bin/env python3
"""`make bench-pressure`: the queue and the send pipeline under the pressure that a shared
production database puts on them, measured (scripts/bench-pressure.sh runs this).

    bench-pressure.py --bin BIN_DIR [--mode full|reduced] [--parts queue,pipeline,chaos]

full (the default) runs three parts, each on a database of its own made afresh:

  queue     `herald-bench harness` alone (PostgresQueue's real enqueue and executor; 16 workers,
            JOB_WORK_MS=1): a short depth-target run finds its maximum completion rate (and, with
            more such runs, its peak at 64 and 256 workers, beside one `herald-bench queue`
            drain: `queue.peak.workers_N`, `queue.drain`), then one adapter process is fed
            `ENQUEUE <n>` lines at 60% of it through the phases
  pipeline  herald-api -> queue -> herald-worker -> nh-emulator (release builds, as bench-send
            starts them): batches of notifications without telemetry posted at 60% of the
            maximum measured first (a batch drained while the worker runs), through the phases
  chaos     on the same pipeline after its phases, the load still running: backend kills,
            300 idle connections, the server full, PostgreSQL restart, worker SIGKILL, each
            once less than a second of the offered load waits (the backlog before it drained)

The phases of `queue` and `pipeline`: warm-up (not reported), clean (2 min), held_xid (an
idle-in-transaction session holding an XID: `BEGIN; SELECT txid_current();`, 5 min), recovery,
readers_pause (four REPEATABLE READ readers counting the hot tables, 1 s pause between scans,
3 min), recovery, readers_loop (the same back to back, 3 min), recovery, overload (1.5x the
maximum, 2 min), recovery (each recovery 2 min), then a drain.

Figures, one line each, on standard output, `bench pressure.PART.PHASE.FIGURE VALUE UNIT`:
  completion (jobs/s or sends/s; queue: the adapter's jobs finished per second; pipeline: hub
  sends answered 2xx per second), pickup_p50 and pickup_p99 (ms, over the items created in the
  window, from the database after the run; queue: a job's enqueue to its claim, which the
  adapter's claim_p50/p99 samples also measure, but each over its last 30 s; pipeline: a
  notification's commit to the start of its first hub call), completion_ratio
  and p99_ratio (over clean), the same per minute (`.minuteN.`), `TABLE.dead_tuples` and
  `TABLE.size_mb` at the phase's end (pgqueue.jobs and pgqueue.job_history; the pipeline also
  notifications, hub_sends, notification_outcomes), `recovered_s` for a recovery (seconds from its
  start until completion >= 0.95 of clean and p99 <= 1.5x clean), and for every phase
  `cpu.GROUP` in cores (user + system time from /proc over the phase): in the reader phases the
  readers' backends; the adapter (or herald-api and herald-worker), their backends, the rest of
  PostgreSQL, its processes that ended within the phase (`postgres_exited`: the readers' parallel
  workers, autovacuum workers), the machine.
  Chaos cells, `bench pressure.chaos.CELL.FIGURE`: settled_s (how long the backlog before the
  cell took to drain), accepted, final, lost, p99_ms during the fault,
  longest_gap_s without a completed send (from the fault's start to the end of its recovery),
  recovered_s (from the fault's end until a 5 s mean of completed sends >= 0.9 of clean),
  answers_503, 503_without_retry_after, hung (no answer within BENCH_PRESSURE_CLIENT_TIMEOUT_S),
  slow (answered after HERALD_DATABASE_WAIT_SECONDS + 1 s), longest_answer_s; worker_kill also
  restart_s (from the SIGKILL until the new worker logged that it started).
Then the issue's acceptance bars as `target NAME VALUE OP GOAL met|missed`. Progress on stderr;
every process's log in .data/bench-pressure/, and each adapter's samples as NAME.samples.jsonl.

reduced (make test, scripts/test.sh): about two minutes, the adapter and the pipeline side by
side (each on its own database) at low fixed rates (debug builds, a loaded machine): clean, held XID (30 s),
backend kills (20 s), recovery, then it asserts correctness only: every accepted notification
final, no job left, the processes answer again. Exits non-zero on a failure.

Knobs (environment):
  BENCH_PRESSURE_SCALE (1)        every phase's duration times this (0.1: a run of ~7 minutes);
                                  no phase below 10 s
  BENCH_PRESSURE_WARMUP_S (20) _CLEAN_S (120) _HELD_S (300) _RECOVERY_S (120) _READERS_S (180)
  _OVERLOAD_S (120) _PROBE_S (30, the queue's maximum) _FAULT_S (60, each chaos cell's fault)
  _CELL_RECOVERY_S (60) _RESTART_S (8, PostgreSQL down)     seconds, override the scale
  BENCH_PRESSURE_LOAD (0.6)       the offered rate as a share of the measured maximum
  BENCH_PRESSURE_OVERLOAD (1.5)   the overload phase's rate as a share of the maximum
  BENCH_PRESSURE_QUEUE_RATE, BENCH_PRESSURE_PIPELINE_RATE   a fixed offered rate (skips the probe)
  BENCH_PRESSURE_PROBE_COUNT (20000)  notifications of the pipeline's maximum run
  BENCH_PRESSURE_IDLE (300)       idle connections of the `idle` cell
  BENCH_PRESSURE_CLIENT_TIMEOUT_S (10)  a request unanswered this long counts as hung
  BENCH_PRESSURE_SAMPLE_S (5)     the adapter's SAMPLE_EVERY_S
  BENCH_PRESSURE_CELLS (all)      the chaos cells to run, by name: kills,idle,full,restart,worker_kill
  BENCH_PRESSURE_DRAIN_S (300)    the longest wait for the pipeline's last sends; what is still
                                  waiting then is reported (`waiting_after_drain`) and lost
  BENCH_PRESSURE_BULK_BOUND (20)  the pipeline API's bound on the bulk lane, in seconds
                                  (`HERALD_QUEUE_LANE_BOUNDS=bulk=N`; 0: none): past it a
                                  batch is refused with `429`, counted per phase (`refused`)
  BENCH_HISTORY (50000)           finished sends seeded into the pipeline's tables first

Python 3 standard library only; PostgreSQL through psql.
"""
import argparse
import json
import os
import queue as queues
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos"))
import chaos  # noqa: E402  (the fault harness: its database, process and system helpers)
from chaos import DATABASE_WAIT_SECONDS, SCHEDULING_SECONDS, Database, Failure, check, http, wait_for  # noqa: E402

ROOT = chaos.ROOT
LOGS = os.path.join(chaos.DATA, "bench-pressure")
APP = "bench-pressure"  # application_name of this script's own sessions: the kills spare them
CLK = os.sysconf("SC_CLK_TCK")
QUEUE_TABLES = ["pgqueue.jobs", "pgqueue.job_history"]
SEND_TABLES = ["notifications", "hub_sends", "notification_outcomes"]
FIGURES = {}
SLOW_STATEMENT_MS = 250  # a watched window names its slowest statement when it ran this long


def progress(message):
    print(f"bench-pressure: {message}", file=sys.stderr, flush=True)


def figure(name, value, unit):
    FIGURES[name] = value
    shown = "-" if value is None else (f"{value:.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value))
    print(f"bench pressure.{name} {shown} {unit}", flush=True)


def knob(name, default, cast=float):
    raw = os.environ.get("BENCH_PRESSURE_" + name, "")
    return cast(raw) if raw else default


def duration(name, default):
    raw = os.environ.get(f"BENCH_PRESSURE_{name}_S", "")
    return float(raw) if raw else max(10.0, default * knob("SCALE", 1.0))


# ---------------------------------------------------------------- sessions


class Session:
    """One psql process kept open: `query` runs SQL on it and returns its rows. A session the
    server dropped (a restart) is started again by the next query, within its timeout."""

    def __init__(self, url, app=APP):
        self.url, self.app = url, app
        self.lock = threading.Lock()
        self.process = None
        self.lines = None

    def _start(self):
        env = dict(os.environ, PGAPPNAME=self.app, PGCONNECT_TIMEOUT="5", PGOPTIONS="-c client_min_messages=warning")
        self.process = subprocess.Popen([chaos.find_psql(), "-X", "-qtA", self.url], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                        env=env, start_new_session=True)
        self.lines = queues.Queue()
        stdout, lines = self.process.stdout, self.lines

        def pump():
            for line in stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)
        threading.Thread(target=pump, daemon=True).start()

    def query(self, sql, timeout=60):
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                if self.process is None or self.process.poll() is not None:
                    self._start()
                try:
                    self.process.stdin.write(sql.rstrip().rstrip(";") + ";\n\\echo __end__\n")
                    self.process.stdin.flush()
                    rows = []
                    while True:
                        line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
                        if line is None:
                            raise OSError("the session ended")
                        if line == "__end__":
                            return [r.split("|") for r in rows if r]
                        rows.append(line)
                except (OSError, queues.Empty) as error:
                    self.close()
                    if time.monotonic() > deadline:
                        raise Failure(f"a query did not answer within {timeout}s ({error}): {sql[:80]}")
                    time.sleep(0.5)

    def value(self, sql, timeout=60):
        rows = self.query(sql, timeout)
        return rows[0][0] if rows and rows[0] else None

    def close(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


# ---------------------------------------------------------------- CPU


def ticks(pid, reaped=False):
    """A process's user + system time, or (`reaped`) that of its children that ended and it waited for."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        first = 13 if reaped else 11
        return int(fields[first]) + int(fields[first + 1])
    except (OSError, IndexError, ValueError):
        return 0


def system_backends(session):
    """The pids of the database's client backends that are not this script's own sessions."""
    return [int(r[0]) for r in session.query(
        f"SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        f"AND backend_type = 'client backend' AND application_name NOT LIKE '{APP}%'")]


def postmaster_pid():
    with open(os.path.join(chaos.DATA, "postgres", "postmaster.pid")) as f:
        return int(f.readline())


def postgres_pids():
    postmaster = postmaster_pid()
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == postmaster:
                        children.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return [postmaster] + children


def machine_ticks():
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return sum(int(x) for x in fields[:3]) + sum(int(x) for x in fields[5:8])  # all but idle and iowait


def steal_ticks():
    """The machine's CPU time taken by the hypervisor for others (`steal` in /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8])
    except (OSError, IndexError, ValueError):
        return 0


class CpuMeter:
    """CPU of groups of processes over a phase, in cores: `groups()` returns {name: [pid]} at the
    start and the end; a process counts in the group it was in at the end. `postgres_exited` is
    PostgreSQL's processes that ended within the phase, counted whole (the postmaster's reaped
    children): the parallel workers of the readers' scans, autovacuum workers."""

    def __init__(self, groups):
        self.groups = groups
        self.started = time.monotonic()
        self.before = {pid: ticks(pid) for pids in groups().values() for pid in pids}
        self.exited = ticks(postmaster_pid(), reaped=True)
        self.machine = machine_ticks()

    def cores(self):
        wall = time.monotonic() - self.started
        result = {}
        for name, pids in self.groups().items():
            result[name] = sum(max(0, ticks(pid) - self.before.get(pid, 0)) for pid in pids) / CLK / wall
        result["postgres_exited"] = (ticks(postmaster_pid(), reaped=True) - self.exited) / CLK / wall
        result["machine"] = (machine_ticks() - self.machine) / CLK / wall
        return result


# ---------------------------------------------------------------- pressure


class HeldXid:
    """An idle-in-transaction session holding an XID, which pins the vacuum horizon."""

    def __init__(self, url):
        self.session = Session(url, APP + "-held")
        self.xid = self.session.value("BEGIN; SELECT txid_current()")

    def stop(self):
        self.session.query("ROLLBACK")
        self.session.close()


class StatementWatch:
    """Every 0.1 s, the longest-running statement of the system under test (the script's own
    sessions left out) and whether one of them waits on a lock; and the longest interval between
    two of its own looks, which grows when the machine stalls every process; and the CPU time the
    hypervisor took from the machine. A p99 that rises with no slow statement and no lock wait is
    not the database's."""

    EVERY = 0.1

    def __init__(self, url):
        self.session = Session(url, APP + "-watch")
        # (time, longest statement in ms, a lock wait, its text and wait event, steal ticks)
        self.samples = []
        self.stopping = threading.Event()
        sql = ("WITH s AS (SELECT query_start, query, wait_event_type, wait_event FROM pg_stat_activity "
               "WHERE datname = current_database() AND backend_type = 'client backend' AND state = 'active' "
               f"AND application_name NOT LIKE '{APP}%' AND pid <> pg_backend_pid()) "
               "SELECT coalesce(round(extract(epoch FROM clock_timestamp() - min(query_start)) * 1000), 0), "
               "count(*) FILTER (WHERE wait_event_type = 'Lock'), "
               "(SELECT translate(left(regexp_replace(query, '\\s+', ' ', 'g'), 100), '|', '/') || ' [' "
               "|| coalesce(wait_event_type || ':' || wait_event, 'on CPU') || ']' FROM s ORDER BY query_start LIMIT 1) "
               "FROM s")

        def run():
            while not self.stopping.is_set():
                try:
                    rows = self.session.query(sql, timeout=30)
                    row = rows[0]
                    self.samples.append((time.time(), float(row[0]), int(row[1]) > 0, "|".join(row[2:]),
                                         steal_ticks()))
                except (Failure, OSError, IndexError, ValueError, queues.Empty):
                    pass
                self.stopping.wait(self.EVERY)
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=60)
        self.session.close()

    def window(self, start, end):
        """(slowest statement ms, samples with a lock wait, longest gap between looks ms, the
        slowest statement's text and what it waited on when seen longest, cores stolen over the
        window, the most stolen over any 5 s of it)."""
        inside = [s for s in self.samples if start <= s[0] < end]
        if not inside:
            return None, None, None, None, None, None
        gaps = [b[0] - a[0] for a, b in zip(inside, inside[1:])]
        slowest = max(inside, key=lambda s: s[1])

        def stolen(a, b):
            return (b[4] - a[4]) / CLK / (b[0] - a[0]) if b[0] > a[0] else None
        peak, j = None, 0
        for sample in inside:
            while j < len(inside) and inside[j][0] - sample[0] < 5:
                j += 1
            if j == len(inside):
                break
            cores = stolen(sample, inside[j])
            peak = cores if peak is None else max(peak, cores)
        mean = stolen(inside[0], inside[-1])
        return (slowest[1], sum(1 for s in inside if s[2]), round(max(gaps, default=0) * 1000), slowest[3],
                None if mean is None else round(mean, 3), None if peak is None else round(peak, 3))


class Readers:
    """Four REPEATABLE READ readers counting every hot table in one transaction per scan, with
    `pause` seconds between scans (0: back to back)."""

    def __init__(self, url, tables, pause, count=4):
        self.stopping = threading.Event()
        self.scans = 0
        self.lock = threading.Lock()
        self.sessions = [Session(url, APP + "-reader") for _ in range(count)]
        self.pids = [int(s.value("SELECT pg_backend_pid()")) for s in self.sessions]
        scan = ("BEGIN ISOLATION LEVEL REPEATABLE READ; "
                + " ".join(f"SELECT count(*) FROM {t};" for t in tables) + " COMMIT")

        def run(session):
            while not self.stopping.is_set():
                try:
                    session.query(scan, timeout=600)
                except Failure:
                    return
                with self.lock:
                    self.scans += 1
                self.stopping.wait(pause)
        self.threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in self.sessions]
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=600)
        for session in self.sessions:
            session.close()
        return self.scans


TERMINATE = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() "
             f"AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND application_name NOT LIKE '{APP}%'")


class Kills:
    """pg_terminate_backend of every connection of the database but this script's, twice a second."""

    def __init__(self, url, every=0.5):
        self.session = Session(url, APP + "-killer")
        self.stopping = threading.Event()
        self.terminated = 0

        def run():
            while not self.stopping.is_set():
                began = time.monotonic()
                try:
                    self.terminated += int(self.session.value(TERMINATE, timeout=10) or 0)
                except Failure:
                    pass
                self.stopping.wait(max(0.0, every - (time.monotonic() - began)))
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=30)
        self.session.close()
        return self.terminated


class IdleConnections:
    """psql processes connected and idle (each waits on its standard input)."""

    def __init__(self, url):
        self.url = url
        self.processes = []

    def open(self, count):
        env = dict(os.environ, PGAPPNAME=APP + "-idle", PGCONNECT_TIMEOUT="10")
        started = []
        for _ in range(count):
            started.append(subprocess.Popen([chaos.find_psql(), "-X", "-q", self.url], stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                            start_new_session=True))
        self.processes += started
        return started

    def alive(self):
        return [p for p in self.processes if p.poll() is None]

    def close(self):
        for p in self.processes:
            if p.poll() is None:
                p.kill()
        for p in self.processes:
            p.wait()
        self.processes = []


def connections(session):
    return int(session.value("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'") or 0)


def fill_server(idle, session, max_connections):
    """Opens idle connections until the server refuses one; returns how many it holds then."""
    while True:
        room = max_connections - connections(session)
        batch = idle.open(max(1, min(50, room)))
        time.sleep(3)  # long enough for a refused psql to have exited
        refused = [p for p in batch if p.poll() is not None]
        if refused:
            reason = refused[0].stderr.read().decode(errors="replace").strip().splitlines()
            progress(f"the server refused connection {len(idle.alive()) + 1} of the idle ones: {reason[-1:] }")
            return len(idle.alive())
        if len(idle.processes) > 2 * max_connections:
            raise Failure("the server took more connections than max_connections")


# ---------------------------------------------------------------- table statistics


def table_stats(session, tables):
    """{table: (dead tuples, total size in MB)}; a partitioned table's summed over its partitions."""
    session.query("SELECT pg_stat_clear_snapshot()")
    names = ",".join(f"'{t}'" for t in tables)
    rows = session.query(f"SELECT t::text, sum(coalesce(s.n_dead_tup, 0)), sum(pg_total_relation_size(p.relid)) "
                         f"FROM unnest(ARRAY[{names}]::regclass[]) AS t "
                         # pg_partition_tree has no row for a table that is not partitioned.
                         f"CROSS JOIN LATERAL (SELECT relid FROM pg_partition_tree(t) UNION SELECT t) AS p "
                         f"LEFT JOIN pg_stat_all_tables s ON s.relid = p.relid GROUP BY t")
    return {name: (int(dead), int(size) / 1048576) for name, dead, size in rows}


def short(table):
    return table.rpartition(".")[2]


# ---------------------------------------------------------------- phases


class Phase:
    def __init__(self, name, seconds, rate, pressure=None, pressure_of=None):
        self.name, self.seconds, self.rate, self.pressure = name, seconds, rate, pressure
        self.pressure_of = pressure_of  # a recovery: the pressure phase it follows
        self.start = self.end = None
        self.tables = {}
        self.cpu = None
        self.watch = None
        self.note = ""


def phase_plan(load, overload):
    recovery = duration("RECOVERY", 120)
    plan = [Phase("warmup", duration("WARMUP", 20), load), Phase("clean", duration("CLEAN", 120), load),
            Phase("held_xid", duration("HELD", 300), load, "held")]
    plan.append(Phase("recovery_held_xid", recovery, load, pressure_of="held_xid"))
    for name, pause in (("readers_pause", 1.0), ("readers_loop", 0.0)):
        plan.append(Phase(name, duration("READERS", 180), load, ("readers", pause)))
        plan.append(Phase(f"recovery_{name}", recovery, load, pressure_of=name))
    plan.append(Phase("overload", duration("OVERLOAD", 120), overload))
    plan.append(Phase("recovery_overload", recovery, load, pressure_of="overload"))
    return plan


def run_phases(plan, url, tables, session, set_rate, set_label, cpu_groups):
    """Runs each phase: its rate, its pressure for its duration, the tables' statistics at its end;
    a `StatementWatch` runs throughout."""
    watch = StatementWatch(url)
    try:
        run_each_phase(plan, url, tables, session, set_rate, set_label, cpu_groups)
    finally:
        watch.stop()
    for phase in plan:
        if phase.start and phase.end:
            phase.watch = watch


def run_each_phase(plan, url, tables, session, set_rate, set_label, cpu_groups):
    for phase in plan:
        set_rate(phase.rate)
        set_label(phase.name)
        progress(f"{phase.name}: {phase.seconds:.0f} s at {phase.rate:.0f}/s")
        phase.start = time.time()
        held = readers = None
        if phase.pressure == "held":
            held = HeldXid(url)
            phase.note = f"xid {held.xid}"
        elif phase.pressure:
            readers = Readers(url, tables, phase.pressure[1])
        meter = CpuMeter(lambda: cpu_groups(readers.pids if readers else []))
        time.sleep(max(0.0, phase.start + phase.seconds - time.time()))
        phase.end = time.time()
        phase.cpu = meter.cores()
        if not readers:
            del phase.cpu["readers"]
        phase.tables = table_stats(session, tables)
        if held:
            held.stop()
        if readers:
            phase.note = f"{readers.stop()} scans"


def minutes(phase):
    """The phase's whole minutes (a last part under 30 s joins the minute before)."""
    bounds, at = [], phase.start
    while at < phase.end - 1:
        end = at + 60 if phase.end - (at + 60) >= 30 else phase.end
        bounds.append((at, end))
        at = end
    return bounds


def watched(prefix, watch, start, end):
    """The `StatementWatch`'s figures over a window."""
    if watch is None:
        return
    slowest, locks, gap, text, steal, steal_peak = watch.window(start, end)
    if slowest is not None and slowest >= SLOW_STATEMENT_MS and text:
        progress(f"{prefix}: slowest statement {slowest:.0f} ms: {text}")
    figure(f"{prefix}.slowest_statement_ms", slowest, "ms")
    figure(f"{prefix}.lock_wait_samples", locks, "samples")
    figure(f"{prefix}.watch_gap_ms", gap, "ms")
    figure(f"{prefix}.cpu_stolen", steal, "cores")
    figure(f"{prefix}.cpu_stolen_peak_5s", steal_peak, "cores")


def report_phases(part, plan, windows, unit):
    """Figures per phase and per minute; `windows(start, end)` gives (completion, p50, p99)."""
    phases = {p.name: p for p in plan}
    clean = phases["clean"]
    clean_completion, _, clean_p99 = windows(clean.start, clean.end)
    for phase in plan:
        if phase.name == "warmup":
            continue
        prefix = f"{part}.{phase.name}"
        completion, p50, p99 = windows(phase.start, phase.end)
        figure(f"{prefix}.completion", completion, unit)
        figure(f"{prefix}.completion_ratio", ratio(completion, clean_completion), "x")
        figure(f"{prefix}.pickup_p50", p50, "ms")
        figure(f"{prefix}.pickup_p99", p99, "ms")
        figure(f"{prefix}.p99_ratio", ratio(p99, clean_p99), "x")
        watched(prefix, phase.watch, phase.start, phase.end)
        completion_ratios, p99_ratios = [], []
        for index, (a, b) in enumerate(minutes(phase), 1):
            c, m50, m99 = windows(a, b)
            figure(f"{prefix}.minute{index}.completion", c, unit)
            figure(f"{prefix}.minute{index}.pickup_p50", m50, "ms")
            figure(f"{prefix}.minute{index}.pickup_p99", m99, "ms")
            watched(f"{prefix}.minute{index}", phase.watch, a, b)
            completion_ratios.append(ratio(c, clean_completion))
            p99_ratios.append(ratio(m99, clean_p99))
        # A minute without a figure counts as the worst.
        figure(f"{prefix}.worst_minute_completion_ratio", None if None in completion_ratios else min(completion_ratios), "x")
        figure(f"{prefix}.worst_minute_p99_ratio", None if None in p99_ratios else max(p99_ratios), "x")
        for table, (dead, size) in sorted(phase.tables.items()):
            figure(f"{prefix}.{short(table)}.dead_tuples", dead, "rows")
            figure(f"{prefix}.{short(table)}.size_mb", round(size, 1), "MB")
        if "pgqueue.jobs" in phase.tables and "pgqueue.jobs" in clean.tables:
            figure(f"{prefix}.jobs.size_ratio", ratio(phase.tables["pgqueue.jobs"][1], clean.tables["pgqueue.jobs"][1]), "x")
        if phase.cpu:
            for group, cores in sorted(phase.cpu.items()):
                figure(f"{prefix}.cpu.{group}", round(cores, 3), "cores")
        if phase.pressure_of:
            figure(f"{prefix}.recovered_s", recovered(phase, windows, clean_completion, clean_p99), "s")
        if phase.note:
            progress(f"{phase.name}: {phase.note}")
    return clean_completion, clean_p99


def recovered(phase, windows, clean_completion, clean_p99, step=5):
    """Seconds from the recovery's start to the first `step`-second window with completion >=
    0.95 of clean and p99 <= 1.5x clean; None when none within the phase."""
    at = phase.start
    while at + step <= phase.end + 0.5:
        completion, _, p99 = windows(at, at + step)
        if completion is not None and p99 is not None and completion >= 0.95 * clean_completion and p99 <= 1.5 * clean_p99:
            return round(at + step - phase.start, 1)
        at += step
    return None


def ratio(a, b):
    return None if a is None or not b else round(a / b, 3)


# ---------------------------------------------------------------- the queue alone


class Adapter:
    """`herald-bench harness` with the harness's pacing: `ENQUEUE <n>` lines on standard input at
    the rate set, its JSON samples collected from standard output and kept as they came in
    `<name>.samples.jsonl` beside its log."""

    def __init__(self, bin_dir, env, name):
        os.makedirs(LOGS, exist_ok=True)
        self.log = open(os.path.join(LOGS, f"{name}.log"), "ab")
        self.kept = open(os.path.join(LOGS, f"{name}.samples.jsonl"), "wb")
        self.process = subprocess.Popen([os.path.join(bin_dir, "herald-bench"), "harness"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        start_new_session=True)
        self.samples = []  # (epoch seconds, metric, value)
        self.lock = threading.Lock()
        self.rate = 0.0
        self.requested = 0
        self.stopping = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if env.get("PRODUCER_PACING") == "harness":
            threading.Thread(target=self._pace, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.kept.write(line)
            self.kept.flush()
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "metric" in record:
                with self.lock:
                    self.samples.append((chaos.parse_time(record["t"]).timestamp(), record["metric"], record["value"]))

    def _pace(self):
        credit, last = 0.0, time.monotonic()
        while not self.stopping.wait(0.1):
            now = time.monotonic()
            credit += self.rate * (now - last)
            last = now
            whole = int(credit)
            if whole > 0:
                credit -= whole
                try:
                    self.process.stdin.write(f"ENQUEUE {whole}\n".encode())
                    self.process.stdin.flush()
                    self.requested += whole
                except OSError:
                    return

    def window(self, metric, start, end):
        with self.lock:
            return [v for t, m, v in self.samples if m == metric and start < t <= end + 0.01]

    def acknowledged(self, sample_s):
        """Jobs the adapter enqueued and saw committed in its sampled periods (each enqueue rate
        covers one whole period; what it enqueued before its first boundary is not counted)."""
        with self.lock:
            return round(sum(v for _, m, v in self.samples if m == "enqueue_rate") * sample_s)

    def alive(self):
        return self.process.poll() is None

    def stop(self):
        self.stopping.set()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


def adapter_env(url, sample_s, **extra):
    env = dict(os.environ, DATABASE_URL=url, WORKER_COUNT="16", JOB_WORK_MS="1", SAMPLE_EVERY_S=str(sample_s),
               HERALD_LOG_LEVEL="warning")
    env.update(extra)
    return env


def queue_left(session):
    return int(session.value("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'harness'", timeout=120) or 0)


def peaks(bin_dir, base_url, db, session, sample_s, probe, found):
    """The adapter's peak completion_rate (its largest sample of a depth-target run, JOB_WORK_MS=1)
    at 16, 64 and 256 workers, and `queue.drain` (herald-bench queue --drain-only) beside them."""
    for workers in (16, 64, 256):
        if workers not in found:
            session.query("TRUNCATE pgqueue.jobs, pgqueue.job_history")
            progress(f"queue: the peak at {workers} workers (depth-target, {probe:.0f} s)")
            adapter = Adapter(bin_dir, adapter_env(db.url, sample_s, PRODUCER_MODE="depth-target", TARGET_DEPTH="5000",
                                                   PRODUCER_BATCH_MAX="1000", WORKER_COUNT=str(workers)),
                              f"queue-peak-{workers}")
            began = time.time()
            time.sleep(probe)
            adapter.stop()
            rates = adapter.window("completion_rate", began + sample_s, time.time())
            check(rates, f"the run at {workers} workers gave no samples (see .data/bench-pressure/queue-peak-{workers}.log)")
            found[workers] = max(rates)
        figure(f"queue.peak.workers_{workers}", round(found[workers], 1), "jobs/s")
    progress("queue: queue.drain (herald-bench queue --drain-only)")
    out = subprocess.run([os.path.join(bin_dir, "herald-bench"), "queue", "--drain-only"], capture_output=True, text=True,
                         env=dict(os.environ, HERALD_DATABASE_URL=base_url), timeout=600)
    check(out.returncode == 0, f"herald-bench queue --drain-only failed: {out.stderr[-500:]}")
    for line in out.stdout.splitlines():
        if line.startswith("bench queue.drain "):
            print(line, flush=True)


def queue_part(bin_dir, base_url, sample_s):
    db = Database(base_url, "herald_bench_pressure_queue")
    db.recreate()
    session = Session(db.url)
    rate = knob("QUEUE_RATE", None)
    if rate is None:
        probe = duration("PROBE", 30)
        progress(f"queue: the maximum (depth-target, {probe:.0f} s)")
        adapter = Adapter(bin_dir, adapter_env(db.url, sample_s, PRODUCER_MODE="depth-target", TARGET_DEPTH="5000",
                                                       PRODUCER_BATCH_MAX="1000"),
                          "queue-probe")
        began = time.time()
        time.sleep(probe)
        adapter.stop()
        rates = adapter.window("completion_rate", began + sample_s, time.time())
        check(rates, "the queue's maximum run gave no samples (see .data/bench-pressure/queue-probe.log)")
        maximum = statistics.median(rates)
        peaks(bin_dir, base_url, db, session, sample_s, probe, {16: max(rates)})
        rate = knob("LOAD", 0.6) * maximum
        session.query("TRUNCATE pgqueue.jobs, pgqueue.job_history")
        session.query("VACUUM ANALYZE pgqueue.jobs")
    else:
        maximum = rate / knob("LOAD", 0.6)
    figure("queue.maximum", round(maximum, 1), "jobs/s")
    figure("queue.offered", round(rate, 1), "jobs/s")
    overload = knob("OVERLOAD", 1.5) * maximum
    since = time.time()
    adapter = Adapter(bin_dir, adapter_env(db.url, sample_s, PRODUCER_MODE="fixed", PRODUCER_PACING="harness"), "queue")
    plan = phase_plan(rate, overload)
    adapter_pid = adapter.process.pid

    def groups(readers):
        backends = system_backends(session)
        everything = postgres_pids()
        return {"readers": readers, "adapter": [adapter_pid], "adapter_backends": backends,
                "postgres_other": [p for p in everything if p not in readers and p not in backends]}
    try:
        run_phases(plan, db.url, QUEUE_TABLES, session, lambda r: setattr(adapter, "rate", r), lambda _: None, groups)
        drain(adapter, session, plan[-1].end)
        clean_completion, clean_p99 = report_phases("queue", plan, queue_windows(session, since), "jobs/s")
        check(adapter.alive(), "the adapter exited during the run (see .data/bench-pressure/queue.log)")
    finally:
        adapter.stop()
    completed = int(session.value("SELECT count(*) FROM pgqueue.job_history WHERE queue = 'harness' AND state = 'completed'") or 0)
    left = queue_left(session)
    figure("queue.jobs.requested", adapter.requested, "jobs")
    figure("queue.jobs.completed", completed, "jobs")
    figure("queue.jobs.left", left, "jobs")
    session.close()
    db.drop()
    return plan, clean_completion, clean_p99


def drain(adapter, session, since):
    adapter.rate = 0
    progress("queue: drain")
    wait_for("the queue to drain", lambda: queue_left(session) == 0, 900, 1)
    figure("queue.drain_s", round(time.time() - since, 1), "s")


# ---------------------------------------------------------------- the pipeline


class Loader:
    """Batches of notifications (no telemetry, one hub send each) posted at `rate` per second on
    wall-clock time; every request's answer is kept, the accepted ids go to a file with the
    label current when their request started."""

    def __init__(self, system, ids_path, timeout):
        self.system, self.timeout = system, timeout
        self.rate, self.label = 0.0, "warmup"
        self.results = []  # (started epoch, status, seconds, items, retry-after, label)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ids = open(ids_path, "w")
        self.item = {"target": {"tags": "bench:pressure"}, "content": {"apple": {"aps": {"alert": "pressure"}}},
                     "telemetry": False}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        credit, last = 0.0, time.monotonic()
        while not self.stopping.wait(max(0.0, last + 0.1 - time.monotonic())):
            now = time.monotonic()
            credit += self.rate * (now - last)
            last = now
            while credit >= 1 and not self.stopping.is_set():
                n = min(1000, int(credit))
                credit -= n
                self._post(n)

    def _post(self, n):
        label, started = self.label, time.time()
        status, text, headers, seconds = http("POST", self.system.api_url + "/v1/notifications:batch",
                                              {"notifications": [self.item] * n},
                                              {"Authorization": "Bearer " + self.system.key}, self.timeout)
        retry_after = {k.lower(): v for k, v in headers.items()}.get("retry-after")
        with self.lock:
            self.results.append((started, status, seconds, n, retry_after, label))
            if status == 202:
                for notification in json.loads(text)["notifications"]:
                    self.ids.write(f"{notification['id']}\t{label}\n")

    def window(self, start, end):
        with self.lock:
            return [r for r in self.results if start <= r[0] < end]

    def stop(self):
        self.rate = 0
        self.stopping.set()
        self.thread.join(timeout=self.timeout + 30)
        self.ids.close()


def post_bulk(system, count, threads=2):
    """`count` notifications through the batch API, 1,000 a request, from `threads` threads."""
    item = {"target": {"tags": "bench:pressure"}, "content": {"apple": {"aps": {"alert": "maximum"}}}, "telemetry": False}
    errors = []

    def run(requests):
        for _ in range(requests):
            status, text, _, _ = system.v1("POST", "/v1/notifications:batch", {"notifications": [item] * 1000}, timeout=120)
            if status != 202:
                errors.append(f"{status}: {text[:200]}")
                return
    workers = [threading.Thread(target=run, args=(count // threads // 1000,)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    check(not errors, f"a batch was refused: {errors[:1]}")
    return count // threads // 1000 * 1000 * threads


def waiting(session):
    return session.value("SELECT EXISTS (SELECT 1 FROM notifications WHERE state IN ('Queued', 'Scheduled'))") == "t"


def queued(session):
    return int(session.value("SELECT count(*) FROM notifications WHERE state IN ('Queued', 'Scheduled')") or 0)


def epoch(at):
    return f"to_timestamp({at:.3f})"


class Windows:
    """Completion and pickup latency of any time window, read from the database once, after the
    run: `completed` gives (second, count) rows, `latency` (second, bucket, count) rows, a
    histogram (1% buckets of ln ms) of the pickup of the items created in each second. Exact
    per window, so a minute's p99 is that minute's, however short a stall within it."""

    def __init__(self, session, completed, latency):
        self.completed = {int(second): int(count) for second, count in session.query(completed, timeout=900)}
        self.latency = {}
        for second, bucket, count in session.query(latency, timeout=900):
            self.latency.setdefault(int(second), {})[int(bucket)] = int(count)

    def __call__(self, start, end):
        seconds = [s for s in range(int(start), int(end) + 1) if start <= s + 0.5 < end]
        completion = sum(self.completed.get(s, 0) for s in seconds) / max(0.001, end - start)
        merged = {}
        for s in seconds:
            for bucket, count in self.latency.get(s, {}).items():
                merged[bucket] = merged.get(bucket, 0) + count
        return round(completion, 1), percentile(merged, 0.5), percentile(merged, 0.99)


def bucket_sql(ms):
    return f"round(ln(greatest({ms}, 0.01)) * 100)::int"


def pipeline_windows(session, since):
    """The hub sends answered 2xx per second of their outcome row's `at`; a notification's commit
    (`created_at`) to the `started_at` of its first hub call."""
    return Windows(
        session,
        f"SELECT floor(extract(epoch FROM at))::bigint, count(*) FROM notification_outcomes "
        f"WHERE kind = 'send' AND http_status BETWEEN 200 AND 299 AND at >= {epoch(since)} GROUP BY 1",
        f"SELECT floor(extract(epoch FROM created_at))::bigint, {bucket_sql('ms')}, count(*) "
        f"FROM (SELECT n.created_at, extract(epoch FROM min(o.started_at) - n.created_at) * 1000 AS ms "
        f"FROM notifications n JOIN notification_outcomes o ON o.notification_id = n.id AND o.kind = 'send' "
        f"WHERE n.created_at >= {epoch(since)} GROUP BY n.id, n.created_at) t GROUP BY 1, 2")


def queue_windows(session, since):
    """The adapter's jobs completed per second of `finished_at`; a job's enqueue (`created_at`) to
    its claim (`attempted_at`), what the adapter's claim latency measures."""
    return Windows(
        session,
        f"SELECT floor(extract(epoch FROM finished_at))::bigint, count(*) FROM pgqueue.job_history "
        f"WHERE queue = 'harness' AND state = 'completed' AND finished_at >= {epoch(since)} GROUP BY 1",
        f"SELECT floor(extract(epoch FROM created_at))::bigint, "
        f"{bucket_sql('extract(epoch FROM attempted_at - created_at) * 1000')}, count(*) "
        f"FROM pgqueue.job_history WHERE queue = 'harness' AND created_at >= {epoch(since)} GROUP BY 1, 2")


def percentile(histogram, p):
    """The bucket (1% wide, of ln ms) holding the p-th value, as ms; None when empty."""
    total = sum(histogram.values())
    if not total:
        return None
    rank, seen = max(1, int(p * total + 0.999999)), 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return round(2.718281828459045 ** (bucket / 100), 1)
    return None


def start_system(bin_dir, base_url, database, name, api_env=None):
    chaos.LOGS = LOGS
    return chaos.System(name, bin_dir, base_url, database=database, api_env=api_env,
                        emulator_args=("--max-requests", "10000", "--max-deliveries", "10000"))


def pipeline_part(bin_dir, base_url, with_chaos):
    # The loader's batches go to the bulk lane. Without a bound, what overload or a stall leaves
    # behind waits in line and every later send waits behind it.
    bound = knob("BULK_BOUND", 20, int)
    figure("pipeline.bulk_bound", bound or None, "s")
    system = start_system(bin_dir, base_url, "herald_bench_pressure", "pipeline",
                          {"HERALD_QUEUE_LANE_BOUNDS": f"bulk={bound}"} if bound else None)
    session = Session(system.db.url)
    loader = None
    try:
        history = int(os.environ.get("BENCH_HISTORY", "50000"))
        subprocess.run(["bash", "-c", '. scripts/bench-lib.sh; bench_url="$1"; bench_seed_history "$2"', "_",
                        system.db.url, str(history)], cwd=ROOT, check=True)
        system.start_worker()
        post_bulk(system, 2000)
        wait_for("the warm-up to be sent", lambda: not waiting(session), 300, 0.5)
        rate = knob("PIPELINE_RATE", None)
        if rate is None:
            count = int(knob("PROBE_COUNT", 20000))
            progress(f"pipeline: the maximum ({count} notifications)")
            began = time.monotonic()
            posted = post_bulk(system, count)
            wait_for("the maximum run to be sent", lambda: not waiting(session), 900, 0.2)
            maximum = posted / (time.monotonic() - began)
            rate = knob("LOAD", 0.6) * maximum
        else:
            maximum = rate / knob("LOAD", 0.6)
        figure("pipeline.maximum", round(maximum, 1), "sends/s")
        figure("pipeline.offered", round(rate, 1), "sends/s")
        since = time.time()
        loader = Loader(system, os.path.join(LOGS, "pipeline-ids.tsv"), knob("CLIENT_TIMEOUT_S", 10.0))
        plan = phase_plan(rate, knob("OVERLOAD", 1.5) * maximum)
        api_pid = system.api.pid

        def groups(readers):
            backends = system_backends(session)
            everything = postgres_pids()
            return {"readers": readers, "api": [api_pid], "worker": [w.pid for w in system.workers],
                    "herald_backends": backends,
                    "postgres_other": [p for p in everything if p not in readers and p not in backends]}
        tables = QUEUE_TABLES + SEND_TABLES
        run_phases(plan, system.db.url, tables, session, lambda r: setattr(loader, "rate", r),
                   lambda label: setattr(loader, "label", label), groups)
        cells = []
        if with_chaos:
            cells = chaos_cells(system, session, loader)
        loader.stop()
        progress("pipeline: drain")
        drained_from = cells[-1].end if cells else plan[-1].end
        try:
            wait_for("every notification to be sent", lambda: not waiting(session), knob("DRAIN_S", 300.0), 1)
            figure("pipeline.drain_s", round(time.time() - drained_from, 1), "s")
        except Failure:
            # Reported, not waited out: a send left behind would otherwise hold the run until its
            # deadline; the accounting below counts it as lost.
            figure("pipeline.drain_s", None, "s")
        figure("pipeline.waiting_after_drain", int(session.value(
            "SELECT count(*) FROM notifications WHERE state IN ('Queued', 'Scheduled')") or 0), "notifications")
        windows = pipeline_windows(session, since)
        clean_completion, clean_p99 = report_phases("pipeline", plan, windows, "sends/s")
        for phase in plan[1:]:
            answers = loader.window(phase.start, phase.end)
            figure(f"pipeline.{phase.name}.refused", sum(r[3] for r in answers if r[1] == 429), "notifications")
        accounting = account(system, session, os.path.join(LOGS, "pipeline-ids.tsv"), since)
        if with_chaos:
            report_cells(cells, loader, windows, session, clean_completion, accounting)
        chaos.check_alive(system)
        return plan, cells
    finally:
        if loader:
            loader.stop()
        session.close()
        system.close()


def account(system, session, ids_path, since):
    """Every accepted notification (the ids the API answered 202 with), by label: (accepted,
    final). Also prints the whole run's counts."""
    with open(ids_path) as f:
        rows = f.read()
    session.query("DROP TABLE IF EXISTS bench_accepted; CREATE UNLOGGED TABLE bench_accepted (id uuid, label text)")
    path = ids_path.replace("'", "''")
    copy = subprocess.run([chaos.find_psql(), "-X", "-q", system.db.url, "-c",
                           "\\copy bench_accepted FROM pstdin"], input=rows, text=True, capture_output=True,
                          env=dict(os.environ, PGAPPNAME=APP))
    check(copy.returncode == 0, f"could not load the accepted ids from {path}: {copy.stderr[-300:]}")
    # Final, or Enqueued: the hub took it and, without telemetry, nothing moves it on.
    settled = "n.state NOT IN ('Scheduled', 'Queued')"
    by_label = {}
    for label, accepted, found, finished, repeated in session.query(
            f"SELECT a.label, count(*), count(n.id), count(n.id) FILTER (WHERE {settled}), "
            f"count(*) FILTER (WHERE EXISTS (SELECT 1 FROM hub_sends h WHERE h.notification_id = a.id AND h.attempts > 1)) "
            f"FROM bench_accepted a LEFT JOIN notifications n ON n.id = a.id GROUP BY 1", timeout=600):
        by_label[label] = (int(accepted), int(found), int(finished), int(repeated))
    accepted = sum(v[0] for v in by_label.values())
    finished = sum(v[2] for v in by_label.values())
    figure("pipeline.accepted", accepted, "notifications")
    figure("pipeline.final", finished, "notifications")
    figure("pipeline.lost", accepted - finished, "notifications")
    figure("pipeline.retried", sum(v[3] for v in by_label.values()), "notifications")
    committed = int(session.value(f"SELECT count(*) FROM notifications WHERE created_at >= {epoch(since)}") or 0)
    figure("pipeline.committed_unacknowledged", committed - accepted, "notifications")
    return by_label


# ---------------------------------------------------------------- chaos cells


CELLS = ("kills", "idle", "full", "restart", "worker_kill")


class Cell:
    def __init__(self, name):
        self.name = name
        self.start = self.fault_end = self.end = self.settled_s = self.restart_s = None
        self.note = ""


def chaos_cells(system, session, loader):
    fault = duration("FAULT", 60)
    recovery = duration("CELL_RECOVERY", 60)
    max_connections = int(session.value("SHOW max_connections"))
    cells = []

    def cell(name, run):
        c = Cell(name)
        # Each fault starts from the steady state: a backlog left by the phases or the cell before
        # would be measured as the fault's (less than a second of the offered load waiting).
        loader.label = f"{name}_settle"
        began = time.time()
        try:
            wait_for(f"the backlog to drain before {name}", lambda: queued(session) < loader.rate,
                     knob("DRAIN_S", 300.0), 1)
            c.settled_s = round(time.time() - began, 1)
        except Failure:
            c.settled_s = None
        loader.label = name
        progress(f"chaos {name}" + (f" (the backlog drained in {c.settled_s} s)" if c.settled_s is not None
                                    else " (behind a backlog that did not drain)"))
        c.start = time.time()
        c.note = run(c)
        c.fault_end = time.time()
        loader.label = f"{name}_recovery"
        time.sleep(recovery)
        c.end = time.time()
        cells.append(c)
        progress(f"chaos {name}: {c.note}")

    def kills(c):
        k = Kills(system.db.url)
        time.sleep(fault)
        return f"{k.stop()} backends terminated"

    def idle(c):
        held = IdleConnections(system.db.url)
        try:
            held.open(int(knob("IDLE", 300)))
            time.sleep(fault)
            return f"{len(held.alive())} idle connections held ({connections(session)} of {max_connections} in use)"
        finally:
            held.close()

    def full(c):
        held = IdleConnections(system.db.url)
        try:
            count = fill_server(held, session, max_connections)
            # Herald's own connections go too, so its pools must reconnect into a full server.
            terminated = int(session.value(TERMINATE) or 0)
            time.sleep(fault)
            return f"{count} idle connections filled the server; {terminated} of Herald's connections terminated once"
        finally:
            held.close()

    def restart(c):
        seconds = duration("RESTART", 8)
        out = subprocess.run([os.path.join(ROOT, "scripts", "db.sh"), "restart", "fast", str(int(seconds))],
                             capture_output=True, text=True, timeout=600)
        check(out.returncode == 0, f"db.sh restart failed: {out.stderr[-300:]}")
        return f"PostgreSQL down {seconds:.0f} s"

    def worker_kill(c):
        worker = system.workers[0]
        held = system.held_by(worker)
        worker.kill9()
        began = time.monotonic()
        system.restart_worker(worker)
        c.restart_s = round(time.monotonic() - began, 1)
        return f"SIGKILL with {held} jobs held; restarted in {c.restart_s} s"

    runs = {"kills": kills, "idle": idle, "full": full, "restart": restart, "worker_kill": worker_kill}
    for name in chosen_cells():
        cell(name, runs[name])
    return cells


def chosen_cells():
    """The chaos cells to run, in their order: BENCH_PRESSURE_CELLS (comma-separated), or all."""
    chosen = [c for c in os.environ.get("BENCH_PRESSURE_CELLS", "").split(",") if c]
    unknown = set(chosen) - set(CELLS)
    check(not unknown, f"BENCH_PRESSURE_CELLS names no cell {', '.join(sorted(unknown))}")
    return [c for c in CELLS if not chosen or c in chosen]


def report_cells(cells, loader, windows, session, clean_completion, accounting):
    for c in cells:
        prefix = f"chaos.{c.name}"
        figure(f"{prefix}.settled_s", c.settled_s, "s")
        if c.restart_s is not None:
            figure(f"{prefix}.restart_s", c.restart_s, "s")
        accepted = sum(accounting.get(label, (0, 0, 0, 0))[0] for label in (c.name, f"{c.name}_recovery"))
        finished = sum(accounting.get(label, (0, 0, 0, 0))[2] for label in (c.name, f"{c.name}_recovery"))
        figure(f"{prefix}.accepted", accepted, "notifications")
        figure(f"{prefix}.final", finished, "notifications")
        figure(f"{prefix}.lost", accepted - finished, "notifications")
        _, _, p99 = windows(c.start, c.fault_end)
        figure(f"{prefix}.p99_ms", p99, "ms")
        ats = [float(r[0]) for r in session.query(
            f"SELECT extract(epoch FROM at) FROM notification_outcomes WHERE kind = 'send' "
            f"AND http_status BETWEEN 200 AND 299 AND at >= {epoch(c.start)} AND at < {epoch(c.end)} ORDER BY at",
            timeout=300)]
        points = [c.start] + ats + [c.end]
        figure(f"{prefix}.longest_gap_s", round(max(b - a for a, b in zip(points, points[1:])), 2), "s")
        at, back = c.fault_end, None
        while at + 5 <= c.end:
            if sum(1 for t in ats if at <= t < at + 5) / 5 >= 0.9 * clean_completion:
                back = round(at - c.fault_end, 1)
                break
            at += 1
        figure(f"{prefix}.recovered_s", back, "s")
        answers = loader.window(c.start, c.end)
        bound = DATABASE_WAIT_SECONDS + SCHEDULING_SECONDS
        refused = [r for r in answers if r[1] == 503]
        figure(f"{prefix}.requests", len(answers), "requests")
        figure(f"{prefix}.answers_503", len(refused), "requests")
        figure(f"{prefix}.503_without_retry_after", sum(1 for r in refused if not r[4]), "requests")
        figure(f"{prefix}.hung", sum(1 for r in answers if r[1] == 0 and r[2] >= loader.timeout - 0.5), "requests")
        figure(f"{prefix}.other_failures", sum(1 for r in answers if r[1] not in (202, 503) and r[2] < loader.timeout - 0.5),
               "requests")
        figure(f"{prefix}.slow", sum(1 for r in answers if r[2] > bound), "requests")
        figure(f"{prefix}.longest_answer_s", round(max((r[2] for r in answers), default=0.0), 2), "s")


# ---------------------------------------------------------------- targets


def targets(parts):
    rows = []

    def target(name, op, goal):
        value = FIGURES.get(name)
        met = value is not None and (value >= goal if op == ">=" else value <= goal)
        shown = "-" if value is None else f"{value:g}"
        rows.append(f"target pressure.{name} {shown} {op} {goal:g} {'met' if met else 'missed'}")
    for part in [p for p in ("queue", "pipeline") if p in parts]:
        target(f"{part}.held_xid.worst_minute_completion_ratio", ">=", 0.8)
        target(f"{part}.held_xid.worst_minute_p99_ratio", "<=", 3)
        target(f"{part}.held_xid.jobs.size_ratio", "<=", 2)
        target(f"{part}.readers_pause.completion_ratio", ">=", 0.9)
        target(f"{part}.readers_pause.p99_ratio", "<=", 3)
        for pressure in ("held_xid", "readers_pause", "readers_loop", "overload"):
            target(f"{part}.recovery_{pressure}.recovered_s", "<=", 120)
        # "Completion stays at the clean phase's maximum": within a tenth of the maximum measured first.
        target(f"{part}.overload.completion_ratio_to_maximum", ">=", 0.9)
    if "pipeline" in parts:
        target("pipeline.lost", "<=", 0)
    if "chaos" in parts:
        if "kills" in chosen_cells():
            target("chaos.kills.p99_ms", "<=", 5000)
            target("chaos.kills.longest_gap_s", "<=", DATABASE_WAIT_SECONDS)
        for cell in chosen_cells():
            target(f"chaos.{cell}.lost", "<=", 0)
            target(f"chaos.{cell}.recovered_s", "<=", 60)
            target(f"chaos.{cell}.hung", "<=", 0)
            target(f"chaos.{cell}.503_without_retry_after", "<=", 0)
    for row in rows:
        print(row, flush=True)


def overload_to_maximum(part, plan):
    phase = next(p for p in plan if p.name == "overload")
    value, maximum = FIGURES.get(f"{part}.overload.completion"), FIGURES.get(f"{part}.maximum")
    figure(f"{part}.overload.completion_ratio_to_maximum", ratio(value, maximum), "x")
    return phase


# ---------------------------------------------------------------- reduced (make test)


def reduced(bin_dir, base_url, sample_s):
    """Correctness only: the adapter and the pipeline side by side, each on its database, through
    a held XID and backend kills in both; every accepted notification final, every job done,
    everything answers again."""
    system = start_system(bin_dir, base_url, "herald_pressure_test", "reduced")
    session = Session(system.db.url)
    adapter = loader = queue_db = queue_session = None
    try:
        system.start_worker()
        # A database of its own: the adapter refuses one holding migrations it does not know.
        queue_db = Database(base_url, "herald_pressure_test_queue")
        queue_db.recreate()
        queue_session = Session(queue_db.url)
        urls = [system.db.url, queue_db.url]
        adapter = Adapter(bin_dir, adapter_env(queue_db.url, sample_s, PRODUCER_MODE="fixed", PRODUCER_PACING="harness",
                                               HERALD_POOL_SIZE="4"), "reduced-adapter")
        adapter.rate = knob("QUEUE_RATE", 200.0)
        since = time.time()
        loader = Loader(system, os.path.join(LOGS, "reduced-ids.tsv"), knob("CLIENT_TIMEOUT_S", 30.0))
        loader.rate = knob("PIPELINE_RATE", 100.0)
        steps = [("clean", duration("CLEAN", 10)), ("held_xid", duration("HELD", 30)),
                 ("kills", duration("FAULT", 20)), ("recovery", duration("RECOVERY", 10))]
        notes = []
        for name, seconds in steps:
            loader.label = name
            progress(f"reduced {name}: {seconds:.0f} s")
            if name == "held_xid":
                held = [HeldXid(url) for url in urls]
                time.sleep(seconds)
                for h in held:
                    h.stop()
            elif name == "kills":
                kills = [Kills(url) for url in urls]
                time.sleep(seconds)
                notes.append(f"terminated={sum(k.stop() for k in kills)}")
            else:
                time.sleep(seconds)
        loader.stop()
        adapter.rate = 0
        check(adapter.alive(), "the adapter exited (see .data/bench-pressure/reduced-adapter.log)")
        wait_for("the adapter's jobs to be done", lambda: queue_left(queue_session) == 0, 300, 1)
        time.sleep(2 * sample_s + 1)  # the last enqueues reach a sample
        try:
            wait_for("every notification to be final", lambda: not waiting(session), 300, 1)
        except Failure:
            # The post-mortem goes to the log too: CI keeps only what is printed.
            system.dump_unfinished()
            with open(os.path.join(system.log_dir, "unfinished.txt")) as dump:
                progress("what the database says of the notifications left:\n" + dump.read()[:20000])
            raise
        by_label = account(system, session, os.path.join(LOGS, "reduced-ids.tsv"), since)
        accepted = sum(v[0] for v in by_label.values())
        finished = sum(v[2] for v in by_label.values())
        completed = int(queue_session.value("SELECT count(*) FROM pgqueue.job_history WHERE queue = 'harness' "
                                      "AND state = 'completed'") or 0)
        acknowledged = adapter.acknowledged(sample_s)
        after = adapter.window("completion_rate", time.time() - 4 * sample_s - 30, time.time())
        answers = loader.results
        hung = sum(1 for r in answers if r[1] == 0 and r[2] >= loader.timeout - 0.5)
        other = sorted(set(r[1] for r in answers if r[1] not in (202, 503)))
        summary = (f"notifications accepted={accepted} final={finished} 503={sum(1 for r in answers if r[1] == 503)} "
                   f"hung={hung} other_status={other or 0} jobs acknowledged~{acknowledged} completed={completed} "
                   f"left=0 {' '.join(notes)}")
        check(accepted > 0 and finished == accepted, f"accepted notifications not final: {summary}")
        check(hung == 0, f"requests without an answer: {summary}")
        check(completed >= 0.99 * acknowledged and completed > 0, f"enqueued jobs not completed: {summary}")
        check(any(v > 0 for v in after) or completed > 0, f"the adapter completed nothing after the kills: {summary}")
        check(adapter.alive(), f"the adapter exited: {summary}")
        # The processes answer again (a fresh send goes through end to end).
        ids = system.send_batch([("f" + "0" * 63).upper()])
        wait_for("a send after the faults to complete", lambda: session.value(
            f"SELECT state FROM notifications WHERE id = '{ids[0]}'") == "Completed", 120, 0.5)
        chaos.check_alive(system)
        print(f"pressure reduced ok {summary}", flush=True)
        return 0
    finally:
        if loader:
            loader.stop()
        if adapter:
            adapter.stop()
        session.close()
        if queue_session:
            queue_session.close()
        if queue_db:
            queue_db.drop()
        system.close()


# ---------------------------------------------------------------- main


def stop_on_signal(signum, _frame):
    """SIGTERM or SIGHUP (`timeout`, a closed terminal) ends the run as an error would: the
    processes it started are in sessions of their own, and only its `finally` blocks stop them."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    raise SystemExit(128 + signum)


def main():
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop_on_signal)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--mode", choices=("full", "reduced"), default="full")
    parser.add_argument("--parts", default="queue,pipeline,chaos")
    args = parser.parse_args()
    os.makedirs(LOGS, exist_ok=True)
    with open(os.path.join(chaos.DATA, "postgres.env")) as f:
        base_url = re.search(r"HERALD_DATABASE_URL=(\S+)", f.read()).group(1)
    sample_s = int(knob("SAMPLE_S", 5 if knob("SCALE", 1.0) >= 0.5 else 2, int))
    started = time.monotonic()
    try:
        if args.mode == "reduced":
            return reduced(args.bin, base_url, int(knob("SAMPLE_S", 2, int)))
        parts = args.parts.split(",")
        if "queue" in parts:
            plan, _, _ = queue_part(args.bin, base_url, sample_s)
            overload_to_maximum("queue", plan)
        if "pipeline" in parts or "chaos" in parts:
            plan, _ = pipeline_part(args.bin, base_url, "chaos" in parts)
            overload_to_maximum("pipeline", plan)
        figure("seconds", round(time.monotonic() - started), "s")
        targets(parts)
        return 0
    except Failure as failure:
        print(f"bench-pressure: FAILED: {failure}", file=sys.stderr, flush=True)
        if args.mode == "reduced":
            print(f"pressure reduced FAIL {failure}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
