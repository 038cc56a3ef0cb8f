#!/usr/bin/env python3
"""Checks the rendered Kubernetes manifests (deploy/kubernetes) for what the deployment needs,
beyond the schemas (kubernetes-validate checks those).

Usage: python3 scripts/ci/check-kubernetes.py BASE.yaml CLOUDNATIVE_PG.yaml   (needs PyYAML)

Both renderings must hold a ServiceAccount, Service, Deployment and PodDisruptionBudget (the
overlay also a CloudNativePG Cluster) such that:
- the Deployment runs at least 2 replicas, non-root (runAsNonRoot, uid ≠ 0), with a read-only
  root filesystem, no privilege escalation, every capability dropped, CPU and memory requests and
  a memory limit, liveness on /healthz and readiness on /readyz on its named port, a grace period
  longer than the service's 30 s request timeout, and no service-account token;
- DATABASE_URL, DIRICHLET_ADMIN_TOKEN and DIRICHLET_FINGERPRINT_KEY come from Secrets (never a
  literal), DATABASE_URL directly or as $(VAR) of an earlier variable from a Secret; where the
  URL is visible it asks for sslmode=verify-full and names as sslrootcert a file that a mounted
  Secret volume provides; no variable has both value and valueFrom;
- the Service and the PodDisruptionBudget select the Deployment's pods; the budget leaves at least
  one pod and allows an eviction;
- the Cluster has at least 3 instances and at least one synchronous standby, and the Deployment
  uses its `-app` Secret and its `-ca` Secret's ca.crt alone.
"""

import re
import sys

import yaml

failures = []


def expect(condition, message):
    if not condition:
        failures.append(message)
    return condition


def load(path):
    with open(path, encoding="utf-8") as f:
        return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(f) if d}


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check(path, overlay):
    objects = load(path)
    kinds = sorted(kind for kind, _ in objects)
    wanted = sorted(["ServiceAccount", "Service", "Deployment", "PodDisruptionBudget"] + (["Cluster"] if overlay else []))
    expect(kinds == wanted, f"{path}: kinds {kinds}, expected {wanted}")
    deployments = [d for (kind, _), d in objects.items() if kind == "Deployment"]
    if not expect(len(deployments) == 1, f"{path}: one Deployment"):
        return
    deployment = deployments[0]
    where = f"{path}: Deployment"
    spec = deployment["spec"]
    expect(spec.get("replicas", 1) >= 2, f"{where}: at least 2 replicas")
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"].get("labels", {})
    expect(matches(spec["selector"].get("matchLabels"), pod_labels), f"{where}: its selector selects its pods")
    expect(pod.get("automountServiceAccountToken") is False, f"{where}: no service-account token")
    expect(pod.get("terminationGracePeriodSeconds", 30) > 30, f"{where}: a grace period longer than the 30 s request timeout")
    pod_security = pod.get("securityContext", {})
    containers = pod["containers"]
    expect(len(containers) == 1, f"{where}: one container")
    c = containers[0]
    security = {**pod_security, **c.get("securityContext", {})}
    expect(security.get("runAsNonRoot") is True, f"{where}: runAsNonRoot")
    expect(security.get("runAsUser", 0) != 0, f"{where}: a non-zero runAsUser")
    expect(security.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem")
    expect(security.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation false")
    expect("ALL" in security.get("capabilities", {}).get("drop", []), f"{where}: capabilities dropped")
    resources = c.get("resources", {})
    expect({"cpu", "memory"} <= set(resources.get("requests", {})), f"{where}: CPU and memory requests")
    expect("memory" in resources.get("limits", {}), f"{where}: a memory limit")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    expect(ports.get("http") == 8080, f"{where}: port http is 8080 (the image's DIRICHLET_LISTEN)")
    for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        expect(get.get("path") == path_ and get.get("port") in ("http", 8080), f"{where}: {probe} GETs {path_} on the http port")

    env = c.get("env", [])
    defined, from_secret, values = [], set(), {}
    for var in env:
        name = var["name"]
        expect(not ("value" in var and "valueFrom" in var), f"{where}: {name} has both value and valueFrom")
        if "valueFrom" in var:
            expect("secretKeyRef" in var["valueFrom"], f"{where}: {name} comes from a Secret")
            from_secret.add(name)
        else:
            value = str(var.get("value", ""))
            values[name] = value
            for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value):
                expect(ref in defined, f"{where}: {name} refers to $({ref}), which is not defined before it")
        defined.append(name)
    for secret in ("DIRICHLET_ADMIN_TOKEN", "DIRICHLET_FINGERPRINT_KEY"):
        expect(secret in from_secret, f"{where}: {secret} from a Secret")
    if "DATABASE_URL" in values:
        url = values["DATABASE_URL"]
        refs = re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", url)
        expect(refs and all(r in from_secret for r in refs), f"{where}: DATABASE_URL is built from Secret values only")
        expect("sslmode=verify-full" in url, f"{where}: DATABASE_URL asks for sslmode=verify-full")
        root = re.search(r"sslrootcert=([^&]+)", url)
        if expect(root, f"{where}: DATABASE_URL names an sslrootcert"):
            check_mounted(where, pod, c, root.group(1))
    else:
        expect("DATABASE_URL" in from_secret, f"{where}: DATABASE_URL from a Secret")
        # The URL is the operator's; the CA it names must be mounted all the same.
        check_mounted(where, pod, c, "/etc/ssl/dirichlet-release/db/ca.crt")

    for (kind, name), obj in objects.items():
        if kind == "Service":
            expect(matches(obj["spec"].get("selector"), pod_labels), f"{path}: Service {name} selects the pods")
            expect(all(p.get("targetPort") in ("http", 8080) for p in obj["spec"]["ports"]), f"{path}: Service {name} targets the http port")
        if kind == "PodDisruptionBudget":
            expect(matches(obj["spec"].get("selector", {}).get("matchLabels"), pod_labels), f"{path}: the budget selects the pods")
            available = obj["spec"].get("minAvailable")
            expect(isinstance(available, int) and 1 <= available < spec.get("replicas", 1), f"{path}: the budget keeps one pod and allows an eviction")
        if kind == "Cluster":
            cluster = obj["spec"]
            expect(cluster.get("instances", 1) >= 3, f"{path}: Cluster {name} has at least 3 instances")
            sync = cluster.get("postgresql", {}).get("synchronous", {})
            expect(sync.get("number", 0) >= 1, f"{path}: Cluster {name} has a synchronous standby")
            secrets = {v["valueFrom"]["secretKeyRef"]["name"] for v in env if "valueFrom" in v}
            expect(f"{name}-app" in secrets, f"{path}: the Deployment uses the {name}-app Secret")
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            ca = [v for v in volumes.values() if v.get("secret", {}).get("secretName") == f"{name}-ca"]
            expect(ca and [i["key"] for i in ca[0]["secret"].get("items", [])] == ["ca.crt"],
                   f"{path}: the {name}-ca Secret is mounted with its ca.crt alone (not the CA's key)")


def check_mounted(where, pod, container, file):
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        volume = volumes.get(mount["name"], {})
        if file.startswith(prefix) and "secret" in volume:
            paths = [i["path"] for i in volume["secret"].get("items", [])]
            expect(file[len(prefix):] in paths, f"{where}: {file} is an item of the Secret volume {mount['name']}")
            expect(mount.get("readOnly") is True, f"{where}: {mount['mountPath']} is mounted read-only")
            return
    failures.append(f"{where}: no Secret volume provides {file}")


if len(sys.argv) != 3:
    sys.exit(__doc__)
check(sys.argv[1], overlay=False)
check(sys.argv[2], overlay=True)
for failure in failures:
    print(f"FAIL: {failure}", file=sys.stderr)
if failures:
    sys.exit(1)
print("check-kubernetes.py: the manifests have what the deployment needs")
