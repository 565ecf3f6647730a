"""The runtime's network: authenticated sessions between party processes (certificates and keys, the wire's typed
frames, liveness and heartbeats, the abort framing), the launcher of real party processes and the party process
itself, and the in-process simulation of the same programs."""
