"""The mutating admission webhook that holds gang pods behind a scheduling gate."""
