#!/usr/bin/env python3
"""Hostile load on the webhook server of a real `sites-operator run` process: does it keep
answering the API server, and what memory and CPU does it take.

Starts `sites-emulator` and `sites-operator run` (the binaries given; the webhook on
127.0.0.1 only), then keeps CONNECTIONS hostile TLS connections of one shape (`--shape`) open
against it. Beside them an ordinary client, as the API server would be: HTTP/1.1 on one
keep-alive connection (opened again when closed), a typical Site review on /validate-sites every
100 ms for `--seconds`; a request not answered within 5 s is a failure. A request's latency is
the time until its outcome (its answer, an error, or the 5 s deadline); p50/p99/max are over
every request sent. The ordinary client runs in a process of its own at a higher priority
(nice -10, where allowed), so the hostile client's work does not delay it; its own largest
scheduling lag is printed ("client lag"). Prints one result line per run (`--json FILE` appends it as a JSON
line): the ordinary requests sent, % answered 200, p50/p99/max latency, outcomes, the hostile
requests' answers by status and what happened to their connections, the operator's peak RSS
(VmHWM of a fresh operator process per run) and the CPU seconds it used during the run.

Shapes (each connection reconnects when the server drops it, until the run ends):

  h2-zero-window      HTTP/2 (ALPN h2), SETTINGS_INITIAL_WINDOW_SIZE = 0, 16 typical Site reviews
                      as concurrent streams (a stream the server ends or resets is replaced), never
                      a WINDOW_UPDATE, a PING every 2 s: no answer can be written.
  h2-byte-window      as h2-zero-window, but every 100 ms a WINDOW_UPDATE of 1 byte for each
                      open stream and for the connection.
  h1-pipeline-noread  HTTP/1.1, typical reviews pipelined back to back; the socket is never read
                      (SO_RCVBUF 4 KiB, TLS over memory BIOs: not one byte read after the
                      handshake).
  slowloris           HTTP/1.1 request headers sent one byte per second.
  slow-body           headers complete (Content-Length of a typical review), body one byte per
                      second.
  big-body            reviews of one long JSON array of zeros, --body-bytes (default: the 4.5 MiB
                      the server accepts), as fast as answered (`zeros` with --mode fast).
  config-cpu          /validate-config reviews of `sites-config` whose config.yaml is
                      `sitesConfig: {applications: [{}, {}, ...]}` with as many empty entries as
                      the server parses (64 KiB of text, 20,000 values: 19,997), as fast as
                      answered.
  invalid-keys        a Site whose one application has as many invalid env keys as fit in
                      --body-bytes, as fast as answered.
  zeros, alias-scalar the earlier shapes (--mode fast|slow; alias-scalar: a configuration
                      aliasing a 30 KB scalar 10,000 times).

Every shape but config-cpu goes to --path (default /validate-sites for the Site shapes,
/validate-config for zeros and alias-scalar); --mode slow trickles the body of zeros,
invalid-keys or alias-scalar one byte every 0.5 s.

    cargo build --release --locked -p sites-operator -p sites-emulator --bins
    make bench-hostile            # h2 into .tools/venv, then the --matrix below (about 12 min)

    .tools/venv/bin/python benches/webhook_flood.py --operator target/release/sites-operator \
        --emulator target/release/sites-emulator --matrix --seconds 30 --json hostile.jsonl

    .tools/venv/bin/python benches/webhook_flood.py ... --shape h2-zero-window --connections 256
    .tools/venv/bin/python benches/webhook_flood.py ... --matrix --matrix-connections 32 --seconds 10

    python3 benches/webhook_flood.py ... --connections 1000 --seconds 30 --path /validate-config
    python3 benches/webhook_flood.py ... --connections 16 --shape invalid-keys --path /validate-sites
    python3 benches/webhook_flood.py ... --connections 16 --shape alias-scalar --path /validate-config

`--matrix` runs every shape at 32 and 256 hostile connections (`--matrix-connections`), a fresh
operator per run beside one emulator, and ends with a markdown table. The h2 shapes need the `h2`
package (PyPI, pure Python); the others only the standard library.
"""

import argparse
import asyncio
import json
import logging
import math
import multiprocessing
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HOST = "127.0.0.1"
# The hostile shapes of the matrix, in the order of the table.
SHAPES = ["h2-zero-window", "h2-byte-window", "h1-pipeline-noread", "slowloris", "slow-body",
          "big-body", "config-cpu", "invalid-keys"]
LEGACY_SHAPES = ["zeros", "alias-scalar"]
MATRIX_CONNECTIONS = [32, 256]
# The ordinary client: one request every PERIOD, each answered within DEADLINE or failed.
PERIOD = 0.1
DEADLINE = 5.0
# The hostile load starts this long before the ordinary client (its connections are open and
# their requests sent by then).
WARMUP = 1.0
# Streams per HTTP/2 connection (the server's SETTINGS_MAX_CONCURRENT_STREAMS is 16).
H2_STREAMS = 16
H2_PING_EVERY = 2.0
H2_TICK = 0.1
# The server's limits on a configuration (crate::config::MAX_TEXT_BYTES, MAX_VALUES): a
# document over either is refused before the expensive validation.
CONFIG_TEXT_LIMIT = 64 * 1024
CONFIG_VALUE_LIMIT = 20_000
DEFAULT_BODY_BYTES = 4 * 1024 * 1024 + 512 * 1024


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


def typical_body(uid="flood"):
    return json.dumps(review(typical_site(), uid), separators=(",", ":")).encode()


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


def config_review(yaml):
    """A review of an UPDATE of the `sites-config` ConfigMap whose config.yaml is `yaml`."""
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "sites-config", "namespace": "sites"},
           "data": {"config.yaml": yaml}}
    r = review(obj)
    r["request"]["kind"] = {"group": "", "version": "v1", "kind": "ConfigMap"}
    r["request"]["resource"] = {"group": "", "version": "v1", "resource": "configmaps"}
    r["request"]["operation"] = "UPDATE"
    return json.dumps(r, separators=(",", ":")).encode()


def alias_scalar_body():
    """A configuration review whose YAML uses a 30,000-byte scalar through four levels of ten
    aliases: 300 MB of text if it were built."""
    yaml = 'bomb: &a "' + "x" * 30000 + '"\n'
    for prev, name in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]:
        yaml += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
    return config_review(yaml)


def config_cpu_entries():
    """As many empty applications as the server parses: the text within CONFIG_TEXT_LIMIT and
    the values (the document, `sitesConfig`, `applications` and each entry) within
    CONFIG_VALUE_LIMIT."""
    head, tail = "sitesConfig: {applications: [", "]}\n"
    fit = (CONFIG_TEXT_LIMIT - len(head) - len(tail) + 1) // len("{},")
    return min(fit, CONFIG_VALUE_LIMIT - 3)


def config_cpu_body(entries):
    """A configuration review whose `sitesConfig.applications` holds `entries` empty mappings:
    each one a few violations (no name, no image...)."""
    yaml = "sitesConfig: {applications: [" + ",".join(["{}"] * entries) + "]}\n"
    assert len(yaml) <= CONFIG_TEXT_LIMIT, len(yaml)
    return config_review(yaml)


def body_of(shape, path, size):
    if shape == "invalid-keys":
        return invalid_keys_body(size)
    if shape == "alias-scalar":
        return alias_scalar_body()
    if shape == "config-cpu":
        return config_cpu_body(config_cpu_entries())
    if shape in ("h2-zero-window", "h2-byte-window", "h1-pipeline-noread", "slowloris",
                 "slow-body"):
        return typical_body()
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
    """What the hostile connections got: answers by status, and events (errors, resets, drops)."""

    def __init__(self):
        self.statuses = {}
        self.errors = {}
        self.largest = {}
        self.without_retry_after = 0
        self.sent = 0

    def answer(self, status, length, retry_after):
        self.largest[status] = max(self.largest.get(status, 0), length)
        if status == 503 and not retry_after:
            self.without_retry_after += 1

    def status(self, s):
        self.statuses[s] = self.statuses.get(s, 0) + 1

    def event(self, name):
        self.errors[name] = self.errors.get(name, 0) + 1

    def error(self, e, prefix=""):
        self.event(prefix + type(e).__name__)


def tls_context(ca, alpn):
    """Client TLS trusting the operator's CA (its certificate names 127.0.0.1), offering `alpn`."""
    if ca and os.path.exists(ca):
        ctx = ssl.create_default_context(cafile=ca)
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([alpn])
    return ctx


async def connect(addr, ctx, **kw):
    return await asyncio.wait_for(asyncio.open_connection(addr[0], addr[1], ssl=ctx, **kw), 10)


def abort(writer):
    if writer is not None:
        writer.transport.abort()


async def flooder(addr, ctx, path, body, mode, end, stats):
    """Requests with `body`: as fast as answered (`fast`), or trickled a byte every 0.5 s."""
    host, port = addr
    head = request(path, body, f"{host}:{port}")
    while time.monotonic() < end:
        try:
            reader, writer = await connect(addr, ctx)
        except Exception as e:  # refused at the cap, handshake timeout
            stats.error(e, "connect: ")
            await asyncio.sleep(0.2)
            continue
        try:
            while time.monotonic() < end:
                stats.sent += 1
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
                        stats.event("write cut")
                    try:
                        status, close = await answer
                    finally:
                        answer.cancel()
                stats.status(status)
                if close:
                    break
        except asyncio.IncompleteReadError:
            stats.event("closed without an answer")
        except Exception as e:
            stats.error(e)
        finally:
            abort(writer)
        await asyncio.sleep(0.01)


async def trickle(addr, ctx, path, body, slow_headers, end, stats):
    """One request at a time, one byte per second: of its headers (slowloris), or of its body
    after whole headers (slow body). Reads the answer meanwhile."""
    host, port = addr
    head = request(path, body, f"{host}:{port}")
    while time.monotonic() < end:
        try:
            reader, writer = await connect(addr, ctx)
        except Exception as e:
            stats.error(e, "connect: ")
            await asyncio.sleep(1)
            continue
        answer = asyncio.create_task(read_response(reader, stats))
        try:
            stats.sent += 1
            if slow_headers:
                drip, rest = head, body
            else:
                writer.write(head)
                drip, rest = body, b""
            for i in range(len(drip)):
                if time.monotonic() >= end:
                    return
                writer.write(drip[i:i + 1])
                await writer.drain()
                done, _ = await asyncio.wait({answer}, timeout=1.0)
                if done:
                    break
            else:
                writer.write(rest)
                await writer.drain()
            status, _ = await answer
            stats.status(status)
        except asyncio.IncompleteReadError:
            stats.event("closed without an answer")
        except Exception as e:
            stats.error(e)
        finally:
            answer.cancel()
            abort(writer)
        await asyncio.sleep(0.05)


async def tls_raw(addr, ctx, rcvbuf):
    """A TLS connection over memory BIOs on a socket with a small receive buffer: after the
    handshake nothing is read unless the caller reads. Returns (socket, SSLObject, outgoing)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await loop.sock_connect(sock, addr)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname=addr[0])
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                out = outgoing.read()
                if out:
                    await loop.sock_sendall(sock, out)
                data = await loop.sock_recv(sock, 65536)
                if not data:
                    raise ConnectionResetError("closed during the handshake")
                incoming.write(data)
        out = outgoing.read()
        if out:
            await loop.sock_sendall(sock, out)
        return sock, tls, outgoing
    except BaseException:
        sock.close()
        raise


async def pipeline_noread(addr, ctx, path, body, end, stats):
    """HTTP/1.1 requests pipelined back to back, eight per write, the socket never read."""
    loop = asyncio.get_running_loop()
    host, port = addr
    one = request(path, body, f"{host}:{port}") + body
    batch = one * 8
    while time.monotonic() < end:
        try:
            sock, tls, outgoing = await asyncio.wait_for(tls_raw(addr, ctx, 4096), 10)
        except Exception as e:
            stats.error(e, "connect: ")
            await asyncio.sleep(0.5)
            continue
        try:
            while time.monotonic() < end:
                tls.write(batch)
                await loop.sock_sendall(sock, outgoing.read())
                stats.sent += 8
        except (ConnectionError, OSError) as e:
            stats.error(e, "dropped: ")
        finally:
            sock.close()
        await asyncio.sleep(0.05)


async def h2_hostile(addr, ctx, path, body, byte_window, end, stats):
    """HTTP/2 with a zero initial stream window: 16 streams, each a review, answers never read
    (or read a byte per 100 ms with `byte_window`), a PING every 2 s."""
    host, port = addr
    while time.monotonic() < end:
        try:
            reader, writer = await connect(addr, ctx)
        except Exception as e:
            stats.error(e, "connect: ")
            await asyncio.sleep(0.5)
            continue
        try:
            alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
            if alpn != "h2":
                stats.event(f"ALPN {alpn} (not h2)")
                await asyncio.sleep(1)
                continue
            await h2_session(reader, writer, f"{host}:{port}", path, body, byte_window, end,
                             stats)
        except asyncio.IncompleteReadError:
            stats.event("closed by server")
        except Exception as e:
            stats.error(e)
        finally:
            abort(writer)
        await asyncio.sleep(0.05)


async def h2_session(reader, writer, authority, path, body, byte_window, end, stats):
    import h2.config
    import h2.connection
    import h2.errors
    import h2.events
    import h2.exceptions
    from h2.settings import SettingCodes, Settings

    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    # In the connection preface's SETTINGS: no stream may send us a byte until we say so.
    conn.local_settings = Settings(client=True, initial_values={
        SettingCodes.INITIAL_WINDOW_SIZE: 0,
        SettingCodes.ENABLE_PUSH: 0,
        SettingCodes.MAX_CONCURRENT_STREAMS: 100,
    })
    conn.initiate_connection()
    headers = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", authority.encode()),
               (b":path", path.encode()), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    streams = set()   # open streams (ours: sent or sending)
    pending = {}      # stream -> body bytes not yet sent (the server's window)

    def refill():
        while len(streams) < H2_STREAMS:
            sid = conn.get_next_available_stream_id()
            try:
                conn.send_headers(sid, headers)
            except h2.exceptions.TooManyStreamsError:
                return
            streams.add(sid)
            pending[sid] = body
            stats.sent += 1

    def flush():
        for sid in list(pending):
            data = pending.pop(sid)
            if sid not in streams:
                continue
            while data:
                n = min(len(data), conn.local_flow_control_window(sid),
                        conn.max_outbound_frame_size)
                if n <= 0:
                    break
                conn.send_data(sid, data[:n], end_stream=n == len(data))
                data = data[n:]
            if data:
                pending[sid] = data

    async def send():
        out = conn.data_to_send()
        if out:
            writer.write(out)
            await asyncio.wait_for(writer.drain(), 10)

    refill()
    flush()
    await send()
    now = time.monotonic()
    next_ping, next_tick = now + H2_PING_EVERY, now + H2_TICK
    # Bounded by `end` as well as cancelled: asyncio.wait_for (before Python 3.12) loses a
    # cancellation that comes as the read completes.
    while time.monotonic() < end:
        wait = max(0.0, min(next_ping, next_tick) - time.monotonic())
        try:
            data = await asyncio.wait_for(reader.read(65536), wait)
        except asyncio.TimeoutError:
            data = None
        if data == b"":
            stats.event("closed by server")
            return
        if data:
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                stats.event(f"h2 {type(e).__name__}")
                return
            for ev in events:
                if isinstance(ev, h2.events.ResponseReceived):
                    fields = dict(ev.headers)
                    status = int(fields[b":status"])
                    stats.status(status)
                    stats.answer(status, int(fields.get(b"content-length", 0)),
                                 b"retry-after" in fields)
                elif isinstance(ev, h2.events.StreamEnded):
                    streams.discard(ev.stream_id)
                    if pending.pop(ev.stream_id, None) is not None:
                        # Answered before its body was sent: the rest would be refused.
                        conn.reset_stream(ev.stream_id, h2.errors.ErrorCodes.CANCEL)
                    stats.event("h2 answer complete")
                elif isinstance(ev, h2.events.StreamReset):
                    streams.discard(ev.stream_id)
                    pending.pop(ev.stream_id, None)
                    code = getattr(ev.error_code, "name", ev.error_code)
                    stats.event(f"RST_STREAM {code}")
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    code = getattr(ev.error_code, "name", ev.error_code)
                    stats.event(f"GOAWAY {code}")
                    await send()
                    return
        now = time.monotonic()
        if now >= next_tick:
            next_tick = now + H2_TICK
            if byte_window:
                for sid in list(streams):
                    try:
                        conn.increment_flow_control_window(1, stream_id=sid)
                    except h2.exceptions.StreamClosedError:
                        streams.discard(sid)
                conn.increment_flow_control_window(1)
            refill()
        if now >= next_ping:
            next_ping = now + H2_PING_EVERY
            conn.ping(os.urandom(8))
        flush()
        await send()


# The ordinary client.

def ordinary_process(pipe, addr, ca, start_at, seconds):
    """Entry point of the ordinary client's own process: its results down `pipe`."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Ahead of the hostile client's process on a small machine (where it can), so that what is
    # measured is the server's delay, not this process waiting for a core.
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass
    pipe.send(asyncio.run(ordinary(addr, ca, start_at, seconds)))
    pipe.close()


async def ordinary(addr, ca, start_at, seconds):
    """A typical Site review every PERIOD on one keep-alive HTTP/1.1 connection, from `start_at`
    for `seconds`. Each request's outcome (status, or the error's name, or "timeout") and the
    time until it; the client's own largest scheduling lag."""
    host, port = addr
    ctx = tls_context(ca, "http/1.1")
    body = typical_body("ordinary")
    message = request("/validate-sites", body, f"{host}:{port}") + body
    conn = None
    results = []
    lag = 0.0

    async def once(fresh):
        nonlocal conn
        if conn is not None and (fresh or conn[0].at_eof()):
            abort(conn[1])
            conn = None
        if conn is None:
            conn = await asyncio.open_connection(host, port, ssl=ctx)
            fresh = True
        reader, writer = conn
        try:
            writer.write(message)
            await writer.drain()
            return await read_response(reader)
        except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as e:
            # A kept-alive connection the server closed before this request: sent again on a
            # new one, as Go's HTTP client does when nothing was read.
            if not fresh and not getattr(e, "partial", b""):
                return await once(True)
            raise

    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    end = start_at + seconds
    next_at = start_at
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if now < next_at:
            await asyncio.sleep(next_at - now)
        started = time.monotonic()
        lag = max(lag, started - next_at)
        try:
            status, close = await asyncio.wait_for(once(False), DEADLINE)
            outcome = status
            if close:
                abort(conn[1])
                conn = None
        except asyncio.TimeoutError:
            outcome = "timeout"
        except Exception as e:
            outcome = type(e).__name__
        results.append((outcome, time.monotonic() - started))
        if not isinstance(outcome, int) and conn is not None:
            abort(conn[1])
            conn = None
        next_at = max(next_at + PERIOD, time.monotonic())
    if conn is not None:
        abort(conn[1])
    return {"results": results, "lag": lag}


# The operator process: memory and CPU.

def memory(pid):
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def cpu_seconds(pid):
    """User and system CPU seconds of process `pid`, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sample(pid, peak):
    """The highest VmRSS sampled every 20 ms into peak[0], until cancelled."""
    while True:
        try:
            peak[0] = max(peak[0], memory(pid)[0])
        except OSError:
            return
        await asyncio.sleep(0.02)


def hostile_task(shape, args, addr, body, stats, end, tls_h1, tls_h2):
    if shape in ("h2-zero-window", "h2-byte-window"):
        return h2_hostile(addr, tls_h2, args.path, body,
                          shape == "h2-byte-window", end, stats)
    if shape == "h1-pipeline-noread":
        return pipeline_noread(addr, tls_h1, args.path, body, end, stats)
    if shape in ("slowloris", "slow-body"):
        return trickle(addr, tls_h1, args.path, body, shape == "slowloris", end, stats)
    # big-body, config-cpu, invalid-keys, zeros, alias-scalar
    return flooder(addr, tls_h1, args.path, body, args.mode, end, stats)


async def hostile_run(args, shape, connections, addr, pid, body, pipe, ordinary_end):
    """The hostile connections, from now until the ordinary client's results are in `pipe`.
    Returns (stats, sampled peak RSS, ordinary results, operator CPU seconds, window seconds,
    VmHWM)."""
    stats = Stats()
    peak = [0]
    started = time.monotonic()
    cpu0 = cpu_seconds(pid)
    # The flooders' own loops stop at this time; every hostile task is cancelled at the end.
    end = ordinary_end + DEADLINE
    tasks = [asyncio.create_task(sample(pid, peak))]
    tls_h1, tls_h2 = tls_context(args.ca, "http/1.1"), tls_context(args.ca, "h2")
    # Opened a few at a time: a thousand handshakes at once only measures the listen backlog.
    for i in range(connections):
        tasks.append(asyncio.create_task(hostile_task(shape, args, addr, body, stats, end, tls_h1, tls_h2)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    ordinary_result = None
    hard_end = ordinary_end + DEADLINE + 30
    while time.monotonic() < hard_end:
        if pipe.poll():
            try:
                ordinary_result = pipe.recv()
            except EOFError:  # the ordinary client died (interrupted): no results
                pass
            break
        await asyncio.sleep(0.05)
    finished = time.monotonic()
    try:
        cpu = cpu_seconds(pid) - cpu0
        hwm = memory(pid)[1]
    except OSError:
        cpu, hwm = float("nan"), 0
    # Cancelled until they are done (a cancellation can be lost, see h2_session); each loop
    # also ends by itself at `end`.
    left = set(tasks)
    while left:
        for t in left:
            t.cancel()
        _, left = await asyncio.wait(left, timeout=1)
    return stats, peak[0], ordinary_result, cpu, finished - started, hwm


def percentile(values, p):
    if not values:
        return float("nan")
    return values[max(0, math.ceil(p * len(values)) - 1)]


def run_once(args, shape, connections, operator, addr):
    """One run of `shape` with `connections` hostile connections against `operator`: its row."""
    if addr[0] != HOST:
        sys.exit(f"the webhook listens on {addr[0]}, not {HOST}: refusing to load it")
    body = body_of(shape, args.path, args.body_bytes)
    time.sleep(2)
    base = memory(operator.pid)[0]
    start_at = time.monotonic() + WARMUP
    mp = multiprocessing.get_context("fork")
    receive, send = mp.Pipe(duplex=False)
    client = mp.Process(target=ordinary_process, args=(send, addr, args.ca, start_at,
                                                       args.seconds), daemon=True)
    client.start()
    send.close()
    try:
        stats, sampled, ordinary_result, cpu, window, hwm = asyncio.run(hostile_run(
            args, shape, connections, addr, operator.pid, body, receive,
            start_at + args.seconds))
    finally:
        client.join(2)
        if client.is_alive():
            client.terminate()
            client.join(5)
    if client.exitcode == -signal.SIGINT:  # Ctrl-C reached the whole process group
        raise KeyboardInterrupt
    try:
        rss = memory(operator.pid)[0]
    except OSError:
        rss = 0
    results = ordinary_result["results"] if ordinary_result else []
    outcomes = {}
    for outcome, _ in results:
        outcomes[str(outcome)] = outcomes.get(str(outcome), 0) + 1
    latencies = sorted(t * 1000 for _, t in results)
    ok = outcomes.get("200", 0)
    alive = operator.poll() is None
    return {
        "shape": shape,
        "connections": connections,
        "path": "/validate-config" if shape == "config-cpu" else args.path,
        "mode": args.mode,
        "body_bytes": len(body),
        "config_entries": config_cpu_entries() if shape == "config-cpu" else None,
        "seconds": args.seconds,
        "ordinary_sent": len(results),
        "ordinary_ok_pct": round(100 * ok / len(results), 2) if results else 0.0,
        "p50_ms": round(percentile(latencies, 0.50), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2) if latencies else float("nan"),
        "ordinary_outcomes": dict(sorted(outcomes.items())),
        "ordinary_client_lag_ms": round(ordinary_result["lag"] * 1000, 1)
        if ordinary_result else None,
        "hostile_sent": stats.sent,
        "hostile_statuses": {str(k): v for k, v in sorted(stats.statuses.items())},
        "hostile_events": dict(sorted(stats.errors.items())),
        "hostile_largest_answer": {str(k): v for k, v in sorted(stats.largest.items())},
        "hostile_503_without_retry_after": stats.without_retry_after,
        "rss_before_mib": round(base / 1024, 1),
        "peak_rss_mib": round(hwm / 1024, 1),
        "sampled_peak_rss_mib": round(sampled / 1024, 1),
        "rss_after_mib": round(rss / 1024, 1),
        "operator_cpu_s": round(cpu, 2),
        "window_s": round(window, 1),
        "operator_alive": alive,
        "operator_exit": None if alive else operator.returncode,
        "checkout": args.tree,
    }


def result_line(r):
    return (f"RESULT {r['shape']} x{r['connections']}: ordinary {r['ordinary_sent']} sent, "
            f"{r['ordinary_ok_pct']:g}% 200, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
            f"max {r['max_ms']:.1f} ms, {r['ordinary_outcomes']} (client lag max "
            f"{r['ordinary_client_lag_ms']} ms); hostile {r['hostile_sent']} sent, answers "
            f"{r['hostile_statuses']}, events {r['hostile_events']}; peak RSS "
            f"{r['peak_rss_mib']:.0f} MiB, operator CPU {r['operator_cpu_s']:.2f} s in "
            f"{r['window_s']:g} s" + ("" if r["operator_alive"]
                                      else f"; OPERATOR EXITED {r['operator_exit']}"))


def report(r, tmp, log):
    extra = ""
    if r["shape"] == "config-cpu":
        extra = f", {r['config_entries']} empty applications"
    print(f"{r['shape']}: path {r['path']}, mode {r['mode']}, {r['connections']} connections, "
          f"body {r['body_bytes']} bytes{extra}, {r['seconds']:g} s")
    print(f"operator RSS: {r['rss_before_mib']:.0f} MiB before, peak {r['peak_rss_mib']:.0f} MiB"
          f" (VmHWM), sampled peak {r['sampled_peak_rss_mib']:.0f} MiB, "
          f"{r['rss_after_mib']:.0f} MiB after")
    print(f"largest answer by status: {r['hostile_largest_answer']} bytes; "
          f"503 without Retry-After: {r['hostile_503_without_retry_after']}")
    print(result_line(r), flush=True)
    if not r["operator_alive"]:
        print("operator log (tail):\n" + open(os.path.join(tmp, log)).read()[-2000:])


def table(rows):
    lines = ["| shape | hostile connections | ordinary 200 % | p50 ms | p99 ms | max ms "
             "| peak RSS MiB | operator CPU s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['connections']} | {r['ordinary_ok_pct']:g} | "
                     f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.0f} | "
                     f"{r['peak_rss_mib']:.0f} | {r['operator_cpu_s']:.1f} |")
    return "\n".join(lines)


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
    try:
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
    except BaseException:
        stop(emulator)
        raise
    return emulator, env


def start_operator(binary, tmp, env, log="operator.log"):
    """`binary run` against the emulator of `env`, its webhook on a free loopback port; the
    process and the webhook's (host, port). Its certificates (and ca.crt) are in tmp/certs."""
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
         "--webhook-addr", f"{HOST}:0", "--metrics-addr", f"{HOST}:0",
         "--metrics-insecure", "--health-addr", f"{HOST}:0", "--listen-report", report],
        env=env, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(tmp, log), "w"))
    deadline = time.monotonic() + 60
    while not os.path.exists(report):
        if operator.poll() is not None or time.monotonic() > deadline:
            stop(operator)
            sys.exit("the operator did not start: " +
                     open(os.path.join(tmp, log)).read()[-2000:])
        time.sleep(0.05)
    time.sleep(0.05)
    line = open(report).read()
    webhook = dict(p.split("=", 1) for p in line.split())["webhook"]
    host, port = webhook.rsplit(":", 1)
    return operator, (host, int(port))


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def terminate(signum, frame):
    raise KeyboardInterrupt


def tree_state():
    """The commit of ROOT and whether its work tree differs from it (recorded with each run;
    the binaries given may have been built from another state)."""
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return ""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--operator", required=True)
    p.add_argument("--emulator", required=True)
    p.add_argument("--connections", type=int, default=1000,
                   help="hostile connections (default 1000)")
    p.add_argument("--seconds", type=float, default=30,
                   help="how long the ordinary client runs (the hostile load 1 s more)")
    p.add_argument("--path", default=None,
                   choices=["/validate-config", "/validate-sites", "/mutate-sites"],
                   help="where the hostile requests go (default: /validate-sites for the Site "
                        "shapes, /validate-config for zeros and alias-scalar; config-cpu always "
                        "/validate-config)")
    p.add_argument("--mode", default="fast", choices=["fast", "slow"],
                   help="zeros, invalid-keys, alias-scalar: as fast as answered, or a byte "
                        "every 0.5 s")
    p.add_argument("--shape", default="zeros", choices=SHAPES + LEGACY_SHAPES,
                   help="zeros: one long array (what a generic decoder expands most); "
                        "invalid-keys: a Site whose every environment key is invalid; "
                        "alias-scalar: a configuration aliasing a 30 KB scalar 10,000 times; "
                        "the others: see the description above")
    p.add_argument("--body-bytes", type=int, default=None,
                   help="body size of zeros, big-body, invalid-keys (default: the limit the "
                        "server documents, 4.5 MiB)")
    p.add_argument("--matrix", action="store_true",
                   help="every shape of the hostile-load bench at each --matrix-connections")
    p.add_argument("--matrix-connections", default=",".join(map(str, MATRIX_CONNECTIONS)),
                   help="comma-separated hostile connection counts of --matrix")
    p.add_argument("--matrix-shapes", default=",".join(SHAPES),
                   help="comma-separated shapes of --matrix")
    p.add_argument("--json", default=None, help="append one JSON line per run to this file")
    args = p.parse_args()
    if args.body_bytes is None:
        args.body_bytes = DEFAULT_BODY_BYTES
    if args.matrix:
        runs = [(s, int(n)) for s in args.matrix_shapes.split(",")
                for n in args.matrix_connections.split(",")]
        for s, _ in runs:
            if s not in SHAPES + LEGACY_SHAPES:
                p.error(f"unknown shape {s}")
    else:
        runs = [(args.shape, args.connections)]
    if any(s.startswith("h2-") for s, _ in runs):
        try:
            import h2  # noqa: F401
        except ImportError:
            sys.exit("the h2 shapes need the `h2` package: `make bench-hostile` installs it into "
                     ".tools/venv; run this script with .tools/venv/bin/python")
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    signal.signal(signal.SIGTERM, terminate)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 65536)), hard))
    args.tree = tree_state()
    explicit_path = args.path
    rows = []
    emulator = operator = None
    with tempfile.TemporaryDirectory() as tmp:
        args.ca = os.path.join(tmp, "certs", "ca.crt")
        try:
            emulator, env = start_emulator(args.emulator, tmp)
            for shape, connections in runs:
                if shape == "config-cpu":
                    args.path = "/validate-config"
                elif explicit_path is not None:
                    args.path = explicit_path
                elif shape in ("zeros", "alias-scalar"):
                    args.path = "/validate-config"
                else:
                    args.path = "/validate-sites"
                log = f"operator-{shape}-{connections}.log"
                operator, addr = start_operator(args.operator, tmp, env, log)
                try:
                    r = run_once(args, shape, connections, operator, addr)
                finally:
                    stop(operator)
                report(r, tmp, log)
                rows.append(r)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
            if args.matrix:
                print(f"\nthis checkout: {args.tree} (the binaries' may differ); "
                      f"{args.seconds:g} s per run\n")
                print(table(rows))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        finally:
            stop(operator)
            stop(emulator)


if __name__ == "__main__":
    main()
