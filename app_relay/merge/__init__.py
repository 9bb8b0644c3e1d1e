"""Merge a reviewed head from the run page (docs/design.md section 12).

``gate.py`` is the gate, pure over what GitHub answered; ``reading.py`` makes one full
pass of the reads it needs, uncached, within a deadline. The writes (the merge, the
enqueue) are the gateway's (``github/merging.py``), made with the person's own token.
"""
