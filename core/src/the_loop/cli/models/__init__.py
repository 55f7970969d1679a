"""``the-loop models list|check``: which declared models and effort levels this machine's harnesses accept."""
