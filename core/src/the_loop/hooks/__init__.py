"""Lifecycle points and their contexts, declared hooks and their executors, the remote-hook SDK."""
