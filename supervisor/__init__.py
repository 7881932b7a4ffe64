"""The `reame` command: start, supervise and inspect reame's processes."""
