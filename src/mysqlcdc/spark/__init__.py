"""The Spark adapter: the only package that imports pyspark.

``build_session`` and ``register`` are imported on first use, so that a Python worker
process importing one module of the package (the worker daemon, a read task's) does not
pay for the session's imports."""

__all__ = ["build_session", "register"]


def __getattr__(name: str):
    if name in __all__:
        from mysqlcdc.spark import session

        return getattr(session, name)
    raise AttributeError(f"module 'mysqlcdc.spark' has no attribute {name!r}")
