"""The `farm` command line: thin typer commands over the `db` and `farm` libraries."""
