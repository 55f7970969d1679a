"""the-loop's web control plane: an authenticated HTTP API under ``/api/v1/``, a dashboard and a browser terminal."""
