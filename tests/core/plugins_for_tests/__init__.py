"""Plugin modules for core's tests, registered in spawned processes through ``THE_LOOP_EXTRA_PLUGINS`` (with
``tests/core`` on ``PYTHONPATH``), so a real daemon gets a fake ingress without installing anything."""
