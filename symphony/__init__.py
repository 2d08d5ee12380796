"""Symphony: run coding agents on tracker tickets, each in its own workspace."""
