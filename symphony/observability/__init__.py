"""What operators see: logs, the runtime snapshot and the surfaces built on it."""
