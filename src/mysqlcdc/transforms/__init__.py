"""Transforms: what happens to each change between the source and a sink.

Built-ins (``mask``, ``hash``, ``truncate``, ``drop_columns``, ``rename``, ``filter``,
``route``, ``add_field``) work on whole Arrow batches; ``python`` runs the user's own
function per event or per batch; ``outbox`` routes a transactional outbox table;
``flatten`` embeds referenced rows as they were at each change's position. A pipeline's
``transforms:`` list runs before every sink and a sink's own list after it
(:mod:`mysqlcdc.pipeline.transforms` builds them from the config, and
:mod:`mysqlcdc.spark.transforms` runs them in Spark). README "Your own logic" shows
them in use; this package never imports pyspark or a sink.
"""

from mysqlcdc.transforms.api import DeadLetter, TaskPlace, Transform, TransformContext
from mysqlcdc.transforms.batch import EventBatch
from mysqlcdc.transforms.builtins import (AddField, DropColumns, Filter, Hash, Mask, Rename,
                                          Route, Truncate)
from mysqlcdc.transforms.chain import Chain
from mysqlcdc.transforms.expressions import ExpressionError, parse
from mysqlcdc.transforms.flatten import Flatten, Join
from mysqlcdc.transforms.helpers import Helpers
from mysqlcdc.transforms.outbox import Outbox
from mysqlcdc.transforms.python import PythonTransform

__all__ = ["Transform", "TransformContext", "TaskPlace", "DeadLetter", "EventBatch", "Chain",
           "Mask", "Hash", "Truncate", "DropColumns", "Rename", "Filter", "Route", "AddField",
           "PythonTransform", "Outbox", "Flatten", "Join", "Helpers", "parse", "ExpressionError"]
