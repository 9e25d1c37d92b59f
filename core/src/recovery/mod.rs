//! Fault recovery logic that switches run on their own, without the
//! controller: seed 002's dynamic local rerouting ([`dlr`]) and a functional
//! (untimed) model of a fabric running it ([`walk`]), and seed 000's dynamic
//! FT²EI control-packet protocol ([`ft2ei_dyn`]); the tests and the
//! offline analyses use so that the verified logic is the deployed logic
//! (digest §9).

pub mod dlr;
pub mod ft2ei_dyn;
pub mod walk;
