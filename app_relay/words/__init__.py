"""Everything the relay writes for people: reviews, summaries, holds, inert quoting."""
