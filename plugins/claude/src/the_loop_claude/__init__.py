"""the-loop-claude: the Claude Code harness adapter for the-loop."""
