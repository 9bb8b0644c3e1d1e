"""The logging resolver: DNS wire format, DoH, the asker, reassembly of query streams."""
