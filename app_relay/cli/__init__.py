"""The ``cujo`` command: local review, board, doctor, and the relay's processes."""
