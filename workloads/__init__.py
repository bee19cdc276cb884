"""What the demo and the benchmarks run, and the tests as well.

Seeded data generators and change simulators (generators, students), the agent and
service as real processes (harness), the two-host link (netns), a throwaway PostgreSQL
server (postgres), the TCP relay under the benchmark's byte counter (relay) and a
headless Chromium for the dashboard's test and screenshot (browser).

The rule: a helper that scripts/demo.py or tests/benchmarks/ imports lives here; one
that only the test suite uses lives in tests/support/. Nothing here imports from tests/.
"""
