"""Where events come in: the HTTP server and its signing, the durable inbox and its worker, the poll loop."""
