"""the-loop-jira: Jira ticketing and ingress (poll, webhook) for the-loop."""
