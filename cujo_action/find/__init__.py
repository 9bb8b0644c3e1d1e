"""Recognise a decoy in bytes: the decoders, opacity, the decoy formats and the matcher."""
