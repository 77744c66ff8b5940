"""iodl: a storage I/O workload generator that replays deep-learning data access."""

__version__ = "0.1.0"
