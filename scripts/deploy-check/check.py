#!/usr/bin/env python3
"""The deploy files' static checks that need Python (scripts/deploy-check.sh runs them).

  check.py compose COMPOSE_YAML SCHEMA_JSON ENV_EXAMPLE
      Interpolates compose.yaml as Compose does (with every variable env.example names set),
      then validates it against the Compose specification's JSON Schema, and checks that
      every `depends_on` names a service (with a health check where it waits for health).
  check.py keda MANIFEST CRD_DIR DEPLOYMENTS_YAML
      Validates each KEDA object against its CRD's openAPIV3Schema (unknown fields are
      errors, as they would be lost on apply), and checks the postgresql trigger: known
      metadata keys, a query, a positive target, an authenticationRef that exists here, and
      a scale target that is a Deployment in DEPLOYMENTS_YAML.
  check.py query MANIFEST
      Prints the postgresql trigger's query (the shell runs it on a migrated database).
  check.py run-packages DOCKERFILE
      Prints the Debian packages the Dockerfile's last stage installs, one a line.
  check.py static-link SCRATCH DOCKERFILE PRODUCT OUTPUT
      Links PRODUCT again from the objects of the debug build in SCRATCH (`swift build`'s
      own link command, from its build manifest), with the Swift runtime linked in as
      `--static-swift-stdlib` does and the Dockerfile's STATIC_LINK_FLAGS, into OUTPUT: the
      image's link without compiling everything a second time.
  check.py secrets KUBERNETES_DIR README
      Checks that every Secret key the manifests read is named in the README.
  check.py egress KUBERNETES_DIR
      Checks that every Herald pod template is selected by an egress NetworkPolicy, and that
      those policies allow only DNS (53, to kube-dns), the database (5432/6432, to a named
      peer) and the hub (443, to ipBlocks that except the private ranges).

Prints one line per check; exits 1 on the first failure with what was wrong.
"""
import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import jsonschema
import yaml


def fail(message):
    print(f"deploy-check: FAIL {message}", file=sys.stderr)
    sys.exit(1)


def ok(message):
    print(f"deploy-check: ok {message}")


def load_all(path):
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


# ------------------------------------------------------------------ compose


def interpolate(text, env):
    """Compose's interpolation: $$, $VAR, ${VAR}, ${VAR:-default}, ${VAR-default},
    ${VAR:?error}, ${VAR?error}, ${VAR:+alt}; defaults may nest."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "$":
            out.append(c)
            i += 1
            continue
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("${", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                if text.startswith("${", j):
                    depth += 1
                    j += 2
                    continue
                if text[j] == "}":
                    depth -= 1
                j += 1
            if depth:
                raise ValueError(f"unclosed ${{ in {text!r}")
            body = text[i + 2 : j - 1]
            match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?$", body, re.S)
            if not match:
                raise ValueError(f"bad substitution ${{{body}}}")
            name, op, arg = match.group(1), match.group(2), match.group(3)
            value = env.get(name)
            if op is None:
                out.append(value or "")
            elif op in (":-", "-"):
                unset = value is None or (op == ":-" and value == "")
                out.append(interpolate(arg, env) if unset else value)
            elif op in (":?", "?"):
                if value is None or (op == ":?" and value == ""):
                    raise ValueError(f"{name} is required: {arg}")
                out.append(value)
            else:  # :+ / +
                out.append(interpolate(arg, env) if value else "")
            i = j
            continue
        match = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)", text[i:])
        if match:
            out.append(env.get(match.group(1), ""))
            i += len(match.group(0))
            continue
        raise ValueError(f"a lone $ in {text!r} (write $$)")
    return "".join(out)


def interpolate_tree(node, env):
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, str):
        return interpolate(node, env)
    return node


def example_env(path):
    """Every variable env.example names (set or commented out), with a placeholder value."""
    env = {}
    with open(path) as f:
        for line in f:
            match = re.match(r"^#?\s*([A-Z_][A-Z0-9_]*)=", line)
            if match:
                env[match.group(1)] = "placeholder0123456789"
    return env


def check_compose(compose_path, schema_path, env_example):
    with open(schema_path) as f:
        schema = json.load(f)
    docs = load_all(compose_path)
    if len(docs) != 1:
        fail(f"{compose_path}: expected one YAML document, found {len(docs)}")
    raw = docs[0]
    # The file must not be usable without the secrets file: without it, interpolation fails.
    try:
        interpolate_tree(raw, {})
        fail(f"{compose_path}: interpolates without any secret set (a required ${{VAR:?…}} is missing)")
    except ValueError:
        pass
    env = example_env(env_example)
    # Unset the optional ones so the defaults are what is checked.
    for optional in [k for k in env if k not in ("POSTGRES_PASSWORD", "NH_EMULATOR_KEY")]:
        del env[optional]
    try:
        compose = interpolate_tree(raw, env)
    except ValueError as error:
        fail(f"{compose_path}: interpolation: {error}")
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:10]]
        fail(f"{compose_path} does not match the Compose specification:\n" + "\n".join(lines))
    services = compose.get("services", {})
    for name, service in services.items():
        depends = service.get("depends_on", {})
        items = depends.items() if isinstance(depends, dict) else [(d, {}) for d in depends]
        for target, spec in items:
            if target not in services:
                fail(f"{compose_path}: {name} depends on unknown service {target}")
            if spec.get("condition") == "service_healthy" and "healthcheck" not in services[target]:
                fail(f"{compose_path}: {name} waits for {target} to be healthy, but {target} has no healthcheck")
    ok(f"compose {os.path.basename(compose_path)}: matches the Compose specification ({len(services)} services)")


# ------------------------------------------------------------------ KEDA


def strict(schema):
    """A CRD's structural schema as JSON Schema that rejects unknown fields."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if not isinstance(node, dict):
            return node
        if node.pop("x-kubernetes-int-or-string", False):
            node.pop("type", None)
            node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        if node.pop("nullable", False) and "type" in node:
            node["type"] = [node["type"], "null"]
        preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
        for key in list(node):
            if key.startswith("x-kubernetes-"):
                node.pop(key)
        for key in ("properties", "patternProperties"):
            if key in node:
                node[key] = {k: walk(v) for k, v in node[key].items()}
        for key in ("items", "additionalProperties", "not"):
            if isinstance(node.get(key), dict):
                node[key] = walk(node[key])
        for key in ("allOf", "anyOf", "oneOf"):
            if key in node:
                node[key] = [walk(v) for v in node[key]]
        if "properties" in node and "additionalProperties" not in node and not preserve:
            node["additionalProperties"] = False
        return node

    return walk(schema)


def crd_schemas(crd_dir):
    schemas = {}
    for name in sorted(os.listdir(crd_dir)):
        if not name.endswith(".yaml"):
            continue
        for crd in load_all(os.path.join(crd_dir, name)):
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                # metadata is checked by the API server, not the CRD: an object of strings.
                schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


POSTGRESQL_METADATA = {
    "query", "targetQueryValue", "activationTargetQueryValue", "connectionFromEnv", "host", "port",
    "userName", "dbName", "sslmode", "passwordFromEnv",
}
POSTGRESQL_AUTH_PARAMETERS = {"connection", "password", "host", "port", "userName", "dbName", "sslmode"}


def check_keda(manifest, crd_dir, deployments_path):
    schemas = crd_schemas(crd_dir)
    docs = load_all(manifest)
    auths = {}
    scaled = []
    for doc in docs:
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key not in schemas:
            fail(f"{manifest}: {key[1]} {key[0]} is not a KEDA kind the kept CRDs define")
        errors = sorted(jsonschema.Draft7Validator(schemas[key]).iter_errors(doc), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:10]]
            fail(f"{manifest}: {key[1]} {doc['metadata'].get('name')} does not match KEDA's CRD:\n" + "\n".join(lines))
        if key[1] == "TriggerAuthentication":
            auths[doc["metadata"]["name"]] = doc
        if key[1] == "ScaledObject":
            scaled.append(doc)
    if not scaled:
        fail(f"{manifest}: no ScaledObject")
    deployments = {d["metadata"]["name"]: d for d in load_all(deployments_path) if d.get("kind") == "Deployment"}
    for obj in scaled:
        name = obj["metadata"]["name"]
        target = obj["spec"]["scaleTargetRef"]
        if target.get("kind", "Deployment") != "Deployment" or target["name"] not in deployments:
            fail(f"{manifest}: ScaledObject {name} scales {target}, not a Deployment of {deployments_path}")
        if obj["spec"].get("minReplicaCount", 0) < 1:
            fail(f"{manifest}: ScaledObject {name} may scale to zero, but workers also rescue leases and prune")
        if obj["spec"].get("maxReplicaCount", 100) < obj["spec"].get("minReplicaCount", 0):
            fail(f"{manifest}: ScaledObject {name}: maxReplicaCount below minReplicaCount")
        triggers = [t for t in obj["spec"]["triggers"] if t["type"] == "postgresql"]
        if not triggers:
            fail(f"{manifest}: ScaledObject {name} has no postgresql trigger")
        for trigger in triggers:
            metadata = trigger.get("metadata", {})
            unknown = set(metadata) - POSTGRESQL_METADATA
            if unknown:
                fail(f"{manifest}: postgresql trigger metadata has unknown keys {sorted(unknown)}")
            if not metadata.get("query", "").strip():
                fail(f"{manifest}: postgresql trigger has no query")
            try:
                target_value = float(metadata.get("targetQueryValue", "0"))
            except ValueError:
                fail(f"{manifest}: targetQueryValue {metadata.get('targetQueryValue')!r} is not a number")
            if target_value <= 0:
                fail(f"{manifest}: targetQueryValue must be positive")
            ref = trigger.get("authenticationRef", {}).get("name")
            if ref is None and "connectionFromEnv" not in metadata and "host" not in metadata:
                fail(f"{manifest}: postgresql trigger has no way to connect")
            if ref is not None:
                if ref not in auths:
                    fail(f"{manifest}: authenticationRef {ref} is not a TriggerAuthentication in this file")
                for secret in auths[ref]["spec"].get("secretTargetRef", []):
                    if secret["parameter"] not in POSTGRESQL_AUTH_PARAMETERS:
                        fail(f"{manifest}: TriggerAuthentication {ref}: unknown parameter {secret['parameter']}")
    ok(f"keda {os.path.basename(manifest)}: {len(docs)} objects match KEDA's CRDs; the postgresql trigger is complete")


def print_query(manifest):
    for doc in load_all(manifest):
        if doc.get("kind") == "ScaledObject":
            for trigger in doc["spec"]["triggers"]:
                if trigger["type"] == "postgresql":
                    print(trigger["metadata"]["query"])
                    return
    fail(f"{manifest}: no postgresql trigger")


# ------------------------------------------------------------------ Dockerfile, secrets


def run_packages(dockerfile):
    with open(dockerfile) as f:
        text = f.read().replace("\\\n", " ")
    stages = re.split(r"(?im)^FROM\s", text)
    last = stages[-1]
    packages = []
    for match in re.finditer(r"apt-get\s+install\s+([^&;\n]*)", last):
        packages += [word for word in match.group(1).split() if not word.startswith("-")]
    if not packages:
        fail(f"{dockerfile}: the run stage installs no packages")
    print("\n".join(packages))


def link_flags(dockerfile):
    with open(dockerfile) as f:
        match = re.search(r'(?m)^ARG STATIC_LINK_FLAGS="([^"]*)"', f.read())
    if not match:
        fail(f"{dockerfile}: no ARG STATIC_LINK_FLAGS=\"…\"")
    return shlex.split(match.group(1))


def static_link(scratch, dockerfile, product, output):
    manifest = os.path.join(scratch, "debug.yaml")
    try:
        with open(manifest) as f:
            commands = yaml.safe_load(f)["commands"]
    except (OSError, KeyError, yaml.YAMLError) as error:
        fail(f"cannot read swift build's manifest {manifest} ({error}): run `swift build` first")
    links = [c for name, c in commands.items() if name.startswith(f"C.{product}-") and name.endswith("-debug.exe")]
    if len(links) != 1:
        fail(f"{manifest}: found {len(links)} link commands for {product}")
    args = list(links[0]["args"])
    if "-o" not in args:
        fail(f"{manifest}: the link command for {product} has no -o")
    args[args.index("-o") + 1] = output
    # What `swift build --static-swift-stdlib` adds to the link, then the Dockerfile's flags.
    args += ["-static-stdlib"] + link_flags(dockerfile)
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        undefined = sorted(set(re.findall(r"undefined reference to '([^']*)'", result.stderr)))
        if undefined:
            detail = f"{len(undefined)} undefined symbols, e.g. {undefined[:5]}"
        else:
            # The linker's own lines (a gold "fatal error", say), without the two drivers' wrappers
            # that only repeat the exit code, on one line so that a CI log's summary shows them.
            own = [line.strip() for line in result.stderr.splitlines()
                   if line.strip() and "use -v to see invocation" not in line]
            errors = [line for line in own if "error" in line.lower()]
            detail = " | ".join((errors or own)[-12:])[-3000:] or f"exit code {result.returncode}, no message"
        folder = os.path.dirname(os.path.abspath(output))
        free_mb = shutil.disk_usage(folder).free // 2**20
        fail(f"linking {product} with --static-swift-stdlib and the Dockerfile's flags failed: {detail} "
             f"({free_mb} MB free in {folder}; {available_memory_mb()} MB of memory available)")


def available_memory_mb():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return "?"


def check_secrets(kube_dir, readme):
    keys = set()

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("secretKeyRef")
            if isinstance(ref, dict):
                keys.add((ref["name"], ref["key"]))
            if "parameter" in node and "key" in node and "name" in node:  # KEDA secretTargetRef
                keys.add((node["name"], node["key"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in sorted(os.listdir(kube_dir)):
        if name.endswith(".yaml"):
            for doc in load_all(os.path.join(kube_dir, name)):
                walk(doc)
    with open(readme) as f:
        text = f.read()
    missing = sorted(f"{s}/{k}" for s, k in keys if s not in text or k not in text)
    if missing:
        fail(f"{readme} does not say how to create these Secret keys the manifests read: {missing}")
    ok(f"secrets: the {len(keys)} Secret keys the manifests read are all in {os.path.basename(readme)}")


# ------------------------------------------------------------------ egress

EGRESS_PRIVATE = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}
KUBE_DNS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}


def herald_pods(docs):
    """(name, labels) of every pod template the manifests create."""
    for doc in docs:
        spec = doc.get("spec", {})
        if doc.get("kind") == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        template = spec.get("template") if isinstance(spec, dict) else None
        if template:
            yield f"{doc['kind']}/{doc['metadata']['name']}", template.get("metadata", {}).get("labels", {})


def selects(selector, labels):
    if selector.get("matchExpressions"):
        fail(f"egress policy podSelector uses matchExpressions, which this check does not evaluate: {selector}")
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def check_egress_rule(policy, rule):
    where = f"NetworkPolicy {policy}"
    ports = rule.get("ports")
    if not ports:
        fail(f"{where}: an egress rule without ports allows every port")
    kinds = {(p.get("protocol", "TCP"), p.get("port")) for p in ports}
    to = rule.get("to")
    if not to:
        fail(f"{where}: an egress rule without `to` allows {sorted(kinds)} to every address")
    if kinds <= {("UDP", 53), ("TCP", 53)}:
        if to != [KUBE_DNS]:
            fail(f"{where}: DNS (53) goes to kube-dns only, not {to}")
        return "DNS"
    if kinds == {("TCP", 443)}:
        for peer in to:
            block = peer.get("ipBlock")
            if not block or set(peer) != {"ipBlock"}:
                fail(f"{where}: the hub rule (443) is an ipBlock, not {peer}")
            if block["cidr"] == "0.0.0.0/0" and not EGRESS_PRIVATE <= set(block.get("except", [])):
                fail(f"{where}: 443 to 0.0.0.0/0 must except {sorted(EGRESS_PRIVATE)}")
        return "hub"
    if kinds <= {("TCP", 5432), ("TCP", 6432)}:
        for peer in to:
            if peer.get("ipBlock", {}).get("cidr") == "0.0.0.0/0":
                fail(f"{where}: the database rule must name the database, not 0.0.0.0/0")
        return "database"
    fail(f"{where}: egress to {sorted(kinds)} is neither the database (5432/6432), the hub (443) nor DNS (53)")


def check_egress(kube_dir):
    docs = []
    for name in sorted(os.listdir(kube_dir)):
        if name.endswith(".yaml"):
            docs += load_all(os.path.join(kube_dir, name))
    policies = [d for d in docs if d.get("kind") == "NetworkPolicy" and "Egress" in d["spec"].get("policyTypes", [])]
    pods = [(n, l) for n, l in herald_pods(docs) if l.get("app.kubernetes.io/part-of") == "herald"]
    if not pods:
        fail(f"{kube_dir}: no Herald pod templates found")
    for pod, labels in pods:
        covering = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
        if not covering:
            fail(f"{pod}: no egress NetworkPolicy selects it (its egress is open)")
        allowed = set()
        for policy in covering:
            for rule in policy["spec"].get("egress", []):
                allowed.add(check_egress_rule(policy["metadata"]["name"], rule))
        if allowed != {"DNS", "database", "hub"}:
            fail(f"{pod}: its egress policies allow {sorted(allowed)}, not the database, the hub and DNS")
    ok(f"egress: each of the {len(pods)} Herald pod templates may reach the database, the hub and DNS only")


def grafana_rules(dashboard_path):
    """Checks the Grafana dashboard's structure and prints its queries as a Prometheus rules
    file (one recording rule per query, Grafana's $__rate_interval as 5m), so that
    `promtool check rules` parses every PromQL expression the dashboard runs."""
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        fail(f"{dashboard_path}: no `datasource` variable (the panels use ${{datasource}})")
    ids, rules = set(), []
    for panel in dashboard["panels"]:
        if panel["id"] in ids:
            fail(f"{dashboard_path}: panel id {panel['id']} is used twice")
        ids.add(panel["id"])
        grid = panel["gridPos"]
        if grid["x"] + grid["w"] > 24:
            fail(f"{dashboard_path}: panel {panel['title']!r} is wider than the 24-column grid")
        if panel["type"] == "row":
            continue
        targets = panel.get("targets") or []
        if not targets or any(not t.get("expr") for t in targets):
            fail(f"{dashboard_path}: panel {panel['title']!r} has no query")
        for target in targets:
            if target.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{dashboard_path}: panel {panel['title']!r} does not use the datasource variable")
            expr = target["expr"].replace("$__rate_interval", "5m")
            rules.append({"record": f"grafana:panel_{panel['id']}_{target['refId'].lower()}", "expr": expr})
    print(json.dumps({"groups": [{"name": "grafana", "rules": rules}]}, indent=1))


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    command, args = sys.argv[1], sys.argv[2:]
    commands = {
        "compose": check_compose, "keda": check_keda, "query": print_query, "run-packages": run_packages,
        "secrets": check_secrets, "static-link": static_link, "grafana-rules": grafana_rules,
        "egress": check_egress,
    }
    if command not in commands:
        fail(f"unknown command {command}")
    commands[command](*args)


if __name__ == "__main__":
    main()
