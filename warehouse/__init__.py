"""deltasieve's warehouse side, on Spark, in rooms by idea (each package's docstring says what it holds).

pipeline/   one sync as ordered steps, per site, with its options, metrics and agent client
strategies/ the ways to find a site's delta, one module or package each, registered by name
deltas/     the exact delta of a site and of a view over several sites
multisets/  views over tables without a key
sample/     a view's random sample
planning/   cost model, group selection and the statistics summaries
store/      versions, layers, formats and sinks on disk
viewdef/    view definitions: binding, keys, decomposition into site queries
and at the bottom, shared by all: columns.py, errors.py, faults.py, null_keys.py, spark.py; and
defaults.py, spark_master.py, options.py: what the service's settings read, loading no engine.
"""
