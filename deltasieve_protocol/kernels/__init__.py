"""The numba source of the compiled kernels: row encoding, XXH3-64, IBLT fold, MySQL result rows.

Every module here imports numba and is compiled, never imported by the code that runs a sync:
that code calls the kernels through `deltasieve_protocol.compiled`, which loads them from the
extension module built from these files at install (`compiled.build`), or, when that is
missing or was built from other files, compiles these same files just in time. The files of
this package are the one definition of the kernels' bits on both sides; the build stores
their digest in the extension, and an extension whose digest differs is not used. The MySQL
reader's loops (`mysql_rows.py`) are the agent's alone: they are here so that one build, and
one digest, cover every loop a process would otherwise load numba for.
"""
