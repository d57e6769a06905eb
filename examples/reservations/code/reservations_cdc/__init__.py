"""The example's own logic: a transform, helpers and an audit plugin."""
