"""the-loop-github: GitHub ingress (webhook, poll) and ticketing for the-loop."""
