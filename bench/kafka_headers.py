"""CPU of producing a Kafka message, by the headers it carries.

One idempotent ``acks=all`` producer with the sink's settings (``KafkaSettings.
producer_config``: lz4, linger 20 ms, failed deliveries reported only) sends ``--messages``
messages of 600-byte values to a topic of its own, with no headers, one, two, the sink's
five position headers (``position_headers: true``) or those five packed into one. Every
variant runs in a process of its own, ``--rounds`` times in rotation; the header lists
are made before the clock starts, so only ``produce()`` and librdkafka are timed. CPU
seconds: the producing thread (``produce()`` calls) and the rest of the process
(librdkafka's threads, the final flush). A private test broker is started unless
``--bootstrap`` names one.

    .venv/bin/python bench/kafka_headers.py --messages 1000000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("none", "one", "two", "five", "five-in-one")
_POSITION = [("seq", b"3000000001234000000000000"), ("file", b"mariadb-bin.000003"),
             ("pos", b"1234567"), ("row", b"3"), ("gtid", b"0-1-12345")]


def _headers(variant: str):
    if variant == "none":
        return None
    if variant == "five-in-one":
        return [("position", b" ".join(v for _, v in _POSITION))]
    return list(_POSITION[:{"one": 1, "two": 2, "five": 5}[variant]])


def produce(bootstrap: str, variant: str, n: int) -> dict:
    """One variant in this process: CPU seconds of the producing thread and the rest."""
    sys.path.insert(0, str(ROOT / "src"))
    from confluent_kafka import Producer

    from mysqlcdc.sinks.kafka.settings import KafkaSettings

    config = KafkaSettings(producer={"bootstrap.servers": bootstrap}).producer_config()
    producer = Producer({**config, "delivery.report.only.error": True})
    values = [os.urandom(300).hex().encode() for _ in range(1000)]
    keys = [b'{"id":%d}' % i for i in range(n)]
    headers = [_headers(variant) for _ in range(n)]
    topic = f"headers-{variant}-{uuid.uuid4().hex[:8]}"

    def report(err, _msg):
        if err is not None:
            raise SystemExit(f"delivery failed: {err}")

    send = producer.produce
    cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    for i in range(n):
        while True:
            try:
                send(topic, values[i % 1000], keys[i], headers=headers[i], on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    thread1 = time.thread_time()
    left = producer.flush(60)
    cpu = time.process_time() - cpu0
    if left:
        raise SystemExit(f"{left} messages not delivered")
    return {"variant": variant, "messages": n,
            "producing_thread_cpu_s": round(thread1 - thread0, 2),
            "other_cpu_s": round(cpu - (time.thread_time() - thread0), 2),
            "process_cpu_s": round(cpu, 2), "wall_s": round(time.perf_counter() - wall0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bootstrap", help="an existing broker (default: a private test broker)")
    ap.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(produce(args.bootstrap, args.variant, args.messages)), flush=True)
        return
    sys.path.insert(0, str(ROOT))
    from tests.support.kafka import Broker

    broker = Broker(args.bootstrap).start()     # a private broker unless one is named
    bootstrap = broker.bootstrap
    try:
        print("| round | headers | producing thread CPU s | other CPU s | process CPU s |")
        print("|---:|---|---:|---:|---:|")
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for variant in order:
                out = subprocess.run([sys.executable, __file__, "--variant", variant,
                                      "--messages", str(args.messages),
                                      "--bootstrap", bootstrap],
                                     check=True, capture_output=True, text=True).stdout
                got = json.loads(out.strip().splitlines()[-1])
                print(f"| {r + 1} | {variant} | {got['producing_thread_cpu_s']:.2f} | "
                      f"{got['other_cpu_s']:.2f} | {got['process_cpu_s']:.2f} |", flush=True)
    finally:
        broker.kill()                           # nothing to stop for a named broker


if __name__ == "__main__":
    main()
