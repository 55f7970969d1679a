"""``the-loop sessions …``: start, steer, list, attach and register work items' sessions."""
