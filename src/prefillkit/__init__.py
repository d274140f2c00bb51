"""prefillkit: cache-aware prefill admission scheduler and trace-replay simulator."""

__version__ = "0.2.0"
