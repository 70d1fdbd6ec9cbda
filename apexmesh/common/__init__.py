"""Building blocks shared by every layer, cores included: no I/O, no clock, no globals."""
