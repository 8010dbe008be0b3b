"""Prints a loopback port free now whose cluster bus port (port + 10000,
below 65536) is free too: what a Redis Cluster node needs. Used by
tests/cluster/redis-cluster.sh and loadtest/redis-mode-bench.sh."""
import socket

while True:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    if port + 10000 < 65536:
        bus = socket.socket()
        try:
            bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            s.close()
            continue
        bus.close()
        s.close()
        print(port)
        break
    s.close()
