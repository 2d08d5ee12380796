"""`python -m symphony` runs the same command as `symphony`."""

from symphony.cli.main import main

raise SystemExit(main())
