//! Wiring: configuration → store → state → listener.
// SKELETON: filled in by the HTTP work.
