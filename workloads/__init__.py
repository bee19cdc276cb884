"""Seeded data generators and change simulators for the demo, the tests and the benchmarks."""
