"""The local development stack: the Tansu broker (start, stop, topics), and `faults`, the
fault-injection scenarios on real processes that tests and benchmarks share."""

from pi_jobs.local.stack import broker_status, ensure_topics, start_broker, stop_broker

__all__ = ["broker_status", "ensure_topics", "start_broker", "stop_broker"]
