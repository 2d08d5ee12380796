"""Ready workflows, one folder per tracker. Installed as the `symphony_examples` package so that
`symphony init` can copy them; nothing here is imported as code."""
