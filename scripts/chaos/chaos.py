#!/usr/bin/env python3
"""Herald's fault harness: the real processes against real PostgreSQL and nh-emulator, faults
injected, and the outcome counted from the emulator's delivery and request logs and the database.

    chaos.py --bin BIN_DIR [--size reduced|full] [--only NAME,...]

Prints one line per scenario (`chaos NAME ok|FAIL figures…`) and exits non-zero when any
scenario fails. Every wait is bounded; only loopback traffic; the processes it starts are
stopped on exit. Logs of every process go to .data/chaos/<scenario>/ and are scanned for
secrets at the end.
"""
import argparse
import base64
import concurrent.futures
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, ".data")
LOGS = os.path.join(DATA, "chaos")
FINAL = ("Completed", "NoTargetFound", "Abandoned", "Unknown", "Cancelled", "Expired")

SIZES = {
    # scenario: (reduced, full)
    "kill9.sends": (1000, 10000),
    "webhooks.sends": (300, 3000),
    # Longer than HERALD_DATABASE_WAIT_SECONDS (5 s): a request that arrives during a shorter
    # outage may rightly wait it out and succeed, and then no 503 shows that the bound holds.
    "restart.seconds": (7, 8),
    "storm.sends": (200, 10000),
    "gone.devices": (90, 1000),
    "stall.sends": (400, 2000),
    "schema.examples": (15, 60),
    # The partitions (make test runs partition.db only; the others run at their reduced sizes
    # when named with --only). A database partition well past GATE_SECONDS (7 s) shows both the
    # requests caught waiting and those the gate turns away at once.
    "partition.hub.sends": (400, 2000),
    "partition.hub.seconds": (15, 60),
    "partition.db.seconds": (12, 20),
    "reset.db.seconds": (15, 60),
}

# The documented bounds the partitions check (docs/configuration.md, docs/operations.md).
DATABASE_WAIT_SECONDS = 5  # HERALD_DATABASE_WAIT_SECONDS: the longest a request waits for the database
PROBE_TIMEOUT_SECONDS = 2  # HERALD_DATABASE_PROBE_TIMEOUT_SECONDS
SCHEDULING_SECONDS = 1  # what a loaded machine adds to a bound before the answer reaches the client
# The availability probe runs every second; two probe timeouts and a second of silence mark the database down, after
# which requests get 503 at once and /health/ready fails.
GATE_SECONDS = 1 + 2 * PROBE_TIMEOUT_SECONDS + 2 * SCHEDULING_SECONDS
# A worker resumes within one probe cycle (two unanswered probes and the next that answers)
# plus one bounded database wait after a partition heals.
RESUME_SECONDS = DATABASE_WAIT_SECONDS + 2 * PROBE_TIMEOUT_SECONDS + 1

SECRETS = set()  # every secret the harness handles, to be found in no log line


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def wait_for(what, predicate, timeout, interval=0.1):
    """Polls `predicate` until it returns a truthy value; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------- database


class Database:
    def __init__(self, base_url, name):
        self.base = urllib.parse.urlsplit(base_url)
        self.name = name
        self.url = urllib.parse.urlunsplit(self.base._replace(path="/" + name))
        self.password = urllib.parse.unquote(self.base.password or "")
        SECRETS.add(self.password)
        SECRETS.add(base_url)
        self.psql_bin = find_psql()

    def psql(self, sql, database=None):
        env = dict(os.environ, PGPASSWORD=self.password, PGCONNECT_TIMEOUT="5")
        out = subprocess.run(
            [self.psql_bin, "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-h", self.base.hostname,
             "-p", str(self.base.port), "-U", urllib.parse.unquote(self.base.username), "-d", database or self.name,
             "-c", sql],
            env=env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise Failure(f"psql failed: {out.stderr.strip()[:300]}")
        return out.stdout.strip()

    def value(self, sql):
        text = self.psql(sql)
        return int(text) if text else 0

    def rows(self, sql):
        text = self.psql(sql)
        return [line.split("|") for line in text.splitlines() if line]

    def via(self, port):
        """This database's URL through a proxy on loopback `port` (same credentials and options)."""
        userinfo = self.base.netloc.rpartition("@")[0]
        return urllib.parse.urlunsplit(self.base._replace(netloc=f"{userinfo}@127.0.0.1:{port}", path="/" + self.name))

    def recreate(self):
        self.psql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)', database="postgres")
        self.psql(f'CREATE DATABASE "{self.name}"', database="postgres")

    def drop(self):
        try:
            self.psql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)', database="postgres")
        except Failure:
            pass


def find_psql():
    found = shutil.which("psql")
    if found:
        return found
    for version in sorted(os.listdir("/usr/lib/postgresql"), reverse=True):
        candidate = f"/usr/lib/postgresql/{version}/bin/psql"
        if os.path.exists(candidate):
            return candidate
    raise Failure("psql not found (scripts/db.sh installs PostgreSQL)")


# ---------------------------------------------------------------- processes


class Process:
    """A child process whose stdout and stderr go to one log file."""

    def __init__(self, name, argv, env, log_dir, stdin=False):
        self.name = name
        self.argv = argv
        self.env = env
        self.stdin = stdin  # whether the harness writes to its standard input (commands)
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.out_path = os.path.join(log_dir, f"{name}.out")
        self.start()

    def start(self):
        # The log (standard error) is what the secrets scan reads; standard output is a
        # process's answer (nh-emulator prints its connection string there, by design).
        self.log = open(self.log_path, "ab")
        self.out = open(self.out_path, "ab")
        self.offset = os.path.getsize(self.log_path)
        self.out_offset = os.path.getsize(self.out_path)
        self.popen = subprocess.Popen(self.argv, env=self.env, stdout=self.out, stderr=self.log,
                                      stdin=subprocess.PIPE if self.stdin else subprocess.DEVNULL,
                                      start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def output(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_line(self, pattern, timeout=60, stdout=False):
        """Waits for `pattern` in what this start of the process logged (or printed)."""
        regex = re.compile(pattern)
        path, offset = (self.out_path, self.out_offset) if stdout else (self.log_path, self.offset)

        def found():
            if self.popen.poll() is not None:
                with open(self.log_path, "rb") as f:
                    tail = f.read().decode("utf-8", "replace").strip().splitlines()[-1:]
                raise Failure(f"{self.name} exited ({self.popen.returncode}): {tail}")
            with open(path, "rb") as f:
                f.seek(offset)
                match = regex.search(f.read().decode("utf-8", "replace"))
            return match
        return wait_for(f"{self.name} to log /{pattern}/", found, timeout, 0.05)

    def signal(self, sig):
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def kill9(self):
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self):
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGCONT)
                os.kill(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout=20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.signal(signal.SIGKILL)
                self.popen.wait(timeout=10)
        if self.popen.stdin:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        self.log.close()
        self.out.close()


class FaultProxy:
    """scripts/chaos/faultproxy.py between a process and its upstream (a TCP port on loopback).

    A Process of the harness: its log (connections and mode changes, never the bytes) goes to
    the scenario's log folder, where the secrets scan reads it. `mode` sends one command
    (`pass`, `blackhole`, `slow MS`, `reset P`, `halfopen`) and returns the proxy's answer.
    """

    def __init__(self, name, upstream_host, upstream_port, log_dir, seed=1):
        script = os.path.join(ROOT, "scripts", "chaos", "faultproxy.py")
        log_path = os.path.join(log_dir, f"{name}.log")
        self.process = Process(name, [sys.executable, script, "--upstream", f"{upstream_host}:{upstream_port}",
                                      "--port", "0", "--seed", str(seed), "--log", log_path],
                               dict(os.environ), log_dir, stdin=True)
        self.port = int(self.process.wait_line(r"listening (\d+)", 30, stdout=True).group(1))
        self.answered = os.path.getsize(self.process.out_path)  # answers already read
        self.lock = threading.Lock()

    def mode(self, command):
        with self.lock:
            try:
                self.process.popen.stdin.write((command + "\n").encode())
                self.process.popen.stdin.flush()
            except OSError as error:
                raise Failure(f"{self.process.name} does not take commands: {error}")

            def answer():
                if self.process.popen.poll() is not None:
                    raise Failure(f"{self.process.name} exited ({self.process.popen.returncode})")
                with open(self.process.out_path, "rb") as f:
                    f.seek(self.answered)
                    text = f.read().decode("utf-8", "replace")
                return text if text.endswith("\n") else None
            line = wait_for(f"{self.process.name} to answer {command}", answer, 10, 0.02)
            self.answered += len(line.encode())
            line = line.strip()
            check(line.startswith("ok"), f"{self.process.name} refused {command}: {line}")
            return line

    def stats(self):
        """The proxy's counters: connections, open, resets, held_bytes."""
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", self.mode("stats"))}


# ---------------------------------------------------------------- HTTP


def http(method, url, body=None, headers=None, timeout=10):
    """(status, body text, headers, seconds). Connection failures are status 0."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(), dict(response.headers), time.monotonic() - started
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers), time.monotonic() - started
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as error:
        return 0, str(error), {}, time.monotonic() - started


# ---------------------------------------------------------------- the system


class System:
    """One scenario's processes: a fresh database, nh-emulator, herald-api, herald-worker(s)."""

    def __init__(self, name, bin_dir, base_url, worker_env=None, api_env=None, emulator_args=(), proxies=(),
                 database="herald_chaos"):
        """`database`: the name of the database made afresh for it. `proxies`: "hub" puts a FaultProxy between the workers and nh-emulator (`hub_proxy`);
        "db" one between herald-api and PostgreSQL and one between the workers and PostgreSQL
        (`db_proxies`: "api", "worker"). heraldctl and the harness's own queries go direct."""
        self.name = name
        self.bin = bin_dir
        self.log_dir = os.path.join(LOGS, name)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        os.makedirs(self.log_dir)
        self.db = Database(base_url, database)
        self.db.recreate()
        self.processes = []
        self.env = dict(os.environ, HERALD_DATABASE_URL=self.db.url, HERALD_LOG_LEVEL="info",
                        HERALD_AUTH_BCRYPT_COST="4")
        self.env.pop("HERALD_ENV_FILE", None)
        self.ctl("migrate")
        self.emulator = self.spawn("nh-emulator", [os.path.join(bin_dir, "nh-emulator"), "--port", "0", "--inspection",
                                                   "--max-requests", "1000000", "--max-deliveries", "1000000",
                                                   *emulator_args], self.env)
        self.emulator.wait_line(r"HERALD_HUB_NAME=", 30, stdout=True)
        text = self.emulator.output()
        connection = re.search(r"HERALD_HUB_CONNECTION_STRING=(\S+)", text).group(1)
        SECRETS.add(connection)
        SECRETS.add(re.search(r"SharedAccessKey=([^;\s]+)", connection).group(1))
        self.emulator_url = re.search(r"Endpoint=(http://[^/;]+)/", connection).group(1)
        self.hub = re.search(r"HERALD_HUB_NAME=(\S+)", text).group(1)
        self.env.update(HERALD_HUB_CONNECTION_STRING=connection, HERALD_HUB_NAME=self.hub)
        self.hub_proxy = None
        self.db_proxies = {}
        hub_env, api_db_env, worker_db_env = {}, {}, {}
        if "hub" in proxies:
            emulator = urllib.parse.urlsplit(self.emulator_url)
            self.hub_proxy = self.proxy("faultproxy-hub", emulator.hostname, emulator.port)
            # The SAS token's audience is the host without its port, so only the port changes.
            hub_env["HERALD_HUB_CONNECTION_STRING"] = connection.replace(
                f"Endpoint={self.emulator_url}/", f"Endpoint=http://{emulator.hostname}:{self.hub_proxy.port}/")
        if "db" in proxies:
            for role, env in (("api", api_db_env), ("worker", worker_db_env)):
                self.db_proxies[role] = self.proxy(f"faultproxy-db-{role}", self.db.base.hostname, self.db.base.port)
                env["HERALD_DATABASE_URL"] = self.db.via(self.db_proxies[role].port)
                SECRETS.add(env["HERALD_DATABASE_URL"])
        self.key = self.ctl("keys", "create", "--name", "chaos", "--scopes", "send,read").strip().splitlines()[-1]
        SECRETS.add(self.key)
        # The load here is the harness's own: per-key and per-user limits would only slow it.
        self.api_env = dict(self.env, HERALD_API_PORT="0", HERALD_API_KEY_RATE_LIMIT="10000",
                            HERALD_TUTORIAL_SEND_RATE_LIMIT="10000", HERALD_DEVICE_WRITE_RATE_PER_MINUTE="100000",
                            **api_db_env, **(api_env or {}))
        self.api = self.spawn("herald-api", [os.path.join(bin_dir, "herald-api")], self.api_env)
        port = self.api.wait_line(r"port=(\d+).*herald\.api\.listening", 60).group(1)
        self.api_url = f"http://127.0.0.1:{port}"
        self.worker_env = dict(self.env, HERALD_WORKER_METRICS_PORT="0", **hub_env, **worker_db_env,
                               **(worker_env or {}))
        if os.environ.get("CHAOS_WORKER_LOG_LEVEL"):
            self.worker_env["HERALD_LOG_LEVEL"] = os.environ["CHAOS_WORKER_LOG_LEVEL"]
        self.workers = []
        self.answer_seconds = []  # how long each API request took to answer (v1)

    def spawn(self, name, argv, env):
        process = Process(name, argv, env, self.log_dir)
        self.processes.append(process)
        return process

    def proxy(self, name, host, port):
        proxy = FaultProxy(name, host, port, self.log_dir)
        self.processes.append(proxy.process)
        return proxy

    def db_mode(self, command):
        """Sets `command` on every database proxy."""
        for proxy in self.db_proxies.values():
            proxy.mode(command)

    def ctl(self, *args, stdin=None):
        out = subprocess.run([os.path.join(self.bin, "heraldctl"), *args], env=self.env, input=stdin,
                             capture_output=True, text=True, timeout=120)
        with open(os.path.join(self.log_dir, "heraldctl.log"), "a") as log:
            log.write(out.stderr)
        if out.returncode != 0:
            raise Failure(f"heraldctl {' '.join(args)} failed: {out.stderr.strip()[:300]}")
        return out.stdout

    def start_worker(self):
        worker = self.spawn(f"herald-worker-{len(self.workers) + 1}", [os.path.join(self.bin, "herald-worker")],
                            self.worker_env)
        worker.wait_line(r"herald\.worker\.started", 60)
        worker.metrics_port = int(worker.wait_line(r"port=(\d+).*herald\.worker\.metrics_listening", 60).group(1))
        self.workers.append(worker)
        return worker

    def restart_worker(self, worker):
        worker.start()
        worker.wait_line(r"herald\.worker\.started", 60)
        worker.metrics_port = int(worker.wait_line(r"port=(\d+).*herald\.worker\.metrics_listening", 60).group(1))

    def worker_metrics(self, worker):
        """The worker's /metrics as {(name, frozenset of label pairs): value}."""
        status, text, _, _ = http("GET", f"http://127.0.0.1:{worker.metrics_port}/metrics",
                                  headers={"Authorization": "Bearer " + self.key})
        check(status == 200, f"{worker.name} /metrics answered {status}: {text[:200]}")
        samples = {}
        for line in text.splitlines():
            match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
            if match and not line.startswith("#"):
                labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
                samples[(match.group(1), labels)] = float(match.group(3))
        return samples

    def hub_calls(self, operation="send"):
        """{status: count} of the workers' herald_hub_calls_total for `operation` (status is the
        HTTP status, or the failure code when no answer came: `timeout`, `connection`, …)."""
        counts = {}
        for worker in self.workers:
            for (name, labels), value in self.worker_metrics(worker).items():
                labels = dict(labels)
                if name == "herald_hub_calls_total" and labels.get("operation") == operation:
                    counts[labels["status"]] = counts.get(labels["status"], 0) + int(value)
        return counts

    # API
    def v1(self, method, path, body=None, headers=None, timeout=30):
        answer = http(method, self.api_url + path, body,
                      dict({"Authorization": "Bearer " + self.key}, **(headers or {})), timeout)
        self.answer_seconds.append(answer[3])
        return answer

    def send_batch(self, handles, alert="chaos"):
        """Accepts one direct send per handle (batches of 1,000); returns the notification ids."""
        ids = []
        for start in range(0, len(handles), 1000):
            # telemetry: a direct send is not polled by default (issue 16); the scenarios count
            # Completed, the hub's telemetry answer.
            items = [{"target": {"deviceHandle": h, "platform": "apple"},
                      "content": {"apple": {"aps": {"alert": alert}}}, "idempotencyKey": h, "telemetry": True}
                     for h in handles[start:start + 1000]]
            status, text, _, _ = self.v1("POST", "/v1/notifications:batch", {"notifications": items}, timeout=120)
            check(status == 202, f"batch answered {status}: {text[:200]}")
            ids += [n["id"] for n in json.loads(text)["notifications"]]
        return ids

    # emulator
    def emu(self, method, path, body=None):
        status, text, _, _ = http(method, f"{self.emulator_url}/_emulator/hubs/{self.hub}{path}", body, timeout=60)
        check(200 <= status < 300, f"emulator {method} {path} answered {status}: {text[:200]}")
        return json.loads(text) if text else None

    def faults(self, rules, seed=1):
        self.emu("POST", f"/faults?seed={seed}", rules)

    def delivery_gaps(self, targets):
        """(lost, repeats): targets the emulator delivered nothing to, and deliveries beyond one."""
        delivered = self.deliveries_by_handle()
        lost = sum(1 for h in targets if delivered.get(h, 0) == 0)
        repeats = sum(max(0, delivered.get(h, 0) - 1) for h in targets)
        return lost, repeats

    def held_by(self, worker):
        """Jobs the worker process holds now (its executors' `locked_by` carries its pid)."""
        return self.db.value(
            f"SELECT count(*) FROM pgqueue.jobs WHERE state = 'running' AND locked_by LIKE '%:{worker.pid}:%'")

    def deliveries_by_handle(self):
        counts = {}
        for delivery in self.emu("GET", "/deliveries"):
            handle = delivery.get("pnsHandle")
            counts[handle] = counts.get(handle, 0) + 1
        return counts

    # database
    def states(self):
        return dict((state, int(n)) for state, n in self.db.rows("SELECT state, count(*) FROM notifications GROUP BY 1"))

    def wait_final(self, total, timeout):
        def settled():
            states = self.states()
            return states if sum(n for s, n in states.items() if s in FINAL) >= total else None
        try:
            return wait_for(f"{total} notifications to reach a final state", settled, timeout, 0.5)
        except Failure as failure:
            self.dump_unfinished()
            raise Failure(f"{failure}; states {self.states()}; see {self.log_dir}/unfinished.txt")

    def dump_unfinished(self):
        """What the database says about notifications that did not finish, for the post-mortem."""
        final = ", ".join(f"'{s}'" for s in FINAL)
        queries = [
            f"SELECT h.* FROM hub_sends h JOIN notifications n ON n.id = h.notification_id "
            f"WHERE n.state NOT IN ({final}) LIMIT 20",
            f"SELECT o.* FROM notification_outcomes o JOIN notifications n ON n.id = o.notification_id "
            f"WHERE n.state NOT IN ({final}) ORDER BY o.id LIMIT 40",
            "SELECT j.id, j.kind, j.state, j.attempt, j.max_attempts, j.run_at, j.locked_by, j.lease_expires_at, "
            "j.args, j.errors FROM pgqueue.jobs j LIMIT 40",
            "SELECT h.id, h.kind, h.state, h.attempt, h.args, h.errors FROM pgqueue.job_history h "
            "WHERE h.state <> 'completed' LIMIT 40",
        ]
        with open(os.path.join(self.log_dir, "unfinished.txt"), "w") as out:
            for query in queries:
                out.write(f"-- {query}\n")
                try:
                    out.write(self.db.psql(query) + "\n\n")
                except Failure as failure:
                    out.write(f"{failure}\n\n")

    def unrecorded_attempts(self):
        """Send attempts whose worker wrote no result: the next start (or the sweep) settles such
        an attempt left in flight with an `unknown` outcome row; one without any row counts too.
        Only such an attempt's call can have gone out without its send ending there."""
        return self.db.value(
            "SELECT count(*) FROM hub_sends h, generate_series(1, h.attempts) a WHERE NOT EXISTS "
            "(SELECT 1 FROM notification_outcomes o WHERE o.hub_send_id = h.id AND o.kind = 'send' AND o.attempt = a "
            "AND o.decision <> 'unknown')")

    def duplicate_outcomes(self):
        return self.db.value("SELECT count(*) FROM (SELECT hub_send_id, attempt FROM notification_outcomes "
                             "WHERE kind = 'send' GROUP BY 1, 2 HAVING count(*) > 1) d")

    def close(self):
        # A scenario that failed mid-partition heals it first, so the processes stop promptly.
        for proxy in [self.hub_proxy, *self.db_proxies.values()]:
            if proxy:
                try:
                    proxy.mode("pass")
                except Failure:
                    pass
        for process in reversed(self.processes):
            process.stop()
        self.db.drop()


def handles(prefix, n):
    # APNs-shaped (64 hex digits), unique per scenario run.
    run = secrets.token_hex(4)
    return [f"{prefix}{run}{i:08x}".ljust(64, "0")[:64] for i in range(n)]


def summary(states):
    return ",".join(f"{state}={n}" for state, n in sorted(states.items()))


# ---------------------------------------------------------------- scenarios


def scenario_kill9(bin_dir, base_url, size):
    """kill -9 one of two workers mid-batch, three times; restart it each time."""
    n = size["kill9.sends"]
    system = System("kill9", bin_dir, base_url,
                    worker_env={"HERALD_WORKER_CONCURRENCY": "16", "HERALD_LEASE_SECONDS": "3"})
    try:
        system.faults([{"method": "POST", "pathPattern": "messages/?$", "delayMs": 40}])
        victim = system.start_worker()
        system.start_worker()
        targets = [h.upper() for h in handles("a", n)]
        ids = system.send_batch(targets)
        check(len(ids) == n, f"{len(ids)} of {n} accepted")
        in_flight = 0
        for share in (0.2, 0.45, 0.7):
            wait_for(f"{int(share * 100)}% of the sends to be attempted",
                     lambda: system.db.value("SELECT count(*) FROM hub_sends WHERE attempts > 0") >= share * n, 120, 0.05)
            in_flight += system.held_by(victim)
            victim.kill9()
            system.restart_worker(victim)
        states = system.wait_final(n, 240)
        lost, duplicates = system.delivery_gaps(targets)
        figures = (f"sends={n} kills=3 final={sum(states.values())} {summary(states)} lost={lost} "
                   f"duplicates={duplicates} in_flight_at_kills={in_flight}")
        check(states.get("Completed", 0) == n, f"not all Completed: {figures}")
        check(lost == 0, f"deliveries lost: {figures}")
        check(duplicates <= in_flight, f"more duplicates than in-flight sends: {figures}")
        check(system.duplicate_outcomes() == 0, "an attempt has two outcome rows")
        return figures
    finally:
        system.close()


def scenario_webhooks(bin_dir, base_url, size):
    """kill -9 one of two workers mid-delivery of webhooks, three times; restart it each time.

    Every notification's enqueued and completed events go to a receiver on loopback that
    verifies each request with the reference Standard Webhooks library (scripts/webhook-receiver.py)
    and answers after 0.2 s, so deliveries are in flight at each kill. Every event reaches it
    with a 2xx, none it was not sent is invented, and a repeat is always one of Herald's recorded
    attempts of the same webhook-id.
    """
    n = size["webhooks.sends"]
    python = subprocess.run([os.path.join(ROOT, "scripts", "webhook-venv.sh")], capture_output=True, text=True,
                            check=True, timeout=600).stdout.strip().splitlines()[-1]
    hooks = {"HERALD_WEBHOOK_ALLOW_PRIVATE": "on", "HERALD_WEBHOOK_TIMEOUT_SECONDS": "5",
             "HERALD_WEBHOOK_RETRY_SCHEDULE": ",".join(["0.5"] * 20)}
    system = System("webhooks", bin_dir, base_url, api_env=hooks,
                    worker_env=dict(hooks, HERALD_WORKER_CONCURRENCY="64", HERALD_LEASE_SECONDS="3"))
    try:
        secret_file = os.path.join(system.log_dir, "webhook-secret")
        receiver = system.spawn("webhook-receiver", [python, os.path.join(ROOT, "scripts", "webhook-receiver.py"),
                                                     "--secret-file", secret_file, "--slow-every", "1",
                                                     "--slow-seconds", "0.2"], dict(os.environ))
        port = receiver.wait_line(r"PORT=(\d+)", 60, stdout=True).group(1)
        status, text, _, _ = system.v1("POST", "/v1/webhooks", {
            "url": f"http://127.0.0.1:{port}/hook", "types": ["notification.enqueued", "notification.completed"],
            "maxConcurrency": 32})
        check(status == 201, f"the endpoint was refused: {status} {text[:200]}")
        secret = json.loads(text)["secret"]
        SECRETS.add(secret)
        with open(secret_file, "w") as f:
            f.write(secret)
        victim = system.start_worker()
        system.start_worker()
        targets = [h.upper() for h in handles("e", n)]
        ids = system.send_batch(targets)
        check(len(ids) == n, f"{len(ids)} of {n} accepted")
        delivered = "SELECT count(*) FROM webhook_deliveries WHERE state = 'Delivered'"
        in_flight = 0
        for share in (0.2, 0.45, 0.7):
            wait_for(f"{int(share * 100)}% of the webhooks to be delivered",
                     lambda: system.db.value(delivered) >= share * 2 * n, 180, 0.05)
            in_flight += system.db.value("SELECT count(*) FROM pgqueue.jobs WHERE kind = 'webhook.deliver' AND "
                                         f"state = 'running' AND locked_by LIKE '%:{victim.pid}:%'")
            victim.kill9()
            system.restart_worker(victim)
        states = system.wait_final(n, 240)
        wait_for("every event to be delivered", lambda: system.db.value(delivered) == 2 * n, 300, 0.2)
        events = {f"evt_{row[0]}" for row in system.db.rows("SELECT id FROM events WHERE type IN ('notification.enqueued', 'notification.completed')")}
        attempts = {f"evt_{event}": int(count) for event, count in
                    system.db.rows("SELECT event_id, attempts FROM webhook_deliveries")}
        lines = [json.loads(line) for line in receiver.output().splitlines() if line.startswith("{")]
        answered = {line["id"] for line in lines if line["answer"] in (204, "slow") and line["verified"]}
        requests = {}
        for line in lines:
            requests[line["id"]] = requests.get(line["id"], 0) + 1
        unverified = sum(1 for line in lines if not line["verified"] and line["answer"] != "truncated")
        invented = len(set(requests) - events)
        lost = len(events - answered)
        unrecorded = sum(1 for event, count in requests.items() if count > attempts.get(event, 0))
        repeats = sum(count - 1 for count in requests.values())
        figures = (f"sends={n} kills=3 events={len(events)} final={sum(states.values())} {summary(states)} "
                   f"requests={len(lines)} lost={lost} invented={invented} unverified={unverified} "
                   f"repeats={repeats} unrecorded_repeats={unrecorded} in_flight_at_kills={in_flight}")
        check(len(events) == 2 * n, f"not one enqueued and one completed event per send: {figures}")
        check(lost == 0 and invented == 0, f"events lost or invented: {figures}")
        check(unverified == 0, f"a request the reference library could not verify: {figures}")
        check(unrecorded == 0, f"a repeat that is no recorded attempt: {figures}")
        check(repeats <= in_flight, f"more repeats than deliveries in the killed worker's hands: {figures}")
        return figures
    finally:
        system.close()


def scenario_restart(bin_dir, base_url, size):
    """Restart PostgreSQL while the API accepts sends and the worker delivers."""
    outage = size["restart.seconds"]
    system = System("restart", bin_dir, base_url,
                    worker_env={"HERALD_WORKER_CONCURRENCY": "32"})
    load = None
    try:
        system.start_worker()
        load = Load(system, "b")
        wait_for("sends accepted before the outage", lambda: load.accepted_since(0) >= 50, 60)
        down_at = time.monotonic()
        restart = subprocess.run([os.path.join(ROOT, "scripts", "db.sh"), "restart", "fast", str(outage)],
                                 capture_output=True, text=True, timeout=300)
        up_at = time.monotonic()
        check(restart.returncode == 0, f"db.sh restart failed: {restart.stderr[-300:]}")
        wait_for("sends accepted after the outage", lambda: load.accepted_since(up_at) >= 50, 60)
        results = load.stop()
        load = None
        # A request caught by the restart answers within HERALD_DATABASE_WAIT_SECONDS: 202, or
        # 503 with Retry-After; nothing accepted is lost (the checks both database faults share).
        figures, failures, _, _ = database_partition_checks(system, results)
        during = [r for r in results if down_at <= r[0] <= up_at]
        refused = [r for r in during if r[1] == 503]
        resumed = min((r[0] for r in results if r[1] == 202 and r[0] > up_at), default=None)
        figures = (f"outage={outage}s {figures} during_outage={len(during)} 503_during={len(refused)} "
                   f"slowest_during={max((r[2] for r in during), default=0.0):.2f}s "
                   f"resumed_after={(resumed - up_at) if resumed else -1:.2f}s")
        check(len(refused) > 0, f"no 503 during the outage: {figures}")
        check(not failures, f"{'; '.join(failures)}: {figures}")
        return figures
    finally:
        if load:
            load.stop()
        system.close()


def scenario_storm(bin_dir, base_url, size):
    """30% 5xx, 10% 429 with Retry-After, 5% slower than the client timeout."""
    n = size["storm.sends"]
    retry_after = 1
    # 45% of calls fail: with the default 10 attempts one send in ~3,000 would run out of them
    # (0.45^10); the storm is about retrying correctly, so sends get 30.
    system = System("storm", bin_dir, base_url, api_env={"HERALD_SEND_MAX_ATTEMPTS": "30"},
                    worker_env={"HERALD_WORKER_CONCURRENCY": "200", "HERALD_HUB_TIMEOUT_SECONDS": "1"})
    try:
        sends = {"method": "POST", "pathPattern": "messages/?$"}
        # The first rule that matches and wins its draw applies: 0.30, then 0.70·p, then 0.60·p.
        system.faults([dict(sends, status=500, probability=0.30),
                       dict(sends, status=429, retryAfterSeconds=retry_after, probability=0.10 / 0.70),
                       dict(sends, delayMs=1500, probability=0.05 / 0.60)], seed=7)
        system.start_worker()
        targets = [h.upper() for h in handles("c", n)]
        system.send_batch(targets)
        # Backoff doubles per failure (1 s base, full jitter, 5 min cap): the unluckiest send's
        # chain of failures decides how long the storm lasts.
        states = system.wait_final(n, 600 if n <= 1000 else 2400)
        requests = [r for r in system.emu("GET", "/requests")
                    if r["method"] == "POST" and re.search(r"messages/?$", r["path"])]
        by_handle = {}
        for r in requests:
            handle = {k.lower(): v for k, v in r["headers"].items()}.get("servicebusnotification-devicehandle")
            by_handle.setdefault(handle, []).append(r)
        early = 0
        shortest = None
        for calls in by_handle.values():
            calls.sort(key=lambda r: r["at"])
            for before, after in zip(calls, calls[1:]):
                if before["status"] != 429:
                    continue
                gap = (parse_time(after["at"]) - parse_time(before["at"])).total_seconds()
                shortest = gap if shortest is None else min(shortest, gap)
                if gap < retry_after - 0.002:
                    early += 1
        statuses = {}
        for r in requests:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        lost, _ = system.delivery_gaps(targets)
        figures = (f"sends={n} hub_calls={len(requests)} statuses={json.dumps(statuses, sort_keys=True)} "
                   f"{summary(states)} lost={lost} retried_before_retry_after={early} "
                   f"shortest_gap_after_429={shortest if shortest is None else round(shortest, 3)}s")
        check(states.get("Completed", 0) == n, f"not all Completed: {figures}")
        check(lost == 0, f"deliveries lost: {figures}")
        check(early == 0, f"retried before Retry-After: {figures}")
        check(statuses.get(429, 0) > 0 and statuses.get(500, 0) > 0, f"the storm did not happen: {figures}")
        return figures
    finally:
        system.close()


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def scenario_gone(bin_dir, base_url, size):
    """410 Gone on every third registration update: every device ends synced under its own id.

    Every third device's hub registration is expired at the emulator (which then answers 410 to
    its update, as the service does for a registration it dropped), then every device is updated.
    """
    n = size["gone.devices"]
    per_user = 100
    system = System("gone", bin_dir, base_url, worker_env={"HERALD_WORKER_CONCURRENCY": "32"})
    try:
        system.start_worker()
        users = []
        for u in range((n + per_user - 1) // per_user):
            name, password = f"chaos{u}", secrets.token_urlsafe(12)
            SECRETS.add(password)
            system.ctl("users", "add", name, "--password-stdin", stdin=password + "\n")
            users.append("Basic " + base64.b64encode(f"{name}:{password}".encode()).decode())
        devices = []  # (id, auth, handle)

        def register(i):
            auth = users[i // per_user]
            handle = f"d{i:08x}".ljust(64, "0").upper()
            status, text, _, _ = http("POST", f"{system.api_url}/api/register?handle={handle}", "",
                                      {"Authorization": auth})
            check(status == 200, f"register answered {status}: {text[:200]}")
            device = json.loads(text)
            status, text, _, _ = http("PUT", f"{system.api_url}/api/register/{device}",
                                      {"Platform": "apns", "Handle": handle, "Tags": ["first"]}, {"Authorization": auth})
            check(status == 200, f"update answered {status}: {text[:200]}")
            return (device, auth, handle)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            devices = list(pool.map(register, range(n)))
        synced = "SELECT count(*) FROM devices WHERE sync_state = 'synced' AND synced_version = version"
        wait_for(f"{n} devices synced", lambda: system.db.value(synced) >= n, 180, 0.5)
        registration_ids = dict(system.db.rows("SELECT id, hub_registration_id FROM devices"))
        for index, device in enumerate(devices):
            if index % 3 == 0:
                system.emu("POST", f"/registrations/{registration_ids[device[0]]}/expire")

        def update(device):
            ident, auth, handle = device
            status, text, _, _ = http("PUT", f"{system.api_url}/api/register/{ident}",
                                      {"Platform": "apns", "Handle": handle, "Tags": ["second"]},
                                      {"Authorization": auth})
            check(status == 200, f"update answered {status}: {text[:200]}")

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(update, devices))
        try:
            wait_for(f"{n} devices synced again", lambda: system.db.value(synced) >= n, 240, 0.5)
        except Failure as failure:
            with open(os.path.join(system.log_dir, "unfinished.txt"), "w") as out:
                out.write(system.db.psql("SELECT d.id, d.sync_state, d.version, d.synced_version, d.last_error, "
                                         "d.hub_registration_id FROM devices d WHERE d.sync_state <> 'synced' "
                                         "OR d.synced_version IS DISTINCT FROM d.version") + "\n\n")
                out.write(system.db.psql("SELECT * FROM pgqueue.jobs") + "\n")
            raise Failure(f"{failure}; see {system.log_dir}/unfinished.txt")
        gone = sum(1 for r in system.emu("GET", "/requests") if r["status"] == 410)
        ids = set(system.db.psql("SELECT id FROM devices WHERE deleted_at IS NULL").split())
        kept = sum(1 for d in devices if d[0] in ids)
        registrations = system.emu("GET", "/registrations")
        tagged = {r["pnsHandle"].upper() for r in registrations if "second" in r.get("tags", [])}
        with_tag = sum(1 for d in devices if d[2] in tagged)
        now_ids = dict(system.db.rows("SELECT id, hub_registration_id FROM devices"))
        moved = sum(1 for d in devices if registration_ids[d[0]] != now_ids.get(d[0]))
        states = dict(system.db.rows("SELECT sync_state, count(*) FROM devices GROUP BY 1"))
        figures = (f"devices={n} gone_answers={gone} sync_states={json.dumps(states, sort_keys=True)} "
                   f"ids_unchanged={kept} hub_registrations_updated={with_tag} recreated={moved}")
        check(gone >= n // 3, f"fewer 410 answers than expired registrations: {figures}")
        check(kept == n, f"device ids changed: {figures}")
        check(with_tag == n, f"registrations missing the update: {figures}")
        return figures
    finally:
        system.close()


def scenario_stall(bin_dir, base_url, size):
    """SIGSTOP a worker past its lease, SIGCONT it: its late writes change nothing."""
    n = size["stall.sends"]
    lease = 3
    system = System("stall", bin_dir, base_url,
                    worker_env={"HERALD_WORKER_CONCURRENCY": "16", "HERALD_LEASE_SECONDS": str(lease)})
    try:
        system.faults([{"method": "POST", "pathPattern": "messages/?$", "delayMs": 300}])
        stalled = system.start_worker()
        system.start_worker()
        targets = [h.upper() for h in handles("e", n)]
        system.send_batch(targets)
        held = wait_for("the worker to hold running jobs", lambda: system.held_by(stalled), 60, 0.05)
        stalled.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_for("its jobs to be taken over", lambda: system.held_by(stalled) == 0, 60, 0.2)
        paused = time.monotonic() - stopped_at
        stalled.signal(signal.SIGCONT)
        states = system.wait_final(n, 240)
        duplicates = system.duplicate_outcomes()
        lost, extra = system.delivery_gaps(targets)
        bad_attempts = system.db.value(
            "SELECT count(*) FROM hub_sends h, generate_series(1, h.attempts) a WHERE NOT EXISTS "
            "(SELECT 1 FROM notification_outcomes o WHERE o.hub_send_id = h.id AND o.kind = 'send' AND o.attempt = a)")
        figures = (f"sends={n} held_when_stopped={held} stopped_for={paused:.1f}s lease={lease}s {summary(states)} "
                   f"duplicate_outcomes={duplicates} attempts_without_one_outcome={bad_attempts} lost={lost} "
                   f"repeated_deliveries={extra}")
        check(states.get("Completed", 0) == n, f"not all Completed: {figures}")
        check(duplicates == 0, f"an attempt has two outcome rows: {figures}")
        check(bad_attempts == 0, f"an attempt without an outcome row: {figures}")
        check(lost == 0, f"deliveries lost: {figures}")
        check(extra <= held, f"more repeats than jobs held: {figures}")
        return figures
    finally:
        system.close()


def scenario_schema(bin_dir, base_url, size):
    """schemathesis against the served OpenAPI document, as a sender key and as a device user."""
    st = os.path.join(DATA, "chaos-venv", "bin", "st")
    check(os.path.exists(st), "schemathesis is not installed (scripts/chaos.sh installs it)")
    system = System("schema", bin_dir, base_url, api_env={"HERALD_MAX_DEVICES_PER_USER": "100000"})
    try:
        password = secrets.token_urlsafe(12)
        SECRETS.add(password)
        system.ctl("users", "add", "schema", "--password-stdin", stdin=password + "\n")
        basic = "Basic " + base64.b64encode(f"schema:{password}".encode()).decode()
        runs = [("v1", "^/v1/", "Bearer " + system.key), ("api", "^/api/", basic)]
        figures = []
        for label, paths, auth in runs:
            out = subprocess.run(
                [st, "run", system.api_url + "/openapi.yaml", "--url", system.api_url,
                 "--include-path-regex", paths, "-H", f"Authorization: {auth}",
                 "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                             "response_schema_conformance",
                 "--max-examples", str(size["schema.examples"]), "--seed", "1", "--request-timeout", "10",
                 "--no-color"],
                env=dict(os.environ, SCHEMATHESIS_HOOKS=""), capture_output=True, text=True, timeout=900,
                cwd=system.log_dir)  # its example cache (.schemathesis/) stays with the logs
            with open(os.path.join(system.log_dir, f"schemathesis-{label}.log"), "w") as log:
                log.write(out.stdout + out.stderr)
            # The summary's "Test cases:" line ("N generated, N passed"), else the last line.
            lines = out.stdout.strip().splitlines() or ["?"]
            cases = [lines[i + 1] for i, line in enumerate(lines[:-1]) if line.strip() == "Test cases:"]
            tail = " ".join((cases[-1] if cases else lines[-1]).split())
            figures.append(f"{label}: {tail}")
            check(out.returncode == 0, f"schemathesis ({label}) found failures, see "
                                       f"{system.log_dir}/schemathesis-{label}.log: {tail}")
        return "; ".join(figures)
    finally:
        system.close()


# ---------------------------------------------------------------- partitions


class Load:
    """Single sends from four clients while a fault lasts: each request's (started, status,
    seconds, handle, notification id, Retry-After); a client that gets no 202 pauses 50 ms."""

    def __init__(self, system, prefix, clients=4):  # prefix: hex digits, as handles are
        self.system = system
        self.results = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.counter = iter(range(10**9))
        self.run = prefix + secrets.token_hex(4)
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def client(self):
        while not self.stopping.is_set():
            with self.lock:
                handle = f"{self.run}{next(self.counter):08x}".ljust(64, "0").upper()
            started = time.monotonic()
            body = {"target": {"deviceHandle": handle, "platform": "apple"},
                    "content": {"apple": {"aps": {"alert": "partition"}}}, "telemetry": True}
            status, text, headers, seconds = self.system.v1(
                "POST", "/v1/notifications", body, {"Idempotency-Key": handle}, timeout=30)
            notification = json.loads(text).get("id") if status == 202 else None
            with self.lock:
                self.results.append((started, status, seconds, handle, notification, headers.get("Retry-After")))
            if status != 202:
                time.sleep(0.05)

    def accepted_since(self, instant):
        with self.lock:
            return sum(1 for r in self.results if r[1] == 202 and r[0] > instant)

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)
        return list(self.results)


def send_timeline(system):
    """(at, started_at) in epoch seconds of every hub send the hub accepted, as the workers wrote
    them (started_at: when the call started), in the order written."""
    rows = system.db.rows("SELECT extract(epoch FROM at), coalesce(extract(epoch FROM started_at), 0) "
                          "FROM notification_outcomes WHERE kind = 'send' AND http_status BETWEEN 200 AND 299 "
                          "ORDER BY at")
    return [(float(at), float(started)) for at, started in rows]


def sending_figures(system, healed_at, window=None):
    """(longest gap without a completed send, seconds from the heal to the first completed send
    whose call started after it; None when none did). `window` (epoch seconds, from, to): the
    gaps within it, its ends included; while sends keep arriving a gap means sending stopped
    (after the load, a late send only shows a job that waited out its lease)."""
    timeline = send_timeline(system)
    ats = [at for at, _ in timeline]
    if window:
        ats = [window[0]] + [at for at in ats if window[0] < at < window[1]] + [window[1]]
    gap = max((b - a for a, b in zip(ats, ats[1:])), default=0.0)
    after = [at for at, started in timeline if started >= healed_at]
    return gap, (min(after) - healed_at) if after else None


def check_alive(system):
    """Every process still runs, and herald-api and each worker answer /health/live and
    /health/ready with 200 (the worker's on its metrics listener)."""
    for process in system.processes:
        check(process.popen.poll() is None, f"{process.name} exited ({process.popen.returncode})")
    urls = [system.api_url] + [f"http://127.0.0.1:{w.metrics_port}" for w in system.workers]
    for url in urls:
        for path in ("/health/live", "/health/ready"):
            wait_for(f"{url}{path} to answer 200", lambda: http("GET", url + path, timeout=5)[0] == 200, 30, 0.5)


def scenario_partition_hub(bin_dir, base_url, size):
    """The hub black-holed (connections accepted, nothing answered) mid-batch, then healed.

    Hub calls are bounded by HERALD_HUB_TIMEOUT_SECONDS (2 s here), so every send the worker
    tries during the partition times out and is retried with backoff; sends get 30 attempts, as
    in the storm, so that a long partition cannot use them up. When the partition heals, the
    proxy delivers what it held: a call that timed out may still have gone out, so the repeats
    are bounded by the worker's counted timeouts.
    """
    n = size["partition.hub.sends"]
    outage = size["partition.hub.seconds"]
    timeout = 2
    system = System("partition.hub", bin_dir, base_url, api_env={"HERALD_SEND_MAX_ATTEMPTS": "30"},
                    worker_env={"HERALD_WORKER_CONCURRENCY": "16", "HERALD_HUB_TIMEOUT_SECONDS": str(timeout)},
                    proxies=("hub",))
    try:
        # Slower answers spread the batch over a few seconds, so the partition finds it mid-way.
        system.faults([{"method": "POST", "pathPattern": "messages/?$", "delayMs": 40}])
        system.start_worker()
        targets = [h.upper() for h in handles("f", n)]
        ids = system.send_batch(targets)
        check(len(ids) == n, f"{len(ids)} of {n} accepted")
        wait_for("20% of the sends to be attempted",
                 lambda: system.db.value("SELECT count(*) FROM hub_sends WHERE attempts > 0") >= 0.2 * n, 120, 0.05)
        system.hub_proxy.mode("blackhole")
        time.sleep(outage)
        held = system.hub_proxy.stats()
        system.hub_proxy.mode("pass")
        healed_at = time.time()
        states = system.wait_final(n, 600)
        lost, duplicates = system.delivery_gaps(targets)
        final = sum(n for state, n in states.items() if state in FINAL)
        gap, resumed = sending_figures(system, healed_at)
        calls = system.hub_calls("send")
        timeouts = calls.get("timeout", 0)
        other_failures = {k: v for k, v in calls.items() if k not in ("timeout",) and not k.startswith("2")}
        unanswered = system.db.value("SELECT count(*) FROM notification_outcomes WHERE kind = 'send' "
                                     "AND http_status IS NULL")
        longest_call = system.db.value("SELECT coalesce(ceil(max(duration_ms)), 0) FROM notification_outcomes "
                                       "WHERE kind = 'send'") / 1000
        figures = (f"sends={n} partition={outage}s accepted={len(ids)} final={final} {summary(states)} lost={lost} "
                   f"duplicates={duplicates} 503=0 longest_answer={max(system.answer_seconds):.2f}s "
                   f"longest_gap={gap:.1f}s resumed_after={-1 if resumed is None else resumed:.2f}s "
                   f"hub_timeouts={timeouts} unanswered_outcomes={unanswered} other_failures={json.dumps(other_failures)} "
                   f"longest_hub_call={longest_call:.1f}s held_at_heal={held.get('held_bytes', 0)}B")
        check(states.get("Completed", 0) == n, f"not all Completed: {figures}")
        check(lost == 0, f"deliveries lost: {figures}")
        check(timeouts > 0, f"no hub timeout counted during the partition: {figures}")
        check(timeouts == unanswered, f"calls without an answer not all counted as timeouts: {figures}")
        check(duplicates <= timeouts, f"more repeats than timed-out calls: {figures}")
        check(longest_call <= timeout + SCHEDULING_SECONDS, f"a hub call outlived HERALD_HUB_TIMEOUT_SECONDS: {figures}")
        check(resumed is not None and resumed <= RESUME_SECONDS, f"sending did not resume within {RESUME_SECONDS}s: {figures}")
        check_alive(system)
        return figures
    finally:
        system.close()


def database_partition_checks(system, results):
    """What the database scenarios check of the load: (figures, failures, duplicates, 503s) —
    every request answered 202, or 503 with Retry-After, within HERALD_DATABASE_WAIT_SECONDS;
    every notification in the database (accepted, or committed as its 503 was written) ends
    final; every accepted one Completed and delivered; repeats only of attempts whose result
    was not written."""
    bound = DATABASE_WAIT_SECONDS + SCHEDULING_SECONDS
    accepted = [r for r in results if r[1] == 202]
    refused = [r for r in results if r[1] == 503]
    other = sorted(set(r[1] for r in results if r[1] not in (202, 503)))
    slow = [r for r in results if r[2] > bound]
    states = system.wait_final(system.db.value("SELECT count(*) FROM notifications"), 300)
    completed = set(system.db.psql("SELECT id FROM notifications WHERE state = 'Completed'").split())
    known = set(system.db.psql("SELECT id FROM notifications").split())
    lost = [r for r in accepted if r[4] not in known]
    unfinished = [r for r in accepted if r[4] in known and r[4] not in completed]
    delivered = system.deliveries_by_handle()
    undelivered = [r for r in accepted if delivered.get(r[3], 0) == 0]
    duplicates = sum(max(0, delivered.get(r[3], 0) - 1) for r in results)
    unrecorded = system.unrecorded_attempts()
    figures = (f"requests={len(results)} accepted={len(accepted)} final={sum(states.values())} {summary(states)} "
               f"lost={len(lost) + len(undelivered)} duplicates={duplicates} 503={len(refused)} "
               f"longest_answer={max((r[2] for r in results), default=0):.2f}s other_status={other or 0} "
               f"committed_but_unacknowledged={len(known - {r[4] for r in accepted})} "
               f"unrecorded_attempts={unrecorded}")
    failures = []
    if not all(r[5] for r in refused):
        failures.append("a 503 without Retry-After")
    if slow:
        failures.append(f"{len(slow)} requests took over {bound}s")
    if other:
        failures.append(f"unexpected statuses {other} (0: no answer within 30 s)")
    if lost or undelivered:
        failures.append("accepted sends lost")
    if unfinished:
        failures.append("accepted sends not Completed")
    if duplicates > unrecorded:
        failures.append("more repeats than attempts without a written result")
    return figures, failures, duplicates, len(refused)


def scenario_partition_db(bin_dir, base_url, size):
    """PostgreSQL black-holed (connections accepted, nothing answered) under load, then healed.

    herald-api and the worker reach PostgreSQL through fault proxies; sends keep arriving from
    four clients. During the partition a request answers 503 with Retry-After within
    HERALD_DATABASE_WAIT_SECONDS; once the probe has had time to mark the database down
    (GATE_SECONDS) it answers 503 at once and /health/ready fails (on herald-api and on the
    worker), each within a probe timeout. After the partition both processes resume by
    themselves. Only sends in the worker's hands while the database was away can repeat (their
    results could not be written).
    """
    outage = size["partition.db.seconds"]
    system = System("partition.db", bin_dir, base_url, worker_env={"HERALD_WORKER_CONCURRENCY": "32"},
                    proxies=("db",))
    load = None
    try:
        worker = system.start_worker()
        load = Load(system, "da")
        wait_for("sends accepted before the partition", lambda: load.accepted_since(0) >= 50, 60)
        held = system.held_by(worker)
        ready_urls = {"api": system.api_url + "/health/ready",
                      "worker": f"http://127.0.0.1:{worker.metrics_port}/health/ready"}
        readiness = {}
        down_at = time.monotonic()
        system.db_mode("blackhole")
        with concurrent.futures.ThreadPoolExecutor(len(ready_urls)) as pool:
            while time.monotonic() < down_at + outage:
                time.sleep(0.5)
                held = max(held, system.held_by(worker))
                if not readiness and time.monotonic() >= down_at + GATE_SECONDS:
                    readiness = {role: pool.submit(http, "GET", url, timeout=DATABASE_WAIT_SECONDS + SCHEDULING_SECONDS)
                                 for role, url in ready_urls.items()}
            readiness = {role: future.result() for role, future in readiness.items()}
        # The partition's end is read before the proxy passes traffic again: a request that
        # starts while the switch is under way is after the partition (the stuck probe's answer
        # reopens the gate at once), not a request the gate failed to refuse.
        up_at, healed_at = time.monotonic(), time.time()
        system.db_mode("pass")
        try:
            wait_for("sends accepted after the partition", lambda: load.accepted_since(up_at) >= 50, 60)
        finally:
            results = load.stop()
        during = [r for r in results if down_at <= r[0] <= up_at]
        # Requests that started once the gate should have marked the database down.
        once_down = [r for r in during if r[0] >= down_at + GATE_SECONDS]
        not_at_once = [r for r in once_down if r[1] != 503 or r[2] > SCHEDULING_SECONDS]
        figures, failures, duplicates, refused = database_partition_checks(system, results)
        gap, resumed = sending_figures(system, healed_at)
        timeouts = system.hub_calls("send").get("timeout", 0)
        figures = (f"partition={outage}s {figures} during_partition={len(during)} "
                   f"503_during={sum(1 for r in during if r[1] == 503)} longest_gap={gap:.1f}s "
                   f"resumed_after={-1 if resumed is None else resumed:.2f}s hub_timeouts={timeouts} "
                   f"held_by_worker={held} once_down={len(once_down)} not_refused_at_once={len(not_at_once)} "
                   f"longest_once_down={max((r[2] for r in once_down), default=0):.2f}s "
                   f"ready_during={','.join(f'{k}:{v[0]}/{v[3]:.2f}s' for k, v in sorted(readiness.items()))}")
        check(not failures, f"{'; '.join(failures)}: {figures}")
        check(refused > 0, f"no 503 during the partition: {figures}")
        check(once_down and not not_at_once,
              f"requests not refused at once {GATE_SECONDS}s into the partition (the probe did not mark "
              f"the database down): {figures}")
        check(all(v[0] == 503 and v[3] <= PROBE_TIMEOUT_SECONDS + SCHEDULING_SECONDS for v in readiness.values()),
              f"/health/ready did not fail within {PROBE_TIMEOUT_SECONDS + SCHEDULING_SECONDS}s "
              f"during the partition (0: no answer): {figures}")
        check(duplicates <= held, f"more repeats than sends in the worker's hands: {figures}")
        check(resumed is not None and resumed <= RESUME_SECONDS, f"sending did not resume within {RESUME_SECONDS}s: {figures}")
        check_alive(system)
        return figures
    finally:
        if load:
            load.stop()
        system.close()


def scenario_reset_db(bin_dir, base_url, size):
    """Connection resets on 10% of the database connections under load.

    Every 2 s the proxies choose each open connection (and each new one) with probability 0.1
    and reset it (RST both ways) on its next packet, mid-query or mid-commit. Requests answer
    202, or 503 with Retry-After, within HERALD_DATABASE_WAIT_SECONDS; while sends arrive,
    sending never stops for longer than RESUME_SECONDS; only a send whose attempt's result could not be written (its
    statement reset, or refused while a reset probe had the database marked down) goes out
    again.
    """
    seconds = size["reset.db.seconds"]
    system = System("reset.db", bin_dir, base_url, worker_env={"HERALD_WORKER_CONCURRENCY": "32"},
                    proxies=("db",))
    load = None
    try:
        system.start_worker()
        load = Load(system, "db")
        wait_for("sends accepted before the resets", lambda: load.accepted_since(0) >= 50, 60)
        began, began_wall = time.monotonic(), time.time()
        while time.monotonic() < began + seconds:
            system.db_mode("reset 0.1")
            time.sleep(2)
        system.db_mode("pass")
        up_at, healed_at = time.monotonic(), time.time()
        try:
            wait_for("sends accepted after the resets", lambda: load.accepted_since(up_at) >= 50, 60)
        finally:
            results = load.stop()
        stopped_wall = time.time()
        resets = {role: proxy.stats()["resets"] for role, proxy in system.db_proxies.items()}
        figures, failures, _, _ = database_partition_checks(system, results)
        gap, _ = sending_figures(system, healed_at, (began_wall, stopped_wall))
        last_send = max((at for at, _ in send_timeline(system)), default=stopped_wall)
        timeouts = system.hub_calls("send").get("timeout", 0)
        figures = (f"seconds={seconds} {figures} resets_api={resets['api']} resets_worker={resets['worker']} "
                   f"longest_gap={gap:.1f}s last_send_after_load={max(0.0, last_send - stopped_wall):.1f}s "
                   f"hub_timeouts={timeouts}")
        check(not failures, f"{'; '.join(failures)}: {figures}")
        check(resets["api"] > 0 and resets["worker"] > 0, f"no connection was reset: {figures}")
        check(gap <= RESUME_SECONDS, f"sending stopped for over {RESUME_SECONDS}s: {figures}")
        check_alive(system)
        return figures
    finally:
        if load:
            load.stop()
        system.close()


def scan_secrets():
    """Every log line the harness produced, searched for every secret it handled."""
    needles = sorted((s for s in SECRETS if s and len(s) >= 8), key=len, reverse=True)
    patterns = [re.compile(r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.")]  # any JWT
    lines = 0
    found = []
    for directory, _, files in os.walk(LOGS):
        for name in files:
            if not name.endswith(".log"):
                continue
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                for line in f.read().decode("utf-8", "replace").splitlines():
                    lines += 1
                    for needle in needles:
                        if needle in line:
                            found.append(f"{os.path.relpath(path, LOGS)}: a secret ({needle[:4]}…)")
                    for pattern in patterns:
                        if pattern.search(line):
                            found.append(f"{os.path.relpath(path, LOGS)}: a JWT")
    figures = f"log_lines={lines} secrets_checked={len(needles)} found={len(found)}"
    check(not found, f"{figures}: {found[:5]}")
    return figures


SCENARIOS = [
    # name, function, whether the reduced run includes it (--only runs any at either size)
    ("kill9", scenario_kill9, True),
    ("webhooks", scenario_webhooks, False),
    ("restart", scenario_restart, True),
    # make test's Swift suite has the same faults (5xx, 429 with Retry-After, timeouts) over 300 sends.
    ("storm", scenario_storm, False),
    ("gone", scenario_gone, True),
    ("stall", scenario_stall, True),
    ("schema", scenario_schema, True),
    ("partition.hub", scenario_partition_hub, False),
    ("partition.db", scenario_partition_db, True),
    ("reset.db", scenario_reset_db, False),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="directory with herald-api, herald-worker, heraldctl, nh-emulator")
    parser.add_argument("--size", choices=("reduced", "full"), default="reduced")
    parser.add_argument("--only", help="comma-separated scenario names")
    args = parser.parse_args()
    size = {key: values[0 if args.size == "reduced" else 1] for key, values in SIZES.items()}
    with open(os.path.join(DATA, "postgres.env")) as f:
        base_url = re.search(r"HERALD_DATABASE_URL=(\S+)", f.read()).group(1)
    shutil.rmtree(LOGS, ignore_errors=True)
    os.makedirs(LOGS)
    chosen = set(args.only.split(",")) if args.only else None
    failed = 0
    started = time.monotonic()
    for name, scenario, in_reduced in SCENARIOS:
        if (chosen and name not in chosen) or (not chosen and args.size == "reduced" and not in_reduced):
            continue
        began = time.monotonic()
        try:
            figures = scenario(args.bin, base_url, size)
            print(f"chaos {name} ok {figures} ({time.monotonic() - began:.1f}s)", flush=True)
        except Failure as failure:
            failed += 1
            print(f"chaos {name} FAIL {failure} ({time.monotonic() - began:.1f}s)", flush=True)
        except Exception as error:  # a harness bug is a failure too, with its reason
            failed += 1
            print(f"chaos {name} FAIL {type(error).__name__}: {error} ({time.monotonic() - began:.1f}s)", flush=True)
    try:
        print(f"chaos secrets ok {scan_secrets()}", flush=True)
    except Failure as failure:
        failed += 1
        print(f"chaos secrets FAIL {failure}", flush=True)
    print(f"chaos total {'ok' if failed == 0 else 'FAIL'} size={args.size} failed={failed} "
          f"({time.monotonic() - started:.1f}s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
