"""Read a repository's GitHub Actions workflows, pure: parse them, and find their hazards.

Below ``prepare/`` (does a base workflow already run the head with secrets?) and
``checks/`` (what a pull request changes in CI), which both read them.
"""
