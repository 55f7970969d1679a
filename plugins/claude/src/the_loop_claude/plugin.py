"""Hook implementations of the Claude Code harness plugin.

The adapter itself (argv for a fresh and a resumed conversation, pre-spawn preparation) is registered through
``loop_register_harnesses`` once it exists; until then the plugin is installed and listed, providing nothing.
"""

from __future__ import annotations
