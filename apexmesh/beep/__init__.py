"""Sans-I/O BEEP core (RFC 3080) with the TCP mapping's flow control (RFC 3081).

Bytes and events in, bytes and events out; time is passed in as an argument. Nothing in
this package touches a socket, an event loop or a clock.
"""
