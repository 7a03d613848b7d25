#!/usr/bin/env python3
"""Hostile load on the webhook server of a real `sites-operator run` process, and its memory.

Starts `sites-emulator` and `sites-operator run` (the binaries given), then keeps CONNECTIONS
TLS connections each sending the largest body the server accepts, as fast as it answers
(`--mode fast`), or trickling bodies one byte at a time (`--mode slow`). Meanwhile one
connection sends a typical Site review every 100 ms, as the API server would; its answers show
whether the webhook keeps serving. Prints the operator's peak resident memory (VmHWM, and the
highest VmRSS sampled every 20 ms), the answers by status, and the typical reviews' outcome.

    python3 benches/webhook_flood.py --operator target/release/sites-operator \
        --emulator target/release/sites-emulator --connections 1000 --seconds 30 \
        --path /validate-config

    python3 benches/webhook_flood.py ... --connections 16 --shape invalid-keys --path /validate-sites
    python3 benches/webhook_flood.py ... --connections 16 --shape alias-scalar --path /validate-config

The bodies are AdmissionReviews whose object holds one long JSON array of zeros (the shape that
expands most when decoded generically), sized to --body-bytes (default: the server's limit), or
(--shape) a Site with that many invalid environment keys, or a configuration whose YAML aliases
a long scalar.
"""

import argparse
import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def review(obj, uid="flood"):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "sites.ecmwf.int", "version": "v1", "kind": "Site"},
            "resource": {"group": "sites.ecmwf.int", "version": "v1", "resource": "sites"},
            "name": obj.get("metadata", {}).get("name", ""),
            "namespace": "sites",
            "operation": "CREATE",
            "userInfo": {"username": "flood"},
            "object": obj,
        },
    }


def typical_site():
    return {
        "apiVersion": "sites.ecmwf.int/v1",
        "kind": "Site",
        "metadata": {"name": "canary", "namespace": "sites"},
        "spec": {
            "name": "canary",
            "owner": "jdoe",
            "type": "static",
            "configuration": {"space": "flood", "applications": [{"name": "static"}]},
        },
    }


def invalid_keys_body(size):
    """A Site review whose one application has as many invalid environment keys
    (`"9 bad=key/0000001": ""`) as fit in `size` bytes: each one a violation."""
    obj = typical_site()
    obj["spec"]["configuration"]["applications"][0]["env"] = {"@": ""}
    text = json.dumps(review(obj), separators=(",", ":"))
    before, after = text.split('"@":""')
    entry = len('"9 bad=key/0000000":"",')
    n = max(1, (size - len(before) - len(after)) // entry)
    keys = ",".join(f'"9 bad=key/{i:07}":""' for i in range(n))
    return (before + keys + after).encode()


def alias_scalar_body():
    """A configuration review whose YAML uses a 30,000-byte scalar through four levels of ten
    aliases: 300 MB of text if it were built."""
    yaml = 'bomb: &a "' + "x" * 30000 + '"\n'
    for prev, name in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]:
        yaml += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "sites-config", "namespace": "sites"},
           "data": {"config.yaml": yaml}}
    r = review(obj)
    r["request"]["kind"] = {"group": "", "version": "v1", "kind": "ConfigMap"}
    r["request"]["operation"] = "UPDATE"
    return json.dumps(r, separators=(",", ":")).encode()


def body_of(shape, path, size):
    if shape == "invalid-keys":
        return invalid_keys_body(size)
    if shape == "alias-scalar":
        return alias_scalar_body()
    return hostile_body(path, size)


def hostile_body(path, size):
    """A review whose object carries one array of zeros, `size` bytes in all."""
    if path == "/validate-config":
        obj = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "sites-config", "namespace": "sites"},
               "data": {"x": "@"}}
    else:
        # `spec.name` is not a string: the typed decoding refuses the object, so a server with a
        # generic fallback decodes the whole array.
        obj = typical_site()
        obj["spec"]["name"] = 5
        obj["spec"]["x"] = "@"
    text = json.dumps(review(obj), separators=(",", ":"))
    before, after = text.split('"@"')
    n = max(1, (size - len(before) - len(after) - 2) // 2)
    return (before + "[" + ",".join(["0"] * n) + "]" + after).encode()


def request(path, body, host):
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()


async def read_response(reader, stats=None):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    close = False
    retry_after = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() == b"connection" and value.strip().lower() == b"close":
            close = True
        if name.strip().lower() == b"retry-after":
            retry_after = True
    if length:
        await reader.readexactly(length)
    if stats is not None:
        stats.answer(status, length, retry_after)
    return status, close


class Stats:
    def __init__(self):
        self.statuses = {}
        self.errors = {}
        self.largest = {}
        self.without_retry_after = 0

    def answer(self, status, length, retry_after):
        self.largest[status] = max(self.largest.get(status, 0), length)
        if status == 503 and not retry_after:
            self.without_retry_after += 1

    def status(self, s):
        self.statuses[s] = self.statuses.get(s, 0) + 1

    def error(self, e):
        name = type(e).__name__
        self.errors[name] = self.errors.get(name, 0) + 1


async def flooder(addr, ctx, path, body, mode, end, stats):
    host, port = addr
    head = request(path, body, f"{host}:{port}")
    while time.monotonic() < end:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx), 10)
        except Exception as e:  # refused at the cap, handshake timeout
            stats.error(e)
            await asyncio.sleep(0.2)
            continue
        try:
            while time.monotonic() < end:
                if mode == "slow":
                    writer.write(head)
                    for i in range(len(body)):
                        writer.write(body[i:i + 1])
                        await writer.drain()
                        await asyncio.sleep(0.5)
                        if time.monotonic() >= end:
                            break
                    status, close = await read_response(reader, stats)
                else:
                    # Read while writing, as the API server's HTTP client does: an answer that
                    # comes before the whole body was sent (a 503 when the memory budget is
                    # held) is read, not lost to the write that fails once the server closes.
                    answer = asyncio.create_task(read_response(reader, stats))
                    try:
                        writer.write(head)
                        writer.write(body)
                        await writer.drain()
                    except (ConnectionError, OSError):
                        pass
                    status, close = await answer
                stats.status(status)
                if close:
                    break
        except Exception as e:
            stats.error(e)
        finally:
            writer.close()


async def canary(addr, ctx, end, results):
    """One keep-alive connection sending a typical Site review every 100 ms."""
    host, port = addr
    body = json.dumps(review(typical_site(), "canary")).encode()
    head = request("/validate-sites", body, f"{host}:{port}")
    conn = None
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), 10)
            reader, writer = conn
            writer.write(head + body)
            await writer.drain()
            status, close = await asyncio.wait_for(read_response(reader), 10)
            results.append((status, time.monotonic() - started))
            if close:
                writer.close()
                conn = None
        except Exception as e:
            results.append((type(e).__name__, time.monotonic() - started))
            conn = None
        await asyncio.sleep(0.1)


def memory(pid):
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


async def sample(pid, end, peak):
    while time.monotonic() < end + 2:
        peak[0] = max(peak[0], memory(pid)[0])
        await asyncio.sleep(0.02)


async def flood(args, addr, pid):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    body = body_of(args.shape, args.path, args.body_bytes)
    stats = Stats()
    canary_results = []
    peak = [0]
    end = time.monotonic() + args.seconds
    tasks = [asyncio.create_task(sample(pid, end, peak)),
             asyncio.create_task(canary(addr, ctx, end, canary_results))]
    # Opened a few at a time: a thousand handshakes at once only measures the listen backlog.
    for i in range(args.connections):
        tasks.append(asyncio.create_task(
            flooder(addr, ctx, args.path, body, args.mode, end, stats)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    return body, stats, canary_results, peak[0]


def start(args, tmp):
    emulator, env = start_emulator(args.emulator, tmp)
    operator, addr = start_operator(args.operator, tmp, env)
    return emulator, operator, addr


def start_emulator(binary, tmp):
    """The emulator with the Site CRD and the namespace `sites`; the environment to reach it."""
    env = dict(os.environ)
    kubeconfig = os.path.join(tmp, "kubeconfig")
    env["KUBECONFIG"] = kubeconfig
    emulator = subprocess.Popen([binary, "--tls", "--kubeconfig", kubeconfig],
                                stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(tmp, "emulator.log"), "w"))
    deadline = time.monotonic() + 30
    while not os.path.exists(kubeconfig) or os.path.getsize(kubeconfig) == 0:
        if time.monotonic() > deadline:
            sys.exit("the emulator did not start")
        time.sleep(0.05)
    kubectl = ["kubectl", "--cache-dir", os.path.join(tmp, "kc")]
    deadline = time.monotonic() + 30
    while subprocess.run(kubectl + ["get", "--raw", "/version"], env=env,
                         capture_output=True).returncode:
        if time.monotonic() > deadline:
            sys.exit("the emulator does not answer")
        time.sleep(0.1)
    with open(os.path.join(ROOT, "manifests/base/crd.yaml"), "rb") as f:
        crd = f.read()
    subprocess.run(kubectl + ["apply", "-f", "-"], input=crd, env=env, check=True,
                   capture_output=True)
    subprocess.run(kubectl + ["create", "namespace", "sites"], env=env, capture_output=True)
    return emulator, env


def start_operator(binary, tmp, env):
    """`binary run` against the emulator of `env`, its webhook on a free loopback port; the
    process and the webhook's (host, port)."""
    certs = os.path.join(tmp, "certs")
    if not os.path.exists(os.path.join(certs, "tls.crt")):
        subprocess.run([binary, "certs", "--out", certs], check=True, capture_output=True)
    report = os.path.join(tmp, "listening")
    if os.path.exists(report):
        os.remove(report)
    operator = subprocess.Popen(
        [binary, "run", "--namespace", "sites",
         "--config", os.path.join(ROOT, "manifests/base/config.yaml"),
         "--tls-cert", os.path.join(tmp, "certs/tls.crt"),
         "--tls-key", os.path.join(tmp, "certs/tls.key"),
         "--webhook-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
         "--metrics-insecure", "--health-addr", "127.0.0.1:0", "--listen-report", report],
        env=env, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(tmp, "operator.log"), "w"))
    deadline = time.monotonic() + 60
    while not os.path.exists(report):
        if operator.poll() is not None or time.monotonic() > deadline:
            sys.exit("the operator did not start: " +
                     open(os.path.join(tmp, "operator.log")).read()[-2000:])
        time.sleep(0.05)
    line = open(report).read()
    webhook = dict(p.split("=", 1) for p in line.split())["webhook"]
    host, port = webhook.rsplit(":", 1)
    return operator, (host, int(port))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--operator", required=True)
    p.add_argument("--emulator", required=True)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--path", default="/validate-config",
                   choices=["/validate-config", "/validate-sites", "/mutate-sites"])
    p.add_argument("--mode", default="fast", choices=["fast", "slow"])
    p.add_argument("--shape", default="zeros", choices=["zeros", "invalid-keys", "alias-scalar"],
                   help="zeros: one long array (what a generic decoder expands most); "
                        "invalid-keys: a Site whose every environment key is invalid; "
                        "alias-scalar: a configuration aliasing a 30 KB scalar 10,000 times")
    p.add_argument("--body-bytes", type=int, default=None,
                   help="body size (default: the limit the server documents, from its --help)")
    args = p.parse_args()
    if args.body_bytes is None:
        args.body_bytes = 4 * 1024 * 1024 + 512 * 1024
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 65536)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        emulator, operator, addr = start(args, tmp)
        try:
            time.sleep(2)
            base = memory(operator.pid)[0]
            body, stats, canary_results, peak = asyncio.run(flood(args, addr, operator.pid))
            rss, hwm = memory(operator.pid)
            ok = [t for s, t in canary_results if s == 200]
            bad = [s for s, _ in canary_results if s != 200]
            ok.sort()
            print(f"path {args.path}, mode {args.mode}, {args.connections} connections, "
                  f"body {len(body)} bytes, {args.seconds:g} s")
            print(f"operator RSS: {base / 1024:.0f} MiB before, peak {hwm / 1024:.0f} MiB (VmHWM),"
                  f" sampled peak {peak / 1024:.0f} MiB, {rss / 1024:.0f} MiB after")
            print(f"answers: {dict(sorted(stats.statuses.items()))}; client errors: {stats.errors}")
            print(f"largest answer by status: {dict(sorted(stats.largest.items()))} bytes; "
                  f"503 without Retry-After: {stats.without_retry_after}")
            if ok:
                print(f"typical reviews: {len(ok)} answered 200 of {len(canary_results)}, "
                      f"p50 {ok[len(ok) // 2] * 1000:.0f} ms, max {ok[-1] * 1000:.0f} ms; "
                      f"others: {sorted(set(map(str, bad)))}")
            else:
                print(f"typical reviews: none answered 200 of {len(canary_results)}: "
                      f"{sorted(set(map(str, bad)))}")
            alive = operator.poll() is None
            print("operator still running" if alive else f"operator exited: {operator.returncode}")
        finally:
            for proc in (operator, emulator):
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    main()
