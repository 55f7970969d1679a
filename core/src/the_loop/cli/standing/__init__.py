"""``the-loop standing …``: list, start, stop, talk to and attach to standing sessions (issue-277)."""
