"""Helpers that only the test suite uses (tests/unit, tests/integration, the conftest files).

The truth oracle and the legacy databases of the sync tests, the `source` fixture's
engines, the fault proxy, the service the fault-injecting modules share, TLS
certificates, the row-encoding vectors, request payloads for the security tests. What
the demo or the benchmarks need too lives in workloads/ (this package may import it;
workloads/ never imports from here). Fixtures themselves are in tests/conftest.py.
"""
