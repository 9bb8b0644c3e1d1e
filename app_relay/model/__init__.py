"""The model: the Anthropic port, the review tools, the diff review."""
