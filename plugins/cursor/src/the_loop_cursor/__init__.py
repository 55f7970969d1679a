"""the-loop-cursor: the cursor-agent harness adapter for the-loop."""
