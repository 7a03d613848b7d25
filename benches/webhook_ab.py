#!/usr/bin/env python3
"""The webhook of this tree against the webhook of another commit, on the same machine, in one run.

Builds the `sites-operator` binary of OLD into its own target directory (target/ab/<commit>, from
a detached worktree under target/ab/src-<commit>), then runs each binary in turn against the same
emulator (this tree's) and loads `/validate-sites` with wrk (TLS, http/1.1 keep-alive, 16
connections by default) for each body: new, old, new, old, ... (`--rounds` pairs). Prints
requests/s per run and the ratio new/old per case (the median of each side), the way the API
server calls webhooks (one review per request over HTTP/1.1).

    cargo build --release --bin sites-operator -p sites-operator -p sites-emulator
    python3 benches/webhook_ab.py --old 35e41b3 --seconds 6 --rounds 2

The bodies are those of `benches/webhook.rs` (`benches/common/bodies.rs`): a typical Site review
(~4 KB, what `kubectl apply` sends, with the last-applied annotation and managed fields) and a
large one (~100 KB, a Site shared with 3,700 users); `--update` sends them as UPDATEs with the
same object as oldObject (twice the body). wrk comes from Debian (`apt-get install wrk`).
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webhook_flood import ROOT, start_emulator, start_operator  # noqa: E402


def dumps(v):
    """JSON as serde_json writes a `json!` value: keys sorted, no spaces."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec(users):
    return {
        "name": "handbook", "owner": "jdoe", "type": "static",
        "description": "Team handbook: procedures, on-call rotas and the glossary of the operations team",
        "created_by": "jdoe", "updated_by": "asmith",
        "created_at": "2026-01-12T09:30:00Z", "updated_at": "2026-11-02T16:45:10Z",
        "configuration": {
            "space": "docs", "enabled": True,
            "applications": [
                {"name": "static"},
                {"name": "api", "image": "ghcr.io/ecmwf/handbook-api:2.4.1", "port": 8000,
                 "env": {"LOG_LEVEL": "info", "DATABASE_POOL": "8", "CACHE_TTL": "300",
                         "FEATURE_SEARCH": "true", "UPSTREAM_URL": "https://api.example.int/v2"},
                 "paths": [{"path": "/docs/handbook/api", "path_type": "Prefix"},
                           {"path": "/docs/handbook/search", "path_type": "Prefix"}]},
                {"name": "worker", "image": "ghcr.io/ecmwf/handbook-worker:2.4.1", "port": 9000,
                 "env": {"QUEUE": "handbook", "CONCURRENCY": "4"}},
            ],
            "headers": {"X-Frame-Options": "SAMEORIGIN", "X-Content-Type-Options": "nosniff",
                        "Referrer-Policy": "strict-origin-when-cross-origin",
                        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'self'"},
            "quota": "5Gi", "retention_date": "2027-12-31",
            "share": {"administrator_users": ["jdoe", "asmith"],
                      "users": [f"user{i:05}" for i in range(users)],
                      "groups": ["docs-team", "operations"]},
            "settings": {"replicas": 1, "resource_limits": {"cpu": "500m", "memory": "512Mi"},
                         "error_handling": "platform", "monitored": True},
        },
    }


def site(users):
    s = spec(users)
    applied = {"apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
               "metadata": {"name": "docs-handbook", "namespace": "sites"}, "spec": s}
    return {
        "apiVersion": "sites.ecmwf.int/v1", "kind": "Site",
        "metadata": {
            "name": "docs-handbook", "namespace": "sites",
            "uid": "0b7c58a4-3c1e-4a8e-9b1d-6c3f2a9e4d10", "generation": 7,
            "creationTimestamp": "2026-01-12T09:30:00Z",
            "labels": {"app.kubernetes.io/part-of": "sites", "sites.ecmwf.int/space": "docs"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": dumps(applied),
                "sites.ecmwf.int/upgrade-request": "5f0b9a3e-2a7d-4d3c-9c8e-1b2f3a4d5e6f",
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "sites.ecmwf.int/v1", "time": "2026-11-02T16:45:10Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {
                    ".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                    "f:spec": {".": {}, "f:configuration": {
                        ".": {}, "f:applications": {}, "f:headers": {".": {}}, "f:quota": {},
                        "f:share": {".": {}}}}},
            }],
        },
        "spec": s,
    }


def review(obj, update):
    return dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6e2b1f0c-0000-4000-8000-000000000001",
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "requestKind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "requestResource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "name": "docs-handbook", "namespace": "sites",
            "operation": "UPDATE" if update else "CREATE",
            "userInfo": {"username": "jdoe", "uid": "1001",
                         "groups": ["system:authenticated", "docs-team"]},
            "object": obj, "oldObject": obj if update else None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1",
                        "kind": "UpdateOptions" if update else "CreateOptions",
                        "fieldManager": "kubectl-client-side-apply"},
        },
    }).encode()


def build_old(commit):
    """The release `sites-operator` of `commit`, built in its own target directory."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    target = os.path.join(ROOT, "target", "ab", sha)
    binary = os.path.join(target, "release", "sites-operator")
    src = os.path.join(ROOT, "target", "ab", f"src-{sha}")
    if not os.path.exists(src):
        subprocess.run(["git", "worktree", "add", "--detach", src, sha], cwd=ROOT, check=True,
                       capture_output=True)
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    print(f"building sites-operator at {sha} into {target} ...", file=sys.stderr)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "sites-operator",
                    "--bin", "sites-operator"], cwd=src, env=env, check=True)
    return sha, binary


def wrk(addr, body, seconds, connections, tmp):
    path = os.path.join(tmp, "body.json")
    with open(path, "wb") as f:
        f.write(body)
    script = os.path.join(tmp, "post.lua")
    with open(script, "w") as f:
        f.write('wrk.method = "POST"\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
                f'local f = io.open("{path}", "rb")\nwrk.body = f:read("*a")\nf:close()\n')
    host, port = addr
    run = subprocess.run(
        ["wrk", "-t", "2", "-c", str(connections), "-d", f"{int(seconds)}s", "-s", script,
         f"https://{host}:{port}/validate-sites"],
        capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"wrk failed: {run.stderr or run.stdout}")
    out = run.stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    total = re.search(r"(\d+) requests in", out)
    if rate is None or total is None:
        sys.exit("wrk printed no rate:\n" + out)
    return float(rate.group(1)), int(total.group(1)), int(errors.group(1)) if errors else 0


def cpu_seconds(pid):
    """User and system CPU time of process `pid` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="the commit to compare with")
    p.add_argument("--old-binary", help="a binary to run as the old side instead of building --old")
    p.add_argument("--new", default=os.path.join(ROOT, "target/release/sites-operator"))
    p.add_argument("--emulator", default=os.path.join(ROOT, "target/release/sites-emulator"))
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--update", action="store_true", help="UPDATE reviews with oldObject")
    p.add_argument("--cases", default="typical,large")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    if args.old_binary:
        sha, old = args.old, args.old_binary
    else:
        sha, old = build_old(args.old)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    bodies = {"typical": review(site(15), args.update), "large": review(site(3700), args.update)}
    cases = args.cases.split(",")
    results = {(c, side): [] for c in cases for side in ("new", "old")}
    cpu = {(c, side): [] for c in cases for side in ("new", "old")}
    with tempfile.TemporaryDirectory() as tmp:
        emulator, env = start_emulator(args.emulator, tmp)
        try:
            for _ in range(args.rounds):
                for side, binary in (("new", args.new), ("old", old)):
                    operator, addr = start_operator(binary, tmp, env)
                    try:
                        time.sleep(1)
                        for case in cases:
                            before = cpu_seconds(operator.pid)
                            rate, total, errors = wrk(addr, bodies[case], args.seconds,
                                                      args.connections, tmp)
                            used = (cpu_seconds(operator.pid) - before) * 1e6 / total
                            if errors:
                                sys.exit(f"{side} {case}: {errors} answers were not 2xx")
                            results[(case, side)].append(rate)
                            cpu[(case, side)].append(used)
                            print(f"{side} ({head if side == 'new' else sha}) {case}: "
                                  f"{rate:,.0f} req/s, {used:.1f} µs server CPU per request",
                                  file=sys.stderr)
                    finally:
                        operator.send_signal(signal.SIGTERM)
                        operator.wait(10)
        finally:
            emulator.send_signal(signal.SIGTERM)
            emulator.wait(10)
    print(f"# /validate-sites, {args.connections} http/1.1 keep-alive connections over TLS (wrk), "
          f"{args.seconds:g} s per run, {'UPDATE' if args.update else 'CREATE'} reviews, "
          f"new = {head} (working tree), old = {sha}, alternated {args.rounds}x")
    print("| case | body bytes | new req/s | old req/s | new/old (medians) "
          "| server CPU µs/req, new · old | old/new CPU |")
    print("|---|---:|---|---|---:|---|---:|")
    for case in cases:
        new, old_rates = results[(case, "new")], results[(case, "old")]
        ratio = statistics.median(new) / statistics.median(old_rates)
        new_cpu, old_cpu = (statistics.median(cpu[(case, s)]) for s in ("new", "old"))
        print(f"| {case} | {len(bodies[case]):,} | {' · '.join(f'{r:,.0f}' for r in new)} | "
              f"{' · '.join(f'{r:,.0f}' for r in old_rates)} | {ratio:.2f}x "
              f"| {new_cpu:.1f} · {old_cpu:.1f} | {old_cpu / new_cpu:.2f}x |")


if __name__ == "__main__":
    main()
