"""Bytes the Kafka sink sends per message, by compression codec.

Messages are the sink's own (``mysqlcdc`` format: key, envelope value, the five headers)
for the ``wide`` and ``narrow`` rows of ``kafka_format_micro.py``. For each table and
codec a fresh producer with the sink's settings (``KafkaSettings.producer_config``: lz4
unless ``compression.type`` is set) sends ``--rows`` messages to a topic of its own; the
bytes are librdkafka's own count of what went to the broker (``txbytes`` of its
statistics, request framing included), so they are what the network and the broker see.
A private test broker is started unless ``--bootstrap`` names one.

    .venv/bin/python bench/kafka_bytes.py --rows 200000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402

from kafka_format_micro import NARROW, WIDE, rows  # noqa: E402
from mysqlcdc.sinks.kafka.formats import encode_key, headers, mysqlcdc_value  # noqa: E402
from mysqlcdc.sinks.kafka.settings import KafkaSettings  # noqa: E402

CODECS = ("none", "lz4", "zstd")


def sent_bytes(bootstrap: str, codec: str | None, messages: list) -> int:
    """Bytes librdkafka sent to the brokers for ``messages`` (its statistics)."""
    last: dict = {}
    own = {"bootstrap.servers": bootstrap}
    if codec is not None:
        own["compression.type"] = codec
    config = {**KafkaSettings(producer=own).producer_config(),
              "statistics.interval.ms": "100",
              "stats_cb": lambda text: last.update(stats=json.loads(text))}
    producer = Producer(config)
    topic = f"bytes-{uuid.uuid4().hex[:8]}"
    for key, value, hdrs in messages:
        while True:
            try:
                producer.produce(topic, value, key, headers=hdrs)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit("messages left undelivered")
    time.sleep(0.3)                     # one more statistics report after the last send
    producer.poll(0)
    return sum(b["txbytes"] for b in last["stats"]["brokers"].values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--bootstrap", help="an existing broker (default: a private test broker)")
    args = ap.parse_args()
    from tests.support.kafka import Broker

    broker = Broker(args.bootstrap).start()     # a private broker unless one is named
    bootstrap = broker.bootstrap
    try:
        print("| table | codec | value bytes / message | sent bytes / message | × none |")
        print("|---|---|---:|---:|---:|")
        for table in (NARROW, WIDE):
            data = rows(table, args.rows, args.seed)
            messages = [(encode_key(r), mysqlcdc_value(r), headers(r)) for r in data]
            value = sum(len(v) for _, v, _ in messages) / len(messages)
            plain = None
            for codec in CODECS:
                sent = sent_bytes(bootstrap, codec, messages) / len(messages)
                plain = plain or sent
                print(f"| {table.name} | {codec} | {value:.0f} | {sent:.0f} | "
                      f"{sent / plain:.2f} |", flush=True)
    finally:
        broker.kill()                           # nothing to stop for a named broker


if __name__ == "__main__":
    main()
