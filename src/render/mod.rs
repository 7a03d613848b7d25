//! Pure rendering: the objects a Site should have, as functions of the Site and the platform
//! configuration (no I/O, no clock, no randomness). Built so far: the route pieces and the
//! retained-volume decisions.

pub mod route;
pub mod volume;
