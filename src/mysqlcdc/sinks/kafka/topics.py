"""Which topic a change goes to, and creating topics before the first write to them.

Topics are created explicitly (partitions, replication factor, configs from the
settings) before anything is produced to them, since a broker with topic
auto-creation would otherwise create them on the first metadata request with its
own defaults. Known topics are remembered per Python worker and forgotten after a
failed batch (a broker that lost its data has lost the topics too).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from mysqlcdc.sinks.kafka.producer import KafkaDeliveryError
from mysqlcdc.sinks.kafka.settings import KafkaSettings

__all__ = ["TopicRouter", "ensure_topics", "forget_topics"]

_KNOWN: set[tuple[str, str]] = set()


class TopicRouter:
    """``topic(row)``: the topic of a change, by template, fixed name or column."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._by_table: dict[tuple[str, str], str] = {}

    def topic(self, row: Mapping[str, Any]) -> str:
        column = self.settings.topic_column
        if column:
            value = row.get(column)
            if not value:
                raise KafkaDeliveryError(f"column {column!r} holds no topic for a change "
                                         f"of {row['db']}.{row['table']} (seq {row['seq']})")
            return str(value)
        key = (row["db"], row["table"])
        name = self._by_table.get(key)
        if name is None:
            name = self._by_table[key] = self.settings.resolve(self.settings.topic, *key)
        return name


def ensure_topics(settings: KafkaSettings, names: Iterable[str],
                  partitions: int | None = None) -> None:
    """Create the topics among ``names`` not yet known to exist."""
    timeout_s = settings.delivery_timeout_s
    missing = sorted({n for n in names if (settings.bootstrap, n) not in _KNOWN})
    if not missing:
        return
    admin = AdminClient(settings.admin_config())
    new = [NewTopic(n, num_partitions=partitions or settings.partitions,
                    replication_factor=settings.replication_factor,
                    config=dict(settings.topic_config)) for n in missing]
    for name, future in admin.create_topics(new, operation_timeout=timeout_s,
                                            request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaDeliveryError(f"cannot create topic {name}: {err.args[0].str()}") from None
        except TimeoutError:
            raise KafkaDeliveryError(f"creating topic {name} timed out after {timeout_s:.0f} s") from None
        _KNOWN.add((settings.bootstrap, name))


def forget_topics(settings: KafkaSettings) -> None:
    for item in [k for k in _KNOWN if k[0] == settings.bootstrap]:
        _KNOWN.discard(item)
