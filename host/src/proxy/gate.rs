//! The proxy's decisions over the ledger: the front-end-neutral model-call
//! gate ([`crate::gate::model_gate`]), which the Python package uses too.

pub use crate::gate::model_gate::*;
