"""The APEX relay (RFC 3340): BEEP edge and mesh listeners, data relaying, attachments."""
