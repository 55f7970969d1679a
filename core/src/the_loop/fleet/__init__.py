"""A fleet of machines on NATS JetStream (issue 22, being built): one gateway runs every ingress and the router, and
workers run the sessions, each work item owned by exactly one worker through a lease.

Built so far, each usable alone and tested against a real ``nats-server``:

- :mod:`.connection` — one NATS connection for synchronous code: nats-py's asyncio client on a loop thread of its own;
- :mod:`.leases` — ownership of a work item: a key-value lease, created only when absent, renewed by its holder,
  expiring after ``leaseSeconds`` unless renewed, and carrying an *epoch* (the revision it was created at) that every
  command names as its fencing token: a holder that lost its lease (partitioned, then back) cannot renew it, so it
  acts on nothing it lost;
- :mod:`.stream` — the durable event stream: what an ingress accepted, stored (and deduplicated by the provider's
  key) before the provider hears back, one subject per work item so its events keep their order;
- :mod:`.commands` — what the gateway asks of an item's owner: one subject and one durable consumer per item, so
  an owner's unsettled commands go to the next owner in order; the owner acts only with a renewed lease, and a
  fleet-wide ledger of delivered keys keeps any event from being pasted twice;
- :mod:`.workers` — which workers are alive (a heartbeat each, expiring with the lease time) and where new work goes
  (the most free capacity, or the worker a start comment names).

Nothing here is imported unless a fleet is configured: the single machine stays the embedded default.
"""
