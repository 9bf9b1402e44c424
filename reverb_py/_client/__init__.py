"""The client process's side of the protocol: channel settings, sampling, insert streams."""
