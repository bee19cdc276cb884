"""The store: a view's versions on disk (versions.py), fragments kept as base and overlay
(layers.py), the format numbers of stored state (formats.py), Parquet sinks (sinks.py),
small Parquet files read whole (parquet_files.py).
"""
