"""the-loop-shell: the example harness adapter from docs/plugins/writing-a-harness-adapter.md."""
