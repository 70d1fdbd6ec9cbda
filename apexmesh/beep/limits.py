"""Named limits of the BEEP core, each with the reason for its value.

Exceeding any of them gives the peer the RFC's answer and a clean close (or a negative
reply, where the RFC allows one), never a crash, a hang or an unbounded buffer.
"""

from __future__ import annotations

from typing import Final

#: RFC 3081 section 3.1.1: "the initial window size for that channel is 4096 octets".
DEFAULT_WINDOW_OCTETS: Final = 4096

#: Largest receive window a session advertises on request (RFC 3081 section 3.1.3 lets a
#: peer enlarge it with SEQ). 1 MiB keeps a single channel from monopolising memory while
#: letting bulk transfers run at loopback speed.
MAX_WINDOW_OCTETS: Final = 1 << 20

#: Largest frame payload this peer sends. RFC 3081 section 3.1.4 recommends frames no
#: larger than two thirds of the TCP MSS for fairness; on loopback and in data centres
#: a larger frame costs less per octet, and interleaving still happens per frame.
MAX_SEND_FRAME_OCTETS: Final = 16 * 1024

#: Longest frame header line, CRLF included: "ANS" and six ten-digit numbers separated by
#: single spaces is 3 + 6 * 11 + 2 = 71 octets. Anything longer is garbage.
MAX_HEADER_OCTETS: Final = 72

#: Largest reassembled message accepted by default. APEX data above this size belongs in
#: a side channel; RFC 3340 leaves the bound to the relay's administrative policy.
MAX_MESSAGE_OCTETS: Final = 4 * 1024 * 1024

#: Largest channel-zero message (greeting, start, close). RFC 3080 section 2.3.1.2
#: bounds each piggybacked initialization message to 4K octets; 64 KiB allows a start
#: offering several profiles with their initialization messages and a large greeting.
MAX_MANAGEMENT_MESSAGE_OCTETS: Final = 64 * 1024

#: Channels open at once per session. RFC 3080 section 2.3: "A BEEP peer should support
#: at least 257 concurrent channels"; 1024 gives headroom without letting one peer
#: allocate unbounded per-channel state.
MAX_CHANNELS: Final = 1024

#: MSG messages received on one channel and not yet replied to. Windows bound the octets
#: in flight but not the number of tiny messages queued for a slow application.
MAX_OUTSTANDING_MSGS: Final = 1024

#: Seconds without any received octet after which a session is released (the adapter
#: passes the clock in). Five minutes matches common proxy and load-balancer idle limits.
DEFAULT_IDLE_SECONDS: Final = 300.0

#: Seconds a session waits for the peer's "ok" to its own release before it simply
#: terminates the connection.
CLOSE_GRACE_SECONDS: Final = 10.0

#: RFC 3080 section 2.2.1: channel, msgno, size and ansno are 0..2147483647.
MAX_NUMBER: Final = 2147483647

#: RFC 3080 section 2.2.1.2: sequence numbers are modulo 2**32.
SEQNO_MODULUS: Final = 1 << 32
