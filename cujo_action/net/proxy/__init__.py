"""The logging proxy: its process, mitmproxy addon, request spool, sink and log lines."""
