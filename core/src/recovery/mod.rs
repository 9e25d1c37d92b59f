//! Fault recovery logic that switches run on their own, without the
//! controller: seed 002's dynamic local rerouting ([`dlr`]) and a functional
//! (untimed) model of a fabric running it ([`walk`]), which the tests and the
//! offline analyses use so that the verified logic is the deployed logic
//! (digest §9).

pub mod dlr;
pub mod walk;
