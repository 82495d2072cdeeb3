//! `Problem -> Plan`: which activations to recompute, from numbers only.
