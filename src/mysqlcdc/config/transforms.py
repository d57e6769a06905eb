"""Config models of transforms (``transforms:`` at the top level and in each sink), of the
dead-letter sink, and of the ``plugins`` sink's entries.

A transform is written as a one-key mapping like a sink: ``- mask: {columns: [...]}``;
the key picks the model from :data:`TRANSFORM_TYPES`. What each one does is in
``mysqlcdc.transforms`` (built-ins, python, outbox, flatten) and README "Your own logic".
"""

from __future__ import annotations

from typing import Annotated, Literal, Union, get_args

from pydantic import (BeforeValidator, ConfigDict, Discriminator, Field, PrivateAttr,
                      ValidationInfo, field_validator, model_validator)
from pydantic_core import PydanticCustomError
from typing_extensions import Self

from mysqlcdc.config.fields import (EnvVarName, SparkConfValue, StoragePath, TablePattern,
                                    StrictModel, TypeName, check_env_names, context_env,
                                    one_key_unwrapper, secrets_from_env)
from mysqlcdc.config.secret import Secret

__all__ = ["AnyTransformConfig", "TRANSFORM_TYPES", "DeadLetterConfig", "DottedPath",
           "ColumnPatternStr", "ExpressionStr", "TableName", "ModuleName"]


_Model = StrictModel


# --- field types -------------------------------------------------------------


def _dotted(value: str) -> str:
    from mysqlcdc.transforms.loader import DOTTED

    if not isinstance(value, str) or not DOTTED.match(value):
        raise PydanticCustomError("dotted_path", "expected module:attribute such as "
                                  "mypkg.cdc:transform")
    return value


def _module(value: str) -> str:
    import re

    if not isinstance(value, str) or not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", value):
        raise PydanticCustomError("module_name", "expected a module name such as mypkg.helpers")
    return value


def _column_pattern(value: str) -> str:
    parts = value.split(".") if isinstance(value, str) else []
    if len(parts) != 3 or not all(parts):
        raise PydanticCustomError("column_pattern", "expected db.table.column (globs allowed), "
                                  "such as shop.user.email or *.*.phone")
    return value


def _expression(value: str) -> str:
    from mysqlcdc.transforms.expressions import ExpressionError, parse

    try:
        parse(value)
    except ExpressionError as err:
        raise PydanticCustomError("expression", "{reason}", {"reason": str(err)}) from None
    return value


def _table_name(value: str) -> str:
    db, sep, table = value.partition(".") if isinstance(value, str) else ("", "", "")
    if not sep or not db or not table or any(c in value for c in "*?["):
        raise PydanticCustomError("table_name", "expected one table as db.table, such as "
                                  "shop.reservation")
    return value


DottedPath = Annotated[str, BeforeValidator(_dotted), TypeName("module:attribute")]
ModuleName = Annotated[str, BeforeValidator(_module), TypeName("module name")]
ColumnPatternStr = Annotated[str, BeforeValidator(_column_pattern),
                             TypeName("db.table.column glob")]
ExpressionStr = Annotated[str, BeforeValidator(_expression), TypeName("expression")]
TableName = Annotated[str, BeforeValidator(_table_name), TypeName("db.table")]
OnError = Literal["fail", "dead_letter"]
ColumnType = Literal["string", "long", "double", "boolean"]
_ON_ERROR = ("What an exception in user code (or a result that is not an event) does: `fail` "
             "stops the pipeline with TRANSFORM_FAILED (the event's position, table, key and "
             "the traceback); `dead_letter` sends the event and the error to the `dead_letter` "
             "sink and goes on.")


class _TransformModel(_Model):
    type: str = Field("", exclude=True, repr=False, description="Set from the mapping key.")


# --- built-ins -----------------------------------------------------------------


class MaskConfig(_TransformModel):
    """``mask``: hide values. Each value of the named columns becomes `stars` asterisks, or
    keeps its last `keep_last` characters (length kept). Applies to before, after and key."""

    type: Literal["mask"] = Field("mask", exclude=True, repr=False, description="Set from the key.")
    columns: list[ColumnPatternStr] = Field(min_length=1, description="Columns as "
                                            "`db.table.column` globs, such as `shop.user.email`.")
    stars: int | None = Field(None, ge=1, le=1000, description="Every value becomes this many "
                              "asterisks (default 8 unless `keep_last` is set).")
    keep_last: int | None = Field(None, ge=0, le=1000, description="Keep the last N characters, "
                                  "asterisks for the rest (`4` shows `************1111`).")
    char: str = Field("*", min_length=1, max_length=1, description="The masking character.")

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        if self.stars is not None and self.keep_last is not None:
            raise PydanticCustomError("mask_mode", "give stars or keep_last, not both")
        return self


class HashConfig(_TransformModel):
    """``hash``: replace values by the hex SHA-256 of a secret salt followed by the value's
    text (equal values stay equal, so joins keep working). Applies to before, after and key."""

    type: Literal["hash"] = Field("hash", exclude=True, repr=False, description="Set from the key.")
    columns: list[ColumnPatternStr] = Field(min_length=1, description="Columns as "
                                            "`db.table.column` globs.")
    salt_env: EnvVarName | None = Field(None, description="Environment variable holding the "
                                        "salt (read at load, never logged). Null: no salt "
                                        "(values can then be guessed by hashing candidates).")

    _salt: Secret = PrivateAttr(default_factory=lambda: Secret(""))

    @field_validator("salt_env")
    @classmethod
    def _env_set(cls, name: str | None, info: ValidationInfo) -> str | None:
        if name is not None and name not in context_env(info):
            raise PydanticCustomError("env_var_missing", "environment variable {name} is not "
                                      "set; it must hold the hash salt", {"name": name})
        return name

    @model_validator(mode="after")
    def _read_salt(self, info: ValidationInfo) -> Self:
        if self.salt_env is not None:
            self._salt = Secret(context_env(info)[self.salt_env])
        return self

    def salt(self) -> str:
        return self._salt.reveal()


class TruncateConfig(_TransformModel):
    """``truncate``: cut text values to `length` characters."""

    type: Literal["truncate"] = Field("truncate", exclude=True, repr=False,
                                      description="Set from the key.")
    columns: list[ColumnPatternStr] = Field(min_length=1, description="Columns as "
                                            "`db.table.column` globs.")
    length: int = Field(ge=0, description="Characters kept.")


class DropColumnsConfig(_TransformModel):
    """``drop_columns``: remove columns from the before and after images (not from the key)."""

    type: Literal["drop_columns"] = Field("drop_columns", exclude=True, repr=False,
                                          description="Set from the key.")
    columns: list[ColumnPatternStr] = Field(min_length=1, description="Columns as "
                                            "`db.table.column` globs.")


class RenameConfig(_TransformModel):
    """``rename``: give columns new names in every image, the key included."""

    type: Literal["rename"] = Field("rename", exclude=True, repr=False,
                                    description="Set from the key.")
    columns: dict[ColumnPatternStr, str] = Field(min_length=1, description="`db.table.column` "
                                                 "glob to the new name.")


class FilterConfig(_TransformModel):
    """``filter``: keep or drop events. `tables` and `ops` choose the events it looks at
    (default: all; others pass). Of those, `keep` keeps the ones its expression holds for,
    `drop` drops them; with neither, only the events looked at are kept."""

    type: Literal["filter"] = Field("filter", exclude=True, repr=False,
                                    description="Set from the key.")
    tables: list[TablePattern] = Field(default_factory=list, description="db.table globs; "
                                       "empty: every table.")
    ops: list[Literal["c", "u", "d", "r", "t", "s"]] = Field(
        default_factory=list, description="Envelope ops; empty: every op.")
    keep: ExpressionStr | None = Field(None, description="Keep events where this holds, such "
                                       "as `after.status != 'deleted'`.")
    drop: ExpressionStr | None = Field(None, description="Drop events where this holds.")

    @model_validator(mode="after")
    def _one_rule(self) -> Self:
        if self.keep is not None and self.drop is not None:
            raise PydanticCustomError("filter_rule", "give keep or drop, not both")
        if self.keep is None and self.drop is None and not self.tables and not self.ops:
            raise PydanticCustomError("filter_rule", "give tables, ops, keep or drop")
        return self


class RouteConfig(_TransformModel):
    """``route``: set each event's topic (or any target column) from a template such as
    `cdc.{db}.{table}` / `orders.{after.region}`, or from one field. The Kafka sink reads
    it with `topic_column: topic`."""

    type: Literal["route"] = Field("route", exclude=True, repr=False,
                                   description="Set from the key.")
    template: str | None = Field(None, min_length=1, description="Template over envelope "
                                 "fields and image fields in braces.")
    field: ExpressionStr | None = Field(None, description="One field, such as `after.tenant`.")
    column: str = Field("topic", min_length=1, description="The column it sets.")
    tables: list[TablePattern] = Field(default_factory=list, description="Only events of these "
                                       "tables; empty: all.")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.template is None) == (self.field is None):
            raise PydanticCustomError("route_source", "give template or field, exactly one")
        if self.template is not None:
            from mysqlcdc.transforms.builtins import _template_parts

            try:
                _template_parts(self.template)
            except (ValueError, Exception) as err:   # noqa: BLE001 - any parse failure
                raise PydanticCustomError("template", "template {t!r}: {reason}",
                                          {"t": self.template, "reason": str(err)}) from None
        return self


class AddFieldConfig(_TransformModel):
    """``add_field``: add a field with a constant `value` or an `expression`'s value to the
    after image (`target: after`), to before and after (`both`) or as a column (`column`)."""

    type: Literal["add_field"] = Field("add_field", exclude=True, repr=False,
                                       description="Set from the key.")
    name: str = Field(min_length=1, description="Name of the new field.")
    value: str | int | float | bool | None = Field(None, description="A constant value.")
    expression: ExpressionStr | None = Field(None, description="Or an expression such as "
                                             "`after.price * after.qty`.")
    target: Literal["after", "both", "column"] = Field("after", description="Where it goes.")
    column_type: ColumnType = Field("string", description="Type of the column for "
                                    "`target: column`.")
    tables: list[TablePattern] = Field(default_factory=list, description="Only events of these "
                                       "tables; empty: all.")

    @model_validator(mode="after")
    def _value_or_expression(self) -> Self:
        if self.value is not None and self.expression is not None:
            raise PydanticCustomError("add_field", "give value or expression, not both")
        return self


class PythonConfig(_TransformModel):
    """``python``: your function, per event (`function`: `transform(event[, helpers]) -> dict |
    list[dict] | None`) or per batch (`batch_function`: `transform_batch(RecordBatch[,
    helpers]) -> RecordBatch`). Modules come from PYTHONPATH or `transforms_path`."""

    type: Literal["python"] = Field("python", exclude=True, repr=False,
                                    description="Set from the key.")
    function: DottedPath | None = Field(None, description="Per-event function, such as "
                                        "`mypkg.cdc:transform`.")
    batch_function: DottedPath | None = Field(None, description="Per-batch function, such as "
                                              "`mypkg.cdc:transform_batch`.")
    on_error: OnError = Field("fail", description=_ON_ERROR)
    columns: dict[str, ColumnType] = Field(default_factory=dict, description="New columns "
                                           "the function sets, name to type.")
    typed_values: bool = Field(True, description="Give images typed values (Decimal, date, "
                               "bytes ...) from the schema history; false: the JSON values.")
    ops: list[Literal["c", "u", "d", "r", "t", "s"]] = Field(
        default_factory=lambda: ["c", "u", "d", "r"], min_length=1,
        description="The ops the function sees (row changes by default); other events "
        "pass by untouched, in order. Batch functions see every event.")

    @model_validator(mode="after")
    def _one_function(self) -> Self:
        if (self.function is None) == (self.batch_function is None):
            raise PydanticCustomError("python_function", "give function or batch_function, "
                                      "exactly one")
        return self


class OutboxConfig(_TransformModel):
    """``outbox``: the transactional outbox router. Only inserts into the outbox `table`
    come out (every other event is dropped; the outbox's deletes and updates too): each
    becomes one event keyed by the aggregate id, with the payload as `after` and as the
    message value, the topic from `topic`, and the event id and type as message headers."""

    type: Literal["outbox"] = Field("outbox", exclude=True, repr=False,
                                    description="Set from the key.")
    table: TableName = Field(description="The outbox table, such as `shop.cdc_outbox`.")
    id: str = Field("id", min_length=1, description="Column of the event id.")
    aggregate_type: str = Field("aggregatetype", min_length=1, description="Column of the "
                                "aggregate type (routes the topic).")
    aggregate_id: str = Field("aggregateid", min_length=1, description="Column of the "
                              "aggregate id (the message key).")
    event_type: str = Field("type", min_length=1, description="Column of the event type.")
    payload: str = Field("payload", min_length=1, description="Column of the payload (JSON, "
                         "or text holding JSON).")
    topic: str = Field("outbox.event.{aggregate_type}", min_length=1, description="Topic "
                       "template over `{aggregate_type}`, `{db}` and `{table}`.")
    include_snapshot: bool = Field(False, description="Also route the outbox rows a snapshot "
                                   "reads (`op = r`); by default only new inserts.")
    on_error: OnError = Field("fail", description="What a payload that is not JSON does: "
                              "`fail` or `dead_letter`.")

    @field_validator("topic")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            value.format(aggregate_type="a", db="d", table="t")
        except (KeyError, IndexError, ValueError) as err:
            raise PydanticCustomError("topic_template", "topic template {t!r} is invalid: {e}",
                                      {"t": value, "e": str(err)}) from None
        return value


class JoinConfig(_Model):
    """One reference of a flattened table: its `column` points at `key` of `table`."""

    column: str = Field(min_length=1, description="Column of the flattened table, such as "
                        "`userid`.")
    table: TableName = Field(description="The referenced table, such as `shop.user`.")
    key: str = Field(min_length=1, description="The referenced table's column it points at "
                     "(its primary key).")
    as_: str | None = Field(None, alias="as", description="Name of the embedded row in the "
                            "images (default: the referenced table's name).")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FlattenConfig(_TransformModel):
    """``flatten``: each change of `table` comes out with the rows its `joins` point at
    embedded, as those rows were at that change's binlog position. The referenced tables'
    state is kept by the pipeline (from the snapshot and the stream, in the sink's
    checkpoint folder), never read back from the source, so no later change leaks in."""

    type: Literal["flatten"] = Field("flatten", exclude=True, repr=False,
                                     description="Set from the key.")
    table: TableName = Field(description="The table whose changes are flattened.")
    joins: list[JoinConfig] = Field(min_length=1, description="Its references.")
    reemit: bool = Field(False, description="When a referenced row changes, also emit an "
                         "update of every row of `table` that points at it (flattened with "
                         "the new values).")
    keep_referenced: bool = Field(True, description="Pass the referenced tables' own events "
                                  "on (false: drop them after using them).")


_TransformUnion = Union[MaskConfig, HashConfig, TruncateConfig, DropColumnsConfig, RenameConfig,
                        FilterConfig, RouteConfig, AddFieldConfig, PythonConfig, OutboxConfig,
                        FlattenConfig]

TRANSFORM_TYPES: dict[str, type[_Model]] = {
    cls.model_fields["type"].default: cls for cls in get_args(_TransformUnion)
}


_unwrap = one_key_unwrapper(TRANSFORM_TYPES, "transform",
                            "- mask: {columns: [shop.user.email]}")


AnyTransformConfig = Annotated[_TransformUnion, Discriminator("type"), BeforeValidator(_unwrap)]


# --- dead letters ------------------------------------------------------------------


class DeadLetterKafkaConfig(_Model):
    """A Kafka topic for dead letters (JSON: the event, the error, where it happened)."""

    bootstrap_servers: str = Field(min_length=1, description="Kafka brokers, host:port,...")
    topic: str = Field(min_length=1, description="The topic, such as `shop-cdc.dead-letters`.")
    producer_config: dict[str, SparkConfValue] = Field(default_factory=dict,
                                                       description="librdkafka settings.")
    producer_config_env: dict[str, EnvVarName] = Field(
        default_factory=dict, description="librdkafka settings read from environment "
        "variables (secrets), setting to variable name.")

    _secrets: dict[str, Secret] = PrivateAttr(default_factory=dict)

    @field_validator("producer_config_env")
    @classmethod
    def _env_vars_set(cls, names: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        return check_env_names(names, info)

    @model_validator(mode="after")
    def _read(self, info: ValidationInfo) -> Self:
        self._secrets = secrets_from_env(self.producer_config_env, info)
        return self

    def producer(self) -> dict[str, str]:
        out = {**self.producer_config, "bootstrap.servers": self.bootstrap_servers}
        out.update({k: s.reveal() for k, s in self._secrets.items()})
        return out


class DeadLetterConfig(_Model):
    """Where events go that a transform with `on_error: dead_letter` could not process: a
    Parquet folder (one file per micro-batch and task, replaced when a batch is replayed)
    or a Kafka topic (at least once). Each record holds the event as it entered the failing
    transform, the transform, the error, its traceback, pipeline, sink and batch id."""

    path: StoragePath | None = Field(None, description="Parquet folder (local or a shared "
                                     "mount every executor sees).")
    kafka: DeadLetterKafkaConfig | None = Field(None, description="Or a Kafka topic.")

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.path is None) == (self.kafka is None):
            raise PydanticCustomError("dead_letter_target", "give path or kafka, exactly one")
        return self


def uses_dead_letters(transforms: list) -> bool:
    return any(getattr(t, "on_error", "fail") == "dead_letter" for t in transforms)

