"""The volunteer's side (``vkblas distributed join``): outbound HTTP only (httpx), so it works behind NAT.

* :mod:`.errors`: the exceptions, all in one tree. :mod:`.transport`: byte counting and a simulated uplink.
* :mod:`.client`: the protocol's calls with retries, backoff and resumable, verified downloads.
* :mod:`.cache`: model and data shards by content hash. :mod:`.compute`: one unit on the device.
* :mod:`.join`: the loop (lease, download, compute, upload, heartbeat; Ctrl-C; progress bar).
"""
