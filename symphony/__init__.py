"""Symphony: run coding agents on tracker tickets, each in its own workspace."""

__version__ = "0.1.0"
"""The package's version, the one place it is written (pyproject.toml reads it from here), so
that saying it never reads the installed package's metadata files. The package is installed as
`symphony-daemon` (`symphony` on PyPI is another project's); the import package and the
command are `symphony`."""

from symphony.base.dataclass_code import install as _install_dataclass_code  # noqa: E402

_install_dataclass_code()
