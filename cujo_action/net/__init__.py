"""The network a sandbox phase sees: its namespace, the logging proxy and resolver, egress."""
