"""The Spark snapshot job of apex-mesh (issue #21, docs/snapshot.md): ``python -m
spark.snapshot`` exports the pubsub event log to files, folds it into the catalogue of
topics and subscriptions, writes a versioned Parquet snapshot and a compact one in Redis,
and trims the log that snapshot covers."""
