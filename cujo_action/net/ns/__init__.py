"""A phase's network namespace: its layout, nftables guards, rootless forwarding."""
