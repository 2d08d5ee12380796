"""`python -m symphony` runs the same command as `symphony`."""

from symphony.cli import main

raise SystemExit(main())
