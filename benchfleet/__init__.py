"""benchfleet's user side: the Python client, the CLI and the embedded demo."""
