"""apex-mesh: APEX (RFC 3340-3343) messaging with publish-subscribe, over BEEP (RFC 3080/3081)."""

__version__ = "0.1.0"
