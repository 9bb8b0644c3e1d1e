"""The answers the proxy gives in place of real hosts: GitHub's API, a web server, the CA."""
