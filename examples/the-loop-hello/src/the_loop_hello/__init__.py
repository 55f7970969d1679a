"""the-loop-hello: the example plugin from docs/plugins/writing-a-plugin.md."""
