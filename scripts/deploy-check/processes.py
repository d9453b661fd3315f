#!/usr/bin/env python3
"""Starts the real processes with the environment the deploy files give them
(scripts/deploy-check.sh processes runs it).

  processes.py BIN_DIR CA_FILE
      For each topology, deploy/compose.yaml and deploy/kubernetes/: reads each process's
      environment as the file writes it (Compose: interpolated with deploy/env.example's
      secrets set; Kubernetes: the container's env, the ConfigMaps it reads, the Secret's
      values in deploy/README.md's `kubectl create secret` line; both: the image's ENV from
      deploy/Dockerfile), maps the hosts to this machine, runs the migration, starts
      herald-api and herald-worker and waits for both `/health/ready` to answer 200.

The mapping keeps what the file says about TLS: the database URL gets the local cluster's
host, port, credentials and a fresh database, and keeps its sslmode and sslrootcert (the CA
becomes CA_FILE, the local cluster's; verify-full connects to `localhost`, the name in its
certificate). A URL without sslmode to a host that is not loopback gets `sslmode=verify-full`,
Herald's default for it, so the mapping to loopback changes nothing. The hub connection string
points at a local nh-emulator; ports become free ports. The child processes see only this
environment.

Prints one line per topology; exits 1 on the first failure with the processes' last lines.
"""
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check import example_env, fail, interpolate_tree, load_all, ok  # noqa: E402

import yaml  # noqa: E402

HERALD_PROCESSES = ("migrate", "herald-api", "herald-worker")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dockerfile_env(path):
    """The last stage's ENV, as `docker run` sets it (PATH left out: the binaries are here)."""
    text = open(path).read().replace("\\\n", " ")
    stage = text.split("\nFROM ")[-1]
    env = {}
    for line in stage.splitlines():
        if line.startswith("ENV "):
            for token in shlex.split(line[4:]):
                key, _, value = token.partition("=")
                env[key] = value
    env.pop("PATH", None)
    env.pop("SWIFT_BACKTRACE", None)
    return env


# ------------------------------------------------------------------ what the files say


def compose_environments(compose_path, env_example):
    with open(compose_path) as f:
        raw = yaml.safe_load(f)
    env = example_env(env_example)
    for optional in [k for k in env if k not in ("POSTGRES_PASSWORD", "NH_EMULATOR_KEY")]:
        del env[optional]
    env["POSTGRES_PASSWORD"] = "deploycheck"
    env["NH_EMULATOR_KEY"] = "deploycheckkey"
    compose = interpolate_tree(raw, env)
    services = compose["services"]
    envs = {name: {k: str(v) for k, v in (services[name].get("environment") or {}).items()} for name in HERALD_PROCESSES}
    return envs, services["nh-emulator"]["command"]


def readme_secret(readme):
    """The Secret's example values from deploy/README.md's `kubectl create secret` command."""
    # Commented-out lines are optional keys: left unset.
    text = "\n".join(line for line in open(readme).read().splitlines() if not line.lstrip().startswith("#"))
    values = dict(re.findall(r"--from-literal=([a-z0-9-]+)='([^']*)'", text))
    if "database-url" not in values:
        fail(f"{readme}: no `--from-literal=database-url='…'` in the kubectl create secret example")
    return {k: v.replace("…", "pw") for k, v in values.items()}


def kubernetes_environments(kube_dir, readme):
    secret = readme_secret(readme)
    config_maps = {}
    pods = {}
    for name in sorted(os.listdir(kube_dir)):
        if not name.endswith(".yaml"):
            continue
        for doc in load_all(os.path.join(kube_dir, name)):
            kind = doc.get("kind")
            if kind == "ConfigMap":
                config_maps[doc["metadata"]["name"]] = doc.get("data", {})
            elif kind in ("Deployment", "Job"):
                pods[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
    which = {"migrate": "herald-migrate", "herald-api": "herald-api", "herald-worker": "herald-worker"}
    envs = {}
    for process, workload in which.items():
        if workload not in pods:
            fail(f"{kube_dir}: no Deployment or Job named {workload}")
        pod = pods[workload]
        container = pod["containers"][0]
        env = {}
        for source in container.get("envFrom", []):
            ref = source.get("configMapRef", {}).get("name")
            if ref not in config_maps:
                fail(f"{workload} reads ConfigMap {ref}, which no manifest defines")
            env.update(config_maps[ref])
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = str(item["value"])
                continue
            ref = item["valueFrom"]["secretKeyRef"]
            if ref["key"] in secret:
                env[item["name"]] = secret[ref["key"]]
            elif not ref.get("optional"):
                fail(f"{workload}: Secret key {ref['key']} has no example in deploy/README.md")
        # The CA the settings name must be in a volume the container mounts.
        root = env.get("HERALD_DATABASE_SSLROOTCERT")
        if root and root != "system":
            mounts = container.get("volumeMounts", [])
            if not any(root.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts):
                fail(f"{workload}: HERALD_DATABASE_SSLROOTCERT={root} is in no volume the container mounts")
        envs[process] = env
    return envs


# ------------------------------------------------------------------ mapping to this machine


def is_loopback(host):
    return host in ("localhost", "::1") or host.startswith("127.")


def map_database_url(url, env, local, ca):
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    keys = [k for k, _ in query]
    mode = dict(query).get("sslmode") or env.get("HERALD_DATABASE_SSLMODE")
    if mode is None and not is_loopback(parts.hostname or ""):
        query.append(("sslmode", "verify-full"))
        mode = "verify-full"
    query = [(k, ca if k == "sslrootcert" and v != "system" else v) for k, v in query]
    host = "localhost" if mode == "verify-full" else "127.0.0.1"
    netloc = f"{local.username}:{local.password}@{host}:{local.port}"
    mapped = urllib.parse.urlunsplit(("postgres", netloc, "/" + local.database, urllib.parse.urlencode(query), ""))
    return mapped, mode, "sslrootcert" in keys


def map_environment(env, image_env, local, ca, emulator):
    out = dict(image_env)
    out.update(env)
    out["HERALD_DATABASE_URL"], mode, _ = map_database_url(env["HERALD_DATABASE_URL"], env, local, ca)
    if out.get("HERALD_DATABASE_SSLROOTCERT", "system") != "system":
        out["HERALD_DATABASE_SSLROOTCERT"] = ca
    if "HERALD_HUB_CONNECTION_STRING" in out:
        fields = dict(
            part.split("=", 1) for part in out["HERALD_HUB_CONNECTION_STRING"].split(";") if "=" in part)
        fields["Endpoint"] = f"http://127.0.0.1:{emulator['port']}/"
        fields["SharedAccessKey"] = emulator["key"]
        out["HERALD_HUB_CONNECTION_STRING"] = ";".join(f"{k}={v}" for k, v in fields.items())
    for host_key, port_key in (("HERALD_API_HOST", "HERALD_API_PORT"),
                               ("HERALD_WORKER_METRICS_HOST", "HERALD_WORKER_METRICS_PORT")):
        out[host_key] = "127.0.0.1"
        out[port_key] = str(free_port())
    out["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    return out, mode


# ------------------------------------------------------------------ running


class Processes:
    def __init__(self, logs):
        self.logs = logs
        self.children = []

    def start(self, name, argv, env):
        log = open(os.path.join(self.logs, name + ".log"), "w")
        child = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.children.append((name, child))
        return child

    def tail(self, name, lines=8):
        path = os.path.join(self.logs, name + ".log")
        if not os.path.exists(path):
            return ""
        return "\n".join("    " + line for line in open(path).read().splitlines()[-lines:])

    def stop(self):
        for _, child in self.children:
            if child.poll() is None:
                child.terminate()
        for _, child in self.children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


def wait_ready(port, child, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return f"exited with status {child.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=3) as response:
                if response.status == 200:
                    return None
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    return f"/health/ready did not answer 200 within {seconds} s"


def run_topology(label, envs, emulator_command, bin_dir, image_env, base, ca):
    base_parts = urllib.parse.urlsplit(base)
    database = f"herald_t_deploycheck_{label}_{os.getpid()}"

    class Local:
        username = urllib.parse.unquote(base_parts.username)
        password = urllib.parse.unquote(base_parts.password or "")
        port = base_parts.port
    Local.database = database

    admin = ["psql", base, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c"]
    subprocess.run(admin + [f"CREATE DATABASE {database}"], check=True, stdout=subprocess.DEVNULL)
    logs = tempfile.mkdtemp(prefix=f"deploy-check-{label}-")
    processes = Processes(logs)
    try:
        # The emulator as the file starts it, on a free loopback port.
        args = list(emulator_command)
        emulator = {"port": free_port(), "key": "deploycheckkey"}
        for flag, value in (("--host", "127.0.0.1"), ("--port", str(emulator["port"]))):
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
        if "--key" in args:
            emulator["key"] = args[args.index("--key") + 1]
        hub = envs["herald-worker"].get("HERALD_HUB_NAME")
        if hub and "--hub" in args:
            args[args.index("--hub") + 1] = hub
        args[0] = os.path.join(bin_dir, args[0])
        processes.start("nh-emulator", args, {"PATH": os.environ.get("PATH", "")})

        mapped = {name: map_environment(env, image_env, Local, ca, emulator) for name, env in envs.items()}
        migrate_env, mode = mapped["migrate"]
        migrate = processes.start("migrate", [os.path.join(bin_dir, "heraldctl"), "migrate"], migrate_env)
        if migrate.wait(timeout=120) != 0:
            fail(f"{label}: heraldctl migrate with the file's environment (sslmode {mode or 'unset'}) failed:\n"
                 + processes.tail("migrate"))
        started = {}
        for name, binary, port_key in (("herald-api", "herald-api", "HERALD_API_PORT"),
                                       ("herald-worker", "herald-worker", "HERALD_WORKER_METRICS_PORT")):
            env, _ = mapped[name]
            started[name] = (processes.start(name, [os.path.join(bin_dir, binary)], env), int(env[port_key]))
        for name, (child, port) in started.items():
            problem = wait_ready(port, child)
            if problem:
                fail(f"{label}: {name} with the file's environment: {problem}:\n" + processes.tail(name))
        modes = sorted({(m or "unset") for _, m in mapped.values()})
        ok(f"processes {label}: migrate, herald-api and herald-worker ready (/health/ready 200) with the file's "
           f"environment (sslmode {', '.join(modes)})")
    finally:
        processes.stop()
        subprocess.run(admin + [f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    bin_dir, ca = sys.argv[1], sys.argv[2]
    base = os.environ.get("HERALD_DATABASE_URL")
    if not base:
        fail("HERALD_DATABASE_URL is not set (scripts/db.sh up)")
    image_env = dockerfile_env("deploy/Dockerfile")
    compose_envs, emulator_command = compose_environments("deploy/compose.yaml", "deploy/env.example")
    run_topology("compose", compose_envs, emulator_command, bin_dir, image_env, base, ca)
    kube_envs = kubernetes_environments("deploy/kubernetes", "deploy/README.md")
    run_topology("kubernetes", kube_envs, emulator_command, bin_dir, image_env, base, ca)


if __name__ == "__main__":
    main()
