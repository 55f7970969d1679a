"""the-loop-slack: Slack as the conversation channel of the-loop's work items."""
