"""Core's own hook implementations, registered before any installed plugin."""
