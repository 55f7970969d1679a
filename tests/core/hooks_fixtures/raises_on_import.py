"""E17: a hook file that must never be executed by `the-loop hooks` (it leaves a mark when it is)."""

import os
from pathlib import Path

Path(os.environ.get("HOOK_IMPORTED_MARK", os.devnull)).write_text("imported\n")
raise RuntimeError("this hook file is broken on purpose")
