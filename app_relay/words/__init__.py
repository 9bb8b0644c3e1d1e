"""Everything the relay writes for people: review bodies, summaries, inert quoting."""
