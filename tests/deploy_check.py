#!/usr/bin/env python3
"""Checks the Dockerfile and deploy/ against each other and against blurd itself (make check-deploy).

There is no Docker engine or Kubernetes cluster here, so this is what CI can check: every YAML file
parses; the Kubernetes objects have their required fields; the Deployment asks for a GPU, probes
routes that the real binary answers with 200 on the port it listens on, and its grace period covers
preStop plus the drain timeout blurd uses, and Prometheus scrapes the /metrics blurd serves; the
Service and the HPA point at the Deployment, and the HPA scales on blurd_in_flight per pod (a
custom metric), which the real binary exports as a gauge; compose reserves a GPU and
health-checks /healthz; the Dockerfile builds with CI's steps and runs as a non-root user. The
Dockerfile is also linted with dockerfile-utils (npm).

usage: deploy_check.py [--root DIR] [--blurd BIN]   (defaults: the repository, DIR/build/blurd)
"""
import argparse
import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import yaml

failures = []


def check(ok, what):
    """Records one check; returns ok so callers can skip checks that depend on it."""
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return bool(ok)


def blurd_defaults(blurd):
    """The defaults blurd prints in --help: {"BLURD_PORT": "8080", ...}."""
    out = subprocess.run([blurd, "--help"], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"^\s+--\S+\s+(BLURD_\w+)\s.*\(default (\S+)\)$", out, re.M))


def blurd_status(blurd, paths):
    """Starts blurd on a free port (CPU backend) and GETs each path: {path: (HTTP status, body)}."""
    p = subprocess.Popen([blurd, "--port", "0", "--backend", "cpu", "--workers", "1",
                          "--warm-image", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r":(\d+) ", p.stdout.readline())
        port = m.group(1) if m else "0"
        status = {}
        for path in paths:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    status[path] = (r.status, r.read().decode("utf-8", "replace"))
            except urllib.error.HTTPError as e:
                status[path] = (e.code, "")
            except OSError:
                status[path] = (None, "")
        return status
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)


def quantity(q):
    """A Kubernetes quantity as a number: '16' -> 16, '16500m' -> 16.5, '2k' -> 2000; None if not one."""
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|Ki|Mi|Gi)?", str(q).strip())
    if not m:
        return None
    try:
        v = float(m.group(1))
    except ValueError:
        return None
    return v * {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9,
                "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3}[m.group(2)]


def exported(metrics_text, name, kind=None):
    """Whether blurd's /metrics text declares `name` (with `# TYPE name kind` when kind is given)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", metrics_text, re.M))
    return name in types and (kind is None or types[name] == kind)


def env_of(container):
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}


def seconds(text):
    """'35s', '1m5s' or 35 -> 35."""
    if isinstance(text, (int, float)):
        return text
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(text))
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0) if m and text else -1


def load_yaml(root):
    """Every YAML document under deploy/, parsed: {path: [docs]}."""
    files = sorted(glob.glob(f"{root}/deploy/**/*.y*ml", recursive=True))
    check(files, "deploy/ holds YAML files")
    docs = {}
    for f in files:
        try:
            docs[f] = [d for d in yaml.safe_load_all(open(f)) if d is not None]
            check(docs[f], f"{os.path.relpath(f, root)} parses and is not empty")
        except yaml.YAMLError as e:
            check(False, f"{os.path.relpath(f, root)} parses: {e}")
    return docs


def check_k8s(objs, defaults, answers):
    """The Deployment, Service and HPA; objs: every Kubernetes object under deploy/k8s/;
    answers: {path: (status, body)} from the real binary."""
    routes_ok = {p: s for p, (s, _) in answers.items()}
    metrics_text = answers.get("/metrics", (None, ""))[1]
    valid = []
    for o in objs:
        name = f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}"
        if check(all(o.get(k) for k in ("apiVersion", "kind", "metadata", "spec"))
                 and o["metadata"].get("name"), f"{name} has apiVersion, kind, metadata.name and spec"):
            valid.append(o)
    by_kind = {o["kind"]: o for o in valid}
    dep, svc, hpa = (by_kind.get(k) for k in ("Deployment", "Service", "HorizontalPodAutoscaler"))
    if not (check(dep, "deploy/k8s has a Deployment") and check(svc, "deploy/k8s has a Service")
            and check(hpa, "deploy/k8s has a HorizontalPodAutoscaler")):
        return
    check(dep["apiVersion"] == "apps/v1", "Deployment is apps/v1")
    tmpl = dep["spec"].get("template") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    sel = (dep["spec"].get("selector") or {}).get("matchLabels") or {}
    check(sel and sel.items() <= labels.items(), "Deployment selector matches its pod labels")
    pod = tmpl.get("spec") or {}
    c = (pod.get("containers") or [{}])[0]
    env = env_of(c)
    port = int(env.get("BLURD_PORT", defaults["BLURD_PORT"]))
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    check(port in ports.values(), f"container port is the port blurd listens on ({port})")
    check(env.get("BLURD_BIND", defaults["BLURD_BIND"]) == "0.0.0.0", "blurd binds 0.0.0.0 in the pod")
    res = c.get("resources") or {}
    gpus = (res.get("limits") or {}).get("nvidia.com/gpu")
    check(isinstance(gpus, int) and gpus >= 1, "container limits nvidia.com/gpu to a whole number >= 1")
    # Behind a Service every client arrives from a few addresses: a per-address limit would cap
    # the whole service (blurd's default is none).
    check("BLURD_MAX_CONNS_PER_IP" not in env, "the pod sets no per-address connection limit")
    cpu = quantity((res.get("limits") or {}).get("cpu"))
    check(cpu is not None and cpu > 0, "container limits cpu (blurd sizes its workers from the quota)")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (c.get(probe) or {}).get("httpGet") or {}
        check(get.get("path") == path, f"{probe} is an httpGet on {path}")
        check(get.get("port") == port or ports.get(get.get("port")) == port,
              f"{probe} uses the container port {port}")
        check(routes_ok.get(get.get("path")) == 200, f"blurd answers {probe}'s {get.get('path')} with 200")
    sc = {**(pod.get("securityContext") or {}), **(c.get("securityContext") or {})}
    check(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 1) != 0, "runAsNonRoot, not uid 0")
    pre = ((c.get("lifecycle") or {}).get("preStop") or {})
    cmd = (pre.get("exec") or {}).get("command") or []
    wait = (pre.get("sleep") or {}).get("seconds")
    if wait is None and len(cmd) == 2 and cmd[0] in ("sleep", "/bin/sleep") and cmd[1].isdigit():
        wait = int(cmd[1])
    check(isinstance(wait, int) and wait > 0, "preStop sleeps (so endpoints deregister before SIGTERM)")
    drain = int(env.get("BLURD_DRAIN_TIMEOUT", defaults["BLURD_DRAIN_TIMEOUT"]))
    grace = pod.get("terminationGracePeriodSeconds", 30)
    check(isinstance(wait, int) and grace >= wait + drain,
          f"terminationGracePeriodSeconds {grace} >= preStop {wait} + drain timeout {drain}")
    ann = (tmpl.get("metadata") or {}).get("annotations") or {}
    check(str(ann.get("prometheus.io/scrape")) == "true", "pod template has prometheus.io/scrape: \"true\"")
    scrape_port = ann.get("prometheus.io/port")
    check(str(scrape_port) == str(port) or ports.get(scrape_port) == port,
          f"prometheus.io/port {scrape_port} is the port blurd listens on ({port})")
    scrape_path = ann.get("prometheus.io/path", "/metrics")
    check(routes_ok.get(scrape_path) == 200 and exported(answers[scrape_path][1], "blurd_in_flight"),
          f"blurd serves its metrics at prometheus.io/path {scrape_path}")

    check(svc["spec"].get("selector") and svc["spec"]["selector"].items() <= labels.items(),
          "Service selector matches the Deployment's pod labels")
    for p in svc["spec"].get("ports") or [{}]:
        t = p.get("targetPort", p.get("port"))
        check(t == port or ports.get(t) == port, f"Service targetPort {t} is the container port")

    ref = hpa["spec"].get("scaleTargetRef") or {}
    check(hpa["apiVersion"] == "autoscaling/v2", "HPA is autoscaling/v2")
    check(ref.get("kind") == "Deployment" and ref.get("name") == dep["metadata"]["name"]
          and ref.get("apiVersion") == "apps/v1", "HPA scaleTargetRef names the Deployment")
    lo, hi = hpa["spec"].get("minReplicas", 1), hpa["spec"].get("maxReplicas", 0)
    check(1 <= lo <= hi, f"HPA replicas {lo}..{hi}")
    metrics = hpa["spec"].get("metrics") or []
    check(metrics, "HPA has a metric")
    for m in metrics:
        r = m.get("resource") or {}
        if m.get("type") == "Resource":
            check(r.get("name") in (res.get("requests") or {}),
                  f"the container requests the {r.get('name')} that the HPA measures")
        if m.get("type") == "Pods":
            name = ((m.get("pods") or {}).get("metric") or {}).get("name")
            check(exported(metrics_text, name), f"blurd's /metrics exports the HPA's Pods metric {name}")
    # GPU codecs moved the bottleneck off the CPU: the HPA scales on requests in flight per pod.
    check(exported(metrics_text, "blurd_in_flight", "gauge"),
          "blurd's /metrics has # TYPE blurd_in_flight gauge")
    inflight = [m for m in metrics if m.get("type") == "Pods"
                and ((m.get("pods") or {}).get("metric") or {}).get("name") == "blurd_in_flight"]
    if check(len(inflight) == 1, "HPA has a Pods metric named blurd_in_flight"):
        target = inflight[0]["pods"].get("target") or {}
        value = quantity(target.get("averageValue"))
        check(target.get("type") == "AverageValue" and value is not None and value > 0,
              f"blurd_in_flight target is an AverageValue > 0 ({target.get('averageValue')})")
        # blurd answers 503 queue_full once workers x GPUs run and the queue is full: the target
        # must be reached before that, or the HPA would scale out only after requests fail.
        workers = int(env.get("BLURD_WORKERS", defaults.get("BLURD_WORKERS", "0")))
        cpu = quantity(((c.get("resources") or {}).get("limits") or {}).get("cpu"))
        if workers == 0 and cpu and isinstance(gpus, int) and gpus > 0:
            # blurd's default (api/backend.c): the quota's cores, rounded up, shared among the
            # GPUs, at least 2 a GPU, twice over with the GPU codecs (the image has nvJPEG)
            workers = max(2, 2 * -(-math.ceil(cpu) // gpus))
        queue = int(env.get("BLURD_QUEUE", defaults.get("BLURD_QUEUE", "64")))
        if workers > 0 and isinstance(gpus, int) and value is not None:
            full = workers * gpus + queue
            check(value < full, f"blurd_in_flight target {value:g} < {workers} workers x {gpus} GPU "
                                f"+ queue {queue} = {full} (where blurd answers 503 queue_full)")


def check_compose(compose, defaults):
    services = (compose or {}).get("services") or {}
    if not check(len(services) == 1, "compose has one service"):
        return
    s = next(iter(services.values()))
    env = {str(k): str(v) for k, v in (s.get("environment") or {}).items()}
    port = env.get("BLURD_PORT", defaults["BLURD_PORT"])
    devices = (((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    check(any(d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or []) for d in devices),
          "compose reserves an nvidia device with capabilities [gpu]")
    check(any(str(p).split(":")[-1] == port for p in s.get("ports") or []),
          f"compose publishes container port {port}")
    test = " ".join(map(str, (s.get("healthcheck") or {}).get("test") or []))
    check(f":{port}/healthz" in test, f"compose healthcheck gets /healthz on port {port}")
    drain = int(env.get("BLURD_DRAIN_TIMEOUT", defaults["BLURD_DRAIN_TIMEOUT"]))
    grace = seconds(s.get("stop_grace_period", "10s"))
    check(grace >= drain, f"compose stop_grace_period {grace}s >= drain timeout {drain}s")
    check(s.get("stop_signal", "SIGTERM") == "SIGTERM", "compose stops blurd with SIGTERM")


def dockerfile_stages(path):
    """[(FROM line, [instructions])] with continuation lines joined and comments dropped, and the
    ARGs declared before the first FROM replaced by their defaults in the FROM lines."""
    text = re.sub(r"\\\n", " ", open(path).read())
    stages = []
    args = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, arg = line.partition(" ")
        if op.upper() == "ARG" and not stages:
            name, _, default = arg.strip().partition("=")
            args[name] = default.strip('"')
        elif op.upper() == "FROM":
            arg = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                         lambda m: args.get(m.group(1) or m.group(2), m.group(0)), arg)
            stages.append((arg.strip(), []))
        elif stages:
            stages[-1][1].append((op.upper(), arg.strip()))
    return stages


def check_dockerfile(root, defaults):
    path = f"{root}/Dockerfile"
    lint = shutil.which("dockerfile-utils")
    if check(lint, "dockerfile-utils is installed (make check-deploy: npm ci --prefix tests/deploy)"):
        r = subprocess.run([lint, "lint", path], capture_output=True, text=True)
        check(r.returncode == 0 and not r.stdout.strip(), "dockerfile-utils lint Dockerfile: clean")
        if r.stdout.strip():
            print(r.stdout.rstrip())
    stages = dockerfile_stages(path)
    if not check(len(stages) >= 2, "Dockerfile has a build stage and a runtime stage"):
        return
    (src, build), (base, run) = stages[0], stages[-1]
    m = re.fullmatch(r"nvidia/cuda:(13\.\d+\.\d+)-devel-ubuntu24\.04\s+AS\s+(\w+)", src, re.I)
    check(m, "build stage is FROM nvidia/cuda:13.x-devel-ubuntu24.04 AS <name>")
    check(m and base == f"nvidia/cuda:{m.group(1)}-runtime-ubuntu24.04",
          "runtime stage is FROM the matching nvidia/cuda runtime image")
    runs = [a for op, a in build if op == "RUN"]
    check(any(re.search(r"\bscripts/install-deps\.sh\s*(&&|$)", a) for a in runs),
          "build stage runs scripts/install-deps.sh as CI does")
    check(any(re.search(r"(^|&&\s*)make(\s+-j\S*)?\s*$", a) for a in runs), "build stage runs make")
    check(any(op == "RUN" and "install-deps.sh --runtime" in a for op, a in run),
          "runtime stage installs the runtime libraries with install-deps.sh --runtime")
    check(m and any(op == "COPY" and f"--from={m.group(2)}" in a and "build/blurd" in a for op, a in run),
          "runtime stage copies build/blurd from the build stage")
    users = [a for op, a in run if op == "USER"]
    check(users and users[-1].split(":")[0] not in ("root", "0"), "runtime stage runs as a non-root USER")
    env = dict(re.findall(r"(BLURD_\w+)=(\S+)", " ".join(a for op, a in run if op == "ENV")))
    port = env.get("BLURD_PORT", defaults["BLURD_PORT"])
    check(env.get("BLURD_BIND", defaults["BLURD_BIND"]) == "0.0.0.0", "the image binds 0.0.0.0")
    check(any(op == "EXPOSE" and port in a.split() for op, a in run), f"EXPOSE {port}")
    health = " ".join(a for op, a in run if op == "HEALTHCHECK")
    check(re.search(r"CMD .*(:\$\{?BLURD_PORT\}?|:" + port + r")/healthz", health),
          "HEALTHCHECK gets /healthz on blurd's port")
    check(("STOPSIGNAL", "SIGTERM") in run, "STOPSIGNAL SIGTERM")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--blurd")
    a = ap.parse_args()
    root = os.path.normpath(a.root)
    blurd = a.blurd or f"{root}/build/blurd"
    defaults = blurd_defaults(blurd)
    print(f"blurd --help: port {defaults['BLURD_PORT']}, bind {defaults['BLURD_BIND']}, "
          f"drain timeout {defaults['BLURD_DRAIN_TIMEOUT']} s")
    docs = load_yaml(root)
    k8s = [d for f, ds in docs.items() if "/k8s/" in f for d in ds]
    pods = [((o.get("spec") or {}).get("template") or {}).get("spec") or {}
            for o in k8s if o.get("kind") == "Deployment"]
    paths = {((c.get(p) or {}).get("httpGet") or {}).get("path")
             for pod in pods for c in pod.get("containers") or []
             for p in ("livenessProbe", "readinessProbe")} - {None}
    # The metrics the HPA scales on, and the path Prometheus scrapes.
    paths |= {"/metrics"} | {((((o.get("spec") or {}).get("template") or {}).get("metadata") or {})
                               .get("annotations") or {}).get("prometheus.io/path", "/metrics")
                              for o in k8s if o.get("kind") == "Deployment"}
    check_k8s(k8s, defaults, blurd_status(blurd, sorted(paths)))
    compose = docs.get(f"{root}/deploy/docker-compose.yml")
    if check(compose, "deploy/docker-compose.yml exists"):
        check_compose(compose[0], defaults)
    check_dockerfile(root, defaults)
    print(f"deploy_check: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
