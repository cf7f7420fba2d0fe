"""Pure functions from measured records to figures: latency (``latency``), statistics helpers
(``stats``) and, in their own modules, bandwidth utilization and energy. No I/O here."""
