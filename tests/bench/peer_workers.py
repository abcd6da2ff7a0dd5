"""Peer workers: the same workloads against Redis Streams (redis-py) and Mosquitto (paho).

They run in their own processes like the Spool workers, with the same bodies
(:func:`tests.bench.bodies.body_pool`, same seed). The client libraries are imported inside
the functions so a missing one is reported by the scenario as missing, not as a crash of
the whole suite.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from tests.bench.bodies import body_pool
from tests.bench.processes import Gate


def _resp_xadd(key: bytes, body: bytes) -> bytes:
    """``XADD key * d body`` in RESP (the bytes redis-py's packer would produce)."""
    return b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nd\r\n$%d\r\n%s\r\n" % (
        len(key),
        key,
        len(body),
        body,
    )


def redis_xadd(
    gate: Gate,
    *,
    port: int,
    key: str,
    count: int,
    body_bytes: int,
    seed: int,
    pipeline: int,
    window: int,
    delete_after: bool,
) -> dict[str, Any]:
    """``XADD key * d <body>`` ``count`` times through a redis-py connection.

    Commands are pre-encoded (as the Spool publisher pre-encodes its frames) and sent
    ``pipeline`` per write, with at most ``window`` replies outstanding, as the Spool
    publisher keeps ``window`` messages unacked. A reply comes after Redis appended the
    entry to its AOF (and, with ``appendfsync always``, fsynced it): the analogue of a
    persisted ack. Replies are read with redis-py's parser (hiredis when installed).
    """
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    r.delete(key)
    bkey = key.encode()
    commands = [_resp_xadd(bkey, b) for b in body_pool(body_bytes, seed)]
    n = len(commands)
    conn: Any = r.connection_pool.get_connection()
    gate.open()
    start = time.monotonic_ns()
    sent = 0
    replied = 0
    while sent < count:
        batch = min(pipeline, count - sent)
        while sent + batch - replied > window:
            _redis_reply(conn)
            replied += 1
        conn.send_packed_command(
            [b"".join(commands[(sent + j) % n] for j in range(batch))], check_health=False
        )
        sent += batch
    while replied < count:
        _redis_reply(conn)
        replied += 1
    end = time.monotonic_ns()
    r.connection_pool.release(conn)
    length = int(r.xlen(key))
    if length != count:
        raise RuntimeError(f"stream {key} holds {length} entries, expected {count}")
    if delete_after:
        r.delete(key)
    r.close()
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": count * body_bytes}


def _redis_reply(conn: Any) -> Any:
    reply = conn.read_response()
    if isinstance(reply, Exception):
        raise reply
    return reply


def redis_xrange(gate: Gate, *, port: int, key: str, expected: int, batch: int) -> dict[str, Any]:
    """Read a whole stream from the start with ``XRANGE key (last + COUNT batch`` pages
    through a redis-py connection (raw replies, no per-entry dict conversion: as lean as
    the Spool subscriber that only counts)."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    conn: Any = r.connection_pool.get_connection()
    gate.open()
    start = time.monotonic_ns()
    count = 0
    size = 0
    lower = b"-"
    while True:
        conn.send_command("XRANGE", key, lower, "+", "COUNT", batch, check_health=False)
        page = _redis_reply(conn)
        if not page:
            break
        for entry in page:
            size += len(entry[1][1])
        count += len(page)
        lower = b"(" + page[-1][0]
    end = time.monotonic_ns()
    r.connection_pool.release(conn)
    r.close()
    if count != expected:
        raise RuntimeError(f"XRANGE returned {count} entries, expected {expected}")
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": size}


#: messages handed to paho without their PUBACK (below its 65,535 message ids).
_PAHO_QUEUE = 10_000


def mqtt_publish_paho(
    gate: Gate,
    *,
    port: int,
    topic: str,
    count: int,
    body_bytes: int,
    seed: int,
    inflight: int,
    timeout: float,
) -> dict[str, Any]:
    """QoS 1 publishes through paho-mqtt with ``inflight`` unacknowledged at most; the run
    ends when every PUBACK arrived.

    paho queues what exceeds ``inflight`` itself, but its 16-bit message ids refuse a queue
    that wraps them, so at most :data:`_PAHO_QUEUE` messages are handed to it unacked.
    """
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    bodies = body_pool(body_bytes, seed)
    n = len(bodies)
    acked = 0
    done = threading.Event()
    connected = threading.Event()
    progress = threading.Condition()

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        connected.set()

    def on_publish(client: Any, userdata: Any, mid: Any, reason: Any, props: Any) -> None:
        nonlocal acked
        with progress:
            acked += 1
            progress.notify()
            if acked >= count:
                done.set()

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=f"bench-{time.time_ns()}",
        protocol=mqtt.MQTTv311,
    )
    client.on_connect = on_connect
    client.on_publish = on_publish
    client.max_inflight_messages_set(inflight)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        if not connected.wait(timeout):
            raise TimeoutError("no CONNACK from mosquitto")
        gate.open()
        start = time.monotonic_ns()
        for i in range(count):
            if i - acked >= _PAHO_QUEUE:

                def room(limit: int = i - _PAHO_QUEUE) -> bool:
                    return acked > limit

                with progress:
                    if not progress.wait_for(room, timeout):
                        raise TimeoutError(f"no PUBACK progress within {timeout}s")
            info = client.publish(topic, bodies[i % n], qos=1)
            if info.rc != mqtt.MQTT_ERR_SUCCESS:
                raise RuntimeError(f"paho publish failed with rc {info.rc}")
        if not done.wait(timeout):
            raise TimeoutError(f"only {acked} of {count} PUBACKs within {timeout}s")
        end = time.monotonic_ns()
    finally:
        client.disconnect()
        client.loop_stop()
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": count * body_bytes}


def _mqtt_remaining_length(n: int) -> bytes:
    """MQTT 3.1.1 variable-length integer (section 2.2.3)."""
    out = bytearray()
    while True:
        digit, n = n % 128, n // 128
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_connect_packet(client_id: str, keepalive: int = 60) -> bytes:
    """CONNECT, protocol level 4 (3.1.1), clean session, no credentials."""
    cid = client_id.encode()
    body = (
        b"\x00\x04MQTT\x04\x02" + keepalive.to_bytes(2, "big") + len(cid).to_bytes(2, "big") + cid
    )
    return b"\x10" + _mqtt_remaining_length(len(body)) + body


def mqtt_publish_packet(topic: bytes, packet_id: int, payload: bytes) -> bytes:
    """PUBLISH with QoS 1 (fixed header 0x32) and a packet identifier."""
    rest = len(topic).to_bytes(2, "big") + topic + packet_id.to_bytes(2, "big")
    return b"\x32" + _mqtt_remaining_length(len(rest) + len(payload)) + rest + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("mosquitto closed the connection")
        data += chunk
    return data


def mqtt_publish(
    gate: Gate,
    *,
    port: int,
    topic: str,
    count: int,
    body_bytes: int,
    seed: int,
    inflight: int,
    pipeline: int,
    timeout: float,
) -> dict[str, Any]:
    """QoS 1 publishes over a plain socket with pre-encoded MQTT 3.1.1 packets, as the
    Spool publisher pre-encodes its frames: ``pipeline`` packets per write, at most
    ``inflight`` without their PUBACK (4 bytes each: 0x40 0x02 id). Ends at the last
    PUBACK."""
    bodies = body_pool(body_bytes, seed)
    n = len(bodies)
    btopic = topic.encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.sendall(mqtt_connect_packet(f"bench-{time.time_ns()}"))
        connack = _recv_exact(sock, 4)
        if connack[0] != 0x20 or connack[3] != 0:
            raise ConnectionError(f"mosquitto refused the connection: {connack!r}")
        gate.open()
        start = time.monotonic_ns()
        sent = 0
        acked = 0
        pending = b""

        def read_acks() -> int:
            nonlocal pending
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("mosquitto closed the connection")
            data = pending + chunk
            whole = len(data) // 4 * 4
            for i in range(0, whole, 4):
                if data[i] != 0x40:
                    raise ConnectionError(f"unexpected MQTT packet type {data[i]:#x}")
            pending = data[whole:]
            return whole // 4

        while sent < count:
            batch = min(pipeline, count - sent)
            while sent + batch - acked > inflight:
                acked += read_acks()
            sock.sendall(
                b"".join(
                    mqtt_publish_packet(btopic, (sent + j) % 65535 + 1, bodies[(sent + j) % n])
                    for j in range(batch)
                )
            )
            sent += batch
        while acked < count:
            acked += read_acks()
        end = time.monotonic_ns()
        sock.sendall(b"\xe0\x00")  # DISCONNECT
    finally:
        sock.close()
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": count * body_bytes}


def redis_xadd_api(
    gate: Gate,
    *,
    port: int,
    key: str,
    count: int,
    body_bytes: int,
    seed: int,
    pipeline: int,
    delete_after: bool,
) -> dict[str, Any]:
    """The everyday redis-py idiom: ``pipeline.xadd()`` ``pipeline`` times, ``execute()``,
    one round trip per pipeline (client-side command packing included)."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    bodies = body_pool(body_bytes, seed)
    n = len(bodies)
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    gate.open()
    start = time.monotonic_ns()
    sent = 0
    while sent < count:
        batch = min(pipeline, count - sent)
        for j in range(batch):
            pipe.xadd(key, {"d": bodies[(sent + j) % n]})
        pipe.execute()
        sent += batch
    end = time.monotonic_ns()
    length = int(r.xlen(key))
    if length != count:
        raise RuntimeError(f"stream {key} holds {length} entries, expected {count}")
    if delete_after:
        r.delete(key)
    r.close()
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": count * body_bytes}


def redis_xrange_api(
    gate: Gate, *, port: int, key: str, expected: int, batch: int
) -> dict[str, Any]:
    """The everyday redis-py idiom: ``r.xrange(key, min, "+", count)`` pages, entries
    converted to (id, dict) by redis-py's response callback."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    gate.open()
    start = time.monotonic_ns()
    count = 0
    size = 0
    lower = "-"
    while True:
        page = r.xrange(key, min=lower, max="+", count=batch)
        if not page:
            break
        for _, fields in page:
            if fields is not None:
                size += len(fields[b"d"])
        count += len(page)
        last_id = page[-1][0]
        lower = "(" + (last_id.decode() if isinstance(last_id, bytes) else str(last_id))
    end = time.monotonic_ns()
    r.close()
    if count != expected:
        raise RuntimeError(f"XRANGE returned {count} entries, expected {expected}")
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": size}
