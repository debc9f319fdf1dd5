"""Network enforcement shared by backends: the egress filtering proxy (:mod:`.proxy`) that a
per-trial gateway runs. The policy values live in :mod:`cairn.netpolicy`."""
